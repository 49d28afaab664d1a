//! The running members' kube-rs clients, shared by the pipeline (which
//! changes them as members come and go) and tasks (which act through them):
//! `pipeline ──writes──▶ [MemberClients] ◀──reads── tasks`; and how a
//! member of the `--config` file becomes a client configuration.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::member::{HeldMember, Member};
use crate::config::ClusterSpec;
use crate::error::{Error, Result};

/// Acting on a push member: its agent acts with its own credentials, asked
/// over NATS (`scale/agents/`). The request and the answer are the tasks
/// module's, as JSON; an error is a reason word and a message.
pub trait RemoteActions: Send + Sync {
    /// Asks the agent to act as `request` says; its answer.
    fn act(
        &self,
        request: Value,
    ) -> BoxFuture<'static, std::result::Result<Value, (String, String)>>;
}

/// Following the agents of push members (`scale/agents/`): set on the
/// pipeline once the stream they publish into is reachable.
pub trait PushLinks: Send + Sync {
    /// Follows `member`'s agent, whose public nkey is `agent`: its reports
    /// go to the engine through `engine` until `stop` is cancelled.
    fn follow(
        &self,
        member: &str,
        agent: &str,
        engine: mpsc::Sender<crate::engine::Observation>,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()>;
    /// How tasks act on `member`: through its agent.
    fn actions(&self, member: &str) -> Arc<dyn RemoteActions>;
    /// Tells `member`'s agent whether its pods and events are wanted (an
    /// agent with `podWatch.onDemand` watches them while they are); sent,
    /// not awaited: said again periodically.
    fn tell_pods(&self, member: &str, wanted: bool);
}

/// How tasks reach a running member.
#[derive(Clone)]
pub enum Access {
    /// Its apiserver, with the client its watches use (client-side retries off).
    Direct(kube::Client),
    /// Its agent (a push member).
    Agent(Arc<dyn RemoteActions>),
}

// By hand: the client carries the member's credentials.
impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Direct(_) => "Direct",
            Self::Agent(_) => "Agent",
        })
    }
}

/// One running member's access, and the token cancelled when the member
/// is removed (tasks on it then fail).
#[derive(Clone)]
pub struct MemberClient {
    /// How tasks act on it.
    pub access: Access,
    /// Cancelled when the member is taken out; not when it restarts with new settings.
    pub removed: CancellationToken,
}

// By hand: the client carries the member's credentials.
impl std::fmt::Debug for MemberClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberClient")
            .field("removed", &self.removed.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// Member name → client, as the members are now. Reads never wait for a
/// member change (a short lock, no await inside).
#[derive(Default)]
pub struct MemberClients {
    inner: parking_lot::RwLock<BTreeMap<String, MemberClient>>,
}

impl std::fmt::Debug for MemberClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberClients")
            .field("members", &self.names())
            .finish()
    }
}

impl MemberClients {
    /// The member's client, if it runs.
    pub fn get(&self, name: &str) -> Option<MemberClient> {
        self.inner.read().get(name).cloned()
    }

    /// Whether the member runs.
    pub fn contains(&self, name: &str) -> bool {
        self.inner.read().contains_key(name)
    }

    /// The running members' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.inner.read().keys().cloned().collect()
    }

    /// How many members run.
    pub fn len(&self) -> usize {
        self.inner.read().len()
    }

    /// True when no member runs.
    pub fn is_empty(&self) -> bool {
        self.inner.read().is_empty()
    }

    /// Every running member's client (push members have none here).
    pub fn snapshot(&self) -> BTreeMap<String, kube::Client> {
        self.inner
            .read()
            .iter()
            .filter_map(|(name, m)| match &m.access {
                Access::Direct(client) => Some((name.clone(), client.clone())),
                Access::Agent(_) => None,
            })
            .collect()
    }

    /// Sets a member's client; a new member gets a fresh removal token, a
    /// restarted one keeps its own (its tasks go on with the new client's
    /// member, they are not failed).
    pub(crate) fn set(&self, name: &str, access: Access) {
        let mut inner = self.inner.write();
        let removed = inner
            .get(name)
            .map(|m| m.removed.clone())
            .unwrap_or_default();
        inner.insert(name.to_string(), MemberClient { access, removed });
    }

    /// Takes a member out and cancels its removal token.
    pub(crate) fn remove(&self, name: &str) {
        if let Some(member) = self.inner.write().remove(name) {
            member.removed.cancel();
        }
    }
}

/// The kube-rs configuration for a member of the file, after checking that the
/// files it names can be read.
pub async fn kube_config(spec: &ClusterSpec) -> Result<kube::Config> {
    let cluster_err = |message: String| Error::Cluster {
        cluster: spec.name.clone(),
        message,
    };
    spec.check_files().map_err(Error::Settings)?;
    if let Some(path) = &spec.kubeconfig {
        let kubeconfig = Kubeconfig::read_from(path).map_err(Error::Kubeconfig)?;
        let options = KubeConfigOptions {
            context: spec.context.clone(),
            ..Default::default()
        };
        return kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(Error::Kubeconfig);
    }
    let server = spec.server.clone().unwrap_or_default();
    if spec
        .token
        .as_deref()
        .is_some_and(|t| http::HeaderValue::from_str(t).is_err())
    {
        return Err(cluster_err(
            "token has characters an Authorization header cannot carry (line ends, control characters)".into(),
        ));
    }
    let path_str = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    let document = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": spec.name, "cluster": {
            "server": server,
            "certificate-authority": path_str(&spec.ca_file),
            "insecure-skip-tls-verify": spec.insecure_skip_tls_verify,
        }}],
        "users": [{"name": spec.name, "user": {
            "token": spec.token,
            "tokenFile": path_str(&spec.token_file),
        }}],
        "contexts": [{"name": spec.name, "context": {"cluster": spec.name, "user": spec.name}}],
        "current-context": spec.name,
    });
    let kubeconfig: Kubeconfig = serde_json::from_value(document)
        .map_err(|e| cluster_err(format!("cannot build a client configuration: {e}")))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(Error::Kubeconfig)
}

/// Each member's client configuration, resolved (kubeconfig files read,
/// URLs and credentials checked).
pub async fn members(clusters: &[ClusterSpec]) -> Result<Vec<Member>> {
    let mut members = Vec::with_capacity(clusters.len());
    for spec in clusters.iter().filter(|spec| spec.pushed_by().is_none()) {
        members.push(Member {
            name: spec.name.clone(),
            config: kube_config(spec).await?,
        });
    }
    Ok(members)
}

/// The push members of the file: shown and followed through their agents,
/// never connected to.
pub fn pushed(clusters: &[ClusterSpec]) -> Vec<HeldMember> {
    clusters
        .iter()
        .filter_map(|spec| Some(HeldMember::pushed(&spec.name, "", spec.pushed_by()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::{KUBECONFIG, tempdir, write};
    use crate::config::{from_kubeconfig, load_file};

    #[tokio::test]
    async fn unreadable_files_are_named_before_anything_starts() {
        let dir = tempdir();
        let cases = [
            (
                "clusters:\n- {name: a, server: 'https://x', caFile: /nonexistent/ca.pem}\n",
                "cluster \"a\": caFile /nonexistent/ca.pem cannot be read: No such file",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x', tokenFile: /nonexistent/token}\n",
                "cluster \"a\": tokenFile /nonexistent/token cannot be read",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x', token: \"abc\\r\\nX-Injected: yes\"}\n",
                "cluster \"a\": token has characters an Authorization header cannot carry",
            ),
            (
                "clusters:\n- {name: a, kubeconfig: /nonexistent/kc}\n",
                "cluster \"a\": kubeconfig /nonexistent/kc cannot be read",
            ),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let path = write(&dir, &format!("f{i}.yaml"), text);
            let config = load_file(&path).unwrap();
            let err = members(&config.clusters).await.unwrap_err().to_string();
            assert!(err.contains(want), "case {i}: {err}");
            assert!(!err.contains("'\""), "one set of quotes: {err}");
        }
        let err = from_kubeconfig(&dir.join("missing"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("cannot read ") && !err.contains("'\""),
            "{err}"
        );
    }

    #[tokio::test]
    async fn specs_build_kube_configs() {
        let dir = tempdir();
        let path = write(&dir, "kubeconfig", KUBECONFIG);
        let spec = &from_kubeconfig(&path, &["dev".into()]).unwrap()[0];
        let config = kube_config(spec).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:1/");
        let direct = ClusterSpec {
            name: "edge".into(),
            kubeconfig: None,
            context: None,
            server: Some("http://127.0.0.1:2".into()),
            token: Some("t0k".into()),
            token_file: None,
            ca_file: None,
            insecure_skip_tls_verify: false,
            mode: crate::config::MemberMode::Pull,
            agent: None,
        };
        let config = kube_config(&direct).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:2/");
    }
}
