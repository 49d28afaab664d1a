//! What this replica knows of the Leases and what it should do about them,
//! with the time passed in (pure; the loop in [`super::ownership`] does the
//! requests).
//!
//! Expiry is judged by this replica's own monotonic clock, never by the
//! `renewTime` another host wrote: a Lease is expired when the same
//! `resourceVersion` has been seen for longer than its
//! `leaseDurationSeconds` since this replica first saw it. Clock skew
//! between hosts therefore cannot make a Lease look expired early.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::rendezvous::preferred;

/// One Lease as this replica last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    /// `spec.holderIdentity`; None when released (or never held).
    pub(crate) holder: Option<String>,
    /// `metadata.resourceVersion`; empty while the Lease does not exist.
    pub(crate) version: String,
    /// `spec.leaseDurationSeconds` (the holder's), or ours when unset.
    pub(crate) duration: Duration,
    /// When this replica first saw this version.
    pub(crate) since: Instant,
}

/// What a Lease means now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State<'a> {
    /// Held by this holder, renewed within its duration.
    Held(&'a str),
    /// Nobody holds it (released or never held) since `since`.
    Free,
    /// Its holder stopped renewing: unchanged for longer than its duration.
    Expired,
}

impl Seen {
    /// A Lease that does not exist (yet), noticed at `now`.
    pub(crate) fn absent(now: Instant, duration: Duration) -> Self {
        Self {
            holder: None,
            version: String::new(),
            duration,
            since: now,
        }
    }

    /// Its state at `now`.
    pub(crate) fn state(&self, now: Instant) -> State<'_> {
        match self.holder.as_deref() {
            None | Some("") => State::Free,
            Some(holder) if now < self.since + self.duration => State::Held(holder),
            Some(_) => State::Expired,
        }
    }

    /// How long it has been free or expired at `now` (zero while held).
    fn open_for(&self, now: Instant) -> Duration {
        match self.state(now) {
            State::Held(_) => Duration::ZERO,
            State::Free => now.saturating_duration_since(self.since),
            State::Expired => now.saturating_duration_since(self.since + self.duration),
        }
    }
}

/// Records a listed Lease: a new version restarts its clock, the same one keeps it.
pub(crate) fn observe(seen: &mut BTreeMap<String, Seen>, key: &str, listed: Seen) {
    match seen.get(key) {
        Some(old) if old.version == listed.version => {}
        _ => {
            seen.insert(key.to_string(), listed);
        }
    }
}

/// The live replicas at `now`: holders of their own replica Leases, and `me`.
pub(crate) fn live_replicas(
    replicas: &BTreeMap<String, Seen>,
    me: &str,
    now: Instant,
) -> BTreeSet<String> {
    let mut live: BTreeSet<String> = replicas
        .iter()
        .filter(|(id, seen)| seen.state(now) == State::Held(id.as_str()))
        .map(|(id, _)| id.clone())
        .collect();
    live.insert(me.to_string());
    live
}

/// What to do in one round.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Owned members whose Lease this replica may no longer count on (its
    /// renewals failed too long, or someone else holds it): stop them now,
    /// and do not write their Leases.
    pub(crate) drop: Vec<String>,
    /// Owned members to hand over (no longer desired, or another live
    /// replica should own them): stop them, then release the Lease.
    pub(crate) release: Vec<String>,
    /// Owned members to keep: renew the Lease.
    pub(crate) renew: Vec<String>,
    /// Members to take: the Lease is free or expired and this replica
    /// should own them (or nobody took them for a whole duration).
    pub(crate) acquire: Vec<String>,
}

/// Decides one round for replica `me` at `now`. `owned` maps each owned
/// member to the instant until which its last renewal lets this replica
/// run it; `leases` holds the member Leases as seen (absent ones too).
pub(crate) fn plan(
    me: &str,
    now: Instant,
    desired: &BTreeSet<String>,
    live: &BTreeSet<String>,
    leases: &BTreeMap<String, Seen>,
    owned: &BTreeMap<String, Instant>,
) -> Plan {
    let mut plan = Plan::default();
    for (member, valid_until) in owned {
        let taken = leases
            .get(member)
            .is_some_and(|seen| matches!(seen.state(now), State::Held(h) if h != me));
        if now >= *valid_until || taken {
            plan.drop.push(member.clone());
        } else if !desired.contains(member) || preferred(member, live).is_some_and(|p| p != me) {
            plan.release.push(member.clone());
        } else {
            plan.renew.push(member.clone());
        }
    }
    for member in desired.iter().filter(|m| !owned.contains_key(*m)) {
        let Some(seen) = leases.get(member) else {
            continue;
        };
        let open = !matches!(seen.state(now), State::Held(_));
        let mine = preferred(member, live).is_some_and(|p| p == me);
        // A member its preferred replica does not take (it sees other
        // replicas than we do) goes to whoever sees it open for a duration.
        if open && (mine || seen.open_for(now) >= seen.duration) {
            plan.acquire.push(member.clone());
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(3);

    fn seen(holder: Option<&str>, version: &str, since: Instant) -> Seen {
        Seen {
            holder: holder.map(str::to_string),
            version: version.into(),
            duration: D,
            since,
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_lease_is_held_until_unchanged_for_its_duration() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_millis(secs);
        // (holder, ms after first seen, state)
        let cases: &[(Option<&str>, u64, State<'_>)] = &[
            (Some("a"), 0, State::Held("a")),
            (Some("a"), 2_999, State::Held("a")),
            (Some("a"), 3_000, State::Expired),
            (None, 0, State::Free),
            (Some(""), 10_000, State::Free),
        ];
        for (holder, after, want) in cases {
            let lease = seen(*holder, "1", t0);
            assert_eq!(lease.state(s(*after)), *want, "{holder:?} after {after} ms");
        }
    }

    #[test]
    fn only_a_new_version_restarts_the_clock() {
        let t0 = Instant::now();
        let mut table = BTreeMap::new();
        observe(&mut table, "m", seen(Some("a"), "1", t0));
        observe(&mut table, "m", seen(Some("a"), "1", t0 + D));
        assert_eq!(
            table["m"].state(t0 + D),
            State::Expired,
            "same version: old clock"
        );
        observe(&mut table, "m", seen(Some("a"), "2", t0 + D));
        assert_eq!(table["m"].state(t0 + D), State::Held("a"), "renewed");
    }

    #[test]
    fn live_replicas_are_those_renewing_their_own_lease_and_me() {
        let t0 = Instant::now();
        let mut table = BTreeMap::new();
        table.insert("r1".to_string(), seen(Some("r1"), "1", t0));
        table.insert("r2".to_string(), seen(Some("r2"), "1", t0 - D));
        table.insert("r3".to_string(), seen(None, "1", t0));
        table.insert("r4".to_string(), seen(Some("r1"), "1", t0));
        assert_eq!(live_replicas(&table, "me", t0), set(&["me", "r1"]));
    }

    /// The member of `members` that `who` would own among `live`.
    fn one_preferring(who: &str, live: &BTreeSet<String>) -> String {
        (0..100)
            .map(|i| format!("m{i}"))
            .find(|m| preferred(m, live).is_some_and(|p| p == who))
            .unwrap()
    }

    #[test]
    fn rounds_drop_release_renew_and_acquire() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        let live = set(&["me", "other"]);
        let ours = one_preferring("me", &live);
        let theirs = one_preferring("other", &live);
        let desired = set(&[&ours, &theirs]);
        let plan_with = |leases: &[(&str, Seen)], owned: &[(&str, Instant)], now| {
            let leases = leases
                .iter()
                .map(|(m, s)| (m.to_string(), s.clone()))
                .collect();
            let owned = owned.iter().map(|(m, t)| (m.to_string(), *t)).collect();
            plan("me", now, &desired, &live, &leases, &owned)
        };
        let p = |drop: &[&str], release: &[&str], renew: &[&str], acquire: &[&str]| Plan {
            drop: drop.iter().map(|s| s.to_string()).collect(),
            release: release.iter().map(|s| s.to_string()).collect(),
            renew: renew.iter().map(|s| s.to_string()).collect(),
            acquire: acquire.iter().map(|s| s.to_string()).collect(),
        };
        let (o, t) = (ours.as_str(), theirs.as_str());
        let until = t0 + Duration::from_secs(2);
        // Ours is free: take it; theirs is free but not ours: leave it.
        assert_eq!(
            plan_with(
                &[(o, Seen::absent(t0, D)), (t, seen(None, "5", t0))],
                &[],
                later
            ),
            p(&[], &[], &[], &[o])
        );
        // Held by another and not expired: wait, even when ours.
        assert_eq!(
            plan_with(&[(o, seen(Some("other"), "5", t0))], &[], later),
            p(&[], &[], &[], &[])
        );
        // Expired: ours is taken.
        assert_eq!(
            plan_with(&[(o, seen(Some("dead"), "5", t0))], &[], t0 + D),
            p(&[], &[], &[], &[o])
        );
        // Theirs, open for a whole duration: taken anyway.
        assert_eq!(
            plan_with(&[(t, seen(None, "5", t0))], &[], t0 + D),
            p(&[], &[], &[], &[t])
        );
        // Owned and preferred: renew; owned but theirs: release.
        assert_eq!(
            plan_with(
                &[
                    (o, seen(Some("me"), "6", t0)),
                    (t, seen(Some("me"), "7", t0))
                ],
                &[(o, until), (t, until)],
                later
            ),
            p(&[], &[t], &[o], &[])
        );
        // Renewals failed until the deadline: drop without writing.
        assert_eq!(
            plan_with(&[(o, seen(Some("me"), "6", t0))], &[(o, until)], until),
            p(&[o], &[], &[], &[])
        );
        // Someone else holds what we think we own: drop at once.
        assert_eq!(
            plan_with(
                &[(o, seen(Some("other"), "9", later))],
                &[(o, until)],
                later
            ),
            p(&[o], &[], &[], &[])
        );
    }

    #[test]
    fn a_member_no_longer_desired_is_released() {
        let t0 = Instant::now();
        let owned = BTreeMap::from([("gone".to_string(), t0 + D)]);
        let got = plan(
            "me",
            t0,
            &BTreeSet::new(),
            &set(&["me"]),
            &BTreeMap::new(),
            &owned,
        );
        assert_eq!(got.release, ["gone"]);
    }
}
