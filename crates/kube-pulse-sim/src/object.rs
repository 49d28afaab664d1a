//! Object rules of the simulated apiserver: what create and update keep,
//! default and validate (the "strategy" of each resource).
//!
//! Pure functions over JSON objects; the store calls them under its lock and
//! adds `resourceVersion`.

use serde_json::{Map, Value, json};

use super::resources::ResourceDef;
use super::status::{ApiError, ApiResult};
pub use super::time::timestamp;

/// `metadata.name` of an object, or "".
pub fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn namespace_of(obj: &Value) -> &str {
    obj.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn resource_version_of(obj: &Value) -> &str {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn is_terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

pub fn has_finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// RFC 1123 subdomain, as the apiserver requires of most object names.
fn validate_name(def: &ResourceDef, name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            def,
            name,
            format!(
                "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of \
                 lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ))
    }
}

fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let root = obj.as_object_mut().expect("checked to be an object");
    let meta = root.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut().unwrap()
}

/// Checks `kind`/`apiVersion` of a request body against the resource.
fn check_type(def: &ResourceDef, obj: &Value) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(format!(
            "the body of the request must be a JSON object of kind {}",
            def.kind
        )));
    }
    if obj.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    if let Some(api_version) = obj.get("apiVersion").and_then(Value::as_str)
        && api_version != def.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && kind != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            def.kind
        )));
    }
    Ok(())
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Turns a create request body into the object to store (without `resourceVersion`).
///
/// `namespace` is the namespace of the request path (None for cluster-scoped).
pub fn prepare_create(
    def: &ResourceDef,
    namespace: Option<&str>,
    mut obj: Value,
    now: chrono::DateTime<chrono::Utc>,
) -> ApiResult<Value> {
    check_type(def, &obj)?;
    {
        let root = obj.as_object_mut().unwrap();
        root.insert("apiVersion".into(), json!(def.api_version()));
        root.insert("kind".into(), json!(def.kind));
    }
    let meta = metadata_mut(&mut obj);
    let mut name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if name.is_empty() {
        match meta.get("generateName").and_then(Value::as_str) {
            Some(prefix) if !prefix.is_empty() => name = format!("{prefix}{}", random_suffix()),
            _ => {
                return Err(ApiError::invalid(
                    def,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
        }
    }
    validate_name(def, &name)?;
    meta.insert("name".into(), json!(name));
    match namespace {
        Some(ns) => {
            if let Some(body_ns) = meta.get("namespace").and_then(Value::as_str)
                && !body_ns.is_empty()
                && body_ns != ns
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            meta.insert("namespace".into(), json!(ns));
        }
        None => {
            meta.remove("namespace");
        }
    }
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(timestamp(now)));
    meta.remove("resourceVersion");
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    meta.remove("managedFields");
    if def.status_subresource {
        meta.insert("generation".into(), json!(1));
        obj.as_object_mut().unwrap().remove("status");
    } else {
        meta.remove("generation");
    }
    super::defaults::apply(def, &mut obj, None);
    if def.kind == "Namespace" {
        // A new namespace is Active; afterwards its phase belongs to the namespace controller.
        obj["status"] = json!({"phase": "Active"});
    }
    super::typed::normalize(def, &mut obj)?;
    super::validation::validate(def, &name, &obj)?;
    Ok(obj)
}

/// Which part of an object an update may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateScope {
    /// The main endpoint: everything but `status` (when status is a subresource).
    Main,
    /// The `/status` subresource: only `status`.
    Status,
}

/// Merges an update request body into the stored object. Returns the new object
/// (without a new `resourceVersion`); the caller checks the precondition.
pub fn prepare_update(
    def: &ResourceDef,
    current: &Value,
    mut obj: Value,
    scope: UpdateScope,
) -> ApiResult<Value> {
    check_type(def, &obj)?;
    let name = name_of(current).to_string();
    let body_name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if scope == UpdateScope::Status {
        let mut next = current.clone();
        match obj.get("status") {
            Some(status) => next["status"] = status.clone(),
            None => {
                next.as_object_mut().unwrap().remove("status");
            }
        }
        super::typed::normalize(def, &mut next)?;
        return Ok(next);
    }
    {
        let root = obj.as_object_mut().unwrap();
        root.insert("apiVersion".into(), json!(def.api_version()));
        root.insert("kind".into(), json!(def.kind));
    }
    let current_meta = current["metadata"].as_object().cloned().unwrap_or_default();
    let meta = metadata_mut(&mut obj);
    meta.insert("name".into(), json!(name));
    for key in [
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "generation",
    ] {
        match current_meta.get(key) {
            Some(v) => meta.insert(key.into(), v.clone()),
            None => meta.remove(key),
        };
    }
    // Who wrote what stays as stored; the store records this write.
    match current_meta.get("managedFields") {
        Some(v) => meta.insert("managedFields".into(), v.clone()),
        None => meta.remove("managedFields"),
    };
    if def.status_subresource {
        let root = obj.as_object_mut().unwrap();
        match current.get("status") {
            Some(status) => root.insert("status".into(), status.clone()),
            None => root.remove("status"),
        };
        if spec_changed(current, &obj) {
            let generation = current_meta
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            metadata_mut(&mut obj).insert("generation".into(), json!(generation + 1));
        }
    }
    super::defaults::apply(def, &mut obj, Some(current));
    super::typed::normalize(def, &mut obj)?;
    super::validation::validate(def, &name, &obj)?;
    Ok(obj)
}

/// Whether anything outside `metadata` and `status` differs.
fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut m = v.as_object().cloned().unwrap_or_default();
        m.remove("metadata");
        m.remove("status");
        m
    };
    strip(old) != strip(new)
}

/// Whether two objects differ in anything but `resourceVersion` (a no-op update
/// keeps the old resourceVersion, as the apiserver does).
pub fn same_content(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        v
    };
    strip(a) == strip(b)
}

/// `spec.selector.matchLabels` as a selector string (`app=web,tier=db`),
/// as a Scale's `status.selector` and the workloads' status write it.
pub fn selector_string(obj: &Value) -> String {
    obj.pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;

    fn now() -> chrono::DateTime<chrono::Utc> {
        "2026-01-02T03:04:05Z".parse().unwrap()
    }

    /// A valid Deployment spec: a selector and a template.
    fn spec() -> Value {
        json!({"selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}})
    }

    #[test]
    fn create_fills_metadata_and_defaults() {
        let catalog = Catalog::new(vec![]);
        let def = catalog.find("apps", "v1", "deployments").unwrap();
        let obj = prepare_create(
            def,
            Some("shop"),
            json!({"metadata": {"name": "web"}, "spec": spec(), "status": {"readyReplicas": 9}}),
            now(),
        )
        .unwrap();
        assert_eq!(obj["kind"], "Deployment");
        assert_eq!(obj["apiVersion"], "apps/v1");
        assert_eq!(obj["metadata"]["namespace"], "shop");
        assert_eq!(obj["metadata"]["generation"], 1);
        assert_eq!(obj["metadata"]["creationTimestamp"], "2026-01-02T03:04:05Z");
        assert_eq!(obj["spec"]["replicas"], 1);
        assert!(obj.get("status").is_none(), "status is reset on create");
        assert_eq!(obj["metadata"]["uid"].as_str().unwrap().len(), 36);
    }

    #[test]
    fn create_rejects_bad_bodies() {
        let catalog = Catalog::new(vec![]);
        let def = catalog.find("apps", "v1", "deployments").unwrap();
        let cases = [
            (json!([1, 2]), 400),
            (json!({"metadata": "x"}), 400),
            (
                json!({"apiVersion": "apps/v2", "metadata": {"name": "a"}}),
                400,
            ),
            (json!({"kind": "Pod", "metadata": {"name": "a"}}), 400),
            (json!({"metadata": {}}), 422),
            (json!({"metadata": {"name": "Bad_Name"}}), 422),
            (
                json!({"metadata": {"name": "a", "namespace": "other"}}),
                400,
            ),
            (
                json!({"metadata": {"name": "a"}, "spec": {"replicas": -1}}),
                422,
            ),
        ];
        for (body, code) in cases {
            let err = prepare_create(def, Some("shop"), body.clone(), now()).unwrap_err();
            assert_eq!(err.code, code, "{body}: {err}");
        }
        let generated = prepare_create(
            def,
            Some("shop"),
            json!({"metadata": {"generateName": "web-"}, "spec": spec()}),
            now(),
        )
        .unwrap();
        assert!(name_of(&generated).starts_with("web-"));
        assert_eq!(name_of(&generated).len(), 9);
    }

    #[test]
    fn namespaces_start_active_and_updates_keep_their_phase() {
        let catalog = Catalog::new(vec![]);
        let def = catalog.namespaces();
        let mut created =
            prepare_create(def, None, json!({"metadata": {"name": "shop"}}), now()).unwrap();
        assert_eq!(created["status"], json!({"phase": "Active"}));
        assert_eq!(created["spec"], json!({"finalizers": ["kubernetes"]}));
        created["status"] = json!({"phase": "Terminating"});
        let mut body = created.clone();
        body["status"] = json!({"phase": "Active"});
        body["metadata"]["labels"] = json!({"team": "a"});
        let updated = prepare_update(def, &created, body, UpdateScope::Main).unwrap();
        assert_eq!(updated["status"]["phase"], "Terminating");
        assert_eq!(updated["metadata"]["labels"]["team"], "a");
    }

    #[test]
    fn update_bumps_generation_only_on_spec_change() {
        let catalog = Catalog::new(vec![]);
        let def = catalog.find("apps", "v1", "deployments").unwrap();
        let mut current = prepare_create(
            def,
            Some("shop"),
            json!({"metadata": {"name": "web"}, "spec": spec()}),
            now(),
        )
        .unwrap();
        current["status"] = json!({"readyReplicas": 1});
        let mut relabel = current.clone();
        relabel["metadata"]["labels"] = json!({"a": "b"});
        relabel["status"] = json!({"readyReplicas": 7});
        let next = prepare_update(def, &current, relabel, UpdateScope::Main).unwrap();
        assert_eq!(next["metadata"]["generation"], 1);
        assert_eq!(
            next["status"]["readyReplicas"], 1,
            "main endpoint ignores status"
        );

        let mut scale = current.clone();
        scale["spec"]["replicas"] = json!(3);
        let next = prepare_update(def, &current, scale, UpdateScope::Main).unwrap();
        assert_eq!(next["metadata"]["generation"], 2);

        let status = prepare_update(
            def,
            &current,
            json!({"metadata": {"name": "web"}, "spec": {"replicas": 50}, "status": {"readyReplicas": 3}}),
            UpdateScope::Status,
        )
        .unwrap();
        assert_eq!(
            status["spec"]["replicas"], 1,
            "status endpoint ignores spec"
        );
        assert_eq!(status["status"]["readyReplicas"], 3);

        let err = prepare_update(
            def,
            &current,
            json!({"metadata": {"name": "db"}}),
            UpdateScope::Main,
        )
        .unwrap_err();
        assert_eq!(err.code, 400);
    }
}
