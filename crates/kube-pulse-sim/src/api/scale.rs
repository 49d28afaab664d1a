//! The `scale` subresource of a workload: its `autoscaling/v1 Scale` view,
//! read, replaced and patched.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::object::{UpdateScope, resource_version_of};
use crate::patch::{self, PatchKind};
use crate::status::{ApiError, ApiResult};

use super::body::{decode_body, json_response, media_type};
use super::object_verbs::ObjectRequest;

/// The `autoscaling/v1 Scale` view of a workload.
pub(super) fn scale_of(obj: &Value) -> Value {
    let selector = crate::object::selector_string(obj);
    let meta = &obj["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(1))},
        "status": {
            "replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": selector,
        },
    })
}

pub(super) fn scale_verb(r: ObjectRequest<'_>) -> ApiResult<Response> {
    let ObjectRequest {
        shared,
        def,
        ns,
        name,
        verb,
        headers,
        body,
        dry_run,
        ..
    } = r;
    let requested_scale = |current: &Value| -> ApiResult<Value> {
        match verb {
            "update" => decode_body(headers, body),
            "patch" => {
                let kind = PatchKind::from_content_type(&media_type(headers))?;
                let document = patch::parse_body(kind, body)?;
                patch::apply(kind, &scale_of(current), &document)
            }
            _ => Err(ApiError::method_not_allowed(&format!(
                "{}/scale",
                def.group_resource()
            ))),
        }
    };
    if verb == "get" {
        return Ok(json_response(
            StatusCode::OK,
            &scale_of(shared.store.get(def, ns, name)?.as_ref()),
        ));
    }
    let updated = shared.store.mutate(def, ns, name, UpdateScope::Main, dry_run, |current| {
        let scale = requested_scale(current)?;
        let wanted_rv = scale
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !wanted_rv.is_empty() && wanted_rv != resource_version_of(current) {
            return Err(ApiError::conflict(def, name));
        }
        let replicas = scale.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
        if replicas.as_i64().is_none_or(|r| r < 0) {
            return Err(ApiError::invalid(
                def,
                name,
                format!("spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0"),
            ));
        }
        let mut next = current.clone();
        next["spec"]["replicas"] = replicas;
        Ok(next)
    })?;
    Ok(json_response(StatusCode::OK, &scale_of(&updated)))
}
