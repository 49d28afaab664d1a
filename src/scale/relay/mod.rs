//! The relay: one stream of changes over NATS JetStream (`owner's hub
//! ──[publisher]──▶ JetStream ──[consumer]──▶ every other replica's hub ──▶
//! transports`).
//! Each replica publishes the changes its own engine makes to the topics of
//! the members it runs ([`publish`]), signed with the replicas' shared key,
//! and applies everyone else's to its hub with the owner's revision
//! ([`consume`], [`Hub::apply_remote`]) once their MAC checks, so SSE,
//! WebSocket and REST on every replica serve every member. The stream keeps
//! the last messages of each topic; a replica reads all it holds, then
//! follows. A stream deleted or changed is made again ([`stream`]), and the
//! owners publish their documents into it again. `docs/SCALE-OUT.md` has the
//! design and its limits.

mod consume;
mod demand;
mod freshness;
mod publish;
mod settings;
mod stream;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::health::Check;
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::pipeline::MemberClients;
pub(crate) use consume::pull;
use consume::{ConsumerState, consume};
use publish::{Shared, member_patterns, publish};
pub(crate) use settings::replicas_hint;
pub use settings::{
    DEFAULT_AGENT_GRACE, DEFAULT_HISTORY, DEFAULT_REPLICAS, DEFAULT_STREAM, MAX_REPLICAS,
    NatsSettings,
};
pub(crate) use stream::{not_found as stream_missing, still_missing, stream_created};

/// A consumer with messages pending that has read none for this long is stalled.
const STALLED_AFTER: Duration = Duration::from_secs(30);
/// How long a replica starting tries to reach NATS and make the stream
/// (NATS starting beside it) before it gives up.
pub const START_PATIENCE: Duration = Duration::from_secs(60);

/// The two hubs of a replica with a stream of changes.
#[derive(Debug, Clone)]
pub struct Hubs {
    /// Where the engine puts its documents, which the stream publishes.
    pub origin: Arc<Hub>,
    /// What clients are served: the stream's documents.
    pub served: Arc<Hub>,
}

/// A running stream of changes: the publisher, the consumer and the
/// stream's guard.
#[derive(Debug)]
pub struct Relay {
    client: async_nats::Client,
    agent_grace: Duration,
    js: jetstream::Context,
    name: String,
    replicas: usize,
    url: String,
    signing: Option<crate::scale::SigningKey>,
    state: Arc<Mutex<ConsumerState>>,
    shared: Arc<Shared>,
    stop: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Relay {
    /// Connects, creates or updates the stream (trying again for up to
    /// [`START_PATIENCE`] while NATS cannot be reached or refuses), and
    /// starts publishing this replica's changes and applying the others'.
    /// Subscribes to the hub before returning, so no change made afterwards
    /// is missed. `desired` is every member name there is (owned or not):
    /// topics of other names wait until they are members here.
    pub async fn start(
        settings: NatsSettings,
        replica: String,
        hubs: Hubs,
        running: Arc<MemberClients>,
        desired: watch::Receiver<BTreeSet<String>>,
        metrics: Arc<Metrics>,
        shutdown: &CancellationToken,
    ) -> crate::Result<Self> {
        settings.validate()?;
        settings.check_integrity()?;
        let Hubs {
            origin: hub,
            served,
        } = hubs;
        let url = settings.shown_url().to_string();
        let deadline = Instant::now() + START_PATIENCE;
        let mut backoff = Duration::from_millis(500);
        let (client, js) = loop {
            let tried = async {
                let client = settings
                    .dial(connect_options(&replica, &settings.stream, &metrics))
                    .await?;
                let js = jetstream::new(client.clone());
                stream::create(&js, &settings)
                    .await
                    .map_err(crate::Error::Settings)?;
                Ok::<_, crate::Error>((client, js))
            };
            match tried.await {
                Ok(made) => break made,
                Err(e) if Instant::now() + backoff < deadline && !shutdown.is_cancelled() => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "the stream of changes cannot be made yet; trying again");
                    tokio::select! {
                        () = shutdown.cancelled() => return Err(e),
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e),
            }
        };
        metrics.stream.start(&settings.stream);
        let connected = client.connection_state() == async_nats::connection::State::Connected;
        metrics.stream.connected(&settings.stream, connected);
        let subscription = hub.subscribe(member_patterns());
        let signing = settings.signing.clone();
        let shared = Arc::new(Shared {
            settings,
            replica,
            hub,
            served,
            running,
            metrics,
            js,
            republish: Notify::new(),
        });
        let state = Arc::new(Mutex::new(ConsumerState {
            progress_at: Some(Instant::now()),
            ..ConsumerState::default()
        }));
        let stop = shutdown.child_token();
        let (js, name) = (shared.js.clone(), shared.settings.stream.clone());
        let replicas = shared.settings.replicas;
        let agent_grace = shared.settings.agent_grace;
        let tasks = vec![
            tokio::spawn(publish(shared.clone(), subscription, stop.clone())),
            tokio::spawn(freshness::share(shared.clone(), stop.clone())),
            tokio::spawn(stream::guard(shared.clone(), stop.clone())),
            tokio::spawn(consume(
                shared.clone(),
                desired,
                state.clone(),
                stop.clone(),
            )),
        ];
        Ok(Self {
            client,
            agent_grace,
            js,
            name,
            replicas,
            url,
            signing,
            state,
            shared,
            stop,
            tasks: Mutex::new(tasks),
        })
    }

    /// Reports what this replica's clients look at to the other replicas,
    /// whose owners with `podWatch.onDemand` watch those members' pods
    /// ([`demand`]); until the relay stops. Reports of the others are taken
    /// whether or not this is called.
    pub fn share_demand(&self) {
        let task = tokio::spawn(demand::share(self.shared.clone(), self.stop.clone()));
        self.tasks.lock().push(task);
    }

    /// The JetStream stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Copies of the stream (and of the task bucket) JetStream keeps.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// How long a push member's agent may be silent (`NatsSettings::agent_grace`).
    pub fn agent_grace(&self) -> Duration {
        self.agent_grace
    }

    /// The relay's NATS connection (requests to push members' agents use it).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// JetStream on the stream's connection (the task bucket uses it).
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// This replica's name (`--replica-id`).
    pub fn replica(&self) -> &str {
        &self.shared.replica
    }

    /// The key the replicas sign with (None: `--nats-insecure-unsigned`);
    /// the task bucket seals its entries with it.
    pub fn signing(&self) -> Option<&crate::scale::SigningKey> {
        self.signing.as_ref()
    }

    /// The `Nats` readiness check.
    pub fn check(self: &Arc<Self>) -> NatsCheck {
        NatsCheck(self.clone())
    }

    /// Ok while connected and the consumer is not stalled, else why not.
    fn state(&self) -> Result<(), String> {
        let connection = self.client.connection_state();
        if connection != async_nats::connection::State::Connected {
            return Err(format!("nats: {connection} ({})", self.url));
        }
        let state = self.state.lock();
        if let Some(error) = &state.error {
            return Err(format!("nats: consumer: {error}"));
        }
        match state.progress_at {
            Some(at) if state.pending > 0 && at.elapsed() > STALLED_AFTER => Err(format!(
                "nats: consumer stalled: {} messages pending, none read for {:?}",
                state.pending,
                at.elapsed()
            )),
            _ => Ok(()),
        }
    }

    /// Stops the tasks and waits for them. Call after the pipeline stopped:
    /// the members' last changes are published by then.
    pub async fn stop(&self) {
        self.stop.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock());
        for task in tasks {
            let _ = task.await;
        }
        // Every publish was acknowledged or given up: nothing to flush, and
        // a flush would wait for a broker that is away.
    }
}

/// The client's options: its name, and `kube_pulse_stream_connected` from
/// its events (which come in order).
fn connect_options(
    replica: &str,
    stream: &str,
    metrics: &Arc<Metrics>,
) -> async_nats::ConnectOptions {
    let (metrics, stream) = (metrics.clone(), stream.to_string());
    async_nats::ConnectOptions::new()
        .name(format!("kube-pulse {replica}"))
        .event_callback(move |event| {
            let (metrics, stream) = (metrics.clone(), stream.clone());
            async move {
                match event {
                    async_nats::Event::Connected => metrics.stream.connected(&stream, true),
                    async_nats::Event::Disconnected | async_nats::Event::Closed => {
                        metrics.stream.connected(&stream, false)
                    }
                    _ => {}
                }
            }
        })
}

/// `/readyz/Nats`: the broker is connected and the consumer keeps up.
#[derive(Debug)]
pub struct NatsCheck(Arc<Relay>);

impl Check for NatsCheck {
    fn name(&self) -> &str {
        "Nats"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.0.state() })
    }
}
