//! `kube-pulse demo`: the embedded default. Simulated member clusters
//! in-process, the scenario that changes them, and the gateway serving
//! them, all on loopback.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::gateway::{Gateway, GatewayConfig};
use crate::pipeline::PipelineConfig;
use crate::sources::{SourceConfig, SyncRegistry, SyncResource};
use kube_pulse_sim::scenario;
use kube_pulse_sim::{ConvergeConfig, SimCluster, SimConfig};

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
        let config = SimConfig {
            workloads: scenario::seed_workloads(),
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
}

/// The demo's own routes beside the gateway's: each simulated cluster's
/// control API and their list. They change member clusters at will, so
/// they need the admin grant (`auth::require_admin`) and JSON bodies.
pub fn sim_routes(clusters: &[SimCluster], auth: Arc<crate::auth::Auth>) -> Router {
    let links: Vec<ClusterLink> = clusters
        .iter()
        .map(|c| ClusterLink {
            name: c.name().into(),
            server: c.url(),
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
    router
        .route_layer(axum::middleware::from_fn(crate::guard::require_json))
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
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Demo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let clusters: Vec<&str> = self.clusters.iter().map(SimCluster::name).collect();
        f.debug_struct("Demo")
            .field("clusters", &clusters)
            .field("gateway", &self.gateway)
            .field("scenario", &self.scenario)
            .finish_non_exhaustive()
    }
}

impl Demo {
    /// Starts `options.clusters` simulated clusters and a gateway over them.
    pub async fn start(options: DemoOptions, shutdown: &CancellationToken) -> Result<Self> {
        let clusters = start_clusters(&options, shutdown).await?;
        let config = GatewayConfig {
            members: clusters.iter().map(member).collect(),
            ..options.gateway
        };
        let gateway = Gateway::start(config, shutdown).await?;
        Ok(Self {
            clusters,
            gateway,
            scenario: options.scenario,
            shutdown: shutdown.clone(),
        })
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
            shutdown,
        } = self;
        let routes = sim_routes(&clusters, gateway.state().auth.clone());
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
        if let Ok(clusters) = Arc::try_unwrap(clusters) {
            for cluster in clusters {
                cluster.shutdown().await;
            }
        }
        served
    }
}
