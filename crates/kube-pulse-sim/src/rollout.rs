//! The rollout model of Deployments and StatefulSets: how many pods of the
//! old and the new template a workload has after each controller step
//! ([`Pods`]), and the status that implies, as the deployment and
//! statefulset controllers write it.
//!
//! Pure functions over JSON (tested as tables), below the controllers:
//! `replicasets.rs`, `kubelet.rs` and `converger.rs`, whose loop applies
//! them to the store.

use std::hash::{Hash, Hasher};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::object::{name_of, timestamp};
use super::pods::Owner;

/// The pods behind one workload, as the emulated controller sees them.
#[derive(Debug, Clone, PartialEq)]
pub struct Pods {
    /// Ready pods of the previous pod template, still serving during a rollout.
    pub old: u32,
    /// The previous pod template's hash (names the old pods).
    pub old_hash: u64,
    /// Pods of the current template.
    pub new: u32,
    /// Ready pods of the current template.
    pub new_ready: u32,
    pub template_hash: u64,
    pub last_progress: DateTime<Utc>,
}

impl Pods {
    pub fn new(now: DateTime<Utc>) -> Self {
        Self {
            old: 0,
            old_hash: 0,
            new: 0,
            new_ready: 0,
            template_hash: 0,
            last_progress: now,
        }
    }

    fn counts(&self) -> (u32, u32, u32) {
        (self.old, self.new, self.new_ready)
    }

    /// One controller step towards `desired` pods of the template `hash`.
    /// At most `ready_cap` pods of the new template become ready: 0 for a
    /// failing image (its pods are created but never get ready), fewer than
    /// `desired` when the cluster has no room for the rest. With
    /// `recreate` (a Deployment's `Recreate` strategy) a new template first
    /// removes every old pod; otherwise old ready pods serve until replaced.
    pub fn step(
        &mut self,
        desired: u32,
        hash: u64,
        ready_cap: u32,
        recreate: bool,
        per_tick: u32,
        now: DateTime<Utc>,
    ) {
        let before = self.counts();
        if hash != self.template_hash {
            // A new rollout: ready pods of the old template keep serving,
            // unless the strategy recreates.
            self.old = if recreate {
                0
            } else {
                self.old + self.new_ready
            };
            if self.template_hash != 0 {
                self.old_hash = self.template_hash;
            }
            self.new = 0;
            self.new_ready = 0;
            self.template_hash = hash;
            self.last_progress = now;
        }
        if self.new_ready < ready_cap {
            self.new_ready = self.new.min(self.new_ready + per_tick).min(ready_cap);
        }
        if self.new < desired {
            self.new += per_tick.min(desired - self.new);
        } else if self.new > desired {
            self.new -= per_tick.min(self.new - desired);
            self.new_ready = self.new_ready.min(self.new);
        }
        let keep_old = desired.saturating_sub(self.new_ready);
        if self.old > keep_old {
            self.old = keep_old.max(self.old.saturating_sub(per_tick));
        }
        if self.counts() != before {
            self.last_progress = now;
        }
    }

    pub fn complete(&self, desired: u32) -> bool {
        self.old == 0 && self.new == desired && self.new_ready == desired
    }
}

/// Hash of the pod template, the emulated `pod-template-hash`.
pub fn template_hash(obj: &Value) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    obj.pointer("/spec/template")
        .map(Value::to_string)
        .unwrap_or_default()
        .hash(&mut hasher);
    // 0 means "no rollout yet".
    hasher.finish().max(1)
}

/// Container images of the pod template.
pub fn images(obj: &Value) -> Vec<String> {
    obj.pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["image"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `spec.replicas` (1 when unset).
pub(crate) fn desired_replicas(obj: &Value) -> u32 {
    obj.pointer("/spec/replicas")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .min(u32::MAX as u64) as u32
}

/// A condition, keeping its timestamps when status and reason are unchanged.
pub(crate) fn condition(
    old: &Value,
    kind: &str,
    status: bool,
    reason: &str,
    message: String,
    now: &str,
) -> Value {
    let status = if status { "True" } else { "False" };
    let previous = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind));
    let (update, transition) = match previous {
        Some(p) if p["status"] == status && p["reason"] == reason => {
            (p["lastUpdateTime"].clone(), p["lastTransitionTime"].clone())
        }
        Some(p) if p["status"] == status => (json!(now), p["lastTransitionTime"].clone()),
        _ => (json!(now), json!(now)),
    };
    json!({
        "type": kind,
        "status": status,
        "lastUpdateTime": update,
        "lastTransitionTime": transition,
        "reason": reason,
        "message": message,
    })
}

/// Where a rollout through ReplicaSets stands, as its `Progressing`
/// condition says (a Deployment's, and an Argo Rollout's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// The new ReplicaSet `rs` serves every replica.
    Complete,
    /// No progress within the progress deadline.
    TimedOut,
    Progressing,
}

impl Progress {
    /// The `Progressing` condition of `obj` about ReplicaSet `rs`.
    pub(crate) fn condition(self, obj: &Value, rs: &str, stamp: &str) -> Value {
        let (ok, reason, message) = match self {
            Progress::Complete => (
                true,
                "NewReplicaSetAvailable",
                format!("ReplicaSet \"{rs}\" has successfully progressed."),
            ),
            Progress::TimedOut => (
                false,
                "ProgressDeadlineExceeded",
                format!("ReplicaSet \"{rs}\" has timed out progressing."),
            ),
            Progress::Progressing => (
                true,
                "ReplicaSetUpdated",
                format!("ReplicaSet \"{rs}\" is progressing."),
            ),
        };
        condition(obj, "Progressing", ok, reason, message, stamp)
    }
}

/// Deployment status for the given pods (what the deployment controller writes).
pub fn deployment_status(obj: &Value, pods: &Pods, now: DateTime<Utc>) -> Value {
    let desired = desired_replicas(obj);
    let ready = pods.old + pods.new_ready;
    let total = pods.old + pods.new;
    let max_unavailable = desired / 4;
    let deadline = obj
        .pointer("/spec/progressDeadlineSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(600);
    let rs = Owner {
        workload: obj,
        template_hash: pods.template_hash,
        replica_set_uid: None,
    }
    .replica_set();
    let stamp = timestamp(now);
    let available = condition(
        obj,
        "Available",
        ready >= desired.saturating_sub(max_unavailable),
        if ready >= desired.saturating_sub(max_unavailable) {
            "MinimumReplicasAvailable"
        } else {
            "MinimumReplicasUnavailable"
        },
        if ready >= desired.saturating_sub(max_unavailable) {
            "Deployment has minimum availability.".into()
        } else {
            "Deployment does not have minimum availability.".into()
        },
        &stamp,
    );
    let progress = if pods.complete(desired) {
        Progress::Complete
    } else if (now - pods.last_progress).num_seconds() > deadline {
        Progress::TimedOut
    } else {
        Progress::Progressing
    };
    let progressing = progress.condition(obj, &rs, &stamp);
    let mut status = json!({
        "observedGeneration": obj.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        "replicas": total,
        "updatedReplicas": pods.new,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "conditions": [available, progressing],
    });
    let unavailable = total
        .saturating_sub(ready)
        .max(desired.saturating_sub(ready));
    if unavailable > 0 {
        status["unavailableReplicas"] = json!(unavailable);
    }
    // The apiserver omits zero-valued counters.
    for key in [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ] {
        if status[key] == json!(0) {
            status.as_object_mut().unwrap().remove(key);
        }
    }
    status
}

/// StatefulSet status for the given pods (no conditions, revisions instead).
pub fn statefulset_status(obj: &Value, pods: &Pods, previous_revision: &str) -> Value {
    let desired = desired_replicas(obj);
    let update_revision = format!("{}-{:x}", name_of(obj), pods.template_hash & 0xff_ffff);
    let done = pods.complete(desired);
    let current_revision = if done || previous_revision.is_empty() {
        update_revision.clone()
    } else {
        previous_revision.to_string()
    };
    let ready = pods.old + pods.new_ready;
    json!({
        "observedGeneration": obj.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        "replicas": pods.old + pods.new,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": if done { pods.new } else { pods.old },
        "updatedReplicas": pods.new,
        "currentRevision": current_revision,
        "updateRevision": update_revision,
        "collisionCount": 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    fn deployment(replicas: u32, image: &str) -> Value {
        json!({
            "metadata": {"name": "web", "namespace": "shop", "generation": 2},
            "spec": {"replicas": replicas, "progressDeadlineSeconds": 30,
                     "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
        })
    }

    /// Runs ticks and returns (old, new, new_ready) after each.
    fn run_ticks(
        pods: &mut Pods,
        obj: &Value,
        failing: bool,
        ticks: usize,
    ) -> Vec<(u32, u32, u32)> {
        (0..ticks)
            .map(|i| {
                pods.step(
                    desired_replicas(obj),
                    template_hash(obj),
                    if failing { 0 } else { u32::MAX },
                    obj.pointer("/spec/strategy/type") == Some(&json!("Recreate")),
                    1,
                    t(i as i64),
                );
                pods.counts()
            })
            .collect()
    }

    #[test]
    fn scale_up_creates_then_readies_one_pod_per_tick() {
        let obj = deployment(3, "nginx:1");
        let mut pods = Pods::new(t(0));
        let seen = run_ticks(&mut pods, &obj, false, 5);
        assert_eq!(
            seen,
            [(0, 1, 0), (0, 2, 1), (0, 3, 2), (0, 3, 3), (0, 3, 3)]
        );
        assert!(pods.complete(3));
    }

    #[test]
    fn scale_down_removes_pods() {
        let mut pods = Pods {
            old: 0,
            old_hash: 0,
            new: 3,
            new_ready: 3,
            template_hash: 0,
            last_progress: t(0),
        };
        let obj = deployment(0, "nginx:1");
        pods.template_hash = template_hash(&obj);
        assert_eq!(
            run_ticks(&mut pods, &obj, false, 4),
            [(0, 2, 2), (0, 1, 1), (0, 0, 0), (0, 0, 0)]
        );
    }

    #[test]
    fn rollout_replaces_old_pods_as_new_ones_get_ready() {
        let v1 = deployment(2, "nginx:1");
        let mut pods = Pods::new(t(0));
        run_ticks(&mut pods, &v1, false, 4);
        assert!(pods.complete(2));
        let v2 = deployment(2, "nginx:2");
        let seen = run_ticks(&mut pods, &v2, false, 5);
        assert_eq!(
            seen,
            [(2, 1, 0), (1, 2, 1), (0, 2, 2), (0, 2, 2), (0, 2, 2)]
        );
    }

    #[test]
    fn failing_image_never_gets_ready_and_old_pods_stay() {
        let v1 = deployment(2, "nginx:1");
        let mut pods = Pods::new(t(0));
        run_ticks(&mut pods, &v1, false, 4);
        let bad = deployment(2, "nginx:broken");
        let seen = run_ticks(&mut pods, &bad, true, 4);
        assert_eq!(seen.last(), Some(&(2, 2, 0)));
        assert!(!pods.complete(2));
    }

    #[test]
    fn recreate_removes_old_pods_first_so_a_failing_image_serves_nothing() {
        let mut v1 = deployment(2, "nginx:1");
        v1["spec"]["strategy"] = json!({"type": "Recreate"});
        let mut pods = Pods::new(t(0));
        run_ticks(&mut pods, &v1, false, 4);
        assert!(pods.complete(2));
        let mut bad = v1.clone();
        bad["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:broken");
        let seen = run_ticks(&mut pods, &bad, true, 3);
        assert_eq!(seen, [(0, 1, 0), (0, 2, 0), (0, 2, 0)]);
    }

    #[test]
    fn deployment_status_table() {
        let obj = deployment(3, "nginx:1");
        let hash = template_hash(&obj);
        let pods = |old, new, new_ready, since| Pods {
            old,
            old_hash: 0,
            new,
            new_ready,
            template_hash: hash,
            last_progress: t(since),
        };
        // (pods, now, ready, updated, available cond, progressing reason)
        let cases = [
            (pods(0, 3, 3, 0), 1, 3, 3, "True", "NewReplicaSetAvailable"),
            (pods(0, 2, 1, 0), 1, 1, 2, "False", "ReplicaSetUpdated"),
            (pods(2, 3, 1, 0), 1, 3, 3, "True", "ReplicaSetUpdated"),
            (
                pods(0, 3, 0, 0),
                31,
                0,
                3,
                "False",
                "ProgressDeadlineExceeded",
            ),
            (pods(0, 3, 0, 0), 29, 0, 3, "False", "ReplicaSetUpdated"),
        ];
        for (p, now, ready, updated, available, reason) in cases {
            let status = deployment_status(&obj, &p, t(now));
            let ready_seen = status
                .get("readyReplicas")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            assert_eq!(ready_seen, ready, "{p:?}");
            assert_eq!(status["updatedReplicas"], updated, "{p:?}");
            assert_eq!(status["observedGeneration"], 2);
            assert_eq!(status["conditions"][0]["status"], available, "{p:?}");
            assert_eq!(status["conditions"][1]["reason"], reason, "{p:?}");
        }
    }

    #[test]
    fn conditions_keep_timestamps_while_unchanged() {
        let mut obj = deployment(1, "nginx:1");
        let p = Pods {
            old: 0,
            old_hash: 0,
            new: 1,
            new_ready: 1,
            template_hash: template_hash(&obj),
            last_progress: t(0),
        };
        let first = deployment_status(&obj, &p, t(1));
        obj["status"] = first.clone();
        let second = deployment_status(&obj, &p, t(50));
        assert_eq!(
            first, second,
            "an unchanged status must not produce an update"
        );
    }

    #[test]
    fn statefulset_revisions() {
        let obj = json!({"metadata": {"name": "db", "generation": 1}, "spec": {"replicas": 2, "template": {"a": 1}}});
        let hash = template_hash(&obj);
        let done = Pods {
            old: 0,
            old_hash: 0,
            new: 2,
            new_ready: 2,
            template_hash: hash,
            last_progress: t(0),
        };
        let status = statefulset_status(&obj, &done, "db-old");
        assert_eq!(status["currentRevision"], status["updateRevision"]);
        assert_eq!(status["currentReplicas"], 2);
        let rolling = Pods {
            old: 1,
            old_hash: 0,
            new: 1,
            new_ready: 1,
            ..done
        };
        let status = statefulset_status(&obj, &rolling, "db-old");
        assert_eq!(status["currentRevision"], "db-old");
        assert_eq!(status["updatedReplicas"], 1);
        assert_eq!(status["readyReplicas"], 2);
    }
}
