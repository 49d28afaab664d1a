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
use crate::gateway::{self, GatewayState};
use crate::pipeline::{Pipeline, PipelineConfig};
use crate::sources::{SourceConfig, SyncRegistry, SyncResource};
use crate::tasks::{TaskSettings, Tasks};
use kube_pulse_sim::scenario;
use kube_pulse_sim::{ConvergeConfig, SimCluster, SimConfig};

/// Options of the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// How many simulated member clusters to start.
    pub clusters: usize,
    /// Whether the scenario plays.
    pub scenario: bool,
    pub converge: ConvergeConfig,
    pub transports: crate::transports::TransportConfig,
    pub tasks: TaskSettings,
    /// `/` or a prefix such as `/pulse`.
    pub base_path: String,
    pub auth: crate::auth::AuthSettings,
    pub tls: Option<gateway::TlsSettings>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            clusters: 3,
            scenario: true,
            converge: ConvergeConfig::default(),
            transports: Default::default(),
            tasks: Default::default(),
            base_path: "/".into(),
            auth: Default::default(),
            tls: None,
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
#[derive(Debug, Clone)]
struct ClusterLink {
    name: String,
    server: String,
}

/// The demo's routes: the gateway (with the web UI) plus each simulated
/// cluster's control API and their list.
pub fn app(
    clusters: &[SimCluster],
    pipeline: &Arc<Pipeline>,
    tasks: &Arc<Tasks>,
    auth: Arc<crate::auth::Auth>,
    transports: crate::transports::TransportConfig,
    shutdown: &CancellationToken,
) -> Router {
    let health = gateway::health_for(
        pipeline,
        Some(tasks.clone()),
        Default::default(),
        Vec::new(),
    );
    let links: Vec<ClusterLink> = clusters
        .iter()
        .map(|c| ClusterLink {
            name: c.name().into(),
            server: c.url(),
        })
        .collect();
    let mut router = Router::new()
        .route("/_sim/clusters", get(sim_clusters))
        .with_state(Arc::new(links))
        .merge(gateway::app(GatewayState::for_pipeline(
            pipeline,
            tasks.clone(),
            auth,
            transports,
            health,
            shutdown.clone(),
        )));
    for cluster in clusters {
        router = router.nest(
            &format!("/_sim/clusters/{}", cluster.name()),
            cluster.control_router(),
        );
    }
    router
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
    let items: Vec<serde_json::Value> = clusters
        .iter()
        .map(|c| serde_json::json!({"name": c.name, "server": c.server}))
        .collect();
    axum::Json(serde_json::json!({ "items": items })).into_response()
}

/// Runs the demo on `listener` until `shutdown`, then stops every cluster.
pub async fn run(
    listener: TcpListener,
    options: DemoOptions,
    shutdown: CancellationToken,
) -> Result<()> {
    let clusters = start_clusters(&options, &shutdown).await?;
    let members = clusters.iter().map(member).collect();
    let pipeline = Pipeline::start(members, pipeline_config(), &shutdown).await?;
    let tasks = Tasks::for_pipeline(&pipeline, options.tasks.clone(), &shutdown);
    let auth = match options.auth.build(pipeline.hub().clone()).await {
        Ok(a) => a,
        Err(message) => {
            pipeline.stop().await;
            return Err(Error::BadRequest(format!("authentication: {message}")));
        }
    };
    let router = app(
        &clusters,
        &pipeline,
        &tasks,
        auth,
        options.transports.clone(),
        &shutdown,
    );
    let clusters = Arc::new(clusters);
    let scenario_task = options.scenario.then(|| {
        let clusters = clusters.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move { scenario::run(&clusters, shutdown).await })
    });
    let router = crate::web::mount(router, &options.base_path);
    let served = match options.tls.clone() {
        Some(tls) => gateway::serve_tls(listener, router, tls, shutdown.clone()).await,
        None => gateway::serve(listener, router, shutdown.clone()).await,
    };
    shutdown.cancel();
    if let Some(task) = scenario_task {
        let _ = task.await;
    }
    tasks.stop().await;
    pipeline.stop().await;
    if let Ok(clusters) = Arc::try_unwrap(clusters) {
        for cluster in clusters {
            cluster.shutdown().await;
        }
    }
    served
}
