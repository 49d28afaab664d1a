//! When a member's pods are wanted under `podWatch.onDemand` (`hub's
//! demand ──▶ [last viewed, linger] ──▶ sources' pod and event watches`):
//! while some client's subscription reaches its apps, and for the linger
//! after the last one went. Pure: the caller reads the demand and the clock.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// How often the demand is looked at.
pub(super) const TICK: Duration = Duration::from_secs(1);

/// When each member's apps were last looked at.
#[derive(Debug, Default)]
pub(super) struct LastViewed {
    at: HashMap<String, Instant>,
}

impl LastViewed {
    /// Whether `member`'s pods are wanted at `now`: looked at now, or less
    /// than `linger` ago.
    pub(super) fn wanted(
        &mut self,
        member: &str,
        looked_at: bool,
        now: Instant,
        linger: Duration,
    ) -> bool {
        if looked_at {
            self.at.insert(member.to_string(), now);
            return true;
        }
        self.at
            .get(member)
            .is_some_and(|last| now.duration_since(*last) < linger)
    }

    /// Forgets the members `running` no longer names.
    pub(super) fn keep(&mut self, running: impl Fn(&str) -> bool) {
        self.at.retain(|m, _| running(m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wanted_while_looked_at_and_for_the_linger_after() {
        let start = Instant::now();
        let linger = Duration::from_secs(300);
        let mut viewed = LastViewed::default();
        // (seconds after start, looked at now, wanted)
        let steps = [
            (0, false, false),
            (1, true, true),
            (2, true, true),
            (100, false, true),
            (301, false, true),
            (302, false, false),
            (400, true, true),
            (699, false, true),
            (700, false, false),
        ];
        for (s, looked_at, want) in steps {
            let now = start + Duration::from_secs(s);
            assert_eq!(viewed.wanted("a", looked_at, now, linger), want, "at {s} s");
        }
        assert!(!viewed.wanted("b", false, start, linger), "never looked at");
        viewed.keep(|m| m != "a");
        let later = start + Duration::from_secs(701);
        viewed.wanted("a", true, later, linger);
        viewed.keep(|m| m != "a");
        assert!(
            !viewed.wanted("a", false, later, linger),
            "a member gone is forgotten"
        );
    }
}
