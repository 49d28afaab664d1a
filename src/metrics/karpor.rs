//! The Karpor families (`Karpor source, status writer ──events──▶
//! [metrics] ──▶ registry`): whether Karpor answers and what its Cluster
//! objects became (src/karpor/reader.rs), and the status written back onto
//! its objects (src/karpor/writer.rs).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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
    pub(super) fn register(&self, registry: &mut Registry) {
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
    pub(super) fn register(&self, registry: &mut Registry) {
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
