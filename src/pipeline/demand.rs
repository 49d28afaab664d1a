//! When a member's pods are wanted under `podWatch.onDemand` (`hub's
//! demand ──▶ [last viewed, linger] ──▶ sources' pod and event watches`,
//! or `──▶ a push member's agent`): while some client's subscription
//! reaches its apps, and for the linger after the last one went; and when
//! a push member's agent is told so again. Pure: the caller reads the
//! demand and the clock.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// How often the demand is looked at.
pub(super) const TICK: Duration = Duration::from_secs(1);
/// How often a push member's agent is told the same again (an agent that
/// started meanwhile learns it within this).
pub(super) const RETELL: Duration = Duration::from_secs(10);
/// How long after a push member is linked here its agent is not told that
/// its pods are unwanted: long enough to hear every other replica's
/// report of what its clients look at (they are believed for 15 s).
pub(super) const QUIET: Duration = Duration::from_secs(15);

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

/// What each push member's agent was last told, and when; since when each
/// is linked here.
#[derive(Debug, Default)]
pub(super) struct Told {
    last: HashMap<String, Link>,
}

#[derive(Debug)]
struct Link {
    since: Instant,
    said: Option<(bool, Instant)>,
}

impl Told {
    /// Whether `member`'s agent is to be told `wanted` at `now`: never
    /// told, told otherwise, or told [`RETELL`] ago or more; but not
    /// "unwanted" in the first [`QUIET`] after the member was linked here,
    /// while this replica does not know yet what every replica's clients
    /// look at (the agent goes on as it was). If so, it counts as told.
    pub(super) fn due(&mut self, member: &str, wanted: bool, now: Instant) -> bool {
        let link = self.last.entry(member.to_string()).or_insert(Link {
            since: now,
            said: None,
        });
        if !wanted && now.duration_since(link.since) < QUIET {
            return false;
        }
        let due = link
            .said
            .is_none_or(|(said, at)| said != wanted || now.duration_since(at) >= RETELL);
        if due {
            link.said = Some((wanted, now));
        }
        due
    }

    /// Forgets the members `linked` no longer names.
    pub(super) fn keep(&mut self, linked: impl Fn(&str) -> bool) {
        self.last.retain(|m, _| linked(m));
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

    #[test]
    fn an_agent_is_told_at_once_on_a_change_and_again_every_period() {
        let start = Instant::now();
        let mut told = Told::default();
        // (seconds after start, wanted, told now)
        let steps = [
            // Just linked: "unwanted" is not said for the first 15 s.
            (0, false, false),
            (14, false, false),
            (15, false, true),
            (16, false, false),
            (24, false, false),
            (25, false, true),
            (26, true, true),
            (27, true, false),
            (28, false, true),
            (37, false, false),
            (38, false, true),
        ];
        for (s, wanted, want) in steps {
            let now = start + Duration::from_secs(s);
            assert_eq!(told.due("a", wanted, now), want, "at {s} s");
        }
        // "Wanted" is said at once, even just linked.
        assert!(told.due("b", true, start));
        told.keep(|m| m != "a");
        let later = start + Duration::from_secs(40);
        assert!(
            !told.due("a", false, later),
            "a member gone and back is linked anew"
        );
        assert!(told.due("a", true, later));
    }
}
