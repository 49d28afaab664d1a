//! The source of one member cluster: its apiserver probe and one watch per
//! synced resource, started, changed and stopped together
//! (`member cluster ──▶ [probe.rs, watch.rs] ──Observation──▶ engine`).
//! The settings and registry types it reads sit in the parent module.

use std::collections::BTreeMap;

use tokio::sync::{mpsc, watch as channel};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{SourceConfig, SyncResource, builtin_resources, probe, watch};
use crate::engine::Observation;
use crate::status::cluster::ClusterInput;
use crate::status::sync::{Gvr, SyncInput};

struct RunningWatch {
    resource: SyncResource,
    token: CancellationToken,
    task: JoinHandle<()>,
}

/// The source of one member cluster: its probe and its watches.
pub(crate) struct ClusterSource {
    name: String,
    client: kube::Client,
    config: SourceConfig,
    tx: mpsc::Sender<Observation>,
    token: CancellationToken,
    probe: JoinHandle<()>,
    /// The probe's count of the member's recoveries, which cuts short the watches' backoff.
    recoveries: watch::Recoveries,
    watches: BTreeMap<Gvr, RunningWatch>,
    /// The sync registries' resources for this member, as last set.
    resources: Vec<SyncResource>,
    /// A client looks at its apps (always true, unless `podWatch.onDemand`).
    pods_wanted: bool,
    /// Its pod and event watches run, as the engine was last told: while
    /// pods are wanted, or a sync registry names pods or events (that watch
    /// runs for the registry anyway, so the apps get its detail).
    pods_watched: bool,
}

/// Whether `gvr` is one of the pod-detail watches (pods, Warning events).
fn is_pod_detail(gvr: &Gvr) -> bool {
    gvr.group.is_empty() && matches!(gvr.resource.as_str(), "pods" | "events")
}

impl ClusterSource {
    /// Registers the cluster with the engine and starts probing and watching
    /// the built-in resources plus `resources`.
    pub(crate) async fn start(
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
        let (recovered, recoveries) = channel::channel(0);
        let probe = tokio::spawn(probe::run(
            name.into(),
            client.clone(),
            config.clone(),
            tx.clone(),
            recovered,
            token.clone(),
        ));
        let pods_wanted = !config.pod_watch.on_demand;
        let mut source = Self {
            name: name.into(),
            client,
            config,
            tx,
            token,
            probe,
            recoveries,
            watches: BTreeMap::new(),
            resources: Vec::new(),
            pods_wanted,
            // What the engine assumes of a member it has just registered.
            pods_watched: true,
        };
        source.set_resources(resources).await;
        source
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether a client looks at the member's apps (`podWatch.onDemand`):
    /// the pod and event watches start or stop with it (see
    /// [`Self::set_resources`]).
    pub(crate) async fn want_pods(&mut self, wanted: bool) {
        if wanted != self.pods_wanted && self.config.pod_watch.enabled {
            self.pods_wanted = wanted;
            self.set_resources(self.resources.clone()).await;
        }
    }

    /// Makes the running watches match built-ins + `resources`: starts new
    /// ones, stops dropped ones (reported as removed from the registry, or
    /// as stopped for want of viewers). Exactly one watch per resource: the
    /// first entry naming it wins, built-ins first. Pod and event watches
    /// stopped, their sync documents say why and the engine forgets what
    /// they brought (told after they stopped: no pod arrives after it).
    pub(crate) async fn set_resources(&mut self, resources: Vec<SyncResource>) {
        let watching = self.pods_wanted || resources.iter().any(|r| is_pod_detail(&r.gvr));
        self.resources = resources.clone();
        let mut wanted: BTreeMap<Gvr, SyncResource> = BTreeMap::new();
        let config = &self.config;
        for r in builtin_resources(&config.pod_watch, &config.rules, watching)
            .into_iter()
            .chain(resources)
        {
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
                    // A pod or event watch stopped on demand says so; any
                    // other resource left the registries.
                    let input = if !watching && is_pod_detail(&gvr) {
                        SyncInput::NoViewers
                    } else {
                        SyncInput::Removed
                    };
                    let _ = self
                        .tx
                        .send(Observation::sync(&self.name, &gvr, input))
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
                self.recoveries.clone(),
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
        if watching != self.pods_watched && self.config.pod_watch.enabled {
            self.pods_watched = watching;
            tracing::info!(cluster = %self.name, watched = watching, "pod and event watches on demand");
            let _ = self
                .tx
                .send(Observation::PodsWatched {
                    cluster: self.name.clone(),
                    watched: watching,
                })
                .await;
        }
    }

    /// The first task of this source that ended although it should run, if any.
    pub(crate) fn stopped_task(&self) -> Option<String> {
        if self.probe.is_finished() {
            return Some("the probe".into());
        }
        self.watches
            .iter()
            .find(|(_, w)| w.task.is_finished())
            .map(|(gvr, _)| format!("the {} watch", gvr.path()))
    }

    /// Stops the probe and every watch, and waits for them.
    pub(crate) async fn stop(self) {
        self.token.cancel();
        let _ = self.probe.await;
        for (_, w) in self.watches {
            let _ = w.task.await;
        }
    }
}
