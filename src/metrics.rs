//! Prometheus metrics, registered in one place and served at `/metrics`
//! (text format). Instruments that count events are updated where the
//! events happen (engine, transports, HTTP layer), and so are open
//! sessions; gauges of the hub's state (phases, sizes) are refreshed from
//! it at scrape time, so nothing is counted twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::hub::{Hub, Pattern};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct HttpLabels {
    pub(crate) method: String,
    pub(crate) route: String,
    pub(crate) status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TransportLabels {
    pub(crate) transport: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClusterPhaseLabels {
    pub(crate) cluster: String,
    pub(crate) phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PhaseLabels {
    pub(crate) cluster: String,
    pub(crate) resource: String,
    pub(crate) phase: String,
}

/// A watched resource of one member (lists have no reason to tell).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResourceLabels {
    pub(crate) cluster: String,
    pub(crate) resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct WatchLabels {
    pub(crate) cluster: String,
    pub(crate) resource: String,
    pub(crate) reason: String,
}

/// The current phase and reason of a member cluster (one series per cluster).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClusterReasonLabels {
    pub(crate) cluster: String,
    pub(crate) phase: String,
    pub(crate) reason: String,
}

/// The current phase and reason of one cluster x resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SyncReasonLabels {
    pub(crate) cluster: String,
    pub(crate) resource: String,
    pub(crate) phase: String,
    pub(crate) reason: String,
}

/// A finished task: its type, how it ended and why (empty when it succeeded).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TaskLabels {
    pub(crate) r#type: String,
    pub(crate) status: String,
    pub(crate) reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClusterLabels {
    pub(crate) cluster: String,
}

/// Phases a cluster or sync gauge is reported for (1 for the current one).
const CLUSTER_PHASES: [&str; 6] = [
    "Pending",
    "Initializing",
    "Healthy",
    "Degraded",
    "Unhealthy",
    "Removed",
];
const SYNC_PHASES: [&str; 6] = [
    "Pending", "Listing", "Syncing", "Error", "Backoff", "Stopped",
];

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    pub(crate) http_requests: Family<HttpLabels, Counter>,
    pub(crate) sessions: Family<TransportLabels, Gauge>,
    /// `sessions{transport="sse"}`, kept at hand for the SSE transport.
    pub sse_sessions: Gauge,
    /// `sessions{transport="ws"}`, kept at hand for the WebSocket transport.
    pub(crate) ws_sessions: Gauge,
    pub(crate) subscriptions: Gauge,
    /// Push messages written to sessions (`messages_sent_total`).
    pub messages_sent: Counter,
    /// Bytes of push messages written to sessions (`bytes_sent_total`).
    pub bytes_sent: Counter,
    /// Topics resent as one snapshot to a lagging subscriber (`collapses_total`).
    pub collapses: Counter,
    /// Sessions closed because their client read too slowly (`slow_consumer_closes_total`).
    pub slow_consumer_closes: Counter,
    pub(crate) rejected_connections: Counter,
    pub(crate) hub_changes: Counter,
    pub(crate) hub_topics: Gauge,
    pub(crate) replay_log_size: Gauge,
    pub(crate) replay_log_bytes: Gauge,
    pub(crate) pattern_index_entries: Gauge,
    pub(crate) pattern_index_nodes: Gauge,
    /// Seconds from a change entering the hub to its message being handed to a socket.
    pub(crate) delivery_lag: LagHistogram,
    pub(crate) cluster_phase: Family<ClusterPhaseLabels, Gauge>,
    pub(crate) sync_phase: Family<PhaseLabels, Gauge>,
    /// 1 for each cluster's current phase and reason (alerts name the reason).
    pub(crate) cluster_reason: Family<ClusterReasonLabels, Gauge>,
    /// 1 for each cluster x resource's current phase and reason.
    pub(crate) sync_reason: Family<SyncReasonLabels, Gauge>,
    /// The replay log's bounds, so alerts can compare its size with them.
    pub(crate) replay_log_max_size: Gauge,
    pub(crate) replay_log_max_bytes: Gauge,
    /// Tasks seen finished (`tasks_finished_total`), counted at scrape time.
    pub(crate) tasks_finished: Family<TaskLabels, Counter>,
    /// Ids of finished tasks the hub still holds that are already counted;
    /// bounded by the task store's own bound (ids leave when their topic does).
    counted_tasks: parking_lot::Mutex<std::collections::HashSet<String>>,
    pub(crate) watch_lists: Family<ResourceLabels, Counter>,
    pub(crate) watch_errors: Family<WatchLabels, Counter>,
    pub(crate) probe_latency: Family<ClusterLabels, Histogram>,
    /// Changes a full subscriber queue turned into a later snapshot
    /// (`lagged_changes_total`): subscribers falling behind.
    pub(crate) lagged_changes: Counter,
    /// The hub sequence already folded into `hub_changes`.
    seen_seq: std::sync::atomic::AtomicU64,
    /// The hub's lag count already folded into `lagged_changes`.
    seen_lag: std::sync::atomic::AtomicU64,
    /// Accepted TCP connections (src/connections.rs).
    pub(crate) connections: ConnectionMetrics,
    /// Reloads of the member configuration (src/members/reload.rs).
    pub(crate) reloads: ReloadMetrics,
    /// The Karpor source (src/karpor/source.rs).
    pub(crate) karpor: KarporMetrics,
    /// Status writes to Karpor's objects (src/karpor/writer.rs).
    pub(crate) karpor_writer: KarporWriterMetrics,
    /// Member ownership through Leases (src/scale/).
    pub(crate) leases: LeaseMetrics,
    /// The stream of changes between replicas (src/scale/stream.rs).
    pub(crate) stream: StreamMetrics,
}

/// The stream of changes over NATS JetStream: what this replica published
/// and consumed, and how far its consumer is behind. Every family has one
/// series, labelled with the stream's name, once the stream runs: without
/// `--nats` there are none.
#[derive(Debug, Default)]
pub(crate) struct StreamMetrics {
    published: Family<StreamLabels, Counter>,
    publish_errors: Family<StreamLabels, Counter>,
    consumed: Family<StreamLabels, Counter>,
    lag: Family<StreamLabels, Gauge>,
    connected: Family<StreamLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    stream: String,
}

impl StreamMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "stream_published",
            "Changes of the members this replica runs published to the stream of changes",
            self.published.clone(),
        );
        registry.register(
            "stream_publish_errors",
            "Publishes to the stream of changes that failed (the topic's current document is published again later)",
            self.publish_errors.clone(),
        );
        registry.register(
            "stream_consumed",
            "Messages this replica read from the stream of changes (its own and those of members it runs are read and skipped)",
            self.consumed.clone(),
        );
        registry.register(
            "stream_consumer_lag_messages",
            "Messages of the stream of changes this replica's consumer has not read yet, as of its last message",
            self.lag.clone(),
        );
        registry.register(
            "stream_connected",
            "1 while this replica is connected to the NATS server of the stream of changes (as the connection part of /readyz/Nats), else 0",
            self.connected.clone(),
        );
    }

    fn labels(stream: &str) -> StreamLabels {
        StreamLabels {
            stream: stream.to_string(),
        }
    }

    /// The stream runs: every series exists from 0.
    pub(crate) fn start(&self, stream: &str) {
        let labels = Self::labels(stream);
        self.published.get_or_create(&labels).inc_by(0);
        self.publish_errors.get_or_create(&labels).inc_by(0);
        self.consumed.get_or_create(&labels).inc_by(0);
        self.lag.get_or_create(&labels).set(0);
    }

    /// The client connected to the server, or lost it.
    pub(crate) fn connected(&self, stream: &str, up: bool) {
        self.connected
            .get_or_create(&Self::labels(stream))
            .set(i64::from(up));
    }

    pub(crate) fn published(&self, stream: &str, ok: bool) {
        let family = if ok {
            &self.published
        } else {
            &self.publish_errors
        };
        family.get_or_create(&Self::labels(stream)).inc();
    }

    pub(crate) fn consumed(&self, stream: &str, lag: u64) {
        let labels = Self::labels(stream);
        self.consumed.get_or_create(&labels).inc();
        self.lag
            .get_or_create(&labels)
            .set(i64::try_from(lag).unwrap_or(i64::MAX));
    }
}

/// Member ownership through Leases: members owned, Lease changes, and
/// whether the Leases can be read.
#[derive(Debug, Default)]
pub(crate) struct LeaseMetrics {
    pub(crate) owned: Gauge,
    changes: Family<ChangeLabels, Counter>,
    /// One series, labelled with the Leases' namespace, once ownership
    /// runs: without Leases it has none (an alert on it stays quiet).
    store_up: Family<NamespaceLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabels {
    namespace: String,
}

/// The Lease changes counted, in the order they are exported.
const LEASE_CHANGES: [&str; 3] = ["acquired", "released", "lost"];

impl LeaseMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "lease_owned_members",
            "Member clusters this replica owns (holds the Lease of, runs the sources of)",
            self.owned.clone(),
        );
        registry.register(
            "lease_changes",
            "Member Lease changes of this replica: acquired, released (handed over or at shutdown), lost (not renewed in time, or taken)",
            self.changes.clone(),
        );
        registry.register(
            "lease_store_up",
            "1 while this replica has listed the Leases of the host cluster within a lease duration (as /readyz/Leases), else 0; only with Leases",
            self.store_up.clone(),
        );
    }

    /// Ownership starts: every change counter exists from 0 (so that
    /// `increase()` sees the first one), and the store is not read yet.
    pub(crate) fn start(&self, namespace: &str) {
        for change in LEASE_CHANGES {
            self.changes
                .get_or_create(&ChangeLabels { change })
                .inc_by(0);
        }
        self.store(namespace, false);
    }

    /// Whether the Leases were listed within a lease duration.
    pub(crate) fn store(&self, namespace: &str, up: bool) {
        self.store_up
            .get_or_create(&NamespaceLabels {
                namespace: namespace.to_string(),
            })
            .set(i64::from(up));
    }

    /// Counts one change: `acquired`, `released` or `lost`.
    pub(crate) fn change(&self, change: &'static str) {
        debug_assert!(LEASE_CHANGES.contains(&change), "{change}");
        self.changes.get_or_create(&ChangeLabels { change }).inc();
    }
}

/// The Karpor source: whether Karpor answers, its errors, and what its
/// Cluster objects became.
#[derive(Debug, Default)]
pub(crate) struct KarporMetrics {
    pub(crate) connected: Gauge,
    errors: Family<KindLabels, Counter>,
    clusters: Family<StateLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

impl KarporMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "karpor_connected",
            "1 while both Karpor watches run (the last known members keep running when 0)",
            self.connected.clone(),
        );
        registry.register(
            "karpor_errors",
            "Failures reaching Karpor, by kind (kubeconfig, client, discovery, kind_not_served, watch)",
            self.errors.clone(),
        );
        registry.register(
            "karpor_clusters",
            "Karpor Cluster objects by what they became: running, held (Unhealthy without sources) or skipped",
            self.clusters.clone(),
        );
    }

    /// Counts a failure reaching Karpor.
    pub(crate) fn error(&self, kind: &'static str) {
        self.errors.get_or_create(&KindLabels { kind }).inc();
    }

    /// What the Cluster objects became at the last conversion.
    pub(crate) fn clusters(&self, running: usize, held: usize, skipped: usize) {
        for (state, n) in [("running", running), ("held", held), ("skipped", skipped)] {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            self.clusters.get_or_create(&StateLabels { state }).set(n);
        }
    }
}

/// Reloads of the member configuration (SIGHUP, a changed file): applied
/// or refused, and whether the last one applied.
#[derive(Debug, Default)]
pub(crate) struct ReloadMetrics {
    results: Family<ResultLabels, Counter>,
    last_ok: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

impl ReloadMetrics {
    fn register(&self, registry: &mut Registry) {
        self.last_ok.set(1);
        registry.register(
            "config_reloads",
            "Reloads of the configuration: applied (changes or none) or refused (invalid; the running one kept)",
            self.results.clone(),
        );
        registry.register(
            "config_last_reload_successful",
            "1 when the last reload of the configuration applied (or none was tried), 0 when it was refused",
            self.last_ok.clone(),
        );
    }

    /// Counts a reload: `applied` or `refused`.
    pub(crate) fn record(&self, applied: bool) {
        let result = if applied { "applied" } else { "refused" };
        self.results.get_or_create(&ResultLabels { result }).inc();
        self.last_ok.set(i64::from(applied));
    }
}

/// Status writes to Karpor's objects (src/karpor/writer.rs): results per
/// kind, and whether this replica stands by for another writer.
#[derive(Debug, Default)]
pub(crate) struct KarporWriterMetrics {
    writes: Family<WriteLabels, Counter>,
    pub(crate) standby: Gauge,
    pub(crate) foreign_writers: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    kind: &'static str,
    result: &'static str,
}

impl KarporWriterMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "karpor_status_writes",
            "Status writes to Karpor's objects by kind (Cluster, SyncRegistry) and result: written, conflict (re-read and retried), gone (404), error",
            self.writes.clone(),
        );
        registry.register(
            "karpor_status_writer_standby",
            "1 while this replica writes no Karpor status because another kube-pulse replica does",
            self.standby.clone(),
        );
        registry.register(
            "karpor_status_foreign_writers",
            "Other kube-pulse replicas seen writing Karpor status recently (managedFields)",
            self.foreign_writers.clone(),
        );
    }

    /// Counts one write of a `kind` object with its `result`.
    pub(crate) fn record(&self, kind: &'static str, result: &'static str) {
        self.writes
            .get_or_create(&WriteLabels { kind, result })
            .inc();
    }

    /// Writes of a `kind` object with `result` so far.
    #[cfg(test)]
    pub(crate) fn count(&self, kind: &'static str, result: &'static str) -> u64 {
        self.writes
            .get_or_create(&WriteLabels { kind, result })
            .get()
    }
}

/// Accepted TCP connections: open, refused and closed by limit or timeout,
/// failed accepts (src/connections.rs, docs/SECURITY.md "Connections").
#[derive(Debug, Default)]
pub(crate) struct ConnectionMetrics {
    pub(crate) open: Gauge,
    refused: Family<ReasonLabels, Counter>,
    closed: Family<ReasonLabels, Counter>,
    accept_errors: Family<ReasonLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

impl ConnectionMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "tcp_connections",
            "Open accepted TCP connections",
            self.open.clone(),
        );
        registry.register(
            "tcp_refused",
            "Connections closed at accept: per_ip cap or gateway-wide ceiling, nothing idle to shed",
            self.refused.clone(),
        );
        registry.register(
            "tcp_closed",
            "Connections closed by the gateway: shed, header_timeout, idle_timeout, handshake_timeout",
            self.closed.clone(),
        );
        registry.register(
            "accept_errors",
            "Failed accepts: fd_exhausted (EMFILE/ENFILE) or other",
            self.accept_errors.clone(),
        );
    }

    pub(crate) fn refused(&self, reason: &'static str) {
        self.refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub(crate) fn closed(&self, reason: &'static str) {
        self.closed.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub(crate) fn accept_error(&self, reason: &'static str) {
        self.accept_errors
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}

// By hand: the registry holds every instrument; a few totals say enough.
impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("messages_sent", &self.messages_sent.get())
            .field("hub_changes", &self.hub_changes.get())
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
            subscriptions: Gauge::default(),
            messages_sent: Counter::default(),
            bytes_sent: Counter::default(),
            collapses: Counter::default(),
            slow_consumer_closes: Counter::default(),
            rejected_connections: Counter::default(),
            hub_changes: Counter::default(),
            lagged_changes: Counter::default(),
            seen_lag: std::sync::atomic::AtomicU64::new(0),
            hub_topics: Gauge::default(),
            replay_log_size: Gauge::default(),
            replay_log_bytes: Gauge::default(),
            pattern_index_entries: Gauge::default(),
            pattern_index_nodes: Gauge::default(),
            delivery_lag: LagHistogram::new(exponential_buckets(0.0001, 2.0, 18)),
            cluster_phase: Family::default(),
            sync_phase: Family::default(),
            cluster_reason: Family::default(),
            sync_reason: Family::default(),
            replay_log_max_size: Gauge::default(),
            replay_log_max_bytes: Gauge::default(),
            tasks_finished: Family::default(),
            counted_tasks: Default::default(),
            watch_lists: Family::default(),
            watch_errors: Family::default(),
            probe_latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 14))
            }),
            seen_seq: Default::default(),
            connections: ConnectionMetrics::default(),
            reloads: ReloadMetrics::default(),
            karpor_writer: KarporWriterMetrics::default(),
            karpor: KarporMetrics::default(),
            leases: LeaseMetrics::default(),
            stream: StreamMetrics::default(),
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
            m.subscriptions.clone(),
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
            m.hub_changes.clone(),
        );
        registry.register("hub_topics", "Topics held by the hub", m.hub_topics.clone());
        registry.register(
            "lagged_changes",
            "Changes a full subscriber queue turned into a later snapshot (subscribers falling behind)",
            m.lagged_changes.clone(),
        );
        registry.register(
            "replay_log_size",
            "Changes kept for resume",
            m.replay_log_size.clone(),
        );
        registry.register(
            "replay_log_bytes",
            "Estimated bytes of the changes kept for resume (their JSON messages)",
            m.replay_log_bytes.clone(),
        );
        registry.register(
            "pattern_index_entries",
            "(pattern, subscription) entries in the hub's pattern index",
            m.pattern_index_entries.clone(),
        );
        registry.register(
            "pattern_index_nodes",
            "Trie nodes of the hub's pattern index (follows the live subscriptions)",
            m.pattern_index_nodes.clone(),
        );
        registry.register(
            "delivery_lag_seconds",
            "Time from a hub change to its message being written",
            m.delivery_lag.clone(),
        );
        registry.register(
            "cluster_phase",
            "1 for the current phase of each member cluster",
            m.cluster_phase.clone(),
        );
        registry.register(
            "sync_phase",
            "1 for the current phase of each cluster x resource",
            m.sync_phase.clone(),
        );
        registry.register(
            "cluster_reason",
            "1 for the current phase and reason of each member cluster",
            m.cluster_reason.clone(),
        );
        registry.register(
            "sync_reason",
            "1 for the current phase and reason of each cluster x resource",
            m.sync_reason.clone(),
        );
        registry.register(
            "replay_log_max_size",
            "Changes the replay log keeps at most",
            m.replay_log_max_size.clone(),
        );
        registry.register(
            "replay_log_max_bytes",
            "Estimated bytes the replay log keeps at most (--replay-log-bytes)",
            m.replay_log_max_bytes.clone(),
        );
        registry.register(
            "tasks_finished",
            "Tasks seen finished, by type, status and reason",
            m.tasks_finished.clone(),
        );
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
    pub(crate) fn observe_delivery(
        &self,
        at: Option<chrono::DateTime<chrono::Utc>>,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        if let Some(at) = at {
            let micros = (now - at).num_microseconds().unwrap_or(0).max(0);
            self.delivery_lag.observe_micros(micros as u64);
        }
    }

    /// Counts `messages` push messages of `bytes` bytes written to a session.
    pub fn sent(&self, messages: usize, bytes: usize) {
        self.messages_sent.inc_by(messages as u64);
        self.bytes_sent.inc_by(bytes as u64);
    }

    /// Refreshes the hub's gauges and change count, then encodes.
    pub fn render(&self, hub: &Hub) -> String {
        let stats = hub.stats();
        self.subscriptions.set(stats.subscriptions as i64);
        self.hub_topics.set(stats.topics as i64);
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
        let seen = self
            .seen_seq
            .fetch_max(stats.seq, std::sync::atomic::Ordering::Relaxed);
        self.hub_changes.inc_by(stats.seq.saturating_sub(seen));
        let lagged = self
            .seen_lag
            .fetch_max(stats.lag_events, std::sync::atomic::Ordering::Relaxed);
        self.lagged_changes
            .inc_by(stats.lag_events.saturating_sub(lagged));
        self.cluster_phase.clear();
        self.cluster_reason.clear();
        for doc in hub.list(&[Pattern::parse("clusters/*").expect("valid")]) {
            let cluster = doc.doc["name"].as_str().unwrap_or("").to_string();
            let current = doc.doc["phase"].as_str().unwrap_or("");
            for phase in CLUSTER_PHASES {
                let labels = ClusterPhaseLabels {
                    cluster: cluster.clone(),
                    phase: phase.into(),
                };
                self.cluster_phase
                    .get_or_create(&labels)
                    .set(i64::from(phase == current));
            }
            self.cluster_reason
                .get_or_create(&ClusterReasonLabels {
                    cluster,
                    phase: current.into(),
                    reason: doc.doc["reason"].as_str().unwrap_or("").into(),
                })
                .set(1);
        }
        self.sync_phase.clear();
        self.sync_reason.clear();
        for doc in hub.list(&[Pattern::parse("clusters/*/sync/**").expect("valid")]) {
            let cluster = doc.doc["cluster"].as_str().unwrap_or("").to_string();
            let r = &doc.doc["resource"];
            let group = r["group"]
                .as_str()
                .filter(|g| !g.is_empty())
                .unwrap_or("core");
            let resource = format!(
                "{group}/{}/{}",
                r["version"].as_str().unwrap_or(""),
                r["resource"].as_str().unwrap_or("")
            );
            let current = doc.doc["phase"].as_str().unwrap_or("");
            for phase in SYNC_PHASES {
                let labels = PhaseLabels {
                    cluster: cluster.clone(),
                    resource: resource.clone(),
                    phase: phase.into(),
                };
                self.sync_phase
                    .get_or_create(&labels)
                    .set(i64::from(phase == current));
            }
            self.sync_reason
                .get_or_create(&SyncReasonLabels {
                    cluster,
                    resource,
                    phase: current.into(),
                    reason: doc.doc["reason"].as_str().unwrap_or("").into(),
                })
                .set(1);
        }
        self.count_finished_tasks(hub);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String succeeds");
        out
    }

    /// Counts each task the hub holds as finished (`Succeeded`, `Failed`,
    /// `Cancelled`) once. Tasks stay in the hub for the task retention
    /// (an hour by default), far longer than a scrape interval, so a
    /// scraped gateway misses none; ids leave the set with their topic.
    fn count_finished_tasks(&self, hub: &Hub) {
        let mut counted = self.counted_tasks.lock();
        let mut present = std::collections::HashSet::new();
        for doc in hub.list(&[Pattern::parse("tasks/*").expect("valid")]) {
            let status = doc.doc["status"].as_str().unwrap_or("");
            if !matches!(status, "Succeeded" | "Failed" | "Cancelled") {
                continue;
            }
            let id = doc.doc["id"].as_str().unwrap_or("").to_string();
            if !counted.contains(&id) {
                self.tasks_finished
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

/// A histogram observed with atomic adds, in microseconds: the delivery lag
/// is observed once per delivered message, from every worker thread at
/// once, and prometheus-client's histogram takes a mutex per observation
/// (two workers fanning one change out to a thousand subscribers contend
/// on it). Encoded as an ordinary Prometheus histogram in seconds.
#[derive(Debug, Clone)]
pub(crate) struct LagHistogram(Arc<Buckets>);

#[derive(Debug)]
struct Buckets {
    /// Upper bounds in seconds, the last +Inf.
    bounds: Vec<f64>,
    /// Upper bounds in microseconds (the last `u64::MAX`).
    bounds_micros: Vec<u64>,
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
}

impl LagHistogram {
    pub(crate) fn new(bounds: impl Iterator<Item = f64>) -> Self {
        let bounds: Vec<f64> = bounds.chain(std::iter::once(f64::INFINITY)).collect();
        let bounds_micros = bounds
            .iter()
            .map(|b| {
                if b.is_finite() {
                    (b * 1e6).round() as u64
                } else {
                    u64::MAX
                }
            })
            .collect();
        let counts = bounds.iter().map(|_| AtomicU64::new(0)).collect();
        Self(Arc::new(Buckets {
            bounds,
            bounds_micros,
            counts,
            sum_micros: AtomicU64::new(0),
        }))
    }

    pub(crate) fn observe_micros(&self, micros: u64) {
        let h = &self.0;
        let bucket = h.bounds_micros.partition_point(|&b| b < micros);
        h.counts[bucket.min(h.counts.len() - 1)].fetch_add(1, Ordering::Relaxed);
        h.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }
}

impl prometheus_client::encoding::EncodeMetric for LagHistogram {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        // Read bucket by bucket while others observe: the count is the sum
        // of what was read, so the histogram stays consistent with itself.
        let h = &self.0;
        let buckets: Vec<(f64, u64)> = h
            .bounds
            .iter()
            .zip(&h.counts)
            .map(|(&bound, count)| (bound, count.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        encoder
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
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
        let now = chrono::Utc::now();
        // (lag in microseconds): 100 µs is the first bound, inclusive.
        for micros in [0, 100, 101, 250_000, 30_000_000] {
            let at = now - chrono::Duration::microseconds(micros);
            metrics.observe_delivery(Some(at), now);
        }
        metrics.observe_delivery(None, now);
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
