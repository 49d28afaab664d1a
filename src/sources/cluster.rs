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
        let mut source = Self {
            name: name.into(),
            client,
            config,
            tx,
            token,
            probe,
            recoveries,
            watches: BTreeMap::new(),
        };
        source.set_resources(resources).await;
        source
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Makes the running watches match built-ins + `resources`: starts new
    /// ones, stops dropped ones (reported as removed from the registry).
    /// Exactly one watch per resource: the first entry naming it wins.
    pub(crate) async fn set_resources(&mut self, resources: Vec<SyncResource>) {
        let mut wanted: BTreeMap<Gvr, SyncResource> = BTreeMap::new();
        for r in builtin_resources(&self.config.pod_watch, &self.config.rules)
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
