//! A member's model (`observations → [model] → status machines`): what
//! the engine knows of one member cluster (its status, sync states,
//! workloads, namespaces, apps, tasks, pods and warning events), which the
//! status machines read to make its documents.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::status::app::{ActiveTask, AppStatus, Workload};
use crate::status::capacity::{NodeFacts, PodFigures};
use crate::status::cluster::ClusterStatus;
use crate::status::pods::{EventKey, PodState, Warning};
use crate::status::sync::{Gvr, SyncStatus};

pub(super) type WorkloadKey = (&'static str, String, String);

/// Warning events kept per member at most (one per event object; the
/// oldest by `lastSeen` go first). Events of deleted pods and workloads
/// are dropped at once, so this only bounds events of objects never seen.
pub(super) const MAX_WARNINGS: usize = 10_000;

/// Pods by namespace, then name: what is held of each (docs/SCALE.md).
pub(super) type PodIndex = BTreeMap<String, BTreeMap<Box<str>, PodState>>;

pub(super) struct ClusterModel {
    pub(super) status: ClusterStatus,
    /// The number of the cluster's last transition already logged.
    pub(super) logged: u64,
    pub(super) syncs: BTreeMap<Gvr, SyncStatus>,
    pub(super) workloads: HashMap<WorkloadKey, Workload>,
    /// None until the first namespace list completed.
    pub(super) namespaces: Option<BTreeSet<String>>,
    pub(super) apps: BTreeMap<(String, String), AppStatus>,
    /// Active tasks by (namespace, app): the apps' transitional slots.
    pub(super) tasks: HashMap<(String, String), ActiveTask>,
    /// Metric series of this cluster, removed with it (bounded: resources x reasons).
    pub(super) series: ClusterSeries,
    /// None until the first pod list completed (and while the pod watch is off).
    pub(super) pods: Option<PodIndex>,
    /// The exact pod figures of `pods`, kept as pods come and go.
    pub(super) pod_figures: PodFigures,
    /// None until the first node list completed.
    pub(super) nodes: Option<HashMap<Box<str>, NodeFacts>>,
    /// Warning events about pods and workloads, by event key; at most [`MAX_WARNINGS`].
    pub(super) warnings: BTreeMap<EventKey, Warning>,
    /// False while on-demand pod and event watches are stopped
    /// (`podWatch.onDemand`): the app documents say so.
    pub(super) pods_watched: bool,
}

impl ClusterModel {
    /// The apps whose workloads select `pod` (usually one).
    pub(super) fn apps_of_pod(
        &self,
        namespace: &str,
        pod: &PodState,
    ) -> BTreeSet<(String, String)> {
        self.workloads
            .values()
            .filter(|w| w.namespace == namespace && pod.matches(&w.selector))
            .map(|w| (w.namespace.clone(), w.app.clone()))
            .collect()
    }

    /// The apps a warning is about: its workload's, or its pod's.
    pub(super) fn apps_of_warning(&self, w: &Warning) -> BTreeSet<(String, String)> {
        if w.kind == "Pod" {
            self.pods
                .as_ref()
                .and_then(|p| p.get(&w.namespace)?.get(w.name.as_str()))
                .map(|pod| self.apps_of_pod(&w.namespace, pod))
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
    pub(super) fn forget_warnings(&mut self, kind: &str, namespace: &str, name: &str) {
        self.warnings
            .retain(|_, w| !(w.kind == kind && w.namespace == namespace && w.name == name));
    }

    /// Keeps at most [`MAX_WARNINGS`], dropping the oldest.
    pub(super) fn cap_warnings(&mut self) {
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
pub(super) struct ClusterSeries {
    pub(super) lists: BTreeSet<(String, String)>,
    pub(super) errors: BTreeSet<(String, String, String)>,
}
