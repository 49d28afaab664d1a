//! `POST /api/v1/session` and `DELETE /api/v1/session`: a cookie session
//! for the browser's native `EventSource`, issued from a bearer token
//! (`crate::auth::cookie`). The request guard already refuses state
//! changes from other origins (except loopback and `--allow-origin`); this
//! endpoint asks more: a bearer token in the header (which no cross-site
//! form or image can send) and, when the browser says where the request
//! comes from, this very origin (`Origin`, `Sec-Fetch-Site: same-origin`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use chrono::Utc;
use serde_json::json;

use crate::auth::{Auth, AuthError, cookie};

/// The session routes.
pub(crate) fn router(auth: Arc<Auth>) -> Router {
    Router::new()
        .route(PATH, post(issue).delete(end))
        .with_state(auth)
}

const PATH: &str = "/api/v1/session";

/// Whether the browser says the request comes from this origin (or says nothing).
fn same_origin(headers: &HeaderMap) -> bool {
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v == "same-origin" || v == "none");
    let origin = match (headers.get(header::ORIGIN), headers.get(header::HOST)) {
        (None, _) => true,
        (Some(origin), Some(host)) => origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .is_some_and(|(_, authority)| {
                host.to_str()
                    .is_ok_and(|h| h.eq_ignore_ascii_case(authority))
            }),
        (Some(_), None) => false,
    };
    site && origin
}

fn forbidden() -> Response {
    crate::protocol::error_response(
        StatusCode::FORBIDDEN,
        "forbidden_origin",
        "a cookie session is issued to a request from this gateway's own origin only",
    )
}

/// `POST /api/v1/session` with `Authorization: Bearer`: sets the cookie
/// and answers `{subject, expires}` (when the session ends).
async fn issue(State(auth): State<Arc<Auth>>, request: Request) -> Response {
    if !same_origin(request.headers()) {
        return forbidden();
    }
    // The header only: a cookie cannot make another cookie.
    let Some(token) = crate::auth::bearer(request.headers()) else {
        return AuthError::Missing.into_response();
    };
    let ip = crate::auth::peer_ip(request.extensions());
    let principal = match auth.authenticate_from(ip, Some(&token)).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if !auth.required() {
        // Nothing to carry: every request is let in.
        return axum::Json(json!({"subject": principal.subject})).into_response();
    }
    let ttl = principal
        .expires
        .map(|at| (at - Utc::now()).to_std().unwrap_or(Duration::ZERO))
        .unwrap_or(cookie::MAX_AGE)
        .min(cookie::MAX_AGE);
    let id = auth.sessions.issue(&token, ttl, Instant::now());
    let ends = Utc::now() + ttl;
    let mut response = axum::Json(json!({
        "subject": principal.subject,
        "expires": ends.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }))
    .into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie::set_cookie(&id, ttl)) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `DELETE /api/v1/session`: ends the cookie's session and removes the cookie.
async fn end(State(auth): State<Arc<Auth>>, headers: HeaderMap) -> Response {
    if !same_origin(&headers) {
        return forbidden();
    }
    if let Some(id) = cookie::cookie_id(&headers) {
        auth.sessions.end(&id);
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie::clear_cookie()) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_origin_may_ask() {
        let mut h = HeaderMap::new();
        assert!(same_origin(&h), "not a browser: the bearer token decides");
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:9999"),
        );
        assert!(!same_origin(&h), "another loopback origin");
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        h.insert("sec-fetch-site", HeaderValue::from_static("same-site"));
        assert!(!same_origin(&h));
    }
}
