//! How to build one simulated cluster ([`SimConfig`]), the workloads it
//! starts with ([`WorkloadSeed`]) and their manifests. Read by the cluster
//! (`lib.rs`) at start; `karpor.rs` and the scenarios build them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use super::converger::ConvergeConfig;
use super::karpor_api::KarporOptions;
use super::pods::ImageFault;
use super::resources::ResourceDef;
use super::reviews::ReviewPolicy;

/// A workload to create when the cluster starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSeed {
    /// `Deployment`, `StatefulSet`, or a custom kind of `workloads.rs`
    /// (`CollaSet`, `CloneSet`, `Rollout`: needs `SimConfig::workload_crds`).
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub replicas: u32,
    pub image: String,
}

/// How to build one simulated cluster.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub name: String,
    /// Address to listen on; port 0 picks a free one.
    pub listen: SocketAddr,
    /// When set, API requests need `Authorization: Bearer TOKEN` (401 otherwise).
    pub token: Option<String>,
    /// Resources served in addition to the built-ins (custom resources), from
    /// the start and without CRD objects; CRDs created later add more.
    pub extra_resources: Vec<ResourceDef>,
    /// Events kept for watch resume (the watch cache); older versions get 410.
    pub window: usize,
    /// Interval between BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// Streaming lists (`sendInitialEvents`, the WatchList feature) are
    /// served. False answers as an apiserver without the feature: the
    /// parameter is dropped, so a streaming list's `resourceVersionMatch`
    /// is refused (422 Invalid) and the client has to list in pages.
    pub watch_list: bool,
    pub converge: ConvergeConfig,
    /// Serve the custom workload kinds (KusionStack CollaSet, OpenKruise
    /// CloneSet, Argo Rollouts Rollout) through their CRDs, created at
    /// start, and run their controllers (`workloads.rs`).
    pub workload_crds: bool,
    /// RBAC emulation: `group/resource[:verb]` rules answered with 403.
    pub deny: Vec<String>,
    /// Namespaces created at start (besides `default`, `kube-system`, `kube-public`).
    pub namespaces: Vec<String>,
    pub workloads: Vec<WorkloadSeed>,
    /// Who tokens are and what they may do, for TokenReview / SubjectAccessReview.
    pub reviews: ReviewPolicy,
    /// What goes wrong with pods of these images.
    pub image_faults: BTreeMap<String, ImageFault>,
    /// Pods the cluster has room for (None: unlimited).
    pub pod_capacity: Option<u32>,
    /// Serve Karpor's API instead of a Kubernetes cluster's (`karpor.rs`).
    pub karpor: Option<KarporOptions>,
    /// Serve HTTPS with a certificate made at start (`tls.rs`); the URL,
    /// kube-rs config and kubeconfig carry its CA. kubectl sends a
    /// `token` only over TLS.
    pub tls: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            name: "sim".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            extra_resources: Vec::new(),
            window: 1000,
            bookmark_interval: Duration::from_secs(10),
            watch_list: true,
            converge: ConvergeConfig::default(),
            workload_crds: false,
            deny: Vec::new(),
            namespaces: Vec::new(),
            workloads: Vec::new(),
            reviews: ReviewPolicy::default(),
            image_faults: BTreeMap::new(),
            pod_capacity: None,
            karpor: None,
            tls: false,
        }
    }
}

impl SimConfig {
    pub fn named(name: &str) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }
}

/// A workload manifest as the seeds and the demo create them: labelled
/// `app.kubernetes.io/name=NAME`, one container requesting 100m CPU and
/// 128Mi of memory; a custom kind's in its group's version.
pub fn workload_manifest(seed: &WorkloadSeed) -> Value {
    let labels = json!({"app.kubernetes.io/name": seed.name});
    let mut spec = json!({
        "replicas": seed.replicas,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{
                "name": seed.name,
                "image": seed.image,
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            }]},
        },
    });
    if seed.kind == "StatefulSet" {
        spec["serviceName"] = json!(seed.name);
    }
    let api_version = crate::workloads::by_kind(&seed.kind)
        .map_or_else(|| "apps/v1".to_string(), |k| k.api_version());
    json!({
        "apiVersion": api_version,
        "kind": seed.kind,
        "metadata": {"name": seed.name, "namespace": seed.namespace, "labels": labels},
        "spec": spec,
    })
}
