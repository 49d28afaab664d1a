//! Pod-level causes and warning events of an app, folded into the app
//! document (`sources ──Pod, Event──▶ [pods.rs] ──▶ app machine`). Pure:
//! a Pod is read into a [`PodSummary`] that keeps only what the document
//! shows (no timestamps, no counters that tick without meaning), the
//! summaries of an app fold into a bounded [`PodsView`] and its dominant
//! cause; an Event of type Warning is read into a [`Warning`].

use super::capacity::{PodShare, Resources};
use super::labels::{LabelSets, Labels};
use super::objects::{ContainerStatus, PodObject, Terminated};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Event;
use serde::Serialize;

/// Problems listed in the app document at most; the rest are counted in `more`.
pub(crate) const MAX_PROBLEMS: usize = 5;

/// Why one pod is not serving, by severity (the first is the worst): the
/// app's reason names the worst cause among its pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum PodReason {
    /// The container was killed for memory and keeps restarting.
    #[serde(rename = "OOMKilled")]
    OomKilled,
    /// The container exits and the kubelet backs off restarting it.
    CrashLoopBackOff,
    /// The image cannot be pulled (backing off).
    ImagePullBackOff,
    /// The image cannot be pulled (first failure).
    ErrImagePull,
    /// The container's configuration names a missing config map, secret or key.
    CreateContainerConfigError,
    /// Another waiting reason the kubelet reports as an error
    /// (`CreateContainerError`, `InvalidImageName`, …).
    ContainerError,
    /// The scheduler found no node for the pod.
    Unschedulable,
    /// The container runs but its readiness probe fails.
    NotReady,
}

impl PodReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PodReason::OomKilled => "OOMKilled",
            PodReason::CrashLoopBackOff => "CrashLoopBackOff",
            PodReason::ImagePullBackOff => "ImagePullBackOff",
            PodReason::ErrImagePull => "ErrImagePull",
            PodReason::CreateContainerConfigError => "CreateContainerConfigError",
            PodReason::ContainerError => "ContainerError",
            PodReason::Unschedulable => "Unschedulable",
            PodReason::NotReady => "NotReady",
        }
    }
}

/// One pod's problem as listed in the app document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodProblem {
    pub(crate) pod: String,
    /// The container at fault; None for a pod that was never scheduled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) container: Option<String>,
    pub(crate) reason: PodReason,
    /// The kubelet's or the scheduler's message, or the container's image for pull errors.
    pub(crate) message: String,
    pub(crate) restarts: i32,
    /// Exit code of the container's last termination, if it terminated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) exit_code: Option<i32>,
}

impl PodProblem {
    /// The detail in the app's message: `container app exited 1, 5 restarts`.
    pub(crate) fn detail(&self) -> String {
        let container = self.container.as_deref().unwrap_or("?");
        let restarts = |n: i32| match n {
            1 => "1 restart".to_string(),
            n => format!("{n} restarts"),
        };
        match self.reason {
            PodReason::OomKilled => format!(
                "container {container} OOMKilled, {}",
                restarts(self.restarts)
            ),
            PodReason::CrashLoopBackOff => match self.exit_code {
                Some(code) => format!(
                    "container {container} exited {code}, {}",
                    restarts(self.restarts)
                ),
                None => format!("container {container}, {}", restarts(self.restarts)),
            },
            PodReason::ImagePullBackOff | PodReason::ErrImagePull => {
                format!("container {container}: {}", self.message)
            }
            PodReason::Unschedulable => self.message.clone(),
            PodReason::NotReady => format!("container {container} running, not ready"),
            PodReason::CreateContainerConfigError | PodReason::ContainerError => {
                format!("container {container}: {}", self.message)
            }
        }
    }
}

/// A pod as read from the watch: where it is and what is kept of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSummary {
    /// Namespace of the pod.
    pub namespace: String,
    /// `metadata.name` of the pod.
    pub name: String,
    /// What the gateway holds of it.
    pub state: PodState,
}

/// What the app machine needs of one pod, all the gateway holds of it
/// (besides the key of its name it is held under): its labels (to find its
/// workload; one shared copy per distinct set), readiness, problem (boxed:
/// most pods have none) and part in the cluster's figures. Some 64 bytes.
/// Equal states mean an unchanged document, so a status update that
/// changes nothing shown changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    /// The pod's labels, matched against workloads' selectors.
    pub labels: Labels,
    /// The `Ready` condition is true.
    pub ready: bool,
    /// Being deleted: neither counted nor a problem.
    pub terminating: bool,
    pub(crate) problem: Option<Box<PodProblem>>,
    /// Its part in the cluster's pod figures (src/status/capacity.rs).
    pub share: PodShare,
}

/// The most of a kubelet's or scheduler's message a pod's problem keeps:
/// the app's reason needs its start, and a member's pods must not make the
/// gateway hold whatever length their statuses have.
const MAX_MESSAGE_BYTES: usize = 512;

/// `message`, cut to [`MAX_MESSAGE_BYTES`] at a character boundary (`…` then).
fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

fn container_problem(pod: &str, c: &ContainerStatus) -> Option<PodProblem> {
    let state = c.state.as_ref();
    let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let problem = |reason, message: String, exit_code| PodProblem {
        pod: pod.to_string(),
        container: Some(c.name.clone()),
        reason,
        message: bounded(message),
        restarts: c.restart_count,
        exit_code,
    };
    // A container that terminated and restarts: OOMKilled when its last
    // end was for memory, a crash loop otherwise. While it runs again
    // between two crashes (not ready yet) it still is one, so the reason
    // does not flap with every restart.
    let crashing = |terminated: &Terminated| {
        let reason = if terminated.reason.as_deref() == Some("OOMKilled") {
            PodReason::OomKilled
        } else {
            PodReason::CrashLoopBackOff
        };
        let message = terminated
            .reason
            .clone()
            .unwrap_or_else(|| "terminated".into());
        problem(reason, message, Some(terminated.exit_code))
    };
    if let Some(waiting) = state.and_then(|s| s.waiting.as_ref()) {
        let message = waiting.message.clone().unwrap_or_default();
        return match waiting.reason.as_deref() {
            Some("CrashLoopBackOff") => Some(match last {
                Some(t) => crashing(t),
                None => problem(PodReason::CrashLoopBackOff, message, None),
            }),
            Some("ImagePullBackOff") => Some(problem(PodReason::ImagePullBackOff, message, None)),
            Some("ErrImagePull") => Some(problem(PodReason::ErrImagePull, message, None)),
            Some("CreateContainerConfigError") => Some(problem(
                PodReason::CreateContainerConfigError,
                message,
                None,
            )),
            Some(
                reason @ ("CreateContainerError"
                | "InvalidImageName"
                | "RunContainerError"
                | "ErrImageNeverPull"),
            ) => {
                let message = if message.is_empty() {
                    reason.to_string()
                } else {
                    format!("{reason}: {message}")
                };
                Some(problem(PodReason::ContainerError, message, None))
            }
            // ContainerCreating, PodInitializing: on its way.
            _ => None,
        };
    }
    if let Some(terminated) = state.and_then(|s| s.terminated.as_ref()) {
        return (terminated.exit_code != 0).then(|| crashing(terminated));
    }
    if state.and_then(|s| s.running.as_ref()).is_some() && !c.ready {
        if c.restart_count > 0
            && let Some(t) = last.filter(|t| t.exit_code != 0)
        {
            return Some(crashing(t));
        }
        return Some(problem(
            PodReason::NotReady,
            "readiness probe failing".into(),
            None,
        ));
    }
    None
}

impl PodSummary {
    /// Reads a Pod: its worst container problem, or the scheduler's
    /// verdict; its labels as `sets` holds them.
    pub(crate) fn from_pod(pod: &PodObject, sets: &mut LabelSets) -> Self {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = pod.status.as_ref();
        let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
        let ready = conditions
            .iter()
            .any(|c| c.type_.as_deref() == Some("Ready") && c.status.as_deref() == Some("True"));
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let unschedulable = conditions.iter().find(|c| {
            c.type_.as_deref() == Some("PodScheduled")
                && c.status.as_deref() == Some("False")
                && c.reason.as_deref() == Some("Unschedulable")
        });
        let problem = if terminating || status.and_then(|s| s.phase.as_deref()) == Some("Succeeded")
        {
            None
        } else if let Some(c) = unschedulable {
            Some(PodProblem {
                pod: name.clone(),
                container: None,
                reason: PodReason::Unschedulable,
                message: bounded(c.message.clone().unwrap_or_else(|| "Unschedulable".into())),
                restarts: 0,
                exit_code: None,
            })
        } else {
            let init = status.and_then(|s| s.init_container_statuses.as_deref());
            let main = status.and_then(|s| s.container_statuses.as_deref());
            init.into_iter()
                .chain(main)
                .flatten()
                .filter_map(|c| container_problem(&name, c))
                .min_by_key(|p| p.reason)
        };
        let phase = status.and_then(|s| s.phase.as_deref());
        let requests = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter().flatten())
            .map(|c| Resources::from_list(c.resources.as_ref().and_then(|r| r.requests.as_ref())))
            .fold(Resources::default(), |mut sum, r| {
                sum.cpu_millis += r.cpu_millis;
                sum.memory_bytes += r.memory_bytes;
                sum
            });
        let share = PodShare {
            counted: !terminating && !matches!(phase, Some("Succeeded" | "Failed")),
            running: phase == Some("Running"),
            requests: Resources {
                pods: 0,
                ..requests
            },
        };
        Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name,
            state: PodState {
                labels: sets.intern(pod.metadata.labels.as_ref()),
                ready,
                terminating,
                problem: problem.map(Box::new),
                share,
            },
        }
    }
}

#[cfg(test)]
impl PodState {
    /// Whether the pod is selected by `matchLabels` (an empty selector
    /// selects nothing): what the engine's workload and pod indexes are
    /// checked against.
    pub(crate) fn matches(&self, selector: &std::collections::BTreeMap<String, String>) -> bool {
        !selector.is_empty() && self.labels.has_all(selector)
    }
}

/// The `pods` member of the app document: bounded, and changing only when
/// what it shows changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodsView {
    /// Pods of the app's workloads, terminating ones left out.
    pub(crate) total: usize,
    pub(crate) ready: usize,
    /// The first [`MAX_PROBLEMS`] problems, worst first, then by pod name.
    pub(crate) problems: Vec<PodProblem>,
    /// Problems not listed.
    pub(crate) more: usize,
}

/// The cause the app's reason and message name: the worst reason among
/// the pods, how many pods have it, and the first such pod's problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DominantCause {
    pub(crate) reason: PodReason,
    pub(crate) pods: usize,
    pub(crate) first: PodProblem,
}

impl DominantCause {
    /// `1 pod CrashLoopBackOff (container app exited 1, 5 restarts)`.
    pub(crate) fn describe(&self) -> String {
        let pods = match self.pods {
            1 => "1 pod".to_string(),
            n => format!("{n} pods"),
        };
        format!("{pods} {} ({})", self.reason.as_str(), self.first.detail())
    }
}

/// Folds an app's pods into the document's summary.
pub(crate) fn fold(pods: &[&PodState]) -> PodsView {
    let live: Vec<&&PodState> = pods.iter().filter(|p| !p.terminating).collect();
    let mut problems: Vec<PodProblem> = live
        .iter()
        .filter_map(|p| p.problem.as_deref().cloned())
        .collect();
    problems.sort_by(|a, b| (a.reason, &a.pod).cmp(&(b.reason, &b.pod)));
    let more = problems.len().saturating_sub(MAX_PROBLEMS);
    problems.truncate(MAX_PROBLEMS);
    PodsView {
        total: live.len(),
        ready: live.iter().filter(|p| p.ready).count(),
        problems,
        more,
    }
}

/// The worst cause among the pods, if any pod has a problem.
pub(crate) fn dominant(pods: &[&PodState]) -> Option<DominantCause> {
    let mut problems: Vec<&PodProblem> = pods
        .iter()
        .filter(|p| !p.terminating)
        .filter_map(|p| p.problem.as_deref())
        .collect();
    problems.sort_by(|a, b| (a.reason, &a.pod).cmp(&(b.reason, &b.pod)));
    let first = *problems.first()?;
    Some(DominantCause {
        reason: first.reason,
        pods: problems.iter().filter(|p| p.reason == first.reason).count(),
        first: first.clone(),
    })
}

/// One Warning event, as the app document shows its latest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Warning {
    pub(crate) reason: String,
    pub(crate) message: String,
    /// `Kind/name` of the object the event is about.
    pub(crate) object: String,
    pub(crate) count: i32,
    pub(crate) last_seen: DateTime<Utc>,
    /// Namespace, kind and name of the involved object, to find its app.
    #[serde(skip)]
    pub(crate) namespace: String,
    #[serde(skip)]
    pub(crate) kind: String,
    #[serde(skip)]
    pub(crate) name: String,
    /// The event's `resourceVersion`: of two events seen in the same
    /// second (timestamps have seconds only), the one written last wins.
    #[serde(skip)]
    pub(crate) written: u64,
}

/// The key of an event among those kept: its namespace and name.
pub type EventKey = (String, String);

impl Warning {
    /// Reads an Event of type Warning; None for other types and for events
    /// about objects that are neither pods nor workloads (never kept).
    pub(crate) fn from_event(event: &Event) -> Option<(EventKey, Self)> {
        if event.type_.as_deref() != Some("Warning") {
            return None;
        }
        let involved = &event.involved_object;
        let kind = involved.kind.clone()?;
        if !matches!(kind.as_str(), "Pod" | "Deployment" | "StatefulSet") {
            return None;
        }
        let name = involved.name.clone()?;
        let namespace = involved
            .namespace
            .clone()
            .or_else(|| event.metadata.namespace.clone())
            .unwrap_or_default();
        let last_seen = event
            .last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| event.event_time.as_ref().map(|t| t.0))
            .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
            .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .and_then(|t| {
                DateTime::from_timestamp(t.as_second(), t.subsec_nanosecond().max(0) as u32)
            })
            .unwrap_or(DateTime::UNIX_EPOCH);
        let key = (
            event.metadata.namespace.clone().unwrap_or_default(),
            event.metadata.name.clone().unwrap_or_default(),
        );
        Some((
            key,
            Self {
                reason: event.reason.clone().unwrap_or_default(),
                message: bounded(event.message.clone().unwrap_or_default()),
                object: format!("{kind}/{name}"),
                count: event.count.unwrap_or(1).max(1),
                last_seen,
                namespace,
                kind,
                name,
                written: event
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or(0),
            },
        ))
    }
}

/// The latest of the warnings: by `lastSeen`, then the one written last,
/// then object, reason and message, so that ties pick the same one every time.
pub(crate) fn latest<'a>(warnings: impl IntoIterator<Item = &'a Warning>) -> Option<Warning> {
    let order = |w: &'a Warning| (w.last_seen, w.written, &w.object, &w.reason, &w.message);
    warnings
        .into_iter()
        .max_by(|a, b| order(a).cmp(&order(b)))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_is_kept_to_its_start() {
        // (message, what is kept)
        let long = "x".repeat(2 * MAX_MESSAGE_BYTES);
        let wide = "é".repeat(MAX_MESSAGE_BYTES);
        let cases = [
            ("short".to_string(), "short".to_string()),
            (long.clone(), format!("{}…", &long[..MAX_MESSAGE_BYTES])),
            (
                wide.clone(),
                format!("{}…", "é".repeat(MAX_MESSAGE_BYTES / 2)),
            ),
        ];
        for (message, kept) in cases {
            assert_eq!(bounded(message), kept);
        }
    }
    use serde_json::{Value, json};

    fn pod(name: &str, status: Value) -> PodState {
        let p: PodObject = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "web:1"}]},
            "status": status,
        }))
        .unwrap();
        PodSummary::from_pod(&p, &mut LabelSets::default()).state
    }

    fn container(ready: bool, restarts: i32, state: Value, last: Value) -> Value {
        json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}],
            "containerStatuses": [{"name": "app", "image": "web:1", "imageID": "", "ready": ready,
                "restartCount": restarts, "state": state, "lastState": last}]}})
    }

    fn terminated(code: i32, reason: &str) -> Value {
        json!({"terminated": {"exitCode": code, "reason": reason}})
    }

    #[test]
    fn container_states_give_causes() {
        let waiting = |reason: &str, message: &str| json!({"waiting": {"reason": reason, "message": message}});
        let running = json!({"running": {}});
        // (case, status, ready, reason, restarts, exit code, detail)
        type Case<'a> = (
            &'a str,
            Value,
            bool,
            Option<PodReason>,
            i32,
            Option<i32>,
            &'a str,
        );
        let cases: Vec<Case> = vec![
            (
                "running and ready",
                container(true, 0, running.clone(), json!({})),
                true,
                None,
                0,
                None,
                "",
            ),
            (
                "creating",
                container(false, 0, waiting("ContainerCreating", ""), json!({})),
                false,
                None,
                0,
                None,
                "",
            ),
            (
                "crash loop",
                container(
                    false,
                    5,
                    waiting("CrashLoopBackOff", "back-off 40s"),
                    terminated(1, "Error"),
                ),
                false,
                Some(PodReason::CrashLoopBackOff),
                5,
                Some(1),
                "container app exited 1, 5 restarts",
            ),
            (
                "crash loop, running again between two crashes",
                container(false, 5, running.clone(), terminated(1, "Error")),
                false,
                Some(PodReason::CrashLoopBackOff),
                5,
                Some(1),
                "container app exited 1, 5 restarts",
            ),
            (
                "just crashed",
                container(false, 1, terminated(2, "Error"), json!({})),
                false,
                Some(PodReason::CrashLoopBackOff),
                1,
                Some(2),
                "container app exited 2, 1 restart",
            ),
            (
                "oom killed",
                container(
                    false,
                    3,
                    waiting("CrashLoopBackOff", ""),
                    terminated(137, "OOMKilled"),
                ),
                false,
                Some(PodReason::OomKilled),
                3,
                Some(137),
                "container app OOMKilled, 3 restarts",
            ),
            (
                "pull back-off",
                container(
                    false,
                    0,
                    waiting("ImagePullBackOff", "Back-off pulling image \"web:1\""),
                    json!({}),
                ),
                false,
                Some(PodReason::ImagePullBackOff),
                0,
                None,
                "container app: Back-off pulling image \"web:1\"",
            ),
            (
                "pull error",
                container(false, 0, waiting("ErrImagePull", "not found"), json!({})),
                false,
                Some(PodReason::ErrImagePull),
                0,
                None,
                "container app: not found",
            ),
            (
                "config error",
                container(
                    false,
                    0,
                    waiting("CreateContainerConfigError", "configmap \"cfg\" not found"),
                    json!({}),
                ),
                false,
                Some(PodReason::CreateContainerConfigError),
                0,
                None,
                "container app: configmap \"cfg\" not found",
            ),
            (
                "invalid image",
                container(false, 0, waiting("InvalidImageName", "bad"), json!({})),
                false,
                Some(PodReason::ContainerError),
                0,
                None,
                "container app: InvalidImageName: bad",
            ),
            (
                "readiness failing",
                container(false, 0, running.clone(), json!({})),
                false,
                Some(PodReason::NotReady),
                0,
                None,
                "container app running, not ready",
            ),
            (
                "restarted once long ago, ready now",
                container(true, 1, running.clone(), terminated(137, "OOMKilled")),
                true,
                None,
                0,
                None,
                "",
            ),
            (
                "unschedulable",
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                    "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]}),
                false,
                Some(PodReason::Unschedulable),
                0,
                None,
                "0/3 nodes are available: 3 Insufficient cpu.",
            ),
        ];
        for (case, status, ready, reason, restarts, exit_code, detail) in cases {
            let status = status.get("status").cloned().unwrap_or(status);
            let p = pod("web-1", status);
            assert_eq!(p.ready, ready, "{case}");
            assert_eq!(p.problem.as_ref().map(|p| p.reason), reason, "{case}");
            if let Some(problem) = &p.problem {
                assert_eq!(problem.restarts, restarts, "{case}");
                assert_eq!(problem.exit_code, exit_code, "{case}");
                assert_eq!(problem.detail(), detail, "{case}");
            }
        }
    }

    #[test]
    fn folding_is_bounded_and_names_the_worst_cause() {
        let crash = |name: &str| {
            pod(
                name,
                container(
                    false,
                    4,
                    json!({"waiting": {"reason": "CrashLoopBackOff"}}),
                    terminated(1, "Error"),
                )["status"]
                    .clone(),
            )
        };
        let not_ready = |name: &str| {
            pod(
                name,
                container(false, 0, json!({"running": {}}), json!({}))["status"].clone(),
            )
        };
        let ready = |name: &str| {
            pod(
                name,
                container(true, 0, json!({"running": {}}), json!({}))["status"].clone(),
            )
        };
        let mut gone = crash("web-z");
        gone.terminating = true;
        let pods = [
            ready("web-a"),
            not_ready("web-b"),
            crash("web-d"),
            crash("web-c"),
            not_ready("web-e"),
            not_ready("web-f"),
            not_ready("web-g"),
            not_ready("web-h"),
            gone,
        ];
        let refs: Vec<&PodState> = pods.iter().collect();
        let view = fold(&refs);
        assert_eq!((view.total, view.ready, view.more), (8, 1, 2));
        let listed: Vec<(&str, PodReason)> = view
            .problems
            .iter()
            .map(|p| (p.pod.as_str(), p.reason))
            .collect();
        assert_eq!(
            listed,
            [
                ("web-c", PodReason::CrashLoopBackOff),
                ("web-d", PodReason::CrashLoopBackOff),
                ("web-b", PodReason::NotReady),
                ("web-e", PodReason::NotReady),
                ("web-f", PodReason::NotReady),
            ]
        );
        let cause = dominant(&refs).unwrap();
        assert_eq!(
            cause.describe(),
            "2 pods CrashLoopBackOff (container app exited 1, 4 restarts)"
        );
        assert_eq!(dominant(&[&pods[0]]), None);
        assert_eq!(
            fold(&[]),
            PodsView {
                total: 0,
                ready: 0,
                problems: vec![],
                more: 0
            }
        );
        let doc = serde_json::to_value(&view).unwrap();
        assert_eq!(doc["problems"][0]["exitCode"], 1);
        assert_eq!(doc["problems"][2].get("exitCode"), None);
        // The same pods in another order fold the same.
        let mut reversed = refs.clone();
        reversed.reverse();
        assert_eq!(fold(&reversed), view);
    }

    #[test]
    fn selectors_match_labels() {
        let p = pod("web-1", json!({}));
        let sel = crate::status::labels::map;
        assert!(p.matches(&sel(&[("app", "web")])));
        assert!(!p.matches(&sel(&[("app", "api")])));
        assert!(!p.matches(&sel(&[("app", "web"), ("tier", "x")])));
        assert!(!p.matches(&sel(&[])));
    }

    #[test]
    fn warnings_are_read_and_the_latest_wins() {
        let event = |name: &str, kind: &str, type_: &str, reason: &str, at: &str, count: i32| {
            let e: Event = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "shop"},
                "involvedObject": {"kind": kind, "name": "web-1", "namespace": "shop"},
                "type": type_, "reason": reason, "message": format!("{reason} happened"),
                "count": count, "lastTimestamp": at,
            }))
            .unwrap();
            Warning::from_event(&e)
        };
        assert_eq!(
            event("e0", "Pod", "Normal", "Started", "2026-01-01T00:00:00Z", 1),
            None
        );
        assert_eq!(
            event(
                "e0",
                "Node",
                "Warning",
                "Rebooted",
                "2026-01-01T00:00:00Z",
                1
            ),
            None
        );
        let (key, a) = event("e1", "Pod", "Warning", "BackOff", "2026-01-01T00:00:05Z", 3).unwrap();
        assert_eq!(key, ("shop".to_string(), "e1".to_string()));
        assert_eq!((a.object.as_str(), a.count), ("Pod/web-1", 3));
        let (_, b) = event("e2", "Pod", "Warning", "Failed", "2026-01-01T00:00:09Z", 1).unwrap();
        assert_eq!(latest([&a, &b]), Some(b.clone()));
        assert_eq!(latest([&b, &a]), Some(b.clone()));
        assert_eq!(latest([]), None);
        // In the same second, the event written last wins.
        let (_, mut c) =
            event("e3", "Pod", "Warning", "Failed", "2026-01-01T00:00:09Z", 1).unwrap();
        c.message = "Error: ImagePullBackOff".into();
        c.written = 7;
        let mut b2 = b.clone();
        b2.written = 6;
        assert_eq!(latest([&c, &b2]), Some(c.clone()));
        assert_eq!(latest([&b2, &c]), Some(c.clone()));
        let doc = serde_json::to_value(&b).unwrap();
        assert_eq!(
            doc,
            json!({"reason": "Failed", "message": "Failed happened", "object": "Pod/web-1",
                "count": 1, "lastSeen": "2026-01-01T00:00:09Z"})
        );
    }
}
