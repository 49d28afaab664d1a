//! Keeps the summary topics live (`hub ──changes──▶ [summaries] ──▶ hub`):
//! a hub subscription to cluster and app documents; each change (or resync)
//! marks its summary dirty, and every dirty summary is folded again from
//! the hub's documents (`crate::status::summary`) and put back, where the
//! hub publishes only real changes. A namespace without apps loses its
//! summary topic. Started and awaited by the engine's task.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::hub::{Delivery, Hub, Pattern, Subscription};
use crate::protocol::TopicKind;
use crate::status::summary;

/// The topic of the cluster summary.
pub(crate) const CLUSTERS: &str = "summary/clusters";

/// The topic of a namespace's app summary.
pub(crate) fn apps_topic(cluster: &str, namespace: &str) -> String {
    format!("summary/apps/{cluster}/{namespace}")
}

#[derive(Default)]
struct Dirty {
    clusters: bool,
    namespaces: BTreeSet<(String, String)>,
}

impl Dirty {
    fn mark(&mut self, delivery: &Delivery) {
        let topic = match delivery {
            Delivery::Change(c) => &c.topic,
            Delivery::Resync { topic, .. } => topic,
        };
        match topic.kind() {
            Some(TopicKind::Cluster { .. }) => self.clusters = true,
            Some(TopicKind::App {
                cluster, namespace, ..
            }) => {
                self.namespaces
                    .insert((cluster.to_string(), namespace.to_string()));
            }
            _ => {}
        }
    }
}

fn pattern(raw: &str) -> Pattern {
    Pattern::parse(raw).expect("a valid pattern")
}

/// Folds the dirty summaries again and puts them into the hub.
fn publish(hub: &Hub, dirty: Dirty) {
    if dirty.clusters {
        let docs = hub.list(&[pattern("clusters/*")]);
        let folded = summary::clusters(docs.iter().filter_map(|d| match d.topic.kind() {
            Some(TopicKind::Cluster { cluster }) => Some((cluster, &*d.doc)),
            _ => None,
        }));
        hub.put(CLUSTERS, folded);
    }
    for (cluster, namespace) in dirty.namespaces {
        let topic = apps_topic(&cluster, &namespace);
        // Names the hub holds are valid segments: the pattern parses.
        let Ok(apps) = Pattern::parse(&format!("apps/{cluster}/{namespace}/*")) else {
            continue;
        };
        let docs = hub.list(&[apps]);
        if docs.is_empty() {
            hub.remove(&topic);
        } else {
            hub.put(
                &topic,
                summary::apps(&cluster, &namespace, docs.iter().map(|d| &*d.doc)),
            );
        }
    }
}

/// Publishes the summaries until `shutdown`: first over what the hub holds,
/// then after every batch of changes.
pub(crate) async fn run(hub: Arc<Hub>, shutdown: CancellationToken) {
    let mut subscription: Subscription =
        hub.subscribe(vec![pattern("clusters/*"), pattern("apps/*/*/*")]);
    let mut dirty = Dirty {
        clusters: true,
        ..Dirty::default()
    };
    for doc in subscription.snapshot() {
        if let Some(TopicKind::App {
            cluster, namespace, ..
        }) = doc.topic.kind()
        {
            dirty
                .namespaces
                .insert((cluster.to_string(), namespace.to_string()));
        }
    }
    publish(&hub, std::mem::take(&mut dirty));
    let mut published = tokio::time::Instant::now();
    loop {
        let delivery = tokio::select! {
            _ = shutdown.cancelled() => return,
            d = subscription.next() => d,
        };
        dirty.mark(&delivery);
        // At most one fold per FOLD_EVERY: folding the clusters' summary
        // reads every topic of the hub, which a fleet of thousands of
        // members changing at once would otherwise do per change.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep_until(published + FOLD_EVERY) => {}
        }
        // What is queued meanwhile is folded in the same pass (bounded by
        // the subscription's queue).
        while let Some(more) = subscription.try_next() {
            dirty.mark(&more);
        }
        publish(&hub, std::mem::take(&mut dirty));
        published = tokio::time::Instant::now();
    }
}

/// The shortest time between two folds of the summaries.
const FOLD_EVERY: std::time::Duration = std::time::Duration::from_millis(200);
