//! The relay: one stream of changes over NATS JetStream (`owner's hub
//! ──[publisher]──▶ JetStream ──[consumer]──▶ every other replica's hub ──▶
//! transports`).
//! Each replica publishes the changes its own engine makes to the topics of
//! the members it runs, and applies everyone else's to its hub with the
//! owner's revision ([`Hub::apply_remote`]), so SSE, WebSocket and REST on
//! every replica serve every member. The stream keeps the last messages of
//! each topic; a replica starts from the last one of every topic, then
//! follows. `docs/SCALE-OUT.md` has the design and its limits.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::nats_auth::{NatsAuth, NatsAuthError, has_userinfo};
use super::subject::{self, Envelope};
use crate::health::Check;
use crate::hub::{ChangeKind, Delivery, Hub, Pattern, Topic};
use crate::metrics::Metrics;
use crate::pipeline::MemberClients;
use crate::protocol::topic::TopicKind;

/// Default name of the JetStream stream.
pub const DEFAULT_STREAM: &str = "KUBE_PULSE";
/// Default messages kept per topic: the last one rebuilds the document; a
/// few more keep the stream's recent history for later use.
pub const DEFAULT_HISTORY: i64 = 16;
/// Default copies of the stream (and of the task bucket): one server.
pub const DEFAULT_REPLICAS: usize = 1;
/// The most copies JetStream keeps of a stream (nats-server refuses more:
/// "maximum replicas is 5").
pub const MAX_REPLICAS: usize = 5;
/// How often the server says an idle pull of the consumer is alive; two
/// missed in a row (the consumer's server gone, say) and it is made again.
const HEARTBEAT: Duration = Duration::from_secs(3);
/// How long one pull request waits on the server (more than 2 × HEARTBEAT,
/// as the server requires).
const PULL_EXPIRES: Duration = Duration::from_secs(30);
/// A consumer no pull has reached for this long is deleted by the server
/// (one left behind when it was made again).
const INACTIVE: Duration = Duration::from_secs(30);
/// A consumer with messages pending that has read none for this long is stalled.
const STALLED_AFTER: Duration = Duration::from_secs(30);
/// Messages kept for members this replica does not know yet (a Karpor
/// member before Karpor was read): the newest per topic, this many topics.
const PARKED_TOPICS: usize = 100_000;

/// Where the stream of changes is, and how the client logs in there.
#[derive(Clone, PartialEq, Eq)]
pub struct NatsSettings {
    /// `nats://HOST:PORT` of a NATS server with JetStream, or several
    /// servers of one cluster separated by commas (the client connects to
    /// any of them and learns the others from it).
    pub url: String,
    /// The JetStream stream's name.
    pub stream: String,
    /// Messages kept per topic (`max_msgs_per_subject`).
    pub history: i64,
    /// Copies of the stream and of the task bucket on distinct servers of
    /// a JetStream cluster (`num_replicas`), 1 to 5.
    pub replicas: usize,
    /// Credentials and TLS of the client (anonymous and plain by default).
    pub auth: NatsAuth,
}

impl std::fmt::Debug for NatsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSettings")
            .field("url", &self.shown_url())
            .field("stream", &self.stream)
            .field("history", &self.history)
            .field("replicas", &self.replicas)
            .field("auth", &self.auth)
            .finish()
    }
}

impl NatsSettings {
    /// Settings for the server at `url`, with the default stream.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            stream: DEFAULT_STREAM.into(),
            history: DEFAULT_HISTORY,
            replicas: DEFAULT_REPLICAS,
            auth: NatsAuth::default(),
        }
    }

    /// The URL as logs and errors may show it: not at all when it carries
    /// credentials (which [`NatsSettings::validate`] refuses).
    pub fn shown_url(&self) -> &str {
        if has_userinfo(&self.url) {
            "(a URL with credentials, not shown)"
        } else {
            &self.url
        }
    }

    /// The servers of `url`, in order (each URL of the comma-separated list,
    /// trimmed).
    pub fn servers(&self) -> Vec<&str> {
        self.url.split(',').map(str::trim).collect()
    }

    /// Refuses a URL that carries credentials (without showing it), a URL
    /// (of the list) that is not `nats://HOST:PORT` or `tls://HOST:PORT`, a
    /// stream name NATS would refuse, a history outside 1 to 1000, and
    /// replicas outside 1 to 5.
    pub fn validate(&self) -> crate::Result<()> {
        if has_userinfo(&self.url) {
            return Err(NatsAuthError::UrlCredentials.into());
        }
        let refuse = |m: String| Err(crate::Error::Settings(format!("nats: {m}")));
        for url in self.servers() {
            let host = url
                .strip_prefix("nats://")
                .or_else(|| url.strip_prefix("tls://"));
            let plain = |h: &str| !h.is_empty() && !h.contains(|c: char| c.is_whitespace());
            if !host.is_some_and(plain) || url.parse::<async_nats::ServerAddr>().is_err() {
                return refuse(format!(
                    "each URL must be nats://HOST:PORT or tls://HOST:PORT (several separated by commas), not {url:?}"
                ));
            }
        }
        let bad = |c: char| c.is_whitespace() || ".*>/\\".contains(c);
        if self.stream.is_empty() || self.stream.len() > 255 || self.stream.contains(bad) {
            return refuse(format!(
                "the stream name {:?} must be 1 to 255 characters without whitespace, '.', '*', '>', '/' or '\\'",
                self.stream
            ));
        }
        if !(1..=1000).contains(&self.history) {
            return refuse(format!(
                "historyPerTopic must be 1 to 1000, not {}",
                self.history
            ));
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return refuse(format!(
                "streamReplicas must be 1 to {MAX_REPLICAS} (JetStream keeps at most {MAX_REPLICAS} copies), not {}",
                self.replicas
            ));
        }
        Ok(())
    }

    /// Connects a client named `name` with these settings' credentials and
    /// TLS, after [`NatsSettings::validate`]: what the relay's client does,
    /// without its events.
    pub async fn connect(&self, name: &str) -> crate::Result<async_nats::Client> {
        self.validate()?;
        self.dial(async_nats::ConnectOptions::new().name(name))
            .await
    }

    /// Connects with `options` and these settings' credentials and TLS,
    /// to any server of the list; the error names the URL, no secret.
    async fn dial(&self, options: async_nats::ConnectOptions) -> crate::Result<async_nats::Client> {
        let url = self.shown_url();
        self.auth
            .apply(options)?
            // Any server of the list; the client learns the cluster's
            // others from it, and reconnects to any of them.
            .connect(self.servers())
            .await
            .map_err(|e| crate::Error::Settings(format!("nats: cannot connect to {url}: {e}")))
    }
}

/// What to add to an error of JetStream about a stream of `replicas`
/// copies: more than one needs as many servers in a JetStream cluster
/// (a single server answers "replicas > 1 not supported in non-clustered
/// mode", a smaller cluster "no suitable peers for placement").
pub(crate) fn replicas_hint(replicas: usize) -> String {
    if replicas > 1 {
        format!(
            " (streamReplicas {replicas} needs a JetStream cluster of at least {replicas} servers)"
        )
    } else {
        String::new()
    }
}

/// The member cluster a topic belongs to; None for topics of no member
/// (tasks, summaries), which each replica keeps to itself.
fn cluster_of(topic: &Topic) -> Option<&str> {
    match topic.kind()? {
        TopicKind::Cluster { cluster }
        | TopicKind::Sync { cluster, .. }
        | TopicKind::App { cluster, .. } => Some(cluster),
        TopicKind::Task { .. } => None,
    }
}

/// What a replica does with a message of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// Its own (an echo), a topic of no member, or of a member it runs
    /// (its own engine is the owner; a late message of the previous owner).
    Skip,
    /// A member it does not know (yet): kept until it is one.
    Park,
    /// Into the hub, with the owner's revision.
    Apply,
}

/// What replica `me`, running the members `runs` says and knowing the
/// members `desired`, does with `envelope`. Pure.
fn decide(
    envelope: &Envelope,
    me: &str,
    runs: impl Fn(&str) -> bool,
    desired: &BTreeSet<String>,
) -> Decision {
    if envelope.replica == me {
        return Decision::Skip;
    }
    let topic = Topic::new(&envelope.topic);
    match cluster_of(&topic) {
        None => Decision::Skip,
        Some(cluster) if runs(cluster) => Decision::Skip,
        Some(cluster) if !desired.contains(cluster) => Decision::Park,
        Some(_) => Decision::Apply,
    }
}

/// What `/readyz/Nats` reads.
#[derive(Debug, Default)]
struct ConsumerState {
    /// When the consumer last read a message (or started).
    progress_at: Option<Instant>,
    /// Messages pending after the last one read.
    pending: u64,
    /// The consumer's last error, cleared by the next message.
    error: Option<String>,
}

/// The two hubs of a replica with a stream of changes.
#[derive(Debug, Clone)]
pub struct Hubs {
    /// Where the engine puts its documents, which the stream publishes.
    pub origin: Arc<Hub>,
    /// What clients are served: the stream's documents.
    pub served: Arc<Hub>,
}

/// A running stream of changes: the publisher and the consumer.
#[derive(Debug)]
pub struct Relay {
    client: async_nats::Client,
    js: jetstream::Context,
    name: String,
    replicas: usize,
    url: String,
    state: Arc<Mutex<ConsumerState>>,
    stop: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// Everything the two tasks read.
struct Shared {
    settings: NatsSettings,
    replica: String,
    /// Where the engine puts its documents: the ones published come from
    /// here; the other owners' are applied here too, so that the engine of
    /// a member moving here continues its revisions.
    hub: Arc<Hub>,
    /// What clients are served from: every member's documents, this
    /// replica's own included, in the stream's order and no earlier.
    served: Arc<Hub>,
    /// The members this replica runs: their topics are its own.
    running: Arc<MemberClients>,
    metrics: Arc<Metrics>,
    js: jetstream::Context,
}

impl Relay {
    /// Connects, creates or updates the stream, and starts publishing this
    /// replica's changes and applying the others'. Subscribes to the hub
    /// before returning, so no change made afterwards is missed. `desired`
    /// is every member name there is (owned or not): topics of other names
    /// wait until they are members here.
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
        let Hubs {
            origin: hub,
            served,
        } = hubs;
        let url = settings.shown_url().to_string();
        let (events_metrics, events_stream) = (metrics.clone(), settings.stream.clone());
        let options = async_nats::ConnectOptions::new()
            .name(format!("kube-pulse {replica}"))
            // `kube_pulse_stream_connected`: the client's events come in order.
            .event_callback(move |event| {
                let (metrics, stream) = (events_metrics.clone(), events_stream.clone());
                async move {
                    match event {
                        async_nats::Event::Connected => metrics.stream.connected(&stream, true),
                        async_nats::Event::Disconnected | async_nats::Event::Closed => {
                            metrics.stream.connected(&stream, false)
                        }
                        _ => {}
                    }
                }
            });
        let client = settings.dial(options).await?;
        let js = jetstream::new(client.clone());
        js.create_or_update_stream(stream::Config {
            name: settings.stream.clone(),
            description: Some("kube-pulse: the last documents of every topic".into()),
            subjects: vec![format!("{}.>", subject::PREFIX)],
            max_messages_per_subject: settings.history,
            storage: stream::StorageType::File,
            discard: stream::DiscardPolicy::Old,
            num_replicas: settings.replicas,
            ..Default::default()
        })
        .await
        .map_err(|e| {
            crate::Error::Settings(format!(
                "nats: cannot create or update the stream {}: {e}{}",
                settings.stream,
                replicas_hint(settings.replicas)
            ))
        })?;
        metrics.stream.start(&settings.stream);
        let connected = client.connection_state() == async_nats::connection::State::Connected;
        metrics.stream.connected(&settings.stream, connected);
        let subscription = hub.subscribe(
            ["clusters/*", "clusters/**", "apps/**"]
                .into_iter()
                .map(|p| Pattern::parse(p).expect("a valid pattern"))
                .collect(),
        );
        let shared = Arc::new(Shared {
            settings,
            replica,
            hub,
            served,
            running,
            metrics,
            js,
        });
        let state = Arc::new(Mutex::new(ConsumerState {
            progress_at: Some(Instant::now()),
            ..ConsumerState::default()
        }));
        let stop = shutdown.child_token();
        let (js, name) = (shared.js.clone(), shared.settings.stream.clone());
        let replicas = shared.settings.replicas;
        let tasks = vec![
            tokio::spawn(publish(shared.clone(), subscription, stop.clone())),
            tokio::spawn(consume(shared, desired, state.clone(), stop.clone())),
        ];
        Ok(Self {
            client,
            js,
            name,
            replicas,
            url,
            state,
            stop,
            tasks: Mutex::new(tasks),
        })
    }

    /// The JetStream stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Copies of the stream (and of the task bucket) JetStream keeps.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// JetStream on the stream's connection (the task bucket uses it).
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
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

    /// Stops both tasks and waits for them. Call after the pipeline stopped:
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

/// Publishes the hub's own changes of the members this replica runs. A
/// removal is published only while the member still runs (an app or a
/// resource gone): the removals of a member stopped here (handed over, or
/// taken out of the sources) are not, since its new owner, or every
/// replica's own sources, decide what becomes of it. A change that could not
/// be published, or that the hub's queue dropped, is published again later
/// as the topic's current document.
async fn publish(shared: Arc<Shared>, mut sub: crate::hub::Subscription, stop: CancellationToken) {
    let mut retry: BTreeSet<Topic> = BTreeSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A publish waits for the stream's acknowledgement (seconds while the
    // broker is away): stopping does not wait for it.
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = publish_next(&shared, &mut sub, &mut retry, &mut tick) => {}
        }
    }
}

/// Publishes the next change, or retries the topics that failed once a
/// second.
async fn publish_next(
    shared: &Shared,
    sub: &mut crate::hub::Subscription,
    retry: &mut BTreeSet<Topic>,
    tick: &mut tokio::time::Interval,
) {
    let delivery = tokio::select! {
        _ = tick.tick(), if !retry.is_empty() => {
            for topic in std::mem::take(retry) {
                if let Err(topic) = shared.publish_current(topic).await {
                    retry.insert(topic);
                }
            }
            return;
        }
        delivery = sub.next() => delivery,
    };
    match delivery {
        Delivery::Change(change) => {
            let Some(cluster) = cluster_of(&change.topic) else {
                return;
            };
            let stopped_here =
                change.kind == ChangeKind::Removed && !shared.running.contains(cluster);
            if stopped_here {
                // Handed over (or taken out): the engine here forgot the
                // topic, but the stream has it. The engine's hub goes back
                // to the stream's document at its revision, so that if the
                // member comes back here, its engine continues from there
                // (a local removal would have taken a revision the stream
                // never saw, and its next document would skip one).
                if let Some(held) = shared.served.get(change.topic.as_str()) {
                    shared.hub.apply_remote(
                        change.topic.as_str(),
                        held.rev,
                        Some((*held.doc).clone()),
                    );
                }
                return;
            }
            if change.remote {
                return;
            }
            let envelope = Envelope {
                topic: change.topic.to_string(),
                rev: change.rev,
                replica: shared.replica.clone(),
                doc: change.doc.as_deref().cloned(),
            };
            if !shared.send(&envelope).await {
                retry.insert(change.topic.clone());
            }
        }
        Delivery::Resync { topic, .. } => {
            if let Err(topic) = shared.publish_current(topic).await {
                retry.insert(topic);
            }
        }
    }
}

impl Shared {
    /// Publishes one envelope and waits for the stream's acknowledgement.
    async fn send(&self, envelope: &Envelope) -> bool {
        let payload = match serde_json::to_vec(envelope) {
            Ok(payload) => payload,
            Err(e) => {
                tracing::error!(topic = %envelope.topic, cause = %e, "a change could not be encoded for the stream");
                return true;
            }
        };
        let subject = subject::of_topic(&envelope.topic);
        let acked = match self.js.publish(subject, payload.into()).await {
            Ok(ack) => ack.await.map(drop).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let ok = acked.is_ok();
        if let Err(cause) = acked {
            tracing::warn!(topic = %envelope.topic, rev = envelope.rev, %cause, "a change was not published to the stream; retrying with the current document");
        }
        self.metrics.stream.published(&self.settings.stream, ok);
        ok
    }

    /// Publishes the current document of a topic of a member this replica
    /// runs (nothing for others); Err(topic) to try again.
    async fn publish_current(&self, topic: Topic) -> Result<(), Topic> {
        let runs = cluster_of(&topic).is_some_and(|c| self.running.contains(c));
        let Some(current) = self.hub.get(topic.as_str()).filter(|_| runs) else {
            return Ok(());
        };
        let envelope = Envelope {
            topic: topic.to_string(),
            rev: current.rev,
            replica: self.replica.clone(),
            doc: Some((*current.doc).clone()),
        };
        if self.send(&envelope).await {
            Ok(())
        } else {
            Err(topic)
        }
    }

    /// Applies the stream's message `read` of another replica, unless this
    /// replica runs the member now (its own engine is the owner), or the
    /// member is not one of `desired` (parked until it is). Its own
    /// messages tell the hub where its changes are in the stream.
    fn apply(
        &self,
        read: Read,
        envelope: Envelope,
        desired: &BTreeSet<String>,
        parked: &mut HashMap<String, (u64, Envelope)>,
    ) {
        let runs = |cluster: &str| self.running.contains(cluster);
        let decision = decide(&envelope, &self.replica, runs, desired);
        let member = cluster_of(&Topic::new(&envelope.topic)).is_some();
        if decision == Decision::Park || !member {
            self.served.stream_read(read.seq, read.following);
            if decision == Decision::Park
                && (parked.len() < PARKED_TOPICS || parked.contains_key(&envelope.topic))
            {
                parked.insert(envelope.topic.clone(), (read.seq, envelope));
            }
            return;
        }
        if decision == Decision::Apply {
            self.hub
                .apply_remote(&envelope.topic, envelope.rev, envelope.doc.clone());
        }
        self.served.apply_streamed(
            read.seq,
            read.following,
            &envelope.topic,
            envelope.rev,
            envelope.doc,
        );
    }

    /// The member set changed: members no longer there leave this hub
    /// (their topics from other replicas; the sources of one running here
    /// are stopped by the union), and parked topics of new ones are applied.
    fn members_changed(
        &self,
        desired: &BTreeSet<String>,
        parked: &mut HashMap<String, (u64, Envelope)>,
    ) {
        let all: Vec<Pattern> = ["clusters/*", "clusters/**", "apps/**"]
            .into_iter()
            .map(|p| Pattern::parse(p).expect("a valid pattern"))
            .collect();
        for hub in [&self.hub, &self.served] {
            for doc in hub.list(&all) {
                let Some(cluster) = cluster_of(&doc.topic) else {
                    continue;
                };
                if !desired.contains(cluster) && !self.running.contains(cluster) {
                    hub.remove(doc.topic.as_str());
                }
            }
        }
        let ready: Vec<String> = parked
            .iter()
            .filter(|(_, (_, e))| {
                cluster_of(&Topic::new(&e.topic)).is_some_and(|c| desired.contains(c))
            })
            .map(|(topic, _)| topic.clone())
            .collect();
        for topic in ready {
            if let Some((seq, envelope)) = parked.remove(&topic) {
                // Read long ago: the hub's position is past it already.
                let read = Read {
                    seq,
                    following: false,
                };
                self.apply(read, envelope, desired, parked);
            }
        }
    }
}

/// A message of the stream, as the consumer read it.
#[derive(Debug, Clone, Copy)]
struct Read {
    /// Its stream sequence.
    seq: u64,
    /// The consumer has read every message up to it (or a later one of its
    /// topic): past its first pass over the last message of every topic.
    following: bool,
}

/// Reads the stream from the last message of every topic on, applying the
/// other replicas' changes; a consumer made again after an error, a missed
/// heartbeat or a message skipped.
async fn consume(
    shared: Arc<Shared>,
    mut desired: watch::Receiver<BTreeSet<String>>,
    state: Arc<Mutex<ConsumerState>>,
    stop: CancellationToken,
) {
    let mut parked: HashMap<String, (u64, Envelope)> = HashMap::new();
    // The member names, copied once per change of them (not per message).
    let mut names = desired.borrow_and_update().clone();
    let mut backoff = Duration::from_millis(250);
    'consumer: while !stop.is_cancelled() {
        let messages = match open_consumer(&shared).await {
            Ok((stream_id, messages)) => {
                shared.served.follow_stream(&stream_id);
                messages
            }
            Err(error) => {
                tracing::warn!(%error, "the stream of changes cannot be read; trying again");
                state.lock().error = Some(error);
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        let mut messages = std::pin::pin!(messages);
        // A new consumer first reads the last message of every topic: the
        // hub's position moves only once it has read them all.
        let mut following = false;
        // The consumer's sequence of the last message: the next must follow.
        let mut delivered = 0;
        {
            let mut state = state.lock();
            state.error = None;
            state.progress_at = Some(Instant::now());
        }
        loop {
            let message = tokio::select! {
                _ = stop.cancelled() => break 'consumer,
                changed = desired.changed() => {
                    if changed.is_ok() {
                        names = desired.borrow_and_update().clone();
                        shared.members_changed(&names, &mut parked);
                    }
                    continue;
                }
                message = messages.next() => message,
            };
            let message = match message {
                Some(Ok(message)) => message,
                Some(Err(e)) => {
                    // Missed heartbeats too: its server went away, or its
                    // pull was lost with a connection.
                    state.lock().error = Some(e.to_string());
                    tracing::warn!(cause = %e, "the stream of changes failed; reading it again");
                    continue 'consumer;
                }
                None => continue 'consumer,
            };
            backoff = Duration::from_millis(250);
            let (seq, pending) = match message.info() {
                Ok(info) if info.consumer_sequence != delivered + 1 => {
                    tracing::warn!(
                        after = delivered,
                        got = info.consumer_sequence,
                        "the stream of changes skipped a message; reading it again"
                    );
                    continue 'consumer;
                }
                Ok(info) => {
                    delivered = info.consumer_sequence;
                    (info.stream_sequence, info.pending)
                }
                Err(e) => {
                    tracing::warn!(subject = %message.subject, cause = %e, "a message of the stream of changes has no stream sequence; skipped");
                    continue;
                }
            };
            following |= pending == 0;
            {
                let mut state = state.lock();
                state.pending = pending;
                state.progress_at = Some(Instant::now());
                state.error = None;
            }
            shared
                .metrics
                .stream
                .consumed(&shared.settings.stream, pending);
            match serde_json::from_slice::<Envelope>(&message.payload) {
                Ok(envelope) => {
                    shared.apply(Read { seq, following }, envelope, &names, &mut parked);
                }
                Err(e) => {
                    shared.served.stream_read(seq, following);
                    tracing::warn!(subject = %message.subject, cause = %e, "a message of the stream of changes is not a change; skipped");
                }
            }
        }
    }
}

/// A consumer of every topic's subject, from the last message of each (then
/// every new one), in order: ephemeral, one copy in memory, nothing to
/// acknowledge (as JetStream's ordered consumers); pulled with a heartbeat
/// of [`HEARTBEAT`], so that one lost with its server is noticed within
/// seconds. With the stream's name in cursors (hex of its creation time: a
/// stream made again gets another).
async fn open_consumer(shared: &Shared) -> Result<(String, consumer::pull::Stream), String> {
    let stream = shared
        .js
        .get_stream(&shared.settings.stream)
        .await
        .map_err(|e| format!("stream {}: {e}", shared.settings.stream))?;
    let created = stream.cached_info().created.unix_timestamp_nanos() / 1000;
    let id = format!("{:x}", created.max(0));
    let consumer = stream
        .create_consumer(consumer::pull::Config {
            filter_subject: format!("{}.>", subject::PREFIX),
            deliver_policy: consumer::DeliverPolicy::LastPerSubject,
            ack_policy: consumer::AckPolicy::None,
            max_deliver: 1,
            inactive_threshold: INACTIVE,
            num_replicas: 1,
            memory_storage: true,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("consumer: {e}"))?;
    let messages = consumer
        .stream()
        .heartbeat(HEARTBEAT)
        .expires(PULL_EXPIRES)
        .messages()
        .await
        .map_err(|e| format!("messages: {e}"))?;
    Ok((id, messages))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_validated() {
        let with = |url: &str, change: fn(&mut NatsSettings)| {
            let mut settings = NatsSettings::new(url);
            change(&mut settings);
            settings
        };
        let keep: fn(&mut NatsSettings) = |_| {};
        // (settings, None when valid, else a part of the error)
        let cases: Vec<(NatsSettings, Option<&str>)> = vec![
            (with("nats://127.0.0.1:4222", keep), None),
            (with("tls://nats.example:4222", keep), None),
            (with("nats://a:4222,nats://b:4222,tls://c:4222", keep), None),
            (with(" nats://a:4222 , nats://b:4222 ", keep), None),
            (
                with("http://127.0.0.1:4222", keep),
                Some("nats://HOST:PORT"),
            ),
            (with("nats://", keep), Some("\"nats://\"")),
            (with("127.0.0.1:4222", keep), Some("\"127.0.0.1:4222\"")),
            (with("nats://a:4222,", keep), Some("not \"\"")),
            (with("nats://a:4222,,nats://b:4222", keep), Some("not \"\"")),
            (with("nats://a:4222,ws://b:80", keep), Some("\"ws://b:80\"")),
            (with("nats://a b:4222", keep), Some("\"nats://a b:4222\"")),
            (
                with("nats://h:1", |s| s.stream = "a.b".into()),
                Some("stream name"),
            ),
            (
                with("nats://h:1", |s| s.stream = String::new()),
                Some("stream name"),
            ),
            (
                with("nats://h:1", |s| s.history = 0),
                Some("historyPerTopic"),
            ),
            (
                with("nats://h:1", |s| s.history = 1001),
                Some("historyPerTopic"),
            ),
            (
                with("nats://h:1", |s| s.replicas = 0),
                Some("streamReplicas must be 1 to 5"),
            ),
            (with("nats://h:1", |s| s.replicas = 1), None),
            (with("nats://h:1", |s| s.replicas = 2), None),
            (with("nats://h:1", |s| s.replicas = 3), None),
            (with("nats://h:1", |s| s.replicas = 5), None),
            (with("nats://h:1", |s| s.replicas = 6), Some("not 6")),
            (
                with("nats://kube-pulse:s3cret@h:4222", keep),
                Some("carries credentials"),
            ),
            (with("nats://s3cret@h:4222", keep), Some("--nats-user")),
            (
                with("nats://a:1,tls://u:s3cret@b:2", keep),
                Some("carries credentials"),
            ),
        ];
        for (settings, want) in cases {
            match (settings.validate(), want) {
                (Ok(()), None) => {}
                (Err(err), Some(part)) => {
                    let err = err.to_string();
                    assert!(
                        err.starts_with("settings") || err.contains("nats: "),
                        "{err}"
                    );
                    assert!(err.contains(part), "{settings:?}: {err} lacks {part:?}");
                    assert!(!err.contains("s3cret"), "{err}");
                }
                (got, _) => panic!("{settings:?}: {got:?}, expected {want:?}"),
            }
        }
    }

    #[test]
    fn a_url_with_credentials_is_never_shown() {
        let settings = NatsSettings::new("nats://kube-pulse:s3cret@h:4222");
        for shown in [format!("{settings:?}"), settings.shown_url().to_string()] {
            assert!(!shown.contains("s3cret"), "{shown}");
        }
        let plain = NatsSettings::new("nats://h:4222");
        assert_eq!(plain.shown_url(), "nats://h:4222");
        assert!(format!("{plain:?}").contains("nats://h:4222"));
    }

    #[test]
    fn a_list_of_servers_is_split_in_order() {
        for (url, servers) in [
            ("nats://a:4222", vec!["nats://a:4222"]),
            (
                "nats://a:4222,nats://b:4222",
                vec!["nats://a:4222", "nats://b:4222"],
            ),
            (
                " tls://a:1 ,nats://b:2, nats://c:3",
                vec!["tls://a:1", "nats://b:2", "nats://c:3"],
            ),
        ] {
            assert_eq!(NatsSettings::new(url).servers(), servers, "{url}");
        }
    }

    #[test]
    fn more_than_one_replica_says_it_needs_as_many_servers() {
        assert_eq!(replicas_hint(1), "");
        assert!(replicas_hint(3).contains("at least 3 servers"));
    }

    #[test]
    fn a_replica_applies_what_others_publish_of_members_it_knows_and_does_not_run() {
        let desired: BTreeSet<String> = ["a", "b"].into_iter().map(String::from).collect();
        let runs = |cluster: &str| cluster == "a";
        let from = |replica: &str, topic: &str| Envelope {
            topic: topic.into(),
            rev: 1,
            replica: replica.into(),
            doc: None,
        };
        for (envelope, want) in [
            (from("me", "clusters/b"), Decision::Skip),
            (from("other", "clusters/a"), Decision::Skip),
            (from("other", "apps/a/ns/x"), Decision::Skip),
            (from("other", "tasks/1"), Decision::Skip),
            (from("other", "clusters/b"), Decision::Apply),
            (
                from("other", "clusters/b/sync/apps/v1/deployments"),
                Decision::Apply,
            ),
            (from("other", "apps/b/ns/x"), Decision::Apply),
            (from("other", "clusters/c"), Decision::Park),
            (from("me", "clusters/c"), Decision::Skip),
        ] {
            assert_eq!(
                decide(&envelope, "me", runs, &desired),
                want,
                "{envelope:?}"
            );
        }
    }

    #[test]
    fn only_member_topics_travel() {
        for (topic, cluster) in [
            ("clusters/a", Some("a")),
            ("clusters/a/sync/apps/v1/deployments", Some("a")),
            ("apps/a/shop/web", Some("a")),
            ("tasks/1", None),
            ("summary/clusters", None),
        ] {
            assert_eq!(cluster_of(&Topic::new(topic)), cluster, "{topic}");
        }
    }
}
