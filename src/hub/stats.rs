//! The hub's counters (`hub → [HubStats] → health, metrics, benchmark`).

use serde::Serialize;

use super::state::Hub;

/// Counters of the hub, for health and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HubStats {
    /// Topics the hub holds.
    pub topics: usize,
    /// Hub-wide sequence number of the last change.
    pub seq: u64,
    /// Live subscriptions.
    pub subscriptions: usize,
    /// Changes a full subscription queue turned into a later resync.
    pub lag_events: u64,
    /// Changes in the replay log.
    pub log_len: usize,
    /// Estimated bytes the replay log holds: each change's JSON message plus
    /// bookkeeping (and a task's document, as serialized).
    pub log_bytes: usize,
    /// (pattern, subscription) entries in the pattern index.
    pub index_entries: usize,
    /// Nodes of the pattern index's trie: back to its old size once the
    /// subscriptions that grew it are gone.
    pub index_nodes: usize,
}

impl Hub {
    /// Counters for health checks, metrics and the benchmark.
    pub fn stats(&self) -> HubStats {
        let inner = self.inner.lock();
        HubStats {
            topics: inner.topics.len(),
            seq: inner.seq,
            subscriptions: inner.slots.len(),
            lag_events: inner.lag_events,
            log_len: inner.log.len(),
            log_bytes: inner.log_bytes,
            index_entries: inner.index.len(),
            index_nodes: inner.index.nodes(),
        }
    }
}
