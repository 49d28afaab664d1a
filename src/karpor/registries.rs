//! Karpor `SyncRegistry` objects → kube-pulse sync registries
//! (`types::SyncRegistry + Cluster labels ──▶ [registries] ──▶ union`).
//!
//! - Clusters: `spec.clusters` names, plus every Karpor cluster whose labels
//!   match `clusterLabelSelector`; `"*"` is every Karpor cluster (not the
//!   configuration file's members, which Karpor does not know).
//! - Resources: `apiVersion` → group and version, `resource`, `namespace`.
//!   One selector becomes the watch's label and field selectors
//!   (`fieldSelector.matchFields` pairs ANDed). Karpor ORs several
//!   selectors; a watch can only AND, so a rule with several different
//!   selectors is watched without any: the watch covers every object Karpor
//!   would sync (and more), its sync status is the one Karpor's informer
//!   would have, and its `objects` count is that of the whole resource.
//! - `resource: "*"` is a [`Wildcard`], expanded per member through the
//!   member's discovery ([`watchable`]): every resource of that group and
//!   version the member can list and watch.

use std::collections::BTreeMap;

use kube::discovery::{ApiCapabilities, ApiResource, verbs};

use super::selector;
use super::types::{Cluster, ResourceSyncRule, SyncRegistry as KarporRegistry};
use crate::sources::{SyncRegistry, SyncResource};
use crate::status::sync::Gvr;

/// A `resource: "*"` rule, to expand on each of its clusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wildcard {
    /// The Karpor registry's name.
    pub registry: String,
    /// The clusters it applies to.
    pub clusters: Vec<String>,
    /// Every resource of this group and version, with these selectors.
    pub template: SyncResource,
}

/// What the SyncRegistry objects give.
#[derive(Debug, Default)]
pub struct Registries {
    /// Registries with named resources.
    pub registries: Vec<SyncRegistry>,
    /// `resource: "*"` rules.
    pub wildcards: Vec<Wildcard>,
    /// Rules or selectors left out, each with why (logged by the caller).
    pub problems: Vec<String>,
}

/// Converts the registries; `clusters` are Karpor's Cluster objects (their
/// names for `"*"`, their labels for `clusterLabelSelector`).
pub fn convert(objects: &[KarporRegistry], clusters: &[Cluster]) -> Registries {
    let mut out = Registries::default();
    for object in objects {
        let name = object.metadata.name.clone().unwrap_or_default();
        let targets = target_clusters(&name, object, clusters, &mut out.problems);
        let mut resources = Vec::new();
        for (i, rule) in object.spec.sync_resources.iter().enumerate() {
            match resource(rule) {
                Ok(r) if r.gvr.resource == "*" => out.wildcards.push(Wildcard {
                    registry: name.clone(),
                    clusters: targets.clone(),
                    template: r,
                }),
                Ok(r) => resources.push(r),
                Err(why) => out.problems.push(format!(
                    "Karpor sync registry {name:?}, syncResources[{i}] is left out: {why}"
                )),
            }
        }
        if !object.spec.sync_resources_ref_name.is_empty() {
            out.problems.push(format!(
                "Karpor sync registry {name:?}: syncResourcesRefName {:?} is not followed; list the rules under syncResources",
                object.spec.sync_resources_ref_name
            ));
        }
        out.registries.push(SyncRegistry {
            name: Some(name),
            clusters: targets,
            resources,
        });
    }
    out
}

/// The Karpor clusters a registry applies to, by name, in name order.
fn target_clusters(
    name: &str,
    object: &KarporRegistry,
    clusters: &[Cluster],
    problems: &mut Vec<String>,
) -> Vec<String> {
    let known = || clusters.iter().filter_map(|c| c.metadata.name.clone());
    let mut targets: Vec<String> = if object.spec.clusters.iter().any(|c| c == "*") {
        known().collect()
    } else {
        object.spec.clusters.clone()
    };
    if let Some(label_selector) = &object.spec.cluster_label_selector {
        for cluster in clusters {
            let labels = cluster.metadata.labels.clone().unwrap_or_default();
            match selector::matches(label_selector, &labels) {
                Ok(true) => targets.extend(cluster.metadata.name.clone()),
                Ok(false) => {}
                Err(why) => {
                    problems.push(format!(
                        "Karpor sync registry {name:?}: clusterLabelSelector is ignored: {why}"
                    ));
                    break;
                }
            }
        }
    }
    targets.sort();
    targets.dedup();
    targets
}

/// One sync rule as a resource to watch.
fn resource(rule: &ResourceSyncRule) -> Result<SyncResource, String> {
    let (group, version) = match rule.api_version.split_once('/') {
        Some((g, v)) if !g.is_empty() && !v.is_empty() && !v.contains('/') => (g, v),
        None if !rule.api_version.is_empty() => ("", rule.api_version.as_str()),
        _ => {
            return Err(format!(
                "apiVersion {:?} is not VERSION or GROUP/VERSION",
                rule.api_version
            ));
        }
    };
    if rule.resource.is_empty() || rule.resource.contains('/') {
        return Err(format!(
            "resource {:?} is not a plural resource name or \"*\"",
            rule.resource
        ));
    }
    let (label_selector, field_selector) = selectors(rule)?;
    Ok(SyncResource {
        gvr: Gvr::new(group, version, &rule.resource),
        namespace: (!rule.namespace.is_empty()).then(|| rule.namespace.clone()),
        label_selector,
        field_selector,
    })
}

/// The watch's (label, field) selectors of a rule (see the module header for several).
fn selectors(rule: &ResourceSyncRule) -> Result<(Option<String>, Option<String>), String> {
    let mut rendered = Vec::new();
    for s in &rule.selectors {
        let labels = match &s.label_selector {
            Some(l) => selector::label_query(l)?,
            None => None,
        };
        let fields = s
            .field_selector
            .as_ref()
            .and_then(|f| selector::field_query(&f.match_fields));
        rendered.push((labels, fields));
    }
    rendered.dedup();
    match rendered.as_slice() {
        [] => Ok((None, None)),
        [one] => Ok(one.clone()),
        _ => Ok((None, None)),
    }
}

/// The plurals of a group/version's resources a member can list and watch
/// (kube-rs keeps subresources such as `pods/log` out of this list).
pub fn watchable(resources: &[(ApiResource, ApiCapabilities)]) -> Vec<String> {
    let mut plurals: Vec<String> = resources
        .iter()
        .filter(|(_, caps)| {
            caps.supports_operation(verbs::LIST) && caps.supports_operation(verbs::WATCH)
        })
        .map(|(ar, _)| ar.plural.clone())
        .collect();
    plurals.sort();
    plurals
}

/// Wildcards expanded with each member's watchable plurals (`discovered`:
/// cluster → `group/version` → plurals), as one registry per wildcard and
/// cluster. A cluster with nothing discovered yet gets nothing.
pub fn expand(
    wildcards: &[Wildcard],
    discovered: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
) -> Vec<SyncRegistry> {
    let mut out = Vec::new();
    for w in wildcards {
        let gv = group_version(&w.template.gvr);
        for cluster in &w.clusters {
            let Some(plurals) = discovered.get(cluster).and_then(|d| d.get(&gv)) else {
                continue;
            };
            let resources = plurals
                .iter()
                .map(|plural| SyncResource {
                    gvr: Gvr::new(&w.template.gvr.group, &w.template.gvr.version, plural),
                    ..w.template.clone()
                })
                .collect();
            out.push(SyncRegistry {
                name: Some(format!("{} ({gv}/*)", w.registry)),
                clusters: vec![cluster.clone()],
                resources,
            });
        }
    }
    out
}

/// `apps/v1`, `v1`: how a wildcard's group/version is keyed.
pub fn group_version(gvr: &Gvr) -> String {
    if gvr.group.is_empty() {
        gvr.version.clone()
    } else {
        format!("{}/{}", gvr.group, gvr.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::discovery::Scope;
    use serde_json::json;

    fn clusters() -> Vec<Cluster> {
        serde_json::from_value(json!([
            {"metadata": {"name": "prod", "labels": {"env": "prod"}}},
            {"metadata": {"name": "dev", "labels": {"env": "dev"}}},
            {"metadata": {"name": "edge"}}
        ]))
        .unwrap()
    }

    fn registry(spec: serde_json::Value) -> KarporRegistry {
        serde_json::from_value(json!({"metadata": {"name": "r"}, "spec": spec})).unwrap()
    }

    #[test]
    fn clusters_come_from_names_star_and_labels() {
        // (spec, clusters)
        let cases = [
            (json!({"clusters": ["*"]}), vec!["dev", "edge", "prod"]),
            (json!({"clusters": ["prod", "gone"]}), vec!["gone", "prod"]),
            (
                json!({"clusterLabelSelector": {"matchLabels": {"env": "prod"}}}),
                vec!["prod"],
            ),
            (
                json!({"clusters": ["edge"], "clusterLabelSelector": {"matchExpressions": [
                    {"key": "env", "operator": "Exists"}]}}),
                vec!["dev", "edge", "prod"],
            ),
            (json!({}), vec![]),
        ];
        for (spec, want) in cases {
            let out = convert(&[registry(spec.clone())], &clusters());
            assert_eq!(out.registries[0].clusters, want, "{spec}");
            assert!(out.problems.is_empty(), "{spec}: {:?}", out.problems);
        }
        let bad = registry(json!({"clusters": ["dev"], "clusterLabelSelector": {
            "matchExpressions": [{"key": "env", "operator": "Gt"}]}}));
        let out = convert(&[bad], &clusters());
        assert_eq!(out.registries[0].clusters, ["dev"]);
        assert!(
            out.problems[0].contains("clusterLabelSelector"),
            "{:?}",
            out.problems
        );
    }

    #[test]
    fn rules_become_resources_with_selectors() {
        let rule =
            |v: serde_json::Value| -> ResourceSyncRule { serde_json::from_value(v).unwrap() };
        // (rule, group/version/resource, namespace, label selector, field selector)
        let cases = [
            (
                json!({"apiVersion": "v1", "resource": "pods"}),
                "core/v1/pods",
                None,
                None,
                None,
            ),
            (
                json!({"apiVersion": "apps/v1", "resource": "deployments", "namespace": "shop",
                       "selectors": [{"labelSelector": {"matchLabels": {"tier": "web"}},
                                      "fieldSelector": {"matchFields": {"metadata.name": "web"}}}]}),
                "apps/v1/deployments",
                Some("shop"),
                Some("tier=web"),
                Some("metadata.name=web"),
            ),
            (
                json!({"apiVersion": "v1", "resource": "services", "selectors": [
                    {"labelSelector": {"matchLabels": {"a": "1"}}},
                    {"labelSelector": {"matchLabels": {"a": "1"}}}]}),
                "core/v1/services",
                None,
                Some("a=1"),
                None,
            ),
            // Several different selectors are ORed: watched without any.
            (
                json!({"apiVersion": "v1", "resource": "services", "selectors": [
                    {"labelSelector": {"matchLabels": {"a": "1"}}},
                    {"fieldSelector": {"matchFields": {"metadata.namespace": "x"}}}]}),
                "core/v1/services",
                None,
                None,
                None,
            ),
        ];
        for (value, path, namespace, labels, fields) in cases {
            let r = resource(&rule(value.clone())).unwrap();
            assert_eq!(r.gvr.path(), path, "{value}");
            assert_eq!(r.namespace.as_deref(), namespace, "{value}");
            assert_eq!(r.label_selector.as_deref(), labels, "{value}");
            assert_eq!(r.field_selector.as_deref(), fields, "{value}");
        }
        for bad in [
            json!({"apiVersion": "", "resource": "pods"}),
            json!({"apiVersion": "a/b/c", "resource": "pods"}),
            json!({"apiVersion": "v1", "resource": ""}),
            json!({"apiVersion": "v1", "resource": "pods",
                   "selectors": [{"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt"}]}}]}),
        ] {
            assert!(resource(&rule(bad.clone())).is_err(), "{bad}");
        }
        let out = convert(
            &[registry(json!({"clusters": ["*"], "syncResources": [
                {"apiVersion": "v1", "resource": "pods"},
                {"apiVersion": "", "resource": "x"},
                {"apiVersion": "apps/v1", "resource": "*"}]}))],
            &clusters(),
        );
        assert_eq!(out.registries[0].resources.len(), 1);
        assert_eq!(out.problems.len(), 1);
        assert!(
            out.problems[0].contains("syncResources[1]"),
            "{:?}",
            out.problems
        );
        assert_eq!(out.wildcards.len(), 1);
        assert_eq!(out.wildcards[0].clusters, ["dev", "edge", "prod"]);
    }

    #[test]
    fn wildcards_expand_to_each_members_watchable_resources() {
        let caps = |ops: &[&str]| ApiCapabilities {
            scope: Scope::Namespaced,
            subresources: vec![],
            operations: ops.iter().map(|s| s.to_string()).collect(),
        };
        let ar = |plural: &str| ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: "apps/v1".into(),
            kind: String::new(),
            plural: plural.into(),
        };
        let served = [
            (ar("deployments"), caps(&["list", "watch", "get"])),
            (ar("replicasets"), caps(&["list", "watch"])),
            (ar("controllerrevisions"), caps(&["get"])),
        ];
        assert_eq!(watchable(&served), ["deployments", "replicasets"]);
        let wildcard = Wildcard {
            registry: "r".into(),
            clusters: vec!["prod".into(), "dev".into()],
            template: SyncResource {
                namespace: Some("shop".into()),
                ..SyncResource::all("apps", "v1", "*")
            },
        };
        let mut discovered = BTreeMap::new();
        discovered.insert(
            "prod".to_string(),
            BTreeMap::from([("apps/v1".to_string(), watchable(&served))]),
        );
        let out = expand(&[wildcard], &discovered);
        assert_eq!(out.len(), 1, "dev has nothing discovered yet");
        assert_eq!(out[0].clusters, ["prod"]);
        let paths: Vec<String> = out[0].resources.iter().map(|r| r.gvr.path()).collect();
        assert_eq!(paths, ["apps/v1/deployments", "apps/v1/replicasets"]);
        assert!(
            out[0]
                .resources
                .iter()
                .all(|r| r.namespace.as_deref() == Some("shop"))
        );
    }
}
