//! `metadata.managedFields`: who wrote which part of an object, and when.
//!
//! The API handlers name the writer of each create, update and patch (the
//! `fieldManager` parameter, else the User-Agent's product, as the apiserver
//! does); the store calls [`record`] under its lock when the write changes
//! the object. Each (manager, operation, subresource) has one entry whose
//! `time` is refreshed by every changing write and whose `fieldsV1` holds
//! the top-level fields the manager has written (for `metadata`: labels,
//! annotations, finalizers, ownerReferences) — coarser than the apiserver's
//! field sets, and fields are not taken over from other managers. A no-op
//! write changes nothing, as on the apiserver.

use serde_json::{Map, Value, json};

/// The kind of write, as `managedFields[].operation` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Update,
    Apply,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Update => "Update",
            Self::Apply => "Apply",
        }
    }
}

/// Who writes, how, and through which subresource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer {
    pub manager: String,
    pub operation: Operation,
    /// `status` for writes through `/status`.
    pub subresource: Option<&'static str>,
}

impl Writer {
    /// The writer of a request: `fieldManager`, else the User-Agent up to its
    /// first `/` (`kubectl`, `kube`); None when neither names anyone.
    pub fn of_request(
        field_manager: Option<&str>,
        user_agent: Option<&str>,
        operation: Operation,
        subresource: Option<&'static str>,
    ) -> Option<Self> {
        let manager = field_manager
            .filter(|m| !m.is_empty())
            .or_else(|| user_agent.and_then(|ua| ua.split('/').next()))
            .map(str::trim)
            .filter(|m| !m.is_empty())?;
        Some(Self {
            manager: manager.chars().take(128).collect(),
            operation,
            subresource,
        })
    }
}

/// Metadata fields a writer owns when it sets them.
const OWNED_METADATA: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];

/// The fields `next` sets differently from `previous` (all it sets on create).
fn touched(previous: Option<&Value>, next: &Value) -> Map<String, Value> {
    let differs =
        |a: Option<&Value>, b: Option<&Value>| b.is_some_and(|b| !b.is_null() && a != Some(b));
    let mut fields = Map::new();
    let mut metadata = Map::new();
    for key in OWNED_METADATA {
        let before = previous.and_then(|p| p["metadata"].get(key));
        if differs(before, next["metadata"].get(key)) {
            metadata.insert(format!("f:{key}"), json!({}));
        }
    }
    if !metadata.is_empty() {
        fields.insert("f:metadata".into(), Value::Object(metadata));
    }
    for (key, value) in next.as_object().into_iter().flatten() {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if differs(previous.and_then(|p| p.get(key)), Some(value)) {
            fields.insert(format!("f:{key}"), json!({}));
        }
    }
    fields
}

/// Merges field set `more` into `into` (one level of nesting is all there is).
fn merge(into: &mut Map<String, Value>, more: Map<String, Value>) {
    for (key, value) in more {
        match (into.get_mut(&key), value) {
            (Some(Value::Object(have)), Value::Object(add)) => {
                for (k, v) in add {
                    have.insert(k, v);
                }
            }
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

/// Records `writer` in `next`'s managedFields: its entry gets the fields
/// this write set and the time `now`. Writes that set nothing leave the
/// entries alone.
pub fn record(
    api_version: &str,
    previous: Option<&Value>,
    next: &mut Value,
    writer: &Writer,
    now: &str,
) {
    let fields = touched(previous, next);
    if fields.is_empty() {
        return;
    }
    let Some(meta) = next.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let entries = meta.entry("managedFields").or_insert_with(|| json!([]));
    if !entries.is_array() {
        *entries = json!([]);
    }
    let entries = entries.as_array_mut().expect("made an array");
    let subresource = writer.subresource.unwrap_or("");
    let position = entries.iter().position(|e| {
        e["manager"] == writer.manager.as_str()
            && e["operation"] == writer.operation.as_str()
            && e["subresource"].as_str().unwrap_or("") == subresource
    });
    let mut owned = position
        .and_then(|i| entries[i]["fieldsV1"].as_object().cloned())
        .unwrap_or_default();
    merge(&mut owned, fields);
    let mut entry = json!({
        "manager": writer.manager,
        "operation": writer.operation.as_str(),
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": owned,
    });
    if let Some(sub) = writer.subresource {
        entry["subresource"] = json!(sub);
    }
    match position {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(manager: &str, subresource: Option<&'static str>) -> Writer {
        Writer {
            manager: manager.into(),
            operation: Operation::Update,
            subresource,
        }
    }

    #[test]
    fn writer_of_a_request() {
        let cases = [
            (
                Some("kube-pulse"),
                Some("kubectl/v1.32"),
                Some("kube-pulse"),
            ),
            (None, Some("kubectl/v1.32.0 (linux/amd64)"), Some("kubectl")),
            (Some(""), Some("kube/5.0"), Some("kube")),
            (None, None, None),
            (None, Some(""), None),
        ];
        for (field_manager, user_agent, want) in cases {
            let got = Writer::of_request(field_manager, user_agent, Operation::Update, None);
            assert_eq!(
                got.map(|w| w.manager),
                want.map(str::to_string),
                "{field_manager:?} {user_agent:?}"
            );
        }
    }

    #[test]
    fn entries_per_manager_and_subresource_with_refreshed_times() {
        let created = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "labels": {"x": "1"}},
                             "spec": {"a": 1}});
        let mut next = created.clone();
        record(
            "v1",
            None,
            &mut next,
            &writer("kubectl", None),
            "2026-01-01T00:00:00Z",
        );
        let entries = next["metadata"]["managedFields"].clone();
        assert_eq!(
            entries,
            json!([{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {}}}])
        );

        // A status writer gets its own entry; writing again refreshes its time.
        let before = next.clone();
        next["status"] = json!({"healthy": true});
        record(
            "v1",
            Some(&before),
            &mut next,
            &writer("kube-pulse", Some("status")),
            "2026-01-01T00:00:05Z",
        );
        let before = next.clone();
        next["status"] = json!({"healthy": false});
        record(
            "v1",
            Some(&before),
            &mut next,
            &writer("kube-pulse", Some("status")),
            "2026-01-01T00:00:09Z",
        );
        let entries = next["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1]["subresource"], "status");
        assert_eq!(entries[1]["time"], "2026-01-01T00:00:09Z");
        assert_eq!(entries[1]["fieldsV1"], json!({"f:status": {}}));
        assert_eq!(
            entries[0]["time"], "2026-01-01T00:00:00Z",
            "other entries keep their time"
        );

        // The same manager through the main endpoint adds fields to its entry.
        let before = next.clone();
        next["metadata"]["annotations"] = json!({"n": "x"});
        record(
            "v1",
            Some(&before),
            &mut next,
            &writer("kubectl", None),
            "2026-01-01T00:00:10Z",
        );
        assert_eq!(
            next["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {}, "f:annotations": {}}, "f:spec": {}})
        );

        // A write that sets nothing changes no entry.
        let before = next.clone();
        record(
            "v1",
            Some(&before),
            &mut next,
            &writer("other", None),
            "2026-01-01T00:00:11Z",
        );
        assert_eq!(next, before);
    }
}
