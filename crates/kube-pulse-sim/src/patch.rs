//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), the
//! strategic merge patch kubectl sends, and server-side apply (approximated).
//!
//! Pure functions: current object + patch document → requested object.

use serde_json::{Map, Value};

use super::status::{ApiError, ApiResult};

/// The patch flavours of the `Content-Type` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchKind {
    /// Maps a `Content-Type` to a patch kind (parameters ignored).
    pub fn from_content_type(content_type: &str) -> ApiResult<Self> {
        let media = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/json-patch+json" => Ok(Self::Json),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(Self::Apply),
            _ => Err(ApiError::unsupported_media_type(content_type)),
        }
    }
}

/// Parses a patch body (YAML for apply, JSON otherwise).
pub fn parse_body(kind: PatchKind, body: &[u8]) -> ApiResult<Value> {
    let parsed: Result<Value, String> = match kind {
        PatchKind::Apply => serde_yaml_ng::from_slice(body).map_err(|e| e.to_string()),
        _ => serde_json::from_slice(body).map_err(|e| e.to_string()),
    };
    parsed.map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

/// Applies a patch document to `current`.
pub fn apply(kind: PatchKind, current: &Value, patch: &Value) -> ApiResult<Value> {
    let mut doc = current.clone();
    match kind {
        PatchKind::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("merge patch must be a JSON object"));
            }
            json_patch::merge(&mut doc, patch);
        }
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut doc, &ops).map_err(|e| {
                ApiError::new(422, "Invalid", format!("the JSON patch failed: {e}"))
            })?;
        }
        PatchKind::Strategic | PatchKind::Apply => {
            let Value::Object(p) = patch else {
                return Err(ApiError::bad_request(
                    "strategic merge patch must be a JSON object",
                ));
            };
            doc = strategic_merge(Some(&doc), p).unwrap_or(Value::Null);
        }
    }
    if !doc.is_object() {
        return Err(ApiError::bad_request("the patch removed the whole object"));
    }
    Ok(doc)
}

/// Merge key of list fields that the built-in types merge by key.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets" => Some("name"),
        "ports" => Some("containerPort"),
        "volumeMounts" => Some("mountPath"),
        "conditions" => Some("type"),
        _ => None,
    }
}

/// Primitive lists merged as sets.
fn is_set_list(field: &str) -> bool {
    field == "finalizers"
}

/// Strategic merge of one map; None means "delete this map".
fn strategic_merge(target: Option<&Value>, patch: &Map<String, Value>) -> Option<Value> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("delete") => return None,
        Some("replace") => {
            let mut replaced = patch.clone();
            replaced.remove("$patch");
            return Some(Value::Object(replaced));
        }
        _ => {}
    }
    let mut out = match target {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        match value {
            Value::Null => {
                out.remove(key);
            }
            Value::Object(inner) => match strategic_merge(out.get(key), inner) {
                Some(merged) => {
                    out.insert(key.clone(), merged);
                }
                None => {
                    out.remove(key);
                }
            },
            Value::Array(items) => {
                let merged = match (out.get(key), merge_key(key)) {
                    (Some(Value::Array(existing)), Some(mk)) => merge_list(existing, items, mk),
                    (Some(Value::Array(existing)), None) if is_set_list(key) => {
                        let mut set = existing.clone();
                        for item in items {
                            if !set.contains(item) {
                                set.push(item.clone());
                            }
                        }
                        set
                    }
                    (_, Some(mk)) => merge_list(&[], items, mk),
                    _ => items.clone(),
                };
                out.insert(key.clone(), Value::Array(merged));
            }
            other => {
                out.insert(key.clone(), other.clone());
            }
        }
    }
    Some(Value::Object(out))
}

fn merge_list(existing: &[Value], patch: &[Value], key: &str) -> Vec<Value> {
    let mut out: Vec<Value> = existing.to_vec();
    for item in patch {
        let Some(obj) = item.as_object() else {
            out.push(item.clone());
            continue;
        };
        let id = obj.get(key);
        let pos = id.and_then(|id| out.iter().position(|e| e.get(key) == Some(id)));
        match (pos, strategic_merge(pos.map(|p| &out[p]), obj)) {
            (Some(p), Some(merged)) => out[p] = merged,
            (Some(p), None) => {
                out.remove(p);
            }
            (None, Some(merged)) => out.push(merged),
            (None, None) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "metadata": {"name": "web", "labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "app", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "sidecar", "image": "envoy:1"}
            ]}}}
        })
    }

    #[test]
    fn content_types() {
        let cases = [
            ("application/merge-patch+json", Some(PatchKind::Merge)),
            (
                "application/json-patch+json; charset=utf-8",
                Some(PatchKind::Json),
            ),
            (
                "application/strategic-merge-patch+json",
                Some(PatchKind::Strategic),
            ),
            ("application/apply-patch+yaml", Some(PatchKind::Apply)),
            ("application/json", None),
            ("", None),
        ];
        for (ct, want) in cases {
            assert_eq!(PatchKind::from_content_type(ct).ok(), want, "{ct}");
        }
        assert_eq!(
            PatchKind::from_content_type("text/plain").unwrap_err().code,
            415
        );
    }

    #[test]
    fn merge_patch_replaces_lists() {
        let out = apply(
            PatchKind::Merge,
            &deployment(),
            &json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}, "metadata": {"labels": {"a": null}}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], 3);
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert!(out["metadata"]["labels"].get("a").is_none());
        assert!(apply(PatchKind::Merge, &deployment(), &json!([1])).is_err());
    }

    #[test]
    fn strategic_patch_merges_containers_by_name() {
        let out = apply(
            PatchKind::Strategic,
            &deployment(),
            &json!({
                "metadata": {"finalizers": ["y", "x"]},
                "spec": {"template": {"spec": {
                    "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
                    "containers": [{"name": "app", "image": "nginx:2"}, {"name": "sidecar", "$patch": "delete"}, {"name": "new", "image": "busybox"}]
                }}}
            }),
        )
        .unwrap();
        let containers = out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        let names: Vec<&str> = containers
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["app", "new"]);
        assert_eq!(containers[0]["image"], "nginx:2");
        assert_eq!(
            containers[0]["env"][0]["name"], "A",
            "unpatched fields survive"
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["x", "y"]));
        assert!(
            out["spec"]["template"]["spec"]
                .get("$setElementOrder/containers")
                .is_none()
        );
    }

    #[test]
    fn json_patch_and_errors() {
        let out = apply(
            PatchKind::Json,
            &deployment(),
            &json!([{"op": "replace", "path": "/spec/replicas", "value": 5}]),
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], 5);
        let err = apply(
            PatchKind::Json,
            &deployment(),
            &json!([{"op": "test", "path": "/spec/replicas", "value": 9}]),
        );
        assert_eq!(err.unwrap_err().code, 422);
        let err = apply(PatchKind::Json, &deployment(), &json!({"op": "nope"}));
        assert_eq!(err.unwrap_err().code, 400);
        assert_eq!(
            parse_body(PatchKind::Merge, b"{nope").unwrap_err().code,
            400
        );
        assert_eq!(
            parse_body(PatchKind::Apply, b"spec:\n  replicas: 2\n").unwrap()["spec"]["replicas"],
            2
        );
    }
}
