//! A wake-up that remembers it happened: a session's task polls one source
//! of events (a WebSocket's read side) with a waker of its own, which sets
//! a flag and wakes the task. The task then asks that source again only
//! when the flag is set, not on every wake-up a delivery causes: each such
//! poll would register wakers with the reactor for nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Waker};

use futures::task::{ArcWake, AtomicWaker};

struct Flag {
    /// The source may be ready: set at start and by the source's wake-up.
    woken: AtomicBool,
    /// The session's task.
    task: AtomicWaker,
}

impl ArcWake for Flag {
    fn wake_by_ref(this: &Arc<Self>) {
        this.woken.store(true, Ordering::Release);
        this.task.wake();
    }
}

/// One source's flag and the waker it is polled with (one allocation of
/// about 48 bytes).
pub(super) struct WakeFlag {
    flag: Arc<Flag>,
    /// Made once from `flag`.
    waker: Waker,
}

impl WakeFlag {
    /// A flag that is set: the source is polled the first time it is asked.
    pub(super) fn new() -> Self {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Self {
            waker: futures::task::waker(flag.clone()),
            flag,
        }
    }

    /// Makes `task` the one the source's wake-up wakes.
    pub(super) fn register(&self, task: &Waker) {
        self.flag.task.register(task);
    }

    /// Whether the source woke (or was never polled) since the last take;
    /// clears the flag. Poll the source with [`Self::context`] after a true.
    pub(super) fn take(&self) -> bool {
        // Read first: asked on every poll, the flag is mostly clear, and a
        // swap would take its cache line for writing each time.
        self.flag.woken.load(Ordering::Acquire) && self.flag.woken.swap(false, Ordering::AcqRel)
    }

    /// Sets the flag again: the source may have more (it answered ready).
    pub(super) fn set(&self) {
        self.flag.woken.store(true, Ordering::Release);
    }

    /// The context to poll the source with.
    pub(super) fn context(&self) -> Context<'_> {
        Context::from_waker(&self.waker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize);

    impl ArcWake for Count {
        fn wake_by_ref(this: &Arc<Self>) {
            this.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_flag_is_set_by_the_sources_wake_up_and_wakes_the_task() {
        let flag = WakeFlag::new();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        flag.register(&futures::task::waker(count.clone()));
        assert!(flag.take(), "set at start");
        assert!(!flag.take(), "cleared by the take");
        flag.context().waker().wake_by_ref();
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "the task was woken");
        assert!(flag.take());
        flag.set();
        assert!(flag.take());
        assert!(!flag.take());
    }
}
