//! The gateway's routes: REST snapshots, the push transports, tasks, the
//! health endpoints, metrics and the UI over one [`GatewayState`].
//! `fn app(state) -> Router`, so tests can call it without a socket;
//! [`crate::http::server`] runs it on a listener.

use std::sync::Arc;

use axum::Router;
use axum::http::{Method, Uri, header};
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;

use crate::auth::Auth;
use crate::error::Error;
use crate::health::Health;
use crate::hub::Hub;
use crate::metrics::{HttpLabels, Metrics};
use crate::pipeline::Pipeline;
use crate::tasks::Tasks;
use crate::transports::{TransportConfig, Transports};

/// State shared by every request.
pub struct GatewayState {
    pub(crate) hub: Arc<Hub>,
    /// The SSE and WebSocket endpoints, with their limits and counters.
    pub transports: Arc<Transports>,
    pub(crate) health: Arc<Health>,
    pub(crate) metrics: Arc<Metrics>,
    /// The tasks API, when the gateway runs over member clusters.
    pub tasks: Option<Arc<Tasks>>,
    pub(crate) auth: Arc<Auth>,
}

// By hand: holds the hub, open sessions and credentials' verifiers.
impl std::fmt::Debug for GatewayState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayState")
            .field("health", &self.health)
            .field("tasks", &self.tasks.is_some())
            .finish_non_exhaustive()
    }
}

impl GatewayState {
    /// State over `hub` with metrics of its own; push sessions end when
    /// `shutdown` is cancelled.
    pub fn new(
        hub: Arc<Hub>,
        transports: TransportConfig,
        health: Health,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Self::with_auth(hub, Auth::none(), transports, health, shutdown)
    }

    /// State over `hub` whose requests `auth` authenticates.
    pub fn with_auth(
        hub: Arc<Hub>,
        auth: Arc<Auth>,
        transports: TransportConfig,
        health: Health,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let parts = Parts {
            hub,
            metrics: Metrics::new(),
            tasks: None,
            auth,
        };
        Self::build(parts, transports, health, shutdown)
    }

    /// State over a running pipeline (its hub and metrics) with its tasks.
    pub fn for_pipeline(
        pipeline: &Pipeline,
        tasks: Arc<Tasks>,
        auth: Arc<Auth>,
        transports: TransportConfig,
        health: Health,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let parts = Parts {
            hub: pipeline.hub().clone(),
            metrics: pipeline.metrics().clone(),
            tasks: Some(tasks),
            auth,
        };
        Self::build(parts, transports, health, shutdown)
    }

    fn build(
        parts: Parts,
        transports: TransportConfig,
        health: Health,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let Parts {
            hub,
            metrics,
            tasks,
            auth,
        } = parts;
        let transports = Transports::new(
            hub.clone(),
            auth.clone(),
            transports,
            metrics.clone(),
            shutdown,
        );
        Arc::new(Self {
            hub,
            transports,
            health: Arc::new(health),
            metrics,
            tasks,
            auth,
        })
    }
}

/// What a gateway serves, besides its transports and health.
struct Parts {
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    tasks: Option<Arc<Tasks>>,
    auth: Arc<Auth>,
}

/// The gateway's routes. Origins listed in the transport configuration may
/// also use the REST, tasks and SSE endpoints cross-origin (CORS). Health
/// and the UI's static files are public; data and actions need a principal
/// (`auth::require`; the WebSocket authenticates its own handshake). The
/// request guard (`crate::http::guard`: Host, Origin, framing) is in front of all.
pub fn app(state: Arc<GatewayState>) -> Router {
    with_extra(state, Router::new())
}

/// [`app`] with `extra` routes beside the gateway's (the demo's simulator
/// control API), behind the same guard, metrics and CORS.
pub fn with_extra(state: Arc<GatewayState>, extra: Router) -> Router {
    let protected = Router::new()
        .route(
            "/metrics",
            axum::routing::get(metrics).with_state(state.clone()),
        )
        .merge(crate::http::rest::router(state.hub.clone()))
        .merge(crate::http::health::details(state.health.clone()))
        .merge(match &state.tasks {
            Some(tasks) => crate::http::tasks::router(tasks.clone(), state.auth.clone()),
            None => Router::new(),
        })
        .route_layer(axum::middleware::from_fn_with_state(
            state.auth.clone(),
            crate::auth::require,
        ));
    let guard = Arc::new(crate::http::guard::GuardConfig {
        allowed_hosts: state.transports.config.allowed_hosts.clone(),
        allowed_origins: state.transports.config.allowed_origins.clone(),
    });
    let router = extra
        .merge(protected)
        .merge(crate::http::session::router(state.auth.clone()))
        .merge(crate::http::health::router(state.health.clone()))
        .merge(crate::http::web::router())
        .merge(crate::transports::router(state.transports.clone()))
        .fallback(not_found)
        .layer(axum::middleware::from_fn(
            crate::http::json_errors::json_errors,
        ))
        .layer(axum::middleware::from_fn_with_state(
            guard,
            crate::http::guard::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.metrics.clone(),
            count_requests,
        ));
    match cors(&state.transports.config.allowed_origins) {
        Some(layer) => router.layer(layer),
        None => router,
    }
}

fn cors(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| o.parse().ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::PATCH])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                "last-event-id".parse().expect("valid header name"),
            ]),
    )
}

/// `GET /metrics`: Prometheus text format. Its labels name every cluster,
/// so with authentication on it needs the `*` read grant (or, in
/// `kubernetes` mode, `get` on the non-resource URL `/metrics`).
async fn metrics(
    axum::extract::State(state): axum::extract::State<Arc<GatewayState>>,
    axum::Extension(principal): axum::Extension<crate::auth::Principal>,
) -> Response {
    if let Err(refused) = state.auth.can_read_metrics(&principal).await {
        return refused.into_response();
    }
    let body = state.metrics.render(&state.hub);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// Counts HTTP requests by route template (not raw path) and status, and
/// logs each at debug level with its client (behind a trusted proxy, the
/// forwarded address) and TCP peer.
async fn count_requests(
    axum::extract::State(metrics): axum::extract::State<Arc<Metrics>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let client = request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0);
    let peer = request
        .extensions()
        .get::<crate::http::client_ip::PeerAddr>()
        .map(|p| p.0);
    let response = next.run(request).await;
    tracing::debug!(%method, %route, status = response.status().as_u16(), ?client, ?peer, "request");
    let labels = HttpLabels {
        method,
        route,
        status: response.status().as_u16(),
    };
    metrics.http_requests.get_or_create(&labels).inc();
    response
}

async fn not_found(method: Method, uri: Uri) -> Response {
    Error::NotFound(format!("no route for {method} {}", uri.path())).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use serde_json::{Value, json};
    use tower::ServiceExt;

    fn ping_only() -> Health {
        Health {
            livez: vec![Arc::new(crate::health::checks::Ping)],
            readyz: vec![Arc::new(crate::health::checks::Ping)],
            format: Default::default(),
            timeout: std::time::Duration::from_secs(1),
        }
    }

    async fn call(app: &Router, path: &str) -> (StatusCode, Value) {
        let (status, _, body) = crate::testing::get(app, path).await;
        let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
        (status, value)
    }

    #[tokio::test]
    async fn configured_origins_get_cors_headers() {
        let config = TransportConfig {
            allowed_origins: vec!["https://karpor.example.com".into()],
            ..Default::default()
        };
        let app = app(GatewayState::new(
            Hub::new(Default::default()),
            config,
            ping_only(),
            CancellationToken::new(),
        ));
        let request = |origin: &str| {
            Request::get("/api/v1/clusters")
                .header("origin", origin)
                .body(Body::empty())
                .unwrap()
        };
        let allowed = app
            .clone()
            .oneshot(request("https://karpor.example.com"))
            .await
            .unwrap();
        assert_eq!(
            allowed.headers()["access-control-allow-origin"],
            "https://karpor.example.com"
        );
        let other = app.oneshot(request("https://evil.example")).await.unwrap();
        assert!(other.headers().get("access-control-allow-origin").is_none());
    }

    #[tokio::test]
    async fn rest_reads_the_hub_and_names_bad_input() {
        let hub = Hub::new(Default::default());
        hub.put(
            "clusters/a",
            json!({"name": "a", "phase": "Healthy", "history": {
                "10": {"to": "Healthy"}, "9": {"to": "Initializing"}}}),
        );
        hub.put(
            "clusters/a/sync/apps/v1/deployments",
            json!({"phase": "Syncing"}),
        );
        hub.put("apps/a/shop/web", json!({"app": "web", "phase": "Running"}));
        hub.put("apps/a/other/db", json!({"app": "db", "phase": "Stopped"}));
        let app = app(GatewayState::new(
            hub,
            Default::default(),
            ping_only(),
            CancellationToken::new(),
        ));
        type Check = Box<dyn Fn(&Value) -> bool>;
        let cases: Vec<(&str, StatusCode, Check)> = vec![
            ("/livez", StatusCode::OK, Box::new(|v| v == "OK")),
            (
                "/api/v1/clusters",
                StatusCode::OK,
                Box::new(|v| v["items"][0]["name"] == "a"),
            ),
            (
                "/api/v1/clusters/a",
                StatusCode::OK,
                Box::new(|v| v["phase"] == "Healthy"),
            ),
            (
                "/api/v1/clusters/nope",
                StatusCode::NOT_FOUND,
                Box::new(|v| v["code"] == "not_found"),
            ),
            (
                "/api/v1/clusters/a/sync",
                StatusCode::OK,
                Box::new(|v| v["items"].as_array().unwrap().len() == 1),
            ),
            (
                "/api/v1/clusters/nope/sync",
                StatusCode::NOT_FOUND,
                Box::new(|v| v["code"] == "not_found"),
            ),
            (
                "/api/v1/apps",
                StatusCode::OK,
                Box::new(|v| v["items"].as_array().unwrap().len() == 2),
            ),
            (
                "/api/v1/apps?cluster=a&namespace=shop",
                StatusCode::OK,
                Box::new(|v| v["items"].as_array().unwrap().len() == 1),
            ),
            (
                "/api/v1/apps?cluster=zz",
                StatusCode::NOT_FOUND,
                Box::new(|v| v["message"].as_str().unwrap().contains("zz")),
            ),
            (
                "/api/v1/apps?colour=red",
                StatusCode::BAD_REQUEST,
                Box::new(|v| v["message"].as_str().unwrap().contains("colour")),
            ),
            (
                "/api/v1/apps?namespace=a*",
                StatusCode::BAD_REQUEST,
                Box::new(|v| v["code"] == "bad_request"),
            ),
            (
                "/api/v1/apps/a/shop/web",
                StatusCode::OK,
                Box::new(|v| v["phase"] == "Running"),
            ),
            (
                "/api/v1/apps/a/shop/nope",
                StatusCode::NOT_FOUND,
                Box::new(|v| v["code"] == "not_found"),
            ),
            (
                "/api/v1/history?topic=clusters/a",
                StatusCode::OK,
                Box::new(|v| {
                    v["history"][0]["to"] == "Initializing"
                        && v["history"][1]["to"] == "Healthy"
                        && v["history"][1]["number"] == 10
                        && v["rev"] == 1
                }),
            ),
            (
                "/api/v1/history",
                StatusCode::BAD_REQUEST,
                Box::new(|v| v["code"] == "bad_pattern"),
            ),
            (
                "/api/v1/history?topic=clusters/*",
                StatusCode::BAD_REQUEST,
                Box::new(|v| v["code"] == "bad_pattern"),
            ),
            (
                "/api/v1/history?topic=clusters/zz",
                StatusCode::NOT_FOUND,
                Box::new(|v| v["code"] == "not_found"),
            ),
            (
                "/nope",
                StatusCode::NOT_FOUND,
                Box::new(|v| v["message"] == "not found: no route for GET /nope"),
            ),
        ];
        for (path, status, check) in cases {
            let (got, body) = call(&app, path).await;
            assert_eq!(got, status, "{path}: {body}");
            assert!(check(&body), "{path}: {body}");
        }
    }
}
