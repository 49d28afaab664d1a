//! Request bodies in and responses out: decoding JSON, YAML or protobuf
//! bodies, JSON responses with `Warning` headers, list bodies in the
//! negotiated output, and who a write is recorded as.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::managed::{Operation, Writer};
use crate::media::{self, Output};
use crate::params::Params;
use crate::resources::ResourceDef;
use crate::status::{ApiError, ApiResult};
use crate::store::ListPage;
use crate::table::IncludeObject;

pub(super) fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string()
}

/// Decodes a create/update body (JSON, or YAML when the client says so).
pub(super) fn decode_body(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    let content_type = media_type(headers);
    let media = content_type.split(';').next().unwrap_or("").trim();
    let parsed: Result<Value, String> = match media {
        "application/json" | "" | "*/*" => serde_json::from_slice(body).map_err(|e| e.to_string()),
        "application/yaml" | "application/x-yaml" => {
            serde_yaml_ng::from_slice(body).map_err(|e| e.to_string())
        }
        crate::protobuf::MEDIA_TYPE => return crate::protobuf::decode(body),
        _ => return Err(ApiError::unsupported_media_type(&content_type)),
    };
    let value = parsed.map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    Ok(value)
}

pub(super) fn json_response(code: StatusCode, value: &impl serde::Serialize) -> Response {
    (code, axum::Json(value)).into_response()
}

/// Adds one `Warning: 299 - "…"` header per warning, as the apiserver
/// reports what it accepted but dropped (kubectl prints them).
pub(super) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let quoted = warning.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = format!("299 - \"{quoted}\"").parse() {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

pub(super) fn list_body(
    def: &ResourceDef,
    page: ListPage,
    output: Output,
    include: IncludeObject,
) -> Value {
    let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(token) = page.continue_token {
        metadata["continue"] = json!(token);
    }
    if let Some(remaining) = page.remaining {
        metadata["remainingItemCount"] = json!(remaining);
    }
    let items: Vec<&Value> = page.items.iter().map(|o| o.as_ref()).collect();
    match output {
        Output::Table => crate::table::table(def, &items, metadata, chrono::Utc::now(), include),
        Output::MetadataList => media::partial_list(&items, metadata),
        Output::Object | Output::Metadata => json!({
            "kind": format!("{}List", def.kind),
            "apiVersion": def.api_version(),
            "metadata": metadata,
            "items": items,
        }),
    }
}

/// Who a write is recorded as in `managedFields`.
pub(super) fn writer_of(
    params: &Params,
    headers: &HeaderMap,
    operation: Operation,
    subresource: Option<&'static str>,
) -> Option<Writer> {
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    Writer::of_request(
        params.str("fieldManager"),
        user_agent,
        operation,
        subresource,
    )
}
