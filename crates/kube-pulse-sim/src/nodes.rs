//! The Node objects of a simulated cluster: the nodes pods are scheduled on
//! (`sim-node-1..3`; `pods.rs` places pods on them), created at start, Ready, as a kubelet
//! registers and reports them, so `kubectl get nodes` and a sync of `nodes`
//! have something to show.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::object::{UpdateScope, timestamp};
use super::status::ApiResult;
use super::store::Store;

/// How many nodes the simulated cluster claims (in scheduler messages and `nodeName`).
pub const NODES: usize = 3;

/// The kubelet version the nodes report.
const KUBELET_VERSION: &str = "v1.32.0";

/// The name of node `index` (from 1).
pub fn node_name(index: usize) -> String {
    format!("sim-node-{index}")
}

/// The index (from 1) of a simulated node's name, `sim-node-{index}`.
pub fn index_of(name: &str) -> Option<usize> {
    name.strip_prefix("sim-node-")?
        .parse()
        .ok()
        .filter(|i| *i > 0)
}

/// The InternalIP of node `index` (from 1), as its status reports it.
pub fn internal_ip(index: usize) -> String {
    format!("10.0.0.{}", 10 + index)
}

/// Node `index` (from 1) as the kubelet registers it (without status).
pub fn manifest(index: usize) -> Value {
    let name = node_name(index);
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
            },
        },
        "spec": {"podCIDR": format!("10.244.{index}.0/24"), "podCIDRs": [format!("10.244.{index}.0/24")]},
    })
}

/// The status a healthy kubelet reports for node `index` at `now`.
pub fn status(index: usize, now: DateTime<Utc>) -> Value {
    let at = timestamp(now);
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "lastHeartbeatTime": at, "lastTransitionTime": at,
               "reason": reason, "message": message})
    };
    let resources =
        json!({"cpu": "4", "memory": "16393216Ki", "pods": "110", "ephemeral-storage": "102350Mi"});
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": internal_ip(index)},
            {"type": "Hostname", "address": node_name(index)},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": format!("{index:032x}"),
            "systemUUID": format!("{index:032x}"),
            "bootID": format!("{index:032x}"),
            "kernelVersion": "6.8.0",
            "osImage": "Ubuntu 24.04 LTS",
            "containerRuntimeVersion": "containerd://1.7.24",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    })
}

/// Registers every node and reports it Ready (a cluster without a `nodes`
/// resource gets none).
pub(crate) fn seed(store: &Store, now: DateTime<Utc>) -> ApiResult<()> {
    if store.catalog().find("", "v1", "nodes").is_none() {
        return Ok(());
    }
    for index in 1..=NODES {
        register(store, index, now)?;
    }
    Ok(())
}

fn def(store: &Store) -> ApiResult<super::resources::ResourceDef> {
    store
        .catalog()
        .find("", "v1", "nodes")
        .cloned()
        .ok_or_else(|| super::status::ApiError::bad_request("the cluster serves no nodes"))
}

/// Registers node `index` (from 1) and reports it Ready, as its kubelet
/// does when it joins.
pub fn register(store: &Store, index: usize, now: DateTime<Utc>) -> ApiResult<()> {
    let def = def(store)?;
    let created = store.create(&def, None, manifest(index), false)?;
    let status = status(index, now);
    store.set_status(&def, None, super::object::name_of(&created), status)?;
    Ok(())
}

/// Cordons (`spec.unschedulable: true`) or uncordons node `name`, as
/// `kubectl cordon` does.
pub fn cordon(store: &Store, name: &str, cordoned: bool) -> ApiResult<()> {
    let def = def(store)?;
    store.mutate(&def, None, name, UpdateScope::Main, false, |current| {
        let mut next = current.clone();
        if cordoned {
            next["spec"]["unschedulable"] = json!(true);
        } else if let Some(spec) = next["spec"].as_object_mut() {
            spec.remove("unschedulable");
        }
        Ok(next)
    })?;
    Ok(())
}

/// Sets node `name`'s `Ready` condition: `True`, or `Unknown` as the node
/// controller marks a node whose kubelet stopped posting.
pub fn set_ready(store: &Store, name: &str, ready: bool, now: DateTime<Utc>) -> ApiResult<()> {
    let def = def(store)?;
    let at = timestamp(now);
    store.mutate(&def, None, name, UpdateScope::Status, false, |current| {
        let mut next = current.clone();
        if let Some(conditions) = next["status"]["conditions"].as_array_mut() {
            for c in conditions.iter_mut().filter(|c| c["type"] == "Ready") {
                let (status, reason, message) = if ready {
                    ("True", "KubeletReady", "kubelet is posting ready status")
                } else {
                    (
                        "Unknown",
                        "NodeStatusUnknown",
                        "Kubelet stopped posting node status.",
                    )
                };
                c["status"] = json!(status);
                c["reason"] = json!(reason);
                c["message"] = json!(message);
                c["lastTransitionTime"] = json!(at);
            }
        }
        Ok(next)
    })?;
    Ok(())
}

/// Deletes node `name`.
pub fn remove(store: &Store, name: &str) -> ApiResult<()> {
    let def = def(store)?;
    store.delete(&def, None, name, &Default::default(), false)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_ready_and_named_as_pods_are_scheduled() {
        let now: DateTime<Utc> = "2026-01-02T03:04:05Z".parse().unwrap();
        let node = manifest(2);
        assert_eq!(node["metadata"]["name"], "sim-node-2");
        assert_eq!(
            node["metadata"]["labels"]["kubernetes.io/hostname"],
            "sim-node-2"
        );
        let status = status(2, now);
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["lastHeartbeatTime"], "2026-01-02T03:04:05Z");
        assert_eq!(status["nodeInfo"]["kubeletVersion"], KUBELET_VERSION);
        assert_eq!(status["addresses"][0]["address"], "10.0.0.12");
    }
}
