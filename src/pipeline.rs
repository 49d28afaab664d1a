//! Wires sources, engine and hub for a set of member clusters: the running
//! gateway core that `serve` and `demo` share.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::engine::{self, Engine, Observation};
use crate::hub::{Hub, HubConfig};
use crate::sources::{ClusterSource, SourceConfig, SyncRegistry, resources_for};
use crate::status::cluster::Thresholds;

/// Observations waiting for the engine; sources wait when it is full.
const OBSERVATION_QUEUE: usize = 4096;

/// A member cluster to watch.
#[derive(Debug, Clone)]
pub struct Member {
    /// Name in topics (`clusters/{name}`): a DNS label, unique among members.
    pub name: String,
    /// How to reach its apiserver; client-side retries are turned off.
    pub config: kube::Config,
}

/// Settings of the pipeline.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Probe interval and timeout, app label and list page size of every source.
    pub source: SourceConfig,
    /// Consecutive probe results before a member counts as up or down.
    pub thresholds: Thresholds,
    /// How many changes the hub keeps for resume and queues per subscription.
    pub hub: HubConfig,
    /// Resources to sync besides the built-ins.
    pub registries: Vec<SyncRegistry>,
    /// How long an app stays `Stopped (NoWorkloads)` or `NotExisted` before
    /// its topic is removed. Default 10 minutes: long enough for people and
    /// clients to see that the app went away, and for a redeploy or a
    /// namespace re-created by CI to continue the same document; short
    /// enough that deleted apps do not pile up in memory and snapshots.
    pub app_retention: std::time::Duration,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            source: SourceConfig::default(),
            thresholds: Thresholds::default(),
            hub: HubConfig::default(),
            registries: Vec::new(),
            app_retention: engine::DEFAULT_APP_RETENTION,
        }
    }
}

/// Sources + engine + hub, running.
pub struct Pipeline {
    hub: Arc<Hub>,
    metrics: Arc<crate::metrics::Metrics>,
    sources: Mutex<Vec<ClusterSource>>,
    /// One client per member, shared with tasks.
    clients: BTreeMap<String, kube::Client>,
    app_label: String,
    engine: Mutex<Option<JoinHandle<()>>>,
    /// Kept to see how full the engine's queue is (health).
    tx: mpsc::Sender<Observation>,
    token: CancellationToken,
}

// By hand: holds clients, channels and task handles; show what it watches.
impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("members", &self.clients.keys().collect::<Vec<_>>())
            .field("app_label", &self.app_label)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Starts the engine and one source per member, over a new hub.
    pub async fn start(
        members: Vec<Member>,
        config: PipelineConfig,
        shutdown: &CancellationToken,
    ) -> crate::Result<Arc<Self>> {
        let hub = Hub::new(config.hub);
        Self::start_on(hub, members, config, shutdown).await
    }

    /// Starts the engine and one source per member, publishing into `hub`.
    pub async fn start_on(
        hub: Arc<Hub>,
        members: Vec<Member>,
        config: PipelineConfig,
        shutdown: &CancellationToken,
    ) -> crate::Result<Arc<Self>> {
        let token = shutdown.child_token();
        let (tx, rx) = mpsc::channel::<Observation>(OBSERVATION_QUEUE);
        let metrics = crate::metrics::Metrics::new();
        let engine = Engine::new(hub.clone(), config.thresholds)
            .with_metrics(metrics.clone())
            .with_retention(config.app_retention);
        let engine = tokio::spawn(engine::run(engine, rx, token.clone()));
        let mut sources = Vec::new();
        let mut clients = BTreeMap::new();
        for member in members {
            let mut kube_config = member.config.clone();
            // Sources report errors and back off themselves; client-side
            // retries of 429/503 would only delay what the status shows.
            kube_config.default_retry = false;
            let server = kube_config.cluster_url.to_string();
            let client =
                kube::Client::try_from(kube_config).map_err(|e| crate::Error::Cluster {
                    cluster: member.name.clone(),
                    message: format!("cannot build a client: {e}"),
                })?;
            clients.insert(member.name.clone(), client.clone());
            let resources = resources_for(&member.name, &config.registries);
            let source = ClusterSource::start(
                &member.name,
                &server,
                client,
                resources,
                config.source.clone(),
                tx.clone(),
                &token,
            )
            .await;
            sources.push(source);
            // When its credentials expire, for the cluster's warnings.
            let credentials = crate::sources::credentials::expiry(&member.config);
            let _ = tx
                .send(Observation::Cluster {
                    cluster: member.name.clone(),
                    input: crate::status::cluster::ClusterInput::Credentials(credentials),
                })
                .await;
        }
        Ok(Arc::new(Self {
            hub,
            metrics,
            sources: Mutex::new(sources),
            clients,
            app_label: config.source.app_label.clone(),
            engine: Mutex::new(Some(engine)),
            tx,
            token,
        }))
    }

    /// The hub the engine publishes into; subscribe here for status documents.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// The metrics the engine records into; share them with the gateway.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// Each member's kube-rs client (the ones the watches use).
    pub fn clients(&self) -> &BTreeMap<String, kube::Client> {
        &self.clients
    }

    /// The label that groups workloads into apps.
    pub fn app_label(&self) -> &str {
        &self.app_label
    }

    /// A sender into the engine, for observations that are not from sources.
    pub fn observations(&self) -> mpsc::Sender<Observation> {
        self.tx.clone()
    }

    /// Replaces the sync registries: each cluster starts and stops watches to match.
    pub async fn set_registries(&self, registries: Vec<SyncRegistry>) {
        let mut sources = self.sources.lock().await;
        for source in sources.iter_mut() {
            let resources = resources_for(source.name(), &registries);
            source.set_resources(resources).await;
        }
    }

    /// The `Server` health check: the engine runs and keeps up with its sources.
    pub fn check_engine(&self) -> Result<(), String> {
        let finished = self
            .engine
            .try_lock()
            .map(|e| e.as_ref().is_none_or(|t| t.is_finished()));
        if matches!(finished, Ok(true)) {
            return Err("the status engine is not running".into());
        }
        if self.tx.capacity() == 0 {
            return Err(format!(
                "the status engine is {OBSERVATION_QUEUE} observations behind"
            ));
        }
        Ok(())
    }

    /// The `Syncer` health check: every member cluster has an answer (up or
    /// down) and its probe and watches run.
    pub async fn check_syncer(&self) -> Result<(), String> {
        let problems = self.syncer_problems().await;
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems
                .into_iter()
                .map(|(_, text)| text)
                .collect::<Vec<_>>()
                .join("; "))
        }
    }

    /// What fails the `Syncer` check, each with the cluster it is about.
    pub async fn syncer_problems(&self) -> Vec<(String, String)> {
        let sources = self.sources.lock().await;
        let mut problems = Vec::new();
        for source in sources.iter() {
            let phase = self
                .hub
                .get(&crate::hub::topic::cluster(source.name()))
                .and_then(|d| {
                    d.doc
                        .get("phase")
                        .and_then(|p| p.as_str())
                        .map(str::to_string)
                })
                .unwrap_or_default();
            let cluster = source.name().to_string();
            if matches!(phase.as_str(), "" | "Pending" | "Initializing") {
                let text = format!("cluster {cluster} has not answered yet");
                problems.push((cluster.clone(), text));
            }
            if let Some(stopped) = source.stopped_task() {
                let text = format!("cluster {cluster}: {stopped} stopped");
                problems.push((cluster, text));
            }
        }
        problems
    }

    /// Stops every source and the engine, and waits for them.
    pub async fn stop(&self) {
        self.token.cancel();
        let sources: Vec<ClusterSource> = std::mem::take(&mut *self.sources.lock().await);
        for source in sources {
            source.stop().await;
        }
        if let Some(engine) = self.engine.lock().await.take() {
            let _ = engine.await;
        }
    }
}
