//! The resource API of the simulated apiserver: path routing (`path.rs`),
//! query parameters, and the verbs list, get, create, update, patch, delete,
//! deletecollection (here, on collections), the verbs on one object
//! (`object_verbs.rs`) and the `status` / `scale` subresources
//! (`scale.rs`), and the review APIs (`review.rs`). Watches are handed to
//! `watch.rs`. Above the store and the request helpers (`params.rs`,
//! `media.rs`, `patch.rs`); the router (`router.rs`) mounts [`handle`].

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::managed::Operation;
use crate::media::{self, Output};
use crate::object::{UpdateScope, name_of};
use crate::params::Params;
use crate::shared::Shared;
use crate::status::{ApiError, ApiResult};
use crate::store::{Deleted, ListFrom, ListPage, Preconditions};
use crate::typed;
use crate::watch::{self, WatchOptions};

mod body;
mod logs;
mod object_verbs;
mod path;
mod review;
mod scale;

use body::{decode_body, json_response, list_body, with_warnings, writer_of};
use object_verbs::{ObjectRequest, object_verb};
use path::{Sub, Target, parse_path, verb_of};
use review::{review, review_kind};
use scale::scale_verb;

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
    if let Some(pod) = logs::log_target(path) {
        return logs::log(shared, method, pod, query);
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
            let list = crate::discovery::resource_list(shared, group, version)
                .ok_or_else(|| ApiError::no_route(path))?;
            return Ok(json_response(StatusCode::OK, &list));
        }
        Target::Group(group) => {
            if method != Method::GET {
                return Err(ApiError::method_not_allowed(path));
            }
            let group =
                crate::discovery::group(shared, group).ok_or_else(|| ApiError::no_route(path))?;
            return Ok(json_response(StatusCode::OK, &group));
        }
    };
    shared.stats.record(def.stats_key(), verb);
    if let Target::Object {
        sub: Some(Sub::Scale),
        ..
    } = &target
    {
        // Also counted apart: tests tell `/scale` from a patch of the object.
        shared.stats.record(def.stats_key(), "scale");
    }
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
                let mut options = WatchOptions::from_params(&params, &def.kind, shared.watch_list)?;
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
                    &list_body(&def, page, output, params.include_object()?),
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
                    let obj_ns = crate::object::namespace_of(obj).to_string();
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
                let page = ListPage {
                    items: deleted,
                    resource_version: shared.store.resource_version(),
                    continue_token: None,
                    remaining: None,
                };
                Ok(json_response(
                    StatusCode::OK,
                    &list_body(&def, page, Output::Object, Default::default()),
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
        Target::Discovery { .. } | Target::Group(_) => unreachable!("handled above"),
    }
}
