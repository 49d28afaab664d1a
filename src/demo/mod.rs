//! `kube-pulse demo`: the embedded default. Simulated member clusters
//! in-process, the scenario that changes them, and the gateway serving
//! them, all on loopback; with `--push-member`, one of them reached through
//! an agent in the same process ([`agent`]).

mod agent;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::gateway::{Gateway, GatewayConfig};
use crate::pipeline::{HeldMember, PipelineConfig};
use crate::sources::{SourceConfig, SyncRegistry, SyncResource};
use kube_pulse_sim::karpor::{self as sim_karpor, KarporOptions, MemberAccess};
use kube_pulse_sim::scenario;
use kube_pulse_sim::{ConvergeConfig, SimCluster, SimConfig};

pub use agent::{DemoAgent, GRACE as AGENT_GRACE, HEARTBEAT as AGENT_HEARTBEAT};

/// Options of the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// How many simulated member clusters to start.
    pub clusters: usize,
    /// Whether the scenario plays.
    pub scenario: bool,
    /// How fast the simulated workload controllers converge.
    pub converge: ConvergeConfig,
    /// The gateway over the simulated clusters; the demo fills in its
    /// members, and its pipeline defaults to [`pipeline_config`].
    pub gateway: GatewayConfig,
    /// `demo --karpor`: a simulated Karpor apiserver holds a Cluster object
    /// per simulated cluster and Karpor's default sync registry; the
    /// gateway takes its members from there and writes status back.
    pub karpor: Option<KarporOptions>,
    /// `demo --leases`: the gateway owns its members through Leases held in
    /// the first simulated cluster (namespace `default`, replica `demo`),
    /// as one of several replicas would (docs/SCALE-OUT.md).
    pub leases: bool,
    /// `demo --leases --nats URL`: the gateway also publishes its members'
    /// changes to the NATS JetStream server at URL and reads the stream, as
    /// one of several replicas would (docs/SCALE-OUT.md).
    pub nats: Option<crate::scale::NatsSettings>,
    /// `demo --leases --nats URL --push-member NAME`: the simulated member
    /// NAME is a push member, watched by an agent in the demo's process
    /// that publishes its status over `nats` with the gateway's login
    /// (docs/AGENT.md, "In the demo").
    pub push_member: Option<String>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            clusters: 3,
            scenario: true,
            converge: ConvergeConfig::default(),
            gateway: GatewayConfig {
                pipeline: pipeline_config(),
                ..GatewayConfig::default()
            },
            karpor: None,
            leases: false,
            nats: None,
            push_member: None,
        }
    }
}

/// Name of the i-th demo cluster.
pub fn cluster_name(i: usize) -> String {
    match i {
        0 => "dev".into(),
        1 => "staging".into(),
        2 => "prod".into(),
        n => format!("cluster-{}", n + 1),
    }
}

/// Starts the simulated clusters of the demo.
pub async fn start_clusters(
    options: &DemoOptions,
    shutdown: &CancellationToken,
) -> Result<Vec<SimCluster>> {
    let mut clusters = Vec::new();
    for i in 0..options.clusters {
        let name = cluster_name(i);
        let mut workloads = scenario::seed_workloads();
        if i == 0 {
            workloads.extend(scenario::custom_workloads());
        }
        let config = SimConfig {
            workloads,
            // Every demo cluster serves the custom workload kinds; dev runs one of each.
            workload_crds: true,
            converge: options.converge,
            ..SimConfig::named(&name)
        };
        let cluster = SimCluster::start_with_shutdown(config, shutdown.clone())
            .await
            .map_err(|source| Error::Simulator {
                cluster: name,
                source,
            })?;
        clusters.push(cluster);
    }
    Ok(clusters)
}

/// A simulated cluster as a pipeline member (its name and client configuration).
pub fn member(cluster: &SimCluster) -> crate::pipeline::Member {
    crate::pipeline::Member {
        name: cluster.name().into(),
        config: cluster.kube_config(),
    }
}

/// A simulated cluster as the index page lists it.
#[derive(Debug, Clone, serde::Serialize)]
struct ClusterLink {
    name: String,
    server: String,
    /// Watched by the demo's agent (`--push-member`), not by the gateway.
    pushed: bool,
}

/// The demo's own routes beside the gateway's: each simulated cluster's
/// control API and their list (`pushed` names the push member, if any).
/// They change member clusters at will, so they need the admin grant
/// (`auth::require_admin`) and JSON bodies.
pub fn sim_routes(
    clusters: &[SimCluster],
    pushed: Option<&str>,
    auth: Arc<crate::auth::Auth>,
) -> Router {
    let links: Vec<ClusterLink> = clusters
        .iter()
        .map(|c| ClusterLink {
            name: c.name().into(),
            server: c.url(),
            pushed: pushed == Some(c.name()),
        })
        .collect();
    let mut router = Router::new()
        .route("/_sim/clusters", get(sim_clusters))
        .with_state(Arc::new(links));
    for cluster in clusters {
        router = router.nest(
            &format!("/_sim/clusters/{}", cluster.name()),
            cluster.control_router(),
        );
    }
    sim_guards(router, auth)
}

/// The guards of every simulator route: the admin grant and JSON bodies.
fn sim_guards(router: Router, auth: Arc<crate::auth::Auth>) -> Router {
    router
        .route_layer(axum::middleware::from_fn(crate::http::guard::require_json))
        .route_layer(axum::middleware::from_fn_with_state(
            auth,
            crate::auth::require_admin,
        ))
}

/// The sync registry of the demo: config maps everywhere, besides the built-ins.
pub fn registries() -> Vec<SyncRegistry> {
    vec![SyncRegistry {
        name: Some("demo".into()),
        clusters: vec!["*".into()],
        resources: vec![SyncResource::all("", "v1", "configmaps")],
    }]
}

/// Pipeline settings of the demo: quick probes so faults show within seconds.
pub fn pipeline_config() -> PipelineConfig {
    PipelineConfig {
        source: SourceConfig {
            probe_interval: std::time::Duration::from_secs(2),
            probe_timeout: std::time::Duration::from_secs(1),
            ..SourceConfig::default()
        },
        registries: registries(),
        ..PipelineConfig::default()
    }
}

/// `GET /_sim/clusters`: the simulated clusters, for the page's simulator panel.
async fn sim_clusters(State(clusters): State<Arc<Vec<ClusterLink>>>) -> Response {
    let items = clusters.iter().cloned().collect();
    axum::Json(crate::protocol::rest::ItemList { items }).into_response()
}

/// Starts the simulated clusters and the gateway over them (errors before
/// anything listens); [`Demo::serve`] then plays the scenario and serves.
pub struct Demo {
    clusters: Vec<SimCluster>,
    gateway: Gateway,
    scenario: bool,
    karpor: Option<KarporDemo>,
    /// The push member's agent (`--push-member`), running.
    agent: Option<Arc<DemoAgent>>,
    shutdown: CancellationToken,
}

/// The simulated Karpor apiserver of `demo --karpor`, and the kubeconfig
/// file the gateway reads it with (removed when the demo ends).
struct KarporDemo {
    apiserver: SimCluster,
    kubeconfig: std::path::PathBuf,
}

impl std::fmt::Debug for Demo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let clusters: Vec<&str> = self.clusters.iter().map(SimCluster::name).collect();
        f.debug_struct("Demo")
            .field("clusters", &clusters)
            .field("gateway", &self.gateway)
            .field("scenario", &self.scenario)
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl Demo {
    /// Starts `options.clusters` simulated clusters and a gateway over them
    /// (with `options.karpor`, a simulated Karpor apiserver between them;
    /// with `options.push_member`, that one through an agent).
    pub async fn start(options: DemoOptions, shutdown: &CancellationToken) -> Result<Self> {
        let clusters = start_clusters(&options, shutdown).await?;
        let mut config = options.gateway;
        config.nats = options.nats.clone();
        let agent = match &options.push_member {
            Some(name) => {
                let karpor = options.karpor.is_some();
                let agent = DemoAgent::for_member(name, &clusters, karpor, &config, shutdown)?;
                if let Some(nats) = &mut config.nats {
                    nats.agent_grace = AGENT_GRACE;
                }
                config.pushed = vec![HeldMember::pushed(name, "", &agent.public_key())];
                Some(Arc::new(agent))
            }
            None => None,
        };
        let pushed = agent.as_ref().map(|a| a.member().to_string());
        let karpor = match options.karpor {
            Some(karpor) => {
                let demo = start_karpor(karpor, &clusters, shutdown).await?;
                config.karpor = Some(crate::karpor::KarporSettings {
                    kubeconfig: demo.kubeconfig.clone(),
                    context: None,
                    allow_exec: false,
                    // The simulated members listen on loopback.
                    endpoints: crate::karpor::EndpointPolicy::allowing_loopback(),
                    status: Some(crate::karpor::WriterSettings {
                        replica: "demo".into(),
                        ..Default::default()
                    }),
                });
                Some(demo)
            }
            None => {
                config.members = clusters
                    .iter()
                    .filter(|c| pushed.as_deref() != Some(c.name()))
                    .map(member)
                    .collect();
                None
            }
        };
        if options.leases {
            let host = clusters.first().ok_or_else(|| {
                Error::Settings("demo --leases needs a simulated cluster to hold them".into())
            })?;
            config.leases = Some(crate::scale::LeaseSettings {
                client: host.kube_config(),
                namespace: "default".into(),
                replica: "demo".into(),
                duration: crate::scale::DEFAULT_DURATION,
            });
        }
        let gateway = Gateway::start(config, shutdown).await?;
        if let Some(agent) = &agent {
            agent.set_running(true).await?;
        }
        Ok(Self {
            clusters,
            gateway,
            scenario: options.scenario,
            karpor,
            agent,
            shutdown: shutdown.clone(),
        })
    }

    /// The simulated Karpor apiserver's URL (`demo --karpor`).
    pub fn karpor_url(&self) -> Option<String> {
        self.karpor.as_ref().map(|k| k.apiserver.url())
    }

    /// The running gateway.
    pub fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// Plays the scenario and serves gateway and simulator control routes on
    /// `listener` until shutdown, then stops gateway and clusters.
    pub async fn serve(self, listener: TcpListener) -> Result<()> {
        let Self {
            clusters,
            gateway,
            scenario,
            karpor,
            agent,
            shutdown,
        } = self;
        let auth = gateway.state().auth.clone();
        let pushed = agent.as_ref().map(|a| a.member());
        let mut routes = sim_routes(&clusters, pushed, auth.clone());
        if let Some(agent) = &agent {
            routes = routes.merge(sim_guards(agent::route(agent.clone()), auth));
        }
        if let Some(karpor) = &karpor {
            routes = routes.merge(karpor_route(
                &karpor.apiserver,
                gateway.state().auth.clone(),
            ));
        }
        let clusters = Arc::new(clusters);
        let scenario_task = scenario.then(|| {
            let clusters = clusters.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move { scenario::run(&clusters, shutdown).await })
        });
        let served = gateway.serve(listener, routes).await;
        shutdown.cancel();
        if let Some(task) = scenario_task {
            let _ = task.await;
        }
        // Before the clusters it watches.
        if let Some(agent) = agent {
            let _ = agent.set_running(false).await;
        }
        if let Ok(clusters) = Arc::try_unwrap(clusters) {
            for cluster in clusters {
                cluster.shutdown().await;
            }
        }
        if let Some(karpor) = karpor {
            let _ = std::fs::remove_file(&karpor.kubeconfig);
            karpor.apiserver.shutdown().await;
        }
        served
    }
}

/// Starts the simulated Karpor apiserver of `demo --karpor` with Karpor's
/// default sync registry and a Cluster object per simulated cluster, and
/// writes a kubeconfig for it where only this user can read it.
async fn start_karpor(
    options: KarporOptions,
    clusters: &[SimCluster],
    shutdown: &CancellationToken,
) -> Result<KarporDemo> {
    let simulator = |source| Error::Simulator {
        cluster: "karpor".into(),
        source,
    };
    let config = SimConfig {
        listen: "127.0.0.1:0".parse().expect("a valid address"),
        ..sim_karpor::config(KarporOptions {
            default_registry: true,
            ..options
        })
    };
    let apiserver = SimCluster::start_with_shutdown(config, shutdown.clone())
        .await
        .map_err(simulator)?;
    for cluster in clusters {
        let manifest = sim_karpor::cluster_manifest(cluster.name(), &MemberAccess::to_sim(cluster));
        apiserver.apply(&manifest).map_err(|e| {
            simulator(std::io::Error::other(format!(
                "creating Cluster {}: {}",
                cluster.name(),
                e.message
            )))
        })?;
    }
    let kubeconfig = std::env::temp_dir().join(format!(
        "kube-pulse-demo-karpor-{}-{}.kubeconfig",
        std::process::id(),
        apiserver.addr().port()
    ));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: karpor\n  cluster: {{server: '{}'}}\nusers:\n- name: demo\n  user: {{}}\ncontexts:\n- name: karpor\n  context: {{cluster: karpor, user: demo}}\ncurrent-context: karpor\n",
        apiserver.url()
    );
    std::fs::write(&kubeconfig, text).map_err(|source| Error::Read {
        path: kubeconfig.clone(),
        source,
    })?;
    Ok(KarporDemo {
        apiserver,
        kubeconfig,
    })
}

/// What Karpor's own objects say, for the page: `GET /_sim/karpor`.
#[derive(Debug, Clone, serde::Serialize)]
struct KarporView {
    server: String,
    clusters: Vec<serde_json::Value>,
}

/// `GET /_sim/karpor`: the simulated Karpor's URL and each Cluster
/// object's name and status, as Karpor's API serves them.
fn karpor_route(apiserver: &SimCluster, auth: Arc<crate::auth::Auth>) -> Router {
    let clusters: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        apiserver.client(),
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(
                sim_karpor::CLUSTER_GROUP,
                sim_karpor::VERSION,
                "Cluster",
            ),
            "clusters",
        ),
    );
    let server = apiserver.url();
    Router::new()
        .route(
            "/_sim/karpor",
            get(move || {
                let (clusters, server) = (clusters.clone(), server.clone());
                async move {
                    match clusters.list(&Default::default()).await {
                        Ok(list) => {
                            let clusters = list
                                .items
                                .into_iter()
                                .map(|c| {
                                    serde_json::json!({
                                        "name": c.metadata.name,
                                        "status": c.data.get("status").cloned().unwrap_or_default(),
                                    })
                                })
                                .collect();
                            axum::Json(KarporView { server, clusters }).into_response()
                        }
                        Err(e) => {
                            crate::error::Error::Unavailable(format!("the simulated Karpor: {e}"))
                                .into_response()
                        }
                    }
                }
            }),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            auth,
            crate::auth::require_admin,
        ))
}
