//! `kube-pulse serve`: the gateway for real member clusters, from a
//! kubeconfig or a config file.

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::ClusterSpec;
use crate::error::Result;
use crate::gateway::{self, GatewayState};
use crate::pipeline::{Member, Pipeline, PipelineConfig};
use crate::tasks::{TaskSettings, Tasks};

/// How `serve` runs, besides its members.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub pipeline: PipelineConfig,
    pub transports: crate::transports::TransportConfig,
    pub health: crate::config::HealthSettings,
    pub tasks: TaskSettings,
    /// `/` or a prefix such as `/pulse` (see [`crate::web::mount`]).
    pub base_path: String,
    pub auth: crate::auth::AuthSettings,
    /// HTTPS when set.
    pub tls: Option<gateway::TlsSettings>,
}

/// Resolves every member's client configuration, starts the pipeline, then
/// serves until shutdown.
pub async fn run(
    listener: TcpListener,
    clusters: Vec<ClusterSpec>,
    settings: Settings,
    shutdown: CancellationToken,
) -> Result<()> {
    let Settings {
        pipeline: config,
        transports,
        health,
        tasks,
        base_path,
        auth,
        tls,
    } = settings;
    let mut members = Vec::new();
    for spec in &clusters {
        let kube_config = spec.kube_config().await?;
        tracing::info!(cluster = %spec.name, server = %kube_config.cluster_url, "member cluster registered");
        members.push(Member {
            name: spec.name.clone(),
            config: kube_config,
        });
    }
    let pipeline = Pipeline::start(members, config, &shutdown).await?;
    let tasks = Tasks::for_pipeline(&pipeline, tasks, &shutdown);
    let checks = gateway::health_for(
        &pipeline,
        Some(tasks.clone()),
        health.format,
        health.storage,
    );
    let auth = match auth.build(pipeline.hub().clone()).await {
        Ok(a) => a,
        Err(message) => {
            pipeline.stop().await;
            return Err(crate::Error::BadRequest(format!(
                "authentication: {message}"
            )));
        }
    };
    tracing::info!(
        mode = auth.mode_name(),
        tls = tls.is_some(),
        "gateway security"
    );
    let app = gateway::app(GatewayState::for_pipeline(
        &pipeline,
        tasks.clone(),
        auth,
        transports,
        checks,
        shutdown.clone(),
    ));
    let app = crate::web::mount(app, &base_path);
    let served = match tls {
        Some(tls) => gateway::serve_tls(listener, app, tls, shutdown.clone()).await,
        None => gateway::serve(listener, app, shutdown.clone()).await,
    };
    tasks.stop().await;
    pipeline.stop().await;
    served
}
