//! The pods of the simulated cluster, kept in the store: after each
//! controller step the converger hands every workload's pod counts here,
//! and this module creates, updates and deletes Pod objects to match,
//! decides each pod's [`PodState`] (the image's fault, the cluster's pod
//! capacity, crash-loop timers), and records the Events the scheduler,
//! the kubelet and the controllers write. Pods nobody owns (`kubectl run`)
//! start and run too.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::events::{Event, EventType, Recorder, Source};
use super::object::{UpdateScope, name_of, namespace_of};
use super::pods::{self, ImageFault, Owner, PodState, Restarts};
use super::replicasets::Uids;
use super::resources::ResourceDef;
use super::rollout::{Pods, images};
use super::store::{Preconditions, Store};

/// What the kubelet remembers of a pod.
#[derive(Debug, Clone)]
struct Record {
    state: PodState,
    /// When the pod entered this kind of state (its conditions' time).
    since: DateTime<Utc>,
    /// When the state last changed (a crash loop's back-off counts from it).
    changed: DateTime<Utc>,
}

/// The pods of one workload after a controller step.
#[derive(Debug)]
pub(crate) struct Workload<'a> {
    pub(crate) object: &'a Value,
    pub(crate) pods: &'a Pods,
    /// New-template pods the cluster has room for (the rest are unschedulable).
    pub(crate) schedulable: u32,
    pub(crate) fault: Option<ImageFault>,
    /// The uids of a Deployment's ReplicaSets (its pods' owners).
    pub(crate) replica_sets: &'a Uids,
}

/// The fault of the first faulty image of a workload's template.
pub(crate) fn fault_of(
    object: &Value,
    faults: &BTreeMap<String, ImageFault>,
) -> Option<ImageFault> {
    images(object).iter().find_map(|i| faults.get(i).copied())
}

/// Pods, their states and events, across controller steps.
#[derive(Debug, Default)]
pub(crate) struct Kubelet {
    records: HashMap<(String, String), Record>,
    /// Pod names by owning workload uid.
    owned: HashMap<String, BTreeSet<String>>,
    recorder: Recorder,
}

impl Kubelet {
    /// Makes the store's pods of `w` match its counts; `seconds` scales
    /// crash-loop back-offs (one back-off second lasts that long).
    pub(crate) fn sync(
        &mut self,
        store: &Store,
        w: &Workload<'_>,
        seconds: f64,
        now: DateTime<Utc>,
    ) {
        let Some(def) = store.catalog().find("", "v1", "pods").cloned() else {
            return;
        };
        let uid = w.object["metadata"]["uid"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let namespace = namespace_of(w.object).to_string();
        let mut wanted: Vec<(Value, u32, bool)> = Vec::new();
        if w.pods.old > 0 && w.pods.old_hash != 0 {
            let old = Owner {
                workload: w.object,
                template_hash: w.pods.old_hash,
                replica_set_uid: w.replica_sets.old.as_deref(),
            };
            wanted.extend((0..w.pods.old).map(|i| (pods::pod(&old, i), i, true)));
        }
        let owner = Owner {
            workload: w.object,
            template_hash: w.pods.template_hash,
            replica_set_uid: w.replica_sets.new.as_deref(),
        };
        wanted.extend((0..w.pods.new).map(|i| (pods::pod(&owner, i), i, false)));
        let mut names = BTreeSet::new();
        for (pod, index, old) in wanted {
            let name = name_of(&pod).to_string();
            names.insert(name.clone());
            let key = (namespace.clone(), name);
            let previous = self.records.get(&key).cloned();
            let state = if old || index < w.pods.new_ready {
                PodState::Ready
            } else if index >= w.schedulable {
                PodState::Unschedulable
            } else {
                next_state(w.fault, previous.as_ref(), seconds, now)
            };
            self.apply(store, &def, pod, key, previous, state, now);
        }
        let gone: Vec<String> = self
            .owned
            .get(&uid)
            .map(|before| before.difference(&names).cloned().collect())
            .unwrap_or_default();
        for name in gone {
            self.remove(store, &def, &namespace, &name);
        }
        self.owned.insert(uid, names);
    }

    /// Deletes the pods of workloads that are gone (`live`: uids still there).
    pub(crate) fn forget_others(&mut self, store: &Store, live: &BTreeSet<String>) {
        let Some(def) = store.catalog().find("", "v1", "pods").cloned() else {
            return;
        };
        let gone: Vec<String> = self
            .owned
            .keys()
            .filter(|u| !live.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            for key in self.owned.remove(&uid).unwrap_or_default() {
                let namespace = self
                    .records
                    .keys()
                    .find(|(_, n)| *n == key)
                    .map(|(ns, _)| ns.clone())
                    .unwrap_or_default();
                self.remove(store, &def, &namespace, &key);
            }
        }
    }

    /// Runs pods nobody owns (`kubectl run`): they start, then run (or
    /// fail as their image's fault says).
    pub(crate) fn run_unowned(
        &mut self,
        store: &Store,
        faults: &BTreeMap<String, ImageFault>,
        seconds: f64,
        now: DateTime<Utc>,
    ) {
        let Some(def) = store.catalog().find("", "v1", "pods").cloned() else {
            return;
        };
        for pod in store.snapshot(&def) {
            let owned = pod
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|o| !o.is_empty());
            if owned || super::object::is_terminating(&pod) {
                continue;
            }
            let key = (namespace_of(&pod).to_string(), name_of(&pod).to_string());
            let previous = self.records.get(&key).cloned();
            let fault = pod
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .and_then(|cs| {
                    cs.iter()
                        .find_map(|c| faults.get(c["image"].as_str()?).copied())
                });
            let state = match (&previous, fault) {
                (None, _) => PodState::Starting,
                // Started once, it runs on: a pod without a fault stays Ready.
                (Some(_), None) => PodState::Ready,
                _ => next_state(fault, previous.as_ref(), seconds, now),
            };
            let mut spec_only = (*pod).clone();
            if let Some(object) = spec_only.as_object_mut() {
                object.remove("status");
            }
            self.apply(store, &def, spec_only, key, previous, state, now);
        }
        // Records of pods deleted by their users.
        let live: BTreeSet<(String, String)> = store
            .snapshot(&def)
            .iter()
            .map(|p| (namespace_of(p).to_string(), name_of(p).to_string()))
            .collect();
        self.records.retain(|k, _| live.contains(k));
    }

    /// Creates the pod if needed and writes its status when its state
    /// changed, recording the events of the change.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        store: &Store,
        def: &ResourceDef,
        mut pod: Value,
        key: (String, String),
        previous: Option<Record>,
        state: PodState,
        now: DateTime<Utc>,
    ) {
        let (namespace, name) = (&key.0, &key.1);
        let stored = match store.get(def, Some(namespace), name) {
            Ok(stored) if pods::needs_node(&stored, state) => {
                // A pod created by a user: the scheduler binds it once.
                let bound =
                    store.mutate(def, Some(namespace), name, UpdateScope::Main, false, |p| {
                        let mut p = p.clone();
                        pods::schedule(&mut p, state);
                        Ok(p)
                    });
                match bound {
                    Ok(bound) => bound,
                    Err(_) => return,
                }
            }
            Ok(stored) => stored,
            Err(_) => {
                pods::schedule(&mut pod, state);
                match store.create(def, Some(namespace), pod, false) {
                    Ok(created) => created,
                    Err(_) => return,
                }
            }
        };
        let since = match &previous {
            Some(r) if same_kind(r.state, state) => r.since,
            _ => now,
        };
        if previous.as_ref().is_some_and(|r| r.state == state) && stored.get("status").is_some() {
            return;
        }
        let changed = now;
        self.events(
            store,
            &stored,
            previous.as_ref().map(|r| r.state),
            state,
            now,
        );
        let mut status = pods::status(&stored, state, since);
        pods::name_messages(&mut status, &stored);
        let written = store.set_status(def, Some(namespace), name, status);
        if written.is_ok() {
            self.records.insert(
                key,
                Record {
                    state,
                    since,
                    changed,
                },
            );
        }
    }

    fn remove(&mut self, store: &Store, def: &ResourceDef, namespace: &str, name: &str) {
        let _ = store.delete(def, Some(namespace), name, &Preconditions::default(), false);
        self.records
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// The events a pod's move from `before` to `after` makes.
    fn events(
        &mut self,
        store: &Store,
        pod: &Arc<Value>,
        before: Option<PodState>,
        after: PodState,
        now: DateTime<Utc>,
    ) {
        let image = pod
            .pointer("/spec/containers/0/image")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let container = pod
            .pointer("/spec/containers/0/name")
            .and_then(Value::as_str)
            .unwrap_or("app")
            .to_string();
        let mut record = |kind, reason, message: String, source| {
            self.recorder.record(
                store,
                Event {
                    object: pod,
                    kind,
                    reason,
                    message,
                    source,
                },
                now,
            );
        };
        if before.is_none() {
            if after == PodState::Unschedulable {
                record(
                    EventType::Warning,
                    "FailedScheduling",
                    pods::unschedulable_message(),
                    Source::Scheduler,
                );
                return;
            }
            let node = pod
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or("");
            record(
                EventType::Normal,
                "Scheduled",
                format!(
                    "Successfully assigned {}/{} to {node}",
                    namespace_of(pod),
                    name_of(pod)
                ),
                Source::Scheduler,
            );
        }
        match after {
            PodState::Ready if !matches!(before, Some(PodState::Ready | PodState::NotReady)) => {
                record(
                    EventType::Normal,
                    "Started",
                    format!("Started container {container}"),
                    Source::Kubelet,
                );
            }
            PodState::NotReady => record(
                EventType::Warning,
                "Unhealthy",
                "Readiness probe failed: HTTP probe failed with statuscode: 503".into(),
                Source::Kubelet,
            ),
            PodState::PullError { backoff: false } => {
                record(
                    EventType::Warning,
                    "Failed",
                    format!(
                        "Failed to pull image \"{image}\": {}",
                        pods::pull_error(&image)
                    ),
                    Source::Kubelet,
                );
                record(
                    EventType::Warning,
                    "Failed",
                    "Error: ErrImagePull".into(),
                    Source::Kubelet,
                );
            }
            PodState::PullError { backoff: true } => {
                record(
                    EventType::Normal,
                    "BackOff",
                    format!("Back-off pulling image \"{image}\""),
                    Source::Kubelet,
                );
                record(
                    EventType::Warning,
                    "Failed",
                    "Error: ImagePullBackOff".into(),
                    Source::Kubelet,
                );
            }
            PodState::Crashing { restarts, .. } if !restarts.running => record(
                EventType::Warning,
                "BackOff",
                format!(
                    "Back-off restarting failed container {container} in pod {}_{}({})",
                    name_of(pod),
                    namespace_of(pod),
                    pod["metadata"]["uid"].as_str().unwrap_or("")
                ),
                Source::Kubelet,
            ),
            _ => {}
        }
    }

    /// Records an event about a workload (the controllers' events).
    pub(crate) fn workload_event(
        &mut self,
        store: &Store,
        object: &Value,
        reason: &str,
        message: String,
        now: DateTime<Utc>,
    ) {
        let source = if object["kind"] == "StatefulSet" {
            Source::StatefulSetController
        } else {
            Source::DeploymentController
        };
        self.recorder.record(
            store,
            Event {
                object,
                kind: EventType::Normal,
                reason,
                message,
                source,
            },
            now,
        );
    }
}

/// Whether two states are the same condition (a crash loop counting
/// restarts, or a pull failing then backing off, keeps its start time).
fn same_kind(a: PodState, b: PodState) -> bool {
    std::mem::discriminant(&a) == std::mem::discriminant(&b)
}

/// The next state of a pod that is not ready, from the image's fault.
fn next_state(
    fault: Option<ImageFault>,
    previous: Option<&Record>,
    seconds: f64,
    now: DateTime<Utc>,
) -> PodState {
    let waited = |r: &Record| (now - r.changed).num_milliseconds() as f64 / 1000.0;
    match fault {
        None => PodState::Starting,
        Some(ImageFault::NotReady) => PodState::NotReady,
        Some(ImageFault::PullError) => match previous {
            // ErrImagePull first, then ImagePullBackOff.
            Some(r) if matches!(r.state, PodState::PullError { .. }) => {
                PodState::PullError { backoff: true }
            }
            _ => PodState::PullError { backoff: false },
        },
        Some(fault @ (ImageFault::Crash | ImageFault::OomKilled)) => {
            let oom = fault == ImageFault::OomKilled;
            let restarts = match previous {
                Some(r) => match r.state {
                    PodState::Crashing { restarts, .. } => {
                        pods::crash_step(restarts, waited(r), seconds)
                    }
                    _ => Restarts {
                        count: 0,
                        running: true,
                        backoff_secs: 0,
                    },
                },
                None => Restarts {
                    count: 0,
                    running: true,
                    backoff_secs: 0,
                },
            };
            PodState::Crashing { restarts, oom }
        }
    }
}
