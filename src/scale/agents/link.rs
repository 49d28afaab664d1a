//! Following one push member's agent (`stream KUBE_PULSE_AGENTS ──[link]──▶
//! Observation::Pushed ──▶ engine`), on the replica that owns the member:
//! its latest report of every subject first, then each new one, in order;
//! each believed only with its agent's signature, on its own subject, and
//! newer than the last one applied there. When no heartbeat has reached
//! the stream for the grace period, the member is `Unknown (AgentLost)`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::wire::{self, Body};
use crate::engine::{Observation, PushedInput};
use crate::metrics::Metrics;

/// The first wait before the consumer is made again after a failure.
const RETRY: Duration = Duration::from_millis(250);
/// Topics one push member may have on this hub: reports on further
/// subjects are refused (`too-many-topics`), so that an agent's key cannot
/// grow every replica's memory without bound.
pub(super) const MAX_TOPICS: usize = 100_000;
/// Refusals are logged at most once per this period per member.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// What a link needs to follow one agent.
pub(super) struct Follow {
    pub(super) js: jetstream::Context,
    /// The agents' stream: made again when it is missing (deleted).
    pub(super) stream: jetstream::stream::Config,
    pub(super) member: String,
    pub(super) agent: nkeys::KeyPair,
    pub(super) grace: Duration,
    pub(super) engine: mpsc::Sender<Observation>,
    pub(super) metrics: Arc<Metrics>,
}

/// The last (session, seq) applied per subject, and the heartbeats' clock.
#[derive(Debug)]
struct Seen {
    applied: HashMap<String, (u64, u64)>,
    /// When the last heartbeat reached the stream, in this process's clock.
    heard_at: Instant,
    last_heartbeat: Option<DateTime<Utc>>,
    lost: bool,
    /// The link has read what the stream held when it started: later
    /// heartbeats are judged by their arrival, and their `synced` counts.
    caught_up: bool,
    refused_log: Option<Instant>,
    refused_since_log: u64,
}

impl Seen {
    /// Nothing seen yet: the grace counts from now.
    fn new() -> Self {
        Self {
            applied: HashMap::new(),
            heard_at: Instant::now(),
            last_heartbeat: None,
            lost: false,
            caught_up: false,
            refused_log: None,
            refused_since_log: 0,
        }
    }

    /// When the agent counts as lost unless heard from again.
    fn deadline(&self, grace: Duration) -> Instant {
        self.heard_at + grace
    }

    /// Whether a report (session, seq) on `subject` is newer than the last
    /// applied there (then remembered as applied).
    fn newer(&mut self, subject: &str, at: (u64, u64)) -> bool {
        match self.applied.get(subject) {
            Some(held) if *held >= at => false,
            _ => {
                self.applied.insert(subject.to_string(), at);
                true
            }
        }
    }
}

/// The broker's time of a message, as a UTC time.
fn published(message: &jetstream::Message) -> Option<DateTime<Utc>> {
    crate::scale::broker_time(&message.info().ok()?)
}

impl Follow {
    /// Runs until `stop`: tells the engine the member is pushed, then what
    /// its agent reports, and when it goes silent.
    pub(super) async fn run(self, stop: CancellationToken) {
        let member = self.member.clone();
        let attached = Observation::Pushed {
            cluster: member.clone(),
            input: PushedInput::Attached,
        };
        if self.engine.send(attached).await.is_err() {
            return;
        }
        let mut seen = Seen::new();
        self.metrics.agents.follow(&member);
        // Where to read on from: the stream (its creation time) and the
        // next sequence; None: the latest report of every subject.
        let mut next: Option<(i128, u64)> = None;
        let mut backoff = RETRY;
        'consumer: loop {
            let opened = tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep_until(seen.deadline(self.grace)), if !seen.lost => {
                    if !self.lose(&mut seen, &stop).await {
                        break;
                    }
                    continue;
                }
                opened = self.open(&mut next) => opened,
            };
            let (mut messages, created) = match opened {
                Ok(opened) => opened,
                Err(e) => {
                    tracing::warn!(cluster = %member, cause = %e, retry_in = ?backoff, "the agents' stream cannot be read yet");
                    self.pause(&mut backoff, &stop).await;
                    continue;
                }
            };
            let mut delivered = 0u64;
            loop {
                let message = tokio::select! {
                    () = stop.cancelled() => break 'consumer,
                    () = tokio::time::sleep_until(seen.deadline(self.grace)), if !seen.lost => {
                        // In the arm's body: a send here is never dropped half-way.
                        if !self.lose(&mut seen, &stop).await {
                            break 'consumer;
                        }
                        continue;
                    }
                    message = messages.next() => message,
                };
                let message = match message {
                    Some(Ok(message)) => message,
                    Some(Err(e)) => {
                        tracing::debug!(cluster = %member, cause = %e, "the agents' stream failed; reading it again");
                        self.pause(&mut backoff, &stop).await;
                        continue 'consumer;
                    }
                    None => {
                        self.pause(&mut backoff, &stop).await;
                        continue 'consumer;
                    }
                };
                let last_held = match message.info() {
                    Ok(info) if info.consumer_sequence != delivered + 1 => continue 'consumer,
                    Ok(info) => {
                        delivered = info.consumer_sequence;
                        next = Some((created, info.stream_sequence + 1));
                        info.pending == 0
                    }
                    Err(_) => continue,
                };
                backoff = RETRY;
                let applied = tokio::select! {
                    () = stop.cancelled() => break 'consumer,
                    applied = self.apply(&message, &mut seen) => applied,
                };
                if !applied {
                    break 'consumer;
                }
                // Read to what the stream held when this consumer started:
                // from the next message on, what arrives is live.
                seen.caught_up |= last_held;
            }
        }
        self.metrics.agents.forget(&member);
    }

    /// Waits before reading the stream again (longer each time, until a
    /// message arrives), unless stopped.
    async fn pause(&self, backoff: &mut Duration, stop: &CancellationToken) {
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep(*backoff) => {}
        }
        *backoff = (*backoff * 2).min(Duration::from_secs(5));
    }

    /// The agent has been silent for the grace period: tells the engine
    /// (once); false when the engine is gone or the link stops.
    async fn lose(&self, seen: &mut Seen, stop: &CancellationToken) -> bool {
        self.metrics.agents.connected(&self.member, false);
        let lost = Observation::Pushed {
            cluster: self.member.clone(),
            input: PushedInput::Lost {
                silent_for: seen.heard_at.elapsed(),
                grace: self.grace,
                last_heartbeat_at: seen.last_heartbeat,
            },
        };
        let sent = tokio::select! {
            () = stop.cancelled() => return false,
            sent = self.engine.send(lost) => sent.is_ok(),
        };
        seen.lost = true;
        sent
    }

    /// A consumer of the member's subjects: on from `next` when it is of
    /// this stream, else (none yet, or the stream was made again since)
    /// from the latest message of each subject. With the stream's creation
    /// time.
    async fn open(
        &self,
        next: &mut Option<(i128, u64)>,
    ) -> Result<(consumer::pull::Stream, i128), String> {
        let name = &self.stream.name;
        let stream = match self.js.get_stream(name).await {
            Ok(stream) => stream,
            Err(e) if crate::scale::relay::stream_missing(&e) => {
                tracing::warn!(stream = %name, "the agents' stream was missing (deleted?): made again");
                self.js
                    .create_or_update_stream(self.stream.clone())
                    .await
                    .map_err(|e| format!("stream {name}: cannot make it again: {e}"))?;
                self.js
                    .get_stream(name)
                    .await
                    .map_err(|e| format!("stream {name}: {e}"))?
            }
            Err(e) => return Err(format!("stream {name}: {e}")),
        };
        let created = stream.cached_info().created.unix_timestamp_nanos();
        let deliver_policy = match *next {
            Some((of, start_sequence)) if of == created => {
                consumer::DeliverPolicy::ByStartSequence { start_sequence }
            }
            _ => {
                *next = None;
                consumer::DeliverPolicy::LastPerSubject
            }
        };
        let messages =
            crate::scale::relay::pull(&stream, wire::member_subjects(&self.member), deliver_policy)
                .await?;
        Ok((messages, created))
    }

    /// Checks one message and tells the engine what it says; false once
    /// the engine is gone.
    async fn apply(&self, message: &jetstream::Message, seen: &mut Seen) -> bool {
        let signature = wire::signature_of(message);
        let report = match wire::admit_report(
            &self.agent,
            &self.member,
            message.subject.as_str(),
            &message.payload,
            signature,
        ) {
            Ok(report) => report,
            Err(refusal) => {
                self.refused(seen, message.subject.as_str(), refusal.label());
                return true;
            }
        };
        let subject = message.subject.as_str();
        if let Some(refusal) = implausible(&report, Utc::now()) {
            self.refused(seen, subject, refusal);
            return true;
        }
        if seen.applied.len() >= MAX_TOPICS && !seen.applied.contains_key(subject) {
            self.refused(seen, subject, "too-many-topics");
            return true;
        }
        if !seen.newer(message.subject.as_str(), (report.session, report.seq)) {
            self.refused(seen, message.subject.as_str(), "stale");
            return true;
        }
        let input = match report.body {
            Body::Doc { topic, doc } => PushedInput::Document {
                topic,
                doc,
                session: report.session,
            },
            Body::Heartbeat {
                version, synced, ..
            } => {
                // Read from what the stream held at the start: as old as the
                // broker's time says. Live: it just arrived (the broker's and
                // this host's clocks need not agree).
                let at = match seen.caught_up {
                    true => Utc::now(),
                    false => published(message).unwrap_or_else(Utc::now),
                };
                let age = (Utc::now() - at).to_std().unwrap_or_default();
                seen.last_heartbeat = Some(at);
                if age >= self.grace {
                    // An old heartbeat (read from the stream when the link
                    // started): the agent is not known to run.
                    seen.heard_at = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
                    return true;
                }
                seen.heard_at = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
                seen.lost = false;
                self.metrics.agents.connected(&self.member, true);
                PushedInput::Heartbeat {
                    at,
                    version,
                    session: report.session,
                    // Before the link has read what the stream held, a
                    // document of the session may still be on its way.
                    synced: synced && seen.caught_up,
                }
            }
        };
        let observation = Observation::Pushed {
            cluster: self.member.clone(),
            input,
        };
        self.engine.send(observation).await.is_ok()
    }

    /// Counts a refused report and logs it, at most once per [`LOG_EVERY`].
    fn refused(&self, seen: &mut Seen, subject: &str, reason: &'static str) {
        self.metrics.agents.rejected(&self.member, reason);
        seen.refused_since_log += 1;
        let due = seen.refused_log.is_none_or(|at| at.elapsed() >= LOG_EVERY);
        if due {
            tracing::warn!(cluster = %self.member, %subject, reason, count = seen.refused_since_log, "a report on a push member's subjects was not believed");
            seen.refused_log = Some(Instant::now());
            seen.refused_since_log = 0;
        }
    }
}

/// How far ahead of this host's clock an agent's session (its start) may
/// be: a clock that is off, not a session that would outlive every later
/// one of the agent (a later session wins).
const MAX_SESSION_AHEAD_MS: u64 = 10 * 60 * 1000;

/// Why a signed report is still not believed, if it is not: a session
/// that starts in the future, or a document that is not a JSON object
/// (every document of a member is one).
fn implausible(report: &wire::Report, now: DateTime<Utc>) -> Option<&'static str> {
    let now_ms = u64::try_from(now.timestamp_millis()).unwrap_or(0);
    if report.session > now_ms.saturating_add(MAX_SESSION_AHEAD_MS) {
        return Some("future-session");
    }
    match &report.body {
        Body::Doc { doc: Some(doc), .. } if !doc.is_object() => Some("malformed"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_from_the_future_and_a_document_not_an_object_are_not_believed() {
        let now: DateTime<Utc> = "2026-12-07T10:00:00Z".parse().unwrap();
        let at = |minutes: i64| (now.timestamp_millis() + minutes * 60_000) as u64;
        let report = |session: u64, doc: Option<serde_json::Value>| wire::Report {
            member: "e".into(),
            session,
            seq: 1,
            body: Body::Doc {
                topic: "apps/e/shop/web".into(),
                doc,
            },
        };
        let object = Some(serde_json::json!({"phase": "Running"}));
        // (session, document, refusal)
        let cases = [
            (at(-60), object.clone(), None),
            (at(5), object.clone(), None),
            (at(11), object.clone(), Some("future-session")),
            (u64::MAX, object.clone(), Some("future-session")),
            (at(0), None, None),
            (at(0), Some(serde_json::json!([1, 2, 3])), Some("malformed")),
            (at(0), Some(serde_json::json!("text")), Some("malformed")),
        ];
        for (session, doc, want) in cases {
            assert_eq!(
                implausible(&report(session, doc.clone()), now),
                want,
                "{session} {doc:?}"
            );
        }
    }

    #[test]
    fn only_newer_reports_of_a_subject_are_applied() {
        let mut seen = Seen::new();
        assert!(seen.newer("s", (1, 5)));
        assert!(!seen.newer("s", (1, 5)), "the same again");
        assert!(!seen.newer("s", (1, 4)), "an older one of the session");
        assert!(seen.newer("s", (1, 6)));
        assert!(seen.newer("s", (2, 1)), "a later session");
        assert!(!seen.newer("s", (1, 99)), "an earlier session");
        assert!(seen.newer("t", (1, 1)), "another subject");
    }
}
