//! The ReplicaSets behind each Deployment, as the deployment controller
//! keeps them: one per pod template, named `{deployment}-{pod-template-hash}`,
//! owned by the Deployment, owning its pods; the current template's scaled to
//! the Deployment's replicas, the previous one's to the old pods still
//! serving during a rollout, older ones to 0. Deleting a Deployment deletes
//! its ReplicaSets (the garbage collector's part).
//!
//! [`manifest`] and [`status`] are pure; [`sync`] and [`collect_garbage`]
//! apply them to the store on each controller step.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::object::{UpdateScope, name_of, namespace_of};
use super::pods::{Owner, hash_label};
use super::resources::ResourceDef;
use super::rollout::Pods;
use super::store::{Preconditions, Store};
use super::workloads::{self, Ownership};

/// The uids of a Deployment's ReplicaSets, for its pods' ownerReferences.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Uids {
    /// The current template's.
    pub(crate) new: Option<String>,
    /// The previous template's.
    pub(crate) old: Option<String>,
}

/// The uid of the Deployment (or Rollout) that controls `obj`, if any.
fn controller_uid(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| {
            r["controller"] == true
                && r["kind"]
                    .as_str()
                    .and_then(workloads::by_kind)
                    .is_some_and(|k| k.ownership == Ownership::ReplicaSets)
        })
        .and_then(|r| r["uid"].as_str())
}

/// The ReplicaSet (without status) of `deployment`'s template `hash`.
pub fn manifest(deployment: &Value, hash: u64, replicas: u32) -> Value {
    let name = Owner {
        workload: deployment,
        template_hash: hash,
        replica_set_uid: None,
    }
    .replica_set();
    let label = hash_label(hash);
    let kind = workloads::kind_of(deployment);
    let mut template = deployment
        .pointer("/spec/template")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let mut labels = template
        .pointer("/metadata/labels")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    labels[kind.revision_label] = json!(label);
    template["metadata"]["labels"] = labels.clone();
    let mut selector = deployment
        .pointer("/spec/selector")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    selector["matchLabels"][kind.revision_label] = json!(label);
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": namespace_of(deployment),
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": kind.api_version(),
                "kind": kind.kind,
                "name": name_of(deployment),
                "uid": deployment["metadata"]["uid"],
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": {"replicas": replicas, "selector": selector, "template": template},
    })
}

/// A ReplicaSet's status with `pods` pods of which `ready` are ready (the
/// controller leaves zero counts out, `replicas` aside).
pub fn status(pods: u32, ready: u32, generation: i64) -> Value {
    let mut status = json!({"replicas": pods, "observedGeneration": generation});
    if pods > 0 {
        status["fullyLabeledReplicas"] = json!(pods);
    }
    if ready > 0 {
        status["readyReplicas"] = json!(ready);
        status["availableReplicas"] = json!(ready);
    }
    status
}

/// Makes one ReplicaSet match: created if missing, `spec.replicas` and
/// status written when they differ. Returns its uid.
fn ensure(
    store: &Store,
    def: &ResourceDef,
    wanted: Value,
    pods: u32,
    ready: u32,
) -> Option<String> {
    let namespace = namespace_of(&wanted).to_string();
    let name = name_of(&wanted).to_string();
    let replicas = wanted["spec"]["replicas"].clone();
    let stored = match store.get(def, Some(&namespace), &name) {
        Ok(stored) => stored,
        Err(e) if e.code == 404 => store.create(def, Some(&namespace), wanted, false).ok()?,
        Err(_) => return None,
    };
    let stored = if stored["spec"]["replicas"] == replicas {
        stored
    } else {
        store
            .mutate(
                def,
                Some(&namespace),
                &name,
                UpdateScope::Main,
                false,
                |current| {
                    let mut next = current.clone();
                    next["spec"]["replicas"] = replicas;
                    Ok(next)
                },
            )
            .ok()?
    };
    let generation = stored["metadata"]["generation"].as_i64().unwrap_or(1);
    let status = status(pods, ready, generation);
    let uid = stored["metadata"]["uid"].as_str().map(str::to_string);
    if stored.get("status") != Some(&status) {
        let _ = store.set_status(def, Some(&namespace), &name, status);
    }
    uid
}

/// The annotation the deployment controller numbers a Deployment's
/// templates with, on the Deployment and each of its ReplicaSets.
pub const REVISION: &str = "deployment.kubernetes.io/revision";

fn revision_of(obj: &Value) -> u64 {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(REVISION))
        .and_then(Value::as_str)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The revision the current template's ReplicaSet should carry, given its
/// own and the highest among the Deployment's ReplicaSets: a template that
/// is not the newest (new, or rolled back to) takes the next number.
pub fn next_revision(current: u64, highest: u64) -> u64 {
    if current != 0 && current == highest {
        current
    } else {
        highest + 1
    }
}

/// Numbers the current template's ReplicaSet (`name`) and the Deployment
/// as the deployment controller does, so `kubectl rollout history` lists
/// the revisions and `rollout undo` finds the previous one. Looks at the
/// other ReplicaSets only when the two disagree (a new template or a
/// rollback), not on every step.
fn revise(store: &Store, def: &ResourceDef, deployment: &Value, name: &str) {
    if workloads::kind_of(deployment).kind != "Deployment" {
        return;
    }
    let namespace = namespace_of(deployment);
    let Ok(rs) = store.get(def, Some(namespace), name) else {
        return;
    };
    let current = revision_of(&rs);
    if current != 0 && current == revision_of(deployment) {
        return;
    }
    let uid = deployment["metadata"]["uid"].as_str().unwrap_or("");
    let highest = store
        .snapshot(def)
        .iter()
        .filter(|r| namespace_of(r) == namespace && controller_uid(r) == Some(uid))
        .map(|r| revision_of(r))
        .max()
        .unwrap_or(0);
    let revision = json!(next_revision(current, highest).to_string());
    let annotate = |current: &Value| {
        let mut next = current.clone();
        if !next["metadata"]["annotations"].is_object() {
            next["metadata"]["annotations"] = json!({});
        }
        next["metadata"]["annotations"][REVISION] = revision.clone();
        Ok(next)
    };
    if rs["metadata"]["annotations"][REVISION] != revision {
        let _ = store.mutate(
            def,
            Some(namespace),
            name,
            UpdateScope::Main,
            false,
            annotate,
        );
    }
    if let Some(deployments) = store.catalog().find("apps", "v1", "deployments").cloned() {
        let _ = store.mutate(
            &deployments,
            Some(namespace),
            name_of(deployment),
            UpdateScope::Main,
            false,
            annotate,
        );
    }
}

/// Brings the ReplicaSets of `deployment` in line with its pods after a
/// controller step, returning the uids its pods are owned by.
pub(crate) fn sync(store: &Store, deployment: &Value, pods: &Pods, desired: u32) -> Uids {
    let Some(def) = store.catalog().find("apps", "v1", "replicasets").cloned() else {
        return Uids::default();
    };
    let wanted = manifest(deployment, pods.template_hash, desired);
    let name = name_of(&wanted).to_string();
    let new = ensure(store, &def, wanted, pods.new, pods.new_ready);
    revise(store, &def, deployment, &name);
    let old = (pods.old_hash != 0 && pods.old_hash != pods.template_hash)
        .then(|| {
            ensure(
                store,
                &def,
                manifest(deployment, pods.old_hash, pods.old),
                pods.old,
                pods.old,
            )
        })
        .flatten();
    // Templates before the previous one: scaled to 0 (looked for during
    // rollouts only, so a steady cluster does not scan every ReplicaSet).
    if pods.old == 0 {
        return Uids { new, old };
    }
    let uid = deployment["metadata"]["uid"].as_str().unwrap_or("");
    let namespace = namespace_of(deployment);
    let label = workloads::kind_of(deployment).revision_label;
    for rs in store.snapshot(&def) {
        let current = [Some(pods.template_hash), Some(pods.old_hash)]
            .iter()
            .flatten()
            .any(|h| rs["metadata"]["labels"][label] == hash_label(*h));
        if current || namespace_of(&rs) != namespace || controller_uid(&rs) != Some(uid) {
            continue;
        }
        if rs["spec"]["replicas"] != 0 {
            let mut wanted = (*rs).clone();
            wanted["spec"]["replicas"] = json!(0);
            ensure(store, &def, wanted, 0, 0);
        }
    }
    Uids { new, old }
}

/// Deletes the ReplicaSets whose Deployment is gone (`live`: the uids of
/// the workloads that remain).
pub(crate) fn collect_garbage(store: &Store, live: &BTreeSet<String>) {
    let Some(def) = store.catalog().find("apps", "v1", "replicasets").cloned() else {
        return;
    };
    for rs in store.snapshot(&def) {
        if controller_uid(&rs).is_some_and(|uid| !live.contains(uid)) {
            let _ = store.delete(
                &def,
                Some(namespace_of(&rs)),
                name_of(&rs),
                &Preconditions::default(),
                false,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_number_new_and_rolled_back_templates() {
        // (the current template's revision, the highest) → its revision
        let cases = [((0, 0), 1), ((0, 3), 4), ((3, 3), 3), ((1, 3), 4)];
        for ((current, highest), want) in cases {
            assert_eq!(next_revision(current, highest), want, "{current} {highest}");
        }
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "d-1"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "app", "image": "registry.example/web:1"}]}}}
        })
    }

    #[test]
    fn replica_sets_are_named_labelled_and_owned_like_the_controller_does() {
        let rs = manifest(&deployment(), 0x5d78c9b6f4, 3);
        assert_eq!(rs["metadata"]["name"], "web-5d78c9b6f4");
        assert_eq!(rs["metadata"]["namespace"], "shop");
        assert_eq!(
            rs["metadata"]["labels"],
            json!({"app": "web", "pod-template-hash": "5d78c9b6f4"})
        );
        assert_eq!(
            rs["spec"]["selector"],
            json!({"matchLabels": {"app": "web", "pod-template-hash": "5d78c9b6f4"}})
        );
        assert_eq!(
            rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"],
            "5d78c9b6f4"
        );
        assert_eq!(rs["spec"]["replicas"], 3);
        let owner = &rs["metadata"]["ownerReferences"][0];
        assert_eq!(
            (owner["kind"].as_str(), owner["uid"].as_str()),
            (Some("Deployment"), Some("d-1"))
        );
        assert_eq!(controller_uid(&rs), Some("d-1"));
        // The name its pods' ownerReferences give.
        let d = deployment();
        let pod = super::super::pods::pod(
            &Owner {
                workload: &d,
                template_hash: 0x5d78c9b6f4,
                replica_set_uid: Some("rs-1"),
            },
            0,
        );
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["name"],
            rs["metadata"]["name"]
        );
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "rs-1");
    }

    #[test]
    fn status_counts() {
        let cases = [
            ((0, 0), json!({"replicas": 0, "observedGeneration": 1})),
            (
                (2, 0),
                json!({"replicas": 2, "fullyLabeledReplicas": 2, "observedGeneration": 1}),
            ),
            (
                (3, 2),
                json!({"replicas": 3, "fullyLabeledReplicas": 3, "readyReplicas": 2,
                       "availableReplicas": 2, "observedGeneration": 1}),
            ),
        ];
        for ((pods, ready), want) in cases {
            assert_eq!(status(pods, ready, 1), want, "{pods} {ready}");
        }
    }
}
