//! Changes from other replicas (`stream of changes → [remote apply] → hub`):
//! a topic another replica's hub published, held at that replica's
//! revision, and where the hub is in the stream they came from.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;

use super::change::{Change, ChangeKind};
use super::position;
use super::state::{Hub, Inner, Made};
use crate::protocol::patch;
use crate::protocol::topic::Topic;

impl Hub {
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
