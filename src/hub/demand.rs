//! What clients are looking at (`transports' subscriptions ──▶ [demand]
//! ──▶ pipeline: on-demand pod watches`): the patterns of the subscriptions
//! clients hold, counted, without the gateway's own observers (summaries,
//! Karpor's writer, the relay); with a stream of changes, also the patterns
//! the other replicas' clients hold, as those replicas last reported them
//! (`other replica's demand ──[relay]──▶ [demand]`). With
//! `podWatch.onDemand` a member's pods and events are watched while some
//! pattern here reaches its apps (docs/STATUS.md "Pods on demand").

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::pattern::Pattern;

/// The patterns clients' subscriptions hold, each with how many hold it,
/// and the other replicas' reports.
#[derive(Debug, Default)]
pub struct Demand {
    patterns: Mutex<HashMap<Pattern, usize>>,
    remote: Mutex<HashMap<String, Reported>>,
}

/// The most other replicas whose reports are held at once (a bound on
/// memory, far above any real number of replicas).
pub const MAX_REPORTING: usize = 256;

/// Another replica's patterns, believed until `until`.
#[derive(Debug)]
struct Reported {
    patterns: Vec<Pattern>,
    until: Instant,
}

/// Holds its patterns in a [`Demand`] until dropped.
#[derive(Debug)]
pub struct DemandGuard {
    demand: Arc<Demand>,
    patterns: Vec<Pattern>,
}

impl Demand {
    /// Counts `patterns` until the guard is dropped.
    pub fn hold(self: &Arc<Self>, patterns: &[Pattern]) -> DemandGuard {
        let mut held = self.patterns.lock();
        for p in patterns {
            *held.entry(p.clone()).or_default() += 1;
        }
        DemandGuard {
            demand: self.clone(),
            patterns: patterns.to_vec(),
        }
    }

    /// Whether some pattern held here, or reported by another replica and
    /// still believed at `now`, satisfies `wanted`.
    pub fn any(&self, now: Instant, wanted: impl Fn(&Pattern) -> bool) -> bool {
        if self.patterns.lock().keys().any(&wanted) {
            return true;
        }
        let remote = self.remote.lock();
        remote
            .values()
            .any(|r| r.until > now && r.patterns.iter().any(&wanted))
    }

    /// The patterns this process's clients hold (not the other
    /// replicas'), each once: what this replica reports.
    pub fn held(&self) -> Vec<Pattern> {
        self.patterns.lock().keys().cloned().collect()
    }

    /// Replica `replica`'s clients hold `patterns` (its latest report at
    /// `now`, replacing the one before), believed until `until`; none:
    /// forgotten. Reports no longer believed at `now` go first. False (and
    /// not kept) when [`MAX_REPORTING`] other replicas' reports are believed.
    pub fn reported(
        &self,
        replica: &str,
        patterns: Vec<Pattern>,
        now: Instant,
        until: Instant,
    ) -> bool {
        let mut remote = self.remote.lock();
        remote.retain(|_, r| r.until > now);
        if patterns.is_empty() {
            remote.remove(replica);
            return true;
        }
        if remote.len() >= MAX_REPORTING && !remote.contains_key(replica) {
            return false;
        }
        remote.insert(replica.to_string(), Reported { patterns, until });
        true
    }
}

impl Drop for DemandGuard {
    fn drop(&mut self) {
        let mut held = self.demand.patterns.lock();
        for p in &self.patterns {
            if let Some(n) = held.get_mut(p) {
                *n -= 1;
                if *n == 0 {
                    held.remove(p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_held_while_a_guard_lives() {
        let demand = Arc::new(Demand::default());
        let p = |raw: &str| Pattern::parse(raw).unwrap();
        let prod = |q: &Pattern| q.reaches_apps_of("prod");
        let a = demand.hold(&[p("apps/prod/**")]);
        let b = demand.hold(&[p("apps/prod/**"), p("clusters/*")]);
        let now = Instant::now();
        assert!(demand.any(now, prod));
        let mut held: Vec<String> = demand.held().iter().map(Pattern::to_string).collect();
        held.sort();
        assert_eq!(held, ["apps/prod/**", "clusters/*"]);
        drop(a);
        assert!(demand.any(now, prod), "still held by the second");
        drop(b);
        assert!(!demand.any(now, |_| true), "nothing held");
        assert!(demand.held().is_empty());
    }

    #[test]
    fn another_replicas_patterns_count_until_their_report_expires_or_is_replaced() {
        let demand = Arc::new(Demand::default());
        let p = |raw: &str| Pattern::parse(raw).unwrap();
        let apps_of = |m: &'static str| move |q: &Pattern| q.reaches_apps_of(m);
        let now = Instant::now();
        let later = |s: u64| now + std::time::Duration::from_secs(s);
        assert!(demand.reported("r2", vec![p("apps/prod/**")], now, later(15)));
        assert!(demand.reported("r3", vec![p("apps/dev/shop/*")], now, later(5)));
        // (seconds after now, prod reached, dev reached)
        for (s, prod, dev) in [
            (0, true, true),
            (4, true, true),
            (5, true, false),
            (15, false, false),
        ] {
            assert_eq!(demand.any(later(s), apps_of("prod")), prod, "prod at {s} s");
            assert_eq!(demand.any(later(s), apps_of("dev")), dev, "dev at {s} s");
        }
        assert!(
            demand.held().is_empty(),
            "reports are not this replica's own"
        );
        // A newer report replaces the older; an empty one forgets it.
        demand.reported("r2", vec![p("apps/dev/**")], later(16), later(30));
        assert!(!demand.any(later(16), apps_of("prod")));
        assert!(demand.any(later(16), apps_of("dev")));
        demand.reported("r2", Vec::new(), later(16), later(30));
        assert!(!demand.any(later(16), |_| true));
        assert!(
            demand.remote.lock().is_empty(),
            "r3's expired report went too"
        );
    }

    #[test]
    fn reports_of_at_most_so_many_replicas_are_held() {
        let demand = Demand::default();
        let all = || vec![Pattern::parse("**").unwrap()];
        let now = Instant::now();
        let until = now + std::time::Duration::from_secs(15);
        for i in 0..MAX_REPORTING {
            assert!(demand.reported(&format!("r{i}"), all(), now, until));
        }
        assert!(!demand.reported("one-more", all(), now, until));
        assert!(
            demand.reported("r0", all(), now, until),
            "a known one is replaced"
        );
        // Once those are no longer believed, they make room.
        assert!(demand.reported("one-more", all(), until, until + (until - now)));
        assert_eq!(demand.remote.lock().len(), 1);
    }
}
