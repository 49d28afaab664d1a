//! The resource catalogue of a simulated cluster: which group/version/resource
//! exists, its kind, scope, verbs and subresources.
//!
//! Built-ins cover what kube-pulse watches and acts on (namespaces, pods,
//! configmaps, deployments, statefulsets) and what Karpor's default sync
//! registry names (nodes, services, secrets, replicasets, volumes, ingresses,
//! PodDisruptionBudgets); a simulated Karpor apiserver serves its own set
//! (`karpor_api/`); extra resources (custom resources for sync registries or a
//! task store) are registered at start, and
//! CustomResourceDefinition objects add and remove resources while the
//! cluster runs (`crd.rs`).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::schema::TypedKind;

/// One served resource (a single version of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDef {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    pub version: String,
    /// Plural, lower-case resource name used in paths (`deployments`).
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
    /// Whether `spec` and `status` are split: `/status` exists, spec changes bump
    /// `metadata.generation`, and the main endpoint ignores status changes.
    #[serde(default)]
    pub status_subresource: bool,
    /// Whether `/scale` exists (apps workloads).
    #[serde(default)]
    pub scale_subresource: bool,
    #[serde(default)]
    pub short_names: Vec<String>,
    /// Singular name when it is not the lower-case kind (a CRD's `names.singular`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub singular_name: Option<String>,
    /// Served as a typed Go apiserver serves its types (not as a CRD): its
    /// strategy and schema (`typed.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typed: Option<TypedKind>,
}

impl ResourceDef {
    /// A namespaced custom resource with a status subresource.
    pub fn custom(group: &str, version: &str, plural: &str, kind: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced: true,
            status_subresource: true,
            scale_subresource: false,
            short_names: vec![],
            singular_name: None,
            typed: None,
        }
    }

    /// `apiVersion` as written in objects: `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `deployments.apps`, or `namespaces` for the core group, as in error messages.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.qualified_plural().to_string()
        } else {
            format!("{}.{}", self.qualified_plural(), self.group)
        }
    }

    /// The resource name error messages use: the plural, except for a typed
    /// resource registered under another name than its path.
    pub fn qualified_plural(&self) -> &str {
        match self.typed {
            Some(typed) => typed.qualified_plural(),
            None => &self.plural,
        }
    }

    /// Key of the object table; versions of one resource share it.
    pub fn table_key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    /// Key of the request counters: `core/pods`, `apps/deployments`.
    pub fn stats_key(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("{group}/{}", self.plural)
    }

    pub fn singular(&self) -> String {
        self.singular_name
            .clone()
            .unwrap_or_else(|| self.kind.to_lowercase())
    }

    /// Whether a delete that removes an object answers with the object (as
    /// the registries of pods, services, service accounts, volumes, claims,
    /// pod templates, resource quotas and every custom resource do) rather
    /// than a `Status`.
    pub fn returns_deleted_object(&self) -> bool {
        if self.typed.is_some() {
            return false;
        }
        let builtin = builtins().iter().any(|d| d.table_key() == self.table_key());
        !builtin
            || (self.group.is_empty()
                && matches!(
                    self.kind.as_str(),
                    "Pod"
                        | "Service"
                        | "ServiceAccount"
                        | "PersistentVolume"
                        | "PersistentVolumeClaim"
                        | "PodTemplate"
                        | "ResourceQuota"
                ))
    }

    /// Whether the resource is in the `all` category (`kubectl get all`),
    /// as the apiserver's workload resources are.
    pub fn in_category_all(&self) -> bool {
        self.typed.is_none()
            && matches!(
                (self.group.as_str(), self.plural.as_str()),
                ("", "pods" | "services")
                    | ("apps", "deployments" | "statefulsets" | "replicasets")
            )
    }

    /// The `APIResource` entries for discovery: the resource and its subresources.
    pub fn discovery_entries(&self) -> Vec<Value> {
        let mut verbs = vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        if self.kind == "Namespace" {
            verbs.retain(|v| *v != "deletecollection");
        }
        let mut entries = vec![json!({
            "name": self.plural,
            "singularName": self.singular(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
            "shortNames": self.short_names,
        })];
        if self.in_category_all() {
            entries[0]["categories"] = json!(["all"]);
        }
        if self.status_subresource {
            entries.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if self.scale_subresource {
            entries.push(json!({
                "name": format!("{}/scale", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        entries
    }
}

/// A `v1` resource of a built-in group.
pub(crate) fn builtin(
    group: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    status: bool,
    scale: bool,
    short: &[&str],
) -> ResourceDef {
    ResourceDef {
        group: group.into(),
        version: "v1".into(),
        plural: plural.into(),
        kind: kind.into(),
        namespaced,
        status_subresource: status,
        scale_subresource: scale,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        singular_name: None,
        typed: None,
    }
}

/// The resources every simulated cluster serves: what kube-pulse watches
/// and acts on, and what Karpor's default sync registry names (policy/v1
/// PodDisruptionBudgets only: policy/v1beta1 is gone since Kubernetes 1.25).
pub fn builtins() -> Vec<ResourceDef> {
    vec![
        builtin("", "namespaces", "Namespace", false, true, false, &["ns"]),
        builtin("", "pods", "Pod", true, true, false, &["po"]),
        builtin("", "configmaps", "ConfigMap", true, false, false, &["cm"]),
        builtin("", "events", "Event", true, false, false, &["ev"]),
        builtin("", "secrets", "Secret", true, false, false, &[]),
        builtin(
            "",
            "serviceaccounts",
            "ServiceAccount",
            true,
            false,
            false,
            &["sa"],
        ),
        builtin("", "services", "Service", true, true, false, &["svc"]),
        builtin("", "nodes", "Node", false, true, false, &["no"]),
        builtin(
            "",
            "persistentvolumes",
            "PersistentVolume",
            false,
            true,
            false,
            &["pv"],
        ),
        builtin(
            "",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            true,
            false,
            &["pvc"],
        ),
        builtin(
            "apps",
            "deployments",
            "Deployment",
            true,
            true,
            true,
            &["deploy"],
        ),
        builtin(
            "apps",
            "statefulsets",
            "StatefulSet",
            true,
            true,
            true,
            &["sts"],
        ),
        builtin(
            "apps",
            "replicasets",
            "ReplicaSet",
            true,
            true,
            true,
            &["rs"],
        ),
        builtin(
            "networking.k8s.io",
            "ingresses",
            "Ingress",
            true,
            true,
            false,
            &["ing"],
        ),
        builtin(
            "policy",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            true,
            false,
            &["pdb"],
        ),
        builtin(
            "coordination.k8s.io",
            "leases",
            "Lease",
            true,
            false,
            false,
            &[],
        ),
        // CustomResourceDefinitions add resources while the cluster runs (crd.rs).
        builtin(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            true,
            false,
            &["crd", "crds"],
        ),
    ]
}

/// All resources of one cluster, looked up by group/version/plural.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    defs: Vec<ResourceDef>,
}

impl Catalog {
    pub fn new(extra: Vec<ResourceDef>) -> Self {
        let mut defs = builtins();
        for def in extra {
            if !defs
                .iter()
                .any(|d| d.group == def.group && d.version == def.version && d.plural == def.plural)
            {
                defs.push(def);
            }
        }
        Self { defs }
    }

    /// A catalogue of exactly `defs` (no built-ins), for an apiserver that
    /// serves another set than a Kubernetes cluster (Karpor's).
    pub fn from_defs(defs: Vec<ResourceDef>) -> Self {
        let mut catalog = Self { defs: Vec::new() };
        for def in defs {
            if catalog
                .find(&def.group, &def.version, &def.plural)
                .is_none()
            {
                catalog.defs.push(def);
            }
        }
        catalog
    }

    /// This catalogue with the resources of one CRD (`group/plural`) replaced by
    /// `defs`; an empty `defs` stops serving it.
    pub fn with_custom(&self, group: &str, plural: &str, defs: Vec<ResourceDef>) -> Self {
        let key = format!("{group}/{plural}");
        let mut next = self.clone();
        next.defs.retain(|d| d.table_key() != key);
        next.defs.extend(defs);
        next
    }

    /// Whether `group/plural` is a built-in resource, so a CRD for it cannot
    /// be accepted. (A CRD may take over an extra resource given at start.)
    pub fn is_builtin(&self, group: &str, plural: &str) -> bool {
        builtins()
            .iter()
            .any(|d| d.group == group && d.plural == plural)
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceDef> {
        self.defs
            .iter()
            .find(|d| d.group == group && d.version == version && d.plural == plural)
    }

    pub fn all(&self) -> &[ResourceDef] {
        &self.defs
    }

    /// Namespaced resources, one entry per table (for cascading namespace deletes).
    pub fn namespaced_tables(&self) -> Vec<&ResourceDef> {
        let mut seen = std::collections::HashSet::new();
        self.defs
            .iter()
            .filter(|d| d.namespaced && seen.insert(d.table_key()))
            .collect()
    }

    /// Groups with their versions, in registration order (core group excluded).
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for def in self.defs.iter().filter(|d| !d.group.is_empty()) {
            match groups.iter_mut().find(|(g, _)| *g == def.group) {
                Some((_, versions)) => {
                    if !versions.contains(&def.version) {
                        versions.push(def.version.clone());
                    }
                }
                None => groups.push((def.group.clone(), vec![def.version.clone()])),
            }
        }
        groups
    }

    /// Resources served under one group/version.
    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<&ResourceDef> {
        self.defs
            .iter()
            .filter(|d| d.group == group && d.version == version)
            .collect()
    }

    pub fn namespaces(&self) -> &ResourceDef {
        self.find("", "v1", "namespaces")
            .expect("namespaces is a built-in")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_and_naming() {
        let catalog = Catalog::new(vec![ResourceDef::custom(
            "pulse.example.com",
            "v1alpha1",
            "widgets",
            "Widget",
        )]);
        let deploy = catalog.find("apps", "v1", "deployments").unwrap();
        assert_eq!(deploy.api_version(), "apps/v1");
        assert_eq!(deploy.group_resource(), "deployments.apps");
        assert_eq!(catalog.namespaces().group_resource(), "namespaces");
        assert!(catalog.find("apps", "v1beta1", "deployments").is_none());
        let groups = catalog.groups();
        assert_eq!(
            groups,
            vec![
                ("apps".to_string(), vec!["v1".to_string()]),
                ("networking.k8s.io".to_string(), vec!["v1".to_string()]),
                ("policy".to_string(), vec!["v1".to_string()]),
                ("coordination.k8s.io".to_string(), vec!["v1".to_string()]),
                ("apiextensions.k8s.io".to_string(), vec!["v1".to_string()]),
                (
                    "pulse.example.com".to_string(),
                    vec!["v1alpha1".to_string()]
                )
            ]
        );
        let namespaced: Vec<&str> = catalog
            .namespaced_tables()
            .iter()
            .map(|d| d.plural.as_str())
            .collect();
        assert_eq!(
            namespaced,
            [
                "pods",
                "configmaps",
                "events",
                "secrets",
                "serviceaccounts",
                "services",
                "persistentvolumeclaims",
                "deployments",
                "statefulsets",
                "replicasets",
                "ingresses",
                "poddisruptionbudgets",
                "leases",
                "widgets"
            ]
        );
        // Karpor's default registry names policy/v1beta1, which is not served.
        assert!(
            catalog
                .find("policy", "v1beta1", "poddisruptionbudgets")
                .is_none()
        );
        assert!(
            catalog
                .find("policy", "v1", "poddisruptionbudgets")
                .is_some()
        );
    }

    #[test]
    fn crds_replace_and_remove_their_resources_only() {
        let extra = ResourceDef::custom("pulse.example.com", "v1", "gadgets", "Gadget");
        let catalog = Catalog::new(vec![extra]);
        assert!(catalog.is_builtin("apps", "deployments"));
        assert!(!catalog.is_builtin("pulse.example.com", "gadgets"));
        let widget = |v: &str| ResourceDef::custom("pulse.example.com", v, "widgets", "Widget");
        let one = catalog.with_custom("pulse.example.com", "widgets", vec![widget("v1")]);
        let two = one.with_custom(
            "pulse.example.com",
            "widgets",
            vec![widget("v2"), widget("v1")],
        );
        assert_eq!(
            two.groups().last().unwrap().1,
            ["v1".to_string(), "v2".to_string()],
            "gadgets v1 registered first"
        );
        assert!(two.find("pulse.example.com", "v2", "widgets").is_some());
        let none = two.with_custom("pulse.example.com", "widgets", vec![]);
        assert!(none.find("pulse.example.com", "v1", "widgets").is_none());
        assert!(none.find("pulse.example.com", "v1", "gadgets").is_some());
        assert_eq!(none.all().len(), catalog.all().len());
        // A CRD for an extra resource replaces it.
        let gadget = ResourceDef {
            short_names: vec!["gd".into()],
            ..ResourceDef::custom("pulse.example.com", "v1", "gadgets", "Gadget")
        };
        let taken = catalog.with_custom("pulse.example.com", "gadgets", vec![gadget.clone()]);
        assert_eq!(
            taken.find("pulse.example.com", "v1", "gadgets"),
            Some(&gadget)
        );
        assert_eq!(taken.all().len(), catalog.all().len());
    }

    #[test]
    fn discovery_lists_subresources() {
        let catalog = Catalog::new(vec![]);
        let names: Vec<String> = catalog
            .find("apps", "v1", "deployments")
            .unwrap()
            .discovery_entries()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            names,
            ["deployments", "deployments/status", "deployments/scale"]
        );
    }
}
