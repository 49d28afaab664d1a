//! The hub's families (`hub ──stats and bounds, at scrape──▶ [metrics]
//! ──▶ registry`): subscriptions, topics, changes published, changes
//! subscribers lagged on, the replay log's size and bounds and the pattern
//! index, all read from the hub when `/metrics` is scraped, so nothing is
//! counted on the hub's own paths.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use crate::hub::Hub;

/// The hub's state and its replay log. `Metrics::new` registers these
/// families one by one: they sit between the transports' families in the
/// order `/metrics` lists them.
#[derive(Debug, Default)]
pub(super) struct HubMetrics {
    pub(super) subscriptions: Gauge,
    pub(super) changes: Counter,
    pub(super) topics: Gauge,
    /// Changes a full subscriber queue turned into a later snapshot
    /// (`lagged_changes_total`): subscribers falling behind.
    pub(super) lagged_changes: Counter,
    pub(super) replay_log_size: Gauge,
    pub(super) replay_log_bytes: Gauge,
    pub(super) pattern_index_entries: Gauge,
    pub(super) pattern_index_nodes: Gauge,
    /// The replay log's bounds, so alerts can compare its size with them.
    pub(super) replay_log_max_size: Gauge,
    pub(super) replay_log_max_bytes: Gauge,
    /// The hub sequence already folded into `changes`.
    seen_seq: AtomicU64,
    /// The hub's lag count already folded into `lagged_changes`.
    seen_lag: AtomicU64,
}

impl HubMetrics {
    /// Sets the gauges from the hub's stats and bounds, and adds the
    /// changes and lag events since the last scrape to their counters.
    pub(super) fn refresh(&self, hub: &Hub) {
        let stats = hub.stats();
        self.subscriptions.set(stats.subscriptions as i64);
        self.topics.set(stats.topics as i64);
        self.replay_log_size.set(stats.log_len as i64);
        self.replay_log_bytes
            .set(i64::try_from(stats.log_bytes).unwrap_or(i64::MAX));
        self.pattern_index_entries
            .set(i64::try_from(stats.index_entries).unwrap_or(i64::MAX));
        self.pattern_index_nodes
            .set(i64::try_from(stats.index_nodes).unwrap_or(i64::MAX));
        let bounds = hub.config();
        self.replay_log_max_size
            .set(i64::try_from(bounds.log_size).unwrap_or(i64::MAX));
        self.replay_log_max_bytes
            .set(i64::try_from(bounds.log_bytes).unwrap_or(i64::MAX));
        let seen = self.seen_seq.fetch_max(stats.seq, Ordering::Relaxed);
        self.changes.inc_by(stats.seq.saturating_sub(seen));
        let lagged = self.seen_lag.fetch_max(stats.lag_events, Ordering::Relaxed);
        self.lagged_changes
            .inc_by(stats.lag_events.saturating_sub(lagged));
    }
}
