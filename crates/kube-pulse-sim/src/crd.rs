//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): what a CRD object
//! serves and the status the apiserver's CRD controllers would give it.
//!
//! Pure functions over the CRD's JSON. The store calls them under its lock
//! when a CRD is written (the catalogue then serves its resources, discovery
//! lists them) and deleted (its objects go, then its resources stop being
//! served). Custom objects are not validated against the CRD's schema.

use std::cmp::Ordering;

use serde_json::{Value, json};

use super::object::name_of;
use super::resources::ResourceDef;
use super::status::{ApiError, ApiResult};

/// The API group of CustomResourceDefinitions.
pub const GROUP: &str = "apiextensions.k8s.io";

/// Table key of the CRD objects themselves.
const TABLE: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// Whether `def` is the CustomResourceDefinition resource.
pub fn is_crd(def: &ResourceDef) -> bool {
    def.table_key() == TABLE
}

/// `spec.group` and `spec.names.plural` of a CRD object.
pub fn group_plural(crd: &Value) -> (&str, &str) {
    let text = |pointer: &str| crd.pointer(pointer).and_then(Value::as_str).unwrap_or("");
    (text("/spec/group"), text("/spec/names/plural"))
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The resources a CRD object serves, one per served version, in the
/// apiserver's version priority order (so the first is the preferred one);
/// 422 when the CRD is invalid.
pub fn served(crd_def: &ResourceDef, crd: &Value) -> ApiResult<Vec<ResourceDef>> {
    let name = name_of(crd);
    let invalid = |why: String| ApiError::invalid(crd_def, name, why);
    let (group, plural) = group_plural(crd);
    let names = &crd["spec"]["names"];
    let kind = names["kind"].as_str().unwrap_or("");
    if group.is_empty() || !group.contains('.') {
        return Err(invalid(format!(
            "spec.group: Invalid value: {group:?}: should be a domain with at least one dot"
        )));
    }
    if !is_dns_label(plural) {
        return Err(invalid(format!(
            "spec.names.plural: Invalid value: {plural:?}: a lowercase RFC 1123 label is required"
        )));
    }
    if kind.is_empty() {
        return Err(invalid("spec.names.kind: Required value".into()));
    }
    if name != format!("{plural}.{group}") {
        return Err(invalid(format!(
            "metadata.name: Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"
        )));
    }
    let namespaced = match crd["spec"]["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            return Err(invalid(format!(
                "spec.scope: Unsupported value: {:?}: supported values: \"Cluster\", \"Namespaced\"",
                other.unwrap_or("")
            )));
        }
    };
    let versions = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        return Err(invalid("spec.versions: Required value".into()));
    }
    let storage = versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count();
    if storage != 1 {
        return Err(invalid(
            "spec.versions: Invalid value: must have exactly one version marked as storage version"
                .into(),
        ));
    }
    let text_list = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let singular = names["singular"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let mut defs = Vec::new();
    for version in &versions {
        let version_name = version["name"].as_str().unwrap_or("");
        if !is_dns_label(version_name) {
            return Err(invalid(format!(
                "spec.versions[].name: Invalid value: {version_name:?}: a DNS-1035 label is required"
            )));
        }
        if version["served"].as_bool() != Some(true) {
            continue;
        }
        let subresources = &version["subresources"];
        defs.push(ResourceDef {
            group: group.into(),
            version: version_name.into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
            status_subresource: subresources.get("status").is_some_and(Value::is_object),
            scale_subresource: subresources.get("scale").is_some_and(Value::is_object),
            short_names: text_list(&names["shortNames"]),
            singular_name: singular.clone(),
            typed: None,
        });
    }
    defs.sort_by(|a, b| version_priority(&a.version, &b.version));
    Ok(defs)
}

/// Parses `v2`, `v1beta1`, `v1alpha3` into (major, stability, minor); stability
/// 2 for GA, 1 beta, 0 alpha.
fn parse_version(v: &str) -> Option<(u64, u8, u64)> {
    let rest = v.strip_prefix('v')?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let major: u64 = rest[..digits].parse().ok()?;
    let tail = &rest[digits..];
    if tail.is_empty() {
        return Some((major, 2, 0));
    }
    let (stability, minor) = if let Some(m) = tail.strip_prefix("beta") {
        (1, m)
    } else if let Some(m) = tail.strip_prefix("alpha") {
        (0, m)
    } else {
        return None;
    };
    Some((major, stability, minor.parse().ok()?))
}

/// Kubernetes version priority: GA before beta before alpha, higher numbers
/// first; other names after them, alphabetically.
pub fn version_priority(a: &str, b: &str) -> Ordering {
    match (parse_version(a), parse_version(b)) {
        (Some((ma, sa, na)), Some((mb, sb, nb))) => sb.cmp(&sa).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// The status the CRD controllers write: accepted names and the
/// `NamesAccepted` / `Established` conditions (false when a built-in resource
/// already has the plural). Condition times are kept while a condition holds.
pub fn status(crd: &Value, previous: Option<&Value>, conflict: bool, now: &str) -> Value {
    let names = &crd["spec"]["names"];
    let (_, plural) = group_plural(crd);
    let kind = names["kind"].as_str().unwrap_or("");
    let condition = |kind: &str, ok: bool, reason: &str, message: &str| {
        let status = if ok { "True" } else { "False" };
        let since = previous
            .and_then(|p| p["conditions"].as_array())
            .and_then(|c| {
                c.iter()
                    .find(|c| c["type"] == kind && c["status"] == status)
            })
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or(now);
        json!({"type": kind, "status": status, "lastTransitionTime": since, "reason": reason, "message": message})
    };
    let storage: Vec<&str> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .filter_map(|v| v["name"].as_str())
        .collect();
    if conflict {
        return json!({
            "conditions": [
                condition("NamesAccepted", false, "PluralConflict", &format!("\"{plural}\" is already in use")),
                condition("Established", false, "NotAccepted", "not all names are accepted"),
            ],
            "acceptedNames": {"plural": "", "kind": ""},
            "storedVersions": storage,
        });
    }
    let mut accepted = json!({
        "plural": plural,
        "singular": names["singular"].as_str().filter(|s| !s.is_empty()).map_or_else(|| kind.to_lowercase(), str::to_string),
        "kind": kind,
        "listKind": names["listKind"].as_str().map_or_else(|| format!("{kind}List"), str::to_string),
    });
    for key in ["shortNames", "categories"] {
        if names[key].as_array().is_some_and(|a| !a.is_empty()) {
            accepted[key] = names[key].clone();
        }
    }
    json!({
        "conditions": [
            condition("NamesAccepted", true, "NoConflicts", "no conflicts found"),
            condition("Established", true, "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": accepted,
        "storedVersions": storage,
    })
}

/// `spec.scope` cannot change once a CRD exists (its group and plural are
/// fixed by the name).
pub fn check_update(crd_def: &ResourceDef, current: &Value, next: &Value) -> ApiResult<()> {
    let scope = |o: &Value| o["spec"]["scope"].clone();
    if scope(current) != scope(next) {
        return Err(ApiError::invalid(
            crd_def,
            name_of(current),
            "spec.scope: Invalid value: field is immutable",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;

    fn crd(scope: &str, versions: Value) -> Value {
        json!({
            "metadata": {"name": "widgets.pulse.example.com"},
            "spec": {
                "group": "pulse.example.com",
                "scope": scope,
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                "versions": versions,
            },
        })
    }

    fn crd_def() -> ResourceDef {
        Catalog::new(vec![])
            .find(GROUP, "v1", "customresourcedefinitions")
            .unwrap()
            .clone()
    }

    #[test]
    fn served_versions_in_priority_order() {
        let obj = crd(
            "Namespaced",
            json!([
                {"name": "v1alpha1", "served": true, "storage": false},
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}},
                {"name": "v2beta1", "served": true, "storage": false},
                {"name": "v0", "served": false, "storage": false},
            ]),
        );
        let defs = served(&crd_def(), &obj).unwrap();
        let versions: Vec<&str> = defs.iter().map(|d| d.version.as_str()).collect();
        assert_eq!(versions, ["v1", "v2beta1", "v1alpha1"]);
        assert!(defs[0].status_subresource && !defs[1].status_subresource);
        assert_eq!(defs[0].short_names, ["wd"]);
        assert_eq!(defs[0].singular(), "widget");
        assert!(defs[0].namespaced);
    }

    #[test]
    fn invalid_crds_are_422() {
        let v1 = json!([{"name": "v1", "served": true, "storage": true}]);
        let mut cases = vec![
            crd("Everywhere", v1.clone()),
            crd("Cluster", json!([])),
            crd(
                "Cluster",
                json!([{"name": "v1", "served": true, "storage": false}]),
            ),
            crd(
                "Cluster",
                json!([{"name": "V1", "served": true, "storage": true}]),
            ),
        ];
        let mut renamed = crd("Cluster", v1.clone());
        renamed["metadata"]["name"] = json!("gadgets.pulse.example.com");
        cases.push(renamed);
        let mut no_group = crd("Cluster", v1.clone());
        no_group["spec"]["group"] = json!("local");
        cases.push(no_group);
        let mut no_kind = crd("Cluster", v1);
        no_kind["spec"]["names"]["kind"] = json!("");
        cases.push(no_kind);
        for case in cases {
            let err = served(&crd_def(), &case).unwrap_err();
            assert_eq!(err.code, 422, "{case}: {err}");
        }
    }

    #[test]
    fn status_accepts_names_and_keeps_condition_times() {
        let obj = crd(
            "Cluster",
            json!([{"name": "v1", "served": true, "storage": true}]),
        );
        let first = status(&obj, None, false, "2026-01-01T00:00:00Z");
        assert_eq!(first["acceptedNames"]["listKind"], "WidgetList");
        assert_eq!(first["acceptedNames"]["shortNames"], json!(["wd"]));
        assert_eq!(first["storedVersions"], json!(["v1"]));
        assert_eq!(first["conditions"][1]["type"], "Established");
        let again = status(&obj, Some(&first), false, "2026-02-02T00:00:00Z");
        assert_eq!(again, first);
        let conflict = status(&obj, Some(&first), true, "2026-02-02T00:00:00Z");
        assert_eq!(conflict["conditions"][0]["status"], "False");
        assert_eq!(
            conflict["conditions"][0]["lastTransitionTime"],
            "2026-02-02T00:00:00Z"
        );
    }

    #[test]
    fn version_priority_matches_kubernetes() {
        let mut versions = vec![
            "v1alpha1",
            "v11alpha2",
            "foo10",
            "v2",
            "v1",
            "v10beta3",
            "v12alpha1",
            "foo1",
            "v10",
            "v3beta1",
            "v10alpha1",
        ];
        versions.sort_by(|a, b| version_priority(a, b));
        assert_eq!(
            versions,
            [
                "v10",
                "v2",
                "v1",
                "v10beta3",
                "v3beta1",
                "v12alpha1",
                "v11alpha2",
                "v10alpha1",
                "v1alpha1",
                "foo1",
                "foo10"
            ]
        );
    }
}
