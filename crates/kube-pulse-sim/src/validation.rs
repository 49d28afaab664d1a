//! The field validation the apiserver applies to built-in objects, where a
//! client can get it wrong in practice and a stored mistake would break the
//! clients that read it (a typed client cannot decode a Deployment without
//! a selector): workloads' replicas, selector and template, a pod's
//! containers, an event's involved object. Pure, called by `object.rs` on
//! every create and update; a failure is 422 `Invalid` with its causes.

use serde_json::{Map, Value};

use super::resources::ResourceDef;
use super::status::{ApiError, ApiResult};

const REQUIRED: &str = "FieldValueRequired";
const INVALID: &str = "FieldValueInvalid";

/// Field errors: `(cause type, field, message)`.
type Errors = Vec<(&'static str, String, String)>;

fn required(errors: &mut Errors, field: &str) {
    errors.push((REQUIRED, field.into(), "Required value".into()));
}

/// Whether a `LabelSelector` (matchLabels, matchExpressions) selects `labels`.
fn selects(selector: &Value, labels: &Map<String, Value>) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let by_labels = selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    let by_expressions = selector["matchExpressions"].as_array().is_none_or(|es| {
        es.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|vs| vs.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e["operator"].as_str().unwrap_or("") {
                "In" => label(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                _ => false,
            }
        })
    });
    by_labels && by_expressions
}

/// Whether a selector has no requirement at all.
fn empty_selector(selector: &Value) -> bool {
    let none = |key: &str| selector[key].as_object().is_none_or(Map::is_empty);
    none("matchLabels")
        && selector["matchExpressions"]
            .as_array()
            .is_none_or(Vec::is_empty)
}

/// A pod spec's containers (`at` is the spec's field path).
fn containers(errors: &mut Errors, spec: &Value, at: &str) {
    let list = spec["containers"].as_array();
    if list.is_none_or(Vec::is_empty) {
        required(errors, &format!("{at}.containers"));
        return;
    }
    for (i, c) in list.into_iter().flatten().enumerate() {
        for key in ["name", "image"] {
            if c[key].as_str().is_none_or(str::is_empty) {
                required(errors, &format!("{at}.containers[{i}].{key}"));
            }
        }
    }
}

/// A workload's selector and pod template.
fn workload(errors: &mut Errors, obj: &Value) {
    let spec = &obj["spec"];
    let selector = &spec["selector"];
    if !selector.is_object() {
        required(errors, "spec.selector");
    } else if empty_selector(selector) {
        errors.push((
            INVALID,
            "spec.selector".into(),
            "Invalid value: \"{}\": empty selector is invalid for deployment".into(),
        ));
    }
    let template = &spec["template"];
    let labels = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if selector.is_object() && !empty_selector(selector) && !selects(selector, &labels) {
        errors.push((
            INVALID,
            "spec.template.metadata.labels".into(),
            format!(
                "Invalid value: {}: `selector` does not match template `labels`",
                Value::Object(labels)
            ),
        ));
    }
    containers(errors, &template["spec"], "spec.template.spec");
}

/// Checks a built-in object about to be stored; 422 with every field error.
pub fn validate(def: &ResourceDef, name: &str, obj: &Value) -> ApiResult<()> {
    if def.typed.is_some() {
        return Ok(());
    }
    let mut errors = Errors::new();
    if def.scale_subresource
        && let Some(replicas) = obj.pointer("/spec/replicas")
        && replicas.as_i64().is_none_or(|r| r < 0)
    {
        errors.push((
            INVALID,
            "spec.replicas".into(),
            format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        ));
    }
    match (def.group.as_str(), def.kind.as_str()) {
        ("apps", "Deployment" | "StatefulSet" | "ReplicaSet") => workload(&mut errors, obj),
        ("", "Pod") => containers(&mut errors, &obj["spec"], "spec"),
        ("", "Event") => {
            // An event about nothing: its involved object's namespace ("")
            // differs from the event's, as the apiserver words it.
            let namespace = obj.pointer("/metadata/namespace").and_then(Value::as_str);
            if !obj["involvedObject"].is_object()
                && namespace.is_some_and(|ns| !ns.is_empty() && ns != "default")
            {
                errors.push((
                    INVALID,
                    "involvedObject.namespace".into(),
                    "Invalid value: \"\": does not match event.namespace".into(),
                ));
            }
            if !obj["involvedObject"].is_object() {
                required(&mut errors, "involvedObject");
            }
        }
        _ => {}
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_fields(def, name, &errors))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resources::Catalog;

    #[test]
    fn built_in_objects_need_their_required_fields() {
        let catalog = Catalog::new(vec![]);
        let template = json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]}});
        let selector = json!({"matchLabels": {"app": "web"}});
        let cases = [
            (
                "deployments",
                json!({"spec": {"selector": selector, "template": template}}),
                vec![],
            ),
            (
                "deployments",
                json!({"spec": {"template": template}}),
                vec!["spec.selector"],
            ),
            (
                "statefulsets",
                json!({"spec": {"selector": selector}}),
                vec![
                    "spec.template.metadata.labels",
                    "spec.template.spec.containers",
                ],
            ),
            (
                "deployments",
                json!({"spec": {"selector": {"matchLabels": {"app": "api"}}, "template": template}}),
                vec!["spec.template.metadata.labels"],
            ),
            (
                "replicasets",
                json!({"spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
                    "template": template}}),
                vec![],
            ),
            (
                "deployments",
                json!({"spec": {"selector": {}, "template": template}}),
                vec!["spec.selector"],
            ),
            (
                "pods",
                json!({"spec": {"containers": [{"name": "c", "image": "i"}]}}),
                vec![],
            ),
            ("pods", json!({"spec": {}}), vec!["spec.containers"]),
            (
                "pods",
                json!({"spec": {"containers": []}}),
                vec!["spec.containers"],
            ),
            (
                "pods",
                json!({"spec": {"containers": [{"name": "c"}]}}),
                vec!["spec.containers[0].image"],
            ),
            (
                "events",
                json!({"metadata": {"namespace": "shop"}, "reason": "X"}),
                vec!["involvedObject.namespace", "involvedObject"],
            ),
            (
                "events",
                json!({"metadata": {"namespace": "shop"}, "involvedObject": {"kind": "Pod", "namespace": "shop"}}),
                vec![],
            ),
            ("configmaps", json!({}), vec![]),
        ];
        for (plural, obj, want) in cases {
            let group = if plural.ends_with("sets") || plural == "deployments" {
                "apps"
            } else {
                ""
            };
            let def = catalog.find(group, "v1", plural).unwrap();
            let fields: Vec<String> = match validate(def, "x", &obj) {
                Ok(()) => vec![],
                Err(e) => {
                    assert_eq!((e.code, e.reason), (422, "Invalid"), "{e:?}");
                    e.details.unwrap()["causes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c["field"].as_str().unwrap().to_string())
                        .collect()
                }
            };
            assert_eq!(fields, want, "{plural} {obj}");
        }
        let def = catalog.find("apps", "v1", "deployments").unwrap();
        let err = validate(def, "web", &json!({"spec": {"template": template}})).unwrap_err();
        assert_eq!(
            err.message,
            "Deployment.apps \"web\" is invalid: spec.selector: Required value"
        );
    }
}
