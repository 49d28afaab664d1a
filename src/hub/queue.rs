//! A subscription's queue (`hub publish → [queue] → subscription`): the
//! changes waiting for one subscription, bounded, and the topics it fell
//! behind on; and the publisher's table of them by subscription id.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::change::Change;
use crate::protocol::topic::Topic;

/// Per-subscription state the publisher writes to.
pub(super) struct Slot {
    pub(super) queue: Arc<Queue>,
}

/// Slots by subscription id. The publisher looks one up per matching
/// subscription per change; ids are handed out in sequence, so a
/// multiplication spreads them well enough, at a fraction of SipHash's cost.
pub(super) type Slots = HashMap<u64, Slot, std::hash::BuildHasherDefault<IdHasher>>;

#[derive(Default)]
pub(super) struct IdHasher(u64);

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
/// (docs/benchmarks/18-one-task-per-stream.md).
pub(super) struct Queue {
    pub(super) state: Mutex<Queued>,
    /// The smallest first-missed sequence in `missed` (`u64::MAX` when
    /// none): read on every delivery without taking the lock.
    pub(super) floor: AtomicU64,
    pub(super) capacity: usize,
    /// Raised by the subscription's alarm waker ([`Queue`]'s `Wake`): a
    /// source of the reader's other events (its heartbeat timer) woke.
    /// Kept here, beside what the reader loads on every delivery anyway,
    /// instead of in an object of its own.
    pub(super) alarm: AtomicBool,
}

#[derive(Default)]
pub(super) struct Queued {
    pub(super) changes: Changes,
    /// Topics the subscription fell behind on, each with the sequence of
    /// the first change it missed there.
    pub(super) missed: BTreeMap<Topic, u64>,
    /// The subscription's task, waiting for a change.
    pub(super) waker: Option<std::task::Waker>,
}

/// A queue whose buffer grew past this many changes (a burst) gives the
/// memory back once it is empty; below, the buffer is kept for the next
/// change.
const KEEP_QUEUED: usize = 32;

/// Queued changes, in order. The first is held in the queue itself: a
/// subscriber that keeps up has one change queued at a time, and a buffer
/// of its own was one more object apart in memory that the publisher and
/// then the subscriber each loaded per delivery, with 1 000 subscribers
/// rarely still in the cache (docs/benchmarks/33-objects-per-delivery.md).
#[derive(Default)]
pub(super) struct Changes {
    /// The first change; empty when `rest` is.
    head: Option<Arc<Change>>,
    /// The changes behind it.
    rest: VecDeque<Arc<Change>>,
}

impl Changes {
    pub(super) fn len(&self) -> usize {
        usize::from(self.head.is_some()) + self.rest.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// What the buffer behind the first change holds room for.
    #[cfg(test)]
    pub(super) fn buffered_capacity(&self) -> usize {
        self.rest.capacity()
    }

    pub(super) fn push_back(&mut self, change: Arc<Change>) {
        if self.head.is_none() {
            self.head = Some(change);
        } else {
            self.rest.push_back(change);
        }
    }

    pub(super) fn pop_front(&mut self) -> Option<Arc<Change>> {
        let first = self.head.take()?;
        self.head = self.rest.pop_front();
        if self.rest.is_empty() && self.rest.capacity() > KEEP_QUEUED {
            self.rest = VecDeque::new();
        }
        Some(first)
    }
}

impl Queue {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(Queued::default()),
            floor: AtomicU64::new(u64::MAX),
            capacity: capacity.max(1),
            alarm: AtomicBool::new(false),
        }
    }

    /// Queues `change` of `topic` unless the subscription is behind on that
    /// topic already or its queue is full (then the topic is marked
    /// behind); false when the change was not queued. Wakes a waiting
    /// subscription.
    pub(super) fn offer(&self, topic: &Topic, change: &Arc<Change>) -> bool {
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
    pub(super) fn set_floor(&self, missed: &BTreeMap<Topic, u64>) {
        let floor = missed.values().copied().min().unwrap_or(u64::MAX);
        self.floor.store(floor, Ordering::Release);
    }

    /// The first queued change, and whether more were queued behind it.
    pub(super) fn pop(&self) -> Option<(Arc<Change>, bool)> {
        Self::pop_from(&mut self.state.lock())
    }

    pub(super) fn pop_from(q: &mut Queued) -> Option<(Arc<Change>, bool)> {
        let change = q.changes.pop_front()?;
        Some((change, !q.changes.is_empty()))
    }
}

/// The subscription's alarm: raises the flag, then wakes the reader as a
/// queued change would.
impl std::task::Wake for Queue {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.alarm.store(true, Ordering::Release);
        let waker = self.state.lock().waker.take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}
