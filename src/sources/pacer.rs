//! The pace at which member connections start: every probe and watch task
//! of a member takes a turn before its first request, at most
//! `rate` turns a second after a burst of `rate`. A few dozen members start
//! at once; a fleet of thousands (a Karpor installation's Clusters) starts
//! over seconds to minutes instead of opening every connection in the same
//! instant, so the gateway keeps answering (`/livez`, subscribers) while it
//! starts them. A member waiting its turn shows `Initializing (Probing)`.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// New member connections (probe or watch tasks) started per second by default.
pub const DEFAULT_START_RATE: u32 = 500;

/// A shared pacer of connection starts (GCRA: a turn every `1/rate` s, up
/// to `rate` turns ahead at once).
#[derive(Debug)]
pub struct Pacer {
    interval: Duration,
    burst: Duration,
    /// When the turn after the last one given is free.
    next: Mutex<Option<Instant>>,
}

impl Pacer {
    /// A pacer of `rate` starts a second (at least 1).
    pub fn new(rate: u32) -> Self {
        let rate = rate.max(1);
        let interval = Duration::from_secs(1) / rate;
        Self {
            interval,
            burst: interval * (rate - 1),
            next: Mutex::new(None),
        }
    }

    /// Waits for a turn.
    pub async fn turn(&self) {
        let wait = {
            let now = Instant::now();
            let mut next = self.next.lock();
            let at = next.map_or(now, |at| at.max(now));
            *next = Some(at + self.interval);
            (at - now).saturating_sub(self.burst)
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

impl Default for Pacer {
    fn default() -> Self {
        Self::new(DEFAULT_START_RATE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// When each of `count` turns is given, in ms after the first ask
    /// (paused time: exact).
    async fn turns(rate: u32, count: usize) -> Vec<u128> {
        let pacer = std::sync::Arc::new(Pacer::new(rate));
        let start = Instant::now();
        let tasks: Vec<_> = (0..count)
            .map(|_| {
                let pacer = pacer.clone();
                tokio::spawn(async move {
                    pacer.turn().await;
                    start.elapsed().as_millis()
                })
            })
            .collect();
        let mut at = Vec::new();
        for task in tasks {
            at.push(task.await.unwrap());
        }
        at.sort();
        at
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_rate_starts_at_once_and_the_rest_at_the_rate() {
        // (rate, count, turns given at once, time of the last turn in ms)
        let cases = [
            (10, 5, 5, 0),
            (10, 10, 10, 0),
            (10, 30, 10, 2000),
            (4, 6, 4, 500),
        ];
        for (rate, count, at_once, last) in cases {
            let at = turns(rate, count).await;
            assert_eq!(
                at.iter().filter(|&&ms| ms == 0).count(),
                at_once,
                "rate {rate}, {count} turns: {at:?}"
            );
            assert_eq!(
                *at.last().unwrap(),
                last,
                "rate {rate}, {count} turns: {at:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn turns_not_taken_are_not_saved_up_beyond_the_burst() {
        let pacer = Pacer::new(2);
        pacer.turn().await;
        pacer.turn().await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        let start = Instant::now();
        for _ in 0..4 {
            pacer.turn().await;
        }
        // Two at once (the burst), then one each half second.
        assert_eq!(start.elapsed(), Duration::from_millis(1000));
    }
}
