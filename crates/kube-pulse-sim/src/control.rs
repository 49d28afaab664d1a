//! The control API of a simulated cluster (`/_sim/...`): fault injection,
//! RBAC deny rules, failing images and request statistics, for scripts and
//! for tests in other languages. Exempt from every fault it injects, except
//! `refuse` when it shares the cluster's port. With a token configured
//! (`sim --token`), it needs that token like the Kubernetes API does.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use super::faults::Faults;
use super::shared::Shared;

/// A control-API failure: 400 with a JSON body naming the problem.
fn bad_request(message: impl Into<String>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"code": "bad_request", "message": message.into()})),
    )
        .into_response()
}

/// Parses a JSON body whatever its `Content-Type`, so `curl -d '{…}'` works.
fn body<T: serde::de::DeserializeOwned>(payload: Bytes) -> Result<T, Box<Response>> {
    serde_json::from_slice(&payload)
        .map_err(|e| Box::new(bad_request(format!("invalid JSON body: {e}"))))
}

/// With a cluster token, every control request must present it (401
/// otherwise): whoever may change faults and RBAC rules holds the token.
async fn require_token(
    State(shared): State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(token) = &shared.token {
        let presented = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if presented != Some(token.as_str()) {
            return (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({
                    "code": "unauthorized",
                    "message": "the control API needs the cluster's token: Authorization: Bearer TOKEN",
                })),
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// The control routes; mount under `/_sim` (or `/_sim/clusters/{name}`).
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(info))
        .route("/faults", get(get_faults).put(put_faults).delete(heal))
        .route("/actions/expire-watches", post(expire_watches))
        .route("/actions/close-watches", post(close_watches))
        .route("/deny", get(get_deny).put(put_deny))
        .route("/failing-images", get(get_failing).put(put_failing))
        .route("/image-faults", get(get_image_faults).put(put_image_faults))
        .route("/capacity", get(get_capacity).put(put_capacity))
        .route("/reviews", get(get_reviews).put(put_reviews))
        .route("/stats", get(stats).delete(reset_stats))
        .route_layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            require_token,
        ))
        .with_state(shared)
}

async fn info(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(json!({
        "name": shared.name,
        "server": format!("http://{}", shared.addr),
        "resourceVersion": shared.store.resource_version().to_string(),
        "faults": *shared.faults.borrow(),
    }))
    .into_response()
}

async fn get_faults(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(shared.faults.borrow().clone()).into_response()
}

/// `PUT /faults`: the faults to apply (a [`Faults`] document); an extra
/// `healAfterMs` clears them again after that many milliseconds.
async fn put_faults(State(shared): State<Arc<Shared>>, payload: Bytes) -> Response {
    let value: serde_json::Value = match body(payload) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let heal_after = value.get("healAfterMs").cloned();
    let mut faults_value = value.clone();
    if let Some(obj) = faults_value.as_object_mut() {
        obj.remove("healAfterMs");
    }
    let heal_after_ms = match heal_after {
        None => None,
        Some(v) => match v.as_u64() {
            Some(ms) => Some(ms),
            None => return bad_request("healAfterMs must be a non-negative integer"),
        },
    };
    let faults = match serde_json::from_value::<Faults>(faults_value) {
        Ok(faults) => faults,
        Err(e) => return bad_request(format!("invalid faults: {e}")),
    };
    if let Err(e) = faults.validate() {
        return bad_request(e);
    }
    shared.set_faults(faults.clone());
    if let Some(ms) = heal_after_ms {
        shared.heal_later(Duration::from_millis(ms), faults.clone());
    }
    axum::Json(faults).into_response()
}

async fn heal(State(shared): State<Arc<Shared>>) -> Response {
    shared.set_faults(Faults::default());
    axum::Json(Faults::default()).into_response()
}

async fn expire_watches(State(shared): State<Arc<Shared>>) -> Response {
    shared.store.expire_all();
    axum::Json(json!({"expiredBefore": shared.store.resource_version().to_string()}))
        .into_response()
}

async fn close_watches(State(shared): State<Arc<Shared>>) -> Response {
    shared.close_watches.send_modify(|n| *n += 1);
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DenyRequest {
    /// `"apps/deployments"`, `"core/namespaces"`; optionally `":verb"` suffixed.
    rules: Vec<String>,
}

async fn get_deny(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(json!({"rules": *shared.deny.read()})).into_response()
}

async fn put_deny(State(shared): State<Arc<Shared>>, payload: Bytes) -> Response {
    let request = match body::<DenyRequest>(payload) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if let Some(bad) = request.rules.iter().find(|r| !r.contains('/')) {
        return bad_request(format!(
            "rule {bad:?} must look like GROUP/RESOURCE[:VERB], e.g. apps/deployments or core/namespaces:watch"
        ));
    }
    let rules: BTreeSet<String> = request.rules.into_iter().collect();
    *shared.deny.write() = rules.clone();
    axum::Json(json!({"rules": rules})).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImagesRequest {
    images: Vec<String>,
}

async fn get_failing(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(json!({"images": *shared.failing_images.read()})).into_response()
}

async fn put_failing(State(shared): State<Arc<Shared>>, payload: Bytes) -> Response {
    let request = match body::<ImagesRequest>(payload) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let images: BTreeSet<String> = request.images.into_iter().collect();
    *shared.failing_images.write() = images.clone();
    axum::Json(json!({"images": images})).into_response()
}

/// `{"faults": {"IMAGE": "pullError" | "crash" | "oomKilled" | "notReady"}}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageFaultsRequest {
    faults: std::collections::BTreeMap<String, crate::pods::ImageFault>,
}

async fn get_image_faults(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(json!({"faults": *shared.image_faults.read()})).into_response()
}

async fn put_image_faults(State(shared): State<Arc<Shared>>, payload: Bytes) -> Response {
    let request = match body::<ImageFaultsRequest>(payload) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    *shared.image_faults.write() = request.faults.clone();
    axum::Json(json!({"faults": request.faults})).into_response()
}

/// `{"pods": N}` (or `null`: unlimited).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CapacityRequest {
    pods: Option<u32>,
}

async fn get_capacity(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(json!({"pods": *shared.pod_capacity.read()})).into_response()
}

async fn put_capacity(State(shared): State<Arc<Shared>>, payload: Bytes) -> Response {
    let request = match body::<CapacityRequest>(payload) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    *shared.pod_capacity.write() = request.pods;
    axum::Json(json!({"pods": request.pods})).into_response()
}

async fn get_reviews(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(shared.reviews.read().clone()).into_response()
}

/// `PUT /_sim/reviews`: the TokenReview / SubjectAccessReview policy.
async fn put_reviews(State(shared): State<Arc<Shared>>, payload: Bytes) -> Response {
    let policy = match body::<super::reviews::ReviewPolicy>(payload) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    *shared.reviews.write() = policy.clone();
    axum::Json(policy).into_response()
}

async fn stats(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(shared.stats.snapshot(shared.store.resource_version())).into_response()
}

async fn reset_stats(State(shared): State<Arc<Shared>>) -> Response {
    shared.stats.reset();
    StatusCode::NO_CONTENT.into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn fault_request_shape() {
        let v: serde_json::Value = serde_json::json!({"refuse": true, "healAfterMs": 10});
        let mut f = v.clone();
        f.as_object_mut().unwrap().remove("healAfterMs");
        assert!(serde_json::from_value::<super::Faults>(f).unwrap().refuse);
    }
}
