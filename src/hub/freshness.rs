//! How current each member's documents are (`engine ──▶ [freshness] ──▶
//! transports' heartbeats`): per member, the time its source was last
//! known current — a pulled member's last successful probe, a push
//! member's last agent heartbeat. Heartbeats carry it as `asOf`
//! (docs/PROTOCOL.md "Heartbeats and asOf"), so a UI can grey out data
//! that is old while its socket is live. A member never known current has
//! no entry; a member lost keeps its last one, which then stops moving.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use parking_lot::RwLock;

use super::pattern::Pattern;

/// Per member, when its source was last known current.
#[derive(Debug, Default)]
pub struct Freshness {
    members: RwLock<HashMap<String, DateTime<Utc>>>,
}

impl Freshness {
    /// `member` was current at `at` (an older time than the one held is
    /// ignored: reports may arrive out of order).
    pub fn mark(&self, member: &str, at: DateTime<Utc>) {
        let mut members = self.members.write();
        match members.get_mut(member) {
            Some(held) if *held >= at => {}
            Some(held) => *held = at,
            None => {
                members.insert(member.to_string(), at);
            }
        }
    }

    /// The member left: its entry goes.
    pub fn forget(&self, member: &str) {
        self.members.write().remove(member);
    }

    /// Keeps the entries of the members `keep` names.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.members.write().retain(|m, _| keep(m));
    }

    /// When `member` was last known current.
    pub fn of(&self, member: &str) -> Option<DateTime<Utc>> {
        self.members.read().get(member).copied()
    }

    /// The entries of the members some pattern reaches and `visible`
    /// allows, by name.
    pub fn reached(
        &self,
        patterns: &[Pattern],
        visible: impl Fn(&str) -> bool,
    ) -> BTreeMap<String, DateTime<Utc>> {
        self.members
            .read()
            .iter()
            .filter(|(m, _)| patterns.iter().any(|p| p.reaches_member(m)) && visible(m))
            .map(|(m, at)| (m.clone(), *at))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn keeps_the_latest_time_and_forgets_members_that_leave() {
        let f = Freshness::default();
        f.mark("prod", at("2026-12-05T10:00:05Z"));
        f.mark("prod", at("2026-12-05T10:00:01Z"));
        assert_eq!(f.of("prod"), Some(at("2026-12-05T10:00:05Z")));
        f.mark("prod", at("2026-12-05T10:00:09Z"));
        assert_eq!(f.of("prod"), Some(at("2026-12-05T10:00:09Z")));
        f.forget("prod");
        assert_eq!(f.of("prod"), None);
        f.mark("dev", at("2026-12-05T10:00:00Z"));
        f.mark("edge", at("2026-12-05T10:00:00Z"));
        f.retain(|m| m == "dev");
        assert_eq!((f.of("dev").is_some(), f.of("edge")), (true, None));
    }

    #[test]
    fn reports_the_members_a_subscription_reaches_and_may_see() {
        let f = Freshness::default();
        for m in ["dev", "prod", "edge"] {
            f.mark(m, at("2026-12-05T10:00:00Z"));
        }
        let names = |patterns: &[&str], visible: &dyn Fn(&str) -> bool| {
            let patterns: Vec<Pattern> = patterns
                .iter()
                .map(|p| Pattern::parse(p).unwrap())
                .collect();
            f.reached(&patterns, visible)
                .into_keys()
                .collect::<Vec<_>>()
        };
        let all = |_: &str| true;
        assert_eq!(names(&["apps/prod/shop/*"], &all), ["prod"]);
        assert_eq!(
            names(&["clusters/*", "tasks/*"], &all),
            ["dev", "edge", "prod"]
        );
        assert_eq!(
            names(&["clusters/dev", "apps/edge/**"], &all),
            ["dev", "edge"]
        );
        assert_eq!(names(&["clusters/gone"], &all), Vec::<String>::new());
        assert_eq!(
            names(&["clusters/*"], &|m: &str| m != "edge"),
            ["dev", "prod"]
        );
    }
}
