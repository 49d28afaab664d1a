//! One info line per state transition, written by the engine as it
//! publishes a document (`engine ──doc──▶ hub`, the log beside): a log
//! search for `cluster dev` or `to=Unhealthy` finds every transition the
//! documents' bounded `history` may already have dropped. The status
//! machines stay pure; the engine compares transition numbers before and
//! after a step and logs the new ones.
//!
//! Fields (stable, docs/RUNBOOK.md "Logs"): `kind` (`cluster`, `sync`,
//! `app`), `topic`, `cluster`, `resource` (syncs), `namespace` and `app`
//! (apps), `from`, `to`, `reason`. The message reads
//! `cluster dev Healthy → Unhealthy (Disconnected)`.
//!
//! At most [`LINES_PER_SECOND`] such lines a second: beyond them (a fleet
//! of thousands of members starting, or a member's fault reaching all its
//! documents at once) transitions are counted, and one line with
//! `kind=transitions` sums up those of the second that were not logged
//! one by one (each stays in its document's `history` and `/api/v1/history`).

use std::time::{Duration, Instant};

use crate::status::{Lifecycle, Transition};

/// Transition lines a second, at most; the rest are summed up.
pub(super) const LINES_PER_SECOND: u32 = 200;
const WINDOW: Duration = Duration::from_secs(1);

/// What a document is about: the fields its transition lines carry.
pub(super) enum Subject<'a> {
    Cluster {
        cluster: &'a str,
    },
    Sync {
        cluster: &'a str,
        resource: &'a str,
    },
    App {
        cluster: &'a str,
        namespace: &'a str,
        app: &'a str,
    },
}

/// The number of the last transition recorded, 0 before any.
pub(super) fn last<P>(lifecycle: &Lifecycle<P>) -> u64 {
    lifecycle.history.back().map_or(0, |t| t.number)
}

/// The engine's transition lines and their budget.
#[derive(Debug, Default)]
pub(crate) struct TransitionLog {
    /// When the current second began (None before any line).
    since: Option<Instant>,
    /// Lines written in it.
    written: u32,
    /// Transitions of it not written one by one: clusters, syncs, apps.
    held: [u64; 3],
}

impl TransitionLog {
    /// Logs every transition of `lifecycle` numbered after `after`.
    pub(super) fn log_after<P>(
        &mut self,
        subject: &Subject<'_>,
        topic: &str,
        lifecycle: &Lifecycle<P>,
        after: u64,
    ) {
        for t in lifecycle.history.iter().filter(|t| t.number > after) {
            self.roll(Instant::now());
            if self.written < LINES_PER_SECOND {
                self.written += 1;
                log(subject, topic, t);
            } else {
                let kind = match subject {
                    Subject::Cluster { .. } => 0,
                    Subject::Sync { .. } => 1,
                    Subject::App { .. } => 2,
                };
                self.held[kind] += 1;
            }
        }
    }

    /// Sums up the last second when it is over (the engine calls this on
    /// its periodic tick too, so a burst's summary does not wait for the
    /// next transition).
    pub(super) fn roll(&mut self, now: Instant) {
        if self
            .since
            .is_some_and(|since| now.duration_since(since) < WINDOW)
        {
            return;
        }
        let [clusters, syncs, apps] = std::mem::take(&mut self.held);
        let held = clusters + syncs + apps;
        if held > 0 {
            tracing::info!(
                kind = "transitions",
                held,
                clusters,
                syncs,
                apps,
                "{held} more transitions in a second than {LINES_PER_SECOND} lines: {clusters} of clusters, {syncs} of syncs, {apps} of apps (each in its document's history)"
            );
        }
        self.since = Some(now);
        self.written = 0;
    }
}

fn log(subject: &Subject<'_>, topic: &str, t: &Transition) {
    let (from, to, reason) = (t.from.as_str(), t.to.as_str(), t.reason.as_str());
    match *subject {
        Subject::Cluster { cluster } => tracing::info!(
            kind = "cluster",
            topic,
            cluster,
            from,
            to,
            reason,
            "cluster {cluster} {from} → {to} ({reason})"
        ),
        Subject::Sync { cluster, resource } => tracing::info!(
            kind = "sync",
            topic,
            cluster,
            resource,
            from,
            to,
            reason,
            "sync {cluster} {resource} {from} → {to} ({reason})"
        ),
        Subject::App {
            cluster,
            namespace,
            app,
        } => tracing::info!(
            kind = "app",
            topic,
            cluster,
            namespace,
            app,
            from,
            to,
            reason,
            "app {cluster}/{namespace}/{app} {from} → {to} ({reason})"
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use chrono::{TimeZone, Utc};

    use super::*;

    /// Runs `f` with a JSON subscriber and returns the lines it wrote.
    fn captured(f: impl FnOnce()) -> Vec<serde_json::Value> {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_writer(move || Writer(writer.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    struct Writer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Writer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_burst_past_the_budget_is_summed_up_in_one_line() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut lifecycle = Lifecycle::new("Pending", "Started", "", now);
        let subject = Subject::Sync {
            cluster: "dev",
            resource: "apps/v1/deployments",
        };
        let mut log = TransitionLog::default();
        let burst = LINES_PER_SECOND + 30;
        let lines = captured(|| {
            for i in 0..burst {
                let before = last(&lifecycle);
                let to = if i % 2 == 0 { "Listing" } else { "Pending" };
                lifecycle.set(to, "Test", "", now);
                log.log_after(&subject, "t", &lifecycle, before);
            }
            // The second is over: its summary.
            log.roll(Instant::now() + WINDOW);
        });
        let one_by_one = lines.iter().filter(|l| l["kind"] == "sync").count();
        let summaries: Vec<_> = lines
            .iter()
            .filter(|l| l["kind"] == "transitions")
            .collect();
        assert_eq!(one_by_one, LINES_PER_SECOND as usize);
        assert_eq!(summaries.len(), 1, "{lines:#?}");
        assert_eq!(summaries[0]["syncs"], 30);
        assert_eq!(summaries[0]["held"], 30);
    }

    #[test]
    fn each_new_transition_is_one_line_with_its_fields() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut lifecycle = Lifecycle::new("Healthy", "Ready", "", now);
        lifecycle.set("Unhealthy", "Disconnected", "refused", now);
        let seen = last(&lifecycle);
        lifecycle.set("Unhealthy", "Timeout", "no answer", now);
        lifecycle.set("Unhealthy", "Timeout", "still no answer", now);
        lifecycle.set("Healthy", "Ready", "", now);
        let subject = Subject::Sync {
            cluster: "dev",
            resource: "apps/v1/deployments",
        };
        let mut log = TransitionLog::default();
        let lines = captured(|| {
            log.log_after(
                &subject,
                "clusters/dev/sync/apps/v1/deployments",
                &lifecycle,
                seen,
            );
            // Nothing new since the last transition: nothing logged.
            log.log_after(&subject, "t", &lifecycle, last(&lifecycle));
        });
        let summary: Vec<(&str, &str)> = lines
            .iter()
            .map(|l| (l["level"].as_str().unwrap(), l["message"].as_str().unwrap()))
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "INFO",
                    "sync dev apps/v1/deployments Unhealthy → Unhealthy (Timeout)"
                ),
                (
                    "INFO",
                    "sync dev apps/v1/deployments Unhealthy → Healthy (Ready)"
                ),
            ]
        );
        let first = &lines[0];
        for (field, value) in [
            ("kind", "sync"),
            ("topic", "clusters/dev/sync/apps/v1/deployments"),
            ("cluster", "dev"),
            ("resource", "apps/v1/deployments"),
            ("from", "Unhealthy"),
            ("to", "Unhealthy"),
            ("reason", "Timeout"),
        ] {
            assert_eq!(first[field], value, "{field} in {first}");
        }
    }
}
