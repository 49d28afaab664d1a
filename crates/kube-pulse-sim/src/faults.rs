//! Fault injection and request accounting for a simulated cluster.
//!
//! Faults are one value behind a `watch` channel: the request middleware, the
//! accept loop and open watch streams all react to changes at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// The faults in force. The default is a healthy cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Faults {
    /// Stop listening: new connections are refused and open ones are cut.
    pub refuse: bool,
    /// Accept requests but never answer them; open watches go silent.
    pub stall: bool,
    /// Watch streams of these resources (`apps/deployments`, `core/pods`:
    /// group, or `core`, and plural) go silent, bookmarks included, while
    /// their connections stay open and everything else answers: a watch
    /// stalled in the apiserver or a proxy.
    pub silent_watches: Vec<String>,
    /// Delay added before every API response, in milliseconds.
    pub latency_ms: u64,
    /// Answer every API request with this status (401, 403, 429, 500, 503).
    pub status: Option<u16>,
    /// Limit `status` to paths that start with this prefix (e.g. `/apis/apps`).
    pub status_path_prefix: Option<String>,
    /// Make `/readyz` (and `/healthz`) fail while the API keeps answering.
    pub not_ready: bool,
    /// Seconds the apiserver's clock (its `Date` header) is ahead (or, negative, behind).
    pub clock_skew_seconds: i64,
}

impl Faults {
    /// Rejects values the simulator cannot act on.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(code) = self.status
            && !matches!(
                code,
                401 | 403 | 404 | 409 | 410 | 429 | 500 | 502 | 503 | 504
            )
        {
            return Err(format!(
                "status {code} is not an injectable error; use one of 401, 403, 404, 409, 410, 429, 500, 502, 503, 504"
            ));
        }
        if self.latency_ms > 600_000 {
            return Err("latencyMs must be at most 600000".into());
        }
        if self.clock_skew_seconds.abs() > 10 * 365 * 86_400 {
            return Err("clockSkewSeconds must be within ten years".into());
        }
        Ok(())
    }
}

/// Counts of the requests a cluster served, per resource and verb.
#[derive(Debug, Default)]
pub struct Stats {
    counts: Mutex<BTreeMap<String, BTreeMap<&'static str, u64>>>,
    open_watches: AtomicUsize,
}

/// A snapshot of [`Stats`].
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatsSnapshot {
    /// Resource (`"apps/deployments"`, `"core/pods"`) → verb → count.
    pub requests: BTreeMap<String, BTreeMap<String, u64>>,
    pub open_watches: usize,
    pub resource_version: u64,
}

impl StatsSnapshot {
    /// Requests of one verb for one resource (`"apps/deployments"`, `"core/namespaces"`).
    pub fn count(&self, resource: &str, verb: &str) -> u64 {
        self.requests
            .get(resource)
            .and_then(|v| v.get(verb))
            .copied()
            .unwrap_or(0)
    }

    /// Requests of one verb over all resources.
    pub fn total(&self, verb: &str) -> u64 {
        self.requests.values().filter_map(|v| v.get(verb)).sum()
    }
}

/// Marks one open watch for as long as it lives.
#[derive(Debug)]
pub struct WatchGuard<'a>(&'a Stats);

impl Drop for WatchGuard<'_> {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Stats {
    pub fn record(&self, resource: String, verb: &'static str) {
        *self
            .counts
            .lock()
            .entry(resource)
            .or_default()
            .entry(verb)
            .or_default() += 1;
    }

    pub fn watch_opened(&self) -> WatchGuard<'_> {
        self.open_watches.fetch_add(1, Ordering::Relaxed);
        WatchGuard(self)
    }

    pub fn snapshot(&self, resource_version: u64) -> StatsSnapshot {
        let requests = self
            .counts
            .lock()
            .iter()
            .map(|(r, verbs)| {
                (
                    r.clone(),
                    verbs.iter().map(|(v, n)| (v.to_string(), *n)).collect(),
                )
            })
            .collect();
        StatsSnapshot {
            requests,
            open_watches: self.open_watches.load(Ordering::Relaxed),
            resource_version,
        }
    }

    pub fn reset(&self) {
        self.counts.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_validate() {
        let f: Faults = serde_json::from_str(r#"{"status": 503, "latencyMs": 20}"#).unwrap();
        assert_eq!(f.status, Some(503));
        assert!(f.validate().is_ok());
        assert!(serde_json::from_str::<Faults>(r#"{"stal": true}"#).is_err());
        let bad = Faults {
            status: Some(200),
            ..Default::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn stats_count_and_track_watches() {
        let stats = Stats::default();
        stats.record("apps/deployments".into(), "list");
        stats.record("apps/deployments".into(), "list");
        stats.record("core/pods".into(), "watch");
        let guard = stats.watch_opened();
        let snap = stats.snapshot(7);
        assert_eq!(snap.count("apps/deployments", "list"), 2);
        assert_eq!(snap.total("watch"), 1);
        assert_eq!(snap.open_watches, 1);
        drop(guard);
        assert_eq!(stats.snapshot(7).open_watches, 0);
    }
}
