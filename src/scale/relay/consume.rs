//! The relay's consumer (`JetStream ──[consume]──▶ served hub, origin hub`):
//! reads every message the stream holds, then every new one, in order;
//! checks each one's MAC before anything else ([`admit`]), and applies the
//! changes of other replicas' members to both hubs. Messages of members
//! this replica does not know yet are parked, bounded in count and bytes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer;
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::publish::{Shared, cluster_of, member_patterns};
use super::stream::ensure_stream;
use super::{demand, freshness};
use crate::hub::Topic;
use crate::scale::signing::{self, Rejection, RejectionLog, SigningKey};
use crate::scale::subject::{self, Envelope};

/// How often the server says an idle pull of the consumer is alive; two
/// missed in a row (the consumer's server gone, say) and it is made again.
const HEARTBEAT: Duration = Duration::from_secs(3);
/// How long one pull request waits on the server (more than 2 × HEARTBEAT,
/// as the server requires).
const PULL_EXPIRES: Duration = Duration::from_secs(30);
/// A consumer no pull has reached for this long is deleted by the server
/// (one left behind when it was made again).
const INACTIVE: Duration = Duration::from_secs(30);
/// Topics kept for members this replica does not know yet (a Karpor member
/// before Karpor was read): the newest message per topic, at most this
/// many topics…
pub(super) const PARKED_TOPICS: usize = 10_000;
/// …and at most this many bytes of messages. Past either, messages are
/// dropped, and the stream is read again from its start once the member
/// set changes (the dropped ones are still there).
pub(super) const PARKED_BYTES: usize = 16 << 20;

/// What a replica does with a message of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// Its own (an echo), a topic of no member, or of a member it runs
    /// (its own engine is the owner; a late message of the previous owner).
    Skip,
    /// A member it does not know (yet): kept until it is one.
    Park,
    /// Into the hub, with the owner's revision.
    Apply,
}

/// What replica `me`, running the members `runs` says and knowing the
/// members `desired`, does with `envelope`. Pure.
fn decide(
    envelope: &Envelope,
    me: &str,
    runs: impl Fn(&str) -> bool,
    desired: &BTreeSet<String>,
) -> Decision {
    if envelope.replica == me {
        return Decision::Skip;
    }
    let topic = Topic::new(&envelope.topic);
    match cluster_of(&topic) {
        None => Decision::Skip,
        Some(cluster) if runs(cluster) => Decision::Skip,
        Some(cluster) if !desired.contains(cluster) => Decision::Park,
        Some(_) => Decision::Apply,
    }
}

/// The envelope of a message on `subject` with the MAC header `mac`, if a
/// replica holding `signing` published it (any message without a key), it
/// is an envelope, and its topic is the subject's. Pure.
fn admit(
    signing: Option<&SigningKey>,
    subject: &str,
    mac: Option<&[u8]>,
    payload: &[u8],
) -> Result<Envelope, Rejection> {
    if let Some(key) = signing {
        key.check_change(subject, payload, mac)?;
    }
    let envelope: Envelope = serde_json::from_slice(payload).map_err(|_| Rejection::Malformed)?;
    if subject::of_topic(&envelope.topic) != subject {
        return Err(Rejection::WrongSubject);
    }
    Ok(envelope)
}

/// What `/readyz/Nats` reads.
#[derive(Debug, Default)]
pub(super) struct ConsumerState {
    /// When the consumer last read a message (or started).
    pub(super) progress_at: Option<Instant>,
    /// Messages pending after the last one read.
    pub(super) pending: u64,
    /// The consumer's last error, cleared by the next message.
    pub(super) error: Option<String>,
}

/// Messages of members this replica does not know yet, bounded by
/// [`PARKED_TOPICS`] and [`PARKED_BYTES`].
#[derive(Debug, Default)]
struct Parked {
    /// By topic: the stream sequence, the envelope and its size.
    topics: HashMap<String, (u64, Envelope, usize)>,
    bytes: usize,
    /// A message was dropped for want of room since the stream was last
    /// read from its start.
    dropped: bool,
}

impl Parked {
    /// Keeps `envelope` (of `size` bytes) as its topic's newest, if there
    /// is room.
    fn park(&mut self, seq: u64, envelope: Envelope, size: usize) {
        let held = self.topics.get(&envelope.topic).map_or(0, |(_, _, s)| *s);
        let fits = (self.topics.len() < PARKED_TOPICS || held > 0)
            && self.bytes - held + size <= PARKED_BYTES;
        if !fits {
            self.dropped = true;
            return;
        }
        self.bytes = self.bytes - held + size;
        self.topics
            .insert(envelope.topic.clone(), (seq, envelope, size));
    }

    /// Takes out the topics of members of `desired`.
    fn take_members(&mut self, desired: &BTreeSet<String>) -> Vec<(u64, Envelope, usize)> {
        let ready: Vec<String> = self
            .topics
            .keys()
            .filter(|t| cluster_of(&Topic::new(t)).is_some_and(|c| desired.contains(c)))
            .cloned()
            .collect();
        let mut out = Vec::with_capacity(ready.len());
        for topic in ready {
            if let Some(entry) = self.topics.remove(&topic) {
                self.bytes -= entry.2;
                out.push(entry);
            }
        }
        out
    }
}

/// A message of the stream, as the consumer read it.
#[derive(Debug, Clone, Copy)]
struct Read {
    /// Its stream sequence.
    seq: u64,
    /// The consumer has read every message up to it: past its first pass
    /// over what the stream held when it was made.
    following: bool,
    /// The message's size in bytes.
    size: usize,
    /// The broker's time of the message, when it says.
    published: Option<chrono::DateTime<chrono::Utc>>,
}

impl Shared {
    /// Applies the stream's message `read` of another replica, unless this
    /// replica runs the member now (its own engine is the owner), or the
    /// member is not one of `desired` (parked until it is). Its own
    /// messages tell the hub where its changes are in the stream.
    fn apply(
        &self,
        read: Read,
        envelope: Envelope,
        desired: &BTreeSet<String>,
        parked: &mut Parked,
    ) {
        let runs = |cluster: &str| self.running.contains(cluster);
        // Another replica's report of what its clients look at.
        let demand = self.served.demand();
        let read_at = demand::ReadAt {
            following: read.following,
            published: read.published,
            wall: chrono::Utc::now(),
        };
        if demand::take(&envelope, &self.replica, read_at, demand, Instant::now()) {
            self.served.stream_read(read.seq, read.following);
            return;
        }
        // Another replica's report of how current its members are.
        let takes = |m: &str| desired.contains(m) && !runs(m);
        if freshness::take(&envelope, &self.replica, takes, self.served.freshness()) {
            self.served.stream_read(read.seq, read.following);
            return;
        }
        let decision = decide(&envelope, &self.replica, runs, desired);
        let member = cluster_of(&Topic::new(&envelope.topic)).is_some();
        if decision == Decision::Park || !member {
            self.served.stream_read(read.seq, read.following);
            if decision == Decision::Park {
                parked.park(read.seq, envelope, read.size);
            }
            return;
        }
        if decision == Decision::Apply {
            self.hub
                .apply_remote(&envelope.topic, envelope.rev, envelope.doc.clone());
        }
        self.served.apply_streamed(
            read.seq,
            read.following,
            &envelope.topic,
            envelope.rev,
            envelope.doc,
        );
    }

    /// The member set changed: members no longer there leave this hub
    /// (their topics from other replicas; the sources of one running here
    /// are stopped by the union), and parked topics of new ones are
    /// applied. True when parked messages were dropped since the stream was
    /// last read from its start: it is read again, to bring them.
    fn members_changed(&self, desired: &BTreeSet<String>, parked: &mut Parked) -> bool {
        // What other replicas said of members that are gone goes with them.
        self.served
            .freshness()
            .retain(|m| desired.contains(m) || self.running.contains(m));
        for hub in [&self.hub, &self.served] {
            for doc in hub.list(&member_patterns()) {
                let Some(cluster) = cluster_of(&doc.topic) else {
                    continue;
                };
                if !desired.contains(cluster) && !self.running.contains(cluster) {
                    hub.remove(doc.topic.as_str());
                }
            }
        }
        for (seq, envelope, size) in parked.take_members(desired) {
            // Read long ago: the hub's position is past it already.
            let read = Read {
                seq,
                following: false,
                size,
                published: None,
            };
            self.apply(read, envelope, desired, parked);
        }
        std::mem::take(&mut parked.dropped)
    }

    /// Counts and logs (at most once per [`signing::LOG_EVERY`], without
    /// the payload) a message that was not accepted.
    fn reject(&self, log: &mut RejectionLog, subject: &str, why: Rejection) {
        self.metrics.stream.rejected("stream", why.label());
        if let Some(more) = log.note(Instant::now().into_std()) {
            tracing::warn!(%subject, reason = why.label(), rejected_since_last_line = more, "a message on the stream of changes was rejected: not signed by a kube-pulse replica, or not a change; not served");
        }
    }
}

/// Where the consumer is: the stream it reads and the next sequence.
#[derive(Debug, Clone)]
struct Place {
    stream: String,
    next: u64,
}

/// Reads the stream from its first message on, applying the other
/// replicas' changes; a consumer made again after an error, a missed
/// heartbeat or a message skipped (from where it was, on the same stream).
/// A stream that is missing is made again; when the stream read is another
/// one than before, this replica publishes its current documents again.
pub(super) async fn consume(
    shared: Arc<Shared>,
    mut desired: watch::Receiver<BTreeSet<String>>,
    state: Arc<Mutex<ConsumerState>>,
    stop: CancellationToken,
) {
    let mut parked = Parked::default();
    let mut rejections = RejectionLog::default();
    // The member names, copied once per change of them (not per message).
    let mut names = desired.borrow_and_update().clone();
    let mut backoff = Duration::from_millis(250);
    let mut place: Option<Place> = None;
    'consumer: while !stop.is_cancelled() {
        let messages = match open_consumer(&shared, place.as_ref()).await {
            Ok((stream_id, messages)) => {
                let another = place.as_ref().is_some_and(|p| p.stream != stream_id);
                if another {
                    tracing::warn!(stream = %shared.settings.stream, "the stream of changes was made again; publishing this replica's documents again");
                    shared.republish.notify_one();
                }
                if place.as_ref().is_none_or(|p| p.stream != stream_id) {
                    place = Some(Place {
                        stream: stream_id.clone(),
                        next: 1,
                    });
                }
                shared.served.follow_stream(&stream_id);
                messages
            }
            Err(error) => {
                tracing::warn!(%error, "the stream of changes cannot be read; trying again");
                state.lock().error = Some(error);
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        let mut messages = std::pin::pin!(messages);
        // A new consumer first reads what the stream holds: the hub's
        // position moves only once it has read it all.
        let mut following = false;
        // The consumer's sequence of the last message: the next must follow.
        let mut delivered = 0;
        {
            let mut state = state.lock();
            state.error = None;
            state.progress_at = Some(Instant::now());
        }
        loop {
            let message = tokio::select! {
                _ = stop.cancelled() => break 'consumer,
                changed = desired.changed() => {
                    if changed.is_ok() {
                        names = desired.borrow_and_update().clone();
                        if shared.members_changed(&names, &mut parked) {
                            // From the start: brings what was not parked.
                            if let Some(place) = place.as_mut() {
                                place.next = 1;
                            }
                            continue 'consumer;
                        }
                    }
                    continue;
                }
                message = messages.next() => message,
            };
            let message = match message {
                Some(Ok(message)) => message,
                Some(Err(e)) => {
                    // Missed heartbeats too: its server went away, or its
                    // pull was lost with a connection (or the stream).
                    state.lock().error = Some(e.to_string());
                    tracing::warn!(cause = %e, "the stream of changes failed; reading it again");
                    continue 'consumer;
                }
                None => continue 'consumer,
            };
            backoff = Duration::from_millis(250);
            let (seq, pending, published) = match message.info() {
                Ok(info) if info.consumer_sequence != delivered + 1 => {
                    tracing::warn!(
                        after = delivered,
                        got = info.consumer_sequence,
                        "the stream of changes skipped a message; reading it again"
                    );
                    continue 'consumer;
                }
                Ok(info) => {
                    delivered = info.consumer_sequence;
                    let published = crate::scale::broker_time(&info);
                    (info.stream_sequence, info.pending, published)
                }
                Err(e) => {
                    tracing::warn!(subject = %message.subject, cause = %e, "a message of the stream of changes has no stream sequence; skipped");
                    continue;
                }
            };
            if let Some(place) = place.as_mut() {
                place.next = seq + 1;
            }
            following |= pending == 0;
            {
                let mut state = state.lock();
                state.pending = pending;
                state.progress_at = Some(Instant::now());
                state.error = None;
            }
            shared
                .metrics
                .stream
                .consumed(&shared.settings.stream, pending);
            let mac = message
                .headers
                .as_ref()
                .and_then(|h| h.get(signing::HEADER))
                .map(|v| v.as_str().as_bytes());
            let subject = message.subject.as_str();
            match admit(
                shared.settings.signing.as_ref(),
                subject,
                mac,
                &message.payload,
            ) {
                Ok(envelope) => {
                    let size = message.payload.len();
                    let read = Read {
                        seq,
                        following,
                        size,
                        published,
                    };
                    shared.apply(read, envelope, &names, &mut parked);
                }
                Err(why) => {
                    shared.served.stream_read(seq, following);
                    shared.reject(&mut rejections, subject, why);
                }
            }
        }
    }
}

/// A consumer of every topic's subject, from `place` on that stream (else
/// from the stream's first message: every change it holds, so that a
/// replica's log can replay them to a client resuming from another
/// replica's cursor), in order: ephemeral, one copy in memory, nothing to
/// acknowledge (as JetStream's ordered consumers); pulled with a heartbeat
/// of [`HEARTBEAT`], so that one lost with its server is noticed within
/// seconds. With the stream's name in cursors (hex of its creation time: a
/// stream made again gets another). A missing stream is made again.
async fn open_consumer(
    shared: &Shared,
    place: Option<&Place>,
) -> Result<(String, consumer::pull::Stream), String> {
    let stream = ensure_stream(&shared.js, &shared.settings).await?;
    let created = stream.cached_info().created.unix_timestamp_nanos() / 1000;
    let id = format!("{:x}", created.max(0));
    let deliver_policy = match place {
        Some(place) if place.stream == id && place.next > 1 => {
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: place.next,
            }
        }
        _ => consumer::DeliverPolicy::All,
    };
    let messages = pull(&stream, format!("{}.>", subject::PREFIX), deliver_policy).await?;
    Ok((id, messages))
}

/// An ephemeral consumer of `stream`'s `filter` from `deliver_policy` that
/// nothing acknowledges (as JetStream's ordered consumers), in memory,
/// deleted by the server once no pull reached it for [`INACTIVE`]; its
/// messages pulled with a heartbeat of [`HEARTBEAT`], so that one lost with
/// its server is noticed within seconds. The relay's consumer and the links
/// of push members' agents read this way.
pub(crate) async fn pull(
    stream: &async_nats::jetstream::stream::Stream,
    filter: String,
    deliver_policy: consumer::DeliverPolicy,
) -> Result<consumer::pull::Stream, String> {
    let consumer = stream
        .create_consumer(consumer::pull::Config {
            filter_subject: filter,
            deliver_policy,
            ack_policy: consumer::AckPolicy::None,
            max_deliver: 1,
            inactive_threshold: INACTIVE,
            num_replicas: 1,
            memory_storage: true,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("consumer: {e}"))?;
    consumer
        .stream()
        .heartbeat(HEARTBEAT)
        .expires(PULL_EXPIRES)
        .messages()
        .await
        .map_err(|e| format!("messages: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_replica_applies_what_others_publish_of_members_it_knows_and_does_not_run() {
        let desired: BTreeSet<String> = ["a", "b"].into_iter().map(String::from).collect();
        let runs = |cluster: &str| cluster == "a";
        let from = |replica: &str, topic: &str| Envelope {
            topic: topic.into(),
            rev: 1,
            replica: replica.into(),
            doc: None,
        };
        for (envelope, want) in [
            (from("me", "clusters/b"), Decision::Skip),
            (from("other", "clusters/a"), Decision::Skip),
            (from("other", "apps/a/ns/x"), Decision::Skip),
            (from("other", "tasks/1"), Decision::Skip),
            (from("other", "clusters/b"), Decision::Apply),
            (
                from("other", "clusters/b/sync/apps/v1/deployments"),
                Decision::Apply,
            ),
            (from("other", "apps/b/ns/x"), Decision::Apply),
            (from("other", "clusters/c"), Decision::Park),
            (from("me", "clusters/c"), Decision::Skip),
        ] {
            assert_eq!(
                decide(&envelope, "me", runs, &desired),
                want,
                "{envelope:?}"
            );
        }
    }

    #[test]
    fn only_member_topics_travel() {
        for (topic, cluster) in [
            ("clusters/a", Some("a")),
            ("clusters/a/sync/apps/v1/deployments", Some("a")),
            ("apps/a/shop/web", Some("a")),
            ("tasks/1", None),
            ("summary/clusters", None),
        ] {
            assert_eq!(cluster_of(&Topic::new(topic)), cluster, "{topic}");
        }
    }

    /// (key, subject, mac, payload, the revision admitted or why not)
    type Case<'a> = (
        Option<&'a SigningKey>,
        &'a str,
        Option<&'a str>,
        &'a [u8],
        Result<u64, Rejection>,
    );

    #[test]
    fn only_signed_envelopes_of_their_own_subject_are_admitted() {
        let key = SigningKey::from_bytes(&[7; 32]).unwrap();
        let other = SigningKey::from_bytes(&[8; 32]).unwrap();
        let payload = serde_json::to_vec(
            &json!({"topic": "clusters/a", "rev": 9, "replica": "r1", "doc": {"phase": "Healthy"}}),
        )
        .unwrap();
        let subject = "kube-pulse.topics.clusters.a";
        let mac = key.sign_change(subject, &payload);
        let theirs = other.sign_change(subject, &payload);
        let moved = "kube-pulse.topics.clusters.b";
        let moved_mac = key.sign_change(moved, &payload);
        let garbage = key.sign_change(subject, b"not json");
        // (key, subject, mac, payload, result)
        let cases: Vec<Case> = vec![
            (Some(&key), subject, Some(&mac), &payload, Ok(9)),
            (
                Some(&key),
                subject,
                None,
                &payload,
                Err(Rejection::Unsigned),
            ),
            (
                Some(&key),
                subject,
                Some(&theirs),
                &payload,
                Err(Rejection::BadMac),
            ),
            (
                Some(&key),
                moved,
                Some(&mac),
                &payload,
                Err(Rejection::BadMac),
            ),
            // Signed for another subject than its topic's: refused too.
            (
                Some(&key),
                moved,
                Some(&moved_mac),
                &payload,
                Err(Rejection::WrongSubject),
            ),
            (
                Some(&key),
                subject,
                Some(&garbage),
                b"not json",
                Err(Rejection::Malformed),
            ),
            // Without a key (--nats-insecure-unsigned) anything that parses.
            (None, subject, None, &payload, Ok(9)),
            (None, moved, None, &payload, Err(Rejection::WrongSubject)),
        ];
        for (key, subject, mac, payload, want) in cases {
            let got = admit(key, subject, mac.map(str::as_bytes), payload).map(|e| e.rev);
            assert_eq!(got, want, "{subject} {mac:?}");
        }
    }

    #[test]
    fn parking_is_bounded_in_topics_and_bytes() {
        let envelope = |topic: String| Envelope {
            topic,
            rev: 1,
            replica: "r".into(),
            doc: None,
        };
        let mut parked = Parked::default();
        for i in 0..PARKED_TOPICS + 5 {
            parked.park(i as u64, envelope(format!("clusters/c{i}")), 10);
        }
        assert_eq!(parked.topics.len(), PARKED_TOPICS);
        assert!(parked.dropped);
        // A held topic's newer message still takes its place.
        parked.park(99_999, envelope("clusters/c0".into()), 20);
        assert_eq!(parked.topics["clusters/c0"].0, 99_999);
        assert_eq!(parked.bytes, PARKED_TOPICS * 10 + 10);

        let mut parked = Parked::default();
        let big = PARKED_BYTES / 4 + 1;
        for i in 0..4 {
            parked.park(i, envelope(format!("clusters/b{i}")), big);
        }
        assert_eq!(parked.topics.len(), 3);
        assert!(parked.bytes <= PARKED_BYTES && parked.dropped);
        let desired: BTreeSet<String> = ["b0".to_string()].into();
        let taken = parked.take_members(&desired);
        assert_eq!(taken.len(), 1);
        assert_eq!(parked.bytes, 2 * big);
    }
}
