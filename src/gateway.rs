//! The gateway's HTTP surface (`transports` and `health` will hang here):
//! `fn app(state) -> Router`, so tests can call it without a socket, and
//! `serve` to run it on a listener until shutdown.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{Method, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// A member cluster as the gateway knows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ClusterInfo {
    pub name: String,
    pub server: String,
}

/// State shared by every request.
#[derive(Debug, Default)]
pub struct GatewayState {
    pub clusters: Vec<ClusterInfo>,
}

/// The gateway's routes.
pub fn app(state: Arc<GatewayState>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/api/v1/clusters", get(clusters))
        .fallback(not_found)
        .with_state(state)
}

async fn livez() -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "OK").into_response()
}

async fn clusters(State(state): State<Arc<GatewayState>>) -> Response {
    axum::Json(serde_json::json!({"clusters": state.clusters})).into_response()
}

async fn not_found(method: Method, uri: Uri) -> Response {
    Error::NotFound(format!("no route for {method} {}", uri.path())).into_response()
}

/// Serves `app` until `shutdown` is cancelled, then waits for open requests.
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) -> Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(Error::Serve)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    #[tokio::test]
    async fn livez_and_unknown_paths() {
        let state = Arc::new(GatewayState {
            clusters: vec![ClusterInfo {
                name: "a".into(),
                server: "http://x".into(),
            }],
        });
        let response = app(state.clone())
            .oneshot(Request::get("/livez").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(&body[..], b"OK");

        let response = app(state.clone())
            .oneshot(Request::get("/nope").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["code"], "not_found");
        assert_eq!(json["message"], "not found: no route for GET /nope");

        let response = app(state)
            .oneshot(
                Request::get("/api/v1/clusters")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["clusters"][0]["name"], "a");
    }
}
