//! The hub itself (`engine → [hub: documents, revisions, publish] →
//! subscriptions`): the documents it holds by topic, their revisions and
//! the hub-wide sequence, and publishing a change to the replay log and to
//! every matching subscription's queue.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use chrono::Utc;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;

use super::change::{Change, ChangeKind, EncodeCache, encode};
use super::demand::Demand;
use super::freshness::Freshness;
use super::pattern::{Pattern, PatternIndex};
use super::position::StreamMark;
use super::queue::Slots;
use super::settings::HubConfig;
use crate::protocol::patch;
use crate::protocol::topic::{Topic, TopicKind};

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

/// What a change made of a topic, before the hub numbers it.
pub(super) struct Made {
    pub(super) kind: ChangeKind,
    pub(super) doc: Option<Arc<Value>>,
    pub(super) patch: Option<Arc<Value>>,
    /// Applied from another replica ([`Change::remote`]).
    pub(super) remote: bool,
}

impl Made {
    pub(super) fn removal(remote: bool) -> Self {
        Self {
            kind: ChangeKind::Removed,
            doc: None,
            patch: None,
            remote,
        }
    }
}

pub(super) struct Entry {
    pub(super) rev: u64,
    pub(super) doc: Arc<Value>,
}

pub(super) struct Inner {
    pub(super) topics: BTreeMap<Topic, Entry>,
    /// Removed topics whose removal is still in the replay log: (the
    /// removal's revision, its sequence). A topic created again continues
    /// from that revision, so a topic's revisions only grow while a client
    /// could still resume across its removal.
    pub(super) removed: HashMap<Topic, (u64, u64)>,
    pub(super) seq: u64,
    /// Logged changes, oldest first, with their sequences contiguous; each
    /// with its estimated bytes (see `log.rs`), which `log_bytes` sums.
    pub(super) log: VecDeque<(Arc<Change>, usize)>,
    pub(super) log_bytes: usize,
    pub(super) index: PatternIndex<u64>,
    pub(super) slots: Slots,
    pub(super) next_id: u64,
    pub(super) lag_events: u64,
    /// Where the hub is in a stream of changes shared by replicas, if it follows one.
    pub(super) stream: Option<StreamMark>,
}

/// The hub. Cheap to share behind an `Arc`.
pub struct Hub {
    epoch: String,
    config: HubConfig,
    freshness: Arc<Freshness>,
    demand: Arc<Demand>,
    pub(super) inner: Mutex<Inner>,
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
        Self::with_freshness(config, Arc::default())
    }

    /// An empty hub of the same gateway as `other`, sharing what it knows
    /// of how current each member is: the engine's hub and the one clients
    /// are served from when a stream of changes lies between them.
    pub fn beside(other: &Hub, config: HubConfig) -> Arc<Self> {
        Self::with_freshness(config, other.freshness.clone())
    }

    fn with_freshness(config: HubConfig, freshness: Arc<Freshness>) -> Arc<Self> {
        let epoch = format!("{:x}", Utc::now().timestamp_micros());
        Arc::new(Self {
            epoch,
            config,
            freshness,
            demand: Arc::default(),
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

    /// When each member's documents were last known current (heartbeats'
    /// `asOf`).
    pub fn freshness(&self) -> &Freshness {
        &self.freshness
    }

    /// The patterns clients' subscriptions hold (on-demand pod watches).
    pub fn demand(&self) -> &Arc<Demand> {
        &self.demand
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
                inner.logged(seq).map(|c| c.position)
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
            Some((topic, entry)) => (
                topic.clone(),
                ChangeKind::Patch,
                entry.rev + 1,
                // None: the document did not change.
                Some(Arc::new(patch::diff(&entry.doc, &doc)?)),
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

    /// Holds `doc` as `topic`'s document at `rev` and publishes `made` (a
    /// snapshot, or a patch from the revision before) carrying it.
    pub(super) fn hold(
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

    pub(super) fn publish(
        &self,
        inner: &mut Inner,
        topic: Topic,
        rev: u64,
        made: Made,
    ) -> Arc<Change> {
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
            published: std::time::Instant::now(),
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
                ..EncodeCache::default()
            },
            streamed_at: AtomicU64::new(0),
            ..change
        };
        let change = Arc::new(change);
        inner.log_change(logged, &self.config);
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

    pub(super) fn matching(inner: &Inner, patterns: &[Pattern]) -> Vec<TopicDoc> {
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

    /// The bounds the hub was built with (metrics export the replay log's).
    pub fn config(&self) -> &HubConfig {
        &self.config
    }
}
