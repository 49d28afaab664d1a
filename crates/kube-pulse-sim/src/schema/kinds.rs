//! The Go types typed resources store ([`TypedKind`]): the resource name
//! their errors use and the schema of each (`karpor.rs`). Below the resource
//! catalogue (`resources.rs`), whose definitions name them.

use serde::{Deserialize, Serialize};

use super::Field;
use super::karpor as karpor_schema;

/// Which Go type a typed resource stores (it decides the resource name of
/// error messages and the fields an object keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TypedKind {
    /// `cluster.karpor.io` Cluster; `conditions` selects Karpor #831's
    /// schema, whose status also has `apiserver`, `version` and
    /// `conditions` (metav1.Condition list); `push_mode` Karpor #836's
    /// `spec.mode` (`pull` or `push`).
    KarporCluster {
        conditions: bool,
        #[serde(default)]
        push_mode: bool,
    },
    /// `search.karpor.io` SyncRegistry, served as `syncclusterresources`.
    KarporSyncRegistry,
    /// `search.karpor.io` SyncResources.
    KarporSyncResources,
    /// `search.karpor.io` TransformRule.
    KarporTransformRule,
    /// `search.karpor.io` TrimRule.
    KarporTrimRule,
}

impl TypedKind {
    /// The resource of the registry's `DefaultQualifiedResource`, which error
    /// messages name. Karpor registers SyncRegistry under the path
    /// `syncclusterresources` but names it `syncregistries` there.
    pub fn qualified_plural(self) -> &'static str {
        match self {
            Self::KarporCluster { .. } => "clusters",
            Self::KarporSyncRegistry => "syncregistries",
            Self::KarporSyncResources => "syncresources",
            Self::KarporTransformRule => "transformrules",
            Self::KarporTrimRule => "trimrules",
        }
    }
}

impl TypedKind {
    /// The fields of the Go type besides `apiVersion`, `kind` and `metadata`.
    pub fn schema(self) -> &'static [Field] {
        match self {
            Self::KarporCluster {
                conditions,
                push_mode,
            } => match (conditions, push_mode) {
                (false, false) => karpor_schema::CLUSTER,
                (true, false) => karpor_schema::CLUSTER_WITH_CONDITIONS,
                (false, true) => karpor_schema::CLUSTER_WITH_MODE,
                (true, true) => karpor_schema::CLUSTER_WITH_CONDITIONS_AND_MODE,
            },
            Self::KarporSyncRegistry => karpor_schema::SYNC_REGISTRY,
            Self::KarporSyncResources => karpor_schema::SYNC_RESOURCES,
            Self::KarporTransformRule => karpor_schema::TRANSFORM_RULE,
            Self::KarporTrimRule => karpor_schema::TRIM_RULE,
        }
    }
}
