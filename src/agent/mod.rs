//! `kube-pulse agent`: one member's sources, engine and status machines,
//! run inside the member cluster, publishing the member's documents out
//! over NATS (`member ──▶ pipeline ──▶ hub ──[publish]──▶ NATS ──▶ the
//! member's owner on the hub`), for members the hub cannot reach (behind
//! NAT or a firewall). It dials out only; it serves `/livez`, `/readyz` and
//! `/metrics` and nothing else. Reports are signed with the agent's nkey
//! ([`publish`]); task requests from the hub are run when the hub key
//! signed them ([`act`]). docs/AGENT.md.

mod act;
mod control;
mod lease;
mod pods;
mod publish;

pub use lease::{AgentLease, DEFAULT_DURATION as DEFAULT_LEASE_DURATION, lease_name};

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use futures::future::BoxFuture;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::HealthSettings;
use crate::health::{Check, Health};
use crate::pipeline::{Member, Pipeline, PipelineConfig};
use crate::scale::NatsSettings;
use crate::scale::agents::wire;
use publish::AgentState;

/// The default heartbeat period (a fourth of the hub's default grace).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);

/// Everything an agent runs with (cloned to start it again, as the demo does).
#[derive(Clone)]
pub struct AgentSettings {
    /// The member's name on the hub (`clusters/{member}`).
    pub member: String,
    /// How to reach the member's apiserver (in-cluster, or a kubeconfig).
    pub client: kube::Config,
    /// Probes, sync registries, the app label, the pod watch.
    pub pipeline: PipelineConfig,
    /// The hub's NATS: URL, login and TLS, the relay stream's name.
    pub nats: NatsSettings,
    /// The agent's identity: the user nkey that signs its reports.
    pub identity: nkeys::KeyPair,
    /// The replicas' public key (`N…`): tasks are run when it signed them.
    pub hub_key: Option<nkeys::KeyPair>,
    /// How often the agent says it runs.
    pub heartbeat: Duration,
    /// Output format of the health endpoints.
    pub health: HealthSettings,
    /// The Lease that makes one agent per member run (None: `--no-lease`).
    pub lease: Option<AgentLease>,
}

impl std::fmt::Debug for AgentSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSettings")
            .field("member", &self.member)
            .field("server", &self.client.cluster_url.to_string())
            .field("nats", &self.nats)
            .field("identity", &self.identity.public_key())
            .field("hub_key", &self.hub_key.as_ref().map(|k| k.public_key()))
            .field("heartbeat", &self.heartbeat)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// `/readyz/Nats` of an agent.
struct AgentNats {
    client: async_nats::Client,
    state: Arc<AgentState>,
    url: String,
}

impl std::fmt::Debug for AgentNats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentNats").field("url", &self.url).finish()
    }
}

impl Check for AgentNats {
    fn name(&self) -> &str {
        "Nats"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let connection = self.client.connection_state();
            if connection != async_nats::connection::State::Connected {
                return Err(format!("nats: {connection} ({})", self.url));
            }
            if self
                .state
                .failing
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                return Err("nats: the stream does not acknowledge the agent's reports".into());
            }
            Ok(())
        })
    }
}

/// `/readyz/Lease` of an agent: it holds its member's Lease (a standing-by
/// agent is alive, not ready).
#[derive(Debug)]
struct AgentLeaseCheck(Arc<std::sync::atomic::AtomicBool>);

impl Check for AgentLeaseCheck {
    fn name(&self) -> &str {
        "Lease"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            if self.0.load(std::sync::atomic::Ordering::Relaxed) {
                Ok(())
            } else {
                Err("standing by: another agent of this member holds the Lease".into())
            }
        })
    }
}

/// A running agent.
pub struct Agent {
    pipeline: Arc<Pipeline>,
    health: Arc<Health>,
    tasks: Vec<JoinHandle<()>>,
    stop: CancellationToken,
    /// Cancelled when the agent lost its Lease: it must stop.
    lost: CancellationToken,
    member: String,
    identity: String,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("member", &self.member)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Connects to NATS (which keeps trying in the background while the
    /// broker cannot be reached) and, once this agent holds its member's
    /// Lease (at once without one), starts the member's pipeline, publishes
    /// and answers task requests until `shutdown`.
    pub async fn start(
        settings: AgentSettings,
        shutdown: &CancellationToken,
    ) -> crate::Result<Self> {
        settings.nats.validate()?;
        if !crate::names::valid_name(&settings.member) {
            return Err(crate::Error::Settings(format!(
                "--member {:?} must be a DNS label, the member's name on the hub",
                settings.member
            )));
        }
        let AgentSettings {
            member,
            client,
            pipeline,
            nats,
            identity,
            hub_key,
            heartbeat,
            health,
            lease,
        } = settings;
        let session = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        let kube = crate::sources::bounded::client(client.clone()).map_err(|e| {
            crate::Error::Settings(format!("the member's client cannot be built: {e}"))
        })?;
        // Subscribed before the member starts: every document it makes is sent.
        let hub = crate::hub::Hub::new(pipeline.hub);
        let subscription = hub.subscribe(publish::member_patterns(&member));
        let member_client = Member {
            name: member.clone(),
            config: client,
        };
        // The member is added once the Lease is held; nothing is watched before.
        let pipeline = Pipeline::start_on(hub, Vec::new(), pipeline, shutdown).await?;
        let options = async_nats::ConnectOptions::new()
            .name(format!("kube-pulse agent {member}"))
            .custom_inbox_prefix(wire::inbox_prefix(&member))
            .retry_on_initial_connect();
        let nats_client = nats.dial(options).await?;
        tracing::info!(%member, url = %nats.shown_url(), login = %nats.auth.describe(), identity = %identity.public_key(), stream = %wire::stream_of(&nats.stream), %session, tasks = hub_key.is_some(), "agent: publishing the member's status to the hub");
        if hub_key.is_none() {
            tracing::warn!("no --hub-key: task requests from the hub are refused");
        }
        let state = Arc::new(AgentState::default());
        let mut checks = crate::gateway::health_for(&pipeline, None, health);
        checks.readyz.push(Arc::new(AgentNats {
            client: nats_client.clone(),
            state: state.clone(),
            url: nats.shown_url().to_string(),
        }));
        let stop = shutdown.child_token();
        let identity_shown = identity.public_key();
        let publisher = publish::Publisher {
            js: async_nats::jetstream::new(nats_client.clone()),
            identity: Arc::new(identity),
            member: member.clone(),
            session,
            hub: pipeline.hub().clone(),
            heartbeat,
            metrics: pipeline.metrics().clone(),
            state,
        };
        let hub_key = hub_key.map(Arc::new);
        // With `podWatch.onDemand`, the member's pods are watched as the
        // hub says (the command line refuses it without a hub key).
        let pods = match (&hub_key, pipeline.pod_watch().on_demand) {
            (Some(hub_key), true) => Some(pods::Follower {
                client: nats_client.clone(),
                member: member.clone(),
                hub_key: hub_key.clone(),
                pipeline: pipeline.clone(),
            }),
            _ => None,
        };
        let responder = act::Responder {
            client: nats_client,
            member: member.clone(),
            kube: kube.clone(),
            hub_key,
            hub: pipeline.hub().clone(),
            rules: pipeline.rules().clone(),
            answered: Default::default(),
        };
        let holding = Arc::new(std::sync::atomic::AtomicBool::new(lease.is_none()));
        checks
            .readyz
            .push(Arc::new(AgentLeaseCheck(holding.clone())));
        let lost = CancellationToken::new();
        let mut holder = lease.map(|l| lease::Holder::new(kube.clone(), &member, l));
        let responder = act::Responder { kube, ..responder };
        let (run_pipeline, run_stop, run_lost) = (pipeline.clone(), stop.clone(), lost.clone());
        let run = async move {
            if let Some(holder) = holder.as_mut()
                && !holder.acquire(&run_stop).await
            {
                return;
            }
            holding.store(true, std::sync::atomic::Ordering::Relaxed);
            if let Err(e) = run_pipeline.add_member(member_client).await {
                tracing::error!(cause = %e, "the member cannot be watched");
                run_lost.cancel();
                return;
            }
            let publishing = tokio::spawn(publisher.run(subscription, run_stop.clone()));
            let answering = tokio::spawn(responder.run(run_stop.clone()));
            let hearing = pods.map(|pods| tokio::spawn(pods.run(run_stop.clone())));
            if let Some(holder) = holder.as_mut() {
                if let Err(e) = holder.keep(&run_stop).await {
                    tracing::error!(cause = %e, "the agent no longer holds its Lease; stopping");
                    holding.store(false, std::sync::atomic::Ordering::Relaxed);
                    run_lost.cancel();
                    // No report and no task after the Lease is gone.
                    run_stop.cancel();
                }
            } else {
                run_stop.cancelled().await;
            }
            let _ = publishing.await;
            let _ = answering.await;
            if let Some(hearing) = hearing {
                let _ = hearing.await;
            }
            if let Some(holder) = holder.as_mut() {
                holder.release().await;
            }
        };
        let tasks = vec![tokio::spawn(run)];
        Ok(Self {
            pipeline,
            health: Arc::new(checks),
            tasks,
            stop,
            lost,
            member,
            identity: identity_shown,
        })
    }

    /// The member's pipeline (its hub holds what the agent publishes).
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// `/livez`, `/readyz`, `/healthz` and `/metrics`: all an agent serves.
    pub fn router(&self) -> Router {
        let (metrics, hub) = (self.pipeline.metrics().clone(), self.pipeline.hub().clone());
        crate::http::health::router(self.health.clone()).route(
            "/metrics",
            get(move || {
                let (metrics, hub) = (metrics.clone(), hub.clone());
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics.render(&hub),
                    )
                }
            }),
        )
    }

    /// Serves [`Agent::router`] on `listener` until shutdown (or until the
    /// agent lost its Lease: an error, so that its pod restarts and stands
    /// by), then stops.
    pub async fn serve(self, listener: TcpListener) -> crate::Result<()> {
        let (stop, lost) = (self.stop.clone(), self.lost.clone());
        let served = axum::serve(listener, self.router())
            .with_graceful_shutdown(async move {
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = lost.cancelled() => {}
                }
            })
            .await
            .map_err(|e| crate::Error::Unavailable(format!("the agent's listener failed: {e}")));
        let lost = self.lost.is_cancelled();
        self.stop().await;
        if lost {
            return Err(crate::Error::Unavailable(
                "the agent lost its Lease (or could not watch its member); exiting".into(),
            ));
        }
        served
    }

    /// Stops publishing and the pipeline, and waits for them.
    pub async fn stop(mut self) {
        self.stop.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        self.pipeline.stop().await;
    }
}
