//! The composition root: one [`Gateway`] starts the pipeline (sources,
//! engine, hub), the tasks, authentication, health and the routes from one
//! [`GatewayConfig`], serves them on a listener, and stops them in order.
//! `serve`, `demo`, the integration tests and the benchmark all start the
//! gateway through here.

mod checks;

pub use checks::health_for;

use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::AuthSettings;
use crate::config::HealthSettings;
use crate::error::{Error, Result};
use crate::http::connections::ConnectionSettings;
use crate::http::router::{self, GatewayState};
use crate::http::server::{self, TlsSettings};
use crate::hub::Hub;
use crate::karpor::{KarporCheck, KarporHealth, KarporSettings, Sharing, writer};
use crate::pipeline::union::{MemberUnion, Part};
use crate::pipeline::{HeldMember, Member, Pipeline, PipelineConfig};
use crate::scale::{LeaseSettings, NatsSettings, Ownership, Relay};
use crate::tasks::{TaskSettings, Tasks};
use crate::transports::TransportConfig;

/// Everything a gateway runs with, whatever configured it (flags, a file,
/// the demo, a test).
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The member clusters to watch.
    pub members: Vec<Member>,
    /// The push members: their agents publish their status (docs/AGENT.md).
    pub pushed: Vec<HeldMember>,
    /// Probes, thresholds, hub sizes and sync registries.
    pub pipeline: PipelineConfig,
    /// Limits, origins and timeouts of the push transports.
    pub transports: TransportConfig,
    /// Output format of the health endpoints and the external stores checked.
    pub health: HealthSettings,
    /// Deadlines, retention and capacity of tasks.
    pub tasks: TaskSettings,
    /// `/` or a prefix such as `/pulse` (see [`crate::http::web::mount`]).
    pub base_path: String,
    /// How callers authenticate.
    pub auth: AuthSettings,
    /// HTTPS when set.
    pub tls: Option<TlsSettings>,
    /// Timeouts and limits of accepted connections; trusted proxies.
    pub connections: ConnectionSettings,
    /// Members and sync registries from Karpor besides `members`, when set.
    pub karpor: Option<KarporSettings>,
    /// With several replicas: the Leases that decide which replica runs
    /// which member (src/scale/); without, this gateway runs every member.
    pub leases: Option<LeaseSettings>,
    /// With Leases: the stream of changes over NATS JetStream that gives
    /// every replica every member's documents; without, each replica serves
    /// the members it runs.
    pub nats: Option<NatsSettings>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            members: Vec::new(),
            pushed: Vec::new(),
            pipeline: PipelineConfig::default(),
            transports: TransportConfig::default(),
            health: HealthSettings::default(),
            tasks: TaskSettings::default(),
            base_path: "/".into(),
            auth: AuthSettings::default(),
            tls: None,
            connections: ConnectionSettings::default(),
            karpor: None,
            leases: None,
            nats: None,
        }
    }
}

/// A running gateway: pipeline, tasks and the state every request shares.
pub struct Gateway {
    pipeline: Arc<Pipeline>,
    /// The members of every source (file, Karpor), merged into the pipeline.
    union: Arc<MemberUnion>,
    /// The Karpor source, when configured, and what stops it (before the pipeline).
    karpor: parking_lot::Mutex<Option<(CancellationToken, tokio::task::JoinHandle<()>)>>,
    /// The status writer onto Karpor's objects (unless read-only), and what stops it.
    karpor_writer: parking_lot::Mutex<Option<(CancellationToken, tokio::task::JoinHandle<()>)>>,
    /// Which members this replica owns, with Leases; released after the pipeline stops.
    ownership: Option<Ownership>,
    /// The relay: the stream of changes between replicas, when configured; stopped
    /// after the pipeline, before the Leases are released.
    relay: Option<Arc<Relay>>,
    tasks: Arc<Tasks>,
    state: Arc<GatewayState>,
    base_path: String,
    tls: Option<TlsSettings>,
    connections: ConnectionSettings,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("members", &self.pipeline.members().names())
            .field("base_path", &self.base_path)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Starts sources, engine, hub and tasks for `config.members`, and builds
    /// authentication; everything stops when `shutdown` is cancelled (then
    /// [`Gateway::stop`] waits for it).
    pub async fn start(config: GatewayConfig, shutdown: &CancellationToken) -> Result<Self> {
        let GatewayConfig {
            members,
            pushed,
            pipeline,
            transports,
            health,
            tasks,
            base_path,
            auth,
            tls,
            connections,
            karpor,
            leases,
            nats,
        } = config;
        if let Some(leases) = &leases {
            leases.validate()?;
        }
        if let Some(nats) = &nats {
            nats.validate()?;
        }
        if nats.is_some() && leases.is_none() {
            return Err(Error::Settings(
                "--nats needs Lease ownership (--lease-kubeconfig or --lease-in-cluster, or a leases: block in the config file): the stream carries each member's documents from the one replica that runs it".into(),
            ));
        }
        if let Some(nats) = &nats {
            nats.check_integrity()?;
        }
        for member in &members {
            tracing::info!(cluster = %member.name, server = %member.config.cluster_url, "member cluster registered");
        }
        // Authentication first: a bad token file or key fails before any
        // member is watched.
        let hub = Hub::new(pipeline.hub);
        let auth = auth
            .build(hub.clone())
            .await
            .map_err(|message| Error::Settings(format!("authentication: {message}")))?;
        if !pushed.is_empty() && nats.is_none() {
            return Err(Error::Settings(
                "push members (mode: push) need --nats: their agents publish into the stream of changes (docs/AGENT.md)".into(),
            ));
        }
        let file_part = Part {
            members: members.clone(),
            held: pushed,
            registries: Some(pipeline.registries.clone()),
        };
        // With Leases, a member runs only once this replica holds its Lease.
        let (members, owned) = match &leases {
            Some(_) => (Vec::new(), Some(Default::default())),
            None => (members, None),
        };
        // With a relay of changes, clients are served what the relay
        // brings (this replica's own members' documents included), and the
        // engine's hub is where the relay's publisher reads them.
        let pipeline = if nats.is_some() {
            let origin = Hub::beside(&hub, pipeline.hub);
            Pipeline::start_apart(hub, origin, members, pipeline, shutdown).await?
        } else {
            Pipeline::start_on(hub, members, pipeline, shutdown).await?
        };
        let union = MemberUnion::with_owned(pipeline.clone(), file_part, owned);
        // Subscribed to the hub before any member starts here.
        let relay = match (nats, &leases) {
            (Some(nats), Some(leases)) => {
                tracing::info!(url = %nats.shown_url(), stream = %nats.stream, replicas = nats.replicas, login = %nats.auth.describe(), integrity = %nats.describe_integrity(), "one stream of changes over NATS JetStream");
                if nats.signing.is_none() {
                    tracing::warn!(
                        "--nats-insecure-unsigned: changes and tasks are not signed; anyone who may publish on the stream or write the task bucket is believed, and the member's owner runs such tasks with its credentials"
                    );
                }
                // Boxed: the relay's settings make a large future.
                let relay = Arc::new(
                    Box::pin(Relay::start(
                        nats,
                        leases.replica.clone(),
                        crate::scale::Hubs {
                            origin: pipeline.origin().clone(),
                            served: pipeline.hub().clone(),
                        },
                        pipeline.members().clone(),
                        union.desired(),
                        pipeline.metrics().clone(),
                        shutdown,
                    ))
                    .await?,
                );
                // Pods on demand: the owner of a member counts the
                // subscriptions of every replica's clients (every replica
                // reports them, so that replicas configured apart, or
                // during a rollout turning onDemand on, still count).
                relay.share_demand();
                // Push members' agents publish beside the stream of changes.
                let links =
                    crate::scale::AgentLinks::start(&relay, pipeline.metrics().clone()).await?;
                pipeline.set_push_links(Arc::new(links));
                Some(relay)
            }
            _ => None,
        };
        // Pods on demand, and what push members' agents are told of them.
        if pipeline.pod_watch().on_demand {
            tracing::info!(linger = ?pipeline.pod_watch().linger(), "pods and events watched on demand");
        }
        if pipeline.pod_watch().on_demand || relay.is_some() {
            tokio::spawn(pipeline.clone().follow_demand(shutdown.child_token()));
        }
        // With a relay of changes, tasks live in a JetStream bucket every
        // replica shares, and run where their member runs.
        let tasks = match &relay {
            Some(relay) => {
                let bucket = crate::scale::task_bucket_of(relay.name());
                // Boxed: opening the bucket makes a large future.
                let store = Box::pin(crate::scale::TaskBucket::open(
                    relay,
                    tasks.capacity,
                    pipeline.metrics().clone(),
                    shutdown,
                ))
                .await?;
                tracing::info!(%bucket, "tasks shared by every replica in a JetStream key-value bucket");
                Tasks::shared(store, &pipeline, tasks, union.desired(), shutdown)
            }
            None => Tasks::for_pipeline(&pipeline, tasks, shutdown),
        };
        tracing::info!(
            mode = auth.mode_name(),
            tls = tls.is_some(),
            "gateway security"
        );
        let mut checks = health_for(&pipeline, Some(tasks.clone()), health);
        if let Some(relay) = &relay {
            checks.readyz.push(Arc::new(relay.check()));
        }
        let ownership = match leases {
            Some(settings) => {
                tracing::info!(replica = %settings.replica, namespace = %settings.namespace, duration = ?settings.duration, "members owned through Leases");
                let ownership = Ownership::spawn(
                    settings,
                    union.clone(),
                    pipeline.metrics().clone(),
                    shutdown,
                )?;
                checks.readyz.push(Arc::new(ownership.check()));
                Some(ownership)
            }
            None => None,
        };
        let karpor = karpor.map(|settings| {
            tracing::info!(kubeconfig = %settings.kubeconfig.display(), context = ?settings.context, allow_exec = settings.allow_exec, "members and sync registries also from Karpor");
            let karpor_health = Arc::new(KarporHealth::default());
            checks
                .readyz
                .push(Arc::new(KarporCheck(karpor_health.clone())));
            // With Leases, each replica writes the Clusters it owns (and,
            // its hub holding every member's documents with the relay, the
            // registries whose first cluster it owns).
            let sharing = match (&ownership, &relay) {
                (None, _) => Sharing::Alone,
                (Some(_), None) => Sharing::Leases,
                (Some(_), Some(_)) => Sharing::LeasesAndStream,
            };
            let owns = ownership
                .as_ref()
                .map(|o| o.health().clone() as Arc<dyn writer::Owns>);
            let writer = settings.status.clone().map(|status| {
                let status = crate::karpor::WriterSettings { sharing, ..status };
                tracing::info!(field_manager = %format!("{}{}", writer::MANAGER_PREFIX, status.replica), "kube-pulse's status is written back onto Karpor's objects");
                let token = shutdown.child_token();
                let (state, task) = writer::spawn(
                    &settings,
                    pipeline.origin().clone(),
                    status,
                    owns,
                    union.file_names(),
                    pipeline.metrics().clone(),
                    token.clone(),
                );
                checks
                    .readyz
                    .push(Arc::new(writer::KarporStatusCheck(state)));
                (token, task)
            });
            let token = shutdown.child_token();
            let task =
                crate::karpor::reader::spawn(settings, union.clone(), karpor_health, token.clone());
            ((token, task), writer)
        });
        let (karpor, karpor_writer) = match karpor {
            Some((source, writer)) => (Some(source), writer),
            None => (None, None),
        };
        let state = GatewayState::for_pipeline(
            &pipeline,
            tasks.clone(),
            auth,
            transports,
            checks,
            shutdown.clone(),
        );
        Ok(Self {
            pipeline,
            union,
            karpor: parking_lot::Mutex::new(karpor),
            karpor_writer: parking_lot::Mutex::new(karpor_writer),
            ownership,
            relay,
            tasks,
            state,
            base_path,
            tls,
            connections,
            shutdown: shutdown.clone(),
        })
    }

    /// The documents every transport serves.
    pub fn hub(&self) -> &Arc<Hub> {
        self.pipeline.hub()
    }

    /// Sources, engine and hub.
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// The members of every source; a reloaded file replaces its part here.
    pub fn member_union(&self) -> &Arc<MemberUnion> {
        &self.union
    }

    /// Member ownership through Leases, when configured.
    pub fn ownership(&self) -> Option<&Ownership> {
        self.ownership.as_ref()
    }

    /// User actions on apps.
    pub fn tasks(&self) -> &Arc<Tasks> {
        &self.tasks
    }

    /// The state the routes share (transports, metrics, auth, health).
    pub fn state(&self) -> &Arc<GatewayState> {
        &self.state
    }

    /// What to print once `listener` is bound: `{what} listening on URL`,
    /// the URL being where the UI is (under the base path).
    pub fn listening(&self, what: &str, listener: &TcpListener) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let addr = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let base = self.base_path.trim_end_matches('/');
        format!("{what} listening on {scheme}://{addr}{base}/")
    }

    /// The gateway's routes with `extra` routes beside them, mounted under
    /// the base path.
    pub fn router(&self, extra: Router) -> Router {
        let app = router::with_extra(self.state.clone(), extra);
        crate::http::web::mount(app, &self.base_path)
    }

    /// Serves the routes (and `extra` ones) on `listener` until shutdown,
    /// then stops tasks and pipeline.
    pub async fn serve(self, listener: TcpListener, extra: Router) -> Result<()> {
        let app = self.router(extra);
        let members = self.pipeline.members().len();
        let sessions = self.state.transports.config.max_connections;
        let ceiling = (self.connections.max_total)
            .or_else(|| crate::http::connections::ceiling(members))
            .filter(|ceiling| *ceiling < sessions);
        if let Some(ceiling) = ceiling {
            // Streams are never shed: once they fill the ceiling, new
            // connections (health probes too) are refused.
            tracing::warn!(
                ceiling,
                sessions,
                "the connection ceiling (open-files limit) is below --max-connections; \
                 raise the open-files limit or lower --max-connections"
            );
        }
        let served = server::serve_with(
            listener,
            app,
            self.tls.clone(),
            self.connections.clone(),
            members,
            self.state.metrics.clone(),
            self.shutdown.clone(),
        )
        .await;
        self.stop().await;
        served
    }

    /// Stops tasks, then sources and engine, and waits for them; then
    /// releases the member Leases.
    pub async fn stop(&self) {
        // The Karpor source must not change members while the pipeline stops.
        let karpor = self.karpor.lock().take();
        if let Some((token, task)) = karpor {
            token.cancel();
            let _ = task.await;
        }
        let writer = self.karpor_writer.lock().take();
        if let Some((token, task)) = writer {
            token.cancel();
            let _ = task.await;
        }
        self.tasks.stop().await;
        self.pipeline.stop().await;
        if let Some(relay) = &self.relay {
            relay.stop().await;
        }
        // No member runs any more: others may take them at once.
        if let Some(ownership) = &self.ownership {
            ownership.stop().await;
        }
    }
}
