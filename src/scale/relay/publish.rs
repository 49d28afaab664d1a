//! The relay's publisher (`origin hub ──[publish]──▶ JetStream`): the
//! changes this replica's engine makes to the topics of the members it
//! runs, each signed ([`SigningKey`]) and acknowledged by the stream; what
//! the publisher and the consumer share ([`Shared`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::settings::NatsSettings;
use crate::hub::{ChangeKind, Delivery, Hub, Pattern, Topic};
use crate::metrics::Metrics;
use crate::pipeline::MemberClients;
use crate::protocol::topic::TopicKind;
use crate::scale::signing;
use crate::scale::subject::{self, Envelope};

/// The member cluster a topic belongs to; None for topics of no member
/// (tasks, summaries), which each replica keeps to itself.
pub(super) fn cluster_of(topic: &Topic) -> Option<&str> {
    match topic.kind()? {
        TopicKind::Cluster { cluster }
        | TopicKind::Sync { cluster, .. }
        | TopicKind::App { cluster, .. } => Some(cluster),
        TopicKind::Task { .. } => None,
    }
}

/// The patterns of every member topic: what the stream carries.
pub(super) fn member_patterns() -> Vec<Pattern> {
    ["clusters/*", "clusters/**", "apps/**"]
        .into_iter()
        .map(|p| Pattern::parse(p).expect("a valid pattern"))
        .collect()
}

/// Everything the relay's tasks read.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) settings: NatsSettings,
    pub(super) replica: String,
    /// Where the engine puts its documents: the ones published come from
    /// here; the other owners' are applied here too, so that the engine of
    /// a member moving here continues its revisions.
    pub(super) hub: Arc<Hub>,
    /// What clients are served from: every member's documents, this
    /// replica's own included, in the stream's order and no earlier.
    pub(super) served: Arc<Hub>,
    /// The members this replica runs: their topics are its own.
    pub(super) running: Arc<MemberClients>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) js: jetstream::Context,
    /// Woken when the stream was made again (or repaired): the publisher
    /// publishes the current document of every topic this replica runs,
    /// so that every replica converges without a restart.
    pub(super) republish: Notify,
}

/// Publishes the hub's own changes of the members this replica runs. A
/// removal is published only while the member still runs (an app or a
/// resource gone): the removals of a member stopped here (handed over, or
/// taken out of the sources) are not, since its new owner, or every
/// replica's own sources, decide what becomes of it. A change that could not
/// be published, or that the hub's queue dropped, is published again later
/// as the topic's current document.
pub(super) async fn publish(
    shared: Arc<Shared>,
    mut sub: crate::hub::Subscription,
    stop: CancellationToken,
) {
    let mut retry: BTreeSet<Topic> = BTreeSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A publish waits for the stream's acknowledgement (seconds while the
    // broker is away): stopping does not wait for it.
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = publish_next(&shared, &mut sub, &mut retry, &mut tick) => {}
        }
    }
}

/// Publishes the next change, or retries the topics that failed once a
/// second, or every topic this replica runs when the stream was made again.
async fn publish_next(
    shared: &Shared,
    sub: &mut crate::hub::Subscription,
    retry: &mut BTreeSet<Topic>,
    tick: &mut tokio::time::Interval,
) {
    let delivery = tokio::select! {
        () = shared.republish.notified() => {
            let topics = shared.hub.list(&member_patterns());
            let ours = topics
                .into_iter()
                .filter(|d| cluster_of(&d.topic).is_some_and(|c| shared.running.contains(c)));
            let mut count = 0usize;
            for doc in ours {
                count += 1;
                if let Err(topic) = shared.publish_current(doc.topic).await {
                    retry.insert(topic);
                }
            }
            tracing::info!(topics = count, "the stream of changes was made again: the current documents of this replica's members were published again");
            return;
        }
        _ = tick.tick(), if !retry.is_empty() => {
            for topic in std::mem::take(retry) {
                if let Err(topic) = shared.publish_current(topic).await {
                    retry.insert(topic);
                }
            }
            return;
        }
        delivery = sub.next() => delivery,
    };
    match delivery {
        Delivery::Change(change) => {
            let Some(cluster) = cluster_of(&change.topic) else {
                return;
            };
            let stopped_here =
                change.kind == ChangeKind::Removed && !shared.running.contains(cluster);
            if stopped_here {
                // Handed over (or taken out): the engine here forgot the
                // topic, but the stream has it. The engine's hub goes back
                // to the stream's document at its revision, so that if the
                // member comes back here, its engine continues from there
                // (a local removal would have taken a revision the stream
                // never saw, and its next document would skip one).
                if let Some(held) = shared.served.get(change.topic.as_str()) {
                    shared.hub.apply_remote(
                        change.topic.as_str(),
                        held.rev,
                        Some((*held.doc).clone()),
                    );
                }
                return;
            }
            if change.remote {
                return;
            }
            let envelope = Envelope {
                topic: change.topic.to_string(),
                rev: change.rev,
                replica: shared.replica.clone(),
                doc: change.doc.as_deref().cloned(),
            };
            if !shared.send(&envelope).await {
                retry.insert(change.topic.clone());
            }
        }
        Delivery::Resync { topic, .. } => {
            if let Err(topic) = shared.publish_current(topic).await {
                retry.insert(topic);
            }
        }
    }
}

impl Shared {
    /// Publishes one envelope, with its MAC in [`signing::HEADER`] when
    /// the replicas sign, and waits for the stream's acknowledgement.
    pub(super) async fn send(&self, envelope: &Envelope) -> bool {
        let payload = match serde_json::to_vec(envelope) {
            Ok(payload) => payload,
            Err(e) => {
                tracing::error!(topic = %envelope.topic, cause = %e, "a change could not be encoded for the stream");
                return true;
            }
        };
        let subject = subject::of_topic(&envelope.topic);
        let published = match &self.settings.signing {
            Some(key) => {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(signing::HEADER, key.sign_change(&subject, &payload));
                self.js
                    .publish_with_headers(subject, headers, payload.into())
                    .await
            }
            None => self.js.publish(subject, payload.into()).await,
        };
        let acked = match published {
            Ok(ack) => ack.await.map(drop).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let ok = acked.is_ok();
        if let Err(cause) = acked {
            tracing::warn!(topic = %envelope.topic, rev = envelope.rev, %cause, "a change was not published to the stream; retrying with the current document");
        }
        self.metrics.stream.published(&self.settings.stream, ok);
        ok
    }

    /// Publishes the current document of a topic of a member this replica
    /// runs (nothing for others); Err(topic) to try again.
    async fn publish_current(&self, topic: Topic) -> Result<(), Topic> {
        let runs = cluster_of(&topic).is_some_and(|c| self.running.contains(c));
        let Some(current) = self.hub.get(topic.as_str()).filter(|_| runs) else {
            return Ok(());
        };
        let envelope = Envelope {
            topic: topic.to_string(),
            rev: current.rev,
            replica: self.replica.clone(),
            doc: Some((*current.doc).clone()),
        };
        if self.send(&envelope).await {
            Ok(())
        } else {
            Err(topic)
        }
    }
}
