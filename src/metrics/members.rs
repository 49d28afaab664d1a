//! The member clusters' families (`config reloads, sources ──events──▶
//! [metrics] ──▶ registry`; `hub ──cluster and sync documents, at
//! scrape──▶ [metrics]`): reloads of the member configuration
//! (src/pipeline/reload.rs), the labels of the sources' lists, watch
//! errors and probes (src/engine/), and the current phase and reason of
//! every cluster and cluster x resource, read from the hub's documents.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::hub::{Hub, Pattern};

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
    pub(super) fn register(&self, registry: &mut Registry) {
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClusterLabels {
    pub(crate) cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterPhaseLabels {
    cluster: String,
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    cluster: String,
    resource: String,
    phase: String,
}

/// The current phase and reason of a member cluster (one series per cluster).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterReasonLabels {
    cluster: String,
    phase: String,
    reason: String,
}

/// The current phase and reason of one cluster x resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SyncReasonLabels {
    cluster: String,
    resource: String,
    phase: String,
    reason: String,
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
const SYNC_PHASES: [&str; 7] = [
    "Pending",
    "Listing",
    "Syncing",
    "Error",
    "Backoff",
    "NotServed",
    "Stopped",
];

/// The current phase and reason of every member cluster and cluster x
/// resource, rebuilt from the hub's documents at every scrape (a removed
/// cluster's series go with it).
#[derive(Debug, Default)]
pub(super) struct PhaseMetrics {
    cluster_phase: Family<ClusterPhaseLabels, Gauge>,
    sync_phase: Family<PhaseLabels, Gauge>,
    /// 1 for each cluster's current phase and reason (alerts name the reason).
    cluster_reason: Family<ClusterReasonLabels, Gauge>,
    /// 1 for each cluster x resource's current phase and reason.
    sync_reason: Family<SyncReasonLabels, Gauge>,
}

impl PhaseMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "cluster_phase",
            "1 for the current phase of each member cluster",
            self.cluster_phase.clone(),
        );
        registry.register(
            "sync_phase",
            "1 for the current phase of each cluster x resource",
            self.sync_phase.clone(),
        );
        registry.register(
            "cluster_reason",
            "1 for the current phase and reason of each member cluster",
            self.cluster_reason.clone(),
        );
        registry.register(
            "sync_reason",
            "1 for the current phase and reason of each cluster x resource",
            self.sync_reason.clone(),
        );
    }

    /// Sets the gauges from the hub's `clusters/*` and
    /// `clusters/*/sync/**` documents.
    pub(super) fn refresh(&self, hub: &Hub) {
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
    }
}
