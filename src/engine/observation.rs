//! The engine's input: what sources (and tasks) observe about member
//! clusters (`sources ──[Observation]──▶ engine`; `tasks ──[Observation::Task]──▶
//! engine`). It lives beside the engine that consumes it, so producers
//! import it from below the engine instead of from each other.

use crate::status::app::{ActiveTask, Workload};
use crate::status::cluster::ClusterInput;
use crate::status::sync::{Gvr, SyncInput};

/// What sources (and tasks) tell the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// A member cluster joins (its source is starting).
    Registered {
        cluster: String,
        server: String,
    },
    /// A member cluster left the configuration.
    Unregistered {
        cluster: String,
    },
    Cluster {
        cluster: String,
        input: ClusterInput,
    },
    Sync {
        cluster: String,
        resource: Gvr,
        input: SyncInput,
    },
    /// A completed (re)list of one workload kind.
    WorkloadsListed {
        cluster: String,
        kind: &'static str,
        items: Vec<Workload>,
    },
    WorkloadApplied {
        cluster: String,
        workload: Workload,
    },
    WorkloadDeleted {
        cluster: String,
        kind: &'static str,
        namespace: String,
        name: String,
    },
    NamespacesListed {
        cluster: String,
        names: Vec<String>,
    },
    NamespaceApplied {
        cluster: String,
        name: String,
    },
    NamespaceDeleted {
        cluster: String,
        name: String,
    },
    /// From tasks, not sources: an app's active task (None: it ended).
    Task {
        cluster: String,
        namespace: String,
        app: String,
        task: Option<ActiveTask>,
    },
}

impl Observation {
    pub fn sync(cluster: &str, resource: &Gvr, input: SyncInput) -> Self {
        Observation::Sync {
            cluster: cluster.into(),
            resource: resource.clone(),
            input,
        }
    }
}
