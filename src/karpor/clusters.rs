//! Karpor `Cluster` objects → kube-pulse members (`types::Cluster ──▶
//! [clusters] ──Member | HeldMember──▶ union`). Each object becomes a member
//! named as the object, reaching `spec.access.endpoint` with its CA bundle
//! or `insecure`, and a service-account token or an X.509 client
//! certificate. Credentials kube-pulse will not use (OIDC; an exec plugin
//! unless `--karpor-allow-exec`) and access settings that cannot give a
//! client, or an endpoint the endpoint policy refuses (src/karpor/
//! endpoints.rs), make a *held* member: its topic shows `Unhealthy` with
//! the reason, and no sources run. Only a name that cannot be a topic segment
//! (not a DNS label) skips the object, with a log line.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use super::endpoints::{self, EndpointPolicy};
use super::types::{Cluster, ClusterAccess, ClusterAccessCredential, ExecConfig};
use crate::pipeline::{HeldMember, Member};

/// Held reason: the credential type is one kube-pulse does not use.
pub const CREDENTIALS_UNSUPPORTED: &str = "CredentialsUnsupported";
/// Held reason: endpoint, CA bundle or credential cannot give a client.
pub const INVALID_ACCESS: &str = "InvalidAccess";
pub use super::endpoints::{ENDPOINT_NOT_ALLOWED, ENDPOINT_NOT_RESOLVED};

/// What the Cluster objects give.
#[derive(Debug, Default)]
pub struct Conversion {
    /// Members to run.
    pub members: Vec<Member>,
    /// Members to show as `Unhealthy` without running them.
    pub held: Vec<HeldMember>,
    /// Objects left out, with why (names that are not DNS labels).
    pub skipped: Vec<(String, String)>,
}

/// Converts every object; `allow_exec` lets exec plugins run, `endpoints`
/// says which addresses the objects' endpoints may reach.
pub async fn convert(
    clusters: &[Cluster],
    allow_exec: bool,
    endpoints: &EndpointPolicy,
) -> Conversion {
    Converted::default()
        .convert(clusters, allow_exec, endpoints)
        .await
}

/// How long a conversion is reused while its object's access settings stay
/// the same: after that the object is converted again (its endpoint's name
/// resolved anew, its client built again).
pub const REUSED_FOR: Duration = Duration::from_secs(300);

/// The conversions of the objects seen last, reused while an object's
/// access settings stay the same: a change to one of thousands of Clusters
/// converts one, not thousands (each conversion builds a client).
#[derive(Default)]
pub struct Converted {
    entries: HashMap<String, Entry>,
}

impl std::fmt::Debug for Converted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Converted")
            .field("entries", &self.entries.len())
            .finish()
    }
}

struct Entry {
    access: ClusterAccess,
    at: Instant,
    result: Result<Member, (&'static str, String)>,
}

impl Converted {
    /// [`convert`], reusing the conversions of objects whose access
    /// settings did not change in the last [`REUSED_FOR`]. A name that did
    /// not resolve is never reused: it is resolved on every conversion.
    pub async fn convert(
        &mut self,
        clusters: &[Cluster],
        allow_exec: bool,
        endpoints: &EndpointPolicy,
    ) -> Conversion {
        let mut out = Conversion::default();
        let mut seen = HashMap::with_capacity(clusters.len());
        for cluster in clusters {
            let name = cluster.metadata.name.clone().unwrap_or_default();
            if !crate::names::valid_name(&name) {
                out.skipped.push((
                    name.clone(),
                    format!(
                        "Karpor cluster {name:?} is left out: its name must be a DNS label (lower-case letters, digits and '-', at most 63) to name a topic"
                    ),
                ));
                continue;
            }
            if cluster.spec.mode == "push" {
                out.held.push(pushed(&name, cluster));
                continue;
            }
            let access = &cluster.spec.access;
            let entry = match self.entries.remove(&name) {
                Some(entry) if entry.access == *access && entry.at.elapsed() < REUSED_FOR => entry,
                _ => Entry {
                    access: access.clone(),
                    at: Instant::now(),
                    result: member(&name, access, allow_exec, endpoints).await,
                },
            };
            match &entry.result {
                Ok(member) => out.members.push(member.clone()),
                Err((reason, message)) => out.held.push(HeldMember {
                    name: name.clone(),
                    server: access.endpoint.clone(),
                    reason: (*reason).into(),
                    message: message.clone(),
                    agent: None,
                }),
            }
            let again =
                matches!(&entry.result, Err((reason, _)) if *reason == ENDPOINT_NOT_RESOLVED);
            if !again {
                seen.insert(name, entry);
            }
        }
        self.entries = seen;
        out
    }
}

/// A push-mode Cluster (Karpor #836): followed through the agent its
/// annotation names, or held with the reason when it names none usable.
fn pushed(name: &str, cluster: &Cluster) -> HeldMember {
    let server = &cluster.spec.access.endpoint;
    let agent = cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(super::types::AGENT_ANNOTATION));
    let refused = |message: String| HeldMember {
        name: name.into(),
        server: server.clone(),
        reason: "AgentNotNamed".into(),
        message,
        agent: None,
    };
    match agent {
        None => refused(format!(
            "a push-mode Cluster is followed through its kube-pulse agent: annotate it {}=U… (the agent's public nkey)",
            super::types::AGENT_ANNOTATION
        )),
        Some(key) => match crate::names::agent_public_key(key) {
            Ok(_) => HeldMember::pushed(name, server, key),
            Err(e) => refused(format!("{}: {e}", super::types::AGENT_ANNOTATION)),
        },
    }
}

/// Why a cluster is held: (reason, message).
type Held = (&'static str, String);

/// A member with a working client configuration, or why there is none.
async fn member(
    name: &str,
    access: &ClusterAccess,
    allow_exec: bool,
    endpoints: &EndpointPolicy,
) -> Result<Member, Held> {
    let document = kubeconfig(name, access, allow_exec)?;
    let pinned = endpoints
        .check(&access.endpoint)
        .await
        .map_err(|refused| (refused.reason, refused.message))?;
    let invalid = |message: String| (INVALID_ACCESS, message);
    let kubeconfig: kube::config::Kubeconfig = serde_json::from_value(document)
        .map_err(|e| invalid(format!("cannot build a client configuration: {e}")))?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| invalid(format!("cannot build a client configuration: {e}")))?;
    if let Some(ip) = pinned {
        endpoints::pin(&mut config, ip).map_err(invalid)?;
    }
    // A client now (certificates parsed; an allowed exec plugin run), so a
    // bad object is held here instead of refusing every member's change.
    let probe = config.clone();
    tokio::task::spawn_blocking(move || crate::sources::bounded::client(probe).map(drop))
        .await
        .map_err(|e| invalid(format!("cannot build a client: {e}")))?
        .map_err(|e| invalid(format!("cannot build a client: {e}")))?;
    Ok(Member {
        name: name.into(),
        config,
    })
}

/// The object's access settings as a one-context kubeconfig (JSON), or why
/// they cannot be used.
fn kubeconfig(name: &str, access: &ClusterAccess, allow_exec: bool) -> Result<Value, Held> {
    let invalid = |message: String| (INVALID_ACCESS, message);
    if !crate::config::is_http_url(&access.endpoint) {
        return Err(invalid(format!(
            "spec.access.endpoint {:?} must be an http(s) URL with a host (a port from 1 to 65535, no user or password in it)",
            access.endpoint
        )));
    }
    let ca = match access.ca_bundle.as_deref().filter(|b| !b.is_empty()) {
        Some(b) => Some(base64_pem("spec.access.caBundle", b).map_err(invalid)?),
        None => None,
    };
    let user = match &access.credential {
        None => json!({}),
        Some(credential) => user(credential, allow_exec)?,
    };
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {
            "server": access.endpoint,
            "certificate-authority-data": ca,
            "insecure-skip-tls-verify": access.insecure.unwrap_or(false),
        }}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }))
}

/// The kubeconfig `user` of a credential.
fn user(credential: &ClusterAccessCredential, allow_exec: bool) -> Result<Value, Held> {
    let invalid = |message: String| (INVALID_ACCESS, message);
    if let Some(exec) = &credential.exec_config {
        return if allow_exec {
            Ok(json!({"exec": exec_user(exec)}))
        } else {
            Err((
                CREDENTIALS_UNSUPPORTED,
                format!(
                    "credential type {:?} runs the exec plugin {:?}; kube-pulse runs commands from Karpor only with --karpor-allow-exec",
                    credential.type_, exec.command
                ),
            ))
        };
    }
    match credential.type_.as_str() {
        // Without a token, requests go anonymous, as client-go sends them for Karpor.
        ClusterAccessCredential::SERVICE_ACCOUNT_TOKEN
            if credential.service_account_token.is_empty() =>
        {
            Ok(json!({}))
        }
        // A token is sent in a header: one that a header cannot carry
        // (line ends, control characters) is said so, not sent.
        ClusterAccessCredential::SERVICE_ACCOUNT_TOKEN
            if http::HeaderValue::from_str(&credential.service_account_token).is_err() =>
        {
            Err(invalid(
                "serviceAccountToken has characters an Authorization header cannot carry (line ends, control characters)".into(),
            ))
        }
        ClusterAccessCredential::SERVICE_ACCOUNT_TOKEN => {
            Ok(json!({"token": credential.service_account_token}))
        }
        ClusterAccessCredential::X509_CERTIFICATE => {
            let Some(x509) = &credential.x509 else {
                return Err(invalid(
                    "credential type X509Certificate without x509".into(),
                ));
            };
            let cert =
                base64_pem("credential.x509.certificate", &x509.certificate).map_err(invalid)?;
            let key =
                base64_pem("credential.x509.privateKey", &x509.private_key).map_err(invalid)?;
            Ok(json!({"client-certificate-data": cert, "client-key-data": key}))
        }
        ClusterAccessCredential::OIDC => Err((
            CREDENTIALS_UNSUPPORTED,
            "credential type OIDC without an exec plugin: kube-pulse has no OIDC login of its own"
                .into(),
        )),
        other => Err((
            CREDENTIALS_UNSUPPORTED,
            format!(
                "credential type {other:?} is not one of ServiceAccountToken, X509Certificate, OIDC"
            ),
        )),
    }
}

/// A kubeconfig `exec` entry: the plugin as Karpor gives it, never interactive.
fn exec_user(exec: &ExecConfig) -> Value {
    let api_version = if exec.api_version.is_empty() {
        "client.authentication.k8s.io/v1beta1"
    } else {
        &exec.api_version
    };
    let env: Vec<Value> = exec
        .env
        .iter()
        .map(|e| json!({"name": e.name, "value": e.value}))
        .collect();
    json!({
        "apiVersion": api_version,
        "command": exec.command,
        "args": exec.args,
        "env": env,
        "provideClusterInfo": exec.provide_cluster_info,
        "interactiveMode": "Never",
    })
}

/// Checks that a Karpor byte field is base64 of PEM text; returns it as
/// given (kubeconfig `*-data` fields are base64 too).
fn base64_pem(field: &str, value: &str) -> Result<String, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .map_err(|e| format!("{field} is not base64: {e}"))?;
    if !bytes.starts_with(b"-----BEGIN ")
        && !String::from_utf8_lossy(&bytes).contains("-----BEGIN ")
    {
        return Err(format!(
            "{field} is base64 but not PEM (no -----BEGIN line)"
        ));
    }
    Ok(value.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy of these tests: their endpoints are on loopback.
    fn loopback() -> EndpointPolicy {
        EndpointPolicy::allowing_loopback()
    }

    #[tokio::test]
    async fn an_endpoint_the_policy_refuses_is_held() {
        let metadata = ClusterAccess {
            endpoint: "http://169.254.169.254:80".into(),
            ..access(None)
        };
        let objects = [cluster("local", access(None)), cluster("meta", metadata)];
        let out = convert(&objects, false, &EndpointPolicy::default()).await;
        assert!(out.members.is_empty(), "{:?}", out.members);
        let reasons: Vec<(&str, &str)> = out
            .held
            .iter()
            .map(|h| (h.name.as_str(), h.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                ("local", ENDPOINT_NOT_ALLOWED),
                ("meta", ENDPOINT_NOT_ALLOWED)
            ]
        );
        assert!(
            out.held[1].message.contains("169.254.169.254"),
            "{:?}",
            out.held[1]
        );
        let allowed = convert(&objects[..1], false, &loopback()).await;
        assert_eq!(allowed.members.len(), 1);
    }
    use crate::karpor::types::{ExecEnvVar, X509};

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    fn cluster(name: &str, access: ClusterAccess) -> Cluster {
        let mut c = Cluster::default();
        c.metadata.name = Some(name.into());
        c.spec.access = access;
        c
    }

    fn access(credential: Option<ClusterAccessCredential>) -> ClusterAccess {
        ClusterAccess {
            endpoint: "https://127.0.0.1:6443".into(),
            credential,
            ..Default::default()
        }
    }

    fn credential(type_: &str) -> ClusterAccessCredential {
        ClusterAccessCredential {
            type_: type_.into(),
            ..Default::default()
        }
    }

    fn client_pem() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["user".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[tokio::test]
    async fn a_push_mode_cluster_is_followed_through_the_agent_it_names() {
        let agent = nkeys::KeyPair::new_user().public_key();
        let push = |name: &str, annotation: Option<&str>| {
            let mut c = cluster(name, access(None));
            c.spec.mode = "push".into();
            if let Some(value) = annotation {
                c.metadata.annotations = Some(
                    [(
                        crate::karpor::types::AGENT_ANNOTATION.to_string(),
                        value.to_string(),
                    )]
                    .into(),
                );
            }
            c
        };
        let pulled = {
            let mut c = cluster("pulled", access(None));
            c.spec.mode = "pull".into();
            c
        };
        let objects = [
            push("edge", Some(&agent)),
            push("bare", None),
            push("bad", Some("hello")),
            pulled,
        ];
        let out = convert(&objects, false, &loopback()).await;
        let members: Vec<&str> = out.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(members, ["pulled"], "pull is a pulled member");
        let held: Vec<(&str, &str, Option<&str>)> = out
            .held
            .iter()
            .map(|h| (h.name.as_str(), h.reason.as_str(), h.agent.as_deref()))
            .collect();
        assert_eq!(
            held,
            [
                ("edge", "Pushed", Some(agent.as_str())),
                ("bare", "AgentNotNamed", None),
                ("bad", "AgentNotNamed", None),
            ]
        );
        assert!(
            out.held[1].message.contains("kube-pulse.io/agent=U"),
            "{}",
            out.held[1].message
        );
        assert!(
            out.held[2].message.contains("not an nkey public key"),
            "{}",
            out.held[2].message
        );
    }

    #[tokio::test]
    async fn credentials_become_members_or_held_members_with_a_reason() {
        let (cert, key) = client_pem();
        let token = ClusterAccessCredential {
            service_account_token: "sa-token".into(),
            ..credential("ServiceAccountToken")
        };
        let x509 = ClusterAccessCredential {
            x509: Some(X509 {
                certificate: b64(&cert),
                private_key: b64(&key),
            }),
            ..credential("X509Certificate")
        };
        let exec = ClusterAccessCredential {
            exec_config: Some(ExecConfig {
                command: "karpor-login".into(),
                env: vec![ExecEnvVar {
                    name: "SECRET".into(),
                    value: "s".into(),
                }],
                ..Default::default()
            }),
            ..credential("OIDC")
        };
        let bad_x509 = ClusterAccessCredential {
            x509: Some(X509 {
                certificate: "not base64!".into(),
                private_key: b64(&key),
            }),
            ..credential("X509Certificate")
        };
        let with_ca = ClusterAccess {
            ca_bundle: Some(b64(&cert)),
            ..access(Some(token.clone()))
        };
        let bad_endpoint = ClusterAccess {
            endpoint: "10.0.0.1:6443".into(),
            ..access(None)
        };
        // (cluster, held reason or None when it runs, text in the message)
        let cases: Vec<(Cluster, Option<&str>, &str)> = vec![
            (cluster("anon", access(None)), None, ""),
            (cluster("token", access(Some(token))), None, ""),
            (cluster("cert", access(Some(x509))), None, ""),
            (cluster("ca", with_ca), None, ""),
            (
                cluster("oidc", access(Some(credential("OIDC")))),
                Some(CREDENTIALS_UNSUPPORTED),
                "OIDC",
            ),
            (
                cluster("exec", access(Some(exec))),
                Some(CREDENTIALS_UNSUPPORTED),
                "--karpor-allow-exec",
            ),
            (
                cluster("basic", access(Some(credential("Basic")))),
                Some(CREDENTIALS_UNSUPPORTED),
                "\"Basic\"",
            ),
            (
                cluster(
                    "empty-token",
                    access(Some(credential("ServiceAccountToken"))),
                ),
                None,
                "",
            ),
            (
                cluster(
                    "bad-token",
                    access(Some(ClusterAccessCredential {
                        service_account_token: "abc\r\nX-Injected: yes".into(),
                        ..credential("ServiceAccountToken")
                    })),
                ),
                Some(INVALID_ACCESS),
                "Authorization header cannot carry",
            ),
            (
                cluster("bad-cert", access(Some(bad_x509))),
                Some(INVALID_ACCESS),
                "x509.certificate is not base64",
            ),
            (
                cluster("bad-endpoint", bad_endpoint),
                Some(INVALID_ACCESS),
                "endpoint",
            ),
        ];
        for (object, want, text) in cases {
            let name = object.metadata.name.clone().unwrap();
            let out = convert(std::slice::from_ref(&object), false, &loopback()).await;
            match want {
                None => {
                    assert_eq!(out.members.len(), 1, "{name}: {:?}", out.held);
                    assert_eq!(out.members[0].name, name);
                }
                Some(reason) => {
                    assert_eq!(out.held.len(), 1, "{name} should be held");
                    let held = &out.held[0];
                    assert_eq!(
                        (held.name.as_str(), held.reason.as_str()),
                        (name.as_str(), reason)
                    );
                    assert!(held.message.contains(text), "{name}: {}", held.message);
                    assert_eq!(held.server, object.spec.access.endpoint);
                }
            }
        }
    }

    #[tokio::test]
    async fn connection_settings_reach_the_client_configuration() {
        let (cert, _) = client_pem();
        let object = cluster(
            "prod",
            ClusterAccess {
                ca_bundle: Some(b64(&cert)),
                insecure: Some(true),
                ..access(Some(ClusterAccessCredential {
                    service_account_token: "t1".into(),
                    ..credential("ServiceAccountToken")
                }))
            },
        );
        let out = convert(std::slice::from_ref(&object), false, &loopback()).await;
        let config = &out.members[0].config;
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert!(config.accept_invalid_certs);
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));
        // Another token: another fingerprint, so the member restarts.
        let mut changed = object;
        changed
            .spec
            .access
            .credential
            .as_mut()
            .unwrap()
            .service_account_token = "t2".into();
        let again = convert(&[changed], false, &loopback()).await;
        assert_ne!(
            crate::pipeline::fingerprint(config),
            crate::pipeline::fingerprint(&again.members[0].config)
        );
    }

    #[test]
    fn exec_plugins_run_only_when_allowed_and_never_interactively() {
        let credential = ClusterAccessCredential {
            exec_config: Some(ExecConfig {
                command: "karpor-login".into(),
                args: vec!["--cluster".into(), "prod".into()],
                ..Default::default()
            }),
            ..credential("OIDC")
        };
        let user = user(&credential, true).unwrap();
        assert_eq!(user["exec"]["command"], "karpor-login");
        assert_eq!(user["exec"]["interactiveMode"], "Never");
        assert_eq!(
            user["exec"]["apiVersion"],
            "client.authentication.k8s.io/v1beta1"
        );
        assert_eq!(user["exec"]["args"][1], "prod");
        let (reason, _) = super::user(&credential, false).unwrap_err();
        assert_eq!(reason, CREDENTIALS_UNSUPPORTED);
    }

    #[tokio::test]
    async fn names_that_cannot_be_topics_are_skipped() {
        let out = convert(
            &[cluster("Prod_1", access(None)), cluster("ok", access(None))],
            false,
            &loopback(),
        )
        .await;
        assert_eq!(out.members.len(), 1);
        assert_eq!(out.skipped.len(), 1);
        assert!(
            out.skipped[0].1.contains("DNS label"),
            "{}",
            out.skipped[0].1
        );
    }
}
