//! Pod objects as the kubelet and scheduler would leave them: the pods
//! behind each workload (named, labelled and owned as the controllers name
//! them) with container states that follow the image's fault — pulls that
//! fail, containers that crash or are OOM-killed with growing restarts and
//! back-off, readiness probes that fail — and pods the cluster has no room
//! for left Pending as unschedulable.
//!
//! Pure functions over JSON (tested as tables); the converger decides
//! which pod is in which [`PodState`] and writes the objects.

use std::hash::{Hash, Hasher};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::defaults::qos_class;
pub use super::nodes::NODES;
use super::nodes::{self, node_name};
use super::object::{name_of, namespace_of, timestamp};
use super::workloads::{self, Ownership, WorkloadKind};

/// What goes wrong with pods of an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ImageFault {
    /// The container runs but its readiness probe fails.
    NotReady,
    /// The image cannot be pulled: `ErrImagePull`, then `ImagePullBackOff`.
    PullError,
    /// The container starts and exits 1: `CrashLoopBackOff`.
    Crash,
    /// The container exceeds its memory limit: exit 137, `OOMKilled`.
    OomKilled,
}

impl ImageFault {
    /// Parses `notReady`, `pullError`, `crash` or `oomKilled`.
    pub fn parse(s: &str) -> Result<Self, String> {
        serde_json::from_value(json!(s)).map_err(|_| {
            format!("image fault {s:?} is not one of notReady, pullError, crash, oomKilled")
        })
    }
}

/// Restarts of a crashing container, as the kubelet counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restarts {
    pub count: u32,
    /// Whether the container is running now (between a restart and its exit).
    pub running: bool,
    /// The back-off before the next restart, in seconds (10 s doubling to 300 s).
    pub backoff_secs: u32,
}

/// The state of one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodState {
    /// Scheduled, containers being created.
    Starting,
    /// Running and ready.
    Ready,
    /// Running, readiness probe failing.
    NotReady,
    /// Waiting for an image that cannot be pulled (`backoff`: ImagePullBackOff).
    PullError { backoff: bool },
    /// A container that keeps exiting (`oom`: killed for its memory limit).
    Crashing { restarts: Restarts, oom: bool },
    /// No node has room for it.
    Unschedulable,
}

/// The scheduler's message for a pod no node has room for.
pub fn unschedulable_message() -> String {
    format!(
        "0/{NODES} nodes are available: {NODES} Insufficient cpu. preemption: 0/{NODES} nodes are available: {NODES} No preemption victims found for incoming pod."
    )
}

/// A short, stable suffix as the ReplicaSet controller appends to pod names.
pub fn suffix(seed: &str, index: u32) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (seed, index).hash(&mut hasher);
    let mut n = hasher.finish();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// The `pod-template-hash` label value of a template hash.
pub fn hash_label(template_hash: u64) -> String {
    format!("{:x}", template_hash & 0xff_ffff_ffff)
}

/// Where a pod comes from: its workload and template.
#[derive(Debug, Clone)]
pub struct Owner<'a> {
    /// The Deployment or StatefulSet.
    pub workload: &'a Value,
    /// The template hash the pod was made from (`pod-template-hash`).
    pub template_hash: u64,
    /// The uid of the ReplicaSet object of a Deployment's template, when
    /// the cluster holds one (else one derived from the Deployment's).
    pub replica_set_uid: Option<&'a str>,
}

impl Owner<'_> {
    fn kind(&self) -> &'static WorkloadKind {
        workloads::kind_of(self.workload)
    }

    /// The ReplicaSet name of a Deployment's template (`web-5d78c9b6f4`).
    pub fn replica_set(&self) -> String {
        format!(
            "{}-{}",
            name_of(self.workload),
            hash_label(self.template_hash)
        )
    }

    /// The name of the pod in slot `index`.
    pub fn pod_name(&self, index: u32) -> String {
        match self.kind().ownership {
            Ownership::Ordinal => format!("{}-{index}", name_of(self.workload)),
            Ownership::Direct => {
                let name = name_of(self.workload);
                let revision = format!("{name}-{}", hash_label(self.template_hash));
                format!("{name}-{}", suffix(&revision, index))
            }
            Ownership::ReplicaSets => {
                let rs = self.replica_set();
                let suffix = suffix(&rs, index);
                format!("{rs}-{suffix}")
            }
        }
    }
}

/// Labels a pod gets: the template's, plus the controller's hash label.
fn labels(owner: &Owner<'_>, name: &str) -> Value {
    let mut labels = owner
        .workload
        .pointer("/spec/template/metadata/labels")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let hash = hash_label(owner.template_hash);
    let kind = owner.kind();
    match kind.ownership {
        Ownership::Ordinal => {
            labels["controller-revision-hash"] =
                json!(format!("{}-{hash}", name_of(owner.workload)));
            labels["statefulset.kubernetes.io/pod-name"] = json!(name);
        }
        Ownership::Direct => {
            labels[kind.revision_label] = json!(format!("{}-{hash}", name_of(owner.workload)));
            if kind.kind == "CloneSet" {
                labels["pod-template-hash"] = json!(hash);
            }
        }
        Ownership::ReplicaSets => labels[kind.revision_label] = json!(hash),
    }
    labels
}

/// The pod object (without status) of slot `index` of `owner`, as the
/// controller creates it.
pub fn pod(owner: &Owner<'_>, index: u32) -> Value {
    let name = owner.pod_name(index);
    let workload_kind = owner.kind();
    let (api_version, kind, owner_name, owner_uid) =
        if workload_kind.ownership != Ownership::ReplicaSets {
            (
                workload_kind.api_version(),
                workload_kind.kind,
                name_of(owner.workload).to_string(),
                owner.workload["metadata"]["uid"].clone(),
            )
        } else {
            let rs = owner.replica_set();
            let uid = owner.replica_set_uid.map_or_else(
                || {
                    format!(
                        "{}-{}",
                        owner.workload["metadata"]["uid"].as_str().unwrap_or(""),
                        suffix(&rs, u32::MAX)
                    )
                },
                str::to_string,
            );
            ("apps/v1".to_string(), "ReplicaSet", rs, json!(uid))
        };
    let mut spec = owner
        .workload
        .pointer("/spec/template/spec")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({"containers": []}));
    spec["restartPolicy"] = json!("Always");
    spec["schedulerName"] = json!("default-scheduler");
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace_of(owner.workload),
            "labels": labels(owner, &name),
            "ownerReferences": [{
                "apiVersion": api_version,
                "kind": kind,
                "name": owner_name,
                "uid": owner_uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    })
}

/// The node a scheduled pod runs on.
fn node_for(name: &str) -> String {
    node_name(node_index(name))
}

/// The index (from 1) of the node a pod of this name is scheduled on.
fn node_index(name: &str) -> usize {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut hasher);
    hasher.finish() as usize % NODES + 1
}

fn condition(kind: &str, ok: bool, since: &str) -> Value {
    json!({"type": kind, "status": if ok { "True" } else { "False" }, "lastTransitionTime": since})
}

/// The status the kubelet (and scheduler) report for `pod` in `state`;
/// `since` is when the pod entered its state.
pub fn status(pod: &Value, state: PodState, since: DateTime<Utc>) -> Value {
    let at = timestamp(since);
    if state == PodState::Unschedulable {
        let mut scheduled = condition("PodScheduled", false, &at);
        scheduled["reason"] = json!("Unschedulable");
        scheduled["message"] = json!(unschedulable_message());
        return json!({"phase": "Pending", "conditions": [scheduled], "qosClass": qos_class(pod)});
    }
    let ready = state == PodState::Ready;
    let containers: Vec<Value> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| cs.iter().map(|c| container_status(c, state, &at)).collect())
        .unwrap_or_default();
    let phase = match state {
        PodState::Starting | PodState::PullError { .. } => "Pending",
        _ => "Running",
    };
    // The node's InternalIP, and an address in the node's pod CIDR.
    let node = nodes::index_of(pod["spec"]["nodeName"].as_str().unwrap_or(""))
        .unwrap_or_else(|| node_index(name_of(pod)));
    let host_ip = nodes::internal_ip(node);
    let pod_ip = pod_ip(node, name_of(pod));
    let mut status = json!({
        "phase": phase,
        "conditions": [
            condition("PodScheduled", true, &at),
            condition("Initialized", true, &at),
            condition("ContainersReady", ready, &at),
            condition("Ready", ready, &at),
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        // Set once, when the kubelet first takes the pod.
        "startTime": pod.pointer("/status/startTime").cloned().unwrap_or_else(|| json!(at)),
        "containerStatuses": containers,
        "qosClass": qos_class(pod),
    });
    if !ready {
        for i in [2, 3] {
            status["conditions"][i]["reason"] = json!("ContainersNotReady");
        }
    }
    status
}

/// An address for pod `name` in the pod CIDR of node `node` (`10.244.{node}.0/24`).
fn pod_ip(node: usize, name: &str) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut hasher);
    format!("10.244.{node}.{}", hasher.finish() % 250 + 2)
}

/// One container's status in `state`.
fn container_status(container: &Value, state: PodState, at: &str) -> Value {
    let name = container["name"].as_str().unwrap_or("app");
    let image = container["image"].as_str().unwrap_or("");
    let mut out = json!({
        "name": name,
        "image": image,
        "imageID": "",
        "ready": state == PodState::Ready,
        "restartCount": 0,
        "started": false,
        "state": {},
    });
    match state {
        PodState::Starting => {
            out["state"] = json!({"waiting": {"reason": "ContainerCreating"}});
        }
        PodState::Ready | PodState::NotReady => {
            out["state"] = json!({"running": {"startedAt": at}});
            out["started"] = json!(true);
            out["imageID"] = json!(format!("{image}@sha256:{:064x}", 0));
        }
        PodState::PullError { backoff } => {
            out["state"] = if backoff {
                json!({"waiting": {"reason": "ImagePullBackOff", "message": format!("Back-off pulling image \"{image}\"")}})
            } else {
                json!({"waiting": {"reason": "ErrImagePull", "message": pull_error(image)}})
            };
        }
        PodState::Crashing { restarts, oom } => {
            out["restartCount"] = json!(restarts.count);
            // Once it has exited, the kubelet shows how.
            if restarts.count > 0 || !restarts.running {
                out["lastState"] = json!({"terminated": terminated(oom, at)});
            }
            out["state"] = if restarts.running {
                out["started"] = json!(true);
                json!({"running": {"startedAt": at}})
            } else {
                json!({"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": format!("back-off {}s restarting failed container={name} pod=", restarts.backoff_secs),
                }})
            };
        }
        PodState::Unschedulable => {}
    }
    out
}

/// The kubelet's message when an image cannot be pulled.
pub fn pull_error(image: &str) -> String {
    format!(
        "rpc error: code = NotFound desc = failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": not found"
    )
}

/// The terminated state a crash (or an OOM kill) leaves.
fn terminated(oom: bool, at: &str) -> Value {
    if oom {
        json!({"exitCode": 137, "reason": "OOMKilled", "startedAt": at, "finishedAt": at})
    } else {
        json!({"exitCode": 1, "reason": "Error", "startedAt": at, "finishedAt": at})
    }
}

/// One kubelet step of a crashing container: a running container exits
/// (its back-off doubles from 10 s to 300 s); a waiting one restarts once
/// its back-off, scaled by `scale` (so tests need not wait minutes), is over.
pub fn crash_step(restarts: Restarts, waited_secs: f64, scale: f64) -> Restarts {
    if restarts.running {
        return Restarts {
            running: false,
            backoff_secs: if restarts.count == 0 {
                10
            } else {
                (restarts.backoff_secs * 2).min(300)
            },
            ..restarts
        };
    }
    if waited_secs >= f64::from(restarts.backoff_secs) * scale {
        Restarts {
            count: restarts.count + 1,
            running: true,
            ..restarts
        }
    } else {
        restarts
    }
}

/// Completes a CrashLoopBackOff message with the pod, as the kubelet
/// writes it: `pod=NAME_NAMESPACE(UID)`.
pub fn name_messages(status: &mut Value, pod: &Value) {
    let named = format!(
        "{}_{}({})",
        name_of(pod),
        namespace_of(pod),
        pod["metadata"]["uid"].as_str().unwrap_or("")
    );
    if let Some(cs) = status
        .get_mut("containerStatuses")
        .and_then(Value::as_array_mut)
    {
        for c in cs {
            if let Some(m) = c.pointer_mut("/state/waiting/message")
                && let Some(text) = m.as_str().filter(|t| t.ends_with(" pod="))
            {
                *m = json!(format!("{text}{named}"));
            }
        }
    }
}

/// Assigns the node of a scheduled pod (`spec.nodeName`), unless it names one already.
pub fn schedule(pod: &mut Value, state: PodState) {
    if needs_node(pod, state) {
        let node = node_for(name_of(pod));
        pod["spec"]["nodeName"] = json!(node);
    }
}

/// Whether the scheduler still has to bind `pod` (it has no node and can run).
pub fn needs_node(pod: &Value, state: PodState) -> bool {
    state != PodState::Unschedulable
        && pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "app", "image": "registry.example/web:1"}]}}}
        })
    }

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn a_pods_start_time_is_set_once() {
        let d = deployment();
        let mut p = pod(
            &Owner {
                workload: &d,
                template_hash: 0xabc,
                replica_set_uid: None,
            },
            0,
        );
        p["status"] = status(&p, PodState::Starting, t(0));
        let started = p["status"]["startTime"].clone();
        assert_eq!(started, json!(timestamp(t(0))));
        p["status"] = status(&p, PodState::Ready, t(30));
        assert_eq!(p["status"]["startTime"], started, "not reset when ready");
        assert_eq!(
            p["status"]["conditions"][3]["lastTransitionTime"],
            json!(timestamp(t(30)))
        );
    }

    #[test]
    fn pods_are_named_labelled_and_owned_like_the_controllers_do() {
        let d = deployment();
        let owner = Owner {
            workload: &d,
            template_hash: 0xabc,
            replica_set_uid: None,
        };
        let p = pod(&owner, 0);
        assert_eq!(
            p["metadata"]["name"],
            format!("web-abc-{}", suffix("web-abc", 0))
        );
        assert_eq!(p["metadata"]["labels"]["app"], "web");
        assert_eq!(p["metadata"]["labels"]["pod-template-hash"], "abc");
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        assert_eq!(p["metadata"]["ownerReferences"][0]["name"], "web-abc");
        assert_ne!(pod(&owner, 1)["metadata"]["name"], p["metadata"]["name"]);
        let mut s = d.clone();
        s["kind"] = json!("StatefulSet");
        let owner = Owner {
            workload: &s,
            template_hash: 0xabc,
            replica_set_uid: None,
        };
        let p = pod(&owner, 2);
        assert_eq!(p["metadata"]["name"], "web-2");
        assert_eq!(
            p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
            "web-2"
        );
        assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], "u-1");
    }

    #[test]
    fn status_table() {
        let d = deployment();
        let p = pod(
            &Owner {
                workload: &d,
                template_hash: 1,
                replica_set_uid: None,
            },
            0,
        );
        let crashing = |count, running| PodState::Crashing {
            restarts: Restarts {
                count,
                running,
                backoff_secs: 40,
            },
            oom: false,
        };
        // (state, phase, ready, waiting reason, restarts, last terminated reason)
        let cases = [
            (
                PodState::Starting,
                "Pending",
                false,
                Some("ContainerCreating"),
                0,
                None,
            ),
            (PodState::Ready, "Running", true, None, 0, None),
            (PodState::NotReady, "Running", false, None, 0, None),
            (
                PodState::PullError { backoff: false },
                "Pending",
                false,
                Some("ErrImagePull"),
                0,
                None,
            ),
            (
                PodState::PullError { backoff: true },
                "Pending",
                false,
                Some("ImagePullBackOff"),
                0,
                None,
            ),
            (
                crashing(3, false),
                "Running",
                false,
                Some("CrashLoopBackOff"),
                3,
                Some("Error"),
            ),
            (crashing(3, true), "Running", false, None, 3, Some("Error")),
            (
                PodState::Crashing {
                    restarts: Restarts {
                        count: 1,
                        running: false,
                        backoff_secs: 10,
                    },
                    oom: true,
                },
                "Running",
                false,
                Some("CrashLoopBackOff"),
                1,
                Some("OOMKilled"),
            ),
        ];
        for (state, phase, ready, waiting, restarts, last) in cases {
            let s = status(&p, state, t(0));
            assert_eq!(s["phase"], phase, "{state:?}");
            assert_eq!(
                s["conditions"][3]["status"],
                if ready { "True" } else { "False" },
                "{state:?}"
            );
            let c = &s["containerStatuses"][0];
            assert_eq!(
                c["state"]["waiting"]["reason"].as_str(),
                waiting,
                "{state:?}"
            );
            assert_eq!(c["restartCount"], restarts, "{state:?}");
            assert_eq!(
                c["lastState"]["terminated"]["reason"].as_str(),
                last,
                "{state:?}"
            );
        }
        let s = status(&p, PodState::Unschedulable, t(0));
        assert_eq!(s["phase"], "Pending");
        assert_eq!(s["conditions"][0]["reason"], "Unschedulable");
        assert!(
            s["conditions"][0]["message"]
                .as_str()
                .unwrap()
                .contains("Insufficient cpu")
        );
        assert!(s.get("containerStatuses").is_none());
        let mut s = status(&p, crashing(2, false), t(0));
        let mut named = p.clone();
        named["metadata"]["uid"] = json!("p-1");
        name_messages(&mut s, &named);
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["message"],
            format!(
                "back-off 40s restarting failed container=app pod={}_shop(p-1)",
                name_of(&p)
            )
        );
        assert_eq!(
            s["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
            1
        );
    }

    #[test]
    fn crash_loops_back_off_like_the_kubelet() {
        let mut r = Restarts {
            count: 0,
            running: true,
            backoff_secs: 0,
        };
        let mut seen = Vec::new();
        for _ in 0..9 {
            // Each step waits a long time, so every back-off is over.
            r = crash_step(r, 1_000.0, 1.0);
            seen.push((r.count, r.running, r.backoff_secs));
        }
        assert_eq!(
            seen,
            [
                (0, false, 10),
                (1, true, 10),
                (1, false, 20),
                (2, true, 20),
                (2, false, 40),
                (3, true, 40),
                (3, false, 80),
                (4, true, 80),
                (4, false, 160),
            ]
        );
        // Not yet: 40 s of back-off, scaled by 0.1, is 4 s.
        let waiting = Restarts {
            count: 3,
            running: false,
            backoff_secs: 40,
        };
        assert_eq!(crash_step(waiting, 3.9, 0.1), waiting);
        assert!(crash_step(waiting, 4.0, 0.1).running);
        let capped = Restarts {
            count: 9,
            running: true,
            backoff_secs: 300,
        };
        assert_eq!(crash_step(capped, 0.0, 1.0).backoff_secs, 300);
    }

    #[test]
    fn image_faults_parse() {
        assert_eq!(ImageFault::parse("pullError"), Ok(ImageFault::PullError));
        assert_eq!(ImageFault::parse("oomKilled"), Ok(ImageFault::OomKilled));
        assert!(ImageFault::parse("boom").unwrap_err().contains("one of"));
    }
}
