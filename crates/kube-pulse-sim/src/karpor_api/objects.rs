//! The objects a Karpor user creates: a Cluster for each member (endpoint,
//! CA bundle or `insecure`, credential) and Karpor's default sync registry
//! with the TransformRule it names, as JSON in Karpor's types.
//! `MemberAccess::to_sim`, the access to a running simulated member, is in
//! `karpor.rs`.

use base64::Engine;
use serde_json::{Value, json};

use super::{CLUSTER_GROUP, DEFAULT_REGISTRY, ONLY_METADATA_RULE, SEARCH_GROUP, VERSION};

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

#[cfg(test)]
mod tests {
    use super::*;

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
