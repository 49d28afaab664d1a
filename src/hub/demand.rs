//! What clients are looking at (`transports' subscriptions ──▶ [demand]
//! ──▶ pipeline: on-demand pod watches`): the patterns of the subscriptions
//! clients hold, counted, without the gateway's own observers (summaries,
//! Karpor's writer, the relay). With `podWatch.onDemand` a member's pods
//! and events are watched while some pattern here reaches its apps
//! (docs/STATUS.md "Pods on demand").

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::pattern::Pattern;

/// The patterns clients' subscriptions hold, each with how many hold it.
#[derive(Debug, Default)]
pub struct Demand {
    patterns: Mutex<HashMap<Pattern, usize>>,
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

    /// Whether some held pattern satisfies `wanted`.
    pub fn any(&self, wanted: impl Fn(&Pattern) -> bool) -> bool {
        self.patterns.lock().keys().any(wanted)
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
        assert!(demand.any(prod));
        drop(a);
        assert!(demand.any(prod), "still held by the second");
        drop(b);
        assert!(!demand.any(|_| true), "nothing held");
    }
}
