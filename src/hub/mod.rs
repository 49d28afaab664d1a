//! The hub: in-memory state keyed by topic (`sources → engine → [hub] →
//! transports`). It assigns per-topic revisions and a hub-wide sequence
//! within a process epoch, keeps a bounded replay log, computes each change's
//! JSON merge patch and its JSON message once, and fans changes out to
//! subscriptions through a pattern index. A topic's name is parsed into a [`Topic`] once, when the
//! hub first holds it; changes, resyncs and snapshots carry that form. A slow subscription never blocks it: its queue is bounded
//! and, when full, the topics it missed are resent as fresh snapshots.

mod pattern;
mod position;
#[cfg(test)]
mod resume_tests;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;

/// Topic names and their builders, for the parts that name topics.
pub use crate::protocol::topic;
pub use crate::protocol::topic::Topic;
use crate::protocol::topic::TopicKind;
use crate::protocol::{ServerMessage, StreamCursor, patch};
pub use pattern::Pattern;
use pattern::PatternIndex;

/// What happened to a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// First document of a topic.
    Snapshot,
    /// A change to an existing document (see `patch`).
    Patch,
    /// The topic is gone (no document, no patch).
    Removed,
}

/// One published change, shared by every subscriber. The replay log keeps a
/// slimmer copy (see [`Hub::changes_since`]): its message in `encoded.json`,
/// no `patch`, and a `doc` only where visibility reads it (task topics).
#[derive(Debug, Serialize)]
pub struct Change {
    /// The topic that changed.
    pub topic: Topic,
    /// The topic's revision after the change; counts from 1 per topic within a process.
    pub rev: u64,
    /// Hub-wide sequence number of the change within this process epoch.
    pub seq: u64,
    /// `{epoch}-{seq}` (with a stream of changes `{epoch}-{seq}.{stream}-{position}`):
    /// where a client resumes from.
    pub cursor: String,
    /// With a stream of changes shared by replicas: the stream position this
    /// hub was at when it published the change (every message of the stream
    /// up to it was in the hub by then); 0 without one.
    #[serde(skip)]
    pub position: u64,
    /// With a stream of changes: the stream sequence of this change itself,
    /// once known (a remote change's message; the echo of one this replica
    /// published); 0 while unknown. Set on the replay log's copy.
    #[serde(skip)]
    pub streamed_at: AtomicU64,
    /// Snapshot, patch or removal.
    pub kind: ChangeKind,
    /// The document after the change (None when removed, and in the replay
    /// log except for task topics, whose visibility reads their target).
    pub doc: Option<Arc<Value>>,
    /// RFC 7386 merge patch from the previous revision (for `Patch`; None in
    /// the replay log, whose message carries it).
    pub patch: Option<Arc<Value>>,
    /// When the hub published the change.
    pub at: DateTime<Utc>,
    /// Applied from another replica's stream of changes ([`Hub::apply_remote`]),
    /// not made by this process: not to be published again.
    #[serde(skip)]
    pub remote: bool,
    /// Encodings made once and shared by every subscriber (see `transports`).
    #[serde(skip)]
    pub encoded: EncodeCache,
}

impl Change {
    /// The server message of this change, carrying `cursor` (its own, or an
    /// earlier one for a subscriber that is behind on other topics).
    pub fn message<'a>(&'a self, cursor: &'a str) -> ServerMessage<'a> {
        // A document the hub holds is never JSON `null`: this only stands
        // in for an absent one (a logged patch keeps no document), so that
        // encoding cannot fail.
        static NULL: Value = Value::Null;
        let (topic, rev) = (&self.topic, self.rev);
        match self.kind {
            ChangeKind::Snapshot => ServerMessage::Snapshot {
                topic,
                rev,
                cursor,
                doc: self.doc.as_deref().unwrap_or(&NULL),
            },
            ChangeKind::Patch => ServerMessage::Patch {
                topic,
                rev,
                cursor,
                patch: self.patch.as_deref().unwrap_or(&NULL),
                base: None,
            },
            ChangeKind::Removed => ServerMessage::Removed {
                topic,
                rev: Some(rev),
                cursor,
            },
        }
    }
}

impl PartialEq for Change {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.topic,
            self.rev,
            self.seq,
            self.kind,
            &self.doc,
            &self.patch,
        ) == (
            &other.topic,
            other.rev,
            other.seq,
            other.kind,
            &other.doc,
            &other.patch,
        )
    }
}

/// Encoded forms of a change: the JSON message and its SSE frame.
#[derive(Debug, Default)]
pub struct EncodeCache {
    /// The change as one JSON message at its own cursor (without a WebSocket
    /// `sub`), made once when the hub publishes it.
    pub json: OnceLock<Bytes>,
    /// The change as an SSE frame (`id:`, `event:`, `data:`), made on first use.
    pub sse: OnceLock<Bytes>,
}

/// A topic's current document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopicDoc {
    /// The topic the document belongs to.
    pub topic: Topic,
    /// The document's revision (the `rev` of its last change).
    pub rev: u64,
    /// The document, shared with the changes that carry it.
    pub doc: Arc<Value>,
}

/// What a subscription yields.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// A change, in hub order.
    Change(Arc<Change>),
    /// The subscriber fell behind on this topic: here is its latest state
    /// (None: the topic is gone).
    Resync {
        /// The topic whose changes were dropped.
        topic: Topic,
        /// The topic's current document; absent when the topic was removed meanwhile.
        current: Option<TopicDoc>,
    },
}

/// One message of a resumed subscription (see [`Subscription::replay_since`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Replayed<'a> {
    /// A change after the client's cursor, as it was published.
    Change(Arc<Change>),
    /// The topic's document at subscription time.
    Doc(&'a TopicDoc),
    /// The topic was removed; `rev` is the removal's revision.
    Removed {
        /// The removed topic.
        topic: Topic,
        /// The removal's revision.
        rev: u64,
    },
}

impl Replayed<'_> {
    /// The topic this message is about.
    pub fn topic(&self) -> &Topic {
        match self {
            Replayed::Change(c) => &c.topic,
            Replayed::Doc(d) => &d.topic,
            Replayed::Removed { topic, .. } => topic,
        }
    }
}

/// Sizes of the hub's bounded structures.
#[derive(Debug, Clone, Copy)]
pub struct HubConfig {
    /// Changes kept for resume.
    pub log_size: usize,
    /// Bytes the changes kept for resume may take (see [`HubStats::log_bytes`]).
    pub log_bytes: usize,
    /// Changes queued per subscription before it falls back to snapshots.
    pub subscriber_queue: usize,
}

impl Default for HubConfig {
    fn default() -> Self {
        Self {
            log_size: 10_000,
            log_bytes: DEFAULT_LOG_BYTES,
            subscriber_queue: 1024,
        }
    }
}

/// The replay log's default byte budget: 64 MiB, room for the default
/// 10 000 changes at up to ~6.5 KiB each (a demo app document's whole message
/// is 3–7 KiB), so the count binds first for ordinary traffic and the bytes
/// only when documents are unusually large (docs/RELIABILITY.md).
pub const DEFAULT_LOG_BYTES: usize = 64 << 20;

/// What a change made of a topic, before the hub numbers it.
struct Made {
    kind: ChangeKind,
    doc: Option<Arc<Value>>,
    patch: Option<Arc<Value>>,
    /// Applied from another replica ([`Change::remote`]).
    remote: bool,
}

impl Made {
    fn removal(remote: bool) -> Self {
        Self {
            kind: ChangeKind::Removed,
            doc: None,
            patch: None,
            remote,
        }
    }
}

struct Entry {
    rev: u64,
    doc: Arc<Value>,
}

/// Per-subscription state the publisher writes to.
struct Slot {
    queue: Arc<Queue>,
}

/// Slots by subscription id. The publisher looks one up per matching
/// subscription per change; ids are handed out in sequence, so a
/// multiplication spreads them well enough, at a fraction of SipHash's cost.
type Slots = HashMap<u64, Slot, std::hash::BuildHasherDefault<IdHasher>>;

#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A subscription's queue: the changes waiting for it, bounded, and the
/// topics it fell behind on once the queue was full. Written by the
/// publisher (under the hub's lock), read by the subscription. One lock
/// and a waker, not a channel: a channel costs a subscription some 800
/// bytes while idle (its shared state padded to cache lines, a block of
/// slots) and several atomic operations and a lock per delivery
/// (docs/BENCHMARKS.md, sections 15 and 16).
struct Queue {
    state: Mutex<Queued>,
    /// The smallest first-missed sequence in `missed` (`u64::MAX` when
    /// none): read on every delivery without taking the lock.
    floor: AtomicU64,
    capacity: usize,
}

#[derive(Default)]
struct Queued {
    changes: VecDeque<Arc<Change>>,
    /// Topics the subscription fell behind on, each with the sequence of
    /// the first change it missed there.
    missed: BTreeMap<Topic, u64>,
    /// The subscription's task, waiting for a change.
    waker: Option<std::task::Waker>,
}

/// A queue whose buffer grew past this many changes (a burst) gives the
/// memory back once it is empty; below, the buffer is kept for the next
/// change.
const KEEP_QUEUED: usize = 32;

impl Queue {
    fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(Queued::default()),
            floor: AtomicU64::new(u64::MAX),
            capacity: capacity.max(1),
        }
    }

    /// Queues `change` of `topic` unless the subscription is behind on that
    /// topic already or its queue is full (then the topic is marked
    /// behind); false when the change was not queued. Wakes a waiting
    /// subscription.
    fn offer(&self, topic: &Topic, change: &Arc<Change>) -> bool {
        let mut q = self.state.lock();
        // Once a topic is behind, its later changes wait for the resync too.
        if q.missed.contains_key(topic) {
            return false;
        }
        if q.changes.len() >= self.capacity {
            q.missed.insert(topic.clone(), change.seq);
            self.floor.fetch_min(change.seq, Ordering::AcqRel);
            return false;
        }
        q.changes.push_back(change.clone());
        let waker = q.waker.take();
        drop(q);
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }

    /// Recomputes `floor` after `missed` changed (with the lock held).
    fn set_floor(&self, missed: &BTreeMap<Topic, u64>) {
        let floor = missed.values().copied().min().unwrap_or(u64::MAX);
        self.floor.store(floor, Ordering::Release);
    }

    /// The first queued change, and whether more were queued behind it.
    fn pop(&self) -> Option<(Arc<Change>, bool)> {
        Self::pop_from(&mut self.state.lock())
    }

    fn pop_from(q: &mut Queued) -> Option<(Arc<Change>, bool)> {
        let change = q.changes.pop_front()?;
        if q.changes.is_empty() && q.changes.capacity() > KEEP_QUEUED {
            q.changes = VecDeque::new();
        }
        Some((change, !q.changes.is_empty()))
    }
}

struct Inner {
    topics: BTreeMap<Topic, Entry>,
    /// Removed topics whose removal is still in the replay log: (the
    /// removal's revision, its sequence). A topic created again continues
    /// from that revision, so a topic's revisions only grow while a client
    /// could still resume across its removal.
    removed: HashMap<Topic, (u64, u64)>,
    seq: u64,
    /// Logged changes, oldest first, with their sequences contiguous; each
    /// with its [`logged_bytes`], which `log_bytes` sums.
    log: VecDeque<(Arc<Change>, usize)>,
    log_bytes: usize,
    index: PatternIndex<u64>,
    slots: Slots,
    next_id: u64,
    lag_events: u64,
    /// Where the hub is in a stream of changes shared by replicas, if it follows one.
    stream: Option<position::StreamMark>,
}

/// Counters of the hub, for health and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HubStats {
    /// Topics the hub holds.
    pub topics: usize,
    /// Hub-wide sequence number of the last change.
    pub seq: u64,
    /// Live subscriptions.
    pub subscriptions: usize,
    /// Changes a full subscription queue turned into a later resync.
    pub lag_events: u64,
    /// Changes in the replay log.
    pub log_len: usize,
    /// Estimated bytes the replay log holds: each change's JSON message plus
    /// bookkeeping (and a task's document, as serialized).
    pub log_bytes: usize,
    /// (pattern, subscription) entries in the pattern index.
    pub index_entries: usize,
    /// Nodes of the pattern index's trie: back to its old size once the
    /// subscriptions that grew it are gone.
    pub index_nodes: usize,
}

/// The hub. Cheap to share behind an `Arc`.
pub struct Hub {
    epoch: String,
    config: HubConfig,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Hub");
        d.field("epoch", &self.epoch).field("config", &self.config);
        // try_lock: formatting must not wait for (or deadlock on) a publisher.
        match self.inner.try_lock() {
            Some(inner) => d
                .field("topics", &inner.topics.len())
                .field("seq", &inner.seq)
                .field("log_len", &inner.log.len())
                .field("log_bytes", &inner.log_bytes)
                .field("subscriptions", &inner.slots.len())
                .field("lag_events", &inner.lag_events),
            None => d.field("inner", &"<locked>"),
        };
        d.finish()
    }
}

impl Hub {
    /// An empty hub with a fresh epoch (one per process lifetime).
    pub fn new(config: HubConfig) -> Arc<Self> {
        let epoch = format!("{:x}", Utc::now().timestamp_micros());
        Arc::new(Self {
            epoch,
            config,
            inner: Mutex::new(Inner {
                topics: BTreeMap::new(),
                removed: HashMap::new(),
                seq: 0,
                log: VecDeque::new(),
                log_bytes: 0,
                index: PatternIndex::default(),
                slots: Slots::default(),
                next_id: 0,
                lag_events: 0,
                stream: None,
            }),
        })
    }

    /// Identifies this process lifetime in cursors (`{epoch}-{seq}`).
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// The cursor of a hub sequence number: with a stream of changes, it
    /// also says where in the stream the hub was at that change, when the
    /// replay log still knows.
    pub fn cursor(&self, seq: u64) -> String {
        let inner = self.inner.lock();
        self.cursor_in(&inner, seq)
    }

    fn cursor_in(&self, inner: &Inner, seq: u64) -> String {
        let local = format!("{}-{seq}", self.epoch);
        match inner.stream.as_ref().and_then(|mark| {
            let position = if seq == inner.seq {
                Some(mark.position)
            } else {
                logged(inner, seq).map(|c| c.position)
            };
            Some((mark, position?))
        }) {
            Some((mark, position)) => format!("{local}.{}-{position}", mark.id),
            None => local,
        }
    }

    /// The current hub sequence.
    pub fn seq(&self) -> u64 {
        self.inner.lock().seq
    }

    /// Sets a topic's document. Publishes only when it really changed;
    /// returns the change. A new topic's name is parsed here, once.
    pub fn put(&self, topic: &str, mut doc: Value) -> Option<Arc<Change>> {
        patch::strip_nulls(&mut doc);
        let mut inner = self.inner.lock();
        let (topic, kind, rev, patch) = match inner.topics.get_key_value(topic) {
            Some((_, entry)) if *entry.doc == doc => return None,
            Some((topic, entry)) => (
                topic.clone(),
                ChangeKind::Patch,
                entry.rev + 1,
                Some(Arc::new(patch::merge_diff(&entry.doc, &doc))),
            ),
            None => {
                let topic = Topic::new(topic);
                let rev = inner.removed.remove(&topic).map_or(1, |(rev, _)| rev + 1);
                (topic, ChangeKind::Snapshot, rev, None)
            }
        };
        let made = Made {
            kind,
            doc: None,
            patch,
            remote: false,
        };
        Some(self.hold(&mut inner, topic, rev, doc, made))
    }

    /// Sets (`doc`) or removes (None) a topic as another replica's hub
    /// published it at revision `rev`: that replica owns the topic, so its
    /// revision is taken as is. A document equal to the one held at the same
    /// revision is not published again (the stream's last message per topic
    /// is read again after a reconnect). Subscribers get a patch when `rev`
    /// is the next after the held one, otherwise a snapshot (a patch's base
    /// is the revision before it: after a gap, while the stream was away,
    /// it would not apply); the change is marked [`Change::remote`].
    pub fn apply_remote(&self, topic: &str, rev: u64, doc: Option<Value>) -> Option<Arc<Change>> {
        let mut inner = self.inner.lock();
        self.apply_remote_in(&mut inner, topic, rev, doc)
    }

    fn apply_remote_in(
        &self,
        inner: &mut Inner,
        topic: &str,
        rev: u64,
        doc: Option<Value>,
    ) -> Option<Arc<Change>> {
        let Some(mut doc) = doc else {
            let (topic, _) = inner.topics.remove_entry(topic)?;
            let change = self.publish(inner, topic.clone(), rev, Made::removal(true));
            inner.removed.insert(topic, (change.rev, change.seq));
            return Some(change);
        };
        patch::strip_nulls(&mut doc);
        let (topic, kind, patch) = match inner.topics.get_key_value(topic) {
            Some((_, entry)) if entry.rev == rev && *entry.doc == doc => return None,
            Some((topic, entry)) if rev == entry.rev + 1 => (
                topic.clone(),
                ChangeKind::Patch,
                Some(Arc::new(patch::merge_diff(&entry.doc, &doc))),
            ),
            Some((topic, _)) => (topic.clone(), ChangeKind::Snapshot, None),
            None => (Topic::new(topic), ChangeKind::Snapshot, None),
        };
        inner.removed.remove(&topic);
        let made = Made {
            kind,
            doc: None,
            patch,
            remote: true,
        };
        Some(self.hold(inner, topic, rev, doc, made))
    }

    /// Holds `doc` as `topic`'s document at `rev` and publishes `made` (a
    /// snapshot, or a patch from the revision before) carrying it.
    fn hold(
        &self,
        inner: &mut Inner,
        topic: Topic,
        rev: u64,
        doc: Value,
        mut made: Made,
    ) -> Arc<Change> {
        let doc = Arc::new(doc);
        inner.topics.insert(
            topic.clone(),
            Entry {
                rev,
                doc: doc.clone(),
            },
        );
        made.doc = Some(doc);
        self.publish(inner, topic, rev, made)
    }

    /// Removes a topic, publishing `removed`.
    pub fn remove(&self, topic: &str) -> Option<Arc<Change>> {
        let mut inner = self.inner.lock();
        let (topic, entry) = inner.topics.remove_entry(topic)?;
        let change = self.publish(
            &mut inner,
            topic.clone(),
            entry.rev + 1,
            Made::removal(false),
        );
        inner.removed.insert(topic, (change.rev, change.seq));
        Some(change)
    }

    fn publish(&self, inner: &mut Inner, topic: Topic, rev: u64, made: Made) -> Arc<Change> {
        let Made {
            kind,
            doc,
            patch,
            remote,
        } = made;
        inner.seq += 1;
        let change = Change {
            topic: topic.clone(),
            rev,
            seq: inner.seq,
            cursor: self.cursor_in(inner, inner.seq),
            position: inner.stream.as_ref().map_or(0, |m| m.position),
            streamed_at: AtomicU64::new(0),
            kind,
            doc,
            patch,
            at: Utc::now(),
            encoded: EncodeCache::default(),
            remote,
        };
        // Encoded here, once: live subscribers share it, and it is all the
        // log needs to replay the change as it was published.
        let json = encode(&change);
        let _ = change.encoded.json.set(json.clone());
        let logged = Change {
            topic: topic.clone(),
            cursor: change.cursor.clone(),
            doc: match topic.kind() {
                Some(TopicKind::Task { .. }) => change.doc.clone(),
                _ => None,
            },
            patch: None,
            encoded: EncodeCache {
                json: OnceLock::from(json),
                sse: OnceLock::new(),
            },
            streamed_at: AtomicU64::new(0),
            ..change
        };
        let change = Arc::new(change);
        let bytes = logged_bytes(&logged);
        inner.log.push_back((Arc::new(logged), bytes));
        inner.log_bytes += bytes;
        while inner.log.len() > self.config.log_size || inner.log_bytes > self.config.log_bytes {
            let Some((gone, bytes)) = inner.log.pop_front() else {
                break;
            };
            inner.log_bytes -= bytes;
            if let Some(mark) = inner.stream.as_mut() {
                mark.forget(&gone.topic, gone.streamed_at.load(Ordering::Acquire));
            }
            if gone.kind == ChangeKind::Removed
                && inner
                    .removed
                    .get(&gone.topic)
                    .is_some_and(|r| r.1 == gone.seq)
            {
                inner.removed.remove(&gone.topic);
            }
        }
        let mut ids = inner.index.matches(&topic);
        ids.sort_unstable();
        ids.dedup();
        let mut lagged = 0;
        for id in ids {
            let Some(slot) = inner.slots.get(&id) else {
                continue;
            };
            if !slot.queue.offer(&topic, &change) {
                lagged += 1;
            }
        }
        inner.lag_events += lagged;
        change
    }

    /// The current document of one topic; absent when the hub does not hold it.
    pub fn get(&self, topic: &str) -> Option<TopicDoc> {
        let inner = self.inner.lock();
        inner.topics.get_key_value(topic).map(|(t, e)| TopicDoc {
            topic: t.clone(),
            rev: e.rev,
            doc: e.doc.clone(),
        })
    }

    /// Current documents of every topic matching any of `patterns`, in topic order.
    pub fn list(&self, patterns: &[Pattern]) -> Vec<TopicDoc> {
        let inner = self.inner.lock();
        Self::matching(&inner, patterns)
    }

    fn matching(inner: &Inner, patterns: &[Pattern]) -> Vec<TopicDoc> {
        inner
            .topics
            .iter()
            .filter(|(t, _)| patterns.iter().any(|p| p.matches(t)))
            .map(|(t, e)| TopicDoc {
                topic: t.clone(),
                rev: e.rev,
                doc: e.doc.clone(),
            })
            .collect()
    }

    /// Changes after `seq` still in the log, or None when some are gone.
    /// Each is the log's copy: its message in `encoded.json` (to be sent as
    /// is), no `patch`, and a `doc` only for task topics.
    pub fn changes_since(&self, seq: u64) -> Option<Vec<Arc<Change>>> {
        let inner = self.inner.lock();
        let oldest = inner
            .log
            .front()
            .map(|(c, _)| c.seq)
            .unwrap_or(inner.seq + 1);
        if seq > inner.seq || seq + 1 < oldest {
            return None;
        }
        Some(
            inner
                .log
                .iter()
                .filter(|(c, _)| c.seq > seq)
                .map(|(c, _)| c.clone())
                .collect(),
        )
    }

    /// Subscribes to `patterns`: the current snapshot plus every later
    /// change, with no gap between the two.
    pub fn subscribe(self: &Arc<Self>, patterns: Vec<Pattern>) -> Subscription {
        let mut inner = self.inner.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        let queue = Arc::new(Queue::new(self.config.subscriber_queue));
        for p in &patterns {
            inner.index.insert(p, id);
        }
        inner.slots.insert(
            id,
            Slot {
                queue: queue.clone(),
            },
        );
        let snapshot = Self::matching(&inner, &patterns);
        let seq = inner.seq;
        Subscription {
            id,
            hub: self.clone(),
            patterns,
            snapshot,
            seq,
            resume: seq,
            queue,
            streamed_through: 0,
            more_queued: false,
        }
    }

    fn unsubscribe(&self, id: u64, patterns: &[Pattern]) {
        let mut inner = self.inner.lock();
        for p in patterns {
            inner.index.remove(p, &id);
        }
        inner.slots.remove(&id);
    }

    /// The bounds the hub was built with (metrics export the replay log's).
    pub fn config(&self) -> &HubConfig {
        &self.config
    }

    /// Counters for health checks, metrics and the benchmark.
    pub fn stats(&self) -> HubStats {
        let inner = self.inner.lock();
        HubStats {
            topics: inner.topics.len(),
            seq: inner.seq,
            subscriptions: inner.slots.len(),
            lag_events: inner.lag_events,
            log_len: inner.log.len(),
            log_bytes: inner.log_bytes,
            index_entries: inner.index.len(),
            index_nodes: inner.index.nodes(),
        }
    }
}

/// A change's JSON message at its own cursor, as every subscriber gets it.
fn encode(change: &Change) -> Bytes {
    change.message(&change.cursor).encode()
}

/// What a logged change costs, estimated once when it is logged: its JSON
/// message, its cursor, the struct itself, and a kept document as serialized
/// (in memory a `Value` takes several times that; only task documents are kept).
fn logged_bytes(change: &Change) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut doc = Counter(0);
    if let Some(d) = &change.doc {
        let _ = serde_json::to_writer(&mut doc, &**d);
    }
    let json = change.encoded.json.get().map_or(0, Bytes::len);
    std::mem::size_of::<Change>() + change.cursor.len() + json + doc.0
}

/// A live subscription; dropping it unsubscribes.
pub struct Subscription {
    id: u64,
    hub: Arc<Hub>,
    patterns: Vec<Pattern>,
    snapshot: Vec<TopicDoc>,
    seq: u64,
    /// The sequence the last delivery may be resumed from: every change up to
    /// it has been delivered (or is covered by a delivered snapshot).
    resume: u64,
    queue: Arc<Queue>,
    /// Resumed from another replica's cursor: changes from the stream at or
    /// before this position are the client's already (this replica was
    /// behind it), and are not delivered. 0: none.
    streamed_through: u64,
    /// The last change taken from the queue had more queued behind it.
    more_queued: bool,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Subscription");
        d.field("id", &self.id)
            .field("epoch", &self.hub.epoch)
            .field("patterns", &self.patterns)
            .field("snapshot", &self.snapshot.len())
            .field("seq", &self.seq)
            .field("resume", &self.resume)
            .field("capacity", &self.queue.capacity);
        match self.queue.state.try_lock() {
            Some(q) => d
                .field("queued", &q.changes.len())
                .field("lagged_topics", &q.missed.len()),
            None => d.field("queued", &"<locked>"),
        };
        d.finish()
    }
}

impl Subscription {
    /// The matching documents at subscription time.
    pub fn snapshot(&self) -> &[TopicDoc] {
        &self.snapshot
    }

    /// What a client that has every change up to `since` is missing at
    /// subscription time: the matching changes after `since`, in order,
    /// except for topics removed in between, which come first, collapsed to
    /// their document at subscription time (or to their removal). A client
    /// may hold more than `since` says (a catch-up snapshot covers changes
    /// after its cursor, a catch-up removal leaves nothing to patch), so
    /// patches from a state it no longer holds would not apply. None when
    /// `since` is ahead of the subscription or older than the replay log.
    pub fn replay_since(&self, since: u64) -> Option<Vec<Replayed<'_>>> {
        if since > self.seq {
            return None;
        }
        let changes: Vec<Arc<Change>> = self
            .hub
            .changes_since(since)?
            .into_iter()
            .filter(|c| c.seq <= self.seq && self.patterns.iter().any(|p| p.matches(&c.topic)))
            .collect();
        Some(self.collapse(changes))
    }

    /// `changes` in order, except for topics removed among them, which come
    /// first as their document at subscription time (or their removal).
    fn collapse(&self, changes: Vec<Arc<Change>>) -> Vec<Replayed<'_>> {
        let mut collapsed: BTreeMap<Topic, u64> = BTreeMap::new();
        for c in changes.iter().filter(|c| c.kind == ChangeKind::Removed) {
            collapsed.insert(c.topic.clone(), c.rev);
        }
        for c in &changes {
            if let Some(rev) = collapsed.get_mut(&c.topic) {
                *rev = (*rev).max(c.rev);
            }
        }
        let mut replayed: Vec<Replayed<'_>> = collapsed
            .iter()
            .map(
                |(topic, &rev)| match self.snapshot.binary_search_by(|d| d.topic.cmp(topic)) {
                    Ok(i) => Replayed::Doc(&self.snapshot[i]),
                    Err(_) => Replayed::Removed {
                        topic: topic.clone(),
                        rev,
                    },
                },
            )
            .collect();
        replayed.extend(
            changes
                .into_iter()
                .filter(|c| !collapsed.contains_key(&c.topic))
                .map(Replayed::Change),
        );
        replayed
    }

    /// Hub sequence at subscription time (later changes have larger ones).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// A change or resync that is ready now, without waiting: lets a
    /// transport write everything queued with one wake-up.
    pub fn try_next(&mut self) -> Option<Delivery> {
        if let Some(delivery) = self.queued() {
            return Some(delivery);
        }
        if self.queue.floor.load(Ordering::Acquire) == u64::MAX {
            return None;
        }
        // A resync, under the hub's lock: no change can be published between
        // finding the queue empty and reading the document and the sequence
        // it is current at.
        let inner = self.hub.inner.lock();
        let mut q = self.queue.state.lock();
        if !q.changes.is_empty() {
            drop((q, inner));
            return self.queued();
        }
        let missed = &mut q.missed;
        let (topic, _) = missed.pop_first()?;
        self.queue.set_floor(missed);
        let current = inner.topics.get_key_value(&topic).map(|(t, e)| TopicDoc {
            topic: t.clone(),
            rev: e.rev,
            doc: e.doc.clone(),
        });
        // Topics still behind missed changes before now: resuming must not
        // skip them, so the cursor stays below the first one.
        self.resume = match missed.values().min() {
            Some(first) => (first - 1).min(inner.seq),
            None => inner.seq,
        };
        Some(Delivery::Resync { topic, current })
    }

    /// [`Subscription::try_next`] when the last delivery had more queued
    /// behind it (or a resync is due), else None without looking again:
    /// what a transport takes to write a batch, where a change that arrives
    /// just now can as well go out with the next one. It costs no lock when
    /// nothing was queued.
    pub fn try_next_queued(&mut self) -> Option<Delivery> {
        if !self.more_queued && self.queue.floor.load(Ordering::Acquire) == u64::MAX {
            return None;
        }
        self.try_next()
    }

    /// The next change in the queue, if any, noting where it may be resumed
    /// from: its own sequence, unless a topic fell behind before it.
    fn queued(&mut self) -> Option<Delivery> {
        loop {
            let taken = self.queue.pop();
            if let Some(delivery) = self.taken(taken)? {
                return Some(delivery);
            }
        }
    }

    /// A change taken from the queue (None when it was empty), as a
    /// delivery unless the client has it already.
    fn taken(&mut self, taken: Option<(Arc<Change>, bool)>) -> Option<Option<Delivery>> {
        let Some((change, more)) = taken else {
            self.more_queued = false;
            return None;
        };
        self.more_queued = more;
        Some(self.received(change).map(Delivery::Change))
    }

    /// Notes where a change taken from the queue may be resumed from; None
    /// when the client has it already (see `streamed_through`).
    fn received(&mut self, change: Arc<Change>) -> Option<Arc<Change>> {
        let floor = self.queue.floor.load(Ordering::Acquire);
        self.resume = change.seq.min(floor.saturating_sub(1));
        (!(change.remote && change.position <= self.streamed_through)).then_some(change)
    }

    /// Where a client may resume after the last delivery: the sequence up to
    /// which it has every change of its topics. Lower than the delivery's own
    /// sequence while some topic waits for its resync, so a reconnect with
    /// this cursor replays what that topic missed instead of skipping it.
    pub fn resume_seq(&self) -> u64 {
        self.resume
    }

    /// The next change, or a resync of a topic this subscription fell behind
    /// on. A subscription keeps its hub, so there is always a next one to
    /// wait for.
    pub async fn next(&mut self) -> Delivery {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// [`Subscription::next`] for a task that polls many subscriptions
    /// itself: ready with the next delivery, else pending with `cx`
    /// registered on the queue.
    pub fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Delivery> {
        loop {
            // A resync is due: taken under the hub's lock.
            if self.queue.floor.load(Ordering::Acquire) != u64::MAX
                && let Some(delivery) = self.try_next()
            {
                return std::task::Poll::Ready(delivery);
            }
            // Else one lock either takes the next change or registers the
            // waker: a change queued later finds it. A topic is marked
            // behind only while the queue is full, so the queue wakes this
            // task before any resync is due.
            let mut q = self.queue.state.lock();
            if q.changes.is_empty() && q.missed.is_empty() {
                match &q.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => q.waker = Some(cx.waker().clone()),
                }
                self.more_queued = false;
                return std::task::Poll::Pending;
            }
            let taken = Queue::pop_from(&mut q);
            drop(q);
            if let Some(Some(delivery)) = self.taken(taken) {
                return std::task::Poll::Ready(delivery);
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.unsubscribe(self.id, &self.patterns);
    }
}

// Positions in a stream of changes shared by replicas (see `position`).

/// The replay log's copy of the change at `seq`, if still there.
fn logged(inner: &Inner, seq: u64) -> Option<&Change> {
    let first = inner.log.front()?.0.seq;
    let (change, _) = inner
        .log
        .get(usize::try_from(seq.checked_sub(first)?).ok()?)?;
    Some(change)
}

impl Hub {
    /// From now on the hub follows the stream `id` (its position starts at
    /// 0). Following another stream than before (it was made again) forgets
    /// where the logged changes were in the old one.
    pub fn follow_stream(&self, id: &str) {
        let mut inner = self.inner.lock();
        if inner.stream.as_ref().is_some_and(|m| m.id == id) {
            return;
        }
        // Logged changes of unknown place are replayed to every resuming
        // client: the log stays complete for any position of the new stream.
        for (change, _) in &inner.log {
            change.streamed_at.store(0, Ordering::Release);
        }
        inner.stream = Some(position::StreamMark {
            id: id.to_owned(),
            position: 0,
            forgotten: 0,
        });
    }

    /// The stream's message `seq` was read; `following` once the hub has
    /// every message up to it (after a new reader's first pass over the
    /// last message of each topic), which moves the hub's position there.
    pub fn stream_read(&self, seq: u64, following: bool) {
        let mut inner = self.inner.lock();
        Self::reach(&mut inner, seq, following);
    }

    fn reach(inner: &mut Inner, seq: u64, following: bool) {
        if let Some(mark) = inner.stream.as_mut().filter(|_| following) {
            mark.position = mark.position.max(seq);
        }
    }

    /// [`Hub::apply_remote`] for the stream's message `seq`, recording
    /// where the change is in the stream. A topic's revisions only grow
    /// here: a message at or below the held revision (read again after a
    /// reconnect, or an earlier owner's, late) changes nothing.
    pub fn apply_streamed(
        &self,
        seq: u64,
        following: bool,
        topic: &str,
        rev: u64,
        doc: Option<Value>,
    ) -> Option<Arc<Change>> {
        let mut inner = self.inner.lock();
        Self::reach(&mut inner, seq, following);
        if inner.topics.get(topic).is_some_and(|held| held.rev >= rev) {
            return None;
        }
        let change = self.apply_remote_in(&mut inner, topic, rev, doc)?;
        if let Some((logged, _)) = inner.log.back().filter(|(c, _)| c.seq == change.seq) {
            logged.streamed_at.store(seq, Ordering::Release);
        }
        Some(change)
    }
}

impl Subscription {
    /// What a client that has every change of the stream up to `cursor`'s
    /// position (from any replica) is missing at subscription time: the
    /// logged changes of matching member topics that entered the stream
    /// after it, or whose place in it is not known (a member's topics this
    /// replica removed itself, when the member left the sources), in this
    /// hub's order, removed topics collapsed as in
    /// [`Subscription::replay_since`]; then every matching topic that is
    /// not a member's (tasks, summaries: this replica's own) as a snapshot.
    /// None when the hub follows another stream, or its log no longer
    /// holds every change after that position.
    pub fn replay_from_stream(&self, cursor: &StreamCursor) -> Option<Vec<Replayed<'_>>> {
        let changes: Vec<Arc<Change>> = {
            let inner = self.hub.inner.lock();
            let mark = inner.stream.as_ref()?;
            if mark.id != cursor.id || cursor.position < mark.forgotten {
                return None;
            }
            inner
                .log
                .iter()
                .map(|(c, _)| c)
                .filter(|c| {
                    let at = c.streamed_at.load(Ordering::Acquire);
                    c.seq <= self.seq
                        && position::member_topic(&c.topic)
                        && (at == 0 || at > cursor.position)
                        && self.patterns.iter().any(|p| p.matches(&c.topic))
                })
                .cloned()
                .collect()
        };
        let mut replayed = self.collapse(changes);
        replayed.extend(
            self.snapshot
                .iter()
                .filter(|d| !position::member_topic(&d.topic))
                .map(Replayed::Doc),
        );
        Some(replayed)
    }

    /// After a replay from another replica's cursor at `position`: this
    /// replica may not have read the stream that far yet, and the changes
    /// up to there it reads next are the client's already (a patch of a
    /// topic the client saw removed since would not apply): they are not
    /// delivered.
    pub fn skip_streamed_through(&mut self, position: u64) {
        self.streamed_through = position;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patterns(p: &[&str]) -> Vec<Pattern> {
        p.iter().map(|s| Pattern::parse(s).unwrap()).collect()
    }

    #[test]
    fn revisions_patches_and_no_op_puts() {
        let hub = Hub::new(HubConfig::default());
        let first = hub
            .put("clusters/a", json!({"phase": "Pending", "n": 1}))
            .unwrap();
        assert_eq!(
            (first.kind, first.rev, first.seq),
            (ChangeKind::Snapshot, 1, 1)
        );
        assert!(
            hub.put("clusters/a", json!({"phase": "Pending", "n": 1}))
                .is_none()
        );
        let second = hub
            .put("clusters/a", json!({"phase": "Healthy", "n": 1}))
            .unwrap();
        assert_eq!(
            (second.kind, second.rev, second.seq),
            (ChangeKind::Patch, 2, 2)
        );
        assert_eq!(*second.patch.clone().unwrap(), json!({"phase": "Healthy"}));
        let removed = hub.remove("clusters/a").unwrap();
        assert_eq!((removed.kind, removed.rev), (ChangeKind::Removed, 3));
        assert!(hub.get("clusters/a").is_none());
        assert!(hub.remove("clusters/a").is_none());
    }

    #[test]
    fn revisions_continue_across_a_removal_while_it_is_in_the_log() {
        let hub = Hub::new(HubConfig {
            log_size: 4,
            subscriber_queue: 8,
            ..HubConfig::default()
        });
        hub.put("clusters/a", json!({"n": 1}));
        hub.put("clusters/a", json!({"n": 2}));
        assert_eq!(hub.remove("clusters/a").unwrap().rev, 3);
        let again = hub.put("clusters/a", json!({"n": 1})).unwrap();
        assert_eq!((again.kind, again.rev), (ChangeKind::Snapshot, 4));
        hub.remove("clusters/a");
        for i in 0..4 {
            hub.put("clusters/b", json!({"i": i}));
        }
        assert!(
            hub.inner.lock().removed.is_empty(),
            "a removal that left the log is forgotten"
        );
        assert_eq!(hub.put("clusters/a", json!({"n": 1})).unwrap().rev, 1);
    }

    #[test]
    fn remote_changes_keep_the_owners_revisions() {
        let hub = Hub::new(HubConfig::default());
        let first = hub
            .apply_remote("clusters/a", 7, Some(json!({"n": 1, "x": null})))
            .unwrap();
        assert_eq!(
            (first.kind, first.rev, first.remote),
            (ChangeKind::Snapshot, 7, true)
        );
        assert_eq!(*hub.get("clusters/a").unwrap().doc, json!({"n": 1}));
        assert!(
            hub.apply_remote("clusters/a", 7, Some(json!({"n": 1})))
                .is_none(),
            "the same document at the same revision is not published twice"
        );
        let next = hub
            .apply_remote("clusters/a", 8, Some(json!({"n": 2})))
            .unwrap();
        assert_eq!((next.kind, next.rev), (ChangeKind::Patch, 8));
        assert_eq!(*next.patch.clone().unwrap(), json!({"n": 2}));
        let gap = hub
            .apply_remote("clusters/a", 10, Some(json!({"n": 3})))
            .unwrap();
        assert_eq!(
            (gap.kind, gap.rev),
            (ChangeKind::Snapshot, 10),
            "after a gap in revisions, a patch would not apply"
        );
        let older = hub
            .apply_remote("clusters/a", 3, Some(json!({"n": 3})))
            .unwrap();
        assert_eq!(
            (older.kind, older.rev),
            (ChangeKind::Snapshot, 3),
            "a revision that does not follow replaces the document"
        );
        // A local change continues from the remote revision.
        let local = hub.put("clusters/a", json!({"n": 4})).unwrap();
        assert_eq!(
            (local.kind, local.rev, local.remote),
            (ChangeKind::Patch, 4, false)
        );
        let removed = hub.apply_remote("clusters/a", 5, None).unwrap();
        assert_eq!((removed.kind, removed.rev), (ChangeKind::Removed, 5));
        assert!(hub.get("clusters/a").is_none());
        assert!(hub.apply_remote("clusters/a", 6, None).is_none());
    }

    #[test]
    fn replay_log_is_bounded() {
        let hub = Hub::new(HubConfig {
            log_size: 3,
            subscriber_queue: 8,
            ..HubConfig::default()
        });
        for i in 0..5 {
            hub.put("t/x", json!({"i": i}));
        }
        assert_eq!(hub.changes_since(2).unwrap().len(), 3);
        assert!(hub.changes_since(1).is_none(), "seq 2 fell out of the log");
        assert_eq!(hub.changes_since(5).unwrap().len(), 0);
        assert!(hub.changes_since(9).is_none(), "a future cursor is unknown");
    }

    #[test]
    fn replay_log_is_bounded_in_bytes() {
        let budget = 64 * 1024;
        let hub = Hub::new(HubConfig {
            log_size: 10_000,
            log_bytes: budget,
            subscriber_queue: 8,
        });
        for i in 0..100 {
            let pad = format!("{i:04}").repeat(1024);
            hub.put(
                &format!("apps/a/shop/w{}", i % 5),
                json!({"i": i, "pad": pad}),
            );
        }
        let stats = hub.stats();
        assert!(stats.log_bytes <= budget, "{stats:?}");
        assert!(stats.log_bytes > budget - 5 * 1024, "{stats:?}");
        assert!((10..20).contains(&stats.log_len), "{stats:?}");
        let kept = hub.inner.lock().log.iter().map(|(_, b)| b).sum::<usize>();
        assert_eq!(kept, stats.log_bytes);
        // The oldest changes went first: the log holds the newest ones, in order.
        let oldest = stats.seq - stats.log_len as u64;
        let replay = hub.changes_since(oldest).expect("the oldest kept change");
        let seqs: Vec<u64> = replay.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, (oldest + 1..=stats.seq).collect::<Vec<_>>());
        assert!(hub.changes_since(oldest - 1).is_none(), "evicted by bytes");
    }

    #[test]
    fn a_logged_change_keeps_its_message_not_its_documents() {
        let hub = Hub::new(HubConfig::default());
        let pad = "x".repeat(4096);
        let first = hub.put("apps/a/s/w", json!({"n": 1, "pad": pad})).unwrap();
        let second = hub.put("apps/a/s/w", json!({"n": 2, "pad": pad})).unwrap();
        let target = json!({"cluster": "a", "namespace": "s"});
        hub.put("tasks/1", json!({"target": target, "progress": 1}));
        let task = hub
            .put("tasks/1", json!({"target": target, "progress": 2}))
            .unwrap();
        assert!(
            second.doc.is_some() && second.patch.is_some(),
            "live changes are whole"
        );
        let logged = hub.changes_since(0).unwrap();
        assert_eq!(logged.len(), 4);
        for (live, kept) in [&first, &second].into_iter().zip(&logged) {
            assert_eq!(
                (kept.seq, kept.rev, kept.kind),
                (live.seq, live.rev, live.kind)
            );
            assert!(kept.doc.is_none() && kept.patch.is_none(), "{kept:?}");
            assert_eq!(kept.encoded.json.get(), live.encoded.json.get());
            assert!(kept.encoded.sse.get().is_none());
        }
        let message: Value = serde_json::from_slice(logged[1].encoded.json.get().unwrap()).unwrap();
        assert_eq!(message["patch"], json!({"n": 2}));
        assert_eq!(message["cursor"], json!(second.cursor));
        // Who may see a task depends on its document: the log keeps it.
        assert_eq!(logged[3].doc, task.doc);
        let stats = hub.stats();
        assert!(stats.log_bytes < 2 * 4096 + 4 * 1024, "{stats:?}");
    }

    #[tokio::test]
    async fn subscriptions_get_snapshot_then_matching_changes_once() {
        let hub = Hub::new(HubConfig::default());
        hub.put("clusters/a", json!({"p": 1}));
        hub.put("apps/a/shop/web", json!({"p": 1}));
        let mut sub = hub.subscribe(patterns(&["clusters/*", "clusters/**"]));
        assert_eq!(sub.snapshot().len(), 1);
        hub.put("apps/a/shop/web", json!({"p": 2}));
        hub.put("clusters/a", json!({"p": 2}));
        match sub.next().await {
            Delivery::Change(c) => assert_eq!((c.topic.as_str(), c.rev), ("clusters/a", 2)),
            other => panic!("{other:?}"),
        }
        assert!(
            sub.try_next().is_none(),
            "overlapping patterns deliver once"
        );
        assert_eq!(hub.stats().subscriptions, 1);
        assert_eq!((hub.stats().index_entries, hub.stats().index_nodes), (2, 2));
        drop(sub);
        assert_eq!(hub.stats().subscriptions, 0);
        assert_eq!((hub.stats().index_entries, hub.stats().index_nodes), (0, 0));
    }

    #[tokio::test]
    async fn a_batch_takes_what_was_queued_behind_the_first_change() {
        let hub = Hub::new(HubConfig::default());
        let mut sub = hub.subscribe(patterns(&["**"]));
        hub.put("apps/a/b/c", json!({"i": 1}));
        hub.put("apps/a/b/c", json!({"i": 2}));
        let rev = |d: Option<Delivery>| match d {
            Some(Delivery::Change(c)) => Some(c.rev),
            other => panic!("{other:?}"),
        };
        assert_eq!(rev(Some(sub.next().await)), Some(1));
        assert_eq!(rev(sub.try_next_queued()), Some(2));
        assert!(sub.try_next_queued().is_none(), "the queue is empty");
        // A change queued after the last one was taken is not looked for
        // (the batch is written without it), but the next poll gets it.
        hub.put("apps/a/b/c", json!({"i": 3}));
        assert!(sub.try_next_queued().is_none());
        assert_eq!(rev(Some(sub.next().await)), Some(3));
        // A resync that is due is part of the batch.
        let hub = Hub::new(HubConfig {
            subscriber_queue: 1,
            ..HubConfig::default()
        });
        let mut sub = hub.subscribe(patterns(&["**"]));
        for i in 0..3 {
            hub.put("apps/a/b/c", json!({"i": i}));
        }
        assert_eq!(rev(Some(sub.next().await)), Some(1));
        assert!(matches!(
            sub.try_next_queued(),
            Some(Delivery::Resync { current: Some(d), .. }) if d.rev == 3
        ));
        assert!(sub.try_next_queued().is_none());
    }

    #[tokio::test]
    async fn a_waiting_reader_gets_the_queue_then_the_resync() {
        let hub = Hub::new(HubConfig {
            log_size: 100,
            subscriber_queue: 1,
            ..HubConfig::default()
        });
        let mut sub = hub.subscribe(patterns(&["**"]));
        let reader = tokio::spawn(async move {
            let first = sub.next().await;
            let second = sub.next().await;
            (first, second)
        });
        tokio::task::yield_now().await;
        for i in 0..5 {
            hub.put("apps/a/b/c", json!({"i": i}));
        }
        let (first, second) = tokio::time::timeout(std::time::Duration::from_secs(10), reader)
            .await
            .expect("the queued change wakes the reader")
            .unwrap();
        assert!(
            matches!(&first, Delivery::Change(c) if c.rev == 1),
            "{first:?}"
        );
        assert!(
            matches!(&second, Delivery::Resync { current: Some(d), .. } if d.rev == 5),
            "{second:?}"
        );
    }

    #[test]
    fn a_full_queue_turns_into_a_resync_of_the_latest_state() {
        let hub = Hub::new(HubConfig {
            log_size: 100,
            subscriber_queue: 2,
            ..HubConfig::default()
        });
        let mut sub = hub.subscribe(patterns(&["**"]));
        for i in 0..10 {
            hub.put("apps/a/b/c", json!({"i": i}));
        }
        hub.put("clusters/z", json!({"ok": true}));
        // All of it is ready at once: the queued changes, then the resyncs.
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(sub.try_next().expect("ready without waiting"));
        }
        assert!(sub.try_next().is_none(), "nothing more is queued");
        assert!(matches!(&got[0], Delivery::Change(c) if c.rev == 1));
        assert!(matches!(&got[1], Delivery::Change(c) if c.rev == 2));
        let resyncs: Vec<(String, u64)> = got[2..]
            .iter()
            .map(|d| match d {
                Delivery::Resync { topic, current } => {
                    (topic.to_string(), current.as_ref().unwrap().rev)
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            resyncs,
            [
                ("apps/a/b/c".to_string(), 10),
                ("clusters/z".to_string(), 1)
            ]
        );
        assert!(hub.stats().lag_events >= 9);
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-5i64..5).prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn document() -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a-e]", json_value(), 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    proptest! {
        /// Applying every published patch, in order, to the first snapshot
        /// gives exactly the hub's current document after each change.
        #[test]
        fn patches_compose_to_the_current_document(docs in prop::collection::vec(document(), 1..12)) {
            let hub = Hub::new(HubConfig::default());
            let mut replica: Option<Value> = None;
            for doc in docs {
                let Some(change) = hub.put("t/x", doc) else { continue };
                match change.kind {
                    ChangeKind::Snapshot => replica = Some((*change.doc.clone().unwrap()).clone()),
                    ChangeKind::Patch => json_patch::merge(replica.as_mut().unwrap(), change.patch.as_ref().unwrap()),
                    ChangeKind::Removed => unreachable!(),
                }
                prop_assert_eq!(replica.as_ref().unwrap(), &*hub.get("t/x").unwrap().doc);
            }
        }
    }
}
