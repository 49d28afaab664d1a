//! Abuse limits per client, on top of the gateway-wide connection limit:
//! open sessions per IP address and per authenticated subject, and a
//! subscribe rate (token bucket) per IP and per subject, shared by every
//! socket and stream of that client.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use dashmap::DashMap;

/// A token bucket: `rate` operations per second with a burst of the same size.
#[derive(Debug)]
pub(super) struct Bucket {
    tokens: f64,
    rate: f64,
    last: Instant,
    /// Operations refused since the last one taken (a client that keeps
    /// going past its limit is disconnected).
    pub(super) refused_in_a_row: u32,
}

impl Bucket {
    /// A full bucket of `rate` operations per second (at least 1).
    pub(super) fn new(rate: u32) -> Self {
        Self {
            tokens: f64::from(rate.max(1)),
            rate: f64::from(rate.max(1)),
            last: Instant::now(),
            refused_in_a_row: 0,
        }
    }

    /// Takes one operation's token: false when the client is over its rate.
    pub(super) fn take(&mut self) -> bool {
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.last).as_secs_f64() * self.rate).min(self.rate);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.refused_in_a_row = 0;
            true
        } else {
            self.refused_in_a_row += 1;
            false
        }
    }
}

/// The per-client limits.
#[derive(Debug)]
pub(super) struct Limits {
    per_ip: usize,
    per_subject: usize,
    rate: u32,
    open: DashMap<String, usize>,
    buckets: DashMap<String, Bucket>,
}

/// Who a session belongs to, for the limits.
#[derive(Debug, Clone, Default)]
pub(super) struct Client {
    /// The peer address (None when the server does not pass it on).
    pub(super) ip: Option<IpAddr>,
    /// The authenticated subject (None without authentication: only the IP counts).
    pub(super) subject: Option<String>,
}

impl Client {
    fn keys(&self) -> Vec<(String, bool)> {
        let mut keys = Vec::new();
        if let Some(ip) = self.ip {
            keys.push((format!("ip:{ip}"), true));
        }
        if let Some(s) = &self.subject {
            keys.push((format!("sub:{s}"), false));
        }
        keys
    }
}

/// An open session's place in the per-client counts; released on drop.
#[derive(Debug)]
pub(super) struct Slot {
    limits: Arc<Limits>,
    keys: Vec<String>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        for key in &self.keys {
            let empty = match self.limits.open.get_mut(key) {
                Some(mut n) => {
                    *n = n.saturating_sub(1);
                    *n == 0
                }
                None => false,
            };
            if empty {
                self.limits.open.remove_if(key, |_, n| *n == 0);
            }
        }
    }
}

impl Limits {
    /// At most `per_ip` sessions per address and `per_subject` per subject
    /// (each at least 1), and `rate` subscribes per second per client.
    pub(super) fn new(per_ip: usize, per_subject: usize, rate: u32) -> Arc<Self> {
        Arc::new(Self {
            per_ip: per_ip.max(1),
            per_subject: per_subject.max(1),
            rate,
            open: DashMap::new(),
            buckets: DashMap::new(),
        })
    }

    /// Counts a new session of `client`, or says which limit it reached.
    pub(super) fn admit(self: &Arc<Self>, client: &Client) -> Result<Slot, String> {
        let mut taken = Vec::new();
        for (key, is_ip) in client.keys() {
            let limit = if is_ip { self.per_ip } else { self.per_subject };
            let mut n = self.open.entry(key.clone()).or_insert(0);
            if *n >= limit {
                drop(n);
                // Give back what was taken so far.
                drop(Slot {
                    limits: self.clone(),
                    keys: taken,
                });
                let who = if is_ip { "address" } else { "token" };
                return Err(format!("at most {limit} open sessions per {who}"));
            }
            *n += 1;
            taken.push(key);
        }
        Ok(Slot {
            limits: self.clone(),
            keys: taken,
        })
    }

    /// Takes one subscribe operation from each of the client's buckets.
    pub(super) fn allow_subscribe(&self, client: &Client) -> bool {
        let mut allowed = true;
        for (key, _) in client.keys() {
            if !self
                .buckets
                .entry(key)
                .or_insert_with(|| Bucket::new(self.rate))
                .take()
            {
                allowed = false;
            }
        }
        if self.buckets.len() > 100_000 {
            // Full buckets carry no state worth keeping.
            let rate = f64::from(self.rate.max(1));
            self.buckets.retain(|_, b| b.tokens < rate);
        }
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_counted_per_address_and_subject() {
        let limits = Limits::new(2, 3, 5);
        let ip = |n: u8| Some(IpAddr::from([10, 0, 0, n]));
        let alice = |n| Client {
            ip: ip(n),
            subject: Some("alice".into()),
        };
        let a1 = limits.admit(&alice(1)).unwrap();
        let _a2 = limits.admit(&alice(1)).unwrap();
        assert_eq!(
            limits.admit(&alice(1)).err().unwrap(),
            "at most 2 open sessions per address"
        );
        let _a3 = limits.admit(&alice(2)).unwrap();
        assert_eq!(
            limits.admit(&alice(3)).err().unwrap(),
            "at most 3 open sessions per token"
        );
        // The refused attempt took nothing: address 3 is free.
        assert_eq!(limits.open.get("ip:10.0.0.3").map(|n| *n), None);
        drop(a1);
        assert!(limits.admit(&alice(3)).is_ok());
        // A client without address or subject (a test call) is not counted.
        let anonymous = Client::default();
        let held: Vec<Slot> = (0..10).map(|_| limits.admit(&anonymous).unwrap()).collect();
        assert_eq!(held.len(), 10);
    }

    #[test]
    fn subscribes_are_rate_limited_per_client() {
        let limits = Limits::new(10, 10, 3);
        let c = Client {
            ip: Some(IpAddr::from([127, 0, 0, 1])),
            subject: None,
        };
        let allowed = (0..10).filter(|_| limits.allow_subscribe(&c)).count();
        assert_eq!(allowed, 3);
    }
}
