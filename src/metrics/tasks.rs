//! The tasks' family (`hub ──task documents, at scrape──▶ [metrics] ──▶
//! registry`): tasks seen finished, by type, status and reason, counted
//! from the hub's `tasks/*` documents when `/metrics` is scraped.

use std::collections::HashSet;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::hub::{Hub, Pattern};

/// A finished task: its type, how it ended and why (empty when it succeeded).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    r#type: String,
    status: String,
    reason: String,
}

/// Finished tasks, each counted once.
#[derive(Debug, Default)]
pub(super) struct TaskMetrics {
    /// Tasks seen finished (`tasks_finished_total`), counted at scrape time.
    finished: Family<TaskLabels, Counter>,
    /// Ids of finished tasks the hub still holds that are already counted;
    /// bounded by the task store's own bound (ids leave when their topic does).
    counted: parking_lot::Mutex<HashSet<String>>,
}

impl TaskMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "tasks_finished",
            "Tasks seen finished, by type, status and reason",
            self.finished.clone(),
        );
    }

    /// Counts each task the hub holds as finished (`Succeeded`, `Failed`,
    /// `Cancelled`) once. Tasks stay in the hub for the task retention
    /// (an hour by default), far longer than a scrape interval, so a
    /// scraped gateway misses none; ids leave the set with their topic.
    pub(super) fn count_finished(&self, hub: &Hub) {
        let mut counted = self.counted.lock();
        let mut present = HashSet::new();
        for doc in hub.list(&[Pattern::parse("tasks/*").expect("valid")]) {
            let status = doc.doc["status"].as_str().unwrap_or("");
            if !matches!(status, "Succeeded" | "Failed" | "Cancelled") {
                continue;
            }
            let id = doc.doc["id"].as_str().unwrap_or("").to_string();
            if !counted.contains(&id) {
                self.finished
                    .get_or_create(&TaskLabels {
                        r#type: doc.doc["type"].as_str().unwrap_or("").into(),
                        status: status.into(),
                        reason: doc.doc["reason"].as_str().unwrap_or("").into(),
                    })
                    .inc();
            }
            present.insert(id);
        }
        *counted = present;
    }
}
