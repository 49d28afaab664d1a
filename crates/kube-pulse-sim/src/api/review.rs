//! TokenReview and SubjectAccessReview: answered from the cluster's review
//! policy (`reviews.rs`), counted like any request.

use std::sync::Arc;

use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::Value;

use crate::shared::Shared;
use crate::status::{ApiError, ApiResult};

use super::body::{decode_body, json_response};

/// The review API a path names, if any.
pub(super) fn review_kind(path: &str) -> Option<&'static str> {
    match path.trim_end_matches('/') {
        "/apis/authentication.k8s.io/v1/tokenreviews" => Some("TokenReview"),
        "/apis/authorization.k8s.io/v1/subjectaccessreviews" => Some("SubjectAccessReview"),
        _ => None,
    }
}

/// `POST` a TokenReview or SubjectAccessReview: answered from the policy.
pub(super) fn review(
    shared: &Arc<Shared>,
    method: &Method,
    kind: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<Response> {
    if method != Method::POST {
        return Err(ApiError::method_not_allowed(kind));
    }
    let mut object = decode_body(headers, body)?;
    if !object.get("spec").is_some_and(Value::is_object) {
        return Err(ApiError::bad_request(format!("{kind}: spec is required")));
    }
    // Counted like any request, so tests can see what the gateway asked.
    let counted = if kind == "TokenReview" {
        "authentication.k8s.io/tokenreviews"
    } else {
        "authorization.k8s.io/subjectaccessreviews"
    };
    shared.stats.record(counted.to_string(), "create");
    let policy = shared.reviews.read().clone();
    object["status"] = if kind == "TokenReview" {
        policy.token_review(&object)
    } else {
        policy.access_review(&object)
    };
    Ok(json_response(StatusCode::CREATED, &object))
}
