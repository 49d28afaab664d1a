//! The guard in front of every API handler of a simulated cluster: the
//! stall, latency, status and clock-skew faults, and bearer-token auth, as a
//! broken network, proxy or apiserver would show them. Used by `router.rs`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::shared::Shared;
use super::status::ApiError;

/// Paths a real apiserver serves to anonymous clients.
fn is_public(path: &str) -> bool {
    matches!(
        path.strip_suffix('/').unwrap_or(path),
        "/livez" | "/readyz" | "/healthz" | "/version"
    )
}

/// Applies auth and the stall / latency / status faults before any API handler.
pub(crate) async fn guard(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let mut faults = shared.faults.subscribe();
    loop {
        if !faults.borrow_and_update().stall {
            break;
        }
        tokio::select! {
            _ = shared.shutdown.cancelled() => return ApiError::new(503, "ServiceUnavailable", "shutting down").into_response(),
            changed = faults.changed() => if changed.is_err() { break },
        }
    }
    let current = faults.borrow().clone();
    if current.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(current.latency_ms)).await;
    }
    let path = request.uri().path().to_string();
    // The status fault stands for a broken apiserver or proxy: everything answers it.
    if let Some(code) = current.status
        && current
            .status_path_prefix
            .as_deref()
            .is_none_or(|prefix| path.starts_with(prefix))
    {
        return injected_error(code).into_response();
    }
    if let Some(token) = &shared.token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.strip_prefix("Bearer ").unwrap_or(""));
        // As on a real apiserver: public paths allow anonymous requests, but a
        // credential that fails authentication is refused everywhere.
        let allowed = match presented {
            None => is_public(&path),
            Some(t) => t == token,
        };
        if !allowed {
            return ApiError::unauthorized().into_response();
        }
    }
    let mut response = next.run(request).await;
    if current.clock_skew_seconds != 0 {
        // The apiserver's clock, off by the skew (hyper keeps a Date header
        // that is already there).
        let at = chrono::Utc::now() + chrono::Duration::seconds(current.clock_skew_seconds);
        if let Ok(value) = at.format("%a, %d %b %Y %H:%M:%S GMT").to_string().parse() {
            response.headers_mut().insert(header::DATE, value);
        }
    }
    response
}

fn injected_error(code: u16) -> ApiError {
    let (reason, message) = match code {
        401 => ("Unauthorized", "Unauthorized"),
        403 => ("Forbidden", "forbidden: injected by the simulator"),
        404 => (
            "NotFound",
            "the server could not find the requested resource",
        ),
        409 => ("Conflict", "conflict injected by the simulator"),
        410 => ("Expired", "too old resource version"),
        429 => (
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        ),
        502 | 503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted",
        ),
        _ => (
            "InternalError",
            "an error on the server (\"injected\") has prevented the request from succeeding",
        ),
    };
    let mut err = ApiError::new(code, reason, message);
    if matches!(code, 429 | 503) {
        err.retry_after = Some(1);
    }
    err
}
