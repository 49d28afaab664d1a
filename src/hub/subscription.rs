//! A subscription and its delivery (`hub → [subscription] → transports`):
//! the documents matching its patterns at subscription time, what a
//! resuming client is missing, then each change in hub order from its
//! queue, or a resync of a topic it fell behind on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::change::{Change, ChangeKind};
use super::pattern::Pattern;
use super::position;
use super::queue::{Queue, Slot};
use super::state::{Hub, TopicDoc};
use crate::protocol::StreamCursor;
use crate::protocol::topic::Topic;

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

impl Hub {
    /// Subscribes to `patterns`: the current snapshot plus every later
    /// change, with no gap between the two.
    pub fn subscribe(self: &Arc<Self>, patterns: Vec<Pattern>) -> Subscription {
        let mut inner = self.inner.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        let queue = Arc::new(Queue::new(self.config().subscriber_queue));
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
            demand: None,
        }
    }

    fn unsubscribe(&self, id: u64, patterns: &[Pattern]) {
        let mut inner = self.inner.lock();
        for p in patterns {
            inner.index.remove(p, &id);
        }
        inner.slots.remove(&id);
    }
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
    /// A client's subscription: its patterns count in the hub's demand.
    demand: Option<super::demand::DemandGuard>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Subscription");
        d.field("id", &self.id)
            .field("epoch", &self.hub.epoch())
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
    /// A client holds it: its patterns count in the hub's demand (what
    /// clients look at) until it is dropped.
    pub fn count_as_demand(&mut self) {
        if self.demand.is_none() {
            self.demand = Some(self.hub.demand().hold(&self.patterns));
        }
    }

    /// The patterns it was made with.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

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
    /// when the client has it already (see `streamed_through`). A change
    /// made at position 0 (the hub's first pass over a stream made again:
    /// where it is in it is not known yet) is always news.
    fn received(&mut self, change: Arc<Change>) -> Option<Arc<Change>> {
        let floor = self.queue.floor.load(Ordering::Acquire);
        self.resume = change.seq.min(floor.saturating_sub(1));
        let had = change.remote && change.position > 0 && change.position <= self.streamed_through;
        (!had).then_some(change)
    }

    /// A waker for another source of this subscription's reader (a timer):
    /// waking it raises the subscription's alarm and wakes the task
    /// waiting in [`Subscription::poll_next`]. The alarm starts lowered: a
    /// reader polls its source once with this waker before it waits for
    /// the alarm.
    pub fn alarm(&self) -> std::task::Waker {
        std::task::Waker::from(self.queue.clone())
    }

    /// Whether the alarm was raised since the last take; lowers it.
    pub fn take_alarm(&self) -> bool {
        // Read first: asked on every poll, the alarm is mostly down, and a
        // swap would take the cache line for writing each time.
        let alarm = &self.queue.alarm;
        alarm.load(Ordering::Acquire) && alarm.swap(false, Ordering::AcqRel)
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
                // An alarm raised before the waker was registered woke
                // nobody (or an older waker): wake this one.
                if self.queue.alarm.load(Ordering::Acquire) {
                    cx.waker().wake_by_ref();
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
