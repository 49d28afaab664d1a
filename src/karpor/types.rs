//! Karpor's own objects as they travel as JSON: `cluster.karpor.io/v1beta1`
//! `Cluster` and `search.karpor.io/v1beta1` `SyncRegistry` (`Karpor
//! apiserver ──JSON──▶ [types] ──▶ convert / writer`). Field names are
//! Karpor's (camelCase); every field may be absent and fields this module
//! does not know are ignored, since Karpor adds fields between releases.
//! Byte fields (`caBundle`, `x509.*`) stay base64 text here: a bad value is
//! reported for its one cluster when converting, not by failing the whole
//! list. Both types are resources whose plural comes from discovery
//! ([`super::api`]), so `kube::Api<Cluster>` works with the found
//! [`ApiResource`].

use std::borrow::Cow;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Resource;
use kube::core::ClusterResourceScope;
use kube::discovery::ApiResource;
use serde::{Deserialize, Serialize};

/// A member cluster as Karpor knows it (`cluster.karpor.io/v1beta1`, cluster-scoped).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    /// Name (the member's name in kube-pulse), labels, resourceVersion.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// How to reach the cluster.
    #[serde(default)]
    pub spec: ClusterSpec,
    /// What Karpor shows of the cluster's state (written by the status writer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ClusterStatus>,
}

/// `Cluster.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterSpec {
    /// Free text such as `kubernetes` or `aliyun`.
    pub provider: String,
    /// Endpoint and credentials.
    pub access: ClusterAccess,
    /// Free text for Karpor's UI.
    pub description: String,
    /// The name Karpor's UI shows.
    pub display_name: String,
    /// Set by Karpor's finalizer handling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalized: Option<bool>,
    /// `pull` (or empty) or `push` (Karpor #836: an agent in the member
    /// cluster; kube-pulse then follows the agent named by the annotation
    /// [`AGENT_ANNOTATION`]).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mode: String,
}

/// The annotation of a push-mode `Cluster` that names its kube-pulse
/// agent's public nkey (`U…`).
pub const AGENT_ANNOTATION: &str = "kube-pulse.io/agent";

/// `Cluster.spec.access`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterAccess {
    /// The apiserver URL.
    pub endpoint: String,
    /// PEM CA bundle, base64 (Go `[]byte`); the system roots when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Accept any server certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insecure: Option<bool>,
    /// How to authenticate; anonymous when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential: Option<ClusterAccessCredential>,
}

/// `Cluster.spec.access.credential`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterAccessCredential {
    /// `ServiceAccountToken`, `X509Certificate` or `OIDC` (kept as text:
    /// an unknown type is reported, not a parse failure).
    #[serde(rename = "type")]
    pub type_: String,
    /// The bearer token for `ServiceAccountToken`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_account_token: String,
    /// The client certificate for `X509Certificate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x509: Option<X509>,
    /// A client-go exec plugin (Karpor uses it for `OIDC`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_config: Option<ExecConfig>,
}

/// Karpor's credential type names.
impl ClusterAccessCredential {
    /// `type` of a bearer-token credential.
    pub const SERVICE_ACCOUNT_TOKEN: &str = "ServiceAccountToken";
    /// `type` of a client-certificate credential.
    pub const X509_CERTIFICATE: &str = "X509Certificate";
    /// `type` of an OIDC credential (an exec plugin fetches the token).
    pub const OIDC: &str = "OIDC";
}

/// Everything but the secrets, which logs must never show.
impl std::fmt::Debug for ClusterAccessCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterAccessCredential")
            .field("type", &self.type_)
            .field(
                "service_account_token",
                &(!self.service_account_token.is_empty()).then_some("<redacted>"),
            )
            .field("x509", &self.x509.as_ref().map(|_| "<redacted>"))
            .field("exec_config", &self.exec_config)
            .finish()
    }
}

/// `credential.x509`: PEM certificate and key, each base64 (Go `[]byte`).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct X509 {
    /// The client certificate (PEM, base64).
    pub certificate: String,
    /// Its private key (PEM, base64).
    pub private_key: String,
}

impl std::fmt::Debug for X509 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X509")
            .field("certificate", &self.certificate)
            .field("private_key", &"<redacted>")
            .finish()
    }
}

/// `credential.execConfig`: a client-go credential plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ExecConfig {
    /// The program to run.
    pub command: String,
    /// Its arguments.
    #[serde(deserialize_with = "null_as_default")]
    pub args: Vec<String>,
    /// Extra environment variables (values may be secrets: not logged).
    #[serde(deserialize_with = "null_as_default")]
    pub env: Vec<ExecEnvVar>,
    /// `client.authentication.k8s.io/v1` or `v1beta1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Shown when the command is missing.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub install_hint: String,
    /// Pass the cluster's endpoint and CA to the plugin.
    pub provide_cluster_info: bool,
    /// `Never`, `IfAvailable` or `Always`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub interactive_mode: String,
}

/// One `execConfig.env` entry.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExecEnvVar {
    /// Variable name.
    pub name: String,
    /// Its value.
    pub value: String,
}

impl std::fmt::Debug for ExecEnvVar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecEnvVar")
            .field("name", &self.name)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// `Cluster.status`. Karpor 0.6 stores `healthy` only; a release whose
/// schema has `conditions` keeps them too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterStatus {
    /// True while the cluster is reachable.
    pub healthy: bool,
    /// `Ready` and `Synced` conditions (absent where Karpor's schema lacks them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// A `metav1.Condition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, `Synced`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason, e.g. kube-pulse's phase reason.
    #[serde(default)]
    pub reason: String,
    /// Human-readable detail.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed.
    pub last_transition_time: DateTime<Utc>,
    /// The `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Which resources Karpor syncs from which clusters
/// (`search.karpor.io/v1beta1`, cluster-scoped, plural `syncclusterresources`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncRegistry {
    /// Name, resourceVersion.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Clusters and resources.
    #[serde(default)]
    pub spec: SyncRegistrySpec,
    /// Per cluster and resource sync state (written by the status writer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SyncRegistryStatus>,
}

/// `SyncRegistry.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SyncRegistrySpec {
    /// Cluster names, or `"*"` for all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Clusters whose labels match (in addition to `clusters`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_label_selector: Option<LabelSelector>,
    /// The resources to sync.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sync_resources: Vec<ResourceSyncRule>,
    /// A `SyncResources` object holding the rules instead (not followed by kube-pulse).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sync_resources_ref_name: String,
}

/// One `spec.syncResources` entry. Karpor's indexing settings (resync
/// period, concurrency, transform, trim, remainAfterDeleted) do not change
/// what is watched and are not kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceSyncRule {
    /// `v1`, `apps/v1`, `policy/v1beta1`.
    pub api_version: String,
    /// Plural resource name, or `"*"` for every resource of `apiVersion`.
    pub resource: String,
    /// Limit to one namespace; every namespace when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Filters; several are ORed (an object matching any one is synced).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub selectors: Vec<Selector>,
}

/// One resource filter of a sync rule; both parts must match when both are given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Selector {
    /// By labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// By fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<FieldSelector>,
}

/// `selectors[].fieldSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FieldSelector {
    /// `{field: value}` pairs, all of which must match exactly.
    pub match_fields: BTreeMap<String, String>,
    /// Whether the member's apiserver can filter on these fields (Karpor
    /// filters on the client otherwise).
    pub server_supported: bool,
}

/// `SyncRegistry.status`, in Karpor's own shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SyncRegistryStatus {
    /// One entry per cluster the registry applies to.
    #[serde(deserialize_with = "null_as_default")]
    pub clusters: Vec<ClusterResourcesSyncCondition>,
    /// When any entry last changed (Go's zero time reads as `null`).
    pub last_transition_time: Option<DateTime<Utc>>,
}

/// `status.clusters[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterResourcesSyncCondition {
    /// The cluster's name.
    pub cluster: String,
    /// The cluster's overall sync state.
    pub status: String,
    /// One entry per synced resource.
    #[serde(deserialize_with = "null_as_default")]
    pub resources: Vec<ResourceSyncCondition>,
}

/// `status.clusters[].resources[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceSyncCondition {
    /// `apps/v1`, `v1`.
    pub api_version: String,
    /// `Deployment`.
    pub kind: String,
    /// The sync phase.
    pub status: String,
    /// Why, CamelCase.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Detail.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When `status` last changed.
    pub last_transition_time: Option<DateTime<Utc>>,
}

/// A list Go writes as `null` when it is nil (no `omitempty`) reads as empty.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Resource impls whose group, version, kind and plural come from the
/// discovered [`ApiResource`] (never hard-coded: Karpor serves
/// `SyncRegistry` under `syncclusterresources`).
macro_rules! discovered_resource {
    ($t:ty) => {
        impl Resource for $t {
            type DynamicType = ApiResource;
            type Scope = ClusterResourceScope;

            fn kind(dt: &ApiResource) -> Cow<'_, str> {
                dt.kind.as_str().into()
            }
            fn group(dt: &ApiResource) -> Cow<'_, str> {
                dt.group.as_str().into()
            }
            fn version(dt: &ApiResource) -> Cow<'_, str> {
                dt.version.as_str().into()
            }
            fn api_version(dt: &ApiResource) -> Cow<'_, str> {
                dt.api_version.as_str().into()
            }
            fn plural(dt: &ApiResource) -> Cow<'_, str> {
                dt.plural.as_str().into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

discovered_resource!(Cluster);
discovered_resource!(SyncRegistry);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_karpor_cluster_reads_with_unknown_fields_and_round_trips() {
        let value = json!({
            "apiVersion": "cluster.karpor.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "prod", "labels": {"env": "prod"}, "resourceVersion": "7"},
            "spec": {
                "provider": "kubernetes", "displayName": "Prod", "futureField": 1,
                "access": {
                    "endpoint": "https://10.0.0.1:6443", "caBundle": "Q0E=", "insecure": false,
                    "credential": {"type": "X509Certificate",
                        "x509": {"certificate": "Q0VSVA==", "privateKey": "S0VZ"}}
                }
            },
            "status": {"healthy": true, "conditions": [{
                "type": "Ready", "status": "True", "reason": "Healthy", "message": "",
                "lastTransitionTime": "2026-12-03T10:00:00Z"}]}
        });
        let cluster: Cluster = serde_json::from_value(value).unwrap();
        assert_eq!(cluster.metadata.name.as_deref(), Some("prod"));
        let credential = cluster.spec.access.credential.as_ref().unwrap();
        assert_eq!(credential.type_, ClusterAccessCredential::X509_CERTIFICATE);
        assert_eq!(credential.x509.as_ref().unwrap().private_key, "S0VZ");
        let status = cluster.status.as_ref().unwrap();
        assert!(status.healthy);
        assert_eq!(status.conditions.as_ref().unwrap()[0].reason, "Healthy");
        let again: Cluster =
            serde_json::from_value(serde_json::to_value(&cluster).unwrap()).unwrap();
        assert_eq!(again, cluster);
        let debug = format!("{credential:?}");
        assert!(
            !debug.contains("S0VZ") && debug.contains("redacted"),
            "{debug}"
        );
    }

    #[test]
    fn a_karpor_sync_registry_reads_selectors_and_status() {
        let value = json!({
            "apiVersion": "search.karpor.io/v1beta1", "kind": "SyncRegistry",
            "metadata": {"name": "default-sync-rule"},
            "spec": {
                "clusters": ["*"],
                "clusterLabelSelector": {"matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["prod"]}]},
                "syncResources": [{
                    "apiVersion": "apps/v1", "resource": "deployments", "namespace": "shop",
                    "resyncPeriod": "1h", "maxConcurrent": 10, "remainAfterDeleted": true,
                    "trim": {"retain": {"jsonPaths": ["metadata"]}},
                    "selectors": [
                        {"labelSelector": {"matchLabels": {"tier": "web"}}},
                        {"fieldSelector": {"matchFields": {"metadata.name": "web"},
                                           "serverSupported": true}}
                    ]
                }]
            },
            "status": {"clusters": [{"cluster": "prod", "status": "Syncing", "resources": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "status": "Synced",
                 "lastTransitionTime": "2026-12-03T10:00:00Z"}]}],
                "lastTransitionTime": null}
        });
        let registry: SyncRegistry = serde_json::from_value(value).unwrap();
        let rule = &registry.spec.sync_resources[0];
        assert_eq!(rule.namespace, "shop");
        assert_eq!(rule.selectors.len(), 2);
        let fields = &rule.selectors[1]
            .field_selector
            .as_ref()
            .unwrap()
            .match_fields;
        assert_eq!(fields["metadata.name"], "web");
        let status = registry.status.as_ref().unwrap();
        assert_eq!(status.clusters[0].resources[0].kind, "Deployment");
        assert_eq!(status.last_transition_time, None);
        // Go's nil lists arrive as null.
        let fresh: SyncRegistry = serde_json::from_value(json!({
            "metadata": {"name": "x"},
            "status": {"clusters": null, "lastTransitionTime": null}
        }))
        .unwrap();
        assert_eq!(fresh.status.unwrap().clusters, vec![]);
        let exec: ExecConfig =
            serde_json::from_value(json!({"command": "c", "args": null, "env": null})).unwrap();
        assert!(exec.args.is_empty() && exec.env.is_empty());
        // A registry with nothing but a name reads too (every field is optional).
        let bare: SyncRegistry =
            serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
        assert!(bare.spec.sync_resources.is_empty());
    }

    #[test]
    fn resource_paths_come_from_the_discovered_plural() {
        let ar = ApiResource {
            group: "search.karpor.io".into(),
            version: "v1beta1".into(),
            api_version: "search.karpor.io/v1beta1".into(),
            kind: "SyncRegistry".into(),
            plural: "syncclusterresources".into(),
        };
        assert_eq!(
            SyncRegistry::url_path(&ar, None),
            "/apis/search.karpor.io/v1beta1/syncclusterresources"
        );
    }
}
