//! The routes of one simulated cluster: discovery, the resource API
//! (`api/`) behind the guard (`guard.rs`), and the control API under
//! `/_sim` (`control.rs`). Served by `server.rs`, built by the cluster.

use std::sync::Arc;

use axum::Router;
use axum::middleware;
use axum::routing::get;

use super::shared::Shared;
use super::{api, control, discovery, guard};

/// Every route of the cluster, its handlers sharing `shared`.
pub(crate) fn api_router(shared: Arc<Shared>) -> Router {
    Router::new()
        // The apiserver serves discovery with and without a trailing slash.
        .route("/version", get(discovery::version))
        .route("/version/", get(discovery::version))
        .route("/livez", get(discovery::livez))
        .route("/readyz", get(discovery::readyz))
        .route("/healthz", get(discovery::healthz))
        .route("/api", get(discovery::core_versions))
        .route("/api/", get(discovery::core_versions))
        .route("/apis", get(discovery::groups))
        .route("/apis/", get(discovery::groups))
        .route("/openapi/v2", get(discovery::openapi_v2))
        .route("/openapi/v3", get(discovery::openapi_v3))
        .route("/openapi/v3/{*rest}", get(discovery::openapi_v3_group))
        .fallback(api::handle)
        .layer(middleware::from_fn_with_state(shared.clone(), guard::guard))
        .with_state(shared.clone())
        .nest("/_sim", control::router(shared))
}
