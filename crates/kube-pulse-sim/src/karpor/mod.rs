//! A simulated Karpor apiserver (`karpor-server`): the source of members and
//! sync registries that kube-pulse can read, and the objects it writes
//! status back to (`Karpor ──watch──▶ members, registries; status ◀── writer`).
//!
//! It is an ordinary [`SimCluster`] started with [`SimConfig::karpor`] set:
//! its catalogue is Karpor 0.6's — `cluster.karpor.io/v1beta1` `clusters`
//! and `search.karpor.io/v1beta1` `syncclusterresources` (kind SyncRegistry),
//! `syncresources`, `transformrules`, `trimrules`, all cluster-scoped, the
//! first two with a `status` subresource — beside the core resources Karpor
//! serves (namespaces, pods, secrets, serviceaccounts). Its resources are
//! typed (`typed.rs`): Karpor's strategies and Go types (`schema.rs` here),
//! not a CRD's. `objects.rs` builds the objects tests and the demo create: a
//! Cluster for a member and Karpor's default sync registry.

use std::sync::Arc;

use serde_json::Value;

use super::managed::{Operation, Writer};
use super::object::UpdateScope;
use super::resources::{Catalog, ResourceDef, builtin};
use super::status::{ApiError, ApiResult};
use super::typed::TypedKind;
use super::{SimCluster, SimConfig};

mod objects;
pub(crate) mod schema;

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
    /// Serve the Cluster schema whose status also has `conditions`
    /// (metav1.Condition list); Karpor 0.6's has only `healthy`.
    pub conditions: bool,
    /// Create Karpor's default sync registry (and the transform rule it
    /// names) at start, as a Karpor installation does.
    pub default_registry: bool,
}

impl Default for KarporOptions {
    fn default() -> Self {
        Self {
            conditions: false,
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
/// Creates (or replaces) a Cluster object in `karpor` for each simulated
/// member, named after it, as an operator registers members in Karpor.
pub fn register_members(karpor: &SimCluster, members: &[&SimCluster]) -> ApiResult<()> {
    for member in members {
        karpor.apply(&cluster_manifest(
            member.name(),
            &MemberAccess::to_sim(member),
        ))?;
    }
    Ok(())
}

/// Writes `status` to the Cluster (`plural` `clusters`) or SyncRegistry
/// (`syncclusterresources`) `name` through the status endpoint's rules, as
/// `manager` (recorded in managedFields): another status writer, for tests.
pub fn write_status(
    karpor: &SimCluster,
    plural: &str,
    name: &str,
    status: Value,
    manager: &str,
) -> ApiResult<Arc<Value>> {
    let group = if plural == "clusters" {
        CLUSTER_GROUP
    } else {
        SEARCH_GROUP
    };
    let store = karpor.store();
    let def = store
        .catalog()
        .find(group, VERSION, plural)
        .cloned()
        .ok_or_else(|| ApiError::bad_request(format!("{plural:?} is not served")))?;
    let writer = Writer {
        manager: manager.to_string(),
        operation: Operation::Update,
        subresource: Some("status"),
    };
    store.mutate_by(
        &def,
        None,
        name,
        UpdateScope::Status,
        false,
        Some(&writer),
        |current| {
            let mut next = current.clone();
            next["status"] = status;
            Ok(next)
        },
    )
}

/// The configuration of a simulated Karpor apiserver named `karpor`.
pub fn config(options: KarporOptions) -> SimConfig {
    SimConfig {
        karpor: Some(options),
        ..SimConfig::named("karpor")
    }
}

/// Starts a simulated Karpor apiserver on a free loopback port.
pub async fn start(options: KarporOptions) -> std::io::Result<SimCluster> {
    SimCluster::start(config(options)).await
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
            Some(TypedKind::KarporCluster { conditions: false })
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
            Some(TypedKind::KarporCluster { conditions: true })
        );
    }
}
