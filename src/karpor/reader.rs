//! The Karpor reader, Karpor as a live member source (`Karpor apiserver
//! ──watch──▶ [reader] ──coalesce ──convert──▶ union ──▶ pipeline`). Two kube-runtime watchers follow the
//! `Cluster` and `SyncRegistry` objects; a change to what kube-pulse reads
//! (a Cluster's labels or spec, a registry's spec — not the status the
//! writer puts there) waits [`COALESCE`] for the rest of its burst, then the
//! whole set is converted and handed to the union as Karpor's part.
//!
//! When Karpor cannot be reached, the last known members stay and run;
//! the logs, `kube_pulse_karpor_connected` and the `Karpor` readiness check
//! say so until both watchers have listed again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::future::BoxFuture;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::api::{self, KarporApi};
use super::clusters;
use super::registries::{self, Wildcard};
use super::settings::KarporSettings;
use super::types::{Cluster, SyncRegistry};
use crate::health::Check;
use crate::metrics::Metrics;
use crate::pipeline::union::{MemberUnion, Origin, Part};

/// How long a change waits for the rest of its burst before it applies.
pub const COALESCE: Duration = Duration::from_millis(300);
/// How long until a failed discovery of a member's `resource: "*"` group is tried again.
const WILDCARD_RETRY: Duration = Duration::from_secs(30);
/// How long a member's discovered `resource: "*"` expansion is kept.
const WILDCARD_REFRESH: Duration = Duration::from_secs(600);
/// How long until an endpoint whose name did not resolve is resolved again.
const UNRESOLVED_RETRY: Duration = Duration::from_secs(30);
/// How often Karpor is asked whether it answers again after a watch failed
/// (a watcher that resumes without relisting says nothing when it does).
const RECHECK: Duration = Duration::from_secs(2);
/// Longest wait between two attempts to reach Karpor.
const MAX_CONNECT_BACKOFF: Duration = Duration::from_secs(30);

/// Whether Karpor answers, shared by the source, the readiness check and metrics.
#[derive(Debug, Default)]
pub struct KarporHealth {
    /// Set while Karpor cannot be reached: since when, and the last error.
    down: Mutex<Option<(DateTime<Utc>, String)>>,
    /// Set once both kinds have been listed.
    synced: Mutex<bool>,
}

impl KarporHealth {
    fn failed(&self, error: String) {
        let mut down = self.down.lock();
        let since = down.as_ref().map_or_else(Utc::now, |(since, _)| *since);
        *down = Some((since, error));
    }

    fn recovered(&self) {
        *self.down.lock() = None;
        *self.synced.lock() = true;
    }

    /// Ok while Karpor answers and its objects were listed, else why not.
    pub fn state(&self) -> Result<(), String> {
        if let Some((since, error)) = self.down.lock().clone() {
            let since = since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            return Err(format!(
                "Karpor unreachable since {since} (the last known members keep running): {error}"
            ));
        }
        if !*self.synced.lock() {
            return Err("Karpor's clusters and sync registries not listed yet".into());
        }
        Ok(())
    }
}

/// The `Karpor` readiness check: Karpor answers and its objects are listed.
#[derive(Debug)]
pub struct KarporCheck(pub Arc<KarporHealth>);

impl Check for KarporCheck {
    fn name(&self) -> &str {
        "Karpor"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.0.state() })
    }
}

/// What kube-pulse reads of a Cluster: its name, labels, spec and the
/// annotation naming a push member's agent (not its status, which the
/// writer changes, nor resourceVersion or other annotations).
fn relevant_cluster(mut c: Cluster) -> Cluster {
    c.status = None;
    let agent = c
        .metadata
        .annotations
        .as_mut()
        .and_then(|a| a.remove_entry(super::types::AGENT_ANNOTATION));
    c.metadata = kube::api::ObjectMeta {
        name: c.metadata.name,
        labels: c.metadata.labels,
        annotations: agent.map(|(key, value)| [(key, value)].into()),
        ..Default::default()
    };
    c
}

/// What kube-pulse reads of a SyncRegistry: its name and spec.
fn relevant_registry(mut r: SyncRegistry) -> SyncRegistry {
    r.status = None;
    r.metadata = kube::api::ObjectMeta {
        name: r.metadata.name,
        ..Default::default()
    };
    r
}

/// One kind's objects as last listed and watched.
struct Objects<T> {
    current: BTreeMap<String, T>,
    /// A relist in progress (kube-runtime's `Init` … `InitDone`).
    relist: Option<BTreeMap<String, T>>,
    listed: bool,
}

impl<T: PartialEq> Objects<T> {
    fn new() -> Self {
        Self {
            current: BTreeMap::new(),
            relist: None,
            listed: false,
        }
    }

    /// Applies a watcher event; true when what kube-pulse reads changed.
    fn apply(&mut self, event: Event<(String, T)>) -> bool {
        match event {
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            Event::InitApply((name, obj)) => {
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(name, obj);
                false
            }
            Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let changed = !self.listed || listed != self.current;
                self.current = listed;
                self.listed = true;
                changed
            }
            Event::Apply((name, obj)) => {
                self.current.get(&name) != Some(&obj) && {
                    self.current.insert(name, obj);
                    true
                }
            }
            Event::Delete((name, _)) => self.current.remove(&name).is_some(),
        }
    }
}

/// Starts the source; it runs until `shutdown`.
pub fn spawn(
    settings: KarporSettings,
    union: Arc<MemberUnion>,
    health: Arc<KarporHealth>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    let metrics = union.pipeline().metrics().clone();
    let mut source = Source {
        settings,
        union,
        health,
        metrics,
        clusters: Objects::new(),
        registries: Objects::new(),
        discovered: BTreeMap::new(),
        convert_again: None,
        converted: clusters::Converted::default(),
        reported: BTreeSet::new(),
        down: false,
    };
    tokio::spawn(async move { source.run(shutdown).await })
}

struct Source {
    settings: KarporSettings,
    union: Arc<MemberUnion>,
    health: Arc<KarporHealth>,
    metrics: Arc<Metrics>,
    clusters: Objects<Cluster>,
    registries: Objects<SyncRegistry>,
    /// `resource: "*"` expansions: cluster → group/version → plurals, and when discovered.
    discovered: BTreeMap<String, (tokio::time::Instant, BTreeMap<String, Vec<String>>)>,
    /// When the objects are converted again: wildcards to discover again
    /// (a failure's retry, or the refresh), or an endpoint's name that did
    /// not resolve.
    convert_again: Option<tokio::time::Instant>,
    /// The last conversions of the Cluster objects, reused while unchanged.
    converted: clusters::Converted,
    /// Problems already logged (each once while it lasts).
    reported: BTreeSet<String>,
    /// A watch failed and Karpor has not answered since.
    down: bool,
}

/// A watcher event with the object parsed (None: not parsable, logged).
fn parsed<T: for<'de> Deserialize<'de>>(
    kind: &str,
    event: Event<DynamicObject>,
    relevant: fn(T) -> T,
) -> Option<Event<(String, T)>> {
    let parse = |obj: DynamicObject| -> Option<(String, T)> {
        let name = obj.metadata.name.clone().unwrap_or_default();
        match serde_json::to_value(&obj).and_then(serde_json::from_value::<T>) {
            Ok(t) => Some((name, relevant(t))),
            Err(e) => {
                tracing::warn!(kind, name = %name, cause = %e, "Karpor object left out: it does not read as Karpor's type");
                None
            }
        }
    };
    Some(match event {
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
        Event::InitApply(o) => Event::InitApply(parse(o)?),
        Event::Apply(o) => Event::Apply(parse(o)?),
        Event::Delete(o) => Event::Delete(parse(o)?),
    })
}

impl Source {
    async fn run(&mut self, shutdown: CancellationToken) {
        let mut backoff = Duration::from_secs(1);
        let api = loop {
            match self.connect().await {
                Ok(api) => break api,
                Err(e) => {
                    self.metrics.karpor.error(e.metric_label());
                    self.health.failed(e.to_string());
                    tracing::warn!(cause = %e, retry_in = ?backoff, "cannot reach Karpor; retrying");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_CONNECT_BACKOFF);
        };
        tracing::info!(
            clusters = %api.cluster_kind().resource.plural,
            registries = %api.registry_kind().resource.plural,
            "watching Karpor's clusters and sync registries"
        );
        let watch = |ar: &kube::discovery::ApiResource| {
            let objects: Api<DynamicObject> = Api::all_with(api.client().clone(), ar);
            crate::relist::watcher(objects, watcher::Config::default())
        };
        let mut clusters = watch(&api.cluster_kind().resource).boxed();
        let mut registries = watch(&api.registry_kind().resource).boxed();
        let mut due: Option<tokio::time::Instant> = None;
        loop {
            let retry = self.convert_again;
            let changed = tokio::select! {
                _ = shutdown.cancelled() => return,
                Some(event) = clusters.next() => self.on_event("Cluster", event, |s, e| {
                    parsed("Cluster", e, relevant_cluster).is_some_and(|e| s.clusters.apply(e))
                }),
                Some(event) = registries.next() => self.on_event("SyncRegistry", event, |s, e| {
                    parsed("SyncRegistry", e, relevant_registry).is_some_and(|e| s.registries.apply(e))
                }),
                _ = sleep_until(due) => {
                    due = None;
                    self.apply().await;
                    false
                }
                _ = sleep_until(retry), if due.is_none() => {
                    self.convert_again = None;
                    self.apply().await;
                    false
                }
                _ = tokio::time::sleep(RECHECK), if self.down => {
                    let probe = kube::api::ListParams::default().limit(1);
                    if api.clusters().list_metadata(&probe).await.is_ok() {
                        tracing::info!("Karpor answers again");
                        self.down = false;
                    }
                    false
                }
            };
            if !self.down && self.clusters.listed && self.registries.listed {
                self.health.recovered();
                self.metrics.karpor.connected.set(1);
            }
            // A burst applies once, COALESCE after its first change.
            if changed && due.is_none() && self.clusters.listed && self.registries.listed {
                due = Some(tokio::time::Instant::now() + COALESCE);
            }
        }
    }

    async fn connect(&self) -> api::Result<KarporApi> {
        let config =
            api::kube_config(&self.settings.kubeconfig, self.settings.context.as_deref()).await?;
        KarporApi::connect(config).await
    }

    /// Handles one watcher item: an error is reported (the watcher retries
    /// with kube-runtime's backoff), an event goes to `apply`.
    fn on_event(
        &mut self,
        kind: &str,
        event: Result<Event<DynamicObject>, watcher::Error>,
        apply: impl FnOnce(&mut Self, Event<DynamicObject>) -> bool,
    ) -> bool {
        match event {
            Ok(event) => apply(self, event),
            Err(e) => {
                self.down = true;
                self.metrics.karpor.error("watch");
                self.metrics.karpor.connected.set(0);
                self.health.failed(format!("watching {kind}: {e}"));
                tracing::warn!(kind, cause = %e, "Karpor watch failed; the last known members keep running");
                false
            }
        }
    }

    /// Converts the current objects and hands them to the union.
    async fn apply(&mut self) {
        let clusters: Vec<Cluster> = self.clusters.current.values().cloned().collect();
        let objects: Vec<SyncRegistry> = self.registries.current.values().cloned().collect();
        let converted = self
            .converted
            .convert(
                &clusters,
                self.settings.allow_exec,
                &self.settings.endpoints,
            )
            .await;
        let mut converted_registries = registries::convert(&objects, &clusters);
        let mut problems: Vec<String> = converted
            .skipped
            .iter()
            .map(|(_, why)| why.clone())
            .collect();
        problems.append(&mut converted_registries.problems);
        self.report(problems);
        let running: BTreeSet<String> = converted.members.iter().map(|m| m.name.clone()).collect();
        let unresolved = converted
            .held
            .iter()
            .any(|held| held.reason == clusters::ENDPOINT_NOT_RESOLVED);
        if unresolved {
            let at = tokio::time::Instant::now() + UNRESOLVED_RETRY;
            self.convert_again = Some(self.convert_again.map_or(at, |due| due.min(at)));
        }
        self.metrics.karpor.clusters(
            converted.members.len(),
            converted.held.len(),
            converted.skipped.len(),
        );
        let expanded = |s: &Self| {
            let discovered = s
                .discovered
                .iter()
                .map(|(c, (_, by_gv))| (c.clone(), by_gv.clone()))
                .collect();
            registries::expand(&converted_registries.wildcards, &discovered)
        };
        let mut all = converted_registries.registries.clone();
        all.extend(expanded(self));
        let part = Part {
            members: converted.members,
            held: converted.held,
            registries: Some(all.clone()),
        };
        if !self.set(part.clone()).await {
            return;
        }
        // Wildcards of running members, discovered through their clients
        // now, and again when the oldest expansion is due for a refresh.
        let wildcards = !converted_registries.wildcards.is_empty();
        let refresh = tokio::time::Instant::now() + WILDCARD_REFRESH;
        if wildcards && self.convert_again.is_none_or(|at| at > refresh) {
            self.convert_again = Some(refresh);
        }
        if self
            .discover(&converted_registries.wildcards, &running)
            .await
        {
            let mut with_new = converted_registries.registries;
            with_new.extend(expanded(self));
            if with_new != all {
                self.set(Part {
                    registries: Some(with_new),
                    ..part
                })
                .await;
            }
        }
    }

    async fn set(&self, part: Part) -> bool {
        match self.union.set(Origin::Karpor, part).await {
            Ok(diff) => {
                if !diff.is_empty() {
                    tracing::info!(
                        added = diff.added.len(),
                        removed = diff.removed.len(),
                        restarted = diff.changed.len(),
                        held = diff.held.len(),
                        "Karpor members applied (their names on the member lines)"
                    );
                }
                true
            }
            Err(e) => {
                tracing::error!(cause = %e, "Karpor members refused; the running ones stay");
                false
            }
        }
    }

    /// Discovers the wildcards' groups on running members that lack them;
    /// true when something new was found.
    async fn discover(&mut self, wildcards: &[Wildcard], running: &BTreeSet<String>) -> bool {
        let now = tokio::time::Instant::now();
        self.discovered
            .retain(|c, (at, _)| running.contains(c) && now.duration_since(*at) < WILDCARD_REFRESH);
        let clients = self.union.pipeline().clients();
        let mut found = false;
        for w in wildcards {
            let gv = registries::group_version(&w.template.gvr);
            for cluster in w.clusters.iter().filter(|c| running.contains(*c)) {
                let known = self
                    .discovered
                    .get(cluster)
                    .is_some_and(|(_, d)| d.contains_key(&gv));
                let Some(client) = clients.get(cluster).filter(|_| !known) else {
                    continue;
                };
                let group =
                    kube::core::GroupVersion::gv(&w.template.gvr.group, &w.template.gvr.version);
                let asked = tokio::time::timeout(
                    Duration::from_secs(5),
                    kube::discovery::pinned_group(client, &group),
                )
                .await;
                match asked {
                    Ok(Ok(g)) => {
                        let plurals =
                            registries::watchable(&g.versioned_resources(&w.template.gvr.version));
                        let entry = self
                            .discovered
                            .entry(cluster.clone())
                            .or_insert((now, BTreeMap::new()));
                        entry.1.insert(gv.clone(), plurals);
                        found = true;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(cluster = %cluster, group_version = %gv, cause = %e, "cannot expand resource \"*\" of a Karpor sync registry; retrying");
                        self.convert_again = Some(now + WILDCARD_RETRY);
                    }
                    Err(_) => {
                        tracing::warn!(cluster = %cluster, group_version = %gv, "discovery for resource \"*\" timed out; retrying");
                        self.convert_again = Some(now + WILDCARD_RETRY);
                    }
                }
            }
        }
        found
    }

    /// Logs each problem once while it lasts.
    fn report(&mut self, problems: Vec<String>) {
        let now: BTreeSet<String> = problems.into_iter().collect();
        for problem in now.difference(&self.reported) {
            tracing::warn!(problem = %problem, "Karpor object not fully used");
        }
        self.reported = now;
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_kube_pulse_reads_counts_as_a_change() {
        let cluster = |rv: &str, healthy: bool, endpoint: &str| -> (String, Cluster) {
            let c: Cluster = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a", "resourceVersion": rv, "labels": {"env": "x"}},
                "spec": {"access": {"endpoint": endpoint}},
                "status": {"healthy": healthy}
            }))
            .unwrap();
            ("a".into(), relevant_cluster(c))
        };
        let mut objects = Objects::new();
        // (event, changed)
        let steps = [
            (Event::Init, false),
            (Event::InitApply(cluster("1", false, "https://a")), false),
            (Event::InitDone, true),
            (Event::Apply(cluster("2", true, "https://a")), false),
            (Event::Apply(cluster("3", true, "https://b")), true),
            (Event::Init, false),
            (Event::InitApply(cluster("4", false, "https://b")), false),
            (Event::InitDone, false),
            (Event::Delete(cluster("5", false, "https://b")), true),
            (Event::Delete(cluster("5", false, "https://b")), false),
        ];
        for (i, (event, want)) in steps.into_iter().enumerate() {
            assert_eq!(objects.apply(event), want, "step {i}");
        }
        assert!(objects.current.is_empty());
    }

    #[test]
    fn the_check_says_why_karpor_is_not_ready() {
        let health = KarporHealth::default();
        assert!(health.state().unwrap_err().contains("not listed yet"));
        health.recovered();
        assert_eq!(health.state(), Ok(()));
        health.failed("connection refused".into());
        let err = health.state().unwrap_err();
        assert!(
            err.contains("unreachable since") && err.contains("connection refused"),
            "{err}"
        );
        health.recovered();
        assert_eq!(health.state(), Ok(()));
    }
}
