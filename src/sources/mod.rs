//! Sources: per member cluster, one kube-rs watcher per watched resource and
//! a periodic apiserver probe (`member clusters ──watch──▶ [sources]
//! ──Observation──▶ engine`). Sources never know about subscribers: the
//! number of watches on a member depends on its resources only.

pub mod classify;
pub mod probe;
pub mod watch;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::status::app::{DEFAULT_APP_LABEL, Workload};
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
        task: Option<crate::status::app::ActiveTask>,
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

/// A resource to keep in sync on a cluster (a sync registry entry).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyncResource {
    #[serde(flatten)]
    pub gvr: Gvr,
    /// Watch one namespace only.
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
}

impl SyncResource {
    pub fn all(group: &str, version: &str, resource: &str) -> Self {
        Self {
            gvr: Gvr::new(group, version, resource),
            namespace: None,
            label_selector: None,
        }
    }
}

/// The resources every cluster watches: what the app machine reads.
pub fn builtin_resources() -> Vec<SyncResource> {
    vec![
        SyncResource::all("apps", "v1", "deployments"),
        SyncResource::all("apps", "v1", "statefulsets"),
        SyncResource::all("", "v1", "namespaces"),
    ]
}

/// Probe and watch settings.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub probe_interval: Duration,
    pub probe_timeout: Duration,
    /// Label whose value names a workload's app.
    pub app_label: String,
    /// List page size (None: kube-rs's default of 500).
    pub page_size: Option<u32>,
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            probe_interval: Duration::from_secs(5),
            probe_timeout: Duration::from_secs(3),
            app_label: DEFAULT_APP_LABEL.into(),
            page_size: None,
        }
    }
}

struct RunningWatch {
    resource: SyncResource,
    token: CancellationToken,
    task: JoinHandle<()>,
}

/// The source of one member cluster: its probe and its watches.
pub struct ClusterSource {
    name: String,
    client: kube::Client,
    config: SourceConfig,
    tx: mpsc::Sender<Observation>,
    token: CancellationToken,
    probe: JoinHandle<()>,
    watches: BTreeMap<Gvr, RunningWatch>,
}

impl ClusterSource {
    /// Registers the cluster with the engine and starts probing and watching
    /// the built-in resources plus `resources`.
    pub async fn start(
        name: &str,
        server: &str,
        client: kube::Client,
        resources: Vec<SyncResource>,
        config: SourceConfig,
        tx: mpsc::Sender<Observation>,
        parent: &CancellationToken,
    ) -> Self {
        let token = parent.child_token();
        let _ = tx
            .send(Observation::Registered {
                cluster: name.into(),
                server: server.into(),
            })
            .await;
        let _ = tx
            .send(Observation::Cluster {
                cluster: name.into(),
                input: ClusterInput::Started,
            })
            .await;
        let probe = tokio::spawn(probe::run(
            name.into(),
            client.clone(),
            config.clone(),
            tx.clone(),
            token.clone(),
        ));
        let mut source = Self {
            name: name.into(),
            client,
            config,
            tx,
            token,
            probe,
            watches: BTreeMap::new(),
        };
        source.set_resources(resources).await;
        source
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Makes the running watches match built-ins + `resources`: starts new
    /// ones, stops dropped ones (reported as removed from the registry).
    /// Exactly one watch per resource: the first entry naming it wins.
    pub async fn set_resources(&mut self, resources: Vec<SyncResource>) {
        let mut wanted: BTreeMap<Gvr, SyncResource> = BTreeMap::new();
        for r in builtin_resources().into_iter().chain(resources) {
            wanted.entry(r.gvr.clone()).or_insert(r);
        }
        let stale: Vec<Gvr> = self
            .watches
            .iter()
            .filter(|(gvr, w)| wanted.get(*gvr) != Some(&w.resource))
            .map(|(gvr, _)| gvr.clone())
            .collect();
        for gvr in stale {
            if let Some(w) = self.watches.remove(&gvr) {
                w.token.cancel();
                let _ = w.task.await;
                if !wanted.contains_key(&gvr) {
                    let _ = self
                        .tx
                        .send(Observation::sync(&self.name, &gvr, SyncInput::Removed))
                        .await;
                }
            }
        }
        for (gvr, resource) in wanted {
            if self.watches.contains_key(&gvr) {
                continue;
            }
            let token = self.token.child_token();
            let task = tokio::spawn(watch::run(
                self.name.clone(),
                self.client.clone(),
                resource.clone(),
                self.config.clone(),
                self.tx.clone(),
                token.clone(),
            ));
            self.watches.insert(
                gvr,
                RunningWatch {
                    resource,
                    token,
                    task,
                },
            );
        }
    }

    /// The first task of this source that ended although it should run, if any.
    pub fn stopped_task(&self) -> Option<String> {
        if self.probe.is_finished() {
            return Some("the probe".into());
        }
        self.watches
            .iter()
            .find(|(_, w)| w.task.is_finished())
            .map(|(gvr, _)| format!("the {} watch", gvr.path()))
    }

    /// Stops the probe and every watch, and waits for them.
    pub async fn stop(self) {
        self.token.cancel();
        let _ = self.probe.await;
        for (_, w) in self.watches {
            let _ = w.task.await;
        }
    }
}

/// Which resources to sync on which clusters (in the spirit of Karpor's SyncRegistry).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyncRegistry {
    #[serde(default)]
    pub name: Option<String>,
    /// Cluster names, or `"*"` for all.
    pub clusters: Vec<String>,
    pub resources: Vec<SyncResource>,
}

impl SyncRegistry {
    pub fn applies_to(&self, cluster: &str) -> bool {
        self.clusters.iter().any(|c| c == "*" || c == cluster)
    }
}

/// Registry resources for one cluster, in registry order.
pub fn resources_for(cluster: &str, registries: &[SyncRegistry]) -> Vec<SyncResource> {
    registries
        .iter()
        .filter(|r| r.applies_to(cluster))
        .flat_map(|r| r.resources.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_select_clusters_and_parse() {
        let yaml = "- clusters: ['*']\n  resources:\n  - {group: '', version: v1, resource: configmaps, namespace: shop}\n- clusters: [prod]\n  resources:\n  - {group: example.com, version: v1, resource: widgets, labelSelector: 'tier=web'}\n";
        let registries: Vec<SyncRegistry> = serde_yaml_ng::from_str(yaml).unwrap();
        let dev = resources_for("dev", &registries);
        assert_eq!(dev.len(), 1);
        assert_eq!(dev[0].gvr.path(), "core/v1/configmaps");
        assert_eq!(dev[0].namespace.as_deref(), Some("shop"));
        let prod = resources_for("prod", &registries);
        assert_eq!(prod.len(), 2);
        assert_eq!(prod[1].label_selector.as_deref(), Some("tier=web"));
        let bad = "- clusters: ['*']\n  resources:\n  - {group: '', version: v1, resourse: x}\n";
        assert!(serde_yaml_ng::from_str::<Vec<SyncRegistry>>(bad).is_err());
    }
}
