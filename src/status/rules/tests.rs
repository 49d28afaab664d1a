//! Table tests of the built-in rules (status objects from each project's
//! documentation and tests, fields by name, values written here) and of
//! loading rules: what is refused, with the rule, the field and why.

use serde_json::{Value, json};

use super::*;
use crate::status::app::{AppPhase, WorkloadHealth, stable_state};

const LABEL: &str = "app.kubernetes.io/name";

fn rules() -> HealthRules {
    HealthRules::default()
}

/// An object of the rule's kind with this generation, spec and status.
fn object(kind: &str, generation: i64, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "v1alpha1",
        "kind": kind,
        "metadata": {"name": "web", "namespace": "shop", "generation": generation, "labels": {LABEL: "shop"}},
        "spec": spec,
        "status": status,
    })
}

fn template() -> Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "web:2"}]}})
}

/// (what the case is, the object, health, the health's message, failure reason)
type Case = (
    &'static str,
    Value,
    WorkloadHealth,
    &'static str,
    Option<&'static str>,
);

fn check(kind: &str, cases: Vec<Case>) {
    let rules = rules();
    let rule = rules.for_kind(kind).expect("a built-in rule");
    for (what, obj, health, message, reason) in cases {
        let w = rule.read(&obj, LABEL);
        assert_eq!(
            w.health(),
            (health, message.to_string()),
            "{kind}: {what}: {w:?}"
        );
        assert_eq!(
            w.failure.as_ref().map(|f| f.reason.as_str()),
            reason,
            "{kind}: {what}"
        );
        assert_eq!(
            (w.app.as_str(), w.kind),
            ("shop", rule.kind),
            "{kind}: {what}"
        );
    }
}

#[test]
fn collaset() {
    let spec = |replicas: i64| json!({"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template()});
    // The KusionStack docs' healthy set (kubectl get cls: 3/3/3/3/3/3).
    let healthy = json!({
        "availableReplicas": 3, "collisionCount": 0,
        "conditions": [{"type": "Update", "status": "True", "reason": "Updated", "lastTransitionTime": "2023-09-01T03:56:09Z"}],
        "currentRevision": "collaset-sample-6d7b7c58f", "observedGeneration": 1, "operatingReplicas": 0,
        "readyReplicas": 3, "replicas": 3, "scheduledReplicas": 3, "updatedAvailableReplicas": 3,
        "updatedReadyReplicas": 3, "updatedReplicas": 3, "updatedRevision": "collaset-sample-6d7b7c58f",
    });
    let w = rules()
        .for_kind("CollaSet")
        .unwrap()
        .read(&object("CollaSet", 1, spec(3), healthy.clone()), LABEL);
    assert_eq!(w.selector.get("app").map(String::as_str), Some("web"));
    assert_eq!(w.images, ["web:2"]);
    let mut partitioned = spec(3);
    partitioned["updateStrategy"] = json!({"rollingUpdate": {"byPartition": {"partition": 2}}});
    let mut paused = spec(3);
    paused["paused"] = json!(true);
    let cases: Vec<Case> = vec![
        (
            "the docs' healthy set",
            object("CollaSet", 1, spec(3), healthy.clone()),
            WorkloadHealth::Current,
            "3/3 ready",
            None,
        ),
        (
            "a new generation not yet observed",
            object("CollaSet", 2, spec(3), healthy.clone()),
            WorkloadHealth::InProgress,
            "waiting for the controller to observe generation 2",
            None,
        ),
        (
            // Zero counts are omitted.
            "scaling out from nothing",
            object(
                "CollaSet",
                1,
                spec(3),
                json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}),
            ),
            WorkloadHealth::InProgress,
            "rollout waiting: 1 of 3 updated",
            None,
        ),
        (
            "an update that failed",
            object(
                "CollaSet",
                1,
                spec(3),
                json!({
                    "observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "availableReplicas": 3, "updatedReplicas": 1,
                    "conditions": [{"type": "Update", "status": "False", "reason": "UpdateFailed", "message": "fail to update Pod web-2: the object has been modified"}],
                }),
            ),
            WorkloadHealth::Failed,
            "fail to update Pod web-2: the object has been modified",
            Some("UpdateFailed"),
        ),
        (
            "a partition keeping 2 pods at the old revision",
            object(
                "CollaSet",
                1,
                partitioned,
                json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "availableReplicas": 3, "updatedReplicas": 1}),
            ),
            WorkloadHealth::InProgress,
            "rollout paused: 1 of 3 updated",
            None,
        ),
        (
            "paused",
            object(
                "CollaSet",
                1,
                paused,
                json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "availableReplicas": 3, "updatedReplicas": 0}),
            ),
            WorkloadHealth::InProgress,
            "rollout paused: 0 of 3 updated",
            None,
        ),
        (
            // spec.replicas defaults to 0 for a CollaSet.
            "no replicas asked",
            object(
                "CollaSet",
                1,
                json!({"selector": {"matchLabels": {"app": "web"}}, "template": template()}),
                json!({"observedGeneration": 1}),
            ),
            WorkloadHealth::Current,
            "0/0 ready",
            None,
        ),
    ];
    check("CollaSet", cases);
}

#[test]
fn cloneset() {
    let spec = |strategy: Value| json!({"replicas": 5, "selector": {"matchLabels": {"app": "web"}}, "template": template(), "updateStrategy": strategy});
    let counts = |updated: i64, expected_updated: i64| {
        json!({
            "observedGeneration": 2, "replicas": 5, "readyReplicas": 5, "availableReplicas": 5,
            "updatedReplicas": updated, "updatedReadyReplicas": updated, "updatedAvailableReplicas": updated,
            "expectedUpdatedReplicas": expected_updated,
            "updateRevision": "web-7d9f8c6b5", "currentRevision": "web-5c8d7b6a4", "labelSelector": "app=web",
        })
    };
    let mut deadline = counts(1, 5);
    deadline["readyReplicas"] = json!(4);
    deadline["availableReplicas"] = json!(4);
    deadline["conditions"] = json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "CloneSet revision web-7d9f8c6b5 has timed out progressing"}]);
    let mut failed_scale = counts(5, 5);
    failed_scale["replicas"] = json!(3);
    failed_scale["conditions"] = json!([{"type": "FailedScale", "status": "True", "message": "failed to create pods: pods \"web-x\" is forbidden: exceeded quota"}]);
    let cases: Vec<Case> = vec![
        (
            "every pod updated and available",
            object("CloneSet", 2, spec(json!({})), counts(5, 5)),
            WorkloadHealth::Current,
            "5/5 ready",
            None,
        ),
        (
            "a partition of 3: 2 pods updated, as asked",
            object("CloneSet", 2, spec(json!({"partition": 3})), counts(2, 2)),
            WorkloadHealth::InProgress,
            "rollout paused: 2 of 5 updated",
            None,
        ),
        (
            "a rolling update under way",
            object("CloneSet", 2, spec(json!({})), counts(3, 5)),
            WorkloadHealth::InProgress,
            "rollout waiting: 3 of 5 updated",
            None,
        ),
        (
            "paused by updateStrategy.paused",
            object("CloneSet", 2, spec(json!({"paused": true})), counts(1, 5)),
            WorkloadHealth::InProgress,
            "rollout paused: 1 of 5 updated",
            None,
        ),
        (
            "past its progress deadline",
            object("CloneSet", 2, spec(json!({})), deadline),
            WorkloadHealth::Failed,
            "CloneSet revision web-7d9f8c6b5 has timed out progressing",
            Some("ProgressDeadlineExceeded"),
        ),
        (
            "pods it cannot create",
            object("CloneSet", 2, spec(json!({})), failed_scale),
            WorkloadHealth::Failed,
            "failed to create pods: pods \"web-x\" is forbidden: exceeded quota",
            Some("FailedScale"),
        ),
    ];
    check("CloneSet", cases);
}

#[test]
fn rollout() {
    let spec = |replicas: i64| json!({"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template()});
    // Argo Rollouts' canary-rollout.yaml test data (generation 429).
    let deadline = json!({
        "HPAReplicas": 6, "availableReplicas": 5, "readyReplicas": 5, "replicas": 6, "updatedReplicas": 1,
        "stableRS": "877894d5b", "currentPodHash": "65fb5ffc84", "currentStepIndex": 0, "observedGeneration": "429",
        "selector": "app=canary-demo",
        "conditions": [
            {"type": "Available", "status": "True", "reason": "AvailableReason", "message": "Rollout has minimum availability"},
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"canary-demo-65fb5ffc84\" has timed out progressing."},
        ],
    });
    // Argo Rollouts' rollout-aborted test data (generation 15).
    let aborted = json!({
        "abort": true, "abortedAt": "2020-09-22T09:10:05Z", "HPAReplicas": 1, "availableReplicas": 1, "readyReplicas": 1,
        "replicas": 1, "currentPodHash": "db976bc44", "stableRS": "7d84d44bb8", "observedGeneration": "15",
        "conditions": [
            {"type": "Available", "status": "True", "reason": "AvailableReason"},
            {"type": "Progressing", "status": "False", "reason": "RolloutAborted", "message": "Rollout is aborted due to failed analysis: metric \"web\" assessed Failed"},
        ],
    });
    // Argo CD's canary/healthy_executedAllSteps.yaml: a legacy hash as observedGeneration.
    let healthy = json!({
        "HPAReplicas": 5, "availableReplicas": 5, "readyReplicas": 5, "replicas": 5, "updatedReplicas": 5,
        "currentPodHash": "84ccfddd66", "stableRS": "84ccfddd66", "currentStepIndex": 4, "observedGeneration": "c45557fd9",
        "conditions": [
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            {"type": "Available", "status": "True", "reason": "AvailableReason"},
        ],
    });
    // Argo CD's suspended_controllerPause.yaml.
    let suspended = json!({
        "controllerPause": true, "pauseConditions": [{"reason": "CanaryPauseStep", "startTime": "2019-12-09T18:34:12Z"}],
        "conditions": [{"type": "Progressing", "status": "Unknown", "reason": "RolloutPaused"}],
        "updatedReplicas": 1, "replicas": 5, "readyReplicas": 5, "availableReplicas": 5, "observedGeneration": "5b9f9dd6c6",
    });
    let verifying = json!({
        "replicas": 5, "updatedReplicas": 5, "readyReplicas": 5, "availableReplicas": 5, "observedGeneration": "3",
        "phase": "Progressing", "message": "waiting for rollout to complete: updated replicas are still becoming available",
    });
    let cases: Vec<Case> = vec![
        (
            "past its progress deadline",
            object("Rollout", 429, spec(5), deadline),
            WorkloadHealth::Failed,
            "ReplicaSet \"canary-demo-65fb5ffc84\" has timed out progressing.",
            Some("ProgressDeadlineExceeded"),
        ),
        (
            "aborted by a failed analysis",
            object("Rollout", 15, spec(1), aborted),
            WorkloadHealth::Failed,
            "Rollout is aborted due to failed analysis: metric \"web\" assessed Failed",
            Some("RolloutAborted"),
        ),
        (
            "every step done",
            object("Rollout", 1, spec(5), healthy),
            WorkloadHealth::Current,
            "5/5 ready",
            None,
        ),
        (
            "paused at a canary step",
            object("Rollout", 1, spec(5), suspended),
            WorkloadHealth::InProgress,
            "rollout paused: 1 of 5 updated",
            None,
        ),
        (
            "counters done, the controller still verifying",
            object("Rollout", 3, spec(5), verifying.clone()),
            WorkloadHealth::InProgress,
            "waiting for rollout to complete: updated replicas are still becoming available",
            None,
        ),
        (
            "a generation not yet observed",
            object("Rollout", 4, spec(5), verifying),
            WorkloadHealth::InProgress,
            "waiting for the controller to observe generation 4",
            None,
        ),
    ];
    check("Rollout", cases);
}

#[test]
fn a_failed_rollout_with_nothing_ready_is_panic_with_the_rules_reason() {
    let rules = rules();
    let rule = rules.for_kind("Rollout").unwrap();
    let obj = object(
        "Rollout",
        2,
        json!({"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template()}),
        json!({"observedGeneration": "2", "replicas": 2, "updatedReplicas": 2, "phase": "Degraded",
               "message": "ProgressDeadlineExceeded: ReplicaSet \"web-5d8\" has timed out progressing.",
               "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"web-5d8\" has timed out progressing."}]}),
    );
    let w = rule.read(&obj, LABEL);
    let (phase, reason, message) = stable_state(true, &[&w], None);
    assert_eq!(
        (phase, reason.as_ref()),
        (AppPhase::Panic, "ProgressDeadlineExceeded")
    );
    assert_eq!(
        message,
        "Rollout web: ReplicaSet \"web-5d8\" has timed out progressing."
    );
}

fn spec(yaml: &str) -> Vec<RuleSpec> {
    serde_yaml_ng::from_str(yaml).unwrap()
}

#[test]
fn bad_rules_are_refused_with_the_rule_the_field_and_why() {
    let base = "- {name: widget, group: example.com, version: v1, resource: widgets, kind: Widget";
    // (the rule's remaining fields, what the error must say)
    let cases: &[(&str, &[&str])] = &[
        (
            ", ready: 'object.status.readyReplicas +'}",
            &["\"widget\"", "`ready`", "Syntax error"],
        ),
        (
            ", ready: 'status.readyReplicas'}",
            &[
                "\"widget\"",
                "`ready`",
                "unknown name status",
                "only `object`",
            ],
        ),
        (
            ", failed: 'object.a.exists(x, object.b.exists(y, x == y)) ? \"x\" : null'}",
            &[
                "\"widget\"",
                "`failed`",
                "estimated cost",
                "over the bound of 100000",
            ],
        ),
        (
            ", replicasPath: spec.replicas}",
            &["\"widget\"", "`replicasPath` must be a JSON pointer"],
        ),
        (", kind: ''}", &["`kind` is empty"]),
    ];
    for (rest, wanted) in cases {
        let yaml = format!("{base}{rest}");
        let yaml = yaml.replace("kind: Widget, kind: ''", "kind: ''");
        let err = HealthRules::compile(&spec(&yaml)).expect_err(&yaml);
        for w in *wanted {
            assert!(err.contains(w), "{yaml}: {err:?} lacks {w:?}");
        }
    }
    let err = HealthRules::compile(&spec(
        "- {name: d, group: apps, version: v1, resource: deployments, kind: Deployment}",
    ))
    .unwrap_err();
    assert!(err.contains("read by the app machine itself"), "{err}");
    let err = HealthRules::compile(&spec(&format!("{base}}}\n{base}}}"))).unwrap_err();
    assert!(err.contains("defined twice"), "{err}");
    let err = HealthRules::compile(&spec(
        "- {name: mine, group: apps.kruise.io, version: v1alpha1, resource: clonesets, kind: CloneSet}",
    ))
    .unwrap_err();
    assert!(err.contains("\"cloneset\" and \"mine\""), "{err}");
}

#[test]
fn a_config_rule_replaces_the_builtin_of_its_name_and_joins_the_rest() {
    let rules = HealthRules::compile(&spec(
        "- {name: cloneset, group: apps.kruise.io, version: v1beta1, resource: clonesets, kind: CloneSet, paused: 'object.spec.?updateStrategy.?rollingUpdate.?paused.orValue(false)'}\n- {name: widget, group: example.com, version: v1, resource: widgets, kind: Widget, available: 'object.status.readyReplicas'}",
    ))
    .unwrap();
    let names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["collaset", "cloneset", "rollout", "widget"]);
    let cloneset = rules.for_kind("CloneSet").unwrap();
    assert_eq!(cloneset.gvr.path(), "apps.kruise.io/v1beta1/clonesets");
    let widget = rules
        .for_resource(&Gvr::new("example.com", "v1", "widgets"))
        .unwrap();
    let w = widget.read(
        &object("Widget", 1, json!({"replicas": 2}), json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2})),
        LABEL,
    );
    assert_eq!(w.health(), (WorkloadHealth::Current, "2/2 ready".into()));
}

#[test]
fn an_object_a_rule_cannot_read_is_failed_with_why() {
    let rules = HealthRules::compile(&spec(
        "- {name: widget, group: example.com, version: v1, resource: widgets, kind: Widget, ready: 'object.status.ready'}",
    ))
    .unwrap();
    let rule = rules.for_kind("Widget").unwrap();
    let cases = [
        (
            json!({"observedGeneration": 1, "ready": "three"}),
            "health rule \"widget\": `ready`: wants an int, got the string \"three\"",
        ),
        (
            json!({"observedGeneration": 1, "ready": 1, "big": vec![0; 1_001]}),
            "health rule \"widget\": `object`: object.status.big holds 1001 items, more than the 1000 a rule may range over",
        ),
    ];
    for (status, message) in cases {
        let w = rule.read(&object("Widget", 1, json!({}), status), LABEL);
        let failure = w.failure.expect("failed");
        assert_eq!(
            (failure.reason.as_str(), failure.message.as_str()),
            (RULE_ERROR, message)
        );
    }
}
