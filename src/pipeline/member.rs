//! What the pipeline runs: a member cluster with its client configuration,
//! or a member it shows without connecting to it
//! (`member sources ──▶ [Member, HeldMember] ──▶ union, diff, Pipeline`).

/// A member cluster to watch.
#[derive(Debug, Clone)]
pub struct Member {
    /// Name in topics (`clusters/{name}`): a DNS label, unique among members.
    pub name: String,
    /// How to reach its apiserver; client-side retries are turned off.
    pub config: kube::Config,
}

/// A member kube-pulse keeps without connecting to it: no sources run.
/// Either it cannot be reached as configured (credentials it will not use,
/// an unusable endpoint), and its `clusters/{name}` topic says why as
/// `Unhealthy ({reason})`; or it is pushed by an agent (`agent` is set), and
/// its documents are the agent's (docs/AGENT.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldMember {
    /// Name in topics: a DNS label, unique among members.
    pub name: String,
    /// The apiserver URL as configured (shown as `server`).
    pub server: String,
    /// CamelCase reason, e.g. `CredentialsUnsupported`.
    pub reason: String,
    /// What is wrong, for the operator.
    pub message: String,
    /// A push member: the public nkey (`U…`) of its agent, whose signed
    /// reports are its documents.
    pub agent: Option<String>,
}

impl HeldMember {
    /// A member pushed by the agent whose public nkey is `agent`.
    pub fn pushed(name: &str, server: &str, agent: &str) -> Self {
        Self {
            name: name.into(),
            server: server.into(),
            reason: "Pushed".into(),
            message: "pushed by its agent".into(),
            agent: Some(agent.into()),
        }
    }
}
