//! Resources served the way a typed Go apiserver serves them (an aggregated
//! apiserver built on `k8s.io/apiserver`'s generic registry, as Karpor's is),
//! rather than as CRDs: the store asks here what its strategy says.
//!
//! Pure functions over JSON; the store calls them under its lock. The
//! strategy of every typed kind here sets `AllowUnconditionalUpdate` to
//! false, so a replace (PUT) without `metadata.resourceVersion` is refused
//! with the generic registry's 422; a PATCH carries the stored
//! resourceVersion and is unaffected. Every write goes through the kind's Go
//! type (`schema/`): unknown fields are dropped, spec and status alike.
//! The schemas are Karpor 0.6's (`schema/karpor.rs`), and which one a
//! resource stores is its [`TypedKind`] (`schema/kinds.rs`).

use serde_json::{Value, json};

use super::resources::ResourceDef;
use super::schema;
pub use super::schema::TypedKind;
use super::status::{ApiError, ApiResult};

/// Passes an object to be stored through its Go type: what the typed
/// apiserver would keep of it (a no-op for other resources). A value of the
/// wrong type is 400, as the apiserver's decoder answers.
pub fn normalize(def: &ResourceDef, object: &mut Value) -> ApiResult<()> {
    let Some(typed) = def.typed else {
        return Ok(());
    };
    let mut fields = schema::normalize(typed.schema(), object).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {why}",
            kind = def.kind,
            version = def.version,
            why = e.0
        ))
    })?;
    let Some(root) = object.as_object_mut() else {
        return Err(ApiError::bad_request("the object must be a JSON object"));
    };
    for key in ["apiVersion", "kind", "metadata"] {
        if let Some(value) = root.remove(key) {
            fields.insert(key.to_string(), value);
        }
    }
    *root = fields;
    Ok(())
}

/// The field manager Karpor's own writes carry.
pub const KARPOR_MANAGER: &str = "karpor";

/// What Karpor #831 writes onto a Cluster it has just created (its
/// `ClusterManager.CreateCluster`: `meta.SetStatusCondition` of `Validated`
/// and `ClusterHealthy`, `apiserver` from the endpoint, `healthy`), as
/// `now`; None for every other kind and for Karpor 0.6's schema.
pub fn status_on_create(def: &ResourceDef, object: &Value, now: &str) -> Option<Value> {
    if !matches!(
        def.typed,
        Some(TypedKind::KarporCluster {
            conditions: true,
            ..
        })
    ) {
        return None;
    }
    let condition = |kind: &str, reason: &str| json!({"type": kind, "status": "True", "lastTransitionTime": now, "reason": reason, "message": ""});
    let mut status = object.get("status").cloned().unwrap_or_else(|| json!({}));
    status["healthy"] = json!(true);
    status["apiserver"] = object
        .pointer("/spec/access/endpoint")
        .cloned()
        .unwrap_or(Value::Null);
    status["conditions"] = json!([
        condition("Validated", "Validated"),
        condition("ClusterHealthy", "Healthy"),
    ]);
    Some(status)
}

/// Applies the request's `fieldValidation` to a typed object about to be
/// written (`body`: the request body, or the result of a patch): with
/// `Strict`, unknown fields are 400 in the typed apiserver's words; with
/// `Warn` (the server's default) they are returned as warnings; with
/// `Ignore` nothing is said. Either way, the write drops them.
pub fn check_fields(def: &ResourceDef, body: &Value, mode: Option<&str>) -> ApiResult<Vec<String>> {
    let Some(typed) = def.typed else {
        return Ok(Vec::new());
    };
    let unknown = schema::unknown_fields(typed.schema(), body);
    if unknown.is_empty() || mode == Some("Ignore") {
        return Ok(Vec::new());
    }
    let named: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    if mode == Some("Strict") {
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            named.join(", "),
            kind = def.kind,
            version = def.version,
        )));
    }
    Ok(named)
}

/// Refuses an unconditional replace of a typed resource (its strategy does
/// not allow one), in the words of the generic registry.
pub fn check_update_precondition(def: &ResourceDef, name: &str, body: &Value) -> ApiResult<()> {
    if def.typed.is_none() {
        return Ok(());
    }
    let resource_version = body
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !resource_version.is_empty() {
        return Ok(());
    }
    let why = "Invalid value: 0x0: must be specified for an update";
    let mut err = ApiError::new(
        422,
        "Invalid",
        format!(
            "{} \"{name}\" is invalid: metadata.resourceVersion: {why}",
            def.group_resource()
        ),
    );
    err.details = Some(json!({
        "name": name,
        "group": def.group,
        "kind": def.qualified_plural(),
        "causes": [{"reason": "FieldValueInvalid", "message": why, "field": "metadata.resourceVersion"}],
    }));
    Err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(typed: Option<TypedKind>) -> ResourceDef {
        ResourceDef {
            namespaced: false,
            typed,
            ..ResourceDef::custom(
                "search.karpor.io",
                "v1beta1",
                "syncclusterresources",
                "SyncRegistry",
            )
        }
    }

    fn normalized(typed: TypedKind, object: Value) -> Value {
        let mut object = object;
        normalize(&def(Some(typed)), &mut object).unwrap();
        object
    }

    #[test]
    fn spec_mode_is_kept_only_by_karpor_836s_schema() {
        let written = json!({"spec": {"mode": "push", "access": {"endpoint": "https://edge"}}});
        // (conditions, push_mode, spec.mode as stored)
        let cases = [
            (false, false, Value::Null),
            (true, false, Value::Null),
            (false, true, json!("push")),
            (true, true, json!("push")),
        ];
        for (conditions, push_mode, mode) in cases {
            let typed = TypedKind::KarporCluster {
                conditions,
                push_mode,
            };
            let got = normalized(typed, written.clone());
            assert_eq!(got["spec"]["mode"], mode, "{typed:?}");
            assert_eq!(got["spec"]["access"]["endpoint"], "https://edge");
        }
        let pulled = normalized(
            TypedKind::KarporCluster {
                conditions: false,
                push_mode: true,
            },
            json!({"spec": {"access": {"endpoint": "https://a"}}}),
        );
        assert!(pulled["spec"].get("mode").is_none(), "omitempty: {pulled}");
    }

    #[test]
    fn cluster_status_keeps_only_karpor_fields() {
        let conditions = json!([{"type": "Ready", "status": "False", "reason": "Disconnected",
                                 "message": "refused", "lastTransitionTime": "2026-01-01T00:00:00Z",
                                 "severity": "high"}]);
        let written = json!({
            "apiVersion": "cluster.karpor.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "prod", "resourceVersion": "3"},
            "spec": {"provider": "kubernetes", "access": {"endpoint": "https://a", "insecure": false,
                     "credential": {"type": "ServiceAccountToken", "serviceAccountToken": "t", "password": "x"}},
                     "region": "eu"},
            "status": {"healthy": true, "conditions": conditions, "phase": "Ready"},
            "extra": {"a": 1},
        });
        let cases = [
            (
                TypedKind::KarporCluster {
                    conditions: false,
                    push_mode: false,
                },
                json!({"healthy": true}),
            ),
            (
                TypedKind::KarporCluster {
                    conditions: true,
                    push_mode: false,
                },
                json!({"healthy": true, "conditions": [{"type": "Ready", "status": "False",
                       "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Disconnected",
                       "message": "refused"}]}),
            ),
        ];
        for (typed, status) in cases {
            let got = normalized(typed, written.clone());
            assert_eq!(got["status"], status, "{typed:?}");
            assert_eq!(
                got["spec"],
                json!({"provider": "kubernetes", "access": {"endpoint": "https://a", "insecure": false,
                       "credential": {"type": "ServiceAccountToken", "serviceAccountToken": "t"}},
                       "description": "", "displayName": ""})
            );
            assert_eq!(got["metadata"], written["metadata"]);
            assert!(got.get("extra").is_none());
        }
        // healthy: false is Go's zero value, which omitempty drops.
        let unhealthy = normalized(
            TypedKind::KarporCluster {
                conditions: false,
                push_mode: false,
            },
            json!({"status": {"healthy": false}}),
        );
        assert_eq!(unhealthy["status"], json!({}));
    }

    #[test]
    fn sync_registry_status_in_karpors_types() {
        let empty = normalized(
            TypedKind::KarporSyncRegistry,
            json!({"metadata": {"name": "r"}}),
        );
        assert_eq!(
            empty,
            json!({"metadata": {"name": "r"}, "spec": {},
                   "status": {"clusters": null, "lastTransitionTime": null}})
        );
        let written = normalized(
            TypedKind::KarporSyncRegistry,
            json!({"spec": {"clusters": ["*"], "syncResources": [{"apiVersion": "v1", "resource": "pods",
                            "selectors": [{"fieldSelector": {"matchFields": {"spec.nodeName": "n1"}}}],
                            "bogus": 1}]},
                   "status": {"lastTransitionTime": "2026-01-01T00:00:00Z", "phase": "x",
                              "clusters": [{"cluster": "prod", "status": "Syncing", "extra": 1,
                                  "resources": [{"apiVersion": "v1", "kind": "Pod", "status": "Error",
                                                 "reason": "NotServed", "lastTransitionTime": "2026-01-01T00:00:00Z",
                                                 "since": "x"}]}]}}),
        );
        assert_eq!(
            written["spec"]["syncResources"],
            json!([{"apiVersion": "v1", "resource": "pods",
                    "selectors": [{"fieldSelector": {"matchFields": {"spec.nodeName": "n1"}}}]}])
        );
        assert_eq!(
            written["status"],
            json!({"clusters": [{"cluster": "prod", "status": "Syncing",
                   "resources": [{"apiVersion": "v1", "kind": "Pod", "status": "Error", "reason": "NotServed",
                                  "lastTransitionTime": "2026-01-01T00:00:00Z"}]}],
                   "lastTransitionTime": "2026-01-01T00:00:00Z"})
        );
        let err = normalize(
            &def(Some(TypedKind::KarporSyncRegistry)),
            &mut json!({"status": {"clusters": "prod"}}),
        )
        .unwrap_err();
        assert_eq!(err.code, 400);
        assert!(err.message.starts_with("SyncRegistry in version \"v1beta1\" cannot be handled as a SyncRegistry: json: cannot unmarshal string"), "{}", err.message);
        // Untyped resources are left alone.
        let mut free = json!({"status": {"anything": 1}});
        normalize(&def(None), &mut free).unwrap();
        assert_eq!(free, json!({"status": {"anything": 1}}));
    }

    #[test]
    fn field_validation_modes() {
        let typed = def(Some(TypedKind::KarporSyncRegistry));
        let body = json!({"spec": {"clusters": ["*"], "region": "eu"}, "status": {"phase": "x"}});
        let warnings = vec![
            "unknown field \"spec.region\"".to_string(),
            "unknown field \"status.phase\"".to_string(),
        ];
        assert_eq!(check_fields(&typed, &body, None).unwrap(), warnings);
        assert_eq!(check_fields(&typed, &body, Some("Warn")).unwrap(), warnings);
        assert!(
            check_fields(&typed, &body, Some("Ignore"))
                .unwrap()
                .is_empty()
        );
        let strict = check_fields(&typed, &body, Some("Strict")).unwrap_err();
        assert_eq!(strict.code, 400);
        assert_eq!(
            strict.message,
            "SyncRegistry in version \"v1beta1\" cannot be handled as a SyncRegistry: strict decoding error: \
             unknown field \"spec.region\", unknown field \"status.phase\""
        );
        let known = json!({"spec": {"clusters": ["*"]}});
        assert!(
            check_fields(&typed, &known, Some("Strict"))
                .unwrap()
                .is_empty()
        );
        // Untyped resources keep whatever they are given.
        assert!(
            check_fields(&def(None), &body, Some("Strict"))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn typed_replaces_need_a_resource_version() {
        let with_rv = json!({"metadata": {"name": "r", "resourceVersion": "7"}});
        let without = json!({"metadata": {"name": "r"}});
        let empty = json!({"metadata": {"name": "r", "resourceVersion": ""}});
        let cases = [
            (None, &without, None),
            (Some(TypedKind::KarporSyncRegistry), &with_rv, None),
            (Some(TypedKind::KarporSyncRegistry), &without, Some(422)),
            (Some(TypedKind::KarporSyncRegistry), &empty, Some(422)),
        ];
        for (typed, body, code) in cases {
            let got = check_update_precondition(&def(typed), "r", body)
                .err()
                .map(|e| e.code);
            assert_eq!(got, code, "{typed:?} {body}");
        }
        let err =
            check_update_precondition(&def(Some(TypedKind::KarporSyncRegistry)), "r", &without)
                .unwrap_err();
        assert_eq!(
            err.message,
            "syncregistries.search.karpor.io \"r\" is invalid: metadata.resourceVersion: \
             Invalid value: 0x0: must be specified for an update"
        );
        assert_eq!(err.details.unwrap()["kind"], "syncregistries");
    }
}
