//! Shutdown as sessions see it. Polling a `CancellationToken`'s future
//! takes two locks that every session shares (the token's node and its
//! `Notify`), and a session's task is polled on every delivery: with a
//! thousand subscribers on two workers that was two contended global locks
//! per delivered message. Here a session's task registers once, then reads
//! an atomic flag.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::task::{Context, Poll};

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tokio_util::sync::CancellationToken;

/// Follows the gateway's shutdown token for every session.
pub(crate) struct Signal {
    token: CancellationToken,
    /// Set once the token is cancelled, before `notify` wakes the sessions.
    stopped: AtomicBool,
    notify: Arc<Notify>,
    watching: Once,
}

impl Signal {
    pub(crate) fn new(token: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            token,
            stopped: AtomicBool::new(false),
            notify: Arc::new(Notify::new()),
            watching: Once::new(),
        })
    }

    /// Whether the gateway is shutting down.
    pub(crate) fn is_stopping(&self) -> bool {
        self.token.is_cancelled()
    }

    /// A session's wait for the shutdown (call from a runtime: the first
    /// call starts the task that follows the token).
    pub(crate) fn wait(self: &Arc<Self>) -> Stopping {
        self.watching.call_once(|| {
            let signal = self.clone();
            tokio::spawn(async move {
                signal.token.cancelled().await;
                signal.stopped.store(true, Ordering::Release);
                signal.notify.notify_waiters();
            });
        });
        Stopping {
            // Made before the flag is first read: a notification sent
            // between the two still completes it.
            notified: Box::pin(self.notify.clone().notified_owned()),
            signal: self.clone(),
            registered: false,
        }
    }
}

/// One session's wait for the shutdown.
pub(crate) struct Stopping {
    signal: Arc<Signal>,
    notified: Pin<Box<OwnedNotified>>,
    registered: bool,
}

impl Stopping {
    /// Ready once the gateway shuts down. Polled by one task (the
    /// session's) all along: its first poll leaves the task's waker with
    /// the notification, and later polls only read the flag, which is set
    /// before that waker is woken.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.stopped.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        if !self.registered {
            if self.notified.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            self.registered = true;
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_waiting_session_wakes_once_the_token_is_cancelled() {
        let token = CancellationToken::new();
        let signal = Signal::new(token.clone());
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let mut stopping = signal.wait();
                tokio::spawn(async move {
                    // Woken for other reasons first: later polls read the flag.
                    for _ in 0..3 {
                        let once = std::future::poll_fn(|cx| stopping.poll(cx));
                        let _ =
                            tokio::time::timeout(std::time::Duration::from_millis(5), once).await;
                    }
                    std::future::poll_fn(|cx| stopping.poll(cx)).await;
                })
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(waiters.iter().all(|w| !w.is_finished()));
        assert!(!signal.is_stopping());
        token.cancel();
        for waiter in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .expect("woken by the shutdown")
                .unwrap();
        }
        // A session that starts after the shutdown ends at once.
        let mut late = signal.wait();
        std::future::poll_fn(|cx| late.poll(cx)).await;
        assert!(signal.is_stopping());
    }
}
