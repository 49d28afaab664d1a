//! Pods on demand across replicas (`replica's clients' demand
//! ──[demand/{replica} on the stream]──▶ every other replica's demand ──▶
//! the owner's pod and event watches`). With `podWatch.onDemand` a member's
//! pods are watched while some client's subscription reaches its apps; a
//! client may be on any replica, and only the member's owner watches it.
//! So each replica reports the patterns its clients hold that reach apps,
//! as a signed envelope of the topic `demand/{replica}`: at once when they
//! change (looked at every [`CHECK`]) and again every [`EVERY`]. Another
//! replica believes a report for [`BELIEVED`] after reading it, so the
//! demand of a replica that stopped or lost NATS ends then (and the linger
//! starts). Reports are taken only once the consumer follows the stream,
//! not from its first pass over what the stream held, and only when
//! published less than [`STALE`] ago (old reports of replicas long gone).
//! That topic names no member: replicas without this skip it.
//! docs/SCALE-OUT.md, "Pods on demand across replicas".

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::publish::Shared;
use crate::hub::{Demand, Pattern};
use crate::scale::subject::Envelope;

/// How often a replica looks whether its clients' patterns changed.
pub(super) const CHECK: Duration = Duration::from_secs(1);
/// How often a replica reports them when they did not change.
pub(super) const EVERY: Duration = Duration::from_secs(5);
/// How long a report is believed: three periods, so one or two lost
/// messages end no demand.
pub(super) const BELIEVED: Duration = Duration::from_secs(15);
/// A report published longer ago than this (the broker's clock against
/// this replica's, so with room for their difference) is not taken: read
/// late, after a stall, or the last of a replica long gone.
pub(super) const STALE: Duration = Duration::from_secs(60);
/// The most patterns a report lists; a replica whose clients hold more
/// reports `**` instead (every member's apps: more watches, never fewer).
pub(super) const MAX_PATTERNS: usize = 1_000;

/// The topic prefix of the reports.
const PREFIX: &str = "demand/";

/// What a replica reports of `held` (its clients' patterns): those that
/// reach some member's apps, as written, at most [`MAX_PATTERNS`].
pub(super) fn reaching_apps(held: &[Pattern]) -> BTreeSet<String> {
    let patterns: BTreeSet<String> = held
        .iter()
        .filter(|p| p.reaches_some_apps())
        .map(Pattern::to_string)
        .collect();
    if patterns.len() > MAX_PATTERNS {
        return BTreeSet::from(["**".to_string()]);
    }
    patterns
}

/// Replica `replica`'s report of `patterns` ([`reaching_apps`]).
pub(super) fn report(replica: &str, rev: u64, patterns: &BTreeSet<String>) -> Envelope {
    Envelope {
        topic: format!("{PREFIX}{replica}"),
        rev,
        replica: replica.to_string(),
        doc: Some(json!({ "patterns": patterns })),
    }
}

/// Whether `envelope` is a report. Another replica's, read while the
/// consumer follows the stream (`read.following`) and published (by the
/// broker's clock) less than [`STALE`] before `read.wall`, replaces what
/// `demand` held of that replica, believed until `now` + [`BELIEVED`].
/// Patterns that do not parse are left out.
pub(super) fn take(
    envelope: &Envelope,
    me: &str,
    read: ReadAt,
    demand: &Demand,
    now: Instant,
) -> bool {
    if !envelope.topic.starts_with(PREFIX) {
        return false;
    }
    let stale = read
        .published
        .is_some_and(|at| read.wall - at > chrono::TimeDelta::from_std(STALE).unwrap_or_default());
    if envelope.replica == me || !read.following || stale {
        return true;
    }
    let patterns = match &envelope.doc {
        Some(doc) => doc["patterns"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_str)
            .take(MAX_PATTERNS)
            .filter_map(|p| Pattern::parse(p).ok())
            .collect(),
        None => Vec::new(),
    };
    if !demand.reported(&envelope.replica, patterns, now, now + BELIEVED) {
        tracing::warn!(replica = %envelope.replica, max = crate::hub::MAX_REPORTING, "a replica's report of what its clients look at was not kept: too many replicas report");
    }
    true
}

/// When a report was read, for [`take`].
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadAt {
    /// The consumer follows the stream: past its first pass.
    pub(super) following: bool,
    /// The broker's time of the message, when it says.
    pub(super) published: Option<DateTime<Utc>>,
    /// This replica's clock then.
    pub(super) wall: DateTime<Utc>,
}

/// Reports this replica's clients' patterns that reach apps: when they
/// change, and every [`EVERY`] while there are some (and once more when
/// the last goes), until `stop`.
pub(super) async fn share(shared: Arc<Shared>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rev = 0;
    let mut last: Option<(BTreeSet<String>, Instant)> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let held = reaching_apps(&shared.served.demand().held());
        let now = Instant::now();
        let due = match &last {
            None => !held.is_empty(),
            Some((before, at)) => {
                *before != held || (!held.is_empty() && now.duration_since(*at) >= EVERY)
            }
        };
        if !due {
            continue;
        }
        rev += 1;
        let envelope = report(&shared.replica, rev, &held);
        // A report lost is made again at the next check.
        if shared.send(&envelope).await {
            last = Some((held, now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(patterns: &[&str]) -> BTreeSet<String> {
        let parsed: Vec<Pattern> = patterns
            .iter()
            .map(|p| Pattern::parse(p).unwrap())
            .collect();
        reaching_apps(&parsed)
    }

    #[test]
    fn a_report_lists_the_patterns_that_reach_apps() {
        let envelope = report(
            "r1",
            3,
            &held(&[
                "apps/prod/**",
                "clusters/*",
                "**",
                "summary/apps/prod/*",
                "*/dev",
            ]),
        );
        assert_eq!(envelope.topic, "demand/r1");
        assert_eq!(envelope.rev, 3);
        assert_eq!(
            envelope.doc,
            Some(json!({"patterns": ["**", "*/dev", "apps/prod/**"]})),
            "cluster and summary patterns reach no app"
        );
        let many: Vec<String> = (0..=MAX_PATTERNS)
            .map(|i| format!("apps/m{i}/**"))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            report("r1", 4, &held(&many)).doc,
            Some(json!({"patterns": ["**"]})),
            "too many: every member's apps"
        );
    }

    #[test]
    fn another_replica_takes_a_recent_report_read_while_following() {
        let envelope = report("r1", 1, &held(&["apps/prod/**"]));
        let now = Instant::now();
        let wall = Utc::now();
        let at = |following: bool, seconds_ago: i64| ReadAt {
            following,
            published: Some(wall - chrono::TimeDelta::seconds(seconds_ago)),
            wall,
        };
        let prod = |p: &Pattern| p.reaches_apps_of("prod");
        // (replica reading, when and how read, prod wanted after)
        let cases = [
            ("r1", at(true, 0), false),
            ("r2", at(false, 0), false),
            ("r2", at(true, 0), true),
            ("r2", at(true, 59), true),
            ("r2", at(true, 61), false),
            (
                "r2",
                ReadAt {
                    published: None,
                    ..at(true, 0)
                },
                true,
            ),
        ];
        for (me, read, want) in cases {
            let demand = Demand::default();
            assert!(take(&envelope, me, read, &demand, now));
            assert_eq!(demand.any(now, prod), want, "{me}, {read:?}");
            assert!(
                !demand.any(now + BELIEVED, prod),
                "{me}: believed for {BELIEVED:?}"
            );
        }
        // A later report without patterns ends it at once.
        let demand = Demand::default();
        take(&envelope, "r2", at(true, 0), &demand, now);
        take(
            &report("r1", 2, &held(&[])),
            "r2",
            at(true, 0),
            &demand,
            now,
        );
        assert!(!demand.any(now, prod));
        // Nonsense in a (signed) report is left out, not believed.
        let odd = Envelope {
            doc: Some(json!({"patterns": ["apps//x", 7, "apps/prod/*"]})),
            ..envelope.clone()
        };
        take(&odd, "r2", at(true, 0), &demand, now);
        assert!(demand.any(now, prod));
        assert!(!demand.any(now, |p| p.reaches_apps_of("dev")));
        let document = Envelope {
            topic: "clusters/prod".into(),
            ..envelope
        };
        assert!(
            !take(&document, "r2", at(true, 0), &demand, now),
            "a document is no report"
        );
    }
}
