//! The verbs on one object: get, update, patch and delete, and get, update
//! and patch of its `status` subresource ([`ObjectRequest`] carries what
//! they need of the request).

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use crate::managed::Operation;
use crate::media::{self, Output};
use crate::object::{UpdateScope, resource_version_of};
use crate::params::Params;
use crate::patch::{self, PatchKind};
use crate::resources::ResourceDef;
use crate::shared::Shared;
use crate::status::{ApiError, ApiResult};
use crate::store::{Deleted, Preconditions};
use crate::typed;

use super::body::{decode_body, json_response, media_type, with_warnings, writer_of};

pub(super) fn subresource(scope: UpdateScope) -> Option<&'static str> {
    (scope == UpdateScope::Status).then_some("status")
}

/// One request on a single object (or its subresource), as the verb handlers see it.
#[derive(Clone, Copy)]
pub(super) struct ObjectRequest<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) def: &'a ResourceDef,
    pub(super) ns: Option<&'a str>,
    pub(super) name: &'a str,
    pub(super) verb: &'a str,
    pub(super) params: &'a Params,
    pub(super) headers: &'a HeaderMap,
    pub(super) body: &'a [u8],
    pub(super) dry_run: bool,
    /// What the client accepts; a get answers `PartialObjectMetadata` when asked.
    pub(super) output: Output,
}

/// get / update / patch / delete of an object, or get / update / patch of its
/// `status` subresource (`scope`).
pub(super) fn object_verb(r: ObjectRequest<'_>, scope: UpdateScope) -> ApiResult<Response> {
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
    let store = &shared.store;
    match verb {
        "get" => {
            let obj = store.get(def, ns, name)?;
            match r.output {
                Output::Metadata => Ok(json_response(StatusCode::OK, &media::partial(&obj))),
                Output::MetadataList => Err(media::mismatch(r.output, false)),
                Output::Object => Ok(json_response(StatusCode::OK, &obj)),
                Output::Table => {
                    // A one-row table, as the apiserver converts a single object.
                    let meta = json!({"resourceVersion": resource_version_of(&obj)});
                    let include = r.params.include_object()?;
                    let table =
                        crate::table::table(def, &[&obj], meta, chrono::Utc::now(), include);
                    Ok(json_response(StatusCode::OK, &table))
                }
            }
        }
        "update" => {
            let obj = decode_body(headers, body)?;
            let warnings = typed::check_fields(def, &obj, r.params.str("fieldValidation"))?;
            let writer = writer_of(r.params, headers, Operation::Update, subresource(scope));
            let updated = store.update_by(def, ns, name, obj, scope, dry_run, writer.as_ref())?;
            Ok(with_warnings(
                json_response(StatusCode::OK, &updated),
                &warnings,
            ))
        }
        "patch" => patch_object(r, scope),
        "delete" if scope == UpdateScope::Main => {
            let pre = delete_preconditions(body)?;
            match store.delete(def, ns, name, &pre, dry_run)? {
                Deleted::Terminating(obj) => Ok(json_response(StatusCode::OK, &obj)),
                Deleted::Gone(obj) if def.returns_deleted_object() => {
                    Ok(json_response(StatusCode::OK, &obj))
                }
                Deleted::Gone(obj) => {
                    let status = json!({
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": {
                            "name": name,
                            "group": def.group,
                            "kind": def.qualified_plural(),
                            "uid": obj["metadata"]["uid"],
                        },
                    });
                    Ok(json_response(StatusCode::OK, &status))
                }
            }
        }
        _ if scope == UpdateScope::Status => Err(ApiError::method_not_allowed(&format!(
            "{}/status",
            def.group_resource()
        ))),
        _ => Err(ApiError::method_not_allowed(&def.group_resource())),
    }
}

pub(super) fn delete_preconditions(body: &[u8]) -> ApiResult<Preconditions> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Preconditions::default());
    }
    let options: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
    if !options.is_object() {
        return Err(ApiError::bad_request("DeleteOptions must be a JSON object"));
    }
    if let Some(policy) = options.get("propagationPolicy").and_then(Value::as_str)
        && !matches!(policy, "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: {policy:?}"
        )));
    }
    let pre = &options["preconditions"];
    Ok(Preconditions {
        uid: pre["uid"].as_str().map(str::to_string),
        resource_version: pre["resourceVersion"].as_str().map(str::to_string),
    })
}

pub(super) fn patch_object(r: ObjectRequest<'_>, scope: UpdateScope) -> ApiResult<Response> {
    let ObjectRequest {
        shared,
        def,
        ns,
        name,
        params,
        headers,
        body,
        dry_run,
        ..
    } = r;
    let kind = PatchKind::from_content_type(&media_type(headers))?;
    let document = patch::parse_body(kind, body)?;
    let operation = if kind == PatchKind::Apply {
        Operation::Apply
    } else {
        Operation::Update
    };
    let writer = writer_of(params, headers, operation, subresource(scope));
    if kind == PatchKind::Apply {
        if params.str("fieldManager").is_none() {
            return Err(ApiError::new(
                422,
                "Invalid",
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            ));
        }
        if scope == UpdateScope::Main
            && let Err(err) = shared.store.get(def, ns, name)
            && err.code == 404
        {
            let mut obj = document;
            if !obj.is_object() {
                return Err(ApiError::bad_request("apply patch must be an object"));
            }
            obj["metadata"]["name"] = json!(name);
            let warnings = typed::check_fields(def, &obj, params.str("fieldValidation"))?;
            let created = shared
                .store
                .create_by(def, ns, obj, dry_run, writer.as_ref())?;
            return Ok(with_warnings(
                json_response(StatusCode::CREATED, &created),
                &warnings,
            ));
        }
    }
    let mut warnings = Vec::new();
    let updated =
        shared
            .store
            .mutate_by(def, ns, name, scope, dry_run, writer.as_ref(), |current| {
                let wanted_rv = document
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !wanted_rv.is_empty() && wanted_rv != resource_version_of(current) {
                    return Err(ApiError::conflict(def, name));
                }
                let patched = patch::apply(kind, current, &document)?;
                warnings = typed::check_fields(def, &patched, params.str("fieldValidation"))?;
                Ok(patched)
            })?;
    Ok(with_warnings(
        json_response(StatusCode::OK, &updated),
        &warnings,
    ))
}
