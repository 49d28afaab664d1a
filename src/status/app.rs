//! The application status machine (the blog seed). An app is the
//! Deployments and StatefulSets of one namespace that share an app label.
//! Its stable state comes from reading workload status with kstatus-grade
//! care; a transitional state from an active task (filled in by tasks) wins
//! over it in `state`. [`AppStatus::restore`] reads a published document
//! back, for an owner that takes the member over.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::objects::{
    DeploymentObject, StatefulSetObject, WorkloadObject, WorkloadSpec, WorkloadStatus,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Lifecycle;
use super::pods::{DominantCause, PodsView, Warning};

/// Default label that groups workloads into an app.
pub(crate) const DEFAULT_APP_LABEL: &str = "app.kubernetes.io/name";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum AppPhase {
    Running,
    Degraded,
    Stopped,
    NotExisted,
    Panic,
}

impl std::fmt::Display for AppPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

/// kstatus-style verdict on one workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum WorkloadHealth {
    Current,
    InProgress,
    Failed,
    Terminating,
}

/// Why a workload's controller gave up: a reason word and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// A CamelCase word (`ProgressDeadlineExceeded`, `RolloutAborted`).
    pub reason: String,
    /// What the controller said.
    pub message: String,
}

/// What the app machine needs of one workload: a Deployment, a StatefulSet,
/// or a custom workload read through a health rule (`rules`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    /// `Deployment`, `StatefulSet`, or the kind of a health rule.
    pub kind: &'static str,
    /// Namespace of the workload.
    pub namespace: String,
    /// `metadata.name` of the workload.
    pub name: String,
    /// The app it belongs to: the app label's value, else its own name.
    pub app: String,
    /// `metadata.generation` (0 when absent).
    pub generation: i64,
    /// `status.observedGeneration`, the generation its controller last acted on (0 when absent).
    pub observed_generation: i64,
    /// `spec.replicas`: replicas the workload should run (1 when absent, as Kubernetes defaults it).
    pub expected: i32,
    /// `status.replicas`: pods that exist, ready or not.
    pub replicas: i32,
    /// `status.updatedReplicas`: pods of the current template.
    pub updated: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// Why its controller gave up (a Deployment's `ProgressDeadlineExceeded`
    /// condition, or what a health rule's `failed` says).
    pub failure: Option<Failure>,
    /// The rollout is paused on purpose (`spec.paused`, a canary step): a
    /// rollout waiting while paused says so instead of looking stuck.
    pub paused: bool,
    /// What a health rule says is still under way although the counters
    /// look done (a canary analysis, a rollout step).
    pub progressing: Option<String>,
    /// Set once `metadata.deletionTimestamp` is: the workload is being deleted.
    pub terminating: bool,
    /// Container images of the pod template, in order.
    pub images: Vec<String>,
    /// `spec.selector.matchLabels`: the pods it owns (empty selects none).
    pub selector: BTreeMap<String, String>,
}

fn app_of(labels: Option<&BTreeMap<String, String>>, label: &str, name: &str) -> String {
    labels
        .and_then(|l| l.get(label))
        .filter(|v| !v.is_empty())
        .cloned()
        .unwrap_or_else(|| name.to_string())
}

impl Workload {
    /// Reads a Deployment: its counters, and a `ProgressDeadlineExceeded`
    /// condition as its failure.
    pub(crate) fn from_deployment(d: &DeploymentObject, app_label: &str) -> Self {
        let failure = d
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter().find(|c| {
                    c.type_.as_deref() == Some("Progressing")
                        && c.status.as_deref() == Some("False")
                        && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
                })
            })
            .map(|c| Failure {
                reason: "ProgressDeadlineExceeded".into(),
                message: c
                    .message
                    .clone()
                    .unwrap_or_else(|| "ProgressDeadlineExceeded".into()),
            });
        Self::read("Deployment", d, failure, app_label)
    }

    /// StatefulSets report no failure condition of their own.
    pub(crate) fn from_statefulset(s: &StatefulSetObject, app_label: &str) -> Self {
        Self::read("StatefulSet", s, None, app_label)
    }

    /// The fields Deployments and StatefulSets share; absent status
    /// counters count as zero.
    fn read<K>(
        kind: &'static str,
        object: &WorkloadObject<K>,
        failure: Option<Failure>,
        app_label: &str,
    ) -> Self {
        let (meta, spec) = (&object.metadata, object.spec.as_ref());
        let status = object.status.as_ref();
        let count = |field: fn(&WorkloadStatus) -> Option<i32>| status.and_then(field).unwrap_or(0);
        let name = meta.name.clone().unwrap_or_default();
        Workload {
            kind,
            namespace: meta.namespace.clone().unwrap_or_default(),
            app: app_of(meta.labels.as_ref(), app_label, &name),
            name,
            generation: meta.generation.unwrap_or(0),
            observed_generation: status.and_then(|s| s.observed_generation).unwrap_or(0),
            expected: spec.and_then(|s| s.replicas).unwrap_or(1),
            replicas: count(|s| s.replicas),
            updated: count(|s| s.updated_replicas),
            ready: count(|s| s.ready_replicas),
            available: count(|s| s.available_replicas),
            failure,
            paused: false,
            progressing: None,
            terminating: meta.deletion_timestamp.is_some(),
            images: spec.map(WorkloadSpec::images).unwrap_or_default(),
            selector: spec
                .and_then(WorkloadSpec::match_labels)
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// kstatus order: terminating, generation not observed, failed, then the
    /// replica comparisons; with a human message.
    pub(crate) fn health(&self) -> (WorkloadHealth, String) {
        let e = self.expected;
        if self.terminating {
            return (WorkloadHealth::Terminating, "being deleted".into());
        }
        if self.observed_generation < self.generation {
            return (
                WorkloadHealth::InProgress,
                format!(
                    "waiting for the controller to observe generation {}",
                    self.generation
                ),
            );
        }
        if let Some(failure) = &self.failure {
            return (WorkloadHealth::Failed, failure.message.clone());
        }
        if self.paused && self.updated < e {
            return (
                WorkloadHealth::InProgress,
                format!("rollout paused: {} of {e} updated", self.updated),
            );
        }
        if self.updated < e {
            return (
                WorkloadHealth::InProgress,
                format!("rollout waiting: {} of {e} updated", self.updated),
            );
        }
        if self.replicas > e {
            return (
                WorkloadHealth::InProgress,
                format!("{} old replicas pending termination", self.replicas - e),
            );
        }
        if self.ready < e {
            return (
                WorkloadHealth::InProgress,
                format!("{}/{e} ready", self.ready),
            );
        }
        if self.available < e {
            return (
                WorkloadHealth::InProgress,
                format!("{}/{e} available", self.available),
            );
        }
        if let Some(progressing) = &self.progressing {
            return (WorkloadHealth::InProgress, progressing.clone());
        }
        (WorkloadHealth::Current, format!("{}/{e} ready", self.ready))
    }
}

/// One workload as shown in the app document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkloadView {
    pub(crate) kind: String,
    pub(crate) name: String,
    /// `metadata.generation` and the one its controller last acted on: the
    /// counters below describe the current spec only once they are equal.
    pub(crate) generation: i64,
    pub(crate) observed_generation: i64,
    pub(crate) expected: i32,
    /// Pods that exist, ready or not (old ones during a rollout included).
    pub(crate) replicas: i32,
    pub(crate) ready: i32,
    pub(crate) updated: i32,
    pub(crate) available: i32,
    pub(crate) health: WorkloadHealth,
    pub(crate) message: String,
    pub(crate) images: Vec<String>,
}

/// A user task's transitional state, set by the tasks module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveTask {
    /// The task's id (`tasks/{id}` is its topic).
    pub id: String,
    /// `Starting`, `Stopping`, `Deleting`, `Updating`.
    pub state: String,
    /// The task's status: `Pending`, `Running`, `Succeeded` or `Failed`.
    pub status: String,
    /// Progress, in percent (0–100).
    pub progress: u8,
}

/// The `apps/{cluster}/{namespace}/{app}` document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AppStatus {
    pub(crate) cluster: String,
    pub(crate) namespace: String,
    pub(crate) app: String,
    /// The stable state's lifecycle (`phase` is the stable state).
    #[serde(flatten)]
    pub(crate) lifecycle: Lifecycle<AppPhase>,
    /// What a person sees: the active task's transitional state, else `phase`.
    pub(crate) state: String,
    pub(crate) task: Option<ActiveTask>,
    pub(crate) expected: i32,
    pub(crate) ready: i32,
    /// Keyed by `Kind/name` (an object, so a merge patch carries only the
    /// workload fields that changed; an array would be resent whole).
    pub(crate) workloads: BTreeMap<String, WorkloadView>,
    /// The app's pods (None while the pod watch is off): counts and the
    /// first problems; set by the engine before [`AppStatus::observe`].
    pub(crate) pods: Option<PodsView>,
    /// The latest Warning event about the app's workloads and pods.
    pub(crate) last_warning: Option<Warning>,
    /// The worst pod-level cause, which names the reason of a Degraded or
    /// Panic app; set with `pods`, not in the document.
    #[serde(skip)]
    pub(crate) cause: Option<DominantCause>,
    /// Since when the app has been gone (`Stopped (NoWorkloads)` or
    /// `NotExisted`) without interruption; None while it has workloads.
    /// Not in the document: the engine drops the app once it is older than
    /// the retention ([`AppStatus::expired`]).
    #[serde(skip)]
    pub(crate) gone_since: Option<DateTime<Utc>>,
}

/// Whose document [`AppStatus::restore`] reads.
#[derive(Debug, Deserialize)]
struct PublishedApp {
    cluster: String,
    namespace: String,
    app: String,
}

/// Whether a transition took the app away: to `NotExisted`, or to `Stopped (NoWorkloads)`.
fn went(t: &super::Transition) -> bool {
    t.to == "NotExisted" || (t.to == "Stopped" && t.reason == "NoWorkloads")
}

/// Since when a gone app has been gone, as far as its lifecycle tells: the
/// first of the transitions that took it away without interruption (to
/// `NotExisted` or `Stopped (NoWorkloads)`), else `since` (seen gone from
/// the start, or its history no longer reaches back that far). None for an
/// app that is not gone.
fn gone_since_in(lifecycle: &Lifecycle<AppPhase>) -> Option<DateTime<Utc>> {
    let gone = lifecycle.phase == AppPhase::NotExisted || lifecycle.reason == "NoWorkloads";
    if !gone {
        return None;
    }
    let went_at = lifecycle
        .history
        .iter()
        .rev()
        .take_while(|t| went(t))
        .last()
        .map(|t| t.at);
    Some(went_at.unwrap_or(lifecycle.since))
}

/// The stable state of an app: phase, reason, message. The phase comes
/// from the workloads; when the app is Degraded or Panic and a pod has a
/// problem, the worst pod-level `cause` names the reason and leads the message.
pub(crate) fn stable_state(
    namespace_exists: bool,
    workloads: &[&Workload],
    cause: Option<&DominantCause>,
) -> (AppPhase, Cow<'static, str>, String) {
    if !namespace_exists {
        return (
            AppPhase::NotExisted,
            "NamespaceNotFound".into(),
            "the namespace does not exist".into(),
        );
    }
    if workloads.is_empty() {
        return (
            AppPhase::Stopped,
            "NoWorkloads".into(),
            "no workloads".into(),
        );
    }
    let expected: i32 = workloads.iter().map(|w| w.expected).sum();
    let ready: i32 = workloads.iter().map(|w| w.ready.min(w.expected)).sum();
    let healths: Vec<(WorkloadHealth, String)> = workloads.iter().map(|w| w.health()).collect();
    let failure = workloads
        .iter()
        .zip(&healths)
        .find(|(_, (h, _))| *h == WorkloadHealth::Failed)
        .map(|(w, (_, m))| {
            let reason = w.failure.as_ref().map_or("Failed", |f| f.reason.as_str());
            (reason.to_string(), format!("{} {}: {m}", w.kind, w.name))
        });
    if expected == 0 {
        let leftover: i32 = workloads.iter().map(|w| w.replicas).sum();
        let message = if leftover > 0 {
            format!("scaled to 0, {leftover} replicas terminating")
        } else {
            "scaled to 0".into()
        };
        return (AppPhase::Stopped, "ScaledToZero".into(), message);
    }
    if ready == 0
        && let Some((reason, failure)) = failure.clone()
    {
        if let Some(cause) = cause {
            return (
                AppPhase::Panic,
                cause.reason.as_str().into(),
                format!("0/{expected} ready: {}; {failure}", cause.describe()),
            );
        }
        return (AppPhase::Panic, reason.into(), failure);
    }
    if (ready < expected || failure.is_some())
        && let Some(cause) = cause
    {
        let failure = failure.map(|(_, f)| format!("; {f}")).unwrap_or_default();
        return (
            AppPhase::Degraded,
            cause.reason.as_str().into(),
            format!("{ready}/{expected} ready: {}{failure}", cause.describe()),
        );
    }
    if let Some((reason, failure)) = failure {
        // A failed rollout is shown even while old replicas keep serving.
        return (
            AppPhase::Degraded,
            reason.into(),
            format!("{ready}/{expected} ready; {failure}"),
        );
    }
    if ready >= expected {
        // Serving everything it should; a rollout may still be under way.
        let rolling = workloads
            .iter()
            .zip(&healths)
            .find(|(_, (h, _))| *h != WorkloadHealth::Current)
            .map(|(w, (_, m))| format!(" ({} {}: {m})", w.kind, w.name))
            .unwrap_or_default();
        // A rollout whose new pods fail while the old ones serve says why.
        let pods = cause
            .map(|c| format!("; {}", c.describe()))
            .unwrap_or_default();
        return (
            AppPhase::Running,
            "AllReady".into(),
            format!("{ready}/{expected} ready{rolling}{pods}"),
        );
    }
    let reason = if workloads.iter().any(|w| w.updated < w.expected) {
        "RolloutInProgress"
    } else {
        "ReplicasNotReady"
    };
    let detail = workloads
        .iter()
        .zip(&healths)
        .find(|(_, (h, _))| *h != WorkloadHealth::Current)
        .map(|(w, (_, m))| format!(" ({} {}: {m})", w.kind, w.name))
        .unwrap_or_default();
    (
        AppPhase::Degraded,
        reason.into(),
        format!("{ready}/{expected} ready{detail}"),
    )
}

impl AppStatus {
    pub(crate) fn new(cluster: &str, namespace: &str, app: &str, now: DateTime<Utc>) -> Self {
        Self {
            cluster: cluster.into(),
            namespace: namespace.into(),
            app: app.into(),
            lifecycle: Lifecycle::new(AppPhase::Stopped, "NoWorkloads", "no workloads", now),
            state: "Stopped".into(),
            task: None,
            expected: 0,
            ready: 0,
            workloads: BTreeMap::new(),
            pods: None,
            last_warning: None,
            cause: None,
            gone_since: Some(now),
        }
    }

    /// The machine as it was when it published `doc`, so that a new owner
    /// of the member continues the document (phase, `since`, history and
    /// transition numbers) instead of starting from the first observation.
    /// Only what [`AppStatus::observe`] does not compute again is read: the
    /// lifecycle, and since when a gone app has been gone (from its history,
    /// for its expiry). The engine sets the task, pods, cause and warning
    /// and observes the workloads as for any app. None for a document that
    /// is malformed or of another app.
    pub(crate) fn restore(doc: &Value, cluster: &str, namespace: &str, app: &str) -> Option<Self> {
        let lifecycle = Lifecycle::<AppPhase>::restore(doc)?;
        let published = PublishedApp::deserialize(doc).ok()?;
        if (
            published.cluster.as_str(),
            published.namespace.as_str(),
            published.app.as_str(),
        ) != (cluster, namespace, app)
        {
            return None;
        }
        let mut status = Self::new(cluster, namespace, app, lifecycle.since);
        status.state = lifecycle.phase.to_string();
        status.gone_since = gone_since_in(&lifecycle);
        status.lifecycle = lifecycle;
        Some(status)
    }

    /// A newly seen app, starting in its observed state (no transition recorded).
    pub(crate) fn first_seen(
        cluster: &str,
        namespace: &str,
        app: &str,
        namespace_exists: bool,
        workloads: &[&Workload],
        cause: Option<DominantCause>,
        now: DateTime<Utc>,
    ) -> Self {
        let (phase, reason, message) = stable_state(namespace_exists, workloads, cause.as_ref());
        let mut status = Self::new(cluster, namespace, app, now);
        status.cause = cause;
        status.lifecycle = Lifecycle::new(phase, &reason, message, now);
        status.observe(namespace_exists, workloads, now)
    }

    /// The machine: recomputes the stable state from the app's workloads.
    pub(crate) fn observe(
        mut self,
        namespace_exists: bool,
        workloads: &[&Workload],
        now: DateTime<Utc>,
    ) -> Self {
        let (phase, reason, message) =
            stable_state(namespace_exists, workloads, self.cause.as_ref());
        let gone = phase == AppPhase::NotExisted || reason == "NoWorkloads";
        self.gone_since = if gone {
            self.gone_since.or(Some(now))
        } else {
            None
        };
        self.lifecycle.set(phase, &reason, message, now);
        self.workloads = workloads
            .iter()
            .map(|w| {
                let (health, message) = w.health();
                let view = WorkloadView {
                    kind: w.kind.to_string(),
                    name: w.name.clone(),
                    generation: w.generation,
                    observed_generation: w.observed_generation,
                    expected: w.expected,
                    replicas: w.replicas,
                    ready: w.ready,
                    updated: w.updated,
                    available: w.available,
                    health,
                    message,
                    images: w.images.clone(),
                };
                (format!("{}/{}", w.kind, w.name), view)
            })
            .collect();
        self.expected = workloads.iter().map(|w| w.expected).sum();
        self.ready = workloads.iter().map(|w| w.ready.min(w.expected)).sum();
        self.state = match &self.task {
            Some(task) => task.state.clone(),
            None => phase.to_string(),
        };
        self
    }

    /// Whether an app gone since `gone_since` has outlived `retention` at
    /// `now`; an app with an active task never has (the task may bring it back).
    pub(crate) fn expired(&self, retention: chrono::Duration, now: DateTime<Utc>) -> bool {
        self.task.is_none()
            && self
                .gone_since
                .is_some_and(|since| now - since >= retention)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(expected: i32, status: serde_json::Value) -> Workload {
        let d: DeploymentObject = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "generation": 2, "labels": {DEFAULT_APP_LABEL: "shop-web"}},
            "spec": {"replicas": expected, "selector": {}, "template": {"spec": {"containers": [{"name": "web", "image": "web:1"}]}}},
            "status": status,
        }))
        .unwrap();
        Workload::from_deployment(&d, DEFAULT_APP_LABEL)
    }

    fn ok(expected: i32, ready: i32) -> serde_json::Value {
        json!({"observedGeneration": 2, "replicas": expected, "updatedReplicas": expected, "readyReplicas": ready, "availableReplicas": ready})
    }

    fn deadline() -> serde_json::Value {
        json!({"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"web-1\" has timed out progressing."})
    }

    #[test]
    fn reads_workloads_like_kstatus() {
        let w = deployment(3, ok(3, 3));
        assert_eq!(w.app, "shop-web");
        assert_eq!(w.images, ["web:1"]);
        let cases = [
            (ok(3, 3), WorkloadHealth::Current, "3/3 ready"),
            (
                json!({"observedGeneration": 1}),
                WorkloadHealth::InProgress,
                "waiting for the controller to observe generation 2",
            ),
            (
                json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1, "readyReplicas": 3}),
                WorkloadHealth::InProgress,
                "rollout waiting: 1 of 3 updated",
            ),
            (
                json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 3, "readyReplicas": 3}),
                WorkloadHealth::InProgress,
                "1 old replicas pending termination",
            ),
            (ok(3, 2), WorkloadHealth::InProgress, "2/3 ready"),
            (
                json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 1}),
                WorkloadHealth::InProgress,
                "1/3 available",
            ),
            (
                json!({"observedGeneration": 2, "conditions": [deadline()]}),
                WorkloadHealth::Failed,
                "ReplicaSet \"web-1\" has timed out progressing.",
            ),
        ];
        for (status, health, message) in cases {
            let w = deployment(3, status.clone());
            assert_eq!(w.health(), (health, message.to_string()), "{status}");
        }
    }

    #[test]
    fn stable_states() {
        let running = deployment(3, ok(3, 3));
        let partial = deployment(3, ok(3, 1));
        let zero_ready = deployment(3, ok(3, 0));
        let scaled_down = deployment(0, json!({"observedGeneration": 2}));
        let draining = deployment(0, json!({"observedGeneration": 2, "replicas": 2}));
        let mut failed_status = ok(3, 0);
        failed_status["conditions"] = json!([deadline()]);
        let failed = deployment(3, failed_status);
        let mut stuck_status = ok(3, 2);
        stuck_status["conditions"] = json!([deadline()]);
        let stuck = deployment(3, stuck_status);
        let rolling = deployment(
            3,
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1, "readyReplicas": 1}),
        );
        let cases: Vec<(&str, bool, Vec<&Workload>, AppPhase, &str)> = vec![
            (
                "namespace gone",
                false,
                vec![&running],
                AppPhase::NotExisted,
                "NamespaceNotFound",
            ),
            (
                "no workloads",
                true,
                vec![],
                AppPhase::Stopped,
                "NoWorkloads",
            ),
            (
                "scaled to zero",
                true,
                vec![&scaled_down],
                AppPhase::Stopped,
                "ScaledToZero",
            ),
            (
                "scaled to zero, pods leaving",
                true,
                vec![&draining],
                AppPhase::Stopped,
                "ScaledToZero",
            ),
            (
                "all ready",
                true,
                vec![&running],
                AppPhase::Running,
                "AllReady",
            ),
            (
                "some ready",
                true,
                vec![&partial],
                AppPhase::Degraded,
                "ReplicasNotReady",
            ),
            (
                "none ready, no failure",
                true,
                vec![&zero_ready],
                AppPhase::Degraded,
                "ReplicasNotReady",
            ),
            (
                "rolling",
                true,
                vec![&rolling],
                AppPhase::Degraded,
                "RolloutInProgress",
            ),
            (
                "none ready and failed",
                true,
                vec![&failed],
                AppPhase::Panic,
                "ProgressDeadlineExceeded",
            ),
            (
                "stuck rollout, old pods serve",
                true,
                vec![&stuck],
                AppPhase::Degraded,
                "ProgressDeadlineExceeded",
            ),
            (
                "two workloads, one short",
                true,
                vec![&running, &partial],
                AppPhase::Degraded,
                "ReplicasNotReady",
            ),
            (
                "running and stopped",
                true,
                vec![&running, &scaled_down],
                AppPhase::Running,
                "AllReady",
            ),
        ];
        for (name, ns, workloads, phase, reason) in cases {
            let (p, r, _) = stable_state(ns, &workloads, None);
            assert_eq!((p, r.as_ref()), (phase, reason), "{name}");
        }
        let (_, _, message) = stable_state(true, &[&partial], None);
        assert_eq!(message, "1/3 ready (Deployment web: 1/3 ready)");
    }

    #[test]
    fn a_pod_level_cause_names_the_reason_of_degraded_and_panic_apps() {
        use crate::status::pods::{PodProblem, PodReason};
        let cause = DominantCause {
            reason: PodReason::CrashLoopBackOff,
            pods: 2,
            first: PodProblem {
                pod: "web-1".into(),
                container: Some("app".into()),
                reason: PodReason::CrashLoopBackOff,
                message: "Error".into(),
                restarts: 5,
                exit_code: Some(1),
            },
        };
        let running = deployment(3, ok(3, 3));
        let partial = deployment(3, ok(3, 1));
        let mut failed_status = ok(3, 0);
        failed_status["conditions"] = json!([deadline()]);
        let failed = deployment(3, failed_status);
        let zero_ready = deployment(3, ok(3, 0));
        let scaled_down = deployment(0, json!({"observedGeneration": 2}));
        let mut stuck_status = ok(3, 2);
        stuck_status["conditions"] = json!([deadline()]);
        let stuck = deployment(3, stuck_status);
        let cases: Vec<(&str, &Workload, AppPhase, &str, &str)> = vec![
            (
                "all ready: the cause is told after the rollout's state",
                &running,
                AppPhase::Running,
                "AllReady",
                "3/3 ready; 2 pods CrashLoopBackOff (container app exited 1, 5 restarts)",
            ),
            (
                "a stuck rollout while old pods serve",
                &stuck,
                AppPhase::Degraded,
                "CrashLoopBackOff",
                "2/3 ready: 2 pods CrashLoopBackOff (container app exited 1, 5 restarts); Deployment web: ReplicaSet \"web-1\" has timed out progressing.",
            ),
            (
                "some ready",
                &partial,
                AppPhase::Degraded,
                "CrashLoopBackOff",
                "1/3 ready: 2 pods CrashLoopBackOff (container app exited 1, 5 restarts)",
            ),
            (
                "none ready, no deadline yet: still Degraded",
                &zero_ready,
                AppPhase::Degraded,
                "CrashLoopBackOff",
                "0/3 ready: 2 pods CrashLoopBackOff (container app exited 1, 5 restarts)",
            ),
            (
                "none ready and failed: Panic with the pod reason",
                &failed,
                AppPhase::Panic,
                "CrashLoopBackOff",
                "0/3 ready: 2 pods CrashLoopBackOff (container app exited 1, 5 restarts); Deployment web: ReplicaSet \"web-1\" has timed out progressing.",
            ),
            (
                "scaled to zero",
                &scaled_down,
                AppPhase::Stopped,
                "ScaledToZero",
                "scaled to 0",
            ),
        ];
        for (name, w, phase, reason, message) in cases {
            let (p, r, m) = stable_state(true, &[w], Some(&cause));
            assert_eq!(
                (p, r.as_ref(), m),
                (phase, reason, message.to_string()),
                "{name}"
            );
        }
    }

    #[test]
    fn app_document() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let w = deployment(3, ok(3, 2));
        let app = AppStatus::new("c", "shop", "shop-web", now).observe(true, &[&w], now);
        assert_eq!(app.state, "Degraded");
        assert_eq!((app.expected, app.ready), (3, 2));
        let doc = serde_json::to_value(&app).unwrap();
        assert_eq!(doc["phase"], "Degraded");
        assert_eq!(doc["workloads"]["Deployment/web"]["health"], "InProgress");
        assert_eq!(doc["workloads"]["Deployment/web"]["name"], "web");
        assert_eq!(doc["task"], serde_json::Value::Null);
        // An unchanged observation leaves the document unchanged.
        let again = app
            .clone()
            .observe(true, &[&w], now + chrono::Duration::seconds(5));
        assert_eq!(again, app);
    }

    #[test]
    fn an_active_task_shows_its_transitional_state_over_the_stable_one() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let running = deployment(3, ok(3, 3));
        let stopped = deployment(0, json!({"observedGeneration": 2}));
        let task = |state: &str, progress| ActiveTask {
            id: "t1".into(),
            state: state.into(),
            status: "Running".into(),
            progress,
        };
        // (stable workloads, namespace exists, active task, phase, state)
        let cases: Vec<(&Workload, bool, Option<ActiveTask>, AppPhase, &str)> = vec![
            (&running, true, None, AppPhase::Running, "Running"),
            (
                &running,
                true,
                Some(task("Stopping", 0)),
                AppPhase::Running,
                "Stopping",
            ),
            (
                &stopped,
                true,
                Some(task("Stopping", 99)),
                AppPhase::Stopped,
                "Stopping",
            ),
            (&stopped, true, None, AppPhase::Stopped, "Stopped"),
            (
                &stopped,
                true,
                Some(task("Starting", 10)),
                AppPhase::Stopped,
                "Starting",
            ),
            (
                &running,
                true,
                Some(task("Updating", 50)),
                AppPhase::Running,
                "Updating",
            ),
            (
                &running,
                false,
                Some(task("Deleting", 66)),
                AppPhase::NotExisted,
                "Deleting",
            ),
            (&running, false, None, AppPhase::NotExisted, "NotExisted"),
        ];
        for (w, ns, active, phase, state) in cases {
            let mut app = AppStatus::new("c", "shop", "shop-web", now);
            app.task = active.clone();
            let app = app.observe(ns, &[w], now);
            assert_eq!(
                (app.lifecycle.phase, app.state.as_str()),
                (phase, state),
                "{active:?}"
            );
            let doc = serde_json::to_value(&app).unwrap();
            assert_eq!(doc["task"]["progress"], json!(active.map(|t| t.progress)));
        }
    }

    /// One observation of an app: namespace exists, workloads, a task's state.
    type Seen<'a> = (bool, Vec<&'a Workload>, Option<&'a str>);

    fn seen(app: AppStatus, (ns, workloads, task): &Seen<'_>, now: DateTime<Utc>) -> AppStatus {
        let mut app = app;
        app.task = task.map(|state| ActiveTask {
            id: "t1".into(),
            state: state.into(),
            status: "Running".into(),
            progress: 50,
        });
        app.observe(*ns, workloads, now)
    }

    #[test]
    fn a_restored_machine_continues_its_document() {
        let t = |s: i64| DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap();
        let running = deployment(3, ok(3, 3));
        let partial = deployment(3, ok(3, 1));
        let stopped = deployment(0, json!({"observedGeneration": 2}));
        let mut flapping: Vec<Seen> = Vec::new();
        for _ in 0..12 {
            flapping.push((true, vec![&running], None));
            flapping.push((true, vec![&partial], None));
        }
        // (name, observations before the document is published, after)
        let cases: Vec<(&str, Vec<Seen>, Vec<Seen>)> = vec![
            (
                "running",
                vec![(true, vec![&running], None)],
                vec![(true, vec![&partial], None), (true, vec![&running], None)],
            ),
            (
                "degraded, then a task",
                vec![(true, vec![&running], None), (true, vec![&partial], None)],
                vec![
                    (true, vec![&partial], Some("Updating")),
                    (true, vec![&running], None),
                ],
            ),
            (
                "stopping",
                vec![(true, vec![&running], Some("Stopping"))],
                vec![
                    (true, vec![&stopped], Some("Stopping")),
                    (true, vec![&stopped], None),
                ],
            ),
            (
                "gone: no workloads",
                vec![(true, vec![&running], None), (true, vec![], None)],
                vec![(true, vec![], None), (true, vec![&running], None)],
            ),
            (
                "gone: no workloads, then no namespace",
                vec![
                    (true, vec![&running], None),
                    (true, vec![&stopped], None),
                    (true, vec![], None),
                    (false, vec![], None),
                ],
                vec![(false, vec![], None), (true, vec![], None)],
            ),
            (
                "gone from the start",
                vec![(false, vec![&running], None)],
                vec![(false, vec![&running], None), (true, vec![&running], None)],
            ),
            (
                "a full history keeps numbering",
                flapping,
                vec![(true, vec![], None), (true, vec![&running], None)],
            ),
        ];
        let retention = chrono::Duration::seconds(600);
        for (name, before, after) in cases {
            let (first, rest) = before.split_first().unwrap();
            let mut kept =
                AppStatus::first_seen("c", "shop", "shop-web", first.0, &first.1, None, t(1));
            kept = seen(kept, first, t(1));
            for (i, observation) in rest.iter().enumerate() {
                kept = seen(kept, observation, t(2 + i as i64));
            }
            let published = serde_json::to_value(&kept).unwrap();
            let mut restored = AppStatus::restore(&published, "c", "shop", "shop-web")
                .unwrap_or_else(|| panic!("{name}: not restored from {published}"));
            // The hub holds documents without their null members.
            let mut held = published.clone();
            crate::protocol::patch::strip_nulls(&mut held);
            assert_eq!(
                AppStatus::restore(&held, "c", "shop", "shop-web"),
                Some(restored.clone()),
                "{name}: held"
            );
            assert_eq!(restored.lifecycle, kept.lifecycle, "{name}");
            assert_eq!(restored.gone_since, kept.gone_since, "{name}");
            for at in [t(100), t(602), t(605), t(10_000)] {
                let expired = (kept.expired(retention, at), restored.expired(retention, at));
                assert_eq!(expired.0, expired.1, "{name}: expired at {at}");
            }
            for (i, observation) in after.iter().enumerate() {
                let what = format!("{name}, after step {i}");
                let at = t(1000 + i as i64);
                kept = seen(kept, observation, at);
                restored = seen(restored, observation, at);
                let docs = [&kept, &restored].map(|a| serde_json::to_value(a).unwrap());
                assert_eq!(docs[1], docs[0], "{what}");
                assert_eq!(restored.gone_since, kept.gone_since, "{what}");
            }
        }
    }

    #[test]
    fn restore_ignores_foreign_and_malformed_documents() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let w = deployment(3, ok(3, 3));
        let app = AppStatus::new("c", "shop", "shop-web", now).observe(true, &[&w], now);
        let good = serde_json::to_value(&app).unwrap();
        assert!(AppStatus::restore(&good, "c", "shop", "shop-web").is_some());
        let with = |pointer: &str, value: serde_json::Value| {
            let mut doc = good.clone();
            *doc.pointer_mut(pointer).unwrap() = value;
            doc
        };
        // (why, document, cluster, namespace, app restoring it)
        let cases = [
            ("another app's", good.clone(), "c", "shop", "other"),
            (
                "another namespace's",
                good.clone(),
                "c",
                "other",
                "shop-web",
            ),
            ("another cluster's", good.clone(), "d", "shop", "shop-web"),
            (
                "a phase apps do not have",
                with("/phase", json!("Healthy")),
                "c",
                "shop",
                "shop-web",
            ),
            (
                "a cluster in numbers",
                with("/cluster", json!(7)),
                "c",
                "shop",
                "shop-web",
            ),
            (
                "history entries without times",
                with(
                    "/history",
                    json!({"1": {"from": "Running", "to": "Degraded", "reason": "X"}}),
                ),
                "c",
                "shop",
                "shop-web",
            ),
            (
                "a sync document",
                json!({"cluster": "c", "phase": "Syncing"}),
                "c",
                "shop",
                "shop-web",
            ),
            ("a string", json!("Running"), "c", "shop", "shop-web"),
        ];
        for (why, doc, cluster, namespace, name) in cases {
            assert_eq!(
                AppStatus::restore(&doc, cluster, namespace, name),
                None,
                "{why}: {doc}"
            );
        }
    }
}
