//! Resources served the way a typed Go apiserver serves them (an aggregated
//! apiserver built on `k8s.io/apiserver`'s generic registry, as Karpor's is),
//! rather than as CRDs: the store asks here what its strategy says.
//!
//! Pure functions over JSON; the store calls them under its lock. The
//! strategy of every typed kind here sets `AllowUnconditionalUpdate` to
//! false, so a replace (PUT) without `metadata.resourceVersion` is refused
//! with the generic registry's 422; a PATCH carries the stored
//! resourceVersion and is unaffected.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::resources::ResourceDef;
use super::status::{ApiError, ApiResult};

/// Which Go type a typed resource stores (it decides the resource name of
/// error messages and the fields an object keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TypedKind {
    /// `cluster.karpor.io` Cluster; `conditions` selects the schema whose
    /// status also has `conditions` (metav1.Condition list).
    KarporCluster { conditions: bool },
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

/// Refuses an unconditional replace of a typed resource (its strategy does
/// not allow one), in the words of the generic registry.
pub fn check_update_precondition(def: &ResourceDef, name: &str, body: &Value) -> ApiResult<()> {
    if def.typed.is_none() {
        return Ok(());
    }
    let resource_version = body
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !resource_version.is_empty() {
        return Ok(());
    }
    let why = "Invalid value: 0x0: must be specified for an update";
    let mut err = ApiError::new(
        422,
        "Invalid",
        format!(
            "{} \"{name}\" is invalid: metadata.resourceVersion: {why}",
            def.group_resource()
        ),
    );
    err.details = Some(json!({
        "name": name,
        "group": def.group,
        "kind": def.qualified_plural(),
        "causes": [{"reason": "FieldValueInvalid", "message": why, "field": "metadata.resourceVersion"}],
    }));
    Err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(typed: Option<TypedKind>) -> ResourceDef {
        ResourceDef {
            namespaced: false,
            typed,
            ..ResourceDef::custom(
                "search.karpor.io",
                "v1beta1",
                "syncclusterresources",
                "SyncRegistry",
            )
        }
    }

    #[test]
    fn typed_replaces_need_a_resource_version() {
        let with_rv = json!({"metadata": {"name": "r", "resourceVersion": "7"}});
        let without = json!({"metadata": {"name": "r"}});
        let empty = json!({"metadata": {"name": "r", "resourceVersion": ""}});
        let cases = [
            (None, &without, None),
            (Some(TypedKind::KarporSyncRegistry), &with_rv, None),
            (Some(TypedKind::KarporSyncRegistry), &without, Some(422)),
            (Some(TypedKind::KarporSyncRegistry), &empty, Some(422)),
        ];
        for (typed, body, code) in cases {
            let got = check_update_precondition(&def(typed), "r", body)
                .err()
                .map(|e| e.code);
            assert_eq!(got, code, "{typed:?} {body}");
        }
        let err =
            check_update_precondition(&def(Some(TypedKind::KarporSyncRegistry)), "r", &without)
                .unwrap_err();
        assert_eq!(
            err.message,
            "syncregistries.search.karpor.io \"r\" is invalid: metadata.resourceVersion: \
             Invalid value: 0x0: must be specified for an update"
        );
        assert_eq!(err.details.unwrap()["kind"], "syncregistries");
    }
}
