//! Writes kube-pulse's status back onto Karpor's objects
//! (`hub ──documents──▶ [writer] ──PATCH …/status──▶ Karpor apiserver`).
//!
//! The writer watches Karpor's `Cluster` and `SyncRegistry` objects and
//! subscribes to the hub's cluster and sync documents. A change marks the
//! objects it concerns dirty; a dirty object is written when its computed
//! status ([`super::report`]) differs from what was last written, at most
//! once per `min_interval` per object, as a JSON merge patch of the
//! `/status` subresource that carries only the fields kube-pulse owns
//! ([`report::CLUSTER_FIELDS`], [`REGISTRY_FIELDS`]) and the object's
//! `resourceVersion` as a precondition. The conditions list (which a merge
//! patch replaces whole) is merged by type into the one just read, so
//! every other field and condition type stays as it is: 409 re-reads the
//! object and merges again, 404 forgets it, other failures retry with a
//! backoff and show in `/metrics`, the `KarporStatus` readiness check and
//! the log.
//!
//! One writer per Karpor: writes carry the field manager
//! `kube-pulse/{replica}`, which the apiserver records in `managedFields`
//! with the time of the write. A writer that sees another kube-pulse
//! manager write status after it started, or within the last
//! [`FOREIGN_WRITER_WINDOW`] when it starts, stands by if that manager's
//! name sorts before its own (both replicas apply the same rule, so one of
//! them keeps writing), and says so in the log and in
//! `kube_pulse_karpor_status_writer_standby`.
//!
//! With Leases (src/scale/), replicas share the members ([`Sharing`]) and
//! none stands by: each replica's writer writes the Clusters of the members
//! this replica owns, asking the ownership ([`Owns`]) at every attempt (after
//! a conflict's re-read too). The ownership lets a member go before it stops
//! the member and releases its Lease, and counts a member won only once its
//! Lease is held, so a member handed over is not written by its old owner
//! once the new one may write it; only a write already sent when the
//! ownership let go can land after that, and the `resourceVersion` it
//! carries keeps it from overwriting a newer one. A SyncRegistry spans
//! clusters of several owners. Without the stream each hub holds only its
//! own members' documents, and registries are not written. With the stream
//! (`--nats`) every hub holds every member's documents, and exactly one
//! replica writes a registry: the owner of the first (by name) of the
//! Karpor Clusters it applies to, or of the first Karpor Cluster when it
//! applies to none; while no Cluster is known, nobody.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::report::{self, ClusterReport, ResourceReport};
use super::settings::{KarporSettings, Sharing, WriterSettings};
use super::types;
use crate::hub::{Delivery, Hub, Pattern, TopicDoc};
use crate::protocol::TopicKind;
use crate::status::sync::Gvr;

/// The `status` fields of a Karpor `SyncRegistry` kube-pulse writes.
const REGISTRY_FIELDS: &[&str] = &["clusters", "lastTransitionTime"];

/// The `status` fields of a Cluster an apiserver may drop (Karpor 0.6's
/// schema has none of them).
const DROPPABLE: &[&str] = &["conditions", "version", "apiserver"];

/// A registry resource's `apiVersion`, plural and sync document.
type SyncDoc = (String, String, Option<TopicDoc>);

/// The prefix of every kube-pulse writer's field manager.
pub(crate) const MANAGER_PREFIX: &str = "kube-pulse/";

/// A kube-pulse writer seen writing status this recently is taken as live.
pub(crate) const FOREIGN_WRITER_WINDOW: Duration = Duration::from_secs(60);

/// Writes that keep failing this long fail the `KarporStatus` check.
const FAILING_FOR: Duration = Duration::from_secs(60);

/// Attempts of one write that meets conflicts (each re-reads the object).
const CONFLICT_ATTEMPTS: usize = 3;

/// Which members this replica owns now, as the writer asks at every write.
pub(crate) trait Owns: Send + Sync {
    fn owns(&self, member: &str) -> bool;
}

impl Owns for crate::scale::OwnershipHealth {
    fn owns(&self, member: &str) -> bool {
        crate::scale::OwnershipHealth::owns(self, member)
    }
}

/// Which of Karpor's objects a write is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    Cluster,
    SyncRegistry,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Cluster => "Cluster",
            Kind::SyncRegistry => "SyncRegistry",
        }
    }
}

/// What the writer last sent for one object and what came back.
#[derive(Debug, Clone)]
struct Sent {
    /// The status computed and sent.
    desired: Value,
    /// The status the apiserver stored (after pruning unknown fields).
    stored: Value,
    at: Instant,
}

/// The writer's state, shared with its readiness check.
#[derive(Debug, Default)]
pub(crate) struct WriterState {
    inner: Mutex<StateInner>,
}

#[derive(Debug, Default)]
struct StateInner {
    /// The first failure of the writes that have failed since the last success.
    failing_since: Option<(std::time::Instant, String)>,
    /// Another writer this one stands by for.
    standby_for: Option<String>,
}

impl WriterState {
    /// Ok, or why Karpor's objects are not being written.
    pub(crate) fn check(&self) -> Result<(), String> {
        let inner = self.inner.lock();
        match &inner.failing_since {
            Some((since, error)) if since.elapsed() >= FAILING_FOR => Err(format!(
                "status writes to Karpor have failed for {} s: {error}",
                since.elapsed().as_secs()
            )),
            _ => Ok(()),
        }
    }

    fn failed(&self, error: String) {
        let mut inner = self.inner.lock();
        match &mut inner.failing_since {
            Some((_, last)) => *last = error,
            None => inner.failing_since = Some((std::time::Instant::now(), error)),
        }
    }

    fn succeeded(&self) {
        self.inner.lock().failing_since = None;
    }
}

/// Karpor's two kinds, as the writer reaches them.
#[derive(Clone)]
pub(crate) struct KarporApis {
    pub(crate) clusters: Api<DynamicObject>,
    pub(crate) registries: Api<DynamicObject>,
}

impl KarporApis {
    /// Both kinds where `api` found them, as dynamic objects (a status
    /// write sends the object back whole, fields kube-pulse does not know
    /// included).
    pub(crate) fn new(api: &super::api::KarporApi) -> Self {
        let client = api.client().clone();
        Self {
            clusters: Api::all_with(client.clone(), &api.cluster_kind().resource),
            registries: Api::all_with(client, &api.registry_kind().resource),
        }
    }

    fn api(&self, kind: Kind) -> &Api<DynamicObject> {
        match kind {
            Kind::Cluster => &self.clusters,
            Kind::SyncRegistry => &self.registries,
        }
    }
}

/// What a watch of one kind reports to the writer loop.
enum Seen {
    Object(Kind, Box<DynamicObject>),
    Deleted(Kind, String),
    /// A (re)list completed: these are all the objects of the kind.
    Listed(Kind, BTreeSet<String>),
}

/// The writer loop's state.
struct Writer {
    hub: Arc<Hub>,
    apis: KarporApis,
    settings: WriterSettings,
    /// With Leases: which members this replica owns (None owns nothing).
    owns: Option<Arc<dyn Owns>>,
    /// With Leases: the known Clusters this replica owned at the last look.
    owned: BTreeSet<String>,
    manager: String,
    started: DateTime<Utc>,
    state: Arc<WriterState>,
    metrics: Arc<crate::metrics::Metrics>,
    objects: BTreeMap<(Kind, String), DynamicObject>,
    sent: HashMap<(Kind, String), Sent>,
    dirty: BTreeMap<(Kind, String), Instant>,
    /// Other kube-pulse managers seen writing status, and when they last did.
    foreign: BTreeMap<String, DateTime<Utc>>,
    standby: bool,
    /// The Cluster status fields the apiserver dropped from the last write
    /// that carried them (Karpor 0.6 keeps only `healthy`); none until a
    /// write says.
    dropped: BTreeSet<&'static str>,
    /// The configuration file's member names: the member running under
    /// such a name is the file's, not a Cluster's, so a Cluster of that
    /// name is left alone.
    file_names: Option<tokio::sync::watch::Receiver<BTreeSet<String>>>,
}

/// Starts the writer for the Karpor `karpor` names: it connects (retrying
/// with a backoff up to 30 s while Karpor does not answer; the source
/// reports that) and writes until `shutdown`. With Leases (`settings.sharing`),
/// `owns` says which members this replica owns.
pub(crate) fn spawn(
    karpor: &KarporSettings,
    hub: Arc<Hub>,
    settings: WriterSettings,
    owns: Option<Arc<dyn Owns>>,
    file_names: tokio::sync::watch::Receiver<BTreeSet<String>>,
    metrics: Arc<crate::metrics::Metrics>,
    shutdown: CancellationToken,
) -> (Arc<WriterState>, tokio::task::JoinHandle<()>) {
    let state = Arc::new(WriterState::default());
    let (kubeconfig, context) = (karpor.kubeconfig.clone(), karpor.context.clone());
    let shared = state.clone();
    let task = tokio::spawn(async move {
        let mut backoff = Duration::from_secs(1);
        let api = loop {
            let connected = async {
                let config = super::api::kube_config(&kubeconfig, context.as_deref()).await?;
                super::api::KarporApi::connect(config).await
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                connected = connected => match connected {
                    Ok(api) => break api,
                    Err(e) => tracing::debug!(cause = %e, "the status writer cannot reach Karpor yet"),
                },
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(30));
        };
        let mut writer = Writer::new(hub, KarporApis::new(&api), settings, owns, metrics);
        writer.state = shared;
        writer.file_names = Some(file_names);
        writer.run(shutdown).await;
    });
    (state, task)
}

/// Starts a writer on `apis`; it runs until `shutdown`.
#[cfg(test)]
fn spawn_on(
    hub: Arc<Hub>,
    apis: KarporApis,
    settings: WriterSettings,
    owns: Option<Arc<dyn Owns>>,
    metrics: Arc<crate::metrics::Metrics>,
    shutdown: CancellationToken,
) -> (Arc<WriterState>, tokio::task::JoinHandle<()>) {
    let writer = Writer::new(hub, apis, settings, owns, metrics);
    let state = writer.state.clone();
    let task = tokio::spawn(writer.run(shutdown));
    (state, task)
}

/// Watches one kind, as [`Seen`]s, until the receiver goes.
fn watch(kind: Kind, api: Api<DynamicObject>) -> impl futures::Stream<Item = Seen> + Send {
    let mut listing: BTreeSet<String> = BTreeSet::new();
    crate::relist::watcher(api, watcher::Config::default())
        .filter_map(move |event| {
            let seen = match event {
                Ok(Event::Apply(o)) => Some(Seen::Object(kind, Box::new(o))),
                Ok(Event::InitApply(o)) => {
                    listing.insert(o.metadata.name.clone().unwrap_or_default());
                    Some(Seen::Object(kind, Box::new(o)))
                }
                Ok(Event::Delete(o)) => Some(Seen::Deleted(kind, o.metadata.name.unwrap_or_default())),
                Ok(Event::Init) => {
                    listing.clear();
                    None
                }
                Ok(Event::InitDone) => Some(Seen::Listed(kind, std::mem::take(&mut listing))),
                Err(error) => {
                    tracing::warn!(kind = kind.name(), error = %error, "watching Karpor's objects failed; retrying");
                    None
                }
            };
            std::future::ready(seen)
        })
}

impl Writer {
    fn new(
        hub: Arc<Hub>,
        apis: KarporApis,
        settings: WriterSettings,
        owns: Option<Arc<dyn Owns>>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        let manager = format!("{MANAGER_PREFIX}{}", settings.replica);
        Writer {
            hub,
            apis,
            settings,
            owns,
            owned: BTreeSet::new(),
            manager,
            started: Utc::now(),
            state: Arc::new(WriterState::default()),
            metrics,
            objects: BTreeMap::new(),
            sent: HashMap::new(),
            dirty: BTreeMap::new(),
            foreign: BTreeMap::new(),
            standby: false,
            dropped: BTreeSet::new(),
            file_names: None,
        }
    }

    async fn run(mut self, shutdown: CancellationToken) {
        let patterns = ["clusters/*", "clusters/*/sync/**"]
            .iter()
            .map(|p| Pattern::parse(p).expect("valid patterns"))
            .collect();
        let mut documents = self.hub.subscribe(patterns);
        let clusters = watch(Kind::Cluster, self.apis.clusters.clone());
        let registries = watch(Kind::SyncRegistry, self.apis.registries.clone());
        let mut seen = futures::stream::select(clusters, registries).boxed();
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                delivery = documents.next() => self.document_changed(&delivery),
                Some(event) = seen.next() => self.object_seen(event),
                _ = tick.tick() => self.flush().await,
            }
        }
    }

    fn mark(&mut self, key: (Kind, String)) {
        self.dirty.entry(key).or_insert_with(Instant::now);
    }

    /// A cluster document concerns its Karpor Cluster and every registry;
    /// a sync document every registry.
    fn document_changed(&mut self, delivery: &Delivery) {
        let topic = match delivery {
            Delivery::Change(c) => &c.topic,
            Delivery::Resync { topic, .. } => topic,
        };
        match topic.kind() {
            Some(TopicKind::Cluster { cluster }) => {
                self.mark((Kind::Cluster, cluster.to_string()));
            }
            Some(TopicKind::Sync { .. }) => {}
            _ => return,
        }
        let registries: Vec<_> = self
            .objects
            .keys()
            .filter(|(kind, _)| *kind == Kind::SyncRegistry)
            .cloned()
            .collect();
        for key in registries {
            self.mark(key);
        }
    }

    fn object_seen(&mut self, seen: Seen) {
        match seen {
            Seen::Object(kind, object) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                self.note_managers(&object);
                self.objects.insert((kind, name.clone()), *object);
                self.mark((kind, name));
                if kind == Kind::Cluster {
                    // Labels decide which registries apply to it.
                    let registries: Vec<_> = self
                        .objects
                        .keys()
                        .filter(|(k, _)| *k == Kind::SyncRegistry)
                        .cloned()
                        .collect();
                    for key in registries {
                        self.mark(key);
                    }
                }
            }
            Seen::Deleted(kind, name) => {
                self.objects.remove(&(kind, name.clone()));
                self.sent.remove(&(kind, name.clone()));
                self.dirty.remove(&(kind, name));
            }
            Seen::Listed(kind, names) => {
                self.objects
                    .retain(|(k, name), _| *k != kind || names.contains(name));
                self.sent
                    .retain(|(k, name), _| *k != kind || names.contains(name));
            }
        }
    }
}

impl Writer {
    /// Notes other kube-pulse writers of this object's status.
    fn note_managers(&mut self, object: &DynamicObject) {
        // Shared members: the other replicas write the objects they own.
        if self.settings.sharing != Sharing::Alone {
            return;
        }
        let now = Utc::now();
        for entry in object.metadata.managed_fields.iter().flatten() {
            let Some(manager) = entry.manager.as_deref() else {
                continue;
            };
            if !manager.starts_with(MANAGER_PREFIX)
                || manager == self.manager
                || entry.subresource.as_deref() != Some("status")
            {
                continue;
            }
            let Some(at) = entry
                .time
                .as_ref()
                .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
            else {
                continue;
            };
            let live = at > self.started
                || (now - at)
                    .to_std()
                    .is_ok_and(|age| age < FOREIGN_WRITER_WINDOW);
            if live {
                let last = self.foreign.entry(manager.to_string()).or_insert(at);
                if at > *last {
                    *last = at;
                }
            }
        }
        self.update_standby();
    }

    /// Stands by while a live kube-pulse writer whose manager sorts first
    /// writes status too; writes again (everything, at once) when it stopped.
    fn update_standby(&mut self) {
        let now = Utc::now();
        self.foreign.retain(|_, at| {
            (now - *at)
                .to_std()
                .is_ok_and(|age| age < FOREIGN_WRITER_WINDOW)
                || *at > now
        });
        let first = self
            .foreign
            .keys()
            .find(|m| m.as_str() < self.manager.as_str())
            .cloned();
        self.metrics
            .karpor_writer
            .foreign_writers
            .set(self.foreign.len() as i64);
        let standby = first.is_some();
        if standby == self.standby {
            return;
        }
        self.standby = standby;
        self.metrics.karpor_writer.standby.set(i64::from(standby));
        self.state.inner.lock().standby_for = first.clone();
        match first {
            Some(other) => tracing::error!(
                manager = %self.manager,
                other = %other,
                "another kube-pulse replica writes Karpor's status: this one stands by (one writer per Karpor until leases share the work)"
            ),
            None => {
                tracing::info!(manager = %self.manager, "no other kube-pulse status writer seen for a while: writing Karpor's status");
                let keys: Vec<_> = self.objects.keys().cloned().collect();
                for key in keys {
                    self.mark(key);
                }
            }
        }
    }

    /// The status `key` should have now, when the gateway knows enough to say.
    fn desired(&self, key: &(Kind, String), object: &DynamicObject) -> Option<Value> {
        let current = object.data.get("status").cloned().unwrap_or(Value::Null);
        // An apiserver that prunes `conditions` returns none: their
        // transition times live on in what was last sent. Otherwise the
        // merge starts from the object as read, whoever wrote it.
        let previous = match self.sent.get(key) {
            Some(sent) if sent.stored == current => &sent.desired,
            _ => &current,
        };
        let now = Utc::now();
        match key.0 {
            Kind::Cluster => {
                let doc = self.hub.get(&format!("clusters/{}", key.1))?;
                if report::keeps_previous(&doc.doc, previous) {
                    return None;
                }
                let endpoint = object.data["spec"]["access"]["endpoint"].as_str();
                Some(report::cluster_status(
                    &doc.doc,
                    previous,
                    endpoint,
                    object.metadata.generation,
                    now,
                ))
            }
            // This replica's hub has only its own members' documents.
            Kind::SyncRegistry if self.settings.sharing == Sharing::Leases => None,
            Kind::SyncRegistry => {
                let targets = self.registry_targets(object);
                let docs: Vec<(String, Vec<SyncDoc>)> = targets
                    .into_iter()
                    .map(|(cluster, resources)| {
                        let resolved = resources
                            .iter()
                            .flat_map(|gvr| self.sync_docs(&cluster, gvr))
                            .collect();
                        (cluster, resolved)
                    })
                    .collect();
                let reports: Vec<ClusterReport<'_>> = docs
                    .iter()
                    .map(|(cluster, resources)| ClusterReport {
                        unwatched: report::Unwatched::of(
                            cluster,
                            self.hub
                                .get(&format!("clusters/{cluster}"))
                                .as_ref()
                                .map(|d| &*d.doc),
                        ),
                        cluster: cluster.clone(),
                        resources: resources
                            .iter()
                            .map(|(api_version, resource, doc)| ResourceReport {
                                api_version: api_version.clone(),
                                resource: resource.clone(),
                                doc: doc.as_ref().map(|d| &*d.doc),
                            })
                            .collect(),
                    })
                    .collect();
                let computed = report::registry_status(&reports, previous, now);
                // Fields of the status kube-pulse does not write stay.
                let mut merged = previous.as_object().cloned().unwrap_or_default();
                if let Value::Object(fields) = computed {
                    merged.extend(fields);
                }
                Some(Value::Object(merged))
            }
        }
    }

    /// The clusters a registry applies to and the resources it names on
    /// them (`*` for a whole group/version), as the Karpor source reads it.
    fn registry_targets(&self, object: &DynamicObject) -> Vec<(String, Vec<Gvr>)> {
        let Ok(registry) =
            serde_json::to_value(object).and_then(serde_json::from_value::<types::SyncRegistry>)
        else {
            return Vec::new();
        };
        let clusters: Vec<types::Cluster> = self
            .objects
            .iter()
            .filter(|((kind, _), _)| *kind == Kind::Cluster)
            .filter_map(|(_, o)| {
                serde_json::to_value(o)
                    .and_then(serde_json::from_value)
                    .ok()
            })
            .collect();
        let converted = super::registries::convert(std::slice::from_ref(&registry), &clusters);
        let Some(named) = converted.registries.first() else {
            return Vec::new();
        };
        named
            .clusters
            .iter()
            .map(|cluster| {
                let mut resources: Vec<Gvr> =
                    named.resources.iter().map(|r| r.gvr.clone()).collect();
                resources.extend(
                    converted
                        .wildcards
                        .iter()
                        .filter(|w| w.clusters.contains(cluster))
                        .map(|w| w.template.gvr.clone()),
                );
                (cluster.clone(), resources)
            })
            .collect()
    }

    /// The sync documents of one registry resource on `cluster`: one, or
    /// every resource of the group/version for `*`.
    fn sync_docs(&self, cluster: &str, gvr: &Gvr) -> Vec<SyncDoc> {
        let api_version = if gvr.group.is_empty() {
            gvr.version.clone()
        } else {
            format!("{}/{}", gvr.group, gvr.version)
        };
        let group = if gvr.group.is_empty() {
            "core"
        } else {
            &gvr.group
        };
        let version = &gvr.version;
        if gvr.resource == "*" {
            return Pattern::parse(&format!("clusters/{cluster}/sync/{group}/{version}/*"))
                .map(|p| self.hub.list(&[p]))
                .unwrap_or_default()
                .into_iter()
                .filter_map(|d| {
                    let resource = match d.topic.kind() {
                        Some(TopicKind::Sync { resource, .. }) => resource.to_string(),
                        _ => return None,
                    };
                    Some((api_version.clone(), resource, Some(d)))
                })
                .collect();
        }
        let doc = self.hub.get(&format!(
            "clusters/{cluster}/sync/{group}/{version}/{}",
            gvr.resource
        ));
        vec![(api_version, gvr.resource.clone(), doc)]
    }

    /// Whether this replica writes `key` now (never a Cluster whose name the
    /// configuration file's member has): every object alone; with
    /// Leases the Clusters of the members it owns, and with the stream also
    /// the registries whose [`Writer::registry_cluster`] it owns.
    fn writes(&self, key: &(Kind, String), object: &DynamicObject) -> bool {
        if key.0 == Kind::Cluster
            && self
                .file_names
                .as_ref()
                .is_some_and(|names| names.borrow().contains(&key.1))
        {
            return false;
        }
        match (self.settings.sharing, key.0) {
            (Sharing::Alone, _) => true,
            (_, Kind::Cluster) => self.owns(&key.1),
            (Sharing::Leases, Kind::SyncRegistry) => false,
            (Sharing::LeasesAndStream, Kind::SyncRegistry) => self
                .registry_cluster(object)
                .is_some_and(|cluster| self.owns(&cluster)),
        }
    }

    fn owns(&self, member: &str) -> bool {
        self.owns.as_ref().is_some_and(|o| o.owns(member))
    }

    /// The cluster whose owner writes a registry's status: the first by
    /// name of the Karpor Clusters it applies to, else the first Karpor
    /// Cluster; None while no Cluster is known. Every replica sees the same
    /// objects, so all of them name the same cluster, which one owns.
    fn registry_cluster(&self, object: &DynamicObject) -> Option<String> {
        let known = |name: &str| {
            crate::names::valid_name(name)
                && self
                    .objects
                    .contains_key(&(Kind::Cluster, name.to_string()))
        };
        let applies = self
            .registry_targets(object)
            .into_iter()
            .map(|(cluster, _)| cluster)
            .filter(|cluster| known(cluster))
            .min();
        applies.or_else(|| {
            self.objects
                .keys()
                .filter(|(kind, name)| *kind == Kind::Cluster && crate::names::valid_name(name))
                .map(|(_, name)| name.clone())
                .next()
        })
    }

    /// With Leases: marks a Cluster this replica has come to own (its
    /// status may be stale), and with the stream every registry (their
    /// writers are the owners of clusters).
    fn follow_ownership(&mut self) {
        if self.settings.sharing == Sharing::Alone {
            return;
        }
        let owned: BTreeSet<String> = self
            .objects
            .keys()
            .filter(|(kind, name)| *kind == Kind::Cluster && self.owns(name))
            .map(|(_, name)| name.clone())
            .collect();
        if owned == self.owned {
            return;
        }
        let gained: Vec<String> = owned.difference(&self.owned).cloned().collect();
        for name in gained {
            self.mark((Kind::Cluster, name));
        }
        if self.settings.sharing == Sharing::LeasesAndStream {
            let registries: Vec<_> = self
                .objects
                .keys()
                .filter(|(kind, _)| *kind == Kind::SyncRegistry)
                .cloned()
                .collect();
            for key in registries {
                self.mark(key);
            }
        }
        self.owned = owned;
    }

    /// Writes every dirty object that is due.
    async fn flush(&mut self) {
        self.update_standby();
        if self.standby {
            return;
        }
        self.follow_ownership();
        let now = Instant::now();
        let min = self.settings.min_interval;
        let due: Vec<(Kind, String)> = self
            .dirty
            .iter()
            .filter(|(key, not_before)| {
                **not_before <= now && self.sent.get(*key).is_none_or(|s| s.at + min <= now)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in due {
            self.dirty.remove(&key);
            self.write(key).await;
        }
    }

    /// Writes one object's status when it changed; re-reads it on conflicts.
    async fn write(&mut self, key: (Kind, String)) {
        let api = self.apis.api(key.0).clone();
        for _ in 0..CONFLICT_ATTEMPTS {
            let Some(object) = self.objects.get(&key) else {
                return;
            };
            // Asked again after a conflict: the member may have moved.
            if !self.writes(&key, object) {
                return;
            }
            let Some(desired) = self.desired(&key, object) else {
                return;
            };
            let current = object.data.get("status").cloned().unwrap_or(Value::Null);
            let kept = |status: &Value| self.kept(key.0, status);
            let unchanged = self
                .sent
                .get(&key)
                .is_some_and(|s| kept(&s.desired) == kept(&desired) && s.stored == current);
            if unchanged || current == kept(&desired) {
                return;
            }
            let body = patch_body(key.0, object, &desired);
            let params = PatchParams {
                field_manager: Some(self.manager.clone()),
                ..PatchParams::default()
            };
            match api
                .patch_status(&key.1, &params, &Patch::Merge(&body))
                .await
            {
                Ok(stored) => {
                    self.metrics.karpor_writer.record(key.0.name(), "written");
                    self.state.succeeded();
                    let stored_status = stored.data.get("status").cloned().unwrap_or(Value::Null);
                    if key.0 == Kind::Cluster {
                        for field in DROPPABLE {
                            if stored_status.get(*field).is_some() {
                                self.dropped.remove(field);
                            } else if desired.get(*field).is_some() {
                                self.dropped.insert(field);
                            }
                        }
                    }
                    self.sent.insert(
                        key.clone(),
                        Sent {
                            desired,
                            stored: stored_status,
                            at: Instant::now(),
                        },
                    );
                    self.objects.insert(key, stored);
                    return;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    self.metrics.karpor_writer.record(key.0.name(), "conflict");
                    match api.get(&key.1).await {
                        Ok(fresh) => {
                            self.objects.insert(key.clone(), fresh);
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 => {
                            self.forget(&key);
                            return;
                        }
                        Err(e) => {
                            self.failed(&key, e.to_string());
                            return;
                        }
                    }
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    self.metrics.karpor_writer.record(key.0.name(), "gone");
                    self.forget(&key);
                    return;
                }
                Err(e) => {
                    self.metrics.karpor_writer.record(key.0.name(), "error");
                    self.failed(&key, e.to_string());
                    return;
                }
            }
        }
        // Conflicts every time: someone else writes it too; try again soon.
        self.failed(&key, format!("{CONFLICT_ATTEMPTS} conflicts in a row"));
    }

    /// What of `status` the apiserver keeps: all of it, except the Cluster
    /// fields its schema lacks (Karpor 0.6: `conditions`, `version`,
    /// `apiserver`), which the last write showed. Writes that would change
    /// only what is dropped are not sent; each write sends everything and
    /// checks again.
    fn kept(&self, kind: Kind, status: &Value) -> Value {
        let mut kept = status.clone();
        if kind == Kind::Cluster
            && let Some(fields) = kept.as_object_mut()
        {
            for field in &self.dropped {
                fields.remove(*field);
            }
        }
        kept
    }

    fn forget(&mut self, key: &(Kind, String)) {
        self.objects.remove(key);
        self.sent.remove(key);
        self.dirty.remove(key);
    }

    /// Counts a failed write, says so, and tries again after a pause.
    fn failed(&mut self, key: &(Kind, String), error: String) {
        tracing::warn!(kind = key.0.name(), name = %key.1, error = %error, "writing status to Karpor failed");
        self.state
            .failed(format!("{} {}: {error}", key.0.name(), key.1));
        self.dirty.insert(key.clone(), Instant::now() + RETRY_AFTER);
    }
}

/// The merge patch of one write: the status fields kube-pulse owns, as
/// `desired` has them (the conditions list whole, merged by type already),
/// and the `resourceVersion` of the object they were merged into, which
/// the apiserver checks (409 when someone wrote since).
fn patch_body(kind: Kind, object: &DynamicObject, desired: &Value) -> Value {
    let owned = match kind {
        Kind::Cluster => report::CLUSTER_FIELDS,
        Kind::SyncRegistry => REGISTRY_FIELDS,
    };
    let status: serde_json::Map<String, Value> = owned
        .iter()
        .filter_map(|field| Some((field.to_string(), desired.get(*field)?.clone())))
        .collect();
    serde_json::json!({
        "metadata": {"resourceVersion": object.metadata.resource_version},
        "status": status,
    })
}

/// The pause before a failed write is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// `KarporStatus`: status writes to Karpor's objects succeed (fails once
/// they have failed for [`FAILING_FOR`] in a row, naming the object and the
/// error).
pub(crate) struct KarporStatusCheck(pub(crate) Arc<WriterState>);

impl crate::health::Check for KarporStatusCheck {
    fn name(&self) -> &str {
        "KarporStatus"
    }
    fn check(&self) -> futures::future::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.0.check() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::HubConfig;
    use crate::testing::eventually;
    use kube::api::PostParams;
    use kube_pulse_sim::karpor::{self, KarporOptions, MemberAccess};
    use serde_json::json;

    const WAIT: Duration = Duration::from_secs(10);

    struct Setup {
        karpor: kube_pulse_sim::SimCluster,
        hub: Arc<Hub>,
        apis: KarporApis,
        metrics: Arc<crate::metrics::Metrics>,
        shutdown: CancellationToken,
    }

    /// A simulated Karpor holding a Cluster `a` (and, with `default_registry`,
    /// Karpor's default sync registry), a hub the test fills by hand.
    async fn setup(options: KarporOptions) -> Setup {
        let karpor = karpor::start(options).await.unwrap();
        let access = MemberAccess {
            endpoint: "https://127.0.0.1:1".into(),
            ca_bundle: None,
            insecure: true,
            credential: karpor::Credential::ServiceAccountToken("t".into()),
        };
        let api = super::super::api::KarporApi::connect(karpor.kube_config())
            .await
            .unwrap();
        let apis = KarporApis::new(&api);
        let cluster: DynamicObject =
            serde_json::from_value(karpor::cluster_manifest("a", &access)).unwrap();
        apis.clusters
            .create(&PostParams::default(), &cluster)
            .await
            .unwrap();
        Setup {
            karpor,
            hub: Hub::new(HubConfig::default()),
            apis,
            metrics: crate::metrics::Metrics::new(),
            shutdown: CancellationToken::new(),
        }
    }

    impl Setup {
        fn start(&self, replica: &str) -> Arc<WriterState> {
            self.start_on(&self.hub, &self.shutdown, replica)
        }

        /// A writer of `hub`'s documents, stopped with `shutdown`: another
        /// run of the gateway than [`Setup::start`]'s when they differ.
        fn start_on(
            &self,
            hub: &Arc<Hub>,
            shutdown: &CancellationToken,
            replica: &str,
        ) -> Arc<WriterState> {
            let settings = WriterSettings {
                replica: replica.into(),
                min_interval: Duration::from_millis(300),
                sharing: Sharing::Alone,
            };
            let (state, _task) = spawn_on(
                hub.clone(),
                self.apis.clone(),
                settings,
                None,
                self.metrics.clone(),
                shutdown.child_token(),
            );
            state
        }

        async fn status(&self, api: &Api<DynamicObject>, name: &str) -> Value {
            let object = api.get(name).await.unwrap();
            object.data.get("status").cloned().unwrap_or(Value::Null)
        }

        fn writes(&self, kind: &'static str, result: &'static str) -> u64 {
            self.metrics.karpor_writer.count(kind, result)
        }
    }

    fn cluster_doc(phase: &str, reason: &str) -> Value {
        json!({"phase": phase, "reason": reason, "message": "m", "since": "2026-12-03T10:00:00.000Z",
               "resources": {"total": 3, "synced": 3, "failing": 0}})
    }

    fn ready(status: &Value) -> Option<(String, String)> {
        let c = status["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")?;
        Some((c["status"].as_str()?.into(), c["reason"].as_str()?.into()))
    }

    #[tokio::test]
    async fn cluster_status_follows_its_document_with_conditions_where_the_schema_has_them() {
        let s = setup(KarporOptions {
            conditions: true,
            default_registry: false,
            push_mode: false,
        })
        .await;
        s.hub.put("clusters/a", cluster_doc("Healthy", "Ready"));
        s.start("one");
        eventually(WAIT, "Ready=True on Karpor's object", || async {
            let status = s.status(&s.apis.clusters, "a").await;
            (status["healthy"] == true && ready(&status) == Some(("True".into(), "Ready".into())))
                .then_some(())
        })
        .await;
        s.hub
            .put("clusters/a", cluster_doc("Unhealthy", "Disconnected"));
        eventually(WAIT, "Ready=False (Disconnected)", || async {
            let status = s.status(&s.apis.clusters, "a").await;
            // Go's `omitempty` leaves a false `healthy` out.
            (status.get("healthy").is_none()
                && ready(&status) == Some(("False".into(), "Disconnected".into())))
            .then_some(())
        })
        .await;
        // Settled: no more writes while nothing changes.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let written = s.writes("Cluster", "written");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            s.writes("Cluster", "written"),
            written,
            "no writes without changes"
        );
        assert_eq!(written, 2, "one write per change");
        s.shutdown.cancel();
        s.karpor.shutdown().await;
    }

    /// A restarted gateway's members are `Pending` until their first probe:
    /// the conditions written before stay as they are until then.
    #[tokio::test]
    async fn a_restarted_gateway_keeps_the_last_judgment_until_its_first_probe() {
        let s = setup(KarporOptions {
            conditions: true,
            default_registry: false,
            push_mode: false,
        })
        .await;
        s.hub.put("clusters/a", cluster_doc("Healthy", "Ready"));
        s.start("one");
        eventually(WAIT, "Ready=True on Karpor's object", || async {
            let status = s.status(&s.apis.clusters, "a").await;
            (ready(&status) == Some(("True".into(), "Ready".into()))).then_some(())
        })
        .await;
        s.shutdown.cancel();
        let before = s.status(&s.apis.clusters, "a").await;
        // The next run of the gateway: a new hub, its member not yet probed.
        let hub = Hub::new(HubConfig::default());
        let shutdown = CancellationToken::new();
        hub.put("clusters/a", cluster_doc("Pending", "AwaitingProbe"));
        s.start_on(&hub, &shutdown, "one");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            s.status(&s.apis.clusters, "a").await,
            before,
            "nothing written while Pending"
        );
        hub.put("clusters/a", cluster_doc("Unhealthy", "Disconnected"));
        eventually(WAIT, "Ready=False (Disconnected)", || async {
            let status = s.status(&s.apis.clusters, "a").await;
            (ready(&status) == Some(("False".into(), "Disconnected".into()))).then_some(())
        })
        .await;
        shutdown.cancel();
        s.karpor.shutdown().await;
    }

    #[tokio::test]
    async fn karpor_0_6_keeps_healthy_only_and_the_writer_does_not_loop() {
        let s = setup(KarporOptions {
            conditions: false,
            default_registry: false,
            push_mode: false,
        })
        .await;
        s.hub.put("clusters/a", cluster_doc("Healthy", "Ready"));
        s.start("one");
        eventually(WAIT, "healthy on Karpor's object", || async {
            (s.status(&s.apis.clusters, "a").await == json!({"healthy": true})).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            s.writes("Cluster", "written"),
            1,
            "pruned conditions are not rewritten"
        );
        // Degraded is still healthy: only the conditions change, which
        // Karpor 0.6 drops, so nothing is sent.
        s.hub
            .put("clusters/a", cluster_doc("Degraded", "ResourcesFailing"));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(s.writes("Cluster", "written"), 1);
        // Unreachable: `healthy` changes, which is written.
        s.hub
            .put("clusters/a", cluster_doc("Unhealthy", "Disconnected"));
        eventually(WAIT, "healthy gone from Karpor's object", || async {
            (s.status(&s.apis.clusters, "a")
                .await
                .get("healthy")
                .is_none())
            .then_some(())
        })
        .await;
        assert_eq!(s.writes("Cluster", "written"), 2);
        s.shutdown.cancel();
        s.karpor.shutdown().await;
    }

    #[tokio::test]
    async fn bursts_are_coalesced_to_one_write_per_interval() {
        let s = setup(KarporOptions {
            conditions: true,
            default_registry: false,
            push_mode: false,
        })
        .await;
        s.hub.put("clusters/a", cluster_doc("Healthy", "Ready"));
        s.start("one");
        eventually(WAIT, "the first write", || async {
            (s.writes("Cluster", "written") == 1).then_some(())
        })
        .await;
        let started = Instant::now();
        for i in 0..20 {
            let (phase, reason) = if i % 2 == 0 {
                ("Unhealthy", "Disconnected")
            } else {
                ("Unhealthy", "Timeout")
            };
            s.hub.put("clusters/a", cluster_doc(phase, reason));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eventually(WAIT, "the last state written", || async {
            let status = s.status(&s.apis.clusters, "a").await;
            (ready(&status) == Some(("False".into(), "Timeout".into()))).then_some(())
        })
        .await;
        let elapsed = started.elapsed().as_millis() as u64;
        let writes = s.writes("Cluster", "written") - 1;
        // 20 changes over about a second, at most one write per 300 ms.
        assert!(
            writes <= elapsed / 300 + 1,
            "{writes} writes in {elapsed} ms"
        );
        assert!(writes < 20, "{writes} writes for 20 changes");
        s.shutdown.cancel();
        s.karpor.shutdown().await;
    }

    #[tokio::test]
    async fn a_conflict_reads_the_object_again_and_a_deleted_one_is_forgotten() {
        let s = setup(KarporOptions {
            conditions: true,
            default_registry: false,
            push_mode: false,
        })
        .await;
        s.hub.put("clusters/a", cluster_doc("Healthy", "Ready"));
        let settings = WriterSettings {
            replica: "one".into(),
            min_interval: Duration::from_millis(300),
            sharing: Sharing::Alone,
        };
        let mut writer = Writer::new(
            s.hub.clone(),
            s.apis.clone(),
            settings,
            None,
            s.metrics.clone(),
        );
        let key = (Kind::Cluster, "a".to_string());
        // The writer holds the object; someone else changes it before the write.
        writer
            .objects
            .insert(key.clone(), s.apis.clusters.get("a").await.unwrap());
        let patch = json!({"metadata": {"labels": {"team": "infra"}}});
        s.apis
            .clusters
            .patch(
                "a",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap();
        writer.write(key.clone()).await;
        assert_eq!(s.metrics.karpor_writer.count("Cluster", "conflict"), 1);
        assert_eq!(s.metrics.karpor_writer.count("Cluster", "written"), 1);
        let stored = s.apis.clusters.get("a").await.unwrap();
        assert_eq!(
            stored
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("team"))
                .map(String::as_str),
            Some("infra"),
            "the other write stays"
        );
        assert_eq!(
            ready(&stored.data["status"]),
            Some(("True".into(), "Ready".into()))
        );
        // Deleted behind the writer's back: 404, forgotten, not retried.
        s.apis
            .clusters
            .delete("a", &Default::default())
            .await
            .unwrap();
        s.hub
            .put("clusters/a", cluster_doc("Unhealthy", "Disconnected"));
        writer.write(key.clone()).await;
        assert_eq!(s.metrics.karpor_writer.count("Cluster", "gone"), 1);
        assert!(!writer.objects.contains_key(&key) && !writer.dirty.contains_key(&key));
        assert!(writer.state.check().is_ok(), "a gone object is no failure");
        s.karpor.shutdown().await;
    }

    #[tokio::test]
    async fn of_two_writers_one_stands_by() {
        let s = setup(KarporOptions {
            conditions: true,
            default_registry: false,
            push_mode: false,
        })
        .await;
        s.hub.put("clusters/a", cluster_doc("Healthy", "Ready"));
        s.start("replica-b");
        eventually(WAIT, "replica-b's first write", || async {
            (s.metrics.karpor_writer.count("Cluster", "written") >= 1).then_some(())
        })
        .await;
        // A second writer sorting first: it writes (the change below), and
        // replica-b, seeing its manager in managedFields, stands by.
        let other_metrics = crate::metrics::Metrics::new();
        let (_state, _task) = spawn_on(
            s.hub.clone(),
            s.apis.clone(),
            WriterSettings {
                replica: "replica-a".into(),
                min_interval: Duration::from_millis(300),
                sharing: Sharing::Alone,
            },
            None,
            other_metrics.clone(),
            s.shutdown.child_token(),
        );
        s.hub
            .put("clusters/a", cluster_doc("Unhealthy", "Disconnected"));
        eventually(WAIT, "replica-b standing by", || async {
            (s.metrics.karpor_writer.standby.get() == 1).then_some(())
        })
        .await;
        assert_eq!(
            other_metrics.karpor_writer.standby.get(),
            0,
            "replica-a keeps writing"
        );
        assert_eq!(other_metrics.karpor_writer.foreign_writers.get(), 1);
        let before = s.metrics.karpor_writer.count("Cluster", "written");
        s.hub.put("clusters/a", cluster_doc("Healthy", "Ready"));
        eventually(WAIT, "replica-a's write", || async {
            let status = s.status(&s.apis.clusters, "a").await;
            (ready(&status) == Some(("True".into(), "Ready".into()))).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            s.metrics.karpor_writer.count("Cluster", "written"),
            before,
            "replica-b wrote while standing by"
        );
        s.shutdown.cancel();
        s.karpor.shutdown().await;
    }

    #[tokio::test]
    async fn a_registry_gets_each_resource_of_each_cluster_it_applies_to() {
        let s = setup(KarporOptions {
            conditions: false,
            default_registry: true,
            push_mode: false,
        })
        .await;
        s.hub.put("clusters/a", cluster_doc("Healthy", "Ready"));
        let doc = |phase: &str, reason: &str, kind: Option<&str>| {
            let mut doc = json!({"phase": phase, "reason": reason, "message": "m", "since": "2026-12-03T10:00:00.000Z"});
            if let Some(kind) = kind {
                doc["kind"] = json!(kind);
            }
            doc
        };
        s.hub.put(
            "clusters/a/sync/apps/v1/deployments",
            doc("Syncing", "Watching", Some("Deployment")),
        );
        s.hub.put(
            "clusters/a/sync/policy/v1beta1/poddisruptionbudgets",
            doc("Error", "NotServed", None),
        );
        s.start("one");
        let status = eventually(WAIT, "the default registry's status", || async {
            let status = s.status(&s.apis.registries, karpor::DEFAULT_REGISTRY).await;
            (status["clusters"][0]["resources"].as_array().map(Vec::len)
                == Some(karpor::DEFAULT_SYNC_RESOURCES.len()))
            .then_some(status)
        })
        .await;
        let a = &status["clusters"][0];
        assert_eq!(
            (a["cluster"].as_str(), a["status"].as_str()),
            (Some("a"), Some("Error"))
        );
        let resource = |api_version: &str, kind: &str| {
            a["resources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["apiVersion"] == api_version && r["kind"] == kind)
                .cloned()
                .unwrap_or_else(|| panic!("{api_version} {kind} in {a}"))
        };
        assert_eq!(resource("apps/v1", "Deployment")["status"], "Syncing");
        // The well-known kind, not the plural.
        let pdb = resource("policy/v1beta1", "PodDisruptionBudget");
        assert_eq!(
            (pdb["status"].as_str(), pdb["reason"].as_str()),
            (Some("Error"), Some("NotServed"))
        );
        assert_eq!(resource("v1", "Service")["reason"], "NotWatched");
        assert_eq!(status["lastTransitionTime"], "2026-12-03T10:00:00Z");
        s.shutdown.cancel();
        s.karpor.shutdown().await;
    }
    /// Members owned, as a test sets them (the ownership's order: the old
    /// owner lets a member go before the new one takes it).
    #[derive(Default)]
    struct Owned(Mutex<BTreeSet<String>>);

    impl Owns for Owned {
        fn owns(&self, member: &str) -> bool {
            self.0.lock().contains(member)
        }
    }

    fn owning(members: &[&str]) -> Arc<Owned> {
        Arc::new(Owned(Mutex::new(
            members.iter().map(|m| m.to_string()).collect(),
        )))
    }

    /// The kube-pulse field managers that wrote `name`'s status.
    async fn status_managers(api: &Api<DynamicObject>, name: &str) -> BTreeSet<String> {
        let object = api.get(name).await.unwrap();
        object
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.subresource.as_deref() == Some("status"))
            .filter_map(|e| e.manager)
            .filter(|m| m.starts_with(MANAGER_PREFIX))
            .collect()
    }

    fn managers(names: &[&str]) -> BTreeSet<String> {
        names
            .iter()
            .map(|n| format!("{MANAGER_PREFIX}{n}"))
            .collect()
    }

    /// Creates Karpor Cluster `name` (`a` is there from [`setup`]).
    async fn create_cluster(s: &Setup, name: &str, labels: &[(&str, &str)]) {
        let access = MemberAccess {
            endpoint: "https://127.0.0.1:1".into(),
            ca_bundle: None,
            insecure: true,
            credential: karpor::Credential::ServiceAccountToken("t".into()),
        };
        let mut manifest = karpor::cluster_manifest(name, &access);
        for (key, value) in labels {
            manifest["metadata"]["labels"][*key] = json!(value);
        }
        let object: DynamicObject = serde_json::from_value(manifest).unwrap();
        s.apis
            .clusters
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }

    fn shared(replica: &str, sharing: Sharing) -> WriterSettings {
        WriterSettings {
            replica: replica.into(),
            min_interval: Duration::from_millis(300),
            sharing,
        }
    }

    fn sync_doc(phase: &str, reason: &str) -> Value {
        json!({"phase": phase, "reason": reason, "message": "m", "since": "2026-12-03T10:00:00.000Z", "kind": "Deployment"})
    }

    #[tokio::test]
    async fn leased_writers_each_write_the_clusters_they_own_and_no_registry() {
        let s = setup(KarporOptions {
            conditions: true,
            default_registry: true,
            push_mode: false,
        })
        .await;
        create_cluster(&s, "b", &[]).await;
        // replica-a owns `a` (its hub has a's documents), replica-b owns `b`.
        let hub_b = Hub::new(HubConfig::default());
        let metrics_b = crate::metrics::Metrics::new();
        s.hub.put("clusters/a", cluster_doc("Healthy", "Ready"));
        s.hub.put(
            "clusters/a/sync/apps/v1/deployments",
            sync_doc("Syncing", "Watching"),
        );
        hub_b.put("clusters/b", cluster_doc("Unhealthy", "Disconnected"));
        let (_a, _ta) = spawn_on(
            s.hub.clone(),
            s.apis.clone(),
            shared("replica-a", Sharing::Leases),
            Some(owning(&["a"])),
            s.metrics.clone(),
            s.shutdown.child_token(),
        );
        let (_b, _tb) = spawn_on(
            hub_b.clone(),
            s.apis.clone(),
            shared("replica-b", Sharing::Leases),
            Some(owning(&["b"])),
            metrics_b.clone(),
            s.shutdown.child_token(),
        );
        eventually(WAIT, "each Cluster written by its owner", || async {
            let a = ready(&s.status(&s.apis.clusters, "a").await);
            let b = ready(&s.status(&s.apis.clusters, "b").await);
            (a == Some(("True".into(), "Ready".into()))
                && b == Some(("False".into(), "Disconnected".into())))
            .then_some(())
        })
        .await;
        // Both keep writing: a change on either side reaches Karpor.
        hub_b.put("clusters/b", cluster_doc("Healthy", "Ready"));
        s.hub
            .put("clusters/a", cluster_doc("Unhealthy", "Disconnected"));
        eventually(WAIT, "both changes written", || async {
            let a = ready(&s.status(&s.apis.clusters, "a").await);
            let b = ready(&s.status(&s.apis.clusters, "b").await);
            (a == Some(("False".into(), "Disconnected".into()))
                && b == Some(("True".into(), "Ready".into())))
            .then_some(())
        })
        .await;
        for m in [&s.metrics, &metrics_b] {
            assert_eq!(m.karpor_writer.standby.get(), 0);
            assert_eq!(m.karpor_writer.foreign_writers.get(), 0);
            assert_eq!(m.karpor_writer.count("Cluster", "written"), 2);
            assert_eq!(m.karpor_writer.count("SyncRegistry", "written"), 0);
        }
        assert_eq!(
            status_managers(&s.apis.clusters, "a").await,
            managers(&["replica-a"])
        );
        assert_eq!(
            status_managers(&s.apis.clusters, "b").await,
            managers(&["replica-b"])
        );
        let registry = s.status(&s.apis.registries, karpor::DEFAULT_REGISTRY).await;
        assert!(registry["clusters"].is_null(), "{registry}");
        s.shutdown.cancel();
        s.karpor.shutdown().await;
    }

    /// With the stream both hubs hold every document: each Cluster is
    /// written by its owner only, the registry by the owner of its first
    /// cluster only; after a member moves, by the new owner only.
    #[tokio::test]
    async fn with_every_document_each_object_is_written_by_its_owner_only_and_a_move_moves_the_writes()
     {
        let s = setup(KarporOptions {
            conditions: true,
            default_registry: true,
            push_mode: false,
        })
        .await;
        create_cluster(&s, "b", &[]).await;
        let hub_b = Hub::new(HubConfig::default());
        let metrics_b = crate::metrics::Metrics::new();
        let put = |topic: &str, doc: Value| {
            s.hub.put(topic, doc.clone());
            hub_b.put(topic, doc);
        };
        put("clusters/a", cluster_doc("Healthy", "Ready"));
        put("clusters/b", cluster_doc("Unhealthy", "Disconnected"));
        put(
            "clusters/a/sync/apps/v1/deployments",
            sync_doc("Syncing", "Watching"),
        );
        put(
            "clusters/b/sync/apps/v1/deployments",
            sync_doc("Syncing", "Watching"),
        );
        let (owned_a, owned_b) = (owning(&["a"]), owning(&["b"]));
        let (_a, _ta) = spawn_on(
            s.hub.clone(),
            s.apis.clone(),
            shared("replica-a", Sharing::LeasesAndStream),
            Some(owned_a.clone()),
            s.metrics.clone(),
            s.shutdown.child_token(),
        );
        let (_b, _tb) = spawn_on(
            hub_b.clone(),
            s.apis.clone(),
            shared("replica-b", Sharing::LeasesAndStream),
            Some(owned_b.clone()),
            metrics_b.clone(),
            s.shutdown.child_token(),
        );
        let deployments_of = |status: &Value, cluster: &str| -> Option<String> {
            let entry = status["clusters"]
                .as_array()?
                .iter()
                .find(|c| c["cluster"] == cluster)?;
            let resource = entry["resources"]
                .as_array()?
                .iter()
                .find(|r| r["apiVersion"] == "apps/v1" && r["kind"] == "Deployment")?;
            Some(resource["status"].as_str()?.to_string())
        };
        eventually(WAIT, "both Clusters and the registry written", || async {
            let a = ready(&s.status(&s.apis.clusters, "a").await);
            let b = ready(&s.status(&s.apis.clusters, "b").await);
            let registry = s.status(&s.apis.registries, karpor::DEFAULT_REGISTRY).await;
            (a == Some(("True".into(), "Ready".into()))
                && b == Some(("False".into(), "Disconnected".into()))
                && deployments_of(&registry, "a").as_deref() == Some("Syncing")
                && deployments_of(&registry, "b").as_deref() == Some("Syncing"))
            .then_some(())
        })
        .await;
        // Settled: nothing more to write.
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(
            status_managers(&s.apis.clusters, "a").await,
            managers(&["replica-a"])
        );
        assert_eq!(
            status_managers(&s.apis.clusters, "b").await,
            managers(&["replica-b"])
        );
        // `a` sorts first: its owner writes the registry.
        assert_eq!(
            status_managers(&s.apis.registries, karpor::DEFAULT_REGISTRY).await,
            managers(&["replica-a"])
        );
        let count = |m: &crate::metrics::Metrics, kind: &'static str| {
            m.karpor_writer.count(kind, "written")
        };
        assert_eq!(count(&s.metrics, "Cluster"), 1);
        assert_eq!(count(&metrics_b, "Cluster"), 1);
        assert!(count(&s.metrics, "SyncRegistry") >= 1);
        assert_eq!(count(&metrics_b, "SyncRegistry"), 0);
        for m in [&s.metrics, &metrics_b] {
            assert_eq!(m.karpor_writer.standby.get(), 0);
            assert_eq!(m.karpor_writer.foreign_writers.get(), 0);
        }

        // `a` moves to replica-b: replica-a lets it go first.
        owned_a.0.lock().remove("a");
        let (a_clusters, a_registries) = (
            count(&s.metrics, "Cluster"),
            count(&s.metrics, "SyncRegistry"),
        );
        owned_b.0.lock().insert("a".into());
        put("clusters/a", cluster_doc("Unhealthy", "Disconnected"));
        put(
            "clusters/a/sync/apps/v1/deployments",
            sync_doc("Error", "Forbidden"),
        );
        eventually(WAIT, "the new owner writes a and the registry", || async {
            let a = ready(&s.status(&s.apis.clusters, "a").await);
            let registry = s.status(&s.apis.registries, karpor::DEFAULT_REGISTRY).await;
            (a == Some(("False".into(), "Disconnected".into()))
                && deployments_of(&registry, "a").as_deref() == Some("Error"))
            .then_some(())
        })
        .await;
        // Another change while both have it: still only replica-b writes.
        put("clusters/a", cluster_doc("Healthy", "Ready"));
        eventually(WAIT, "a healthy again on Karpor", || async {
            let a = ready(&s.status(&s.apis.clusters, "a").await);
            (a == Some(("True".into(), "Ready".into()))).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(
            count(&s.metrics, "Cluster"),
            a_clusters,
            "the old owner wrote a Cluster after letting it go"
        );
        assert_eq!(
            count(&s.metrics, "SyncRegistry"),
            a_registries,
            "the old owner wrote the registry after letting its first cluster go"
        );
        assert!(
            count(&metrics_b, "Cluster") >= 3,
            "b once, a twice: {}",
            count(&metrics_b, "Cluster")
        );
        assert!(count(&metrics_b, "SyncRegistry") >= 1);
        assert_eq!(
            status_managers(&s.apis.clusters, "a").await,
            managers(&["replica-a", "replica-b"])
        );
        s.shutdown.cancel();
        s.karpor.shutdown().await;
    }

    /// The owner of the first (by name) Karpor Cluster a registry applies
    /// to writes it; of the first Karpor Cluster when it applies to none;
    /// nobody while no Cluster is known.
    #[tokio::test]
    async fn the_first_cluster_a_registry_applies_to_names_its_writer() {
        let s = setup(KarporOptions {
            conditions: false,
            default_registry: false,
            push_mode: false,
        })
        .await;
        let mut writer = Writer::new(
            s.hub.clone(),
            s.apis.clone(),
            shared("one", Sharing::LeasesAndStream),
            Some(owning(&["b"])),
            s.metrics.clone(),
        );
        let registry = |spec: Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "search.karpor.io/v1beta1",
                "kind": "SyncRegistry",
                "metadata": {"name": "r"},
                "spec": spec,
            }))
            .unwrap()
        };
        let cluster = |name: &str, team: &str| -> DynamicObject {
            let access = MemberAccess {
                endpoint: "https://127.0.0.1:1".into(),
                ca_bundle: None,
                insecure: true,
                credential: karpor::Credential::ServiceAccountToken("t".into()),
            };
            let mut manifest = karpor::cluster_manifest(name, &access);
            manifest["metadata"]["labels"] = json!({"team": team});
            serde_json::from_value(manifest).unwrap()
        };
        let rules = json!([{"apiVersion": "apps/v1", "resource": "deployments"}]);
        let by_names = registry(json!({"clusters": ["c", "b", "ghost"], "syncResources": rules}));
        assert_eq!(writer.registry_cluster(&by_names), None, "no Cluster known");
        for (name, team) in [("c", "x"), ("b", "y"), ("a", "x")] {
            writer
                .objects
                .insert((Kind::Cluster, name.into()), cluster(name, team));
        }
        let by_label = registry(json!({
            "clusterLabelSelector": {"matchLabels": {"team": "x"}},
            "syncResources": rules,
        }));
        let to_none = registry(json!({"clusters": ["ghost"], "syncResources": rules}));
        let everywhere = registry(json!({"clusters": ["*"], "syncResources": rules}));
        // (registry, its writer's cluster, whether the writer owning `b` writes it)
        let cases = [
            (&by_names, "b", true),
            (&by_label, "a", false),
            (&to_none, "a", false),
            (&everywhere, "a", false),
        ];
        for (object, first, writes) in cases {
            assert_eq!(
                writer.registry_cluster(object).as_deref(),
                Some(first),
                "{:?}",
                object.data["spec"]
            );
            let key = (Kind::SyncRegistry, "r".to_string());
            assert_eq!(
                writer.writes(&key, object),
                writes,
                "{:?}",
                object.data["spec"]
            );
        }
        // Without the stream no registry is written; alone, every one.
        writer.settings.sharing = Sharing::Leases;
        let key = (Kind::SyncRegistry, "r".to_string());
        assert!(!writer.writes(&key, &by_names));
        writer.settings.sharing = Sharing::Alone;
        assert!(writer.writes(&key, &to_none));
        s.karpor.shutdown().await;
    }
}
