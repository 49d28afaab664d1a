//! `kube-pulse serve`: the gateway for real member clusters, from a
//! kubeconfig or a config file.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::ClusterSpec;
use crate::error::Result;
use crate::gateway::{self, ClusterInfo, GatewayState};

/// Resolves every member's client configuration, then serves until shutdown.
pub async fn run(
    listener: TcpListener,
    clusters: Vec<ClusterSpec>,
    shutdown: CancellationToken,
) -> Result<()> {
    let mut infos = Vec::new();
    for spec in &clusters {
        let config = spec.kube_config().await?;
        tracing::info!(cluster = %spec.name, server = %config.cluster_url, "member cluster registered");
        infos.push(ClusterInfo {
            name: spec.name.clone(),
            server: config.cluster_url.to_string(),
        });
    }
    let app = gateway::app(Arc::new(GatewayState { clusters: infos }));
    gateway::serve(listener, app, shutdown).await
}
