//! Discovery and server-identity endpoints: `/version`, `/api`, `/apis`,
//! `/apis/{group}/{version}`, minimal OpenAPI documents, and the health
//! endpoints of the simulated apiserver.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::shared::Shared;

pub(crate) async fn version() -> Json<Value> {
    Json(json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-kube-pulse-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
        "emulationMajor": "1",
        "emulationMinor": "32",
    }))
}

fn server_address(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_string()
}

pub(crate) async fn core_versions(headers: HeaderMap) -> Json<Value> {
    Json(json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address(&headers)}],
    }))
}

/// One group's entry of `/apis`: its versions, the preferred one first.
fn group_entry(name: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": entries, "preferredVersion": entries[0]})
}

pub(crate) async fn groups(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let groups: Vec<Value> = shared
        .store
        .catalog()
        .groups()
        .into_iter()
        .map(|(name, versions)| group_entry(&name, &versions))
        .collect();
    Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

/// The `APIGroup` of `/apis/{group}`, or None when the group is not served.
pub(crate) fn group(shared: &Shared, group: &str) -> Option<Value> {
    let (name, versions) = shared
        .store
        .catalog()
        .groups()
        .into_iter()
        .find(|(name, _)| name == group)?;
    let mut entry = group_entry(&name, &versions);
    entry["kind"] = json!("APIGroup");
    entry["apiVersion"] = json!("v1");
    Some(entry)
}

/// `APIResourceList` for one group/version, or None when nothing is served there.
pub(crate) fn resource_list(shared: &Shared, group: &str, version: &str) -> Option<Value> {
    let catalog = shared.store.catalog();
    let defs = catalog.in_group_version(group, version);
    if defs.is_empty() {
        return None;
    }
    let resources: Vec<Value> = defs.iter().flat_map(|d| d.discovery_entries()).collect();
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

/// The OpenAPI v3 index: one entry per served group/version.
pub(crate) async fn openapi_v3(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let mut paths = serde_json::Map::new();
    paths.insert(
        "api/v1".into(),
        json!({"serverRelativeURL": "/openapi/v3/api/v1"}),
    );
    for (group, versions) in shared.store.catalog().groups() {
        for version in versions {
            let key = format!("apis/{group}/{version}");
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}")}),
            );
        }
    }
    Json(json!({"paths": paths}))
}

/// The OpenAPI v3 document of one group/version. It carries no schemas, only
/// the PATCH operations with their `fieldValidation` parameter, which is how
/// kubectl learns that the server validates fields itself.
pub(crate) async fn openapi_v3_group(
    State(shared): State<Arc<Shared>>,
    axum::extract::Path(rest): axum::extract::Path<String>,
) -> Response {
    let parts: Vec<&str> = rest.split('/').collect();
    let (group, version) = match parts.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => {
            return super::status::ApiError::no_route(&format!("/openapi/v3/{rest}"))
                .into_response();
        }
    };
    let catalog = shared.store.catalog();
    let defs = catalog.in_group_version(group, version);
    if defs.is_empty() {
        return super::status::ApiError::no_route(&format!("/openapi/v3/{rest}")).into_response();
    }
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = serde_json::Map::new();
    for def in defs {
        let scope = if def.namespaced {
            "/namespaces/{namespace}"
        } else {
            ""
        };
        let operation = json!({"patch": {
            "x-kubernetes-group-version-kind": {"group": def.group, "version": def.version, "kind": def.kind},
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            ],
            "responses": {"200": {"description": "OK"}},
        }});
        paths.insert(
            format!("{prefix}{scope}/{}/{{name}}", def.plural),
            operation,
        );
    }
    Json(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
    .into_response()
}

pub(crate) async fn openapi_v2() -> Response {
    super::status::ApiError::no_route("/openapi/v2").into_response()
}

fn health_text(name: &str, ok: bool, verbose: bool) -> Response {
    let checks = [
        "ping",
        "log",
        "etcd",
        "informer-sync",
        "poststarthook/start-informers",
    ];
    let mut body = String::new();
    if verbose || !ok {
        for check in checks {
            if !ok && check == "etcd" {
                body.push_str("[-]etcd failed: reason withheld\n");
            } else {
                body.push_str(&format!("[+]{check} ok\n"));
            }
        }
        body.push_str(&format!(
            "{name} check {}\n",
            if ok { "passed" } else { "failed" }
        ));
    } else {
        body.push_str("ok");
    }
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    (
        code,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

fn verbose(query: &Option<String>) -> bool {
    query.as_deref().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "verbose" || kv.starts_with("verbose="))
    })
}

pub(crate) async fn livez(axum::extract::RawQuery(q): axum::extract::RawQuery) -> Response {
    health_text("livez", true, verbose(&q))
}

pub(crate) async fn readyz(
    State(shared): State<Arc<Shared>>,
    axum::extract::RawQuery(q): axum::extract::RawQuery,
) -> Response {
    let ok = !shared.faults.borrow().not_ready;
    health_text("readyz", ok, verbose(&q))
}

pub(crate) async fn healthz(
    State(shared): State<Arc<Shared>>,
    axum::extract::RawQuery(q): axum::extract::RawQuery,
) -> Response {
    let ok = !shared.faults.borrow().not_ready;
    health_text("healthz", ok, verbose(&q))
}
