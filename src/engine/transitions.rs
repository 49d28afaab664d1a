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

use crate::status::{Lifecycle, Transition};

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

/// Logs every transition of `lifecycle` numbered after `after`.
pub(super) fn log_after<P>(
    subject: &Subject<'_>,
    topic: &str,
    lifecycle: &Lifecycle<P>,
    after: u64,
) {
    for t in lifecycle.history.iter().filter(|t| t.number > after) {
        log(subject, topic, t);
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
        let lines = captured(|| {
            log_after(
                &subject,
                "clusters/dev/sync/apps/v1/deployments",
                &lifecycle,
                seen,
            );
            // Nothing new since the last transition: nothing logged.
            log_after(&subject, "t", &lifecycle, last(&lifecycle));
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
