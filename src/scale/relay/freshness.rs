//! How current the members other replicas run are (`owner's freshness
//! ──[asof/{replica} on the stream]──▶ every other replica's freshness ──▶
//! heartbeats' asOf`). Each replica publishes every [`EVERY`] when each
//! member it runs was last known current, as a signed envelope of the
//! topic `asof/{replica}`. That topic names no member, so a replica skips
//! it as a document (as replicas without this did) and reads it here
//! instead. docs/SCALE-OUT.md, "asOf across replicas".

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::publish::Shared;
use crate::hub::Freshness;
use crate::scale::subject::Envelope;

/// How often a replica tells the others.
pub(super) const EVERY: Duration = Duration::from_secs(5);

/// The topic prefix of the reports.
const PREFIX: &str = "asof/";

/// Replica `replica`'s report: `{member: time}` for the members it runs
/// (`runs`) that were ever current.
pub(super) fn report(replica: &str, rev: u64, freshness: &Freshness, runs: &[String]) -> Envelope {
    let members: Map<String, Value> = runs
        .iter()
        .filter_map(|m| {
            let at = freshness.of(m)?;
            Some((m.clone(), crate::status::time::millis(&at).into()))
        })
        .collect();
    Envelope {
        topic: format!("{PREFIX}{replica}"),
        rev,
        replica: replica.to_string(),
        doc: Some(Value::Object(members)),
    }
}

/// Whether `envelope` is a report; another replica's marks `freshness` for
/// the members `takes` accepts (members of this gateway that this replica
/// does not run: its own engine knows those).
pub(super) fn take(
    envelope: &Envelope,
    me: &str,
    takes: impl Fn(&str) -> bool,
    freshness: &Freshness,
) -> bool {
    if !envelope.topic.starts_with(PREFIX) {
        return false;
    }
    if envelope.replica == me {
        return true;
    }
    let Some(Value::Object(members)) = &envelope.doc else {
        return true;
    };
    for (member, at) in members {
        let at = at.as_str().and_then(|s| s.parse::<DateTime<Utc>>().ok());
        if let Some(at) = at.filter(|_| takes(member)) {
            freshness.mark(member, at);
        }
    }
    true
}

/// Publishes this replica's report every [`EVERY`] until `stop`.
pub(super) async fn share(shared: Arc<Shared>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rev = 0;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let runs = shared.running.names();
        if runs.is_empty() {
            continue;
        }
        rev += 1;
        let envelope = report(&shared.replica, rev, shared.hub.freshness(), &runs);
        // A report lost is made again at the next tick.
        shared.send(&envelope).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_report_carries_the_members_run_and_another_replica_takes_it() {
        let theirs = Freshness::default();
        theirs.mark("a", at("2026-12-05T10:00:01Z"));
        theirs.mark("b", at("2026-12-05T10:00:02Z"));
        let runs = ["a".to_string(), "never".to_string()];
        let envelope = report("r1", 7, &theirs, &runs);
        assert_eq!(envelope.topic, "asof/r1");
        assert_eq!(
            envelope.doc,
            Some(serde_json::json!({"a": "2026-12-05T10:00:01.000Z"})),
            "only members it runs, and only those ever current"
        );
        let mine = Freshness::default();
        // (replica reading, what it takes, a's entry after)
        let cases = [
            ("r1", true, None),
            ("r2", false, None),
            ("r2", true, Some(at("2026-12-05T10:00:01Z"))),
        ];
        for (me, takes, want) in cases {
            let mine = Freshness::default();
            assert!(take(&envelope, me, |_| takes, &mine));
            assert_eq!(mine.of("a"), want, "{me} takes {takes}");
        }
        let document = Envelope {
            topic: "clusters/a".into(),
            ..envelope
        };
        assert!(
            !take(&document, "r2", |_| true, &mine),
            "a document is no report"
        );
    }
}
