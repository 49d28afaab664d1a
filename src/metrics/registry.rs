//! The one place every metric is registered (`engine, transports, HTTP
//! layer, sources, Karpor, scale-out ──events──▶ [Metrics] ◀──scrape──
//! /metrics`): `Metrics` holds every family of the process, builds the
//! Prometheus registry in the order `/metrics` lists them, and renders it
//! (text format) after refreshing what is read from the hub.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::http::{ConnectionMetrics, HttpLabels, LagHistogram, TransportLabels};
use super::hub_state::HubMetrics;
use super::karpor::{KarporMetrics, KarporWriterMetrics};
use super::members::{ClusterLabels, PhaseMetrics, ReloadMetrics, ResourceLabels, WatchLabels};
use super::scale::{AgentMetrics, LeaseMetrics, StreamMetrics};
use super::tasks::TaskMetrics;
use crate::hub::Hub;

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    pub(crate) http_requests: Family<HttpLabels, Counter>,
    pub(crate) sessions: Family<TransportLabels, Gauge>,
    /// `sessions{transport="sse"}`, kept at hand for the SSE transport.
    pub sse_sessions: Gauge,
    /// `sessions{transport="ws"}`, kept at hand for the WebSocket transport.
    pub(crate) ws_sessions: Gauge,
    /// Push messages written to sessions (`messages_sent_total`).
    pub messages_sent: Counter,
    /// Bytes of push messages written to sessions (`bytes_sent_total`).
    pub bytes_sent: Counter,
    /// Topics resent as one snapshot to a lagging subscriber (`collapses_total`).
    pub collapses: Counter,
    /// Sessions closed because their client read too slowly (`slow_consumer_closes_total`).
    pub slow_consumer_closes: Counter,
    pub(crate) rejected_connections: Counter,
    /// The hub's state and its replay log, read at scrape time.
    hub: HubMetrics,
    /// Seconds from a change entering the hub to its message being handed to a socket.
    pub(crate) delivery_lag: LagHistogram,
    /// The current phase and reason of clusters and syncs, read at scrape time.
    phases: PhaseMetrics,
    /// Tasks seen finished, counted at scrape time.
    tasks: TaskMetrics,
    pub(crate) watch_lists: Family<ResourceLabels, Counter>,
    pub(crate) watch_errors: Family<WatchLabels, Counter>,
    pub(crate) probe_latency: Family<ClusterLabels, Histogram>,
    /// Accepted TCP connections (src/http/connections.rs).
    pub(crate) connections: ConnectionMetrics,
    /// Reloads of the member configuration (src/pipeline/reload.rs).
    pub(crate) reloads: ReloadMetrics,
    /// The Karpor reader (src/karpor/reader.rs).
    pub(crate) karpor: KarporMetrics,
    /// Status writes to Karpor's objects (src/karpor/writer.rs).
    pub(crate) karpor_writer: KarporWriterMetrics,
    /// Member ownership through Leases (src/scale/).
    pub(crate) leases: LeaseMetrics,
    /// The relay: the stream of changes between replicas (src/scale/relay/).
    pub(crate) stream: StreamMetrics,
    /// Push members' agents (src/scale/agents/).
    pub(crate) agents: AgentMetrics,
}

// By hand: the registry holds every instrument; a few totals say enough.
impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("messages_sent", &self.messages_sent.get())
            .field("hub_changes", &self.hub.changes.get())
            .finish_non_exhaustive()
    }
}

impl Metrics {
    pub(crate) fn new() -> Arc<Self> {
        let mut registry = Registry::with_prefix("kube_pulse");
        let sessions = Family::<TransportLabels, Gauge>::default();
        let session_gauge = |transport: &str| {
            sessions
                .get_or_create(&TransportLabels {
                    transport: transport.into(),
                })
                .clone()
        };
        let (sse_sessions, ws_sessions) = (session_gauge("sse"), session_gauge("ws"));
        let m = Self {
            http_requests: Family::default(),
            sessions,
            sse_sessions,
            ws_sessions,
            messages_sent: Counter::default(),
            bytes_sent: Counter::default(),
            collapses: Counter::default(),
            slow_consumer_closes: Counter::default(),
            rejected_connections: Counter::default(),
            hub: HubMetrics::default(),
            delivery_lag: LagHistogram::new(exponential_buckets(0.0001, 2.0, 18)),
            phases: PhaseMetrics::default(),
            tasks: TaskMetrics::default(),
            watch_lists: Family::default(),
            watch_errors: Family::default(),
            probe_latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 14))
            }),
            connections: ConnectionMetrics::default(),
            reloads: ReloadMetrics::default(),
            karpor_writer: KarporWriterMetrics::default(),
            karpor: KarporMetrics::default(),
            leases: LeaseMetrics::default(),
            stream: StreamMetrics::default(),
            agents: AgentMetrics::default(),
            registry: Registry::default(),
        };
        registry.register(
            "http_requests",
            "HTTP requests by route and status",
            m.http_requests.clone(),
        );
        registry.register(
            "sessions",
            "Open push sessions by transport",
            m.sessions.clone(),
        );
        registry.register(
            "subscriptions",
            "Open hub subscriptions",
            m.hub.subscriptions.clone(),
        );
        registry.register(
            "messages_sent",
            "Push messages written to sessions",
            m.messages_sent.clone(),
        );
        registry.register(
            "bytes_sent",
            "Push message bytes written to sessions",
            m.bytes_sent.clone(),
        );
        registry.register(
            "collapses",
            "Topics resent as a snapshot to a subscriber that fell behind",
            m.collapses.clone(),
        );
        registry.register(
            "slow_consumer_closes",
            "Sessions closed because they did not read in time",
            m.slow_consumer_closes.clone(),
        );
        registry.register(
            "rejected_connections",
            "Push sessions refused at the connection limit",
            m.rejected_connections.clone(),
        );
        registry.register(
            "hub_changes",
            "Changes published by the hub",
            m.hub.changes.clone(),
        );
        registry.register("hub_topics", "Topics held by the hub", m.hub.topics.clone());
        registry.register(
            "lagged_changes",
            "Changes a full subscriber queue turned into a later snapshot (subscribers falling behind)",
            m.hub.lagged_changes.clone(),
        );
        registry.register(
            "replay_log_size",
            "Changes kept for resume",
            m.hub.replay_log_size.clone(),
        );
        registry.register(
            "replay_log_bytes",
            "Estimated bytes of the changes kept for resume (their JSON messages)",
            m.hub.replay_log_bytes.clone(),
        );
        registry.register(
            "pattern_index_entries",
            "(pattern, subscription) entries in the hub's pattern index",
            m.hub.pattern_index_entries.clone(),
        );
        registry.register(
            "pattern_index_nodes",
            "Trie nodes of the hub's pattern index (follows the live subscriptions)",
            m.hub.pattern_index_nodes.clone(),
        );
        registry.register(
            "delivery_lag_seconds",
            "Time from a hub change to its message being written",
            m.delivery_lag.clone(),
        );
        m.phases.register(&mut registry);
        registry.register(
            "replay_log_max_size",
            "Changes the replay log keeps at most",
            m.hub.replay_log_max_size.clone(),
        );
        registry.register(
            "replay_log_max_bytes",
            "Estimated bytes the replay log keeps at most (--replay-log-bytes)",
            m.hub.replay_log_max_bytes.clone(),
        );
        m.tasks.register(&mut registry);
        registry.register(
            "watch_lists",
            "Lists (initial and relists) started per watched resource",
            m.watch_lists.clone(),
        );
        registry.register(
            "watch_errors",
            "Watch and list errors by reason",
            m.watch_errors.clone(),
        );
        registry.register(
            "probe_latency_seconds",
            "Latency of member apiserver probes",
            m.probe_latency.clone(),
        );
        m.connections.register(&mut registry);
        m.reloads.register(&mut registry);
        m.karpor_writer.register(&mut registry);
        m.karpor.register(&mut registry);
        m.leases.register(&mut registry);
        m.stream.register(&mut registry);
        m.agents.register(&mut registry);
        let mut m = m;
        m.registry = registry;
        Arc::new(m)
    }

    pub(crate) fn observe_probe(&self, cluster: &str, latency: Duration) {
        self.probe_latency
            .get_or_create(&ClusterLabels {
                cluster: cluster.into(),
            })
            .observe(latency.as_secs_f64());
    }

    /// Observes the delivery lag of a message the hub published `at`
    /// (nothing for messages that are not live changes), handed to its
    /// socket `now`.
    pub(crate) fn observe_delivery(&self, at: Option<std::time::Instant>, now: std::time::Instant) {
        if let Some(at) = at {
            let micros = now.saturating_duration_since(at).as_micros();
            self.delivery_lag
                .observe_micros(u64::try_from(micros).unwrap_or(u64::MAX));
        }
    }

    /// Counts `messages` push messages of `bytes` bytes written to a session.
    pub fn sent(&self, messages: usize, bytes: usize) {
        self.messages_sent.inc_by(messages as u64);
        self.bytes_sent.inc_by(bytes as u64);
    }

    /// Refreshes the hub's gauges and change count, then encodes.
    pub fn render(&self, hub: &Hub) -> String {
        self.hub.refresh(hub);
        self.phases.refresh(hub);
        self.tasks.count_finished(hub);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String succeeds");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_count_straight_into_the_exported_metrics() {
        let metrics = Metrics::new();
        let hub = Hub::new(Default::default());
        metrics.sse_sessions.inc();
        metrics.sse_sessions.inc();
        metrics.ws_sessions.inc();
        metrics.sent(3, 120);
        metrics.collapses.inc();
        hub.put(
            "clusters/a",
            serde_json::json!({"name": "a", "phase": "Healthy"}),
        );
        let text = metrics.render(&hub);
        assert!(hub.stats().log_bytes > 0);
        for line in [
            r#"kube_pulse_sessions{transport="sse"} 2"#,
            r#"kube_pulse_sessions{transport="ws"} 1"#,
            "kube_pulse_messages_sent_total 3",
            "kube_pulse_bytes_sent_total 120",
            "kube_pulse_collapses_total 1",
            "kube_pulse_hub_changes_total 1",
            "kube_pulse_replay_log_size 1",
            &format!("kube_pulse_replay_log_bytes {}", hub.stats().log_bytes),
            "kube_pulse_pattern_index_entries 0",
            "kube_pulse_pattern_index_nodes 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        // A second scrape does not count the hub's changes again.
        let text = metrics.render(&hub);
        assert!(text.lines().any(|l| l == "kube_pulse_hub_changes_total 1"));
    }

    #[test]
    fn delivery_lag_is_a_cumulative_histogram_in_seconds() {
        let metrics = Metrics::new();
        let hub = Hub::new(Default::default());
        let at = std::time::Instant::now();
        // (lag in microseconds): 100 µs is the first bound, inclusive.
        for micros in [0, 100, 101, 250_000, 30_000_000] {
            let now = at + std::time::Duration::from_micros(micros);
            metrics.observe_delivery(Some(at), now);
        }
        metrics.observe_delivery(None, at);
        let text = metrics.render(&hub);
        for (line, present) in [
            (
                r#"kube_pulse_delivery_lag_seconds_bucket{le="0.0001"} 2"#,
                true,
            ),
            (
                r#"kube_pulse_delivery_lag_seconds_bucket{le="0.0002"} 3"#,
                true,
            ),
            (
                r#"kube_pulse_delivery_lag_seconds_bucket{le="0.2048"} 3"#,
                true,
            ),
            (
                r#"kube_pulse_delivery_lag_seconds_bucket{le="0.4096"} 4"#,
                true,
            ),
            (
                r#"kube_pulse_delivery_lag_seconds_bucket{le="13.1072"} 4"#,
                true,
            ),
            (
                r#"kube_pulse_delivery_lag_seconds_bucket{le="+Inf"} 5"#,
                true,
            ),
            ("kube_pulse_delivery_lag_seconds_count 5", true),
            ("kube_pulse_delivery_lag_seconds_sum 30.250201", true),
            ("kube_pulse_delivery_lag_seconds_count 6", false),
        ] {
            let found = text.lines().any(|l| l == line);
            assert_eq!(found, present, "{line} in\n{text}");
        }
    }

    #[test]
    fn reasons_bounds_and_finished_tasks_are_exported() {
        let metrics = Metrics::new();
        let hub = Hub::new(crate::hub::HubConfig {
            log_size: 500,
            log_bytes: 4096,
            ..Default::default()
        });
        hub.put(
            "clusters/a",
            serde_json::json!({"name": "a", "phase": "Unhealthy", "reason": "Disconnected"}),
        );
        hub.put(
            "clusters/a/sync/apps/v1/deployments",
            serde_json::json!({"cluster": "a", "phase": "Backoff", "reason": "Forbidden",
                "resource": {"group": "apps", "version": "v1", "resource": "deployments"}}),
        );
        let task = |id: &str, status: &str, reason: Option<&str>| {
            let mut doc = serde_json::json!({"id": id, "type": "Stop", "status": status});
            if let Some(reason) = reason {
                doc["reason"] = reason.into();
            }
            hub.put(&format!("tasks/{id}"), doc);
        };
        task("1", "Failed", Some("Forbidden"));
        task("2", "Running", None);
        task("3", "Succeeded", None);
        let has = |text: &str, line: &str| text.lines().any(|l| l == line);
        let text = metrics.render(&hub);
        for line in [
            r#"kube_pulse_cluster_reason{cluster="a",phase="Unhealthy",reason="Disconnected"} 1"#,
            r#"kube_pulse_sync_reason{cluster="a",resource="apps/v1/deployments",phase="Backoff",reason="Forbidden"} 1"#,
            "kube_pulse_replay_log_max_size 500",
            "kube_pulse_replay_log_max_bytes 4096",
            r#"kube_pulse_tasks_finished_total{type="Stop",status="Failed",reason="Forbidden"} 1"#,
            r#"kube_pulse_tasks_finished_total{type="Stop",status="Succeeded",reason=""} 1"#,
        ] {
            assert!(has(&text, line), "{line} missing in\n{text}");
        }
        assert!(!text.contains(r#"status="Running""#), "{text}");
        // The reason moves with the document; a task is counted once, and
        // the running one when it finishes.
        hub.put(
            "clusters/a",
            serde_json::json!({"name": "a", "phase": "Healthy", "reason": "Ready"}),
        );
        task("2", "Failed", Some("DeadlineExceeded"));
        let text = metrics.render(&hub);
        assert!(has(
            &text,
            r#"kube_pulse_cluster_reason{cluster="a",phase="Healthy",reason="Ready"} 1"#
        ));
        assert!(!text.contains("Disconnected"), "{text}");
        for line in [
            r#"kube_pulse_tasks_finished_total{type="Stop",status="Failed",reason="Forbidden"} 1"#,
            r#"kube_pulse_tasks_finished_total{type="Stop",status="Failed",reason="DeadlineExceeded"} 1"#,
            r#"kube_pulse_tasks_finished_total{type="Stop",status="Succeeded",reason=""} 1"#,
        ] {
            assert!(has(&text, line), "{line} missing in\n{text}");
        }
    }
}
