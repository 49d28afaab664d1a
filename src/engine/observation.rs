//! The engine's input: what sources (and tasks) observe about member
//! clusters (`sources ──[Observation]──▶ engine`; `tasks ──[Observation::Task]──▶
//! engine`). It lives beside the engine that consumes it, so producers
//! import it from below the engine instead of from each other.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::status::app::{ActiveTask, Workload};
use crate::status::capacity::NodeFacts;
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
    /// The member's pod and event watches started or stopped
    /// (`podWatch.onDemand`): stopped, what they brought is forgotten and
    /// its app documents say `podsWatched: false`.
    PodsWatched {
        /// The member cluster's name.
        cluster: String,
        /// Whether they run now.
        watched: bool,
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
    /// A completed (re)list of nodes: the whole current set.
    NodesListed {
        /// The member cluster's name.
        cluster: String,
        /// Every node, by name.
        items: Vec<(String, NodeFacts)>,
    },
    /// A node was created or changed.
    NodeApplied {
        /// The member cluster's name.
        cluster: String,
        /// The node's name.
        name: String,
        /// What the gateway keeps of it.
        node: NodeFacts,
    },
    /// A node was deleted.
    NodeDeleted {
        /// The member cluster's name.
        cluster: String,
        /// The node's name.
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
    /// From the link of a member pushed by an agent, not from sources
    /// (docs/AGENT.md).
    Pushed {
        /// The member cluster.
        cluster: String,
        /// What the link heard, or that it heard nothing for too long.
        input: PushedInput,
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

/// What the link of a push member tells the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum PushedInput {
    /// The member runs here, pushed by its agent: its cluster document
    /// shows it, `Pending (AwaitingAgent)` until the agent reports.
    Attached,
    /// One of the agent's documents, checked as the agent's own.
    Document {
        /// Its topic, one of the member's.
        topic: String,
        /// The whole document; None when the agent removed the topic.
        doc: Option<Value>,
        /// The agent's session that sent it (its start, in milliseconds).
        session: u64,
    },
    /// The agent runs.
    Heartbeat {
        /// When the heartbeat reached the stream (the broker's clock).
        at: DateTime<Utc>,
        /// The agent's kube-pulse version.
        version: String,
        /// The agent's session.
        session: u64,
        /// The agent had sent every document it holds before this heartbeat.
        synced: bool,
    },
    /// No heartbeat for longer than the grace period.
    Lost {
        /// How long the agent has been silent.
        silent_for: Duration,
        /// The grace period.
        grace: Duration,
        /// When the last heartbeat reached the stream, if one did.
        last_heartbeat_at: Option<DateTime<Utc>>,
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
            | Observation::PodsWatched { cluster, .. }
            | Observation::PodsListed { cluster, .. }
            | Observation::PodApplied { cluster, .. }
            | Observation::PodDeleted { cluster, .. }
            | Observation::NodesListed { cluster, .. }
            | Observation::NodeApplied { cluster, .. }
            | Observation::NodeDeleted { cluster, .. }
            | Observation::WarningsListed { cluster, .. }
            | Observation::WarningApplied { cluster, .. }
            | Observation::WarningDeleted { cluster, .. }
            | Observation::Pushed { cluster, .. }
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
