//! Failed authentication, throttled per client address, beside every way in
//! (REST, tasks, SSE, the WebSocket handshake and its `auth` operation):
//! past `limit` rejected tokens from one address within a window, that
//! address is refused (429) without asking the verifier until the window
//! ends. Successes never reset the count (a known token must not launder
//! guesses), and other addresses are never affected. Memory is bounded:
//! entries expire with their window and the map holds at most
//! [`MAX_ADDRESSES`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Most addresses tracked at once (about 40 bytes each).
pub const MAX_ADDRESSES: usize = 100_000;

/// How many failed authentications an address may have per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureLimits {
    /// Rejected tokens allowed per address and window (at least 1).
    pub per_ip: u32,
    /// The window, counted from an address's first failure in it.
    pub window: Duration,
}

impl Default for FailureLimits {
    fn default() -> Self {
        Self {
            per_ip: 20,
            window: Duration::from_secs(60),
        }
    }
}

impl FailureLimits {
    /// The limits the `--config` file's `authFailures` sets (defaults where it does not).
    pub fn from_file(file: &crate::config::AuthFailureSettings) -> Self {
        let defaults = Self::default();
        Self {
            per_ip: file.max_per_ip.unwrap_or(defaults.per_ip),
            window: file
                .window_seconds
                .map_or(defaults.window, Duration::from_secs),
        }
    }
}

/// An address's failures in its current window.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    since: Instant,
}

/// The per-address failure counts.
#[derive(Debug)]
pub struct FailureThrottle {
    limits: FailureLimits,
    addresses: Mutex<HashMap<IpAddr, Failures>>,
}

impl FailureThrottle {
    /// A throttle with `limits` (a limit of 0 counts as 1).
    pub fn new(limits: FailureLimits) -> Self {
        Self {
            limits: FailureLimits {
                per_ip: limits.per_ip.max(1),
                window: limits.window.max(Duration::from_secs(1)),
            },
            addresses: Mutex::new(HashMap::new()),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> FailureLimits {
        self.limits
    }

    /// Ok while `ip` may still try; else how long until its window ends.
    pub fn check(&self, ip: IpAddr) -> Result<(), Duration> {
        let addresses = self.addresses.lock();
        let Some(f) = addresses.get(&ip) else {
            return Ok(());
        };
        let elapsed = f.since.elapsed();
        if f.count < self.limits.per_ip || elapsed >= self.limits.window {
            return Ok(());
        }
        Err(self.limits.window - elapsed)
    }

    /// Counts one rejected token from `ip`.
    pub fn failed(&self, ip: IpAddr) {
        let mut addresses = self.addresses.lock();
        let now = Instant::now();
        if !addresses.contains_key(&ip) && addresses.len() >= MAX_ADDRESSES {
            let window = self.limits.window;
            addresses.retain(|_, f| now.duration_since(f.since) < window);
            if addresses.len() >= MAX_ADDRESSES {
                // Full of live windows: forget the addresses that are not
                // refused yet rather than those that are.
                let limit = self.limits.per_ip;
                addresses.retain(|_, f| f.count >= limit);
            }
            if addresses.len() >= MAX_ADDRESSES {
                return;
            }
        }
        let f = addresses.entry(ip).or_insert(Failures {
            count: 0,
            since: now,
        });
        if now.duration_since(f.since) >= self.limits.window {
            *f = Failures {
                count: 0,
                since: now,
            };
        }
        f.count = f.count.saturating_add(1);
        if f.count == self.limits.per_ip {
            tracing::warn!(
                %ip,
                failures = f.count,
                window_secs = self.limits.window.as_secs(),
                "address refused after failed authentications until its window ends"
            );
        }
    }

    /// Addresses tracked now (for tests and the bound).
    pub fn tracked(&self) -> usize {
        self.addresses.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_keeps_the_default_limits() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config.example.yaml");
        let file = crate::config::load_file(&path).unwrap();
        assert_eq!(
            FailureLimits::from_file(&file.auth_failures),
            FailureLimits::default()
        );
    }

    #[test]
    fn an_address_is_refused_past_its_failures_until_the_window_ends() {
        let throttle = FailureThrottle::new(FailureLimits {
            per_ip: 3,
            window: Duration::from_secs(1),
        });
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        for _ in 0..3 {
            assert_eq!(throttle.check(a), Ok(()));
            throttle.failed(a);
        }
        let wait = throttle.check(a).unwrap_err();
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        assert_eq!(throttle.check(b), Ok(()), "other addresses go on");
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(throttle.check(a), Ok(()), "a new window");
        throttle.failed(a);
        assert_eq!(throttle.check(a), Ok(()));
    }

    #[test]
    fn the_map_is_bounded() {
        let throttle = FailureThrottle::new(FailureLimits {
            per_ip: 2,
            window: Duration::from_secs(60),
        });
        let refused = IpAddr::from([192, 0, 2, 1]);
        throttle.failed(refused);
        throttle.failed(refused);
        for n in 0..(MAX_ADDRESSES as u32 + 10) {
            throttle.failed(IpAddr::from((0x0a00_0000 + n).to_be_bytes()));
        }
        assert!(throttle.tracked() <= MAX_ADDRESSES);
        assert!(
            throttle.check(refused).is_err(),
            "a refused address stays refused"
        );
    }
}
