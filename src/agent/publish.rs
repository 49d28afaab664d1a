//! The agent's publisher (`hub ──[publish]──▶ NATS JetStream, stream
//! KUBE_PULSE_AGENTS`): every change of the member's documents as a signed
//! report of the whole document, and a heartbeat every period that says
//! whether every document the agent holds was sent in this session
//! (`synced`: the hub then drops the ones of earlier sessions the agent no
//! longer has). Publishes are pipelined: up to [`IN_FLIGHT`] wait for the
//! stream's acknowledgement at once, in order on the one connection; a
//! document whose publish failed is sent again, as it is then, a second
//! later.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::hub::{Delivery, Hub, Pattern};
use crate::metrics::Metrics;
use crate::scale::agents::wire::{self, Body, Report};

/// Publishes waiting for their acknowledgement at most.
const IN_FLIGHT: usize = 256;

/// The member's topics: what the agent publishes.
pub(super) fn member_patterns(member: &str) -> Vec<Pattern> {
    [
        format!("clusters/{member}"),
        format!("clusters/{member}/**"),
        format!("apps/{member}/**"),
    ]
    .iter()
    .map(|p| Pattern::parse(p).expect("a member's name makes a pattern"))
    .collect()
}

/// Whether the member's documents are settled: the cluster has answered
/// and no sync document is still waiting for its first list.
fn settled(hub: &Hub, member: &str) -> bool {
    let phase = |doc: &Value| {
        doc.get("phase")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let Some(cluster) = hub.get(&crate::protocol::topic::cluster(member)) else {
        return false;
    };
    if matches!(
        phase(&cluster.doc).as_str(),
        "" | "Pending" | "Initializing"
    ) {
        return false;
    }
    let Ok(syncs) = Pattern::parse(&format!("clusters/{member}/sync/**")) else {
        return false;
    };
    hub.list(&[syncs])
        .iter()
        .all(|d| !matches!(phase(&d.doc).as_str(), "Pending" | "Listing"))
}

/// What `/readyz`'s `Nats` check reads: whether the broker is connected
/// and the last publish was acknowledged.
#[derive(Debug, Default)]
pub(super) struct AgentState {
    pub(super) failing: std::sync::atomic::AtomicBool,
}

impl AgentState {
    pub(super) fn acknowledged(&self, ok: bool) {
        self.failing
            .store(!ok, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the publisher holds.
pub(super) struct Publisher {
    pub(super) js: jetstream::Context,
    pub(super) identity: Arc<nkeys::KeyPair>,
    pub(super) member: String,
    pub(super) session: u64,
    pub(super) hub: Arc<Hub>,
    pub(super) heartbeat: Duration,
    pub(super) metrics: Arc<Metrics>,
    /// Shared with `/readyz`: the last publish was acknowledged.
    pub(super) state: Arc<AgentState>,
}

type Ack = futures::future::BoxFuture<'static, (Option<String>, bool)>;

impl Publisher {
    /// Runs until `stop`.
    pub(super) async fn run(self, mut sub: crate::hub::Subscription, stop: CancellationToken) {
        let mut seq = 0u64;
        let mut retry: BTreeSet<String> = BTreeSet::new();
        let mut sent: HashSet<String> = HashSet::new();
        let mut synced = false;
        let mut acks: FuturesUnordered<Ack> = FuturesUnordered::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heartbeat = tokio::time::interval(self.heartbeat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                Some((topic, ok)) = acks.next(), if !acks.is_empty() => {
                    self.state.acknowledged(ok);
                    match (topic, ok) {
                        // A version of it is in the stream from this session.
                        (Some(topic), true) => {
                            sent.insert(topic);
                        }
                        (Some(topic), false) => {
                            retry.insert(topic);
                        }
                        (None, _) => {}
                    }
                }
                _ = heartbeat.tick() => {
                    if !synced && retry.is_empty() && settled(&self.hub, &self.member) {
                        let held = self.hub.list(&member_patterns(&self.member));
                        synced = held.iter().all(|d| sent.contains(d.topic.as_str()));
                    }
                    let topics = self.hub.list(&member_patterns(&self.member)).len();
                    let body = Body::Heartbeat {
                        version: env!("CARGO_PKG_VERSION").to_string(),
                        synced,
                        topics,
                    };
                    if let Some(ack) = self.send(&mut seq, None, body).await {
                        acks.push(ack);
                    }
                }
                _ = tick.tick(), if !retry.is_empty() && acks.len() < IN_FLIGHT => {
                    for topic in std::mem::take(&mut retry) {
                        let doc = self.hub.get(&topic).map(|d| (*d.doc).clone());
                        let body = Body::Doc { topic: topic.clone(), doc };
                        match self.send(&mut seq, Some(topic.clone()), body).await {
                            Some(ack) => acks.push(ack),
                            None => { retry.insert(topic); }
                        }
                    }
                }
                delivery = sub.next(), if acks.len() < IN_FLIGHT => {
                    let (topic, doc) = match delivery {
                        Delivery::Change(change) => (change.topic.to_string(), change.doc.as_deref().cloned()),
                        Delivery::Resync { topic, .. } => {
                            let doc = self.hub.get(topic.as_str()).map(|d| (*d.doc).clone());
                            (topic.to_string(), doc)
                        }
                    };
                    retry.remove(&topic);
                    let body = Body::Doc { topic: topic.clone(), doc };
                    match self.send(&mut seq, Some(topic.clone()), body).await {
                        Some(ack) => acks.push(ack),
                        None => { retry.insert(topic); }
                    }
                }
            }
        }
    }

    /// Publishes one report, signed; its acknowledgement to wait for, or
    /// None when it could not even be sent.
    async fn send(&self, seq: &mut u64, topic: Option<String>, body: Body) -> Option<Ack> {
        *seq += 1;
        let kind = match &body {
            Body::Doc { .. } => "doc",
            Body::Heartbeat { .. } => "heartbeat",
        };
        let report = Report {
            member: self.member.clone(),
            session: self.session,
            seq: *seq,
            body,
        };
        let payload = serde_json::to_vec(&report).expect("a report serializes");
        let subject = report.subject();
        let mut headers = async_nats::HeaderMap::new();
        let signature = wire::sign_report(&self.identity, &subject, &payload);
        headers.insert(wire::SIGNATURE_HEADER, signature.as_str());
        let bytes = subject.len() + payload.len() + wire::SIGNATURE_HEADER.len() + signature.len();
        self.metrics.agents.published(kind, bytes);
        match self
            .js
            .publish_with_headers(subject, headers, payload.into())
            .await
        {
            Ok(ack) => Some(Box::pin(async move { (topic, ack.await.is_ok()) })),
            Err(e) => {
                tracing::debug!(member = %self.member, cause = %e, "a report could not be sent; sending it again");
                self.state.acknowledged(false);
                None
            }
        }
    }
}
