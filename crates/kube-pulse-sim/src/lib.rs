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
//!
//! This file declares the modules, re-exports what other crates name at the
//! root, and holds [`SimCluster`]. The modules import one way, bottom up:
//!
//! - values: `time.rs`, `schema/` (Go types), `resources.rs` (the
//!   catalogue), `status.rs` (errors), `typed.rs`, `object.rs`, `crd.rs`,
//!   `managed.rs`, `selector.rs`, `faults.rs`, `reviews.rs`, `karpor_api/`
//!   (Karpor's catalogue and objects), and the request helpers
//!   `params.rs`, `media.rs`, `patch.rs`, `table.rs`, `protobuf.rs`;
//! - `store/`: the objects, their versions and watch windows;
//! - controllers: `nodes.rs`, `pods.rs`, `events.rs`, `rollout.rs`,
//!   `replicasets.rs`, `kubelet.rs`, `converger.rs`;
//! - `shared.rs` (one cluster's state), then HTTP: `api/`, `watch.rs`,
//!   `discovery.rs`, `control.rs`, `guard.rs`, `router.rs`, `server.rs`;
//! - `config.rs` and this file: the cluster;
//! - on top, using [`SimCluster`]: `karpor.rs`, `scenario.rs`.
//!
//! `scripts/check-imports.py` fails on any import circle among them.

mod api;
mod config;
mod control;
pub mod converger;
pub mod crd;
pub mod custom_status;
pub mod defaults;
mod discovery;
pub mod events;
pub mod faults;
mod guard;
pub mod karpor;
mod karpor_api;
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
mod rollout;
mod router;
pub mod scenario;
pub mod schema;
pub mod selector;
mod server;
mod shared;
pub mod status;
pub mod store;
pub mod table;
mod time;
mod tls;
pub mod typed;
pub mod validation;
mod watch;
pub mod workloads;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use parking_lot::RwLock;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{SimConfig, WorkloadSeed, workload_manifest};
pub use converger::ConvergeConfig;
pub use faults::{Faults, StatsSnapshot};
pub use karpor::KarporOptions;
pub use resources::ResourceDef;
pub use status::ApiError;

use faults::Stats;
use shared::Shared;
use store::Store;

/// A running simulated cluster. Dropping it does not stop it; call [`SimCluster::shutdown`].
pub struct SimCluster {
    shared: Arc<Shared>,
    tracker: TaskTracker,
    /// With `SimConfig::tls`: the certificate it serves and its CA.
    tls: Option<tls::Tls>,
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
        let tls = match config.tls {
            true => Some(tls::Tls::new(addr.ip()).map_err(std::io::Error::other)?),
            false => None,
        };
        let catalog = match config.karpor {
            Some(options) => karpor_api::catalog(options, config.extra_resources.clone()),
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
            watch_list: config.watch_list,
            shutdown: shutdown.child_token(),
        });
        let cluster = Self {
            shared: shared.clone(),
            tracker: TaskTracker::new(),
            tls: tls.clone(),
        };
        cluster.seed(&config).map_err(std::io::Error::other)?;
        let app = router::api_router(shared.clone());
        cluster.tracker.spawn(server::run(
            shared.clone(),
            listener,
            app,
            cluster.tracker.clone(),
            tls,
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
        if config.workload_crds {
            for crd in workloads::custom_resource_definitions() {
                self.apply(&crd)?;
            }
        }
        for workload in &config.workloads {
            self.apply(&workload_manifest(workload))?;
        }
        if config.karpor.is_some_and(|k| k.default_registry) {
            self.apply(&karpor_api::only_metadata_rule())?;
            self.apply(&karpor_api::default_sync_registry())?;
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

    /// `http://127.0.0.1:PORT` (`https://` with TLS), what `kubectl
    /// --server` takes.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.shared.addr)
    }

    /// The CA (PEM) a client trusts to reach this cluster over TLS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|t| t.ca_pem.as_str())
    }

    /// A kube-rs client configuration for this cluster (with its token and
    /// CA, if any).
    pub fn kube_config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.url().parse().expect("a valid URL"));
        config.default_namespace = "default".into();
        if let Some(token) = &self.shared.token {
            config.auth_info.token = Some(token.clone().into());
        }
        if let Some(tls) = &self.tls {
            config.root_cert = Some(vec![tls.ca_der.clone()]);
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
        let mut cluster = json!({"server": self.url()});
        if let Some(pem) = self.ca_pem() {
            use base64::Engine as _;
            cluster["certificate-authority-data"] =
                base64::engine::general_purpose::STANDARD.encode(pem).into();
        }
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": cluster}],
            "users": [{"name": context, "user": user}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
        });
        serde_yaml_ng::to_string(&config).expect("JSON values always serialize")
    }

    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.kube_config())
            .expect("a client of a simulated cluster always builds")
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
