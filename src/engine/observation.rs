//! The engine's input: what sources (and tasks) observe about member
//! clusters (`sources ──[Observation]──▶ engine`; `tasks ──[Observation::Task]──▶
//! engine`). It lives beside the engine that consumes it, so producers
//! import it from below the engine instead of from each other.

use crate::status::app::{ActiveTask, Workload};
use crate::status::cluster::ClusterInput;
use crate::status::pods::{EventKey, PodSummary, Warning};
use crate::status::sync::{Gvr, SyncInput};

/// What sources (and tasks) tell the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// A member cluster joins (its source is starting).
    Registered {
        /// The member cluster's name.
        cluster: String,
        /// The apiserver's URL, shown as `server` in the cluster document.
        server: String,
    },
    /// A member cluster left the configuration, its source already stopped:
    /// every topic of it is removed and the engine forgets it.
    Unregistered {
        /// The member cluster's name.
        cluster: String,
    },
    /// A probe result or resource summary for the cluster status machine.
    Cluster {
        /// The member cluster's name.
        cluster: String,
        /// What the cluster machine is told.
        input: ClusterInput,
    },
    /// A list or watch event of one synced resource, for its sync status machine.
    Sync {
        /// The member cluster's name.
        cluster: String,
        /// The synced resource.
        resource: Gvr,
        /// What the sync machine is told.
        input: SyncInput,
    },
    /// A completed (re)list of one workload kind.
    WorkloadsListed {
        /// The member cluster's name.
        cluster: String,
        /// `Deployment` or `StatefulSet`.
        kind: &'static str,
        /// Every workload of that kind on the cluster; those missing were deleted.
        items: Vec<Workload>,
    },
    /// A workload was created or changed.
    WorkloadApplied {
        /// The member cluster's name.
        cluster: String,
        /// The workload as it is now.
        workload: Workload,
    },
    /// A workload was deleted.
    WorkloadDeleted {
        /// The member cluster's name.
        cluster: String,
        /// `Deployment` or `StatefulSet`.
        kind: &'static str,
        /// Namespace of the deleted workload.
        namespace: String,
        /// Name of the deleted workload.
        name: String,
    },
    /// A completed (re)list of namespaces: the whole current set.
    NamespacesListed {
        /// The member cluster's name.
        cluster: String,
        /// Every namespace on the cluster; apps of missing ones become `NotExisted`.
        names: Vec<String>,
    },
    /// A namespace was created or changed.
    NamespaceApplied {
        /// The member cluster's name.
        cluster: String,
        /// The namespace's name.
        name: String,
    },
    /// A namespace was deleted: its apps become `NotExisted`.
    NamespaceDeleted {
        /// The member cluster's name.
        cluster: String,
        /// The namespace's name.
        name: String,
    },
    /// A completed (re)list of pods: the whole current set.
    PodsListed {
        /// The member cluster's name.
        cluster: String,
        /// Every watched pod on the cluster; those missing were deleted.
        items: Vec<PodSummary>,
    },
    /// A pod was created or changed.
    PodApplied {
        /// The member cluster's name.
        cluster: String,
        /// The pod as the app machine reads it.
        pod: PodSummary,
    },
    /// A pod was deleted.
    PodDeleted {
        /// The member cluster's name.
        cluster: String,
        /// Namespace of the deleted pod.
        namespace: String,
        /// Name of the deleted pod.
        name: String,
    },
    /// A completed (re)list of Warning events about pods and workloads.
    WarningsListed {
        /// The member cluster's name.
        cluster: String,
        /// Every such event, by its own namespace and name.
        items: Vec<(EventKey, Warning)>,
    },
    /// A Warning event was created or repeated (its count grew).
    WarningApplied {
        /// The member cluster's name.
        cluster: String,
        /// The event's namespace and name.
        key: EventKey,
        /// The event as the app document shows it.
        warning: Warning,
    },
    /// A Warning event was deleted (expired on the member).
    WarningDeleted {
        /// The member cluster's name.
        cluster: String,
        /// The event's namespace and name.
        key: EventKey,
    },
    /// From tasks, not sources: an app's active task (None: it ended).
    Task {
        /// The member cluster of the app.
        cluster: String,
        /// The namespace of the app.
        namespace: String,
        /// The app's name (its app label's value).
        app: String,
        /// The active task; absent when the task ended, so the stable state shows again.
        task: Option<ActiveTask>,
    },
}

impl Observation {
    /// The member cluster it is about.
    pub fn cluster(&self) -> &str {
        match self {
            Observation::Registered { cluster, .. }
            | Observation::Unregistered { cluster }
            | Observation::Cluster { cluster, .. }
            | Observation::Sync { cluster, .. }
            | Observation::WorkloadsListed { cluster, .. }
            | Observation::WorkloadApplied { cluster, .. }
            | Observation::WorkloadDeleted { cluster, .. }
            | Observation::NamespacesListed { cluster, .. }
            | Observation::NamespaceApplied { cluster, .. }
            | Observation::NamespaceDeleted { cluster, .. }
            | Observation::PodsListed { cluster, .. }
            | Observation::PodApplied { cluster, .. }
            | Observation::PodDeleted { cluster, .. }
            | Observation::WarningsListed { cluster, .. }
            | Observation::WarningApplied { cluster, .. }
            | Observation::WarningDeleted { cluster, .. }
            | Observation::Task { cluster, .. } => cluster,
        }
    }

    pub(crate) fn sync(cluster: &str, resource: &Gvr, input: SyncInput) -> Self {
        Observation::Sync {
            cluster: cluster.into(),
            resource: resource.clone(),
            input,
        }
    }
}
