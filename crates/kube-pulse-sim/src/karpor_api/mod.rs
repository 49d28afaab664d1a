//! Karpor's API as data: its groups and version, the names a Karpor
//! installation ships with, what a simulated Karpor apiserver serves
//! ([`KarporOptions`], its catalogue) and the objects a Karpor user creates
//! (`objects.rs`). Below the cluster, which serves this catalogue and seeds
//! these objects, and `karpor.rs`, which drives a running Karpor apiserver.

use super::resources::{Catalog, ResourceDef, builtin};
use super::schema::TypedKind;

mod objects;

pub use objects::{
    Credential, DEFAULT_SYNC_RESOURCES, ExecConfig, MemberAccess, cluster_manifest,
    default_sync_registry, only_metadata_rule,
};

/// API group of Karpor's Cluster.
pub const CLUSTER_GROUP: &str = "cluster.karpor.io";
/// API group of Karpor's sync registries and rules.
pub const SEARCH_GROUP: &str = "search.karpor.io";
/// The one version both groups serve.
pub const VERSION: &str = "v1beta1";
/// Name of the sync registry a Karpor installation ships with.
pub const DEFAULT_REGISTRY: &str = "default-sync-rule";
/// Name of the transform rule the default registry refers to.
pub const ONLY_METADATA_RULE: &str = "only-metadata";

/// What a simulated Karpor apiserver serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KarporOptions {
    /// Serve Karpor #831's ("add cluster status") Cluster schema, whose
    /// status also has `apiserver`, `version` and `conditions`
    /// (metav1.Condition list), and act as #831's Karpor does on create
    /// (set `Validated`, `ClusterHealthy`, `apiserver`, `healthy`); false
    /// serves Karpor 0.6's, whose status has only `healthy`.
    pub conditions: bool,
    /// Serve Karpor #836's Cluster schema (an agent in the member
    /// cluster), whose spec also has `mode` (`pull` or `push`); false
    /// prunes `spec.mode`, as a Karpor without #836 does.
    pub push_mode: bool,
    /// Create Karpor's default sync registry (and the transform rule it
    /// names) at start, as a Karpor installation does.
    pub default_registry: bool,
}

impl Default for KarporOptions {
    fn default() -> Self {
        Self {
            conditions: false,
            push_mode: false,
            default_registry: true,
        }
    }
}

fn karpor_def(
    group: &str,
    plural: &str,
    kind: &str,
    status: bool,
    typed: TypedKind,
) -> ResourceDef {
    ResourceDef {
        namespaced: false,
        status_subresource: status,
        typed: Some(typed),
        ..ResourceDef::custom(group, VERSION, plural, kind)
    }
}

/// Karpor's own resources, as its apiserver registers them.
pub fn resources(options: KarporOptions) -> Vec<ResourceDef> {
    let named = |mut def: ResourceDef, short: &str, singular: &str| {
        def.short_names = vec![short.to_string()];
        def.singular_name = Some(singular.to_string());
        def
    };
    vec![
        named(
            karpor_def(
                CLUSTER_GROUP,
                "clusters",
                "Cluster",
                true,
                TypedKind::KarporCluster {
                    conditions: options.conditions,
                    push_mode: options.push_mode,
                },
            ),
            "cl",
            "cluster",
        ),
        // Registered under this path, though the type is SyncRegistry.
        named(
            karpor_def(
                SEARCH_GROUP,
                "syncclusterresources",
                "SyncRegistry",
                true,
                TypedKind::KarporSyncRegistry,
            ),
            "scr",
            "syncregistry",
        ),
        karpor_def(
            SEARCH_GROUP,
            "syncresources",
            "SyncResources",
            false,
            TypedKind::KarporSyncResources,
        ),
        karpor_def(
            SEARCH_GROUP,
            "transformrules",
            "TransformRule",
            false,
            TypedKind::KarporTransformRule,
        ),
        karpor_def(
            SEARCH_GROUP,
            "trimrules",
            "TrimRule",
            false,
            TypedKind::KarporTrimRule,
        ),
    ]
}

/// The catalogue of a simulated Karpor apiserver: the core resources Karpor
/// serves, its own groups, then `extra`.
pub fn catalog(options: KarporOptions, extra: Vec<ResourceDef>) -> Catalog {
    let mut defs = vec![
        builtin("", "namespaces", "Namespace", false, true, false, &["ns"]),
        builtin("", "pods", "Pod", true, true, false, &["po"]),
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
    ];
    defs.extend(resources(options));
    defs.extend(extra);
    Catalog::from_defs(defs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_serves_karpor_groups_and_its_core_resources() {
        let catalog = catalog(KarporOptions::default(), vec![]);
        let scr = catalog
            .find(SEARCH_GROUP, VERSION, "syncclusterresources")
            .unwrap();
        assert_eq!(scr.kind, "SyncRegistry");
        assert!(!scr.namespaced && scr.status_subresource);
        assert_eq!(scr.group_resource(), "syncregistries.search.karpor.io");
        assert!(
            catalog
                .find(SEARCH_GROUP, VERSION, "syncregistries")
                .is_none()
        );
        let clusters = catalog.find(CLUSTER_GROUP, VERSION, "clusters").unwrap();
        assert_eq!(
            clusters.typed,
            Some(TypedKind::KarporCluster {
                conditions: false,
                push_mode: false
            })
        );
        let core: Vec<&str> = catalog
            .in_group_version("", "v1")
            .iter()
            .map(|d| d.plural.as_str())
            .collect();
        assert_eq!(core, ["namespaces", "pods", "secrets", "serviceaccounts"]);
        assert!(catalog.find("apps", "v1", "deployments").is_none());
        let with = super::catalog(
            KarporOptions {
                conditions: true,
                ..KarporOptions::default()
            },
            vec![],
        );
        assert_eq!(
            with.find(CLUSTER_GROUP, VERSION, "clusters").unwrap().typed,
            Some(TypedKind::KarporCluster {
                conditions: true,
                push_mode: false
            })
        );
    }
}
