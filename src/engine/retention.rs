//! App retention (`engine task ──tick──▶ [expire] ──▶ hub`): an app gone
//! from its member (no workloads, or no namespace) keeps its topic for a
//! while, then leaves the hub unless a task is active on it.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::state::Engine;
use crate::protocol::topic;

impl Engine {
    /// Keeps gone apps for `retention` instead of the default 10 minutes.
    pub(crate) fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX);
        self
    }

    /// How often `run` calls `expire`: a tenth of the retention, within
    /// 1–30 s, so an app goes at most 10 % (or 30 s) after its retention.
    pub(crate) fn expiry_period(&self) -> Duration {
        (self.retention.to_std().unwrap_or(Duration::MAX) / 10)
            .clamp(Duration::from_secs(1), Duration::from_secs(30))
    }

    /// Removes the topics of apps gone (no workloads, or no namespace) for
    /// at least the retention at `now`, unless a task is active on them.
    /// An app whose workloads come back before then simply continues.
    pub(crate) fn expire(&mut self, now: DateTime<Utc>) {
        let retention = self.retention;
        for (cluster, model) in &mut self.clusters {
            let tasks = &model.tasks;
            model.apps.retain(|key, app| {
                let expired = !tasks.contains_key(key) && app.expired(retention, now);
                if expired {
                    tracing::debug!(cluster = %cluster, namespace = %key.0, app = %key.1, "gone app expired");
                    self.hub.remove(&topic::app(cluster, &key.0, &key.1));
                }
                !expired
            });
        }
    }
}
