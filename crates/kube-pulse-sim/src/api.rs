//! The resource API of the simulated apiserver: path routing
//! (`/api/v1/...`, `/apis/{group}/{version}/...`), query parameters, and the
//! verbs list, get, create, update, patch, delete, deletecollection and the
//! `status` / `scale` subresources. Watches are handed to [`super::watch`].

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::managed::{Operation, Writer};
use super::media::{self, Output};
use super::object::{UpdateScope, name_of, resource_version_of};
use super::params::Params;
use super::patch::{self, PatchKind};
use super::resources::ResourceDef;
use super::shared::Shared;
use super::status::{ApiError, ApiResult};
use super::store::{Deleted, ListFrom, Preconditions};
use super::typed;
use super::watch::{self, WatchOptions};

/// A subresource of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sub {
    Status,
    Scale,
}

/// What a resource path addresses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    /// `APIResourceList` of a group/version.
    Discovery { group: String, version: String },
    /// A collection, in one namespace or across all.
    Collection {
        def: ResourceDef,
        namespace: Option<String>,
    },
    /// One object, or one of its subresources.
    Object {
        def: ResourceDef,
        namespace: Option<String>,
        name: String,
        sub: Option<Sub>,
    },
}

/// Resolves a request path against the catalogue.
pub(crate) fn parse_path(shared: &Shared, path: &str) -> ApiResult<Target> {
    let catalog = shared.store.catalog();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::no_route(path)),
    };
    if catalog.in_group_version(group, version).is_empty() {
        return Err(ApiError::no_route(path));
    }
    let find = |plural: &str| {
        catalog
            .find(group, version, plural)
            .cloned()
            .ok_or_else(|| ApiError::no_route(path))
    };
    let sub = |s: &str, def: &ResourceDef| match s {
        "status" if def.status_subresource => Ok(Sub::Status),
        "scale" if def.scale_subresource => Ok(Sub::Scale),
        _ => Err(ApiError::no_route(path)),
    };
    let namespaced_res = |plural: &str| {
        catalog
            .find(group, version, plural)
            .is_some_and(|d| d.namespaced)
    };
    match rest {
        [] => Ok(Target::Discovery {
            group: group.into(),
            version: version.into(),
        }),
        ["namespaces", ns, plural, tail @ ..] if namespaced_res(plural) => {
            let def = find(plural)?;
            let namespace = Some(ns.to_string());
            match tail {
                [] => Ok(Target::Collection { def, namespace }),
                [name] => Ok(Target::Object {
                    def,
                    namespace,
                    name: name.to_string(),
                    sub: None,
                }),
                [name, s] => {
                    let sub = Some(sub(s, &def)?);
                    Ok(Target::Object {
                        def,
                        namespace,
                        name: name.to_string(),
                        sub,
                    })
                }
                _ => Err(ApiError::no_route(path)),
            }
        }
        [plural] => Ok(Target::Collection {
            def: find(plural)?,
            namespace: None,
        }),
        [plural, name, tail @ ..] => {
            let def = find(plural)?;
            if def.namespaced {
                return Err(ApiError::no_route(path));
            }
            let sub = match tail {
                [] => None,
                [s] => Some(sub(s, &def)?),
                _ => return Err(ApiError::no_route(path)),
            };
            Ok(Target::Object {
                def,
                namespace: None,
                name: name.to_string(),
                sub,
            })
        }
    }
}

/// The RBAC-style verb of a request, for the deny list and the counters.
pub(crate) fn verb_of(method: &Method, target: &Target, params: &Params) -> &'static str {
    match (target, method.as_str()) {
        (Target::Collection { .. }, "GET") if params.bool("watch").unwrap_or(false) => "watch",
        (Target::Collection { .. }, "GET") => "list",
        (Target::Collection { .. }, "POST") => "create",
        (Target::Collection { .. }, "DELETE") => "deletecollection",
        (Target::Object { .. }, "GET") => "get",
        (Target::Object { .. }, "PUT") => "update",
        (Target::Object { .. }, "PATCH") => "patch",
        (Target::Object { .. }, "DELETE") => "delete",
        (Target::Discovery { .. }, _) => "get",
        _ => "unsupported",
    }
}

fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string()
}

/// Decodes a create/update body (JSON, or YAML when the client says so).
fn decode_body(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    let content_type = media_type(headers);
    let media = content_type.split(';').next().unwrap_or("").trim();
    let parsed: Result<Value, String> = match media {
        "application/json" | "" | "*/*" => serde_json::from_slice(body).map_err(|e| e.to_string()),
        "application/yaml" | "application/x-yaml" => {
            serde_yaml_ng::from_slice(body).map_err(|e| e.to_string())
        }
        super::protobuf::MEDIA_TYPE => return super::protobuf::decode(body),
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

fn json_response(code: StatusCode, value: &impl serde::Serialize) -> Response {
    (code, axum::Json(value)).into_response()
}

/// Adds one `Warning: 299 - "…"` header per warning, as the apiserver
/// reports what it accepted but dropped (kubectl prints them).
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let quoted = warning.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = format!("299 - \"{quoted}\"").parse() {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

fn list_body(def: &ResourceDef, page: super::store::ListPage, output: Output) -> Value {
    let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(token) = page.continue_token {
        metadata["continue"] = json!(token);
    }
    if let Some(remaining) = page.remaining {
        metadata["remainingItemCount"] = json!(remaining);
    }
    let items: Vec<&Value> = page.items.iter().map(|o| o.as_ref()).collect();
    match output {
        Output::Table => super::table::table(def, &items, metadata, chrono::Utc::now()),
        Output::MetadataList => media::partial_list(&items, metadata),
        Output::Object | Output::Metadata => json!({
            "kind": format!("{}List", def.kind),
            "apiVersion": def.api_version(),
            "metadata": metadata,
            "items": items,
        }),
    }
}

/// The fallback handler for every `/api/...` and `/apis/...` request.
pub(crate) async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match dispatch(
        &shared,
        &method,
        uri.path(),
        query.as_deref(),
        &headers,
        &body,
    )
    .await
    {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

/// The review API a path names, if any.
fn review_kind(path: &str) -> Option<&'static str> {
    match path.trim_end_matches('/') {
        "/apis/authentication.k8s.io/v1/tokenreviews" => Some("TokenReview"),
        "/apis/authorization.k8s.io/v1/subjectaccessreviews" => Some("SubjectAccessReview"),
        _ => None,
    }
}

/// `POST` a TokenReview or SubjectAccessReview: answered from the policy.
fn review(
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

async fn dispatch(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<Response> {
    if let Some(kind) = review_kind(path) {
        return review(shared, method, kind, headers, body);
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let output = media::negotiate(accept)?;
    let target = parse_path(shared, path)?;
    let params = Params::parse(query)?;
    params.bool("watch")?;
    let verb = verb_of(method, &target, &params);
    let (def, namespace) = match &target {
        Target::Collection { def, namespace } | Target::Object { def, namespace, .. } => {
            (def.clone(), namespace.clone())
        }
        Target::Discovery { group, version } => {
            if method != Method::GET {
                return Err(ApiError::method_not_allowed(path));
            }
            let list = super::discovery::resource_list(shared, group, version)
                .ok_or_else(|| ApiError::no_route(path))?;
            return Ok(json_response(StatusCode::OK, &list));
        }
    };
    shared.stats.record(def.stats_key(), verb);
    if matches!(output, Output::Metadata | Output::MetadataList) {
        // Also counted apart: tests tell metadata-only clients by it.
        shared.stats.record(def.stats_key(), "metadata");
    }
    if verb == "unsupported" {
        return Err(ApiError::method_not_allowed(&def.group_resource()));
    }
    if shared.is_denied(&def, verb) {
        return Err(ApiError::forbidden(verb, &def, namespace.as_deref()));
    }
    params.check_field_validation()?;
    let ns = namespace.as_deref();
    let dry_run = params.dry_run()?;
    match target {
        Target::Collection { .. } => match verb {
            "watch" => {
                if output == Output::MetadataList {
                    return Err(media::mismatch(output, false));
                }
                let mut options = WatchOptions::from_params(&params, &def.kind)?;
                options.output = output;
                Ok(watch::serve(shared.clone(), def, namespace, options))
            }
            "list" => {
                if output == Output::Metadata {
                    return Err(media::mismatch(output, true));
                }
                let selection = params.selection(&def.kind)?;
                let from = match (
                    params.str("resourceVersionMatch"),
                    params.resource_version()?,
                ) {
                    (Some("Exact"), Some(rv)) if rv > 0 => ListFrom::Exact(rv),
                    (Some("Exact"), _) => {
                        return Err(ApiError::new(
                            422,
                            "Invalid",
                            "resourceVersionMatch: Forbidden: resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"\" or \"0\"",
                        ));
                    }
                    (None | Some("NotOlderThan"), _) => ListFrom::Latest,
                    (Some(other), _) => {
                        return Err(ApiError::new(
                            422,
                            "Invalid",
                            format!(
                                "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
                            ),
                        ));
                    }
                };
                let limit = params.u64("limit")?.map(|l| l as usize);
                let page =
                    shared
                        .store
                        .list(&def, ns, &selection, from, limit, params.str("continue"))?;
                Ok(json_response(
                    StatusCode::OK,
                    &list_body(&def, page, output),
                ))
            }
            "create" => {
                if def.namespaced && ns.is_none() {
                    return Err(ApiError::method_not_allowed(&format!(
                        "create {} needs a namespace in the path",
                        def.group_resource()
                    )));
                }
                let obj = decode_body(headers, body)?;
                let warnings = typed::check_fields(&def, &obj, params.str("fieldValidation"))?;
                let writer = writer_of(&params, headers, Operation::Update, None);
                let created = shared
                    .store
                    .create_by(&def, ns, obj, dry_run, writer.as_ref())?;
                Ok(with_warnings(
                    json_response(StatusCode::CREATED, &created),
                    &warnings,
                ))
            }
            "deletecollection" => {
                let selection = params.selection(&def.kind)?;
                let page = shared
                    .store
                    .list(&def, ns, &selection, ListFrom::Latest, None, None)?;
                let mut deleted = Vec::new();
                for obj in &page.items {
                    let obj_ns = super::object::namespace_of(obj).to_string();
                    let ns_arg = (!obj_ns.is_empty()).then_some(obj_ns.as_str());
                    match shared.store.delete(
                        &def,
                        ns_arg,
                        name_of(obj),
                        &Preconditions::default(),
                        dry_run,
                    ) {
                        Ok(Deleted::Gone(o) | Deleted::Terminating(o)) => deleted.push(o),
                        Err(e) if e.code == 404 => {}
                        Err(e) => return Err(e),
                    }
                }
                let page = super::store::ListPage {
                    items: deleted,
                    resource_version: shared.store.resource_version(),
                    continue_token: None,
                    remaining: None,
                };
                Ok(json_response(
                    StatusCode::OK,
                    &list_body(&def, page, Output::Object),
                ))
            }
            _ => Err(ApiError::method_not_allowed(&def.group_resource())),
        },
        Target::Object { name, sub, .. } => {
            let request = ObjectRequest {
                shared,
                def: &def,
                ns,
                name: &name,
                verb,
                params: &params,
                headers,
                body,
                dry_run,
                output,
            };
            match sub {
                None => object_verb(request, UpdateScope::Main),
                Some(Sub::Status) => object_verb(request, UpdateScope::Status),
                Some(Sub::Scale) => scale_verb(request),
            }
        }
        Target::Discovery { .. } => unreachable!("handled above"),
    }
}

/// Who a write is recorded as in `managedFields`.
fn writer_of(
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

fn subresource(scope: UpdateScope) -> Option<&'static str> {
    (scope == UpdateScope::Status).then_some("status")
}

/// One request on a single object (or its subresource), as the verb handlers see it.
#[derive(Clone, Copy)]
struct ObjectRequest<'a> {
    shared: &'a Arc<Shared>,
    def: &'a ResourceDef,
    ns: Option<&'a str>,
    name: &'a str,
    verb: &'a str,
    params: &'a Params,
    headers: &'a HeaderMap,
    body: &'a [u8],
    dry_run: bool,
    /// What the client accepts; a get answers `PartialObjectMetadata` when asked.
    output: Output,
}

/// get / update / patch / delete of an object, or get / update / patch of its
/// `status` subresource (`scope`).
fn object_verb(r: ObjectRequest<'_>, scope: UpdateScope) -> ApiResult<Response> {
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
                Output::Object | Output::Table => Ok(json_response(StatusCode::OK, &obj)),
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

fn delete_preconditions(body: &[u8]) -> ApiResult<Preconditions> {
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

fn patch_object(r: ObjectRequest<'_>, scope: UpdateScope) -> ApiResult<Response> {
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

/// The `autoscaling/v1 Scale` view of a workload.
fn scale_of(obj: &Value) -> Value {
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
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

fn scale_verb(r: ObjectRequest<'_>) -> ApiResult<Response> {
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
