//! The engine's state and its entry point (`sources ──Observation──▶
//! [engine: apply] ──▶ hub`): the members' models, and `apply`, which
//! takes one observation to the models and the hub; registering and
//! unregistering members and their metric series.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::model::{ClusterModel, ClusterSeries, Workloads};
use super::observation::Observation;
use super::transitions::{self, Subject};
use crate::hub::Hub;
use crate::metrics::{Metrics, ResourceLabels, WatchLabels};
use crate::protocol::topic;
use crate::status::cluster::{ClusterInput, ClusterStatus, Thresholds};
use crate::status::sync::SyncInput;

/// How long a gone app is kept by default; see [`crate::pipeline::PipelineConfig::app_retention`].
pub(crate) const DEFAULT_APP_RETENTION: Duration = Duration::from_secs(600);

/// The engine's state; `apply` is its whole behaviour (and what tests drive).
pub(crate) struct Engine {
    pub(super) hub: Arc<Hub>,
    metrics: Option<Arc<Metrics>>,
    pub(super) thresholds: Thresholds,
    /// How long an app stays `Stopped (NoWorkloads)` or `NotExisted` before
    /// `expire` removes its topic.
    pub(super) retention: chrono::Duration,
    pub(super) clusters: BTreeMap<String, ClusterModel>,
    /// Members pushed by an agent (`pushed.rs`).
    pub(super) pushed: BTreeMap<String, super::pushed_model::PushedModel>,
    /// The transition lines and their budget.
    pub(super) transitions: transitions::TransitionLog,
}

pub(super) fn to_doc<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).expect("status documents always serialize")
}

impl Engine {
    pub(crate) fn new(hub: Arc<Hub>, thresholds: Thresholds) -> Self {
        Self {
            hub,
            metrics: None,
            thresholds,
            retention: chrono::Duration::from_std(DEFAULT_APP_RETENTION)
                .expect("the default retention fits"),
            clusters: BTreeMap::new(),
            pushed: BTreeMap::new(),
            transitions: transitions::TransitionLog::default(),
        }
    }

    /// Records probe latencies and watch lists/errors in `metrics`.
    pub(crate) fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn record(&mut self, observation: &Observation) {
        let Some(m) = &self.metrics else { return };
        // A cluster the engine does not know (removed, or never registered)
        // gets no series: none would ever be removed.
        let Some(model) = self.clusters.get_mut(observation.cluster()) else {
            return;
        };
        match observation {
            Observation::Cluster { cluster, input } => {
                let latency = match input {
                    ClusterInput::ProbeSucceeded { latency_ms, .. } => Some(*latency_ms),
                    ClusterInput::ProbeFailed { latency_ms, .. } => *latency_ms,
                    _ => None,
                };
                if let Some(ms) = latency {
                    m.observe_probe(cluster, std::time::Duration::from_millis(ms));
                }
            }
            Observation::Sync {
                cluster,
                resource,
                input,
            } => {
                let labels = |reason: &str| WatchLabels {
                    cluster: cluster.clone(),
                    resource: resource.path(),
                    reason: reason.into(),
                };
                match input {
                    SyncInput::ListStarted => {
                        let labels = ResourceLabels {
                            cluster: cluster.clone(),
                            resource: resource.path(),
                        };
                        m.watch_lists.get_or_create(&labels).inc();
                        model.series.lists.insert((labels.cluster, labels.resource));
                    }
                    SyncInput::Failed { reason, .. } | SyncInput::FailedRetrying { reason, .. } => {
                        let labels = labels(reason);
                        m.watch_errors.get_or_create(&labels).inc();
                        let key = (labels.cluster, labels.resource, labels.reason);
                        model.series.errors.insert(key);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    /// Forgets a member taken out of the configuration: its documents leave
    /// the hub at once (subscribers get `removed`), and its metric series
    /// go. Its transition to `Removed (Unregistered)` is logged.
    fn unregister(&mut self, cluster: &str, now: DateTime<Utc>) {
        let Some(mut model) = self.clusters.remove(cluster) else {
            return;
        };
        model.status = model
            .status
            .clone()
            .step(ClusterInput::Removed, self.thresholds, now);
        let subject = Subject::Cluster { cluster };
        let lifecycle = &model.status.lifecycle;
        self.transitions
            .log_after(&subject, &topic::cluster(cluster), lifecycle, model.logged);
        for gvr in model.syncs.keys() {
            self.hub.remove(&topic::sync(cluster, &gvr.path()));
        }
        for (ns, app) in model.apps.keys() {
            self.hub.remove(&topic::app(cluster, ns, app));
        }
        self.hub.remove(&topic::cluster(cluster));
        if let Some(m) = &self.metrics {
            for (cluster, resource) in model.series.lists {
                m.watch_lists.remove(&ResourceLabels { cluster, resource });
            }
            for (cluster, resource, reason) in model.series.errors {
                m.watch_errors.remove(&WatchLabels {
                    cluster,
                    resource,
                    reason,
                });
            }
            m.probe_latency.remove(&crate::metrics::ClusterLabels {
                cluster: cluster.into(),
            });
        }
    }

    /// Applies one observation at time `now`.
    pub(crate) fn apply(&mut self, observation: Observation, now: DateTime<Utc>) {
        self.record(&observation);
        match observation {
            Observation::Registered { cluster, server } => {
                let model = match self.clusters.entry(cluster.clone()) {
                    Entry::Occupied(model) => model.into_mut(),
                    Entry::Vacant(vacant) => {
                        let status = self
                            .hub
                            .get(&topic::cluster(&cluster))
                            .and_then(|held| ClusterStatus::restore(&held.doc, &cluster));
                        if let Some(status) = &status {
                            tracing::info!(cluster = %cluster, phase = %status.phase(), since = %status.lifecycle.since, "member continues its last published status");
                        }
                        let status =
                            status.unwrap_or_else(|| ClusterStatus::new(&cluster, &server, now));
                        vacant.insert(ClusterModel {
                            // Transitions restored were logged where they happened.
                            logged: transitions::last(&status.lifecycle),
                            status,
                            syncs: BTreeMap::new(),
                            workloads: Workloads::default(),
                            namespaces: None,
                            apps: BTreeMap::new(),
                            tasks: HashMap::new(),
                            series: ClusterSeries::default(),
                            pods: None,
                            pod_figures: Default::default(),
                            nodes: None,
                            warnings: BTreeMap::new(),
                            pods_watched: true,
                        })
                    }
                };
                model.status.server = server;
                self.publish_cluster(&cluster);
            }
            Observation::Unregistered { cluster } => {
                self.hub.freshness().forget(&cluster);
                if !self.detach(&cluster) {
                    self.unregister(&cluster, now);
                }
            }
            Observation::Pushed { cluster, input } => self.pushed_input(&cluster, input, now),
            Observation::Cluster { cluster, input } => {
                // A probe answered: the member's documents are current now
                // (heartbeats' `asOf`).
                if matches!(input, ClusterInput::ProbeSucceeded { .. }) {
                    self.hub.freshness().mark(&cluster, now);
                }
                self.cluster_input(&cluster, input, now)
            }
            Observation::Sync {
                cluster,
                resource,
                input,
            } => self.sync_input(&cluster, resource, input, now),
            Observation::WorkloadsListed {
                cluster,
                kind,
                items,
            } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let mut touched: BTreeSet<(String, String)> = model.apps.keys().cloned().collect();
                model.workloads.remove_kind(kind);
                for w in items {
                    touched.insert((w.namespace.clone(), w.app.clone()));
                    model
                        .workloads
                        .insert((kind, w.namespace.clone(), w.name.clone()), w);
                }
                self.refresh_apps(&cluster, touched, now);
            }
            Observation::WorkloadApplied { cluster, workload } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let key = (
                    workload.kind,
                    workload.namespace.clone(),
                    workload.name.clone(),
                );
                let mut touched =
                    BTreeSet::from([(workload.namespace.clone(), workload.app.clone())]);
                if let Some(old) = model.workloads.insert(key, workload) {
                    // The app label may have changed: refresh the old app too.
                    touched.insert((old.namespace, old.app));
                }
                self.refresh_apps(&cluster, touched, now);
            }
            Observation::WorkloadDeleted {
                cluster,
                kind,
                namespace,
                name,
            } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                if let Some(old) = model.workloads.remove(&(kind, namespace, name)) {
                    model.forget_warnings(kind, &old.namespace, &old.name);
                    self.refresh_apps(&cluster, BTreeSet::from([(old.namespace, old.app)]), now);
                }
            }
            Observation::NamespacesListed { cluster, names } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                model.namespaces = Some(names.into_iter().collect());
                let touched = model.apps.keys().cloned().collect();
                self.refresh_apps(&cluster, touched, now);
            }
            Observation::NamespaceApplied { cluster, name } => {
                self.namespace_event(&cluster, &name, true, now)
            }
            Observation::NamespaceDeleted { cluster, name } => {
                self.namespace_event(&cluster, &name, false, now)
            }
            Observation::PodsWatched { .. }
            | Observation::PodsListed { .. }
            | Observation::PodApplied { .. }
            | Observation::PodDeleted { .. }
            | Observation::WarningsListed { .. }
            | Observation::WarningApplied { .. }
            | Observation::WarningDeleted { .. } => self.pod_input(observation, now),
            Observation::NodesListed { .. }
            | Observation::NodeApplied { .. }
            | Observation::NodeDeleted { .. } => self.node_input(observation, now),
            Observation::Task {
                cluster,
                namespace,
                app,
                task,
            } => {
                if self.is_pushed(&cluster) {
                    self.pushed_task(&cluster, (namespace, app), task);
                    return;
                }
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let key = (namespace, app);
                match task {
                    Some(task) => model.tasks.insert(key.clone(), task),
                    None => model.tasks.remove(&key),
                };
                self.refresh_apps(&cluster, BTreeSet::from([key]), now);
            }
        }
    }
}
