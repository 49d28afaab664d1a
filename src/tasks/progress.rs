//! How far a built-in task has come, read from the app document the watches
//! keep current (`hub: apps/{c}/{ns}/{app} ──▶ [progress] ──▶ executor`).
//! Pure: a plan and the latest app document in, a verdict out. Progress is
//! measured in replicas and objects, never in time; the executor keeps it
//! monotonic and only success reaches 100.

use serde::{Deserialize, Serialize};

/// The part of an app document the rules read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AppView {
    pub(super) phase: String,
    /// Keyed by `Kind/name`, as in the document.
    #[serde(default)]
    pub(super) workloads: std::collections::BTreeMap<String, WorkloadState>,
}

/// One workload as the app document shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WorkloadState {
    pub(super) kind: String,
    pub(super) name: String,
    #[serde(default)]
    pub(super) generation: i64,
    #[serde(default)]
    pub(super) observed_generation: i64,
    pub(super) expected: i32,
    #[serde(default)]
    pub(super) replicas: i32,
    pub(super) ready: i32,
    pub(super) updated: i32,
    pub(super) health: String,
    #[serde(default)]
    pub(super) message: String,
    #[serde(default)]
    pub(super) images: Vec<String>,
}

/// A workload a task acts on, and what it should end up with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WorkloadTarget {
    pub(super) kind: String,
    pub(super) name: String,
    /// Desired `spec.replicas` (None: left as it is).
    pub(super) replicas: Option<i32>,
    /// Pods it had when the task began.
    pub(super) from: i32,
}

/// What the executor did, and so what the watches should come to show
/// (an agent's answer for a push member, as JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "plan", rename_all = "camelCase")]
pub(super) enum Plan {
    /// Scaled to zero.
    Stop { workloads: Vec<WorkloadTarget> },
    /// Scaled up (Start), or created (Create: the workloads appear later).
    Start {
        workloads: Vec<WorkloadTarget>,
        created: bool,
    },
    /// Image and/or replicas changed.
    Update {
        workloads: Vec<WorkloadTarget>,
        image: Option<String>,
    },
    /// Workloads deleted, and the namespace when `namespace`.
    Delete {
        workloads: Vec<WorkloadTarget>,
        namespace: bool,
    },
}

/// The rules' answer for one app document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Still going: progress 0–99 and what is happening.
    Progress(u8, String),
    Succeeded(String),
    Failed {
        reason: String,
        message: String,
    },
}

impl WorkloadState {
    /// Whether the status counters describe the current spec.
    fn observed(&self) -> bool {
        self.observed_generation >= self.generation
    }

    /// Ready pods of the current template, at least: ready ones minus any
    /// that may still be old (`replicas - updated`).
    fn new_ready(&self) -> i32 {
        (self.ready - (self.replicas - self.updated).max(0)).clamp(0, self.expected.max(0))
    }
}

impl AppView {
    /// The app document of `topic` as the rules read it (None: no document).
    pub(super) fn read(hub: &crate::hub::Hub, topic: &str) -> Option<Self> {
        hub.get(topic)
            .and_then(|d| serde_json::from_value((*d.doc).clone()).ok())
    }
}

fn find<'a>(app: &'a AppView, target: &WorkloadTarget) -> Option<&'a WorkloadState> {
    app.workloads
        .get(&format!("{}/{}", target.kind, target.name))
}

/// Scales a fraction of the work to 0–99 (100 belongs to success).
fn percent(done: f64, total: f64) -> u8 {
    if total <= 0.0 {
        return 0;
    }
    ((done / total).clamp(0.0, 1.0) * 99.0).floor() as u8
}

fn failed(reason: &str, message: impl Into<String>) -> Verdict {
    Verdict::Failed {
        reason: reason.into(),
        message: message.into(),
    }
}

/// A workload whose rollout failed (`ProgressDeadlineExceeded`).
fn rollout_failure(workloads: &[&WorkloadState]) -> Option<Verdict> {
    workloads.iter().find(|w| w.health == "Failed").map(|w| {
        failed(
            "ProgressDeadlineExceeded",
            format!("{} {}: {}", w.kind, w.name, w.message),
        )
    })
}

/// Judges `app` (None: no document yet) against `plan`.
pub(super) fn evaluate(plan: &Plan, app: Option<&AppView>) -> Verdict {
    let empty = AppView::default();
    let app = app.unwrap_or(&empty);
    let creating = matches!(plan, Plan::Start { created: true, .. });
    if app.phase == "NotExisted" && !creating && !matches!(plan, Plan::Delete { .. }) {
        return failed("NamespaceNotFound", "the app's namespace was deleted");
    }
    match plan {
        Plan::Stop { workloads } => stop(app, workloads),
        Plan::Start { workloads, created } => start(app, workloads, *created),
        Plan::Update { workloads, image } => update(app, workloads, image.as_deref()),
        Plan::Delete {
            workloads,
            namespace,
        } => delete(app, workloads, *namespace),
    }
}

/// Every target workload's current state; a workload that vanished fails
/// the task unless it is still to be created.
fn current<'a>(
    app: &'a AppView,
    targets: &[WorkloadTarget],
    created: bool,
) -> Result<Vec<Option<&'a WorkloadState>>, Verdict> {
    targets
        .iter()
        .map(|t| match find(app, t) {
            Some(w) => Ok(Some(w)),
            None if created => Ok(None),
            None => Err(failed(
                "WorkloadDeleted",
                format!("{} {} was deleted while the task ran", t.kind, t.name),
            )),
        })
        .collect()
}

fn stop(app: &AppView, targets: &[WorkloadTarget]) -> Verdict {
    let current = match current(app, targets, false) {
        Ok(c) => c,
        Err(v) => return v,
    };
    let from: i32 = targets.iter().map(|t| t.from).sum();
    let scaled = current
        .iter()
        .flatten()
        .all(|w| w.expected == 0 && w.observed());
    let left: i32 = current
        .iter()
        .flatten()
        .map(|w| w.replicas.max(w.ready))
        .sum();
    if scaled && left == 0 {
        return Verdict::Succeeded(format!("stopped: {from} replicas gone"));
    }
    if !scaled {
        return Verdict::Progress(0, "waiting for the scale-down to be observed".into());
    }
    let gone = (from - left).max(0);
    Verdict::Progress(
        percent(gone as f64, from as f64),
        format!("{gone} of {from} replicas stopped"),
    )
}

fn start(app: &AppView, targets: &[WorkloadTarget], created: bool) -> Verdict {
    let current = match current(app, targets, created) {
        Ok(c) => c,
        Err(v) => return v,
    };
    let present: Vec<&WorkloadState> = current.iter().flatten().copied().collect();
    let want: i32 = targets.iter().filter_map(|t| t.replicas).sum();
    let observed = present.len() == targets.len()
        && targets
            .iter()
            .zip(&current)
            .all(|(t, w)| w.is_some_and(|w| Some(w.expected) == t.replicas && w.observed()));
    if !observed {
        let what = if created { "creation" } else { "scale-up" };
        return Verdict::Progress(0, format!("waiting for the {what} to be observed"));
    }
    if let Some(failure) = rollout_failure(&present) {
        return failure;
    }
    let ready: i32 = present.iter().map(|w| w.ready.min(w.expected)).sum();
    if app.phase == "Running" && present.iter().all(|w| w.health == "Current") {
        return Verdict::Succeeded(format!("running: {ready}/{want} ready"));
    }
    Verdict::Progress(
        percent(ready as f64, want as f64),
        format!("{ready}/{want} ready"),
    )
}

fn update(app: &AppView, targets: &[WorkloadTarget], image: Option<&str>) -> Verdict {
    let current = match current(app, targets, false) {
        Ok(c) => c,
        Err(v) => return v,
    };
    let present: Vec<&WorkloadState> = current.iter().flatten().copied().collect();
    let observed = targets.iter().zip(&present).all(|(t, w)| {
        image.is_none_or(|i| w.images.first().map(String::as_str) == Some(i))
            && t.replicas.is_none_or(|r| w.expected == r)
            && w.observed()
    });
    if !observed {
        return Verdict::Progress(0, "waiting for the change to be observed".into());
    }
    if let Some(failure) = rollout_failure(&present) {
        return failure;
    }
    let all_current = present.iter().all(|w| w.health == "Current");
    let target_phase = if present.iter().all(|w| w.expected == 0) {
        "Stopped"
    } else {
        "Running"
    };
    if all_current && app.phase == target_phase {
        return Verdict::Succeeded(format!("updated: {target_phase}"));
    }
    // Each workload's share of the work, 0..=1.
    let fractions = targets.iter().zip(&present).map(|(t, w)| {
        let e = w.expected;
        if image.is_some() {
            if e == 0 {
                return if w.replicas == 0 { 1.0 } else { 0.0 };
            }
            // Ready pods of the old template are not progress: at most
            // `replicas - updated` of the ready ones are old.
            let updated = w.updated.min(e);
            return f64::from(updated + w.new_ready()) / f64::from(2 * e);
        }
        if e >= t.from {
            // Scaling up (or unchanged): new replicas getting ready.
            if e == 0 {
                1.0
            } else {
                f64::from(w.ready.min(e)) / f64::from(e)
            }
        } else {
            // Scaling down: surplus replicas leaving.
            f64::from((t.from - w.replicas).max(0)) / f64::from(t.from - e)
        }
    });
    let total: f64 = fractions.sum();
    let expected: i32 = present.iter().map(|w| w.expected).sum();
    let message = if image.is_some() {
        let updated: i32 = present.iter().map(|w| w.updated.min(w.expected)).sum();
        let new_ready: i32 = present.iter().map(|w| w.new_ready()).sum();
        format!("{updated}/{expected} updated, {new_ready}/{expected} ready on the new image")
    } else {
        let ready: i32 = present.iter().map(|w| w.ready.min(w.expected)).sum();
        format!("{ready}/{expected} ready")
    };
    Verdict::Progress(percent(total, targets.len() as f64), message)
}

fn delete(app: &AppView, targets: &[WorkloadTarget], namespace: bool) -> Verdict {
    let gone_namespace = app.phase == "NotExisted";
    let gone_workloads = if gone_namespace {
        targets.len()
    } else {
        targets.iter().filter(|t| find(app, t).is_none()).count()
    };
    let total = targets.len() + usize::from(namespace);
    let gone = gone_workloads + usize::from(namespace && gone_namespace);
    if gone == total {
        return Verdict::Succeeded(if namespace {
            "deleted with its namespace".into()
        } else {
            "workloads deleted".into()
        });
    }
    Verdict::Progress(
        percent(gone as f64, total as f64),
        format!("{gone} of {total} objects removed"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(
        name: &str,
        expected: i32,
        replicas: i32,
        ready: i32,
        updated: i32,
        image: &str,
    ) -> WorkloadState {
        let health = if ready == expected && replicas == expected && updated == expected {
            "Current"
        } else {
            "InProgress"
        };
        WorkloadState {
            kind: "Deployment".into(),
            name: name.into(),
            generation: 2,
            observed_generation: 2,
            expected,
            replicas,
            ready,
            updated,
            health: health.into(),
            message: String::new(),
            images: vec![image.into()],
        }
    }

    fn app(phase: &str, workloads: Vec<WorkloadState>) -> AppView {
        AppView {
            phase: phase.into(),
            workloads: workloads
                .into_iter()
                .map(|w| (format!("{}/{}", w.kind, w.name), w))
                .collect(),
        }
    }

    fn target(name: &str, replicas: Option<i32>, from: i32) -> WorkloadTarget {
        WorkloadTarget {
            kind: "Deployment".into(),
            name: name.into(),
            replicas,
            from,
        }
    }

    fn progress(v: &Verdict) -> Option<u8> {
        match v {
            Verdict::Progress(p, _) => Some(*p),
            Verdict::Succeeded(_) => Some(100),
            Verdict::Failed { .. } => None,
        }
    }

    fn failed_reason(v: &Verdict) -> Option<&str> {
        match v {
            Verdict::Failed { reason, .. } => Some(reason),
            _ => None,
        }
    }

    #[test]
    fn stop_counts_replicas_gone() {
        let plan = Plan::Stop {
            workloads: vec![target("web", Some(0), 4)],
        };
        let cases = [
            (
                "not yet observed",
                app("Running", vec![w("web", 4, 4, 4, 4, "a")]),
                Some(0),
            ),
            (
                "scaled, all still there",
                app("Stopped", vec![w("web", 0, 4, 4, 0, "a")]),
                Some(0),
            ),
            (
                "one gone",
                app("Stopped", vec![w("web", 0, 3, 3, 0, "a")]),
                Some(24),
            ),
            (
                "three gone",
                app("Stopped", vec![w("web", 0, 1, 0, 0, "a")]),
                Some(74),
            ),
            (
                "done",
                app("Stopped", vec![w("web", 0, 0, 0, 0, "a")]),
                Some(100),
            ),
            ("deleted underneath", app("Stopped", vec![]), None),
            ("namespace gone", app("NotExisted", vec![]), None),
        ];
        for (name, doc, want) in cases {
            assert_eq!(progress(&evaluate(&plan, Some(&doc))), want, "{name}");
        }
        assert_eq!(
            failed_reason(&evaluate(&plan, Some(&app("NotExisted", vec![])))),
            Some("NamespaceNotFound")
        );
    }

    #[test]
    fn start_and_create_count_ready_replicas() {
        let start = Plan::Start {
            workloads: vec![target("web", Some(3), 0)],
            created: false,
        };
        let create = Plan::Start {
            workloads: vec![target("web", Some(3), 0)],
            created: true,
        };
        let mut failing = w("web", 3, 3, 0, 3, "a");
        failing.health = "Failed".into();
        failing.message = "timed out progressing".into();
        let cases = [
            // The app's document is gone (its cluster left): nothing to follow.
            (&start, None, None),
            (
                &start,
                Some(app("Stopped", vec![w("web", 0, 0, 0, 0, "a")])),
                Some(0),
            ),
            (
                &start,
                Some(app("Degraded", vec![w("web", 3, 3, 1, 3, "a")])),
                Some(33),
            ),
            (
                &start,
                Some(app("Degraded", vec![w("web", 3, 3, 2, 3, "a")])),
                Some(66),
            ),
            (
                &start,
                Some(app("Running", vec![w("web", 3, 3, 3, 3, "a")])),
                Some(100),
            ),
            (&start, Some(app("Panic", vec![failing.clone()])), None),
            (&start, Some(app("Stopped", vec![])), None),
            (&create, Some(app("NotExisted", vec![])), Some(0)),
            (&create, Some(app("Stopped", vec![])), Some(0)),
            (
                &create,
                Some(app("Degraded", vec![w("web", 3, 1, 1, 1, "a")])),
                Some(33),
            ),
            (
                &create,
                Some(app("Running", vec![w("web", 3, 3, 3, 3, "a")])),
                Some(100),
            ),
        ];
        for (i, (plan, doc, want)) in cases.into_iter().enumerate() {
            assert_eq!(progress(&evaluate(plan, doc.as_ref())), want, "case {i}");
        }
        assert_eq!(
            evaluate(&start, Some(&app("Panic", vec![failing]))),
            Verdict::Failed {
                reason: "ProgressDeadlineExceeded".into(),
                message: "Deployment web: timed out progressing".into()
            }
        );
    }

    #[test]
    fn update_follows_the_rollout_or_the_scale() {
        let image = Plan::Update {
            workloads: vec![target("web", None, 2)],
            image: Some("b".into()),
        };
        let scale_up = Plan::Update {
            workloads: vec![target("web", Some(4), 2)],
            image: None,
        };
        let scale_down = Plan::Update {
            workloads: vec![target("web", Some(1), 3)],
            image: None,
        };
        let mut stale = w("web", 2, 2, 2, 2, "b");
        stale.generation = 3;
        let mut stuck = w("web", 2, 3, 2, 1, "b");
        stuck.health = "Failed".into();
        let cases = [
            (
                &image,
                app("Running", vec![w("web", 2, 2, 2, 2, "a")]),
                Some(0),
            ),
            (
                &image,
                app("Running", vec![w("web", 2, 3, 2, 1, "b")]),
                Some(24),
            ),
            // Two new pods, one of them ready, one old pod still serving.
            (
                &image,
                app("Running", vec![w("web", 2, 3, 2, 2, "b")]),
                Some(74),
            ),
            // The spec changed but the controller has not acted on it yet:
            // its counters still describe the old template.
            (&image, app("Running", vec![stale.clone()]), Some(0)),
            (
                &image,
                app("Degraded", vec![w("web", 2, 2, 1, 2, "b")]),
                Some(74),
            ),
            (
                &image,
                app("Running", vec![w("web", 2, 2, 2, 2, "b")]),
                Some(100),
            ),
            (&image, app("Degraded", vec![stuck]), None),
            (
                &scale_up,
                app("Running", vec![w("web", 2, 2, 2, 2, "a")]),
                Some(0),
            ),
            (
                &scale_up,
                app("Degraded", vec![w("web", 4, 3, 3, 4, "a")]),
                Some(74),
            ),
            (
                &scale_up,
                app("Running", vec![w("web", 4, 4, 4, 4, "a")]),
                Some(100),
            ),
            (
                &scale_down,
                app("Running", vec![w("web", 1, 2, 1, 1, "a")]),
                Some(49),
            ),
            (
                &scale_down,
                app("Running", vec![w("web", 1, 1, 1, 1, "a")]),
                Some(100),
            ),
        ];
        for (i, (plan, doc, want)) in cases.into_iter().enumerate() {
            assert_eq!(progress(&evaluate(plan, Some(&doc))), want, "case {i}");
        }
    }

    #[test]
    fn delete_counts_objects_gone() {
        let with_ns = Plan::Delete {
            workloads: vec![target("web", None, 2), target("db", None, 1)],
            namespace: true,
        };
        let shared_ns = Plan::Delete {
            workloads: vec![target("web", None, 2)],
            namespace: false,
        };
        let cases = [
            (
                &with_ns,
                app(
                    "Running",
                    vec![w("web", 2, 2, 2, 2, "a"), w("db", 1, 1, 1, 1, "a")],
                ),
                Some(0),
            ),
            (
                &with_ns,
                app("Running", vec![w("db", 1, 1, 1, 1, "a")]),
                Some(33),
            ),
            (&with_ns, app("Stopped", vec![]), Some(66)),
            (&with_ns, app("NotExisted", vec![]), Some(100)),
            (
                &shared_ns,
                app("Running", vec![w("web", 2, 2, 2, 2, "a")]),
                Some(0),
            ),
            (&shared_ns, app("Stopped", vec![]), Some(100)),
        ];
        for (i, (plan, doc, want)) in cases.into_iter().enumerate() {
            assert_eq!(progress(&evaluate(plan, Some(&doc))), want, "case {i}");
        }
    }

    #[test]
    fn app_documents_parse() {
        let doc = serde_json::json!({
            "cluster": "dev", "namespace": "shop", "app": "web", "phase": "Running",
            "state": "Running", "expected": 1, "ready": 1,
            "workloads": {"Deployment/web": {"kind": "Deployment", "name": "web", "expected": 1,
                "replicas": 1, "ready": 1, "updated": 1, "available": 1, "health": "Current",
                "message": "1/1 ready", "images": ["web:1"]}}
        });
        let view: AppView = serde_json::from_value(doc).unwrap();
        assert_eq!(view.workloads["Deployment/web"].images, ["web:1"]);
    }
}
