//! The push member of `demo --push-member NAME` (docs/AGENT.md, "In the
//! demo"): one simulated cluster is watched by a `kube-pulse agent` running
//! in the demo's process instead of by the gateway (`simulated cluster
//! ──watch──▶ agent ──[publish, signed]──▶ NATS ──▶ the demo's gateway`),
//! logged in to NATS as the gateway is. The simulator panel stops and
//! starts it again (`PUT /_sim/agent`), to show `Unknown (AgentLost)` and
//! the recovery.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube_pulse_sim::SimCluster;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentSettings};
use crate::error::{Error, Result};
use crate::gateway::GatewayConfig;
use crate::pipeline::PipelineConfig;
use crate::scale::NatsSettings;

/// Heartbeat period of the demo's agent: quick, as the demo's probes.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// How long the demo's gateway waits for a silent agent before its member
/// is `Unknown (AgentLost)`: five heartbeats.
pub const GRACE: Duration = Duration::from_secs(10);

/// The agent of the demo's push member, stopped and started at will; at
/// most one runs (the lock is held while it starts or stops).
pub struct DemoAgent {
    settings: AgentSettings,
    running: tokio::sync::Mutex<Option<Agent>>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for DemoAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoAgent")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl DemoAgent {
    /// The agent of `demo --push-member NAME` (not started yet), after checking
    /// that the demo can run it: over NATS, without Karpor, for one of its
    /// simulated clusters.
    pub fn for_member(
        name: &str,
        clusters: &[SimCluster],
        karpor: bool,
        config: &GatewayConfig,
        shutdown: &CancellationToken,
    ) -> Result<Self> {
        let refuse =
            |why: String| Err(Error::Settings(format!("demo --push-member {name}: {why}")));
        let Some(nats) = &config.nats else {
            return refuse("needs --leases --nats URL: the agent publishes there".into());
        };
        if karpor {
            return refuse("not with --karpor (its Cluster objects name pulled members)".into());
        }
        let Some(cluster) = clusters.iter().find(|c| c.name() == name) else {
            let names: Vec<&str> = clusters.iter().map(SimCluster::name).collect();
            return refuse(format!(
                "no such simulated cluster (the demo's are {})",
                names.join(", ")
            ));
        };
        Self::new(
            name,
            cluster.kube_config(),
            config.pipeline.clone(),
            nats,
            shutdown,
        )
    }

    /// An agent (not started) for `member` at `client`, with a new identity,
    /// the gateway's NATS server and login, and the public part of the
    /// gateway's hub key (tasks on the member then run; without a signing
    /// key, `--nats-insecure-unsigned`, they are refused).
    pub fn new(
        member: &str,
        client: kube::Config,
        pipeline: PipelineConfig,
        gateway_nats: &NatsSettings,
        shutdown: &CancellationToken,
    ) -> Result<Self> {
        let hub_key = match &gateway_nats.signing {
            Some(key) => Some(
                crate::scale::agents::wire::hub_public_key(&key.hub_key().public_key())
                    .map_err(Error::Settings)?,
            ),
            None => None,
        };
        // The agent signs with its own identity; the replicas' key stays theirs.
        let nats = NatsSettings {
            signing: None,
            insecure_unsigned: false,
            ..gateway_nats.clone()
        };
        let settings = AgentSettings {
            member: member.into(),
            client,
            pipeline,
            nats,
            identity: nkeys::KeyPair::new_user(),
            hub_key,
            heartbeat: HEARTBEAT,
            health: Default::default(),
            // One agent in this process, stopped and started again from the
            // simulator panel: no second one to stand by for.
            lease: None,
        };
        Ok(Self {
            settings,
            running: tokio::sync::Mutex::new(None),
            shutdown: shutdown.clone(),
        })
    }

    /// The member's name.
    pub fn member(&self) -> &str {
        &self.settings.member
    }

    /// The agent's public nkey (`U…`), which the gateway trusts for the member.
    pub fn public_key(&self) -> String {
        self.settings.identity.public_key()
    }

    /// Starts the agent (a new session) or stops it; nothing when it already is so.
    pub async fn set_running(&self, running: bool) -> Result<()> {
        let mut agent = self.running.lock().await;
        match (running, agent.take()) {
            (true, None) => {
                // Boxed: the agent's start makes a large future.
                let started = Box::pin(Agent::start(self.settings.clone(), &self.shutdown)).await?;
                *agent = Some(started);
            }
            (false, Some(stopped)) => stopped.stop().await,
            (_, unchanged) => *agent = unchanged,
        }
        Ok(())
    }

    /// Whether the agent runs.
    pub async fn running(&self) -> bool {
        self.running.lock().await.is_some()
    }
}

/// What `GET` and `PUT /_sim/agent` answer, and what `PUT` takes (`running`).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct AgentView {
    #[serde(default, skip_deserializing)]
    member: String,
    running: bool,
}

/// `GET /_sim/agent`: the push member and whether its agent runs; `PUT
/// /_sim/agent {"running": false}` stops it, `{"running": true}` starts it
/// again. The caller adds the simulator's guards.
pub(super) fn route(agent: Arc<DemoAgent>) -> Router {
    Router::new()
        .route("/_sim/agent", get(show).put(set))
        .with_state(agent)
}

async fn show(State(agent): State<Arc<DemoAgent>>) -> Response {
    let running = agent.running().await;
    Json(AgentView {
        member: agent.member().into(),
        running,
    })
    .into_response()
}

async fn set(State(agent): State<Arc<DemoAgent>>, Json(want): Json<AgentView>) -> Response {
    match agent.set_running(want.running).await {
        Ok(()) => show(State(agent)).await,
        Err(e) => e.into_response(),
    }
}
