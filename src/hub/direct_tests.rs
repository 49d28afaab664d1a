//! The direct path: a parked subscription's changes written by the
//! publisher itself, in order, and handed back to its task when the
//! client's socket does not take them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;
use serde_json::json;

use super::*;

/// A client socket that takes (or not) what it is given, as scripted.
#[derive(Default)]
struct Script {
    /// What each next write does; `Done` once the script runs out.
    next: Mutex<VecDeque<Delivered>>,
    written: Mutex<Vec<u64>>,
}

impl Direct for Script {
    fn deliver(&self, change: &Arc<Change>) -> Delivered {
        let outcome = self.next.lock().pop_front().unwrap_or(Delivered::Done);
        if outcome != Delivered::Blocked {
            self.written.lock().push(change.seq);
        }
        outcome
    }
}

/// Counts its wake-ups.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn parked(script: &Arc<Script>) -> (Arc<Hub>, Subscription, Arc<Count>, Waker) {
    let hub = Hub::new(HubConfig::default());
    let mut sub = hub.subscribe(vec![Pattern::parse("clusters/*").unwrap()]);
    let count = Arc::new(Count::default());
    let waker = Waker::from(count.clone());
    // The task found nothing and waits (its waker registered), then parks.
    assert!(sub.poll_next(&mut Context::from_waker(&waker)).is_pending());
    let direct: Arc<dyn Direct> = script.clone();
    assert!(sub.park(&direct));
    (hub, sub, count, waker)
}

fn next_seq(sub: &mut Subscription, waker: &Waker) -> Option<u64> {
    match sub.poll_next(&mut Context::from_waker(waker)) {
        Poll::Ready(Delivery::Change(c)) => Some(c.seq),
        Poll::Ready(other) => panic!("unexpected {other:?}"),
        Poll::Pending => None,
    }
}

#[test]
fn a_parked_subscription_is_written_by_the_publisher_without_waking_its_task() {
    let script = Arc::new(Script::default());
    let (hub, mut sub, count, waker) = parked(&script);
    for n in 0..3 {
        hub.put("clusters/a", json!({ "n": n }));
    }
    hub.remove("clusters/a");
    assert_eq!(*script.written.lock(), vec![1, 2, 3, 4]);
    assert_eq!(count.0.load(Ordering::SeqCst), 0, "the task slept through");
    // Taken back: nothing queued, and the client resumes after the last.
    sub.unpark();
    assert_eq!(sub.resume_seq(), 4);
    assert_eq!(next_seq(&mut sub, &waker), None);
    // The task's own from now on.
    hub.put("clusters/b", json!({}));
    assert_eq!(script.written.lock().len(), 4);
    assert_eq!(next_seq(&mut sub, &waker), Some(5));
}

#[test]
fn a_change_the_socket_does_not_take_stays_queued_for_the_woken_task() {
    let script = Arc::new(Script::default());
    script
        .next
        .lock()
        .extend([Delivered::Done, Delivered::Blocked]);
    let (hub, mut sub, count, waker) = parked(&script);
    for n in 0..3 {
        hub.put("clusters/a", json!({ "n": n }));
    }
    assert_eq!(*script.written.lock(), vec![1]);
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    sub.unpark();
    assert_eq!(sub.resume_seq(), 1);
    // In order, none lost: the blocked one first.
    assert_eq!(next_seq(&mut sub, &waker), Some(2));
    assert_eq!(next_seq(&mut sub, &waker), Some(3));
    assert_eq!(next_seq(&mut sub, &waker), None);
}

#[test]
fn a_change_written_in_part_is_the_tasks_to_finish_and_the_path_stops() {
    let script = Arc::new(Script::default());
    script.next.lock().push_back(Delivered::Handed);
    let (hub, mut sub, count, waker) = parked(&script);
    hub.put("clusters/a", json!({ "n": 1 }));
    hub.put("clusters/a", json!({ "n": 2 }));
    // The first went out (its rest is the socket's to finish); the second
    // waits for the task, which was woken once.
    assert_eq!(*script.written.lock(), vec![1]);
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    sub.unpark();
    assert_eq!(sub.resume_seq(), 1);
    assert_eq!(next_seq(&mut sub, &waker), Some(2));
}

#[test]
fn a_subscription_with_changes_queued_is_not_parked() {
    let hub = Hub::new(HubConfig::default());
    let mut sub = hub.subscribe(vec![Pattern::parse("clusters/*").unwrap()]);
    hub.put("clusters/a", json!({}));
    let script = Arc::new(Script::default());
    let direct: Arc<dyn Direct> = script.clone();
    assert!(!sub.park(&direct));
    hub.put("clusters/a", json!({ "n": 1 }));
    assert!(script.written.lock().is_empty());
}

#[test]
fn nothing_is_written_for_a_dropped_subscription() {
    let script = Arc::new(Script::default());
    let (hub, sub, _, _) = parked(&script);
    let queue = sub.queue.clone();
    drop(sub);
    // A publisher that still holds the queue (it let go of the hub first).
    queue.offer(
        &Topic::new("clusters/a"),
        &hub.put("clusters/a", json!({})).unwrap(),
    );
    queue.drain();
    assert!(script.written.lock().is_empty());
}
