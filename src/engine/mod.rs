//! The engine: the single task between sources and the hub
//! (`sources ──Observation──▶ [engine: status machines] ──▶ hub`). It keeps
//! per-cluster models (workloads, namespaces, sync states), runs the status
//! machines, and puts the resulting documents into the hub, which publishes
//! only real changes — so a relist that changes nothing publishes nothing.
//!
//! A member's machines start from the documents the hub already holds for
//! it, when it holds any: with a stream of changes, those another replica
//! published while it ran the member, so a new owner continues them (phase,
//! `since`, history). Without one the hub holds none of a member the
//! engine starts: a removed member's topics go with it.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod observation;
mod summaries;
#[cfg(test)]
mod tests;
mod transitions;

pub use observation::Observation;

use crate::hub::{Hub, topic};
use crate::metrics::{Metrics, ResourceLabels, WatchLabels};
use crate::status::app::{ActiveTask, AppStatus, Workload};
use crate::status::cluster::{
    CacheInfo, ClusterInput, ClusterPhase, ClusterStatus, ResourceCounts, Thresholds,
};
use crate::status::pods::{self, EventKey, PodSummary, Warning};
use crate::status::sync::{Gvr, SyncInput, SyncPhase, SyncStatus};
use transitions::Subject;

/// How long a gone app is kept by default; see [`crate::pipeline::PipelineConfig::app_retention`].
pub(crate) const DEFAULT_APP_RETENTION: Duration = Duration::from_secs(600);

type WorkloadKey = (&'static str, String, String);

/// Warning events kept per member at most (one per event object; the
/// oldest by `lastSeen` go first). Events of deleted pods and workloads
/// are dropped at once, so this only bounds events of objects never seen.
pub(crate) const MAX_WARNINGS: usize = 10_000;

/// Pods by namespace, then name.
type PodIndex = BTreeMap<String, BTreeMap<String, PodSummary>>;

struct ClusterModel {
    status: ClusterStatus,
    /// The number of the cluster's last transition already logged.
    logged: u64,
    syncs: BTreeMap<Gvr, SyncStatus>,
    workloads: HashMap<WorkloadKey, Workload>,
    /// None until the first namespace list completed.
    namespaces: Option<BTreeSet<String>>,
    apps: BTreeMap<(String, String), AppStatus>,
    /// Active tasks by (namespace, app): the apps' transitional slots.
    tasks: HashMap<(String, String), ActiveTask>,
    /// Metric series of this cluster, removed with it (bounded: resources x reasons).
    series: ClusterSeries,
    /// None until the first pod list completed (and while the pod watch is off).
    pods: Option<PodIndex>,
    /// Warning events about pods and workloads, by event key; at most [`MAX_WARNINGS`].
    warnings: BTreeMap<EventKey, Warning>,
}

impl ClusterModel {
    /// The apps whose workloads select `pod` (usually one).
    fn apps_of_pod(&self, pod: &PodSummary) -> BTreeSet<(String, String)> {
        self.workloads
            .values()
            .filter(|w| w.namespace == pod.namespace && pod.matches(&w.selector))
            .map(|w| (w.namespace.clone(), w.app.clone()))
            .collect()
    }

    /// The apps a warning is about: its workload's, or its pod's.
    fn apps_of_warning(&self, w: &Warning) -> BTreeSet<(String, String)> {
        if w.kind == "Pod" {
            self.pods
                .as_ref()
                .and_then(|p| p.get(&w.namespace)?.get(&w.name))
                .map(|pod| self.apps_of_pod(pod))
                .unwrap_or_default()
        } else {
            self.workloads
                .values()
                .filter(|x| x.kind == w.kind && x.namespace == w.namespace && x.name == w.name)
                .map(|x| (x.namespace.clone(), x.app.clone()))
                .collect()
        }
    }

    /// Drops the warnings about one object (it is gone).
    fn forget_warnings(&mut self, kind: &str, namespace: &str, name: &str) {
        self.warnings
            .retain(|_, w| !(w.kind == kind && w.namespace == namespace && w.name == name));
    }

    /// Keeps at most [`MAX_WARNINGS`], dropping the oldest.
    fn cap_warnings(&mut self) {
        while self.warnings.len() > MAX_WARNINGS {
            let oldest = self
                .warnings
                .iter()
                .min_by_key(|(_, w)| w.last_seen)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(key) => self.warnings.remove(&key),
                None => break,
            };
        }
    }
}

/// The watch metric series one cluster created (prometheus-client cannot
/// list a family's series, so the engine remembers them to remove them).
#[derive(Default)]
struct ClusterSeries {
    lists: BTreeSet<(String, String)>,
    errors: BTreeSet<(String, String, String)>,
}

/// The engine's state; `apply` is its whole behaviour (and what tests drive).
pub(crate) struct Engine {
    hub: Arc<Hub>,
    metrics: Option<Arc<Metrics>>,
    thresholds: Thresholds,
    /// How long an app stays `Stopped (NoWorkloads)` or `NotExisted` before
    /// `expire` removes its topic.
    retention: chrono::Duration,
    clusters: BTreeMap<String, ClusterModel>,
}

fn to_doc<T: serde::Serialize>(value: &T) -> serde_json::Value {
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
        }
    }

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
        transitions::log_after(&subject, &topic::cluster(cluster), lifecycle, model.logged);
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
                            workloads: HashMap::new(),
                            namespaces: None,
                            apps: BTreeMap::new(),
                            tasks: HashMap::new(),
                            series: ClusterSeries::default(),
                            pods: None,
                            warnings: BTreeMap::new(),
                        })
                    }
                };
                model.status.server = server;
                self.publish_cluster(&cluster);
            }
            Observation::Unregistered { cluster } => self.unregister(&cluster, now),
            Observation::Cluster { cluster, input } => self.cluster_input(&cluster, input, now),
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
                model.workloads.retain(|(k, _, _), _| *k != kind);
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
            Observation::PodsListed { .. }
            | Observation::PodApplied { .. }
            | Observation::PodDeleted { .. }
            | Observation::WarningsListed { .. }
            | Observation::WarningApplied { .. }
            | Observation::WarningDeleted { .. } => self.pod_input(observation, now),
            Observation::Task {
                cluster,
                namespace,
                app,
                task,
            } => {
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

    /// Pods and warning events: updates the model, then the apps they touch.
    fn pod_input(&mut self, observation: Observation, now: DateTime<Utc>) {
        let (cluster, touched) = match observation {
            Observation::PodsListed { cluster, items } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let mut index = PodIndex::new();
                for pod in items {
                    index
                        .entry(pod.namespace.clone())
                        .or_default()
                        .insert(pod.name.clone(), pod);
                }
                // Warnings of pods that are gone go with them.
                model.warnings.retain(|_, w| {
                    w.kind != "Pod"
                        || index
                            .get(&w.namespace)
                            .is_some_and(|p| p.contains_key(&w.name))
                });
                model.pods = Some(index);
                (cluster, model.apps.keys().cloned().collect())
            }
            Observation::PodApplied { cluster, pod } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let mut touched = model.apps_of_pod(&pod);
                let index = model.pods.get_or_insert_with(PodIndex::new);
                let old = index
                    .entry(pod.namespace.clone())
                    .or_default()
                    .insert(pod.name.clone(), pod);
                if let Some(old) = old {
                    // Its labels may have changed: the old apps too.
                    touched.extend(model.apps_of_pod(&old));
                }
                (cluster, touched)
            }
            Observation::PodDeleted {
                cluster,
                namespace,
                name,
            } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let old = model
                    .pods
                    .as_mut()
                    .and_then(|p| p.get_mut(&namespace))
                    .and_then(|p| p.remove(&name));
                if let Some(p) = model.pods.as_mut()
                    && p.get(&namespace).is_some_and(BTreeMap::is_empty)
                {
                    p.remove(&namespace);
                }
                model.forget_warnings("Pod", &namespace, &name);
                let touched = old.map(|o| model.apps_of_pod(&o)).unwrap_or_default();
                (cluster, touched)
            }
            Observation::WarningsListed { cluster, items } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                model.warnings = items.into_iter().collect();
                model.cap_warnings();
                (cluster, model.apps.keys().cloned().collect())
            }
            Observation::WarningApplied {
                cluster,
                key,
                warning,
            } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let touched = model.apps_of_warning(&warning);
                model.warnings.insert(key, warning);
                model.cap_warnings();
                (cluster, touched)
            }
            Observation::WarningDeleted { cluster, key } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let touched = match model.warnings.remove(&key) {
                    Some(old) => model.apps_of_warning(&old),
                    None => BTreeSet::new(),
                };
                (cluster, touched)
            }
            _ => return,
        };
        self.refresh_apps(&cluster, touched, now);
    }

    fn cluster_input(&mut self, cluster: &str, input: ClusterInput, now: DateTime<Utc>) {
        let thresholds = self.thresholds;
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        let before = model.status.phase();
        model.status = model.status.clone().step(input, thresholds, now);
        let after = model.status.phase();
        let sync_input = match (before, after) {
            (b, ClusterPhase::Unhealthy) if b != ClusterPhase::Unhealthy => {
                Some(SyncInput::ClusterDown)
            }
            (ClusterPhase::Unhealthy, ClusterPhase::Healthy | ClusterPhase::Degraded) => {
                Some(SyncInput::ClusterUp)
            }
            _ => None,
        };
        let gvrs: Vec<Gvr> = model.syncs.keys().cloned().collect();
        // The cluster's own transition before those it causes in its syncs.
        self.log_cluster(cluster);
        if let Some(input) = sync_input {
            for gvr in gvrs {
                self.step_sync(cluster, &gvr, input.clone(), now);
            }
        }
        self.recount(cluster, now);
        self.publish_cluster(cluster);
    }

    fn step_sync(&mut self, cluster: &str, gvr: &Gvr, input: SyncInput, now: DateTime<Utc>) {
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        let (resource, topic) = (gvr.path(), topic::sync(cluster, &gvr.path()));
        // A resource first observed in this run of the member continues the
        // document the hub holds, if any (published by its previous owner).
        let sync = model.syncs.remove(gvr).unwrap_or_else(|| {
            self.hub
                .get(&topic)
                .and_then(|held| SyncStatus::restore(&held.doc, cluster, gvr))
                .unwrap_or_else(|| SyncStatus::new(cluster, gvr.clone(), now))
        });
        let before = transitions::last(&sync.lifecycle);
        let sync = sync.step(input, now);
        let subject = Subject::Sync {
            cluster,
            resource: &resource,
        };
        transitions::log_after(&subject, &topic, &sync.lifecycle, before);
        self.hub.put(&topic, to_doc(&sync));
        model.syncs.insert(gvr.clone(), sync);
    }

    fn sync_input(&mut self, cluster: &str, gvr: Gvr, input: SyncInput, now: DateTime<Utc>) {
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        // The source ends a watch before reporting its removal, so whatever a
        // removed resource reports afterwards comes from a new watch: the
        // resource is back in a registry, with a status of its own.
        if !matches!(input, SyncInput::Removed)
            && model.syncs.get(&gvr).is_some_and(SyncStatus::is_removed)
        {
            let fresh = SyncStatus::new(cluster, gvr.clone(), now);
            model.syncs.insert(gvr.clone(), fresh);
        }
        self.step_sync(cluster, &gvr, input, now);
        self.recount(cluster, now);
        self.publish_cluster(cluster);
    }

    /// Feeds the cluster machine the current sync counts when they changed.
    fn recount(&mut self, cluster: &str, now: DateTime<Utc>) {
        let thresholds = self.thresholds;
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        // Before its first sync observation a member keeps the counts its
        // document shows: none for a new one, the last published ones for
        // one continued from another owner (not zero until its watches report).
        if model.syncs.is_empty() {
            return;
        }
        let active = model.syncs.values().filter(|s| !s.is_removed());
        let mut counts = ResourceCounts::default();
        for s in active {
            counts.total += 1;
            if s.phase() == SyncPhase::Syncing {
                counts.synced += 1;
            }
            if s.is_failing() {
                counts.failing += 1;
            }
        }
        if counts != model.status.resources {
            model.status =
                model
                    .status
                    .clone()
                    .step(ClusterInput::Resources(counts), thresholds, now);
        }
        let cache = cache_info(model.syncs.values());
        if cache != model.status.cache {
            // The machine coarsens the count: most of these steps change nothing.
            model.status = model
                .status
                .clone()
                .step(ClusterInput::Cache(cache), thresholds, now);
        }
    }

    /// Logs the cluster's transitions not logged yet.
    fn log_cluster(&mut self, cluster: &str) {
        if let Some(model) = self.clusters.get_mut(cluster) {
            let lifecycle = &model.status.lifecycle;
            let subject = Subject::Cluster { cluster };
            transitions::log_after(&subject, &topic::cluster(cluster), lifecycle, model.logged);
            model.logged = transitions::last(lifecycle);
        }
    }

    /// Puts the cluster's document into the hub, logging its new transitions.
    fn publish_cluster(&mut self, cluster: &str) {
        self.log_cluster(cluster);
        if let Some(model) = self.clusters.get(cluster) {
            self.hub
                .put(&topic::cluster(cluster), to_doc(&model.status));
        }
    }

    fn namespace_event(&mut self, cluster: &str, name: &str, exists: bool, now: DateTime<Utc>) {
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        let namespaces = model.namespaces.get_or_insert_with(BTreeSet::new);
        let changed = if exists {
            namespaces.insert(name.to_string())
        } else {
            namespaces.remove(name)
        };
        if changed {
            let touched = model
                .apps
                .keys()
                .filter(|(ns, _)| ns == name)
                .cloned()
                .collect();
            self.refresh_apps(cluster, touched, now);
        }
    }

    /// Recomputes the given apps of a cluster and publishes those that changed.
    fn refresh_apps(
        &mut self,
        cluster: &str,
        apps: BTreeSet<(String, String)>,
        now: DateTime<Utc>,
    ) {
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        for (ns, app) in apps {
            let workloads: Vec<&Workload> = model
                .workloads
                .values()
                .filter(|w| w.namespace == ns && w.app == app)
                .collect();
            let ns_exists = model
                .namespaces
                .as_ref()
                .is_none_or(|set| set.contains(&ns));
            // The app's pods: those its workloads select, in its namespace.
            let app_pods: Option<Vec<&PodSummary>> = model.pods.as_ref().map(|index| {
                index
                    .get(&ns)
                    .into_iter()
                    .flat_map(BTreeMap::values)
                    .filter(|p| workloads.iter().any(|w| p.matches(&w.selector)))
                    .collect()
            });
            let cause = app_pods.as_deref().and_then(pods::dominant);
            let view = app_pods.as_deref().map(pods::fold);
            // Events live in the namespace of their object: only that range is read.
            let in_namespace = model
                .warnings
                .range((ns.clone(), String::new())..)
                .take_while(|((event_ns, _), _)| *event_ns == ns)
                .map(|(_, w)| w);
            let last_warning = pods::latest(in_namespace.filter(|w| {
                w.namespace == ns
                    && match w.kind.as_str() {
                        "Pod" => app_pods
                            .as_ref()
                            .is_some_and(|ps| ps.iter().any(|p| p.name == w.name)),
                        kind => workloads.iter().any(|x| x.kind == kind && x.name == w.name),
                    }
            }));
            let key = (ns.clone(), app.clone());
            let topic = topic::app(cluster, &ns, &app);
            // An app first seen in this run of the member continues the
            // document the hub holds, if any (published by its previous owner).
            let restored = || {
                let held = self.hub.get(&topic)?;
                AppStatus::restore(&held.doc, cluster, &ns, &app)
            };
            let mut current = match model.apps.remove(&key).or_else(restored) {
                Some(current) => current,
                None => AppStatus::first_seen(
                    cluster,
                    &ns,
                    &app,
                    ns_exists,
                    &workloads,
                    cause.clone(),
                    now,
                ),
            };
            current.task = model.tasks.get(&key).cloned();
            current.pods = view;
            current.cause = cause;
            current.last_warning = last_warning;
            let before = transitions::last(&current.lifecycle);
            let next = current.observe(ns_exists, &workloads, now);
            let subject = Subject::App {
                cluster,
                namespace: &ns,
                app: &app,
            };
            transitions::log_after(&subject, &topic, &next.lifecycle, before);
            self.hub.put(&topic, to_doc(&next));
            model.apps.insert((ns, app), next);
        }
    }
}

/// The exact cache figures of a cluster: objects summed over its watched
/// resources' caches, and the latest completed list of any of them
/// (resources no registry names any more are left out, as in the counts).
fn cache_info<'a>(syncs: impl Iterator<Item = &'a SyncStatus>) -> CacheInfo {
    syncs
        .filter(|s| !s.is_removed())
        .fold(CacheInfo::default(), |acc, s| CacheInfo {
            objects: acc.objects + s.cached_objects(),
            last_list_at: acc.last_list_at.max(s.last_list_at()),
        })
}

/// Runs the engine until shutdown or until every source is gone.
pub(crate) async fn run(
    mut engine: Engine,
    served: Arc<Hub>,
    mut rx: mpsc::Receiver<Observation>,
    shutdown: CancellationToken,
) {
    // The summary topics: kept live beside the engine, ended with it, over
    // the documents clients are served (every member's, with a stream of
    // changes between the engine and them).
    let summaries_stop = shutdown.child_token();
    let summaries = tokio::spawn(summaries::run(served, summaries_stop.clone()));
    let mut expiry = tokio::time::interval(engine.expiry_period());
    expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = expiry.tick() => engine.expire(Utc::now()),
            o = rx.recv() => match o {
                Some(o) => engine.apply(o, Utc::now()),
                None => break,
            },
        }
    }
    summaries_stop.cancel();
    let _ = summaries.await;
}
