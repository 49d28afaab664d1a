//! Shaping one subscription's stream by its options (`hub ──Delivery──▶
//! session ──▶ [shape] ──▶ messages`): field projection (`fields`) and
//! coalescing (`debounceMs`). Per topic it keeps the revision and the
//! (projected) document it last sent; a change goes out as the merge patch
//! from that document to the newest one, carrying `base` (the revision the
//! client must hold), so a patch that coalesces several changes, or skips
//! changes outside the projection, is still applied on the right base. A
//! patch that changes nothing visible is not sent. Pure: `now` is passed
//! in; the session owns the timer.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;

use crate::hub::{Change, ChangeKind, Topic, TopicDoc};
use crate::protocol::SubscribeOptions;
use crate::protocol::patch::diff;
use crate::query::{LiveQuery, QueryOut};

/// What a shaped subscription sends next.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Shaped {
    /// The (projected) document at `rev`.
    Snapshot {
        topic: Topic,
        rev: u64,
        doc: Arc<Value>,
    },
    /// From revision `base` to `rev`.
    Patch {
        topic: Topic,
        rev: u64,
        base: u64,
        patch: Value,
    },
    /// The topic is gone (`rev` absent when learned from a resync).
    Removed { topic: Topic, rev: Option<u64> },
    /// What a live query makes of a change.
    Query(QueryOut),
}

#[derive(Debug)]
struct Sent {
    rev: u64,
    doc: Arc<Value>,
    /// When its last message went out (None: only its initial snapshot).
    at: Option<Instant>,
    pending: Option<Pending>,
}

/// The newest state of a topic whose message waits for the interval.
#[derive(Debug)]
struct Pending {
    rev: u64,
    doc: Arc<Value>,
    /// The hub sequence of the first change it holds back: cursors stay below it.
    first_seq: u64,
}

/// One subscription's shaping state.
#[derive(Debug)]
pub(super) struct Shaper {
    options: SubscribeOptions,
    topics: BTreeMap<Topic, Sent>,
    /// Messages made and not yet taken, each with the first hub sequence
    /// it covers that no earlier message did (for the cursor floor).
    ready: VecDeque<(Shaped, Option<u64>)>,
    /// A live query: changes feed it instead (src/query/).
    query: Option<Box<LiveQuery>>,
}

impl Shaper {
    pub(super) fn new(options: SubscribeOptions) -> Self {
        Self {
            options,
            topics: BTreeMap::new(),
            ready: VecDeque::new(),
            query: None,
        }
    }

    /// A live query's shaper (its options have no `debounceMs`).
    pub(super) fn for_query(options: SubscribeOptions, query: LiveQuery) -> Self {
        Self {
            query: Some(Box::new(query)),
            ..Self::new(options)
        }
    }

    /// Whether it shapes a live query.
    pub(super) fn is_query(&self) -> bool {
        self.query.is_some()
    }

    /// Feeds a live query a topic's state; false without a query.
    fn query(&mut self, topic: &Topic, rev: u64, doc: Option<&Arc<Value>>) -> bool {
        let Some(query) = self.query.as_mut() else {
            return false;
        };
        for out in query.update(topic, rev, doc) {
            self.ready.push_back((Shaped::Query(out), None));
        }
        true
    }

    /// A change the caller may not see: a live query drops the topic
    /// (other shapers never hear of it).
    pub(super) fn hidden(&mut self, topic: &Topic, rev: u64) {
        self.query(topic, rev, None);
    }

    fn view(&self, doc: &Arc<Value>) -> Arc<Value> {
        match &self.options.fields {
            Some(fields) => Arc::new(fields.project(doc)),
            None => doc.clone(),
        }
    }

    /// Records an initial snapshot; returns the document to send.
    pub(super) fn initial(&mut self, doc: &TopicDoc) -> Arc<Value> {
        let view = self.view(&doc.doc);
        self.topics.insert(
            doc.topic.clone(),
            Sent {
                rev: doc.rev,
                doc: view.clone(),
                at: None,
                pending: None,
            },
        );
        view
    }

    /// A live change of the hub.
    pub(super) fn change(&mut self, change: &Change, now: Instant) {
        let topic = &change.topic;
        let doc = change
            .doc
            .as_ref()
            .filter(|_| change.kind != ChangeKind::Removed);
        if self.query(topic, change.rev, doc) {
            return;
        }
        match (change.kind, &change.doc) {
            (ChangeKind::Removed, _) | (_, None) => {
                self.topics.remove(topic);
                self.ready.push_back((
                    Shaped::Removed {
                        topic: topic.clone(),
                        rev: Some(change.rev),
                    },
                    None,
                ));
            }
            (ChangeKind::Snapshot, Some(doc)) => self.replace(topic, change.rev, doc, now),
            (ChangeKind::Patch, Some(doc)) => {
                let view = self.view(doc);
                let interval = self.options.debounce();
                let Some(sent) = self.topics.get_mut(topic) else {
                    // Not held (it was invisible before): its whole state.
                    return self.replace(topic, change.rev, doc, now);
                };
                let waiting = sent.pending.is_some()
                    || match (interval, sent.at) {
                        (Some(interval), Some(at)) => now < at + interval,
                        _ => false,
                    };
                if waiting {
                    let first_seq = sent.pending.as_ref().map_or(change.seq, |p| p.first_seq);
                    sent.pending = Some(Pending {
                        rev: change.rev,
                        doc: view,
                        first_seq,
                    });
                } else if let Some(out) = emit(topic, sent, change.rev, view, now) {
                    self.ready.push_back((out, Some(change.seq)));
                }
            }
        }
    }

    /// A resync after the subscriber fell behind: the topic's latest state.
    pub(super) fn resync(&mut self, topic: &Topic, current: Option<&TopicDoc>, now: Instant) {
        let rev = current.map_or(0, |d| d.rev);
        if self.query(topic, rev, current.map(|d| &d.doc)) {
            return;
        }
        match current {
            Some(doc) => self.replace(topic, doc.rev, &doc.doc, now),
            None => {
                self.topics.remove(topic);
                self.ready.push_back((
                    Shaped::Removed {
                        topic: topic.clone(),
                        rev: None,
                    },
                    None,
                ));
            }
        }
    }

    fn replace(&mut self, topic: &Topic, rev: u64, doc: &Arc<Value>, now: Instant) {
        let view = self.view(doc);
        self.topics.insert(
            topic.clone(),
            Sent {
                rev,
                doc: view.clone(),
                at: Some(now),
                pending: None,
            },
        );
        self.ready.push_back((
            Shaped::Snapshot {
                topic: topic.clone(),
                rev,
                doc: view,
            },
            None,
        ));
    }

    /// When the next held-back message is due (None: nothing waits).
    pub(super) fn due(&self) -> Option<Instant> {
        let interval = self.options.debounce()?;
        self.topics
            .values()
            .filter(|s| s.pending.is_some())
            .filter_map(|s| s.at.map(|at| at + interval))
            .min()
    }

    /// Makes the messages of every topic whose interval is over.
    pub(super) fn flush(&mut self, now: Instant) {
        let Some(interval) = self.options.debounce() else {
            return;
        };
        for (topic, sent) in &mut self.topics {
            let due = sent.at.is_some_and(|at| at + interval <= now);
            if !due {
                continue;
            }
            let Some(pending) = sent.pending.take() else {
                continue;
            };
            if let Some(out) = emit(topic, sent, pending.rev, pending.doc, now) {
                self.ready.push_back((out, Some(pending.first_seq)));
            }
        }
    }

    /// The next message to send.
    pub(super) fn pop(&mut self) -> Option<Shaped> {
        self.ready.pop_front().map(|(out, _)| out)
    }

    /// The first hub sequence a message still held back (or made and not
    /// yet taken) covers: a cursor this subscription hands out must be
    /// below it, or a resume would skip that change.
    pub(super) fn floor(&self) -> Option<u64> {
        let pending = self
            .topics
            .values()
            .filter_map(|s| s.pending.as_ref().map(|p| p.first_seq));
        let ready = self.ready.iter().filter_map(|(_, seq)| *seq);
        pending.chain(ready).min()
    }
}

/// The patch from what was sent for `topic` to `view` at `rev`, recording
/// it as sent; None when nothing visible changed (the client keeps its
/// revision, which the next patch names as its `base`).
fn emit(
    topic: &Topic,
    sent: &mut Sent,
    rev: u64,
    view: Arc<Value>,
    now: Instant,
) -> Option<Shaped> {
    let patch = diff(&sent.doc, &view)?;
    let base = sent.rev;
    sent.rev = rev;
    sent.doc = view;
    sent.at = Some(now);
    Some(Shaped::Patch {
        topic: topic.clone(),
        rev,
        base,
        patch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::EncodeCache;
    use crate::protocol::options::Fields;
    use serde_json::json;
    use std::time::Duration;

    fn change(seq: u64, rev: u64, kind: ChangeKind, doc: Option<Value>) -> Change {
        Change {
            topic: Topic::new("apps/c/ns/a"),
            rev,
            seq,
            cursor: format!("e-{seq}"),
            position: 0,
            streamed_at: Default::default(),
            kind,
            doc: doc.map(Arc::new),
            patch: None,
            at: chrono::Utc::now(),
            published: std::time::Instant::now(),
            encoded: EncodeCache::default(),
            remote: false,
        }
    }

    fn options(debounce_ms: Option<u64>, fields: Option<&[&str]>) -> SubscribeOptions {
        SubscribeOptions {
            debounce_ms,
            fields: fields.map(|f| {
                Fields::parse(&f.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
            }),
        }
    }

    fn patch(rev: u64, base: u64, patch: Value) -> Shaped {
        Shaped::Patch {
            topic: Topic::new("apps/c/ns/a"),
            rev,
            base,
            patch,
        }
    }

    fn drain(s: &mut Shaper) -> Vec<Shaped> {
        std::iter::from_fn(|| s.pop()).collect()
    }

    fn start(s: &mut Shaper, rev: u64, doc: Value) {
        s.initial(&TopicDoc {
            topic: Topic::new("apps/c/ns/a"),
            rev,
            doc: Arc::new(doc),
        });
    }

    /// Projection: patches carry only projected members, changes outside
    /// the projection send nothing, and `base` names the last sent revision.
    #[test]
    fn projected_patches_name_their_base() {
        let t0 = Instant::now();
        let mut s = Shaper::new(options(None, Some(&["/phase", "/reason"])));
        start(&mut s, 1, json!({"phase": "Running", "ready": 3}));
        let steps = [
            (json!({"phase": "Running", "ready": 2}), vec![]),
            (
                json!({"phase": "Degraded", "reason": "NotReady", "ready": 1}),
                vec![patch(
                    3,
                    1,
                    json!({"phase": "Degraded", "reason": "NotReady"}),
                )],
            ),
            (
                json!({"phase": "Degraded", "ready": 1}),
                vec![patch(4, 3, json!({"reason": null}))],
            ),
        ];
        for (i, (doc, want)) in steps.into_iter().enumerate() {
            let seq = 10 + i as u64;
            s.change(&change(seq, 2 + i as u64, ChangeKind::Patch, Some(doc)), t0);
            assert_eq!(s.floor(), want.first().map(|_| seq), "step {i}");
            assert_eq!(drain(&mut s), want, "step {i}");
        }
        assert_eq!(s.floor(), None);
    }

    /// Debounce: the first change goes out at once, later ones in the
    /// interval are held and go out as one patch from the last sent state.
    #[test]
    fn debounced_changes_coalesce() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Shaper::new(options(Some(1000), None));
        start(&mut s, 1, json!({"a": 1, "b": 1}));
        s.change(
            &change(5, 2, ChangeKind::Patch, Some(json!({"a": 2, "b": 1}))),
            t0,
        );
        assert_eq!(drain(&mut s), [patch(2, 1, json!({"a": 2}))]);
        assert_eq!(s.due(), None);
        s.change(
            &change(6, 3, ChangeKind::Patch, Some(json!({"a": 3, "b": 1}))),
            t0 + ms(100),
        );
        s.change(
            &change(7, 4, ChangeKind::Patch, Some(json!({"a": 3}))),
            t0 + ms(200),
        );
        assert_eq!(drain(&mut s), []);
        assert_eq!(s.floor(), Some(6));
        assert_eq!(s.due(), Some(t0 + ms(1000)));
        s.flush(t0 + ms(999));
        assert_eq!(drain(&mut s), []);
        s.flush(t0 + ms(1000));
        assert_eq!(s.floor(), Some(6), "made, not yet taken");
        assert_eq!(drain(&mut s), [patch(4, 2, json!({"a": 3, "b": null}))]);
        assert_eq!(s.floor(), None);
        // Held back, then undone: nothing to send.
        s.change(
            &change(8, 5, ChangeKind::Patch, Some(json!({"a": 9}))),
            t0 + ms(1500),
        );
        s.change(
            &change(9, 6, ChangeKind::Patch, Some(json!({"a": 3}))),
            t0 + ms(1600),
        );
        s.flush(t0 + ms(2000));
        assert_eq!(drain(&mut s), []);
        assert_eq!((s.floor(), s.due()), (None, None));
        // A removal goes out at once and drops what was held.
        s.change(
            &change(10, 7, ChangeKind::Patch, Some(json!({"a": 4}))),
            t0 + ms(2100),
        );
        assert_eq!(drain(&mut s), [patch(7, 4, json!({"a": 4}))]);
        s.change(
            &change(11, 8, ChangeKind::Patch, Some(json!({"a": 5}))),
            t0 + ms(2200),
        );
        s.change(&change(12, 9, ChangeKind::Removed, None), t0 + ms(2300));
        assert_eq!(
            drain(&mut s),
            [Shaped::Removed {
                topic: Topic::new("apps/c/ns/a"),
                rev: Some(9)
            }]
        );
        assert_eq!((s.floor(), s.due()), (None, None));
    }
}
