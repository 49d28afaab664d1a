//! Errors the framework answers by itself, as the gateway's own
//! (`router ──▶ [json_errors] ──▶ client`): a method a route does not take
//! (405, with its `Allow`), a body over the limit (413) and the other
//! refusals of axum's extractors come with an empty or plain-text body;
//! this gives them the `{"code", "message"}` body every HTTP error of the
//! gateway has (docs/PROTOCOL.md). The health endpoints keep their text
//! (the apiserver's format, docs/HEALTH.md).

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::protocol::error_response;

/// The longest framework message carried over into the JSON body.
const MAX_MESSAGE: usize = 1024;

/// Paths whose errors are text on purpose.
const TEXT_PATHS: [&str; 3] = ["/livez", "/readyz", "/healthz"];

/// Gives a client error without a JSON body one.
pub(super) async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    let status = response.status();
    if !status.is_client_error()
        || TEXT_PATHS
            .iter()
            .any(|p| path == *p || path.starts_with(&format!("{p}/")))
    {
        return response;
    }
    let plain = match response.headers().get(header::CONTENT_TYPE) {
        None => true,
        Some(ct) => ct.as_bytes().starts_with(b"text/plain"),
    };
    if !plain {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_MESSAGE)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let allow = parts.headers.get(header::ALLOW).cloned();
    let message = if text.is_empty() {
        default_message(status, &method, &path, allow.as_ref())
    } else {
        text
    };
    let mut out = error_response(status, code(status), &message);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name, value.clone());
        }
    }
    out
}

/// The `code` of a framework refusal.
fn code(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::NOT_ACCEPTABLE => "not_acceptable",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::LENGTH_REQUIRED => "length_required",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::TOO_MANY_REQUESTS => "rate_limited",
        _ => "bad_request",
    }
}

fn default_message(
    status: StatusCode,
    method: &axum::http::Method,
    path: &str,
    allow: Option<&HeaderValue>,
) -> String {
    match (status, allow.and_then(|a| a.to_str().ok())) {
        (StatusCode::METHOD_NOT_ALLOWED, Some(allow)) => {
            format!("{path} does not take {method}; it takes {allow}")
        }
        (StatusCode::METHOD_NOT_ALLOWED, None) => format!("{path} does not take {method}"),
        _ => format!(
            "{} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("client error")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::{get, post};
    use serde_json::Value;
    use tower::ServiceExt;

    fn app() -> Router {
        Router::new()
            .route("/api/v1/ws", get(|| async { "ok" }))
            .route(
                "/api/v1/tasks",
                post(|_: axum::body::Bytes| async { "taken" }),
            )
            .route(
                "/livez/{check}",
                get(|| async { (StatusCode::NOT_FOUND, "no health check named \"x\"\n") }),
            )
            .layer(axum::extract::DefaultBodyLimit::max(16))
            .layer(axum::middleware::from_fn(json_errors))
    }

    async fn call(
        method: &str,
        path: &str,
        body: Body,
    ) -> (StatusCode, Option<String>, String, Option<String>) {
        let response = app()
            .oneshot(
                Request::builder()
                    .method(method)
                    .uri(path)
                    .body(body)
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let ct = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string());
        let allow = response
            .headers()
            .get(header::ALLOW)
            .map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, ct, String::from_utf8(body.to_vec()).unwrap(), allow)
    }

    #[tokio::test]
    async fn framework_refusals_become_json_and_health_text_stays() {
        let (status, ct, body, allow) = call("POST", "/api/v1/ws", Body::empty()).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(ct.as_deref(), Some("application/json"));
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["code"], "method_not_allowed", "{v}");
        assert!(v["message"].as_str().unwrap().contains("POST"), "{v}");
        assert!(allow.unwrap().contains("GET"), "the Allow header stays");

        let (status, _, body, _) = call("POST", "/api/v1/tasks", Body::from(vec![b'x'; 64])).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["code"], "payload_too_large", "{v}");
        assert!(!v["message"].as_str().unwrap().is_empty(), "{v}");

        let (status, ct, body, _) = call("GET", "/livez/x", Body::empty()).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(ct.unwrap().starts_with("text/plain"));
        assert!(body.starts_with("no health check"), "{body}");

        let (status, _, body, _) = call("POST", "/api/v1/tasks", Body::from("{}")).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "taken"));
    }
}
