//! One kube-rs watcher per resource per cluster, reporting its sync state
//! and, for workloads and namespaces, the objects the app machine needs.
//! Every other resource (a sync registry's) only needs counting: it is
//! watched as `PartialObjectMetadata` and keeps one key per object (see
//! `census`).
//!
//! On any error except an in-stream 410 (which the watcher answers with an
//! immediate relist) the watch reports `Error`, waits kube-runtime's
//! `DefaultBackoff`, reporting `Backoff`, and starts over with a fresh list,
//! so a recovered sync is always confirmed by a completed list. When the
//! probe sees the member answer again after failing, a pending backoff ends
//! at once (and starts over from its minimum): the backoff grown during an
//! outage must not keep documents stale once the member is back.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Namespace, Node};
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::discovery::ApiResource;
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::census::Census;
use super::listwatch::{Fault, Settings, list_watch};
use super::{InitialLists, SourceConfig, SyncResource};
use crate::classify;
use crate::engine::Observation;
use crate::names::{ObjectKey, object_key};
use crate::status::app::Workload;
use crate::status::capacity::NodeFacts;
use crate::status::labels::LabelSets;
use crate::status::objects::{DeploymentObject, PodObject, StatefulSetObject};
use crate::status::pods::{EventKey, PodSummary, Warning};
use crate::status::rules::HealthRule;
use crate::status::sync::{Gvr, SILENT, SyncInput};

/// How often sync progress (object counts, last event time) is reported at most.
const SYNC_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// How often a resource the member does not serve is looked up again (and
/// at once when the member answers again after failing: a restart or an
/// upgrade is when what it serves changes).
pub(crate) const NOT_SERVED_LOOKUP: Duration = Duration::from_secs(300);

/// What a watch learned besides its sync state, as what it keeps of each
/// object (read from the object the moment it arrives; the object itself
/// is dropped then, a list's included: a list of 500 000 pods is never
/// held whole).
pub(crate) enum Step<S> {
    /// A completed (re)list: the whole current set.
    Reset(Vec<S>),
    Applied(S),
    Deleted(S),
}

fn key<K: Resource>(obj: &K) -> ObjectKey {
    object_key(obj.meta().namespace.as_deref(), &obj.name_any())
}

/// Ends a watch attempt: why, as (reason, message).
fn failure(err: &watcher::Error) -> (String, String) {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => {
            let (reason, message) = classify::sync_reason(e);
            (reason.to_string(), message)
        }
        watcher::Error::WatchError(status) => {
            let (reason, message) = classify::sync_reason(&kube::Error::Api(status.clone()));
            (reason.to_string(), message)
        }
        watcher::Error::NoResourceVersion => (
            "NoResourceVersion".into(),
            "the server sent no resourceVersion (does the resource support watch?)".into(),
        ),
    }
}

/// Whether a watch's error is the member refusing a streaming list: an
/// apiserver without the WatchList feature drops `sendInitialEvents` and
/// then refuses the request's `resourceVersionMatch` (422 Invalid); some
/// aggregated APIs answer 400. Only errors of an attempt that has not
/// completed its initial state count.
fn refuses_streaming(err: &watcher::Error) -> bool {
    let code = match err {
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code,
        watcher::Error::WatchError(status) => status.code,
        _ => return false,
    };
    matches!(code, 400 | 422)
}

/// Reports one observation; false when the engine is gone.
async fn report(tx: &mpsc::Sender<Observation>, observation: Observation) -> bool {
    tx.send(observation).await.is_ok()
}

/// Counts the times the probe saw the member answer again after failing
/// (sent by the probe only); a watch compares it with the count when its
/// attempt started to know whether the member came back meanwhile.
pub(crate) type Recoveries = watch::Receiver<u64>;

/// Reports a failure together with the backoff before the retry (one
/// observation), then sleeps through the backoff, which ends early when the
/// member came back since `attempt` (the recovery count when the failed
/// attempt started) or comes back meanwhile. False on shutdown.
async fn fail_and_back_off(
    observe: impl FnOnce(SyncInput) -> Observation,
    (reason, message): (String, String),
    backoff: &mut DefaultBackoff,
    (recoveries, attempt): (&mut Recoveries, u64),
    tx: &mpsc::Sender<Observation>,
    shutdown: &CancellationToken,
) -> bool {
    let delay = backoff.next().unwrap_or(Duration::from_secs(30));
    let until = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
    let input = SyncInput::FailedRetrying {
        reason,
        message,
        until,
    };
    if !report(tx, observe(input)).await {
        return false;
    }
    if *recoveries.borrow_and_update() != attempt {
        *backoff = DefaultBackoff::default();
        return true;
    }
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(delay) => true,
        // Err: the probe is gone (shutdown); the branch is then disabled.
        Ok(()) = recoveries.changed() => {
            *backoff = DefaultBackoff::default();
            true
        }
    }
}

/// What a watch of one resource needs besides its typed API and how its
/// steps become observations.
pub(crate) struct Watch {
    pub(crate) cluster: String,
    pub(crate) gvr: Gvr,
    pub(crate) config: watcher::Config,
    /// The initial state is streamed (until the member refuses it).
    pub(crate) streaming: bool,
    /// The silence a watch that sends bookmarks is allowed (`listwatch`).
    pub(crate) silence: Duration,
    pub(crate) tx: mpsc::Sender<Observation>,
    pub(crate) recoveries: Recoveries,
    pub(crate) shutdown: CancellationToken,
}

/// Drives a watcher for `api` until shutdown, forever recovering; `read`
/// takes what is kept of each object as it arrives, `on_step` turns what
/// was kept into observations.
pub(crate) async fn drive<K, S, R, F>(watch: Watch, api: Api<K>, read: R, on_step: F)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    R: FnMut(K) -> S,
    F: FnMut(Step<S>) -> Vec<Observation>,
{
    let open = move |settings| list_watch(api.clone(), settings);
    follow(watch, open, Some((read, on_step))).await
}

/// Drives the watch streams `open` starts until shutdown, forever
/// recovering. Objects are counted; only with a `keep` (how to read an
/// object, how to report steps) is anything of them kept (a list's until
/// it completes) and handed over.
async fn follow<K, S, R, F>(
    watch: Watch,
    open: impl Fn(Settings) -> BoxStream<'static, Result<Event<K>, Fault>>,
    mut keep: Option<(R, F)>,
) where
    K: Resource,
    R: FnMut(K) -> S,
    F: FnMut(Step<S>) -> Vec<Observation>,
{
    let Watch {
        cluster,
        gvr,
        config,
        mut streaming,
        silence,
        tx,
        mut recoveries,
        shutdown,
    } = watch;
    let sync = |input| Observation::sync(&cluster, &gvr, input);
    let mut backoff = DefaultBackoff::default();
    let mut census = Census::default();
    loop {
        let attempt = *recoveries.borrow_and_update();
        let mut stream = open(Settings {
            config: config.clone(),
            streaming,
            silence,
        });
        // A streamed initial state starts (Event::Init) only once the
        // member accepted the watch: it is announced at once, as a list's
        // first request is, so that an attempt the member refuses shows as
        // one; its Event::Init then announces nothing more (one list, one
        // `ListStarted`, counted once in kube_pulse_watch_lists_total).
        let mut announced = streaming;
        if announced {
            census.list_started();
            if !report(&tx, sync(SyncInput::ListStarted)).await {
                return;
            }
        }
        let mut listing: Vec<S> = Vec::new();
        let mut listed = false;
        let mut unreported = false;
        let mut ticker = tokio::time::interval(SYNC_REPORT_INTERVAL);
        // None: the member refused a streaming list; list in pages at once.
        let failed: Option<(String, String)> = loop {
            let item = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {
                    if unreported {
                        unreported = false;
                        let input = SyncInput::Event { count: census.count(), resource_version: census.resource_version().map(str::to_string) };
                        if !report(&tx, sync(input)).await { return; }
                    }
                    continue;
                }
                item = stream.next() => item,
            };
            let mut out: Vec<Observation> = Vec::new();
            match item {
                None => {
                    break Some(("StreamEnded".into(), "the watch stream ended".into()));
                }
                Some(Ok(Event::Init)) => {
                    listing.clear();
                    census.list_started();
                    if !std::mem::take(&mut announced) {
                        out.push(sync(SyncInput::ListStarted));
                    }
                }
                Some(Ok(Event::InitApply(obj))) => {
                    let so_far = census.listed(key(&obj), obj.meta().resource_version.as_deref());
                    if let Some((read, _)) = keep.as_mut() {
                        listing.push(read(obj));
                    }
                    if so_far.is_multiple_of(500) {
                        out.push(sync(SyncInput::Listed {
                            count: so_far as u64,
                        }));
                    }
                }
                Some(Ok(Event::InitDone)) => {
                    listed = true;
                    census.list_done();
                    if let Some((_, on_step)) = keep.as_mut() {
                        out.extend(on_step(Step::Reset(std::mem::take(&mut listing))));
                    }
                    out.push(sync(SyncInput::ListDone {
                        count: census.count(),
                        resource_version: census.resource_version().map(str::to_string),
                    }));
                    backoff = DefaultBackoff::default();
                    unreported = false;
                }
                Some(Ok(Event::Apply(obj))) => {
                    census.applied(key(&obj), obj.meta().resource_version.as_deref());
                    if let Some((read, on_step)) = keep.as_mut() {
                        out.extend(on_step(Step::Applied(read(obj))));
                    }
                    unreported = true;
                }
                Some(Ok(Event::Delete(obj))) => {
                    census.deleted(key(&obj), obj.meta().resource_version.as_deref());
                    if let Some((read, on_step)) = keep.as_mut() {
                        out.extend(on_step(Step::Deleted(read(obj))));
                    }
                    unreported = true;
                }
                Some(Err(Fault::Watch(watcher::Error::WatchError(status))))
                    if status.code == 410 =>
                {
                    // The list-watch relists at once; say why the list restarts.
                    out.push(sync(SyncInput::Failed {
                        reason: "Expired".into(),
                        message: status.message.clone(),
                    }));
                }
                Some(Err(Fault::Silent(after))) => {
                    // The list-watch relists at once; the sync says why
                    // until that list completes.
                    tracing::info!(cluster = %cluster, resource = %gvr.path(), silent_seconds = after.as_secs(), "a watch that sends bookmarks went silent; restarting it");
                    out.push(sync(SyncInput::Failed {
                        reason: SILENT.into(),
                        message: format!(
                            "no event and no bookmark for {} s while the connection stayed open; watching again",
                            after.as_secs()
                        ),
                    }));
                }
                Some(Err(Fault::Watch(err))) if streaming && !listed && refuses_streaming(&err) => {
                    streaming = false;
                    tracing::info!(cluster = %cluster, resource = %gvr.path(), error = %err, "the member refuses streaming lists of this resource; listing it in pages");
                    break None;
                }
                Some(Err(Fault::Watch(err))) => break Some(failure(&err)),
            }
            for observation in out {
                if !report(&tx, observation).await {
                    return;
                }
            }
        };
        let Some(failed) = failed else {
            continue;
        };
        let (reason, message) = &failed;
        tracing::debug!(cluster = %cluster, resource = %gvr.path(), %reason, %message, "watch failed");
        let recovered = (&mut recoveries, attempt);
        if !fail_and_back_off(sync, failed, &mut backoff, recovered, &tx, &shutdown).await {
            return;
        }
    }
}

fn scoped<K>(client: kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}

fn watcher_config(resource: &SyncResource, config: &SourceConfig) -> watcher::Config {
    let mut wc = watcher::Config::default();
    if let Some(selector) = &resource.label_selector {
        wc = wc.labels(selector);
    }
    if let Some(selector) = &resource.field_selector {
        wc = wc.fields(selector);
    }
    if let Some(page) = config.page_size {
        wc = wc.page_size(page);
    }
    wc
}

/// The kind of a resource watched with a typed API (no discovery needed).
fn builtin_kind(gvr: &Gvr) -> Option<&'static str> {
    match (
        gvr.group.as_str(),
        gvr.version.as_str(),
        gvr.resource.as_str(),
    ) {
        ("apps", "v1", "deployments") => Some("Deployment"),
        ("apps", "v1", "statefulsets") => Some("StatefulSet"),
        ("", "v1", "namespaces") => Some("Namespace"),
        ("", "v1", "pods") => Some("Pod"),
        ("", "v1", "events") => Some("Event"),
        ("", "v1", "nodes") => Some("Node"),
        _ => None,
    }
}

/// Runs the watch of one resource until `shutdown`.
pub(crate) async fn run(
    cluster: String,
    client: kube::Client,
    resource: SyncResource,
    config: SourceConfig,
    tx: mpsc::Sender<Observation>,
    recoveries: Recoveries,
    shutdown: CancellationToken,
) {
    let ns = resource.namespace.as_deref();
    let app_label = config.app_label.clone();
    let gvr = resource.gvr.clone();
    if let Some(kind) = builtin_kind(&gvr) {
        let _ = tx
            .send(Observation::sync(
                &cluster,
                &gvr,
                SyncInput::Kind(kind.into()),
            ))
            .await;
    }
    // Its turn among the connections the gateway starts (src/sources/pacer.rs).
    tokio::select! {
        _ = shutdown.cancelled() => return,
        _ = config.pacer.turn() => {}
    }
    let mut watch = Watch {
        cluster: cluster.clone(),
        gvr: gvr.clone(),
        config: watcher_config(&resource, &config),
        streaming: config.initial_lists == InitialLists::Streaming,
        silence: config.watch_silence,
        tx,
        recoveries,
        shutdown,
    };
    if let Some(rule) = config.rules.for_resource(&gvr) {
        return run_rule(client, Arc::clone(rule), app_label, watch).await;
    }
    match (
        gvr.group.as_str(),
        gvr.version.as_str(),
        gvr.resource.as_str(),
    ) {
        ("apps", "v1", "deployments") => {
            let c = cluster.clone();
            let api: Api<DeploymentObject> = scoped(client, ns);
            let read = move |d: DeploymentObject| Workload::from_deployment(&d, &app_label);
            drive(watch, api, read, move |step| {
                workload_steps(&c, "Deployment", step)
            })
            .await
        }
        ("apps", "v1", "statefulsets") => {
            let c = cluster.clone();
            let api: Api<StatefulSetObject> = scoped(client, ns);
            let read = move |s: StatefulSetObject| Workload::from_statefulset(&s, &app_label);
            drive(watch, api, read, move |step| {
                workload_steps(&c, "StatefulSet", step)
            })
            .await
        }
        ("", "v1", "namespaces") => {
            let c = cluster.clone();
            let api: Api<Namespace> = Api::all(client);
            let read = |n: Namespace| n.name_any();
            drive(watch, api, read, move |step| namespace_steps(&c, step)).await
        }
        ("", "v1", "pods") => {
            let c = cluster.clone();
            let api: Api<PodObject> = scoped(client, ns);
            let mut sets = LabelSets::default();
            let read = move |p: PodObject| PodSummary::from_pod(&p, &mut sets);
            drive(watch, api, read, move |step| pod_steps(&c, step)).await
        }
        ("", "v1", "nodes") => {
            let c = cluster.clone();
            let api: Api<Node> = Api::all(client);
            let read = |n: Node| (n.name_any(), NodeFacts::from_node(&n));
            drive(watch, api, read, move |step| node_steps(&c, step)).await
        }
        ("", "v1", "events") => {
            let c = cluster.clone();
            let api: Api<CoreEvent> = scoped(client, ns);
            // Only warnings: the app documents show nothing else, and
            // Normal events are most of a busy cluster's events.
            watch.config = watch.config.fields("type=Warning");
            drive(watch, api, read_warning, move |step| {
                warning_steps(&c, step)
            })
            .await
        }
        _ => run_dynamic(client, resource, watch).await,
    }
}

fn pod_steps(cluster: &str, step: Step<PodSummary>) -> Vec<Observation> {
    let cluster = cluster.to_string();
    match step {
        Step::Reset(items) => vec![Observation::PodsListed { cluster, items }],
        Step::Applied(pod) => vec![Observation::PodApplied { cluster, pod }],
        Step::Deleted(pod) => vec![Observation::PodDeleted {
            cluster,
            namespace: pod.namespace,
            name: pod.name,
        }],
    }
}

fn node_steps(cluster: &str, step: Step<(String, NodeFacts)>) -> Vec<Observation> {
    let cluster = cluster.to_string();
    match step {
        Step::Reset(items) => vec![Observation::NodesListed { cluster, items }],
        Step::Applied((name, node)) => vec![Observation::NodeApplied {
            cluster,
            name,
            node,
        }],
        Step::Deleted((name, _)) => vec![Observation::NodeDeleted { cluster, name }],
    }
}

/// What a Warning watch keeps of an event: its key, and the warning if it is one.
type ReadWarning = (EventKey, Option<Warning>);

fn read_warning(event: CoreEvent) -> ReadWarning {
    let key = (event.namespace().unwrap_or_default(), event.name_any());
    (key, Warning::from_event(&event).map(|(_, warning)| warning))
}

fn warning_steps(cluster: &str, step: Step<ReadWarning>) -> Vec<Observation> {
    let cluster = cluster.to_string();
    match step {
        Step::Reset(items) => vec![Observation::WarningsListed {
            cluster,
            items: items
                .into_iter()
                .filter_map(|(key, warning)| Some((key, warning?)))
                .collect(),
        }],
        Step::Applied((key, Some(warning))) => vec![Observation::WarningApplied {
            cluster,
            key,
            warning,
        }],
        Step::Applied((_, None)) => Vec::new(),
        Step::Deleted((key, _)) => vec![Observation::WarningDeleted { cluster, key }],
    }
}

fn workload_steps(cluster: &str, kind: &'static str, step: Step<Workload>) -> Vec<Observation> {
    let cluster = cluster.to_string();
    match step {
        Step::Reset(items) => vec![Observation::WorkloadsListed {
            cluster,
            kind,
            items,
        }],
        Step::Applied(workload) => vec![Observation::WorkloadApplied { cluster, workload }],
        Step::Deleted(workload) => vec![Observation::WorkloadDeleted {
            cluster,
            kind,
            namespace: workload.namespace,
            name: workload.name,
        }],
    }
}

fn namespace_steps(cluster: &str, step: Step<String>) -> Vec<Observation> {
    let cluster = cluster.to_string();
    match step {
        Step::Reset(names) => vec![Observation::NamespacesListed { cluster, names }],
        Step::Applied(name) => vec![Observation::NamespaceApplied { cluster, name }],
        Step::Deleted(name) => vec![Observation::NamespaceDeleted { cluster, name }],
    }
}

/// Reports a resource the member does not serve (its well-known kind first,
/// when discovery could not tell it), then waits for the next lookup:
/// [`NOT_SERVED_LOOKUP`], or the member answering again after failing since
/// `attempt`. False on shutdown.
async fn not_served(
    (cluster, gvr): (&str, &Gvr),
    message: String,
    (recoveries, attempt): (&mut Recoveries, u64),
    tx: &mpsc::Sender<Observation>,
    shutdown: &CancellationToken,
) -> bool {
    let observe = |input| Observation::sync(cluster, gvr, input);
    if let Some(kind) = crate::status::sync::well_known_kind(&gvr.group, &gvr.resource)
        && !report(tx, observe(SyncInput::Kind(kind.to_string()))).await
    {
        return false;
    }
    if !report(tx, observe(SyncInput::NotServed { message })).await {
        return false;
    }
    next_lookup((recoveries, attempt), shutdown).await
}

/// Waits for the next lookup of a resource the member does not serve:
/// [`NOT_SERVED_LOOKUP`], or at once when the member answered again after
/// failing since `attempt` (or does meanwhile). False on shutdown.
async fn next_lookup(
    (recoveries, attempt): (&mut Recoveries, u64),
    shutdown: &CancellationToken,
) -> bool {
    if *recoveries.borrow_and_update() != attempt {
        return true;
    }
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(NOT_SERVED_LOOKUP) => true,
        // Err: the probe is gone (shutdown); the branch is then disabled.
        Ok(()) = recoveries.changed() => true,
    }
}

/// Watches the custom workloads a health rule reads, where the member
/// serves them: each object is read through the rule as it arrives (and
/// dropped). A member that does not serve the resource is looked up again
/// after [`NOT_SERVED_LOOKUP`] or when it answers again after failing, and
/// shows nothing meanwhile: clusters without the CRD pay one discovery
/// request per lookup, and their documents have no entry for it.
async fn run_rule(client: kube::Client, rule: Arc<HealthRule>, app_label: String, watch: Watch) {
    let found: ApiResource = {
        let Watch {
            gvr,
            recoveries,
            shutdown,
            ..
        } = &watch;
        let mut recoveries = recoveries.clone();
        loop {
            let attempt = *recoveries.borrow_and_update();
            let discovered = tokio::select! {
                _ = shutdown.cancelled() => return,
                d = super::lookup(&client, gvr) => d,
            };
            let served = discovered.ok().flatten().and_then(|(ar, caps)| {
                caps.supports_operation(kube::discovery::verbs::WATCH)
                    .then_some(ar)
            });
            if let Some(found) = served {
                break found;
            }
            if !next_lookup((&mut recoveries, attempt), shutdown).await {
                return;
            }
        }
    };
    let kind = SyncInput::Kind(found.kind.clone());
    if !report(
        &watch.tx,
        Observation::sync(&watch.cluster, &watch.gvr, kind),
    )
    .await
    {
        return;
    }
    let c = watch.cluster.clone();
    let api: Api<DynamicObject> = Api::all_with(client, &found);
    let workload_kind = rule.kind;
    let read = move |obj: DynamicObject| {
        let object = serde_json::to_value(&obj).unwrap_or_default();
        rule.read(&object, &app_label)
    };
    drive(watch, api, read, move |step| {
        workload_steps(&c, workload_kind, step)
    })
    .await
}

/// Finds the resource through discovery, then watches its objects'
/// metadata (`PartialObjectMetadata`), counting them. A resource the member
/// does not serve is reported `NotServed` (with its well-known kind, if
/// any) and looked up again after [`NOT_SERVED_LOOKUP`] or when the member
/// answers again after failing, never retried with a backoff; other
/// failures of discovery are retried with one.
async fn run_dynamic(client: kube::Client, resource: SyncResource, watch: Watch) {
    let Watch {
        cluster,
        gvr,
        config,
        streaming,
        silence,
        tx,
        mut recoveries,
        shutdown,
    } = watch;
    let mut backoff = DefaultBackoff::default();
    let found: ApiResource = loop {
        let attempt = *recoveries.borrow_and_update();
        let discovered = tokio::select! {
            _ = shutdown.cancelled() => return,
            d = super::lookup(&client, &gvr) => d,
        };
        let (reason, message) = match discovered {
            Ok(Some((ar, caps))) if caps.supports_operation(kube::discovery::verbs::WATCH) => {
                break ar;
            }
            Ok(Some(_)) => (
                "NotServed".to_string(),
                format!("{} cannot be watched", gvr.path()),
            ),
            Ok(None) => (
                "NotServed".to_string(),
                format!("{} is not served by this cluster", gvr.path()),
            ),
            Err(kube::Error::Discovery(e)) => ("NotServed".to_string(), classify::describe(&e)),
            Err(e) => {
                let (reason, message) = classify::sync_reason(&e);
                (reason.to_string(), message)
            }
        };
        if reason == "NotServed" {
            backoff = DefaultBackoff::default();
            let recovered = (&mut recoveries, attempt);
            if !not_served((&cluster, &gvr), message, recovered, &tx, &shutdown).await {
                return;
            }
            continue;
        }
        let observe = |input| Observation::sync(&cluster, &gvr, input);
        let failed = (reason, message);
        let recovered = (&mut recoveries, attempt);
        if !fail_and_back_off(observe, failed, &mut backoff, recovered, &tx, &shutdown).await {
            return;
        }
    };
    let kind = SyncInput::Kind(found.kind.clone());
    if !report(&tx, Observation::sync(&cluster, &gvr, kind)).await {
        return;
    }
    // The sync status needs no bodies: an `Api` of `PartialObjectMeta` asks
    // for metadata only (`as=PartialObjectMetadataList` lists and
    // `as=PartialObjectMetadata` watch events), and none is kept.
    let api: Api<PartialObjectMeta<DynamicObject>> = match &resource.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &found),
        None => Api::all_with(client, &found),
    };
    let watch = Watch {
        cluster,
        gvr,
        config,
        streaming,
        silence,
        tx,
        recoveries,
        shutdown,
    };
    let open = move |settings| list_watch(api.clone(), settings);
    let keep = None::<(fn(_) -> (), fn(Step<()>) -> Vec<Observation>)>;
    follow(watch, open, keep).await
}
