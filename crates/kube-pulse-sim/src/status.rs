//! Kubernetes `Status` errors: how the simulator says no.
//!
//! Every failure a handler can produce becomes an [`ApiError`], which renders
//! as a `Status` object with the HTTP code and `reason` a real apiserver would
//! use, so clients (kube-rs, kubectl) take the same error paths they take in
//! production.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::resources::ResourceDef;

/// A failed API call, rendered as a `meta/v1 Status`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status (`name`, `group`, `kind`), when known.
    pub details: Option<Value>,
    /// Seconds for a `Retry-After` header (429, 503).
    pub retry_after: Option<u32>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, def: &ResourceDef, name: &str) -> Self {
        self.details =
            Some(json!({"name": name, "group": def.group, "kind": def.qualified_plural()}));
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", def.group_resource()),
        )
        .with_details(def, name)
    }

    /// 404 for a path that names no known resource.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource (path {path})"),
        )
    }

    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", def.group_resource()),
        )
        .with_details(def, name)
    }

    pub fn conflict(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                def.group_resource()
            ),
        )
        .with_details(def, name)
    }

    pub fn invalid(def: &ResourceDef, name: &str, why: impl std::fmt::Display) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {why}", def.kind),
        )
        .with_details(def, name)
    }

    /// 422 `Invalid` with one cause per field error, worded as the
    /// apiserver aggregates a field error list: `Kind.group "name" is
    /// invalid: field: message` (several in brackets). Each cause is
    /// `(reason, field, message)`, the reason a `FieldValue*` cause type.
    pub fn invalid_fields(
        def: &ResourceDef,
        name: &str,
        causes: &[(&str, String, String)],
    ) -> Self {
        let kind = if def.group.is_empty() {
            def.kind.clone()
        } else {
            format!("{}.{}", def.kind, def.group)
        };
        let errors: Vec<String> = causes
            .iter()
            .map(|(_, field, message)| format!("{field}: {message}"))
            .collect();
        let why = match errors.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut error = Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {why}"),
        )
        .with_details(def, name);
        let causes: Vec<Value> = causes
            .iter()
            .map(|(reason, field, message)| json!({"reason": reason, "message": message, "field": field}))
            .collect();
        if let Some(details) = error.details.as_mut() {
            details["kind"] = json!(def.kind);
            details["causes"] = json!(causes);
        }
        error
    }

    pub fn method_not_allowed(what: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({what})"),
        )
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type:?})"
            ),
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 in the apiserver's RBAC wording.
    pub fn forbidden(verb: &str, def: &ResourceDef, namespace: Option<&str>) -> Self {
        let scope = match namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        // The authorizer names the resource of the path, whatever the registry calls it.
        let resource = if def.group.is_empty() {
            def.plural.clone()
        } else {
            format!("{}.{}", def.plural, def.group)
        };
        Self::new(
            403,
            "Forbidden",
            format!(
                "{resource} is forbidden: User \"system:anonymous\" cannot {verb} resource \"{}\" in API group \"{}\" {scope}",
                def.plural, def.group
            ),
        )
    }

    /// The in-stream and list error for a resourceVersion older than the event window.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` document for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        if let Some(secs) = self.retry_after {
            let details = status
                .as_object_mut()
                .unwrap()
                .entry("details")
                .or_insert_with(|| json!({}));
            details["retryAfterSeconds"] = json!(secs);
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (code, axum::Json(self.to_status())).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
