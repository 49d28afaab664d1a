//! A subscription's queue (`hub publish → [queue] → subscription`): the
//! changes waiting for one subscription, bounded, and the topics it fell
//! behind on; the publisher's table of them by subscription id; and the
//! direct path (`hub publish → [queue] → client`), on which the publisher
//! writes a change to the client itself while the subscription's task is
//! parked with nothing else to write.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
}

#[derive(Default)]
pub(super) struct Queued {
    pub(super) changes: VecDeque<Arc<Change>>,
    /// Topics the subscription fell behind on, each with the sequence of
    /// the first change it missed there.
    pub(super) missed: BTreeMap<Topic, u64>,
    /// The subscription's task, waiting for a change.
    pub(super) waker: Option<std::task::Waker>,
    /// Where the publisher writes changes itself while the task is parked
    /// ([`Direct`]); taken back by the task when it runs.
    pub(super) direct: Option<Parked>,
    /// The sequence of the last change the direct path took (written,
    /// hidden, or already the client's): the subscription resumes from it.
    pub(super) direct_seq: u64,
}

/// What the direct path made of a change ([`Direct::deliver`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// Written whole, or not for this client (hidden from it): the next.
    Done,
    /// Written in part: the client's connection holds the rest, which the
    /// subscription's task writes before anything else. The direct path
    /// stops and the task is woken.
    Handed,
    /// Not written (the socket would block, or something of the task's
    /// must go first): the change stays queued for the task, which is woken.
    Blocked,
}

/// A client connection the publisher may write a subscription's changes
/// to itself, in hub order, while the subscription's task is parked
/// ([`Subscription::park`](super::Subscription::park)): one write per
/// change from the publisher's thread instead of waking a task per
/// subscriber (docs/benchmarks/29-direct-delivery.md). The hub calls it
/// with the queue's lock held, one change at a time, and never after the
/// task took it back.
pub trait Direct: Send + Sync {
    /// Writes `change` to the client, without waiting.
    fn deliver(&self, change: &Arc<Change>) -> Delivered;
}

/// A parked subscription's direct path.
pub(super) struct Parked {
    pub(super) sink: Arc<dyn Direct>,
    /// See `Subscription::streamed_through`: changes the client has already.
    pub(super) streamed_through: u64,
}

/// What [`Queue::offer`] did with a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Offered {
    /// Queued (its task woken).
    Queued,
    /// Queued for the publisher to write itself ([`Queue::drain`]) once it
    /// has let go of the hub.
    Direct,
    /// Not queued: the subscription is behind on the topic.
    Missed,
}

/// A queue whose buffer grew past this many changes (a burst) gives the
/// memory back once it is empty; below, the buffer is kept for the next
/// change.
const KEEP_QUEUED: usize = 32;

impl Queue {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(Queued::default()),
            floor: AtomicU64::new(u64::MAX),
            capacity: capacity.max(1),
        }
    }

    /// Queues `change` of `topic` unless the subscription is behind on that
    /// topic already or its queue is full (then the topic is marked
    /// behind). Wakes a waiting subscription, unless it is parked on the
    /// direct path: then the publisher drains the queue itself.
    pub(super) fn offer(&self, topic: &Topic, change: &Arc<Change>) -> Offered {
        let mut q = self.state.lock();
        // Once a topic is behind, its later changes wait for the resync too.
        if q.missed.contains_key(topic) {
            return Offered::Missed;
        }
        if q.changes.len() >= self.capacity {
            q.missed.insert(topic.clone(), change.seq);
            self.floor.fetch_min(change.seq, Ordering::AcqRel);
            return Offered::Missed;
        }
        q.changes.push_back(change.clone());
        if q.direct.is_some() {
            return Offered::Direct;
        }
        let waker = q.waker.take();
        drop(q);
        if let Some(waker) = waker {
            waker.wake();
        }
        Offered::Queued
    }

    /// Writes what is queued through the direct path while the task is
    /// parked, in order; when the path stops (a blocked or partial write,
    /// or the task took it back meanwhile), whatever is left is the task's,
    /// and it is woken.
    pub(super) fn drain(&self) {
        let mut q = self.state.lock();
        loop {
            let (delivered, seq) = {
                let Some(parked) = &q.direct else { break };
                let Some(change) = q.changes.front() else {
                    return;
                };
                // Already the client's (see `Subscription::streamed_through`).
                let had = change.remote
                    && change.position > 0
                    && change.position <= parked.streamed_through;
                let delivered = if had {
                    Delivered::Done
                } else {
                    parked.sink.deliver(change)
                };
                (delivered, change.seq)
            };
            if delivered != Delivered::Blocked {
                q.direct_seq = seq;
                q.changes.pop_front();
            }
            if delivered != Delivered::Done {
                q.direct = None;
            }
        }
        if q.changes.is_empty() && q.missed.is_empty() {
            return;
        }
        let waker = q.waker.take();
        drop(q);
        if let Some(waker) = waker {
            waker.wake();
        }
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
        if q.changes.is_empty() && q.changes.capacity() > KEEP_QUEUED {
            q.changes = VecDeque::new();
        }
        Some((change, !q.changes.is_empty()))
    }
}
