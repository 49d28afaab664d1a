//! The status the custom workload controllers write, from the pods the
//! emulated controller holds (`rollout::Pods`), as each project's own
//! controller computes it (field names from their API types): KusionStack's
//! CollaSet controller, OpenKruise's CloneSet controller and the Argo
//! Rollouts controller. Pure functions over JSON, tested as tables.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::object::selector_string;
use super::object::{name_of, timestamp};
use super::pods::hash_label;
use super::rollout::{Pods, Progress, condition, desired_replicas};
use super::workloads::WorkloadKind;

/// The status `kind`'s controller writes for `obj` with `pods`.
pub fn status(kind: &WorkloadKind, obj: &Value, pods: &Pods, now: DateTime<Utc>) -> Value {
    match kind.kind {
        "CollaSet" => collaset(obj, pods),
        "CloneSet" => cloneset(obj, pods, now),
        _ => rollout(obj, pods, now),
    }
}

fn generation(obj: &Value) -> i64 {
    obj.pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// `{name}-{hash}`: a revision name.
fn revision(obj: &Value, hash: u64) -> String {
    format!("{}-{}", name_of(obj), hash_label(hash))
}

/// The revision the pods ran before the current template: the previous
/// status's, until the rollout completes.
fn current_revision(obj: &Value, pods: &Pods, field: &str, updated: &str) -> String {
    let previous = obj
        .pointer(&format!("/status/{field}"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if pods.complete(desired_replicas(obj)) || previous.is_empty() {
        updated.to_string()
    } else {
        previous.to_string()
    }
}

/// Drops the counts that are zero (CollaSet and Rollout statuses omit them).
fn omit_zero(mut status: Value, keys: &[&str]) -> Value {
    if let Some(map) = status.as_object_mut() {
        for key in keys {
            if map.get(*key) == Some(&json!(0)) {
                map.remove(*key);
            }
        }
    }
    status
}

/// The progress deadline has passed without the rollout completing.
fn timed_out(obj: &Value, pods: &Pods, now: DateTime<Utc>, default: Option<i64>) -> bool {
    let deadline = obj
        .pointer("/spec/progressDeadlineSeconds")
        .and_then(Value::as_i64)
        .or(default);
    deadline.is_some_and(|d| {
        !pods.complete(desired_replicas(obj)) && (now - pods.last_progress).num_seconds() > d
    })
}

/// KusionStack's CollaSet: every count omitted when zero; an `Update`
/// condition once the pods run the updated revision.
fn collaset(obj: &Value, pods: &Pods) -> Value {
    let ready = pods.old + pods.new_ready;
    let updated = revision(obj, pods.template_hash);
    let mut status = json!({
        "observedGeneration": generation(obj),
        "replicas": pods.old + pods.new,
        "scheduledReplicas": pods.old + pods.new,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "updatedReplicas": pods.new,
        "updatedReadyReplicas": pods.new_ready,
        "updatedAvailableReplicas": pods.new_ready,
        "currentRevision": current_revision(obj, pods, "currentRevision", &updated),
        "updatedRevision": updated,
    });
    if pods.complete(desired_replicas(obj)) {
        status["conditions"] = json!([{"type": "Update", "status": "True", "reason": "Updated",
            "lastTransitionTime": obj.pointer("/status/conditions/0/lastTransitionTime").cloned()
                .unwrap_or_else(|| json!(timestamp(pods.last_progress)))}]);
    }
    omit_zero(
        status,
        &[
            "replicas",
            "scheduledReplicas",
            "readyReplicas",
            "availableReplicas",
            "updatedReplicas",
            "updatedReadyReplicas",
            "updatedAvailableReplicas",
        ],
    )
}

/// OpenKruise's CloneSet: the five required counts always present; a
/// `Progressing` condition only with `progressDeadlineSeconds`.
fn cloneset(obj: &Value, pods: &Pods, now: DateTime<Utc>) -> Value {
    let ready = pods.old + pods.new_ready;
    let updated = revision(obj, pods.template_hash);
    let mut status = json!({
        "observedGeneration": generation(obj),
        "replicas": pods.old + pods.new,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "updatedReplicas": pods.new,
        "updatedReadyReplicas": pods.new_ready,
        "updatedAvailableReplicas": pods.new_ready,
        "expectedUpdatedReplicas": desired_replicas(obj),
        "currentRevision": current_revision(obj, pods, "currentRevision", &updated),
        "updateRevision": updated,
        "collisionCount": 0,
        "labelSelector": selector_string(obj),
    });
    if obj.pointer("/spec/progressDeadlineSeconds").is_some() {
        let stamp = timestamp(now);
        let progressing = if pods.complete(desired_replicas(obj)) {
            condition(
                obj,
                "Progressing",
                true,
                "CloneSetAvailable",
                "CloneSet is available".into(),
                &stamp,
            )
        } else if timed_out(obj, pods, now, None) {
            let message = format!("CloneSet revision {updated} has timed out progressing");
            condition(
                obj,
                "Progressing",
                false,
                "ProgressDeadlineExceeded",
                message,
                &stamp,
            )
        } else {
            condition(
                obj,
                "Progressing",
                true,
                "CloneSetUpdated",
                "CloneSet is progressing".into(),
                &stamp,
            )
        };
        status["conditions"] = json!([progressing]);
    }
    status
}

/// Argo Rollouts' Rollout: `observedGeneration` as a string, the pod hash
/// of the current and the stable ReplicaSet, `phase` and `message` in the
/// order the controller decides them, and its conditions.
fn rollout(obj: &Value, pods: &Pods, now: DateTime<Utc>) -> Value {
    let desired = desired_replicas(obj);
    let ready = pods.old + pods.new_ready;
    let current = hash_label(pods.template_hash);
    let stable = if pods.complete(desired) {
        current.clone()
    } else {
        obj.pointer("/status/stableRS")
            .and_then(Value::as_str)
            .map_or_else(|| current.clone(), str::to_string)
    };
    let rs = format!("{}-{current}", name_of(obj));
    let stamp = timestamp(now);
    let failed = timed_out(obj, pods, now, Some(600));
    let (phase, message) = if failed {
        (
            "Degraded",
            format!("ProgressDeadlineExceeded: ReplicaSet \"{rs}\" has timed out progressing."),
        )
    } else if obj.pointer("/spec/paused") == Some(&json!(true)) {
        ("Paused", "manually paused".to_string())
    } else if pods.new < desired {
        (
            "Progressing",
            "more replicas need to be updated".to_string(),
        )
    } else if pods.new_ready < pods.new {
        (
            "Progressing",
            "updated replicas are still becoming available".to_string(),
        )
    } else if pods.old > 0 {
        (
            "Progressing",
            "old replicas are pending termination".to_string(),
        )
    } else if stable != current {
        (
            "Progressing",
            "waiting for the stable ReplicaSet to be updated".to_string(),
        )
    } else {
        ("Healthy", String::new())
    };
    let progress = if failed {
        Progress::TimedOut
    } else if phase == "Healthy" {
        Progress::Complete
    } else {
        Progress::Progressing
    };
    let progressing = progress.condition(obj, &rs, &stamp);
    let available = condition(
        obj,
        "Available",
        ready >= desired,
        "AvailableReason",
        if ready >= desired {
            "Rollout has minimum availability".into()
        } else {
            "Rollout does not have minimum availability".into()
        },
        &stamp,
    );
    let mut status = json!({
        "observedGeneration": generation(obj).to_string(),
        "replicas": pods.old + pods.new,
        "HPAReplicas": pods.old + pods.new,
        "updatedReplicas": pods.new,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentPodHash": current,
        "stableRS": stable,
        "selector": selector_string(obj),
        "phase": phase,
        "conditions": [available, progressing],
    });
    if !message.is_empty() {
        status["message"] = json!(message);
    }
    omit_zero(
        status,
        &[
            "replicas",
            "HPAReplicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::by_kind;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn object(kind: &str, replicas: u32, extra: Value) -> Value {
        let mut obj = json!({
            "kind": kind,
            "metadata": {"name": "web", "namespace": "shop", "generation": 3},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}},
        });
        if let (Some(spec), Some(extra)) = (obj["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        obj
    }

    fn pods(old: u32, new: u32, new_ready: u32, since: i64) -> Pods {
        Pods {
            old,
            old_hash: 0xaa,
            new,
            new_ready,
            template_hash: 0xbb,
            last_progress: t(since),
        }
    }

    #[test]
    fn collaset_omits_zero_counts_and_says_updated_once_done() {
        let kind = by_kind("CollaSet").unwrap();
        let done = status(
            kind,
            &object("CollaSet", 3, json!({})),
            &pods(0, 3, 3, 0),
            t(1),
        );
        assert_eq!(done["readyReplicas"], 3);
        assert_eq!(done["updatedRevision"], "web-bb");
        assert_eq!(done["currentRevision"], "web-bb");
        assert_eq!(done["conditions"][0]["reason"], "Updated");
        let starting = status(
            kind,
            &object("CollaSet", 3, json!({})),
            &pods(0, 1, 0, 0),
            t(1),
        );
        assert_eq!(starting.get("readyReplicas"), None);
        assert_eq!(starting["updatedReplicas"], 1);
        assert_eq!(starting.get("conditions"), None);
    }

    #[test]
    fn cloneset_reports_its_progress_deadline_only_when_set() {
        let kind = by_kind("CloneSet").unwrap();
        let plain = status(
            kind,
            &object("CloneSet", 2, json!({})),
            &pods(2, 1, 0, 0),
            t(900),
        );
        assert_eq!(plain.get("conditions"), None);
        assert_eq!(plain["readyReplicas"], 2);
        assert_eq!(plain["labelSelector"], "app=web");
        // (pods, now, status, reason)
        let cases = [
            (pods(0, 2, 2, 0), 1, "True", "CloneSetAvailable"),
            (pods(2, 1, 0, 0), 5, "True", "CloneSetUpdated"),
            (pods(2, 1, 0, 0), 11, "False", "ProgressDeadlineExceeded"),
        ];
        for (p, now, want_status, reason) in cases {
            let obj = object("CloneSet", 2, json!({"progressDeadlineSeconds": 10}));
            let got = status(kind, &obj, &p, t(now));
            let c = &got["conditions"][0];
            assert_eq!(
                (c["status"].as_str(), c["reason"].as_str()),
                (Some(want_status), Some(reason)),
                "{p:?}"
            );
        }
    }

    #[test]
    fn rollout_phases_in_the_controllers_order() {
        let kind = by_kind("Rollout").unwrap();
        // (pods, spec extras, now, phase, message)
        let cases = [
            (pods(0, 3, 3, 0), json!({}), 1, "Healthy", None),
            (
                pods(3, 1, 0, 0),
                json!({}),
                1,
                "Progressing",
                Some("more replicas need to be updated"),
            ),
            (
                pods(0, 3, 1, 0),
                json!({}),
                1,
                "Progressing",
                Some("updated replicas are still becoming available"),
            ),
            (
                pods(3, 1, 0, 0),
                json!({"paused": true}),
                1,
                "Paused",
                Some("manually paused"),
            ),
            (
                pods(3, 1, 0, 0),
                json!({"progressDeadlineSeconds": 10}),
                11,
                "Degraded",
                Some("ProgressDeadlineExceeded: ReplicaSet \"web-bb\" has timed out progressing."),
            ),
        ];
        for (p, extra, now, phase, message) in cases {
            let got = status(kind, &object("Rollout", 3, extra), &p, t(now));
            assert_eq!(got["phase"], phase, "{p:?}");
            assert_eq!(got["message"].as_str(), message, "{p:?}");
            assert_eq!(got["observedGeneration"], "3");
            assert_eq!(got["currentPodHash"], "bb");
        }
        let failed = status(
            kind,
            &object("Rollout", 3, json!({"progressDeadlineSeconds": 10})),
            &pods(3, 1, 0, 0),
            t(11),
        );
        let progressing = &failed["conditions"][1];
        assert_eq!(
            (
                progressing["status"].as_str(),
                progressing["reason"].as_str()
            ),
            (Some("False"), Some("ProgressDeadlineExceeded"))
        );
    }
}
