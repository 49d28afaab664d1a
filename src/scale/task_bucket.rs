//! The task bucket: tasks shared by replicas, a [`TaskStore`] over a NATS
//! JetStream key-value bucket (`tasks ──▶ [bucket KUBE_PULSE_TASKS] ◀── every
//! replica's watch`). Any replica stores a task; every replica watches the
//! bucket, publishes each revision on `tasks/{id}`, and the replica that
//! runs the task's member executes it (src/tasks/service.rs). A task's
//! `revision` is its entry's revision in the bucket, so an update names the
//! revision it read and JetStream refuses it when another replica wrote in
//! between ([`StoreError::Stale`]). One active task per app holds across
//! replicas through a claim per app in the same bucket (`app.{cluster}.
//! {namespace}.{app}`, made only if absent, so two replicas creating a task
//! for one app at once cannot both succeed). `docs/SCALE-OUT.md` has the
//! design.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::signing::{Rejection, RejectionLog, SigningKey};
use crate::metrics::Metrics;
use crate::tasks::{Created, StoreError, Task, TaskChange, TaskStore};

/// The bucket of the tasks beside the stream `stream`: `{stream}_TASKS`
/// (`KUBE_PULSE_TASKS` with the default stream).
pub fn bucket_of(stream: &str) -> String {
    format!("{stream}_TASKS")
}

/// Tasks in a JetStream key-value bucket, with a local copy of every entry
/// kept current by a watch (for lists, and to tell the replica of changes).
pub struct TaskBucket {
    kv: kv::Store,
    /// To make the bucket again when it was deleted.
    js: jetstream::Context,
    replicas: usize,
    /// When the bucket's stream this replica reads was made (ns since the
    /// epoch): another time is a bucket made again.
    created: Mutex<Option<i128>>,
    bucket: String,
    capacity: usize,
    /// Every task the watch has seen, by id.
    seen: Arc<Mutex<BTreeMap<String, Task>>>,
    /// Every task revision the watch reads (this replica's own included).
    changes: broadcast::Sender<TaskChange>,
    /// Seals every value written and opens every value read (None:
    /// `--nats-insecure-unsigned`, values are plain JSON).
    signing: Option<SigningKey>,
    metrics: Arc<Metrics>,
    rejections: Mutex<RejectionLog>,
    stop: CancellationToken,
}

impl std::fmt::Debug for TaskBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskBucket")
            .field("bucket", &self.bucket)
            .field("tasks", &self.seen.lock().len())
            .finish_non_exhaustive()
    }
}

/// A task's key: its id (a UUID, which the bucket's keys allow as is).
fn key(id: &str) -> Result<&str, StoreError> {
    let valid = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(id)
    } else {
        Err(StoreError::NotFound(id.to_owned()))
    }
}

fn backend(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("{what}: {e}"))
}

/// What an entry of the bucket holds.
#[derive(Debug)]
enum Read {
    /// A task, with the entry's revision.
    Task(Box<Task>),
    /// A deletion or purge, or a value that is not a task (a claim).
    Gone,
    /// A value no replica sealed (or not a task although sealed): neither
    /// shown nor run, and what was there before stays.
    Rejected,
}

/// The bucket's stream, made as a key-value bucket's is (one value per
/// key, rollups, no deletes through the stream API, direct gets).
fn stream_config(bucket: &str, replicas: usize) -> jetstream::stream::Config {
    jetstream::stream::Config {
        name: format!("KV_{bucket}"),
        description: Some("kube-pulse: tasks, shared by every replica".into()),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        storage: jetstream::stream::StorageType::File,
        // No rollups: a task leaves the bucket by a delete marker (one
        // message per key replaces its value), so the stream can refuse
        // purges through the API, where an agent's publish acknowledgement
        // could otherwise be sent (JetStream sends it past the agent's
        // permissions) and empty the bucket.
        allow_rollup: false,
        deny_purge: true,
        deny_delete: true,
        allow_direct: true,
        discard: jetstream::stream::DiscardPolicy::New,
        num_replicas: replicas,
        ..Default::default()
    }
}

/// Keys of the per-app claims; a task's key (a UUID) never starts so.
const CLAIM_PREFIX: &str = "app.";

/// How long a claim whose task is not in the bucket yet counts as taken: the
/// claiming replica writes the task right after its claim; a claim older
/// than this without its task was left by a replica that stopped between.
const CLAIM_GRACE: chrono::TimeDelta = chrono::TimeDelta::seconds(30);

/// The key of the claim of `target`'s app (names are DNS labels, which the
/// bucket's keys allow as they are).
fn claim_key(target: &crate::tasks::Target) -> String {
    format!(
        "{CLAIM_PREFIX}{}.{}.{}",
        target.cluster, target.namespace, target.app
    )
}

/// A claim's value: the task that holds the app, and since when.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Claim {
    task: String,
    claimed: DateTime<Utc>,
}

impl TaskBucket {
    /// Creates or opens the bucket (file storage, one revision per key,
    /// `replicas` copies: an existing bucket with another count is updated
    /// to it) and starts watching it; returns once the watch has read every
    /// task there is, so lists are complete from the start.
    pub async fn open(
        relay: &super::Relay,
        capacity: usize,
        metrics: Arc<Metrics>,
        shutdown: &CancellationToken,
    ) -> crate::Result<Arc<Self>> {
        let (js, replicas) = (relay.jetstream(), relay.replicas());
        let bucket = &bucket_of(relay.name());
        let settings = |e: &dyn std::fmt::Display| {
            crate::Error::Settings(format!(
                "nats: the task bucket {bucket}: {e}{}",
                super::relay::replicas_hint(replicas)
            ))
        };
        // The bucket's stream, made as a key-value bucket's is (one value
        // per key, no deletes or purges through the stream API, direct
        // gets); made here rather than with `create_key_value`, whose
        // account query NATS servers before 2.10 answer in a form the
        // client does not read.
        let mut stream = js
            .get_or_create_stream(stream_config(bucket, replicas))
            .await
            .map_err(|e| settings(&e))?;
        // Made earlier with another count (one, before `streamReplicas`):
        // JetStream adds or removes copies of the stream as it stands.
        let info = stream.info().await.map_err(|e| settings(&e))?;
        let created = Mutex::new(Some(info.created.unix_timestamp_nanos()));
        // Or before purges were refused: refused from now on.
        if info.config.num_replicas != replicas
            || info.config.allow_rollup
            || !info.config.deny_purge
        {
            let mut config = info.config.clone();
            config.num_replicas = replicas;
            config.allow_rollup = false;
            config.deny_purge = true;
            js.update_stream(config).await.map_err(|e| settings(&e))?;
        }
        let kv = js.get_key_value(bucket).await.map_err(|e| settings(&e))?;
        let (changes, _) = broadcast::channel(1024);
        let store = Arc::new(Self {
            kv,
            js: js.clone(),
            replicas,
            created,
            bucket: bucket.to_owned(),
            capacity: capacity.max(1),
            seen: Arc::new(Mutex::new(BTreeMap::new())),
            changes,
            signing: relay.signing().cloned(),
            metrics,
            rejections: Mutex::new(RejectionLog::default()),
            stop: shutdown.child_token(),
        });
        let (current, read) = tokio::sync::oneshot::channel();
        let empty = store.kv.status().await.map_err(|e| settings(&e))?.values() == 0;
        tokio::spawn(watch(store.clone(), current));
        // An empty bucket sends no entry to say it is current.
        if !empty {
            let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
        }
        Ok(store)
    }

    /// Stops the watch.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Claims `task`'s app for it: the claim is made if absent, or taken
    /// over (at the revision read) from a task that is no longer active,
    /// or one not written within [`CLAIM_GRACE`] of its claim. Refused with
    /// [`StoreError::ActiveTask`] while another task holds the app.
    async fn claim(&self, task: &Task) -> Result<(), StoreError> {
        let key = claim_key(&task.target);
        let value = |claimed| {
            serde_json::to_vec(&Claim {
                task: task.id.clone(),
                claimed,
            })
            .map(|v| self.seal(&key, v))
            .map_err(|e| backend("encode", e))
        };
        let made = self.kv.create(&key, value(Utc::now())?).await;
        let Err(e) = made else {
            return Ok(());
        };
        if e.kind() != kv::CreateErrorKind::AlreadyExists {
            return Err(backend("claim", e));
        }
        let entry = self.kv.entry(&key).await.map_err(|e| backend("claim", e))?;
        // A claim no replica sealed holds nothing: it is taken over.
        let held = entry.as_ref().and_then(|e| self.claim_of(e));
        if let Some(held) = &held {
            let holder = self
                .kv
                .entry(&held.task)
                .await
                .map_err(|e| backend("claim", e))?
                .as_ref()
                .and_then(|e| self.task_of(e));
            let active = match &holder {
                Some(holder) => holder.status.is_active(),
                None => Utc::now() - held.claimed < CLAIM_GRACE,
            };
            if active {
                return Err(StoreError::ActiveTask {
                    id: held.task.clone(),
                    status: holder.map_or("Pending".into(), |h| format!("{:?}", h.status)),
                });
            }
        }
        let read = entry.map_or(0, |e| e.revision);
        match self.kv.update(&key, value(Utc::now())?, read).await {
            Ok(_) => Ok(()),
            // Another replica claimed it in between: its task holds the app.
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                let now = self.kv.entry(&key).await.ok().flatten();
                let id = now
                    .and_then(|e| self.claim_of(&e))
                    .map_or_else(|| "unknown".into(), |c| c.task);
                Err(StoreError::ActiveTask {
                    id,
                    status: "Pending".into(),
                })
            }
            Err(e) => Err(backend("claim", e)),
        }
    }

    /// `value` as stored under `key`: sealed with the replicas' key.
    fn seal(&self, key: &str, value: Vec<u8>) -> bytes::Bytes {
        match &self.signing {
            Some(signing) => signing.seal_entry(&self.bucket, key, &value).into(),
            None => value.into(),
        }
    }

    /// The value stored under `key`, if a replica sealed it there; a
    /// rejection is counted and logged (without the value).
    fn unseal<'a>(&self, key: &str, value: &'a [u8]) -> Option<&'a [u8]> {
        let Some(signing) = &self.signing else {
            return Some(value);
        };
        match signing.open_entry(&self.bucket, key, value) {
            Ok(value) => Some(value),
            Err(why) => {
                self.rejected(key, why);
                None
            }
        }
    }

    fn rejected(&self, key: &str, why: Rejection) {
        self.metrics.stream.rejected("bucket", why.label());
        if let Some(more) = self.rejections.lock().note(std::time::Instant::now()) {
            tracing::warn!(bucket = %self.bucket, %key, reason = why.label(), rejected_since_last_line = more, "an entry of the task bucket was rejected: not sealed by a kube-pulse replica; neither shown nor run");
        }
    }

    /// What `entry` holds; a task only if a replica sealed it.
    fn read(&self, entry: &kv::Entry) -> Read {
        if entry.operation != kv::Operation::Put {
            return Read::Gone;
        }
        let Some(value) = self.unseal(&entry.key, &entry.value) else {
            return Read::Rejected;
        };
        if entry.key.starts_with(CLAIM_PREFIX) {
            return Read::Gone;
        }
        match serde_json::from_slice::<Task>(value) {
            Ok(mut task) if task.id == entry.key => {
                task.revision = entry.revision;
                Read::Task(Box::new(task))
            }
            _ if self.signing.is_some() => {
                self.rejected(&entry.key, Rejection::Malformed);
                Read::Rejected
            }
            _ => Read::Gone,
        }
    }

    /// The task `entry` holds, if any (and sealed).
    fn task_of(&self, entry: &kv::Entry) -> Option<Task> {
        match self.read(entry) {
            Read::Task(task) => Some(*task),
            Read::Gone | Read::Rejected => None,
        }
    }

    /// The claim `entry` holds, if a replica sealed it.
    fn claim_of(&self, entry: &kv::Entry) -> Option<Claim> {
        if entry.operation != kv::Operation::Put {
            return None;
        }
        let value = self.unseal(&entry.key, &entry.value)?;
        serde_json::from_slice(value).ok()
    }

    /// When the bucket's stream is missing (deleted), makes it again; when
    /// it is another one than this replica last read (made again, here or
    /// by another replica), puts back every task this replica knows (a
    /// replica that finds one there already leaves it), so that the tasks
    /// of every replica come back without a restart. True when the watch
    /// must read the new bucket from its start.
    async fn repair(&self) -> bool {
        let name = format!("KV_{}", self.bucket);
        let mut now = match super::relay::stream_created(&self.js, &name).await {
            Ok(now) => now,
            Err(_) => return false,
        };
        if now.is_none() {
            match super::relay::still_missing(&self.js, &name).await {
                Ok(true) => {}
                // Made again meanwhile (by another replica): looked at again next time.
                Ok(false) | Err(_) => return false,
            }
            let made = self
                .js
                .get_or_create_stream(stream_config(&self.bucket, self.replicas))
                .await;
            if let Err(e) = made {
                tracing::warn!(bucket = %self.bucket, cause = %e, "the task bucket is missing and cannot be made again; trying again");
                return false;
            }
            tracing::warn!(bucket = %self.bucket, "the task bucket was missing (deleted?): made again");
            now = super::relay::stream_created(&self.js, &name)
                .await
                .ok()
                .flatten();
        }
        {
            let mut created = self.created.lock();
            if now.is_none() || *created == now {
                return false;
            }
            *created = now;
        }
        self.put_back().await;
        true
    }

    /// Puts every task this replica knows into a bucket made again.
    async fn put_back(&self) {
        // Their revisions were the old stream's: each comes back with the
        // revision of its entry in the new one.
        let known: Vec<Task> = std::mem::take(&mut *self.seen.lock())
            .into_values()
            .collect();
        let mut put = 0;
        for task in known {
            let Ok(value) = serde_json::to_vec(&task) else {
                continue;
            };
            match self.kv.create(&task.id, self.seal(&task.id, value)).await {
                // The watch brings it back, with its new revision.
                Ok(_) => put += 1,
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(e) => {
                    tracing::warn!(bucket = %self.bucket, task = %task.id, cause = %e, "a task could not be put back into the task bucket");
                }
            }
        }
        tracing::warn!(bucket = %self.bucket, tasks = put, "the task bucket was made again: the tasks this replica knew are put back");
    }

    fn note(&self, task: &Task) {
        let mut seen = self.seen.lock();
        let newer = seen
            .get(&task.id)
            .is_none_or(|held| held.revision < task.revision);
        if newer {
            seen.insert(task.id.clone(), task.clone());
        }
    }
}

/// How often a watch that brings nothing is checked against the bucket.
const WATCH_CHECK: Duration = Duration::from_secs(3);

/// Follows the bucket (from the current value of every key on), keeping
/// `seen` and announcing each task revision; a watch that ends is made
/// again. `current` fires once the existing entries have been read.
async fn watch(store: Arc<TaskBucket>, current: tokio::sync::oneshot::Sender<()>) {
    let mut current = Some(current);
    let mut backoff = Duration::from_millis(250);
    let mut from = 0u64;
    while !store.stop.is_cancelled() {
        // From the first revision not read yet: at first every entry the
        // bucket holds (one per key), after a broken watch what it missed.
        // (`watch_all` would bring only entries written from now on.)
        let opened = store.kv.watch_all_from_revision(from + 1).await;
        let mut entries = match opened {
            Ok(entries) => entries,
            Err(_) if store.repair().await => {
                from = 0;
                continue;
            }
            Err(e) => {
                tracing::warn!(bucket = %store.bucket, cause = %e, "the task bucket cannot be watched; trying again");
                tokio::select! {
                    _ = store.stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        // The watch is an ordered push consumer: when the server holding it
        // goes away it may stay silent for a long time before the client
        // notices. The bucket's stream, read afresh, says whether it has
        // entries the watch has not brought: two looks in a row with the
        // same unread entries make the watch again from the last one read.
        let mut check =
            tokio::time::interval_at(tokio::time::Instant::now() + WATCH_CHECK, WATCH_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut behind_at: Option<u64> = None;
        loop {
            let entry = tokio::select! {
                _ = store.stop.cancelled() => return,
                entry = entries.next() => entry,
                _ = check.tick() => {
                    let last = store.kv.stream.get_info().await.map(|i| i.state.last_sequence);
                    if store.repair().await {
                        from = 0;
                        break;
                    }
                    match last {
                        Ok(last) if last > from => {
                            if behind_at == Some(from) {
                                tracing::warn!(bucket = %store.bucket, read = from, last, "the task bucket's watch brings nothing new; watching it again");
                                break;
                            }
                            behind_at = Some(from);
                        }
                        _ => behind_at = None,
                    }
                    continue;
                }
            };
            let entry = match entry {
                Some(Ok(entry)) => entry,
                Some(Err(e)) => {
                    tracing::warn!(bucket = %store.bucket, cause = %e, "watching the task bucket failed; watching it again");
                    break;
                }
                None => break,
            };
            backoff = Duration::from_millis(250);
            from = from.max(entry.revision);
            match store.read(&entry) {
                // A claim (`claim`) is no task: nothing to tell; nor is a
                // value no replica sealed.
                Read::Gone if entry.key.starts_with(CLAIM_PREFIX) => {}
                Read::Rejected => {}
                Read::Task(task) => {
                    store.note(&task);
                    let _ = store.changes.send(TaskChange::Stored(task));
                }
                Read::Gone => {
                    store.seen.lock().remove(&entry.key);
                    let _ = store.changes.send(TaskChange::Gone(entry.key.clone()));
                }
            }
            if (entry.delta == 0 || entry.seen_current)
                && let Some(current) = current.take()
            {
                let _ = current.send(());
            }
        }
    }
}

impl TaskStore for TaskBucket {
    fn name(&self) -> &str {
        "nats"
    }

    fn create(&self, mut task: Task) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move {
            let key = key(&task.id)?.to_owned();
            // One active task per app: checked against every replica's tasks
            // as this replica last read them (two replicas accepting a task
            // for one app within a moment of each other both succeed).
            {
                let seen = self.seen.lock();
                if let Some(active) = seen
                    .values()
                    .find(|t| t.target == task.target && t.status.is_active())
                {
                    return Err(StoreError::ActiveTask {
                        id: active.id.clone(),
                        status: format!("{:?}", active.status),
                    });
                }
            }
            let full = {
                let seen = self.seen.lock();
                (seen.len() >= self.capacity).then(|| {
                    seen.values()
                        .filter(|t| !t.status.is_active())
                        .min_by_key(|t| t.finished)
                        .map(|t| t.id.clone())
                        .ok_or(StoreError::Full(seen.len()))
                })
            };
            let mut evicted = None;
            if let Some(oldest) = full {
                let oldest = oldest?;
                self.kv
                    .delete(&oldest)
                    .await
                    .map_err(|e| backend("delete", e))?;
                self.seen.lock().remove(&oldest);
                evicted = Some(oldest);
            }
            self.claim(&task).await?;
            let value = serde_json::to_vec(&task).map_err(|e| backend("encode", e))?;
            let revision =
                self.kv
                    .create(&key, self.seal(&key, value))
                    .await
                    .map_err(|e| match e.kind() {
                        kv::CreateErrorKind::AlreadyExists => StoreError::Exists(key.clone()),
                        _ => backend("create", e),
                    })?;
            task.revision = revision;
            self.note(&task);
            Ok(Created { task, evicted })
        })
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Task>, StoreError>> {
        Box::pin(async move {
            let Ok(key) = key(id) else {
                return Ok(None);
            };
            let entry = self.kv.entry(key).await.map_err(|e| backend("get", e))?;
            let task = entry.as_ref().and_then(|e| self.task_of(e));
            if let Some(task) = &task {
                self.note(task);
            }
            Ok(task)
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Task>, StoreError>> {
        let mut tasks: Vec<Task> = self.seen.lock().values().cloned().collect();
        tasks.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        Box::pin(async move { Ok(tasks) })
    }

    fn update(&self, mut task: Task) -> BoxFuture<'_, Result<Task, StoreError>> {
        Box::pin(async move {
            let key = key(&task.id)?.to_owned();
            let read = task.revision;
            let value = serde_json::to_vec(&task).map_err(|e| backend("encode", e))?;
            let revision = self
                .kv
                .update(&key, self.seal(&key, value), read)
                .await
                .map_err(|e| match e.kind() {
                    kv::UpdateErrorKind::WrongLastRevision => StoreError::Stale(key.clone()),
                    _ => backend("update", e),
                })?;
            task.revision = revision;
            self.note(&task);
            Ok(task)
        })
    }

    fn purge(&self, before: DateTime<Utc>) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let old: Vec<String> = self
                .seen
                .lock()
                .values()
                .filter(|t| t.finished.is_some_and(|f| f < before))
                .map(|t| t.id.clone())
                .collect();
            let mut purged = Vec::new();
            for id in old {
                self.kv
                    .delete(&id)
                    .await
                    .map_err(|e| backend("delete", e))?;
                self.seen.lock().remove(&id);
                purged.push(id);
            }
            Ok(purged)
        })
    }

    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            match tokio::time::timeout(Duration::from_secs(2), self.kv.status()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("bucket {}: {e}", self.bucket)),
                Err(_) => Err(format!("bucket {}: no answer within 2 s", self.bucket)),
            }
        })
    }

    fn changes(&self) -> Option<broadcast::Receiver<TaskChange>> {
        Some(self.changes.subscribe())
    }
}
