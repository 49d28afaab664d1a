//! The workload kinds the emulated controllers run (`converger.rs`): the
//! built-in Deployments and StatefulSets, and three custom kinds served
//! through their CustomResourceDefinitions when a cluster is built with
//! `SimConfig::workload_crds` — KusionStack `CollaSet`, OpenKruise
//! `CloneSet` and Argo Rollouts `Rollout`. Each kind says how it owns its
//! pods and which label names their revision; `custom_status.rs` writes
//! the status each custom controller would.

use serde_json::{Value, json};

/// How a workload owns its pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Itself, pods named `{name}-{ordinal}` (a StatefulSet).
    Ordinal,
    /// Itself, pods named `{name}-{suffix}` (a CollaSet, a CloneSet).
    Direct,
    /// Through one ReplicaSet per pod template (a Deployment, a Rollout).
    ReplicaSets,
}

/// One workload kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadKind {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub short_name: &'static str,
    pub ownership: Ownership,
    /// The label that carries a pod's (or ReplicaSet's) template revision.
    pub revision_label: &'static str,
    /// Its CRD declares the `scale` subresource.
    pub scale: bool,
}

impl WorkloadKind {
    /// `apps/v1`, `argoproj.io/v1alpha1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether it is a custom resource (served through a CRD).
    pub fn is_custom(&self) -> bool {
        self.group != "apps"
    }

    /// Its CustomResourceDefinition (None for the built-in kinds): a
    /// structural schema that keeps unknown fields, the status subresource,
    /// and `scale` where the project's own CRD declares it.
    pub fn crd(&self) -> Option<Value> {
        if !self.is_custom() {
            return None;
        }
        let mut subresources = json!({"status": {}});
        if self.scale {
            let status_replicas = if self.kind == "Rollout" {
                ".status.HPAReplicas"
            } else {
                ".status.replicas"
            };
            let selector = if self.kind == "Rollout" {
                ".status.selector"
            } else {
                ".status.labelSelector"
            };
            subresources["scale"] = json!({
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": status_replicas,
                "labelSelectorPath": selector,
            });
        }
        Some(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{}", self.plural, self.group)},
            "spec": {
                "group": self.group,
                "scope": "Namespaced",
                "names": {
                    "plural": self.plural,
                    "singular": self.kind.to_lowercase(),
                    "kind": self.kind,
                    "listKind": format!("{}List", self.kind),
                    "shortNames": [self.short_name],
                },
                "versions": [{
                    "name": self.version,
                    "served": true,
                    "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                    "subresources": subresources,
                }],
            },
        }))
    }
}

/// Every kind the controllers run, the built-in ones first.
pub const KINDS: [WorkloadKind; 5] = [
    WorkloadKind {
        group: "apps",
        version: "v1",
        plural: "deployments",
        kind: "Deployment",
        short_name: "deploy",
        ownership: Ownership::ReplicaSets,
        revision_label: "pod-template-hash",
        scale: true,
    },
    WorkloadKind {
        group: "apps",
        version: "v1",
        plural: "statefulsets",
        kind: "StatefulSet",
        short_name: "sts",
        ownership: Ownership::Ordinal,
        revision_label: "controller-revision-hash",
        scale: true,
    },
    WorkloadKind {
        group: "apps.kusionstack.io",
        version: "v1alpha1",
        plural: "collasets",
        kind: "CollaSet",
        short_name: "cls",
        ownership: Ownership::Direct,
        revision_label: "controller-revision-hash",
        scale: false,
    },
    WorkloadKind {
        group: "apps.kruise.io",
        version: "v1alpha1",
        plural: "clonesets",
        kind: "CloneSet",
        short_name: "clone",
        ownership: Ownership::Direct,
        revision_label: "controller-revision-hash",
        scale: true,
    },
    WorkloadKind {
        group: "argoproj.io",
        version: "v1alpha1",
        plural: "rollouts",
        kind: "Rollout",
        short_name: "ro",
        ownership: Ownership::ReplicaSets,
        revision_label: "rollouts-pod-template-hash",
        scale: true,
    },
];

/// The kind named `kind`, if the controllers run it.
pub fn by_kind(kind: &str) -> Option<&'static WorkloadKind> {
    KINDS.iter().find(|k| k.kind == kind)
}

/// The kind of a workload object (a Deployment when it says nothing known).
pub fn kind_of(obj: &Value) -> &'static WorkloadKind {
    obj["kind"].as_str().and_then(by_kind).unwrap_or(&KINDS[0])
}

/// The CRDs of the custom kinds, as `SimConfig::workload_crds` creates them.
pub fn custom_resource_definitions() -> Vec<Value> {
    KINDS.iter().filter_map(WorkloadKind::crd).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_are_accepted_and_declare_scale_as_the_projects_do() {
        let crds = custom_resource_definitions();
        let names: Vec<&str> = crds
            .iter()
            .map(|c| c["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "collasets.apps.kusionstack.io",
                "clonesets.apps.kruise.io",
                "rollouts.argoproj.io"
            ]
        );
        for crd in &crds {
            let catalog = crate::resources::Catalog::new(Vec::new());
            let crd_def = catalog
                .find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
                .unwrap();
            let def = crate::crd::served(crd_def, crd).expect("a valid CRD");
            let kind = by_kind(def[0].kind.as_str()).unwrap();
            assert_eq!(def[0].scale_subresource, kind.scale, "{}", kind.kind);
            assert!(def[0].status_subresource);
        }
    }
}
