//! A Kubernetes API simulator: the member clusters of tests, benchmarks and
//! the demo (`member clusters ──watch──▶ sources`, simulated).
//!
//! Each [`SimCluster`] is an HTTP server on loopback that kube-rs and kubectl
//! talk to as they would to an apiserver: discovery, CRUD, list paging,
//! selectors, watches with bookmarks, streaming lists and 410 Expired, plus
//! workload controllers that converge status on spec. It takes fault
//! injection from Rust ([`SimCluster::set_faults`]) and over HTTP
//! (`/_sim/...`, see `docs/SIMULATOR.md`), and counts the requests it serves.
//! With [`SimConfig::karpor`] it is a simulated Karpor apiserver instead
//! ([`karpor`]).

mod api;
mod control;
pub mod converger;
pub mod crd;
mod discovery;
pub mod events;
pub mod faults;
pub mod karpor;
mod kubelet;
pub mod managed;
pub mod media;
pub mod nodes;
pub mod object;
mod params;
pub mod patch;
pub mod pods;
mod protobuf;
pub mod replicasets;
pub mod resources;
pub mod reviews;
pub mod scenario;
pub mod schema;
pub mod selector;
mod server;
pub mod status;
pub mod store;
pub mod table;
pub mod typed;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use parking_lot::RwLock;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use converger::ConvergeConfig;
pub use faults::{Faults, StatsSnapshot};
pub use karpor::KarporOptions;
pub use resources::ResourceDef;
pub use status::ApiError;

use faults::Stats;
use store::Store;

/// A workload to create when the cluster starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSeed {
    /// `Deployment` or `StatefulSet`.
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
    pub converge: ConvergeConfig,
    /// RBAC emulation: `group/resource[:verb]` rules answered with 403.
    pub deny: Vec<String>,
    /// Namespaces created at start (besides `default`, `kube-system`, `kube-public`).
    pub namespaces: Vec<String>,
    pub workloads: Vec<WorkloadSeed>,
    /// Who tokens are and what they may do, for TokenReview / SubjectAccessReview.
    pub reviews: reviews::ReviewPolicy,
    /// What goes wrong with pods of these images.
    pub image_faults: BTreeMap<String, pods::ImageFault>,
    /// Pods the cluster has room for (None: unlimited).
    pub pod_capacity: Option<u32>,
    /// Serve Karpor's API instead of a Kubernetes cluster's (`karpor/`).
    pub karpor: Option<KarporOptions>,
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
            converge: ConvergeConfig::default(),
            deny: Vec::new(),
            namespaces: Vec::new(),
            workloads: Vec::new(),
            reviews: reviews::ReviewPolicy::default(),
            image_faults: BTreeMap::new(),
            pod_capacity: None,
            karpor: None,
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

/// State shared by the handlers, the accept loop and the controllers of one cluster.
pub(crate) struct Shared {
    name: String,
    addr: SocketAddr,
    store: Store,
    token: Option<String>,
    /// Written by the control API and [`SimCluster`]; read by every request.
    faults: tokio::sync::watch::Sender<Faults>,
    deny: RwLock<BTreeSet<String>>,
    failing_images: RwLock<BTreeSet<String>>,
    /// What goes wrong with pods of these images (besides `failing_images`,
    /// whose pods run but never get ready).
    image_faults: RwLock<BTreeMap<String, pods::ImageFault>>,
    /// Pods the cluster has room for (None: unlimited); the rest are unschedulable.
    pod_capacity: RwLock<Option<u32>>,
    /// Answers to TokenReview and SubjectAccessReview.
    reviews: RwLock<reviews::ReviewPolicy>,
    stats: Stats,
    /// Bumped to end every open watch stream cleanly.
    close_watches: tokio::sync::watch::Sender<u64>,
    bookmark_interval: Duration,
    shutdown: CancellationToken,
}

impl Shared {
    /// Every image with a fault: `failing_images` as `NotReady`, then the
    /// explicit faults (which win).
    fn image_faults(&self) -> BTreeMap<String, pods::ImageFault> {
        let mut faults: BTreeMap<String, pods::ImageFault> = self
            .failing_images
            .read()
            .iter()
            .map(|i| (i.clone(), pods::ImageFault::NotReady))
            .collect();
        faults.extend(self.image_faults.read().clone());
        faults
    }
    fn is_denied(&self, def: &ResourceDef, verb: &str) -> bool {
        let key = def.stats_key();
        let deny = self.deny.read();
        deny.contains(&key) || deny.contains(&format!("{key}:{verb}"))
    }

    fn set_faults(&self, faults: Faults) {
        self.faults.send_replace(faults);
    }

    /// Clears `applied` after `after`, unless the faults were changed meanwhile.
    fn heal_later(self: &Arc<Self>, after: Duration, applied: Faults) {
        let shared = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shared.shutdown.cancelled() => {}
                _ = tokio::time::sleep(after) => {
                    shared.faults.send_if_modified(|f| {
                        if *f == applied { *f = Faults::default(); true } else { false }
                    });
                }
            }
        });
    }
}

/// Paths a real apiserver serves to anonymous clients.
fn is_public(path: &str) -> bool {
    matches!(path, "/livez" | "/readyz" | "/healthz" | "/version")
}

/// Applies auth and the stall / latency / status faults before any API handler.
async fn guard(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let mut faults = shared.faults.subscribe();
    loop {
        if !faults.borrow_and_update().stall {
            break;
        }
        tokio::select! {
            _ = shared.shutdown.cancelled() => return ApiError::new(503, "ServiceUnavailable", "shutting down").into_response(),
            changed = faults.changed() => if changed.is_err() { break },
        }
    }
    let current = faults.borrow().clone();
    if current.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(current.latency_ms)).await;
    }
    let path = request.uri().path().to_string();
    // The status fault stands for a broken apiserver or proxy: everything answers it.
    if let Some(code) = current.status
        && current
            .status_path_prefix
            .as_deref()
            .is_none_or(|prefix| path.starts_with(prefix))
    {
        return injected_error(code).into_response();
    }
    if let Some(token) = &shared.token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.strip_prefix("Bearer ").unwrap_or(""));
        // As on a real apiserver: public paths allow anonymous requests, but a
        // credential that fails authentication is refused everywhere.
        let allowed = match presented {
            None => is_public(&path),
            Some(t) => t == token,
        };
        if !allowed {
            return ApiError::unauthorized().into_response();
        }
    }
    let mut response = next.run(request).await;
    if current.clock_skew_seconds != 0 {
        // The apiserver's clock, off by the skew (hyper keeps a Date header
        // that is already there).
        let at = chrono::Utc::now() + chrono::Duration::seconds(current.clock_skew_seconds);
        if let Ok(value) = at.format("%a, %d %b %Y %H:%M:%S GMT").to_string().parse() {
            response.headers_mut().insert(header::DATE, value);
        }
    }
    response
}

fn injected_error(code: u16) -> ApiError {
    let (reason, message) = match code {
        401 => ("Unauthorized", "Unauthorized"),
        403 => ("Forbidden", "forbidden: injected by the simulator"),
        404 => (
            "NotFound",
            "the server could not find the requested resource",
        ),
        409 => ("Conflict", "conflict injected by the simulator"),
        410 => ("Expired", "too old resource version"),
        429 => (
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        ),
        502 | 503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted",
        ),
        _ => (
            "InternalError",
            "an error on the server (\"injected\") has prevented the request from succeeding",
        ),
    };
    let mut err = ApiError::new(code, reason, message);
    if matches!(code, 429 | 503) {
        err.retry_after = Some(1);
    }
    err
}

fn api_router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/version", get(discovery::version))
        .route("/livez", get(discovery::livez))
        .route("/readyz", get(discovery::readyz))
        .route("/healthz", get(discovery::healthz))
        .route("/api", get(discovery::core_versions))
        .route("/apis", get(discovery::groups))
        .route("/openapi/v2", get(discovery::openapi_v2))
        .route("/openapi/v3", get(discovery::openapi_v3))
        .route("/openapi/v3/{*rest}", get(discovery::openapi_v3_group))
        .fallback(api::handle)
        .layer(middleware::from_fn_with_state(shared.clone(), guard))
        .with_state(shared.clone())
        .nest("/_sim", control::router(shared))
}

/// A Deployment or StatefulSet manifest as the seeds and the demo create them:
/// labelled `app.kubernetes.io/name=NAME`, one container.
pub fn workload_manifest(seed: &WorkloadSeed) -> Value {
    let labels = json!({"app.kubernetes.io/name": seed.name});
    let mut spec = json!({
        "replicas": seed.replicas,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": seed.name, "image": seed.image}]},
        },
    });
    if seed.kind == "StatefulSet" {
        spec["serviceName"] = json!(seed.name);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": seed.kind,
        "metadata": {"name": seed.name, "namespace": seed.namespace, "labels": labels},
        "spec": spec,
    })
}

/// A running simulated cluster. Dropping it does not stop it; call [`SimCluster::shutdown`].
pub struct SimCluster {
    shared: Arc<Shared>,
    tracker: TaskTracker,
}

// By hand: `Shared` holds the bearer token and channels; only say which cluster this is.
impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("name", &self.shared.name)
            .field("addr", &self.shared.addr)
            .finish_non_exhaustive()
    }
}

impl SimCluster {
    /// Binds `config.listen`, seeds objects and starts serving.
    pub async fn start(config: SimConfig) -> std::io::Result<Self> {
        Self::start_with_shutdown(config, CancellationToken::new()).await
    }

    /// Like [`SimCluster::start`], stopping when `shutdown` is cancelled.
    pub async fn start_with_shutdown(
        config: SimConfig,
        shutdown: CancellationToken,
    ) -> std::io::Result<Self> {
        let listener = server::bind(config.listen)?;
        let addr = listener.local_addr()?;
        let catalog = match config.karpor {
            Some(options) => karpor::catalog(options, config.extra_resources.clone()),
            None => resources::Catalog::new(config.extra_resources.clone()),
        };
        let shared = Arc::new(Shared {
            name: config.name.clone(),
            addr,
            store: Store::new(catalog, config.window),
            token: config.token.clone(),
            faults: tokio::sync::watch::channel(Faults::default()).0,
            deny: RwLock::new(config.deny.iter().cloned().collect()),
            failing_images: RwLock::new(BTreeSet::new()),
            image_faults: RwLock::new(config.image_faults.clone()),
            pod_capacity: RwLock::new(config.pod_capacity),
            reviews: RwLock::new(config.reviews.clone()),
            stats: Stats::default(),
            close_watches: tokio::sync::watch::channel(0).0,
            bookmark_interval: config.bookmark_interval.max(Duration::from_millis(10)),
            shutdown: shutdown.child_token(),
        });
        let cluster = Self {
            shared: shared.clone(),
            tracker: TaskTracker::new(),
        };
        cluster.seed(&config).map_err(std::io::Error::other)?;
        let app = api_router(shared.clone());
        cluster.tracker.spawn(server::run(
            shared.clone(),
            listener,
            app,
            cluster.tracker.clone(),
        ));
        cluster.tracker.spawn(converger::run(
            shared.clone(),
            config.converge,
            shared.shutdown.clone(),
        ));
        tracing::info!(cluster = %config.name, %addr, "simulated cluster listening");
        Ok(cluster)
    }

    fn seed(&self, config: &SimConfig) -> Result<(), ApiError> {
        let mut namespaces: Vec<&str> = vec!["default", "kube-system", "kube-public"];
        namespaces.extend(config.namespaces.iter().map(String::as_str));
        namespaces.extend(config.workloads.iter().map(|w| w.namespace.as_str()));
        let ns_def = self.shared.store.catalog().namespaces().clone();
        for ns in namespaces {
            match self
                .shared
                .store
                .create(&ns_def, None, json!({"metadata": {"name": ns}}), false)
            {
                Ok(_) => {}
                Err(e) if e.reason == "AlreadyExists" => {}
                Err(e) => return Err(e),
            }
        }
        nodes::seed(&self.shared.store, chrono::Utc::now())?;
        for workload in &config.workloads {
            self.apply(&workload_manifest(workload))?;
        }
        if config.karpor.is_some_and(|k| k.default_registry) {
            self.apply(&karpor::only_metadata_rule())?;
            self.apply(&karpor::default_sync_registry())?;
        }
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The bearer token API requests need, if any.
    pub fn token(&self) -> Option<&str> {
        self.shared.token.as_deref()
    }

    /// `http://127.0.0.1:PORT`, what `kubectl --server` takes.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// A kube-rs client configuration for this cluster (with its token, if any).
    pub fn kube_config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.url().parse().expect("a valid URL"));
        config.default_namespace = "default".into();
        if let Some(token) = &self.shared.token {
            config.auth_info.token = Some(token.clone().into());
        }
        config
    }

    /// A kubeconfig (YAML) whose one context, `context`, reaches this
    /// cluster (with its token, if any): what `kubectl --kubeconfig` and
    /// `kube-pulse serve --karpor-kubeconfig` read.
    pub fn kubeconfig(&self, context: &str) -> String {
        let user = match &self.shared.token {
            Some(token) => json!({"token": token}),
            None => json!({}),
        };
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url()}}],
            "users": [{"name": context, "user": user}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
        });
        serde_yaml_ng::to_string(&config).expect("JSON values always serialize")
    }

    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.kube_config()).expect("a plain-HTTP client always builds")
    }

    /// The control API of this cluster, to mount elsewhere (the demo does).
    pub fn control_router(&self) -> Router {
        control::router(self.shared.clone())
    }

    pub fn faults(&self) -> Faults {
        self.shared.faults.borrow().clone()
    }

    /// Replaces the faults in force.
    pub fn set_faults(&self, faults: Faults) {
        self.shared.set_faults(faults);
    }

    /// Clears every fault.
    pub fn heal(&self) {
        self.shared.set_faults(Faults::default());
    }

    /// Compacts the event window: open watches get 410 Expired and must relist.
    pub fn expire_watches(&self) {
        self.shared.store.expire_all();
    }

    /// Ends every open watch stream cleanly (clients re-watch).
    pub fn close_watches(&self) {
        self.shared.close_watches.send_modify(|n| *n += 1);
    }

    /// Replaces the RBAC deny rules (`group/resource[:verb]`).
    pub fn set_deny<I: IntoIterator<Item = S>, S: Into<String>>(&self, rules: I) {
        *self.shared.deny.write() = rules.into_iter().map(Into::into).collect();
    }

    /// Replaces the policy TokenReview and SubjectAccessReview answer from.
    pub fn set_review_policy(&self, policy: reviews::ReviewPolicy) {
        *self.shared.reviews.write() = policy;
    }

    /// Images whose pods never become ready (rollouts stall, then exceed their deadline).
    /// Sets what goes wrong with pods of each image (replacing the previous map).
    pub fn set_image_faults<I: IntoIterator<Item = (S, pods::ImageFault)>, S: Into<String>>(
        &self,
        faults: I,
    ) {
        *self.shared.image_faults.write() =
            faults.into_iter().map(|(i, f)| (i.into(), f)).collect();
    }

    /// Limits the pods the cluster has room for (None: unlimited).
    pub fn set_pod_capacity(&self, pods: Option<u32>) {
        *self.shared.pod_capacity.write() = pods;
    }

    pub fn set_failing_images<I: IntoIterator<Item = S>, S: Into<String>>(&self, images: I) {
        *self.shared.failing_images.write() = images.into_iter().map(Into::into).collect();
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.shared
            .stats
            .snapshot(self.shared.store.resource_version())
    }

    /// Direct access to the objects, bypassing HTTP, faults and counters.
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// Creates or replaces an object given as a full manifest (bypassing HTTP).
    pub fn apply(&self, manifest: &Value) -> Result<Arc<Value>, ApiError> {
        let api_version = manifest["apiVersion"].as_str().unwrap_or("");
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let kind = manifest["kind"].as_str().unwrap_or("");
        let def = self
            .shared
            .store
            .catalog()
            .all()
            .iter()
            .find(|d| d.group == group && d.version == version && d.kind == kind)
            .cloned()
            .ok_or_else(|| {
                ApiError::bad_request(format!("no resource of kind {kind:?} in {api_version:?}"))
            })?;
        let ns = object::namespace_of(manifest).to_string();
        let ns = (def.namespaced).then_some(ns.as_str());
        let name = object::name_of(manifest).to_string();
        let store = &self.shared.store;
        match store.get(&def, ns, &name) {
            Ok(_) => store.mutate(
                &def,
                ns,
                &name,
                object::UpdateScope::Main,
                false,
                |current| {
                    let mut next = manifest.clone();
                    next["metadata"]["resourceVersion"] =
                        current["metadata"]["resourceVersion"].clone();
                    Ok(next)
                },
            ),
            Err(e) if e.code == 404 => store.create(&def, ns, manifest.clone(), false),
            Err(e) => Err(e),
        }
    }

    /// Stops serving and waits for every task of this cluster to end.
    pub async fn shutdown(self) {
        self.shared.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}
