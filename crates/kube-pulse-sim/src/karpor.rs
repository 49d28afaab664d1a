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
//! typed (`typed.rs`): Karpor's strategies, not a CRD's. This module also
//! builds the objects tests and the demo create: a Cluster for a member and
//! Karpor's default sync registry.

use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};

use super::managed::{Operation, Writer};
use super::object::UpdateScope;
use super::status::{ApiError, ApiResult};

use super::resources::{Catalog, ResourceDef, builtin};
use super::typed::TypedKind;
use super::{SimCluster, SimConfig};

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

/// How kube-pulse (or Karpor) reaches a member: `spec.access` of a Cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberAccess {
    /// The member's apiserver URL.
    pub endpoint: String,
    /// PEM of the CA that signs the member's serving certificate.
    pub ca_bundle: Option<Vec<u8>>,
    /// Skip verifying the member's certificate.
    pub insecure: bool,
    pub credential: Credential,
}

/// `spec.access.credential` of a Cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A bearer token (`type: ServiceAccountToken`).
    ServiceAccountToken(String),
    /// A client certificate and key, both PEM (`type: X509Certificate`).
    X509Certificate {
        certificate: Vec<u8>,
        private_key: Vec<u8>,
    },
    /// `type: OIDC` without an exec plugin, which Karpor itself cannot use.
    Oidc,
    /// An exec credential plugin; Karpor files it under `type: OIDC`.
    Exec(ExecConfig),
}

/// `credential.execConfig` of a Cluster (client-go's exec plugin settings).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecConfig {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// `client.authentication.k8s.io/v1` or `…/v1beta1`.
    pub api_version: String,
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

impl Credential {
    /// The credential as Karpor's Cluster type writes it.
    pub fn to_json(&self) -> Value {
        match self {
            Self::ServiceAccountToken(token) => {
                json!({"type": "ServiceAccountToken", "serviceAccountToken": token})
            }
            Self::X509Certificate {
                certificate,
                private_key,
            } => json!({
                "type": "X509Certificate",
                "x509": {"certificate": base64(certificate), "privateKey": base64(private_key)},
            }),
            Self::Oidc => json!({"type": "OIDC"}),
            Self::Exec(exec) => {
                let env: Vec<Value> = exec
                    .env
                    .iter()
                    .map(|(name, value)| json!({"name": name, "value": value}))
                    .collect();
                let mut config = json!({
                    "command": exec.command,
                    "args": exec.args,
                    "env": env,
                    "provideClusterInfo": false,
                });
                if !exec.api_version.is_empty() {
                    config["apiVersion"] = json!(exec.api_version);
                }
                json!({"type": "OIDC", "execConfig": config})
            }
        }
    }
}

impl MemberAccess {
    /// Access to a simulated member: its URL, with its bearer token (an
    /// empty one when the member takes any request).
    pub fn to_sim(cluster: &SimCluster) -> Self {
        Self {
            endpoint: cluster.url(),
            ca_bundle: None,
            insecure: false,
            credential: Credential::ServiceAccountToken(
                cluster.token().unwrap_or_default().to_string(),
            ),
        }
    }

    /// `spec.access` as Karpor's Cluster type writes it.
    pub fn to_json(&self) -> Value {
        let mut access =
            json!({"endpoint": self.endpoint, "credential": self.credential.to_json()});
        if let Some(ca) = &self.ca_bundle {
            access["caBundle"] = json!(base64(ca));
        }
        if self.insecure {
            access["insecure"] = json!(true);
        }
        access
    }
}

/// A Karpor Cluster object for a member named `name`.
pub fn cluster_manifest(name: &str, access: &MemberAccess) -> Value {
    json!({
        "apiVersion": format!("{CLUSTER_GROUP}/{VERSION}"),
        "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {
            "provider": "kubernetes",
            "displayName": name,
            "description": "",
            "access": access.to_json(),
        },
    })
}

/// The resources Karpor's default registry syncs, as `(apiVersion, resource)`.
/// Karpor's shipped file also names two vendor CRDs
/// (`apps.cafe.cloud.alipay.com`); they are left out here.
pub const DEFAULT_SYNC_RESOURCES: [(&str, &str); 11] = [
    ("policy/v1beta1", "poddisruptionbudgets"),
    ("v1", "persistentvolumes"),
    ("v1", "persistentvolumeclaims"),
    ("v1", "nodes"),
    ("v1", "services"),
    ("v1", "pods"),
    ("apps/v1", "replicasets"),
    ("apps/v1", "deployments"),
    ("v1", "namespaces"),
    ("v1", "secrets"),
    ("networking.k8s.io/v1", "ingresses"),
];

/// Karpor's default SyncRegistry: every cluster, [`DEFAULT_SYNC_RESOURCES`],
/// each kept to its metadata by [`ONLY_METADATA_RULE`].
pub fn default_sync_registry() -> Value {
    let rules: Vec<Value> = DEFAULT_SYNC_RESOURCES
        .iter()
        .map(|(api_version, resource)| {
            json!({"apiVersion": api_version, "resource": resource, "transformRefName": ONLY_METADATA_RULE})
        })
        .collect();
    json!({
        "apiVersion": format!("{SEARCH_GROUP}/{VERSION}"),
        "kind": "SyncRegistry",
        "metadata": {"name": DEFAULT_REGISTRY},
        "spec": {"clusters": ["*"], "syncResources": rules},
    })
}

/// The TransformRule the default registry names: keep kind, apiVersion and
/// metadata of each object.
pub fn only_metadata_rule() -> Value {
    json!({
        "apiVersion": format!("{SEARCH_GROUP}/{VERSION}"),
        "kind": "TransformRule",
        "metadata": {"name": ONLY_METADATA_RULE},
        "spec": {
            "type": "replace",
            "valueTemplate": r#"{"apiVersion": "{{ .Object.apiVersion }}", "kind": "{{ .Object.kind }}", "metadata": {{ toJson .Object.metadata }}}"#,
        },
    })
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

    #[test]
    fn credentials_as_karpor_writes_them() {
        let exec = ExecConfig {
            command: "aws".into(),
            args: vec!["eks".into(), "get-token".into()],
            env: vec![("AWS_PROFILE".into(), "prod".into())],
            api_version: "client.authentication.k8s.io/v1beta1".into(),
        };
        let cases = [
            (
                Credential::ServiceAccountToken("t0k".into()),
                json!({"type": "ServiceAccountToken", "serviceAccountToken": "t0k"}),
            ),
            (
                Credential::X509Certificate {
                    certificate: b"CERT".to_vec(),
                    private_key: b"KEY".to_vec(),
                },
                json!({"type": "X509Certificate", "x509": {"certificate": "Q0VSVA==", "privateKey": "S0VZ"}}),
            ),
            (Credential::Oidc, json!({"type": "OIDC"})),
            (
                Credential::Exec(exec),
                json!({"type": "OIDC", "execConfig": {
                    "command": "aws", "args": ["eks", "get-token"],
                    "env": [{"name": "AWS_PROFILE", "value": "prod"}],
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "provideClusterInfo": false,
                }}),
            ),
        ];
        for (credential, want) in cases {
            assert_eq!(credential.to_json(), want, "{credential:?}");
        }
    }

    #[test]
    fn cluster_manifest_carries_access() {
        let access = MemberAccess {
            endpoint: "https://10.0.0.1:6443".into(),
            ca_bundle: Some(b"CA".to_vec()),
            insecure: false,
            credential: Credential::ServiceAccountToken("t".into()),
        };
        let cluster = cluster_manifest("prod", &access);
        assert_eq!(cluster["apiVersion"], "cluster.karpor.io/v1beta1");
        assert_eq!(
            cluster["spec"]["access"]["endpoint"],
            "https://10.0.0.1:6443"
        );
        assert_eq!(cluster["spec"]["access"]["caBundle"], "Q0E=");
        assert!(cluster["spec"]["access"].get("insecure").is_none());
        let insecure = MemberAccess {
            insecure: true,
            ca_bundle: None,
            ..access
        };
        let cluster = cluster_manifest("dev", &insecure);
        assert_eq!(cluster["spec"]["access"]["insecure"], true);
        assert!(cluster["spec"]["access"].get("caBundle").is_none());
    }

    #[test]
    fn default_registry_names_karpors_resources() {
        let registry = default_sync_registry();
        assert_eq!(registry["metadata"]["name"], DEFAULT_REGISTRY);
        assert_eq!(registry["spec"]["clusters"], json!(["*"]));
        let rules = registry["spec"]["syncResources"].as_array().unwrap();
        assert_eq!(rules.len(), 11);
        assert!(rules.iter().any(
            |r| r["apiVersion"] == "policy/v1beta1" && r["resource"] == "poddisruptionbudgets"
        ));
        assert!(
            rules
                .iter()
                .all(|r| r["transformRefName"] == ONLY_METADATA_RULE)
        );
        assert_eq!(only_metadata_rule()["metadata"]["name"], ONLY_METADATA_RULE);
    }
}
