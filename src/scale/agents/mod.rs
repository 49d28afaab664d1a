//! Members behind firewalls, hub side (`agent ──NATS──▶ [agents] ──▶ engine`):
//! a push member's status is computed by `kube-pulse agent` in the member
//! cluster, which publishes it, signed with its own nkey, into the stream
//! `{relay stream}_AGENTS`; the replica that owns the member (Leases, as
//! for any member) follows it ([`link`]) and its engine makes the member's
//! documents of those reports, which the relay then carries to every
//! replica like any other. Tasks on a push member are acted on by the
//! agent, asked over NATS request/reply with requests signed by the hub key
//! ([`AgentActions`]). The subjects, messages and signatures are
//! [`wire`]'s. docs/AGENT.md has the design, the trust and the failures.

mod link;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::engine::Observation;
use crate::metrics::Metrics;
use crate::pipeline::{PushLinks, RemoteActions};

pub use crate::scale::relay::DEFAULT_AGENT_GRACE as DEFAULT_GRACE;
/// How long a replica waits for an agent's answer to a task request.
const ACT_TIMEOUT: Duration = Duration::from_secs(30);

/// The agents' stream: every agent's subjects, the latest report of each
/// subject (kept until a newer one replaces it, however old: a document
/// that never changes is still the agent's current one), on file, with as
/// many copies as the relay's stream. No byte limit: JetStream counts a
/// stream's byte limit against the servers' store up front, and with a
/// 2 GiB one the relay's stream on the tests' nats-server stopped taking
/// changes; the links bound each member's topics instead.
pub fn stream_config(relay_stream: &str, replicas: usize) -> stream::Config {
    stream::Config {
        name: wire::stream_of(relay_stream),
        description: Some("kube-pulse: the latest report of every push member's agent".into()),
        subjects: vec![format!("{}.>", wire::PREFIX)],
        max_messages_per_subject: 1,
        storage: stream::StorageType::File,
        discard: stream::DiscardPolicy::Old,
        num_replicas: replicas,
        // Nothing kube-pulse does deletes or purges through the API; an
        // agent's publish whose reply subject names that API (JetStream
        // sends its acknowledgement there, past the agent's permissions)
        // is refused by the stream.
        deny_delete: true,
        deny_purge: true,
        ..Default::default()
    }
}

/// The nats.conf user entry of `member`'s agent, logging in with the nkey
/// `public` (`U…`): it may publish on its member's subjects only, receive
/// on its own inboxes and task requests, and answer those.
pub fn nats_user_entry(member: &str, public: &str) -> String {
    format!(
        r#"{{
  nkey: {public}
  permissions: {{
    publish: {{ allow: ["{subjects}"] }}
    subscribe: {{ allow: ["{inbox}.>", "{control}.{member}.>"] }}
    allow_responses: true
  }}
}}"#,
        subjects = wire::member_subjects(member),
        inbox = wire::inbox_prefix(member),
        control = wire::CONTROL_PREFIX,
    )
}

/// What `kube-pulse agent-key` prints: the agent's public key and where it goes.
pub fn issue_text(member: &str, public: &str) -> String {
    let entry = nats_user_entry(member, public)
        .lines()
        .map(|l| format!("      {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        "agent public key: {public}\n\n\
         1. The hub's config file (the member is pushed by this agent):\n\n\
         \x20   clusters:\n\
         \x20     - name: {member}\n\
         \x20       mode: push\n\
         \x20       agent: {public}\n\n\
         \x20  or, for a Karpor Cluster with spec.mode: push:\n\n\
         \x20   kubectl annotate clusters.cluster.karpor.io {member} kube-pulse.io/agent={public}\n\n\
         2. nats.conf, in the users of the account KUBE_PULSE:\n\n{entry}\n\n\
         3. The agent: --member {member} --nats-nkey-seed <the seed file> --hub-key <kube-pulse hub-key>\n"
    )
}

/// Following push members' agents from this replica: what the pipeline
/// calls for each push member it runs.
pub struct AgentLinks {
    client: async_nats::Client,
    js: jetstream::Context,
    stream: stream::Config,
    grace: Duration,
    /// Signs task requests (None: `--nats-insecure-unsigned`, tasks on push
    /// members are refused).
    hub_key: Option<Arc<nkeys::KeyPair>>,
    /// This replica's name, in what it tells agents.
    replica: String,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for AgentLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLinks")
            .field("stream", &self.stream.name)
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

impl AgentLinks {
    /// Creates or updates the agents' stream beside the relay's, and the links.
    pub async fn start(relay: &crate::scale::Relay, metrics: Arc<Metrics>) -> crate::Result<Self> {
        let grace = relay.agent_grace();
        let js = relay.jetstream().clone();
        let config = stream_config(relay.name(), relay.replicas());
        let stream = config.clone();
        js.create_or_update_stream(config).await.map_err(|e| {
            crate::Error::Settings(format!(
                "nats: cannot create or update the agents' stream {}: {e}",
                stream.name
            ))
        })?;
        let hub_key = relay.signing().map(|key| Arc::new(key.hub_key()));
        if let Some(key) = &hub_key {
            tracing::info!(hub_key = %key.public_key(), stream = %stream.name, ?grace, "push members' agents are followed; give agents this hub key (--hub-key) for tasks");
        }
        Ok(Self {
            client: relay.client().clone(),
            js,
            stream,
            grace,
            hub_key,
            replica: relay.replica().to_string(),
            metrics,
        })
    }
}

impl PushLinks for AgentLinks {
    fn follow(
        &self,
        member: &str,
        agent: &str,
        engine: mpsc::Sender<Observation>,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let agent = match wire::agent_key(agent) {
            Ok(agent) => agent,
            Err(e) => {
                // Checked where members are read; a link believes nothing without it.
                tracing::error!(cluster = %member, cause = %e, "a push member's agent key is not usable");
                return tokio::spawn(async {});
            }
        };
        let follow = link::Follow {
            js: self.js.clone(),
            stream: self.stream.clone(),
            member: member.to_string(),
            agent,
            grace: self.grace,
            engine,
            metrics: self.metrics.clone(),
        };
        tokio::spawn(follow.run(stop))
    }

    fn tell_pods(&self, member: &str, wanted: bool) {
        // Unsigned, an agent would not believe it (it needs --hub-key).
        let Some(hub_key) = &self.hub_key else { return };
        let word = wire::PodsWanted {
            member: member.to_string(),
            wanted,
            replica: self.replica.clone(),
            at: chrono::Utc::now(),
        };
        let payload = serde_json::to_vec(&word).expect("a word on pods serializes");
        let subject = wire::pods_subject(member);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            wire::SIGNATURE_HEADER,
            wire::sign_pods(hub_key, &subject, &payload),
        );
        let client = self.client.clone();
        tokio::spawn(async move {
            if let Err(e) = client
                .publish_with_headers(subject.clone(), headers, payload.into())
                .await
            {
                tracing::debug!(%subject, cause = %e, "the word on pods was not sent; said again later");
            }
        });
    }

    fn actions(&self, member: &str) -> Arc<dyn RemoteActions> {
        Arc::new(AgentActions {
            client: self.client.clone(),
            member: member.to_string(),
            hub_key: self.hub_key.clone(),
        })
    }
}

/// Asking one push member's agent to act for a task.
struct AgentActions {
    client: async_nats::Client,
    member: String,
    hub_key: Option<Arc<nkeys::KeyPair>>,
}

impl RemoteActions for AgentActions {
    fn act(&self, body: Value) -> BoxFuture<'static, Result<Value, (String, String)>> {
        let (client, member, hub_key) = (
            self.client.clone(),
            self.member.clone(),
            self.hub_key.clone(),
        );
        Box::pin(async move {
            let fail = |reason: &str, message: String| (reason.to_string(), message);
            let Some(hub_key) = hub_key else {
                return Err(fail(
                    "AgentRefused",
                    "tasks on push members need the replicas' signing key (--nats-signing-key-file), which signs the requests their agents check".into(),
                ));
            };
            let request = wire::ActRequest {
                member: member.clone(),
                at: chrono::Utc::now(),
                body,
            };
            let payload = serde_json::to_vec(&request).expect("a request serializes");
            let subject = wire::act_subject(&member);
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(
                wire::SIGNATURE_HEADER,
                wire::sign_request(&hub_key, &subject, &payload),
            );
            let asked = client.request_with_headers(subject, headers, payload.into());
            let answer = match tokio::time::timeout(ACT_TIMEOUT, asked).await {
                Err(_) => {
                    return Err(fail(
                        "AgentUnreachable",
                        format!("the agent of {member} did not answer within {ACT_TIMEOUT:?}"),
                    ));
                }
                Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                    return Err(fail(
                        "AgentUnreachable",
                        format!("no agent of {member} is connected to take the task"),
                    ));
                }
                Ok(Err(e)) => {
                    return Err(fail(
                        "AgentUnreachable",
                        format!("asking the agent of {member}: {e}"),
                    ));
                }
                Ok(Ok(answer)) => answer,
            };
            match serde_json::from_slice::<wire::ActReply>(&answer.payload) {
                Ok(wire::ActReply::Done(plan)) => Ok(plan),
                Ok(wire::ActReply::Refused { reason, message }) => Err((reason, message)),
                Err(e) => Err(fail(
                    "AgentAnswer",
                    format!("the agent of {member} answered with something else: {e}"),
                )),
            }
        })
    }
}
