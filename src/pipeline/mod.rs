//! The running gateway core that `serve` and `demo` share: sources, engine
//! and hub for a set of member clusters
//! (`member sources ──desired members──▶ [union, diff] ──▶ Pipeline ──▶ sources, engine, hub`).
//!
//! Members come and go while it runs (`add_member`, `remove_member`,
//! `update_member`, `reconcile`). A [`MemberSource`] (the `--config` file or
//! a kubeconfig) and Karpor's `Cluster` objects (src/karpor/) each say which
//! members there should be; [`union`] merges them; [`diff`] compares that
//! with the running ones; [`reload`] re-reads the file on SIGHUP and when it
//! changes. [`clients`] builds each member's client and holds the running
//! ones, which tasks read.

mod clients;
mod demand;
mod diff;
mod log;
mod member;
mod member_source;
pub mod reload;
mod settings;
pub mod union;

pub use clients::{
    Access, MemberClient, MemberClients, PushLinks, RemoteActions, kube_config, members, pushed,
};
pub use diff::{Fingerprint, MemberDiff, diff, fingerprint};
pub use member::{HeldMember, Member};
pub use member_source::{DesiredMembers, MemberSource};
pub use settings::PipelineConfig;

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::engine::{self, Engine, Observation};
use crate::hub::Hub;
use crate::sources::{ClusterSource, SourceConfig, SyncRegistry, resources_for};
use crate::status::cluster::{ClusterInput, CredentialInfo};

/// Observations waiting for the engine; sources wait when it is full.
const OBSERVATION_QUEUE: usize = 4096;

/// A running member: its source and the fingerprint of the settings it runs with.
struct Running {
    fingerprint: Fingerprint,
    source: ClusterSource,
}

/// A push member's link to its agent, running.
struct Link {
    agent: String,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The running members and the sync registries they watch by.
struct Members {
    running: BTreeMap<String, Running>,
    /// Push members held here whose agents are followed.
    links: BTreeMap<String, Link>,
    /// Members shown but not started; never also in `running`.
    held: BTreeMap<String, HeldMember>,
    registries: Vec<SyncRegistry>,
}

/// Sources + engine + hub, running.
pub struct Pipeline {
    /// What clients are served from (transports, REST, tasks, summaries).
    hub: Arc<Hub>,
    /// Where the engine puts its documents: `hub` itself, except with a
    /// stream of changes shared by replicas, which carries them from here
    /// to every replica's `hub` (`docs/SCALE-OUT.md`).
    origin: Arc<Hub>,
    metrics: Arc<crate::metrics::Metrics>,
    /// Held across a whole member or registry change (source starts and
    /// stops included), so changes apply one at a time, in order; health
    /// checks wait for it, tasks never do (they read `clients`).
    members: Mutex<Members>,
    /// One client per running member, shared with tasks.
    clients: Arc<MemberClients>,
    source_config: SourceConfig,
    app_label: String,
    engine: Mutex<Option<JoinHandle<()>>>,
    /// Kept to see how full the engine's queue is (health).
    tx: mpsc::Sender<Observation>,
    /// How push members' agents are followed, once set.
    push_links: std::sync::OnceLock<Arc<dyn PushLinks>>,
    token: CancellationToken,
}

// By hand: holds clients, channels and task handles; show what it watches.
impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("members", &self.clients.names())
            .field("app_label", &self.app_label)
            .finish_non_exhaustive()
    }
}

/// A member's client, server URL, connection fingerprint, and when its
/// credentials expire (for the cluster's warnings).
type Connected = (kube::Client, String, Fingerprint, Option<CredentialInfo>);

fn connect(member: &Member) -> crate::Result<Connected> {
    let mut kube_config = member.config.clone();
    // Sources report errors and back off themselves; client-side
    // retries of 429/503 would only delay what the status shows.
    kube_config.default_retry = false;
    let server = kube_config.cluster_url.to_string();
    let fingerprint = diff::fingerprint(&member.config);
    let credentials = crate::sources::credentials::expiry(&kube_config);
    let client =
        crate::sources::bounded::client(kube_config).map_err(|e| crate::Error::Cluster {
            cluster: member.name.clone(),
            message: format!("cannot build a client: {e}"),
        })?;
    Ok((client, server, fingerprint, credentials))
}

/// Up to this many clients are built on the calling task; more (a fleet's
/// start) on a blocking thread, so the gateway keeps answering meanwhile.
const CONNECT_INLINE: usize = 16;

/// Each member's client, by name; the first member that cannot have one
/// refuses them all.
async fn connect_all(members: Vec<Member>) -> crate::Result<BTreeMap<String, Connected>> {
    let inline = members.len() <= CONNECT_INLINE;
    let build = move || -> crate::Result<BTreeMap<String, Connected>> {
        members
            .iter()
            .map(|member| Ok((member.name.clone(), connect(member)?)))
            .collect()
    };
    if inline {
        return build();
    }
    tokio::task::spawn_blocking(build)
        .await
        .map_err(|e| crate::Error::Unavailable(format!("building member clients: {e}")))?
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
        Self::start_apart(hub.clone(), hub, members, config, shutdown).await
    }

    /// Starts the engine and one source per member, the engine publishing
    /// into `origin` and clients served from `hub` (which something else
    /// fills from `origin`: the stream of changes).
    pub async fn start_apart(
        hub: Arc<Hub>,
        origin: Arc<Hub>,
        members: Vec<Member>,
        config: PipelineConfig,
        shutdown: &CancellationToken,
    ) -> crate::Result<Arc<Self>> {
        // Every client first: a member that cannot have one starts nothing.
        let connected = members
            .iter()
            .map(|m| connect(m).map(|c| (m.name.clone(), c)))
            .collect::<crate::Result<Vec<_>>>()?;
        let token = shutdown.child_token();
        let (tx, rx) = mpsc::channel::<Observation>(OBSERVATION_QUEUE);
        let metrics = crate::metrics::Metrics::new();
        let engine = Engine::new(origin.clone(), config.thresholds)
            .with_metrics(metrics.clone())
            .with_retention(config.app_retention);
        let engine = tokio::spawn(engine::run(engine, hub.clone(), rx, token.clone()));
        let pipeline = Arc::new(Self {
            hub,
            origin,
            metrics,
            members: Mutex::new(Members {
                running: BTreeMap::new(),
                links: BTreeMap::new(),
                held: BTreeMap::new(),
                registries: config.registries,
            }),
            clients: Arc::new(MemberClients::default()),
            app_label: config.source.app_label.clone(),
            source_config: config.source,
            engine: Mutex::new(Some(engine)),
            tx,
            push_links: std::sync::OnceLock::new(),
            token,
        });
        {
            let mut members = pipeline.members.lock().await;
            for (name, connected) in connected {
                pipeline.start_member(&mut members, &name, connected).await;
            }
        }
        Ok(pipeline)
    }

    // Members that come and go (src/pipeline/): add, remove, restart, reconcile.

    /// Starts watching a new member. Refused (409) when one of that name runs.
    pub async fn add_member(&self, member: Member) -> crate::Result<()> {
        self.running()?;
        let connected = connect(&member)?;
        let server = connected.1.clone();
        let mut members = self.members.lock().await;
        if members.running.contains_key(&member.name) || members.held.contains_key(&member.name) {
            return Err(crate::Error::Conflict(format!(
                "member cluster {:?} already runs",
                member.name
            )));
        }
        tracing::info!(cluster = %member.name, server = %server, "member cluster added");
        self.start_member(&mut members, &member.name, connected)
            .await;
        Ok(())
    }

    /// Stops a member's sources, then removes every topic of it
    /// (`clusters/{name}`, its sync documents, its apps): subscribers get
    /// `removed`, its metrics series go, its tasks fail. False when no
    /// member of that name runs.
    pub async fn remove_member(&self, name: &str) -> bool {
        let mut members = self.members.lock().await;
        if members.held.remove(name).is_some() {
            self.unlink(&mut members, name).await;
            self.unregister(name).await;
            return true;
        }
        self.stop_member(&mut members, name, true).await
    }

    /// Restarts a member's sources with new connection settings (a new
    /// client); its documents stay and follow what the new sources see.
    /// Nothing happens when the settings are the same; false then, true
    /// when it restarted. Not found (404) when no member of that name runs.
    pub async fn update_member(&self, member: Member) -> crate::Result<bool> {
        self.running()?;
        let connected = connect(&member)?;
        let server = connected.1.clone();
        let mut members = self.members.lock().await;
        match members.running.get(&member.name) {
            None => Err(crate::Error::NotFound(format!(
                "member cluster {:?} does not run",
                member.name
            ))),
            Some(running) if running.fingerprint == connected.2 => Ok(false),
            Some(_) => {
                tracing::info!(cluster = %member.name, server = %server, "member cluster settings changed; restarting its sources");
                self.stop_member(&mut members, &member.name, false).await;
                self.start_member(&mut members, &member.name, connected)
                    .await;
                Ok(true)
            }
        }
    }

    /// Makes the running members `desired` (and the registries
    /// `registries`, when given) in one step: removed members first, then
    /// restarts, then new ones. Every client is built before anything
    /// changes, so a member that cannot have one refuses the whole change.
    pub async fn reconcile(
        &self,
        desired: Vec<Member>,
        registries: Option<Vec<SyncRegistry>>,
    ) -> crate::Result<MemberDiff> {
        self.reconcile_with_held(desired, Vec::new(), registries)
            .await
    }

    /// [`Pipeline::reconcile`] with members to hold besides those to run
    /// (a name in both runs). A member moving between held and running is
    /// removed and added again: its topic goes and comes back.
    pub async fn reconcile_with_held(
        &self,
        desired: Vec<Member>,
        held: Vec<HeldMember>,
        registries: Option<Vec<SyncRegistry>>,
    ) -> crate::Result<MemberDiff> {
        self.running()?;
        let held: BTreeMap<String, HeldMember> = held
            .into_iter()
            .filter(|h| !desired.iter().any(|m| m.name == h.name))
            .map(|h| (h.name.clone(), h))
            .collect();
        // Fingerprints first (a digest, no client): only members added or
        // changed get a client, so a change to one of thousands of members
        // builds one client, not thousands.
        let wanted: BTreeMap<String, Fingerprint> = desired
            .iter()
            .map(|member| (member.name.clone(), diff::fingerprint(&member.config)))
            .collect();
        let mut members = self.members.lock().await;
        let running: BTreeMap<String, Fingerprint> = members
            .running
            .iter()
            .map(|(name, r)| (name.clone(), r.fingerprint))
            .collect();
        let mut diff = diff::diff(&running, &wanted);
        let starting: std::collections::BTreeSet<&String> =
            diff.added.iter().chain(&diff.changed).collect();
        let to_connect: Vec<Member> = desired
            .into_iter()
            .filter(|m| starting.contains(&m.name))
            .collect();
        let mut connected = connect_all(to_connect).await?;
        let mut removed = Vec::new();
        for name in &diff.removed {
            if !held.contains_key(name) {
                removed.push(name.clone());
            }
            self.stop_member(&mut members, name, true).await;
        }
        let was_held = std::mem::take(&mut members.held);
        for name in was_held.keys().filter(|n| !held.contains_key(*n)) {
            // Held before: removed, or added below as a running member.
            self.unlink(&mut members, name).await;
            self.unregister(name).await;
            if !wanted.contains_key(name) {
                removed.push(name.clone());
                diff.removed.push(name.clone());
            }
        }
        log::removed(&removed);
        let mut newly_held = Vec::new();
        for (name, member) in &held {
            if was_held.get(name) != Some(member) {
                self.hold(&mut members, member).await;
                newly_held.push(member);
                diff.held.push(name.clone());
            }
        }
        log::held(&newly_held);
        members.held = held;
        if let Some(registries) = registries {
            members.registries = registries;
        }
        log::changed(&diff.changed);
        for name in &diff.changed {
            self.stop_member(&mut members, name, false).await;
        }
        let registries = members.registries.clone();
        for running in members.running.values_mut() {
            let resources = resources_for(running.source.name(), &registries);
            running.source.set_resources(resources).await;
        }
        let added: Vec<(&str, &str)> = diff
            .added
            .iter()
            .filter_map(|name| Some((name.as_str(), connected.get(name)?.1.as_str())))
            .collect();
        log::added(&added);
        for name in diff.changed.iter().chain(&diff.added) {
            if let Some(connected) = connected.remove(name) {
                self.start_member(&mut members, name, connected).await;
            }
        }
        Ok(diff)
    }

    /// Shows a held member: registered with its server, `Unhealthy` with
    /// its reason; a push member's agent is followed instead (a link to
    /// another agent stopped first).
    async fn hold(&self, members: &mut Members, member: &HeldMember) {
        // Held otherwise before (pushed, or for another reason): its
        // documents go first, so that a push member's and a held one's
        // never mix.
        self.unlink(members, &member.name).await;
        self.unregister(&member.name).await;
        if let Some(agent) = &member.agent {
            if let Some(links) = self.push_links.get() {
                let stop = self.token.child_token();
                let task = links.follow(&member.name, agent, self.tx.clone(), stop.clone());
                members.links.insert(
                    member.name.clone(),
                    Link {
                        agent: agent.clone(),
                        stop,
                        task,
                    },
                );
                self.clients
                    .set(&member.name, Access::Agent(links.actions(&member.name)));
                return;
            }
            let without = HeldMember {
                reason: "NoAgentLink".into(),
                message: "a push member's documents come from its agent over NATS; this gateway runs without --nats".into(),
                agent: None,
                ..member.clone()
            };
            return Box::pin(self.hold(members, &without)).await;
        }
        let _ = self
            .tx
            .send(Observation::Registered {
                cluster: member.name.clone(),
                server: member.server.clone(),
            })
            .await;
        let _ = self
            .tx
            .send(Observation::Cluster {
                cluster: member.name.clone(),
                input: ClusterInput::Held {
                    reason: member.reason.clone(),
                    message: member.message.clone(),
                },
            })
            .await;
    }

    /// Stops following a push member's agent, if it was, and waits for its
    /// link: nothing of it reaches the engine afterwards.
    async fn unlink(&self, members: &mut Members, name: &str) {
        if let Some(link) = members.links.remove(name) {
            self.clients.remove(name);
            link.stop.cancel();
            let _ = link.task.await;
            tracing::debug!(cluster = %name, agent = %link.agent, "no longer following the member's agent");
        }
    }

    /// Follows the agents of push members from now on (members held as
    /// push members before show `Unhealthy (NoAgentLink)` until they change).
    pub fn set_push_links(&self, links: Arc<dyn PushLinks>) {
        let _ = self.push_links.set(links);
    }

    /// Tells the engine to forget a member (its topics go).
    async fn unregister(&self, name: &str) {
        let _ = self
            .tx
            .send(Observation::Unregistered {
                cluster: name.to_string(),
            })
            .await;
    }

    /// The names of the held members and why each is held.
    pub async fn held(&self) -> Vec<HeldMember> {
        self.members.lock().await.held.values().cloned().collect()
    }

    /// Unavailable once the pipeline stops: no member starts after that.
    fn running(&self) -> crate::Result<()> {
        if self.token.is_cancelled() {
            return Err(crate::Error::Unavailable("the pipeline is stopping".into()));
        }
        Ok(())
    }

    async fn start_member(&self, members: &mut Members, name: &str, connected: Connected) {
        let (client, server, fingerprint, credentials) = connected;
        let resources = resources_for(name, &members.registries);
        let source = ClusterSource::start(
            name,
            &server,
            client.clone(),
            resources,
            self.source_config.clone(),
            self.tx.clone(),
            &self.token,
        )
        .await;
        // When its credentials expire, for the cluster's warnings.
        let _ = self
            .tx
            .send(Observation::Cluster {
                cluster: name.to_string(),
                input: ClusterInput::Credentials(credentials),
            })
            .await;
        members.running.insert(
            name.to_string(),
            Running {
                fingerprint,
                source,
            },
        );
        self.clients.set(name, Access::Direct(client));
    }

    /// Stops a member's source and waits for its tasks; when `removing`,
    /// then tells the engine to forget the member. That order is what keeps
    /// a removed member removed: every observation of the stopped source is
    /// in the engine's queue before `Unregistered`, none can come after it
    /// and bring a topic back.
    async fn stop_member(&self, members: &mut Members, name: &str, removing: bool) -> bool {
        let Some(running) = members.running.remove(name) else {
            return false;
        };
        if removing {
            // First: new tasks are refused and running ones fail at once.
            self.clients.remove(name);
        }
        running.source.stop().await;
        if removing {
            self.unregister(name).await;
        }
        true
    }

    /// The hub the engine publishes into; subscribe here for status documents.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// The hub the engine puts its documents into: [`Pipeline::hub`],
    /// unless clients are served from a stream of changes.
    pub fn origin(&self) -> &Arc<Hub> {
        &self.origin
    }

    /// The metrics the engine records into; share them with the gateway.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// Each running member's kube-rs client (the ones the watches use), as now.
    pub fn clients(&self) -> BTreeMap<String, kube::Client> {
        self.clients.snapshot()
    }

    /// The running members' clients, kept current as members come and go.
    pub fn members(&self) -> &Arc<MemberClients> {
        &self.clients
    }

    /// The label that groups workloads into apps.
    pub fn app_label(&self) -> &str {
        &self.app_label
    }

    /// Which pods are watched, and whether on demand.
    pub fn pod_watch(&self) -> &crate::sources::PodWatch {
        &self.source_config.pod_watch
    }

    /// Every second: with `podWatch.onDemand`, starts each running member's
    /// pod and event watches while a client's subscription reaches its apps
    /// (the hub's demand: this process's clients, and with a stream of
    /// changes the other replicas' as they report them), and stops them
    /// `lingerSeconds` after the last one went; tells each push member's
    /// agent the same (wanted always without `onDemand`), at once when it
    /// changes and again every ten seconds. Until `shutdown`.
    pub async fn follow_demand(self: Arc<Self>, shutdown: CancellationToken) {
        let on_demand = self.source_config.pod_watch.on_demand;
        let linger = self.source_config.pod_watch.linger();
        let demand = self.hub().demand().clone();
        let mut viewed = demand::LastViewed::default();
        let mut told = demand::Told::default();
        let mut tick = tokio::time::interval(demand::TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let now = tokio::time::Instant::now();
            let mut members = self.members.lock().await;
            let mut wanted = |name: &str| {
                let looked_at = demand.any(now, |p| p.reaches_apps_of(name));
                viewed.wanted(name, looked_at, now, linger)
            };
            if on_demand {
                for running in members.running.values_mut() {
                    let name = running.source.name().to_string();
                    running.source.want_pods(wanted(&name)).await;
                }
            }
            if let Some(links) = self.push_links.get() {
                for name in members.links.keys() {
                    let wanted = !on_demand || wanted(name);
                    if told.due(name, wanted, now) {
                        links.tell_pods(name, wanted);
                    }
                }
            }
            let Members { running, links, .. } = &*members;
            viewed.keep(|name| running.contains_key(name) || links.contains_key(name));
            told.keep(|name| links.contains_key(name));
        }
    }

    /// An agent's member: starts or stops its pod and event watches as the
    /// hub says (`podWatch.onDemand` on the agent); a member not running
    /// here is left alone.
    pub async fn want_pods(&self, member: &str, wanted: bool) {
        let mut members = self.members.lock().await;
        if let Some(running) = members.running.get_mut(member) {
            running.source.want_pods(wanted).await;
        }
    }

    /// How custom workloads are read (the health rules in force).
    pub fn rules(&self) -> &std::sync::Arc<crate::status::rules::HealthRules> {
        &self.source_config.rules
    }

    /// A sender into the engine, for observations that are not from sources.
    pub fn observations(&self) -> mpsc::Sender<Observation> {
        self.tx.clone()
    }

    /// Replaces the sync registries: each cluster starts and stops watches to match.
    pub async fn set_registries(&self, registries: Vec<SyncRegistry>) {
        let mut members = self.members.lock().await;
        for running in members.running.values_mut() {
            let resources = resources_for(running.source.name(), &registries);
            running.source.set_resources(resources).await;
        }
        members.registries = registries;
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
        let members = self.members.lock().await;
        let mut problems = Vec::new();
        for source in members.running.values().map(|r| &r.source) {
            let phase = self
                .origin
                .get(&crate::protocol::topic::cluster(source.name()))
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
        let links = std::mem::take(&mut self.members.lock().await.links);
        for (_, link) in links {
            link.stop.cancel();
            let _ = link.task.await;
        }
        let running = std::mem::take(&mut self.members.lock().await.running);
        for (_, running) in running {
            running.source.stop().await;
        }
        if let Some(engine) = self.engine.lock().await.take() {
            let _ = engine.await;
        }
    }
}
