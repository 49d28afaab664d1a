//! Pods and Events of the simulator through kube-rs: the pods behind
//! workloads with the container states of each image fault (pull errors,
//! crash loops, OOM kills, failing readiness), unschedulable pods past the
//! cluster's capacity, pods nobody owns, and the events the scheduler, the
//! kubelet and the controllers write.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_pulse_sim::SimCluster;
use kube_pulse_sim::pods::ImageFault;
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{deploy, sim};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

/// The pods of `app` (by the workload's selector, as kubectl finds them).
async fn pods_of(sim: &SimCluster, app: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(sim.client(), "shop");
    api.list(&ListParams::default().labels(&format!("app.kubernetes.io/name={app}")))
        .await
        .unwrap()
        .items
}

/// Events about objects named `name` (a field selector, as `kubectl describe` asks).
async fn events_of(sim: &SimCluster, name: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(sim.client(), "shop");
    api.list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
}

fn waiting_reason(pod: &Pod) -> Option<String> {
    pod.status.as_ref()?.container_statuses.as_ref()?[0]
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |c| c[0].restart_count)
}

#[tokio::test]
async fn healthy_pods_run_ready_and_are_owned_by_their_replica_set() {
    let sim = sim().await;
    deploy(&sim, "web", 2, "registry.example/web:1");
    let pods = eventually(WAIT, "2 ready pods", || async {
        let pods = pods_of(&sim, "web").await;
        let ready = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter(|p| {
                p.status
                    .as_ref()
                    .unwrap()
                    .container_statuses
                    .as_ref()
                    .unwrap()[0]
                    .ready
            })
            .count();
        (ready == 2).then_some(pods)
    })
    .await;
    let owner = &pods[0].metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.kind, "ReplicaSet");
    assert!(
        pods[0]
            .metadata
            .name
            .as_ref()
            .unwrap()
            .starts_with(&format!("{}-", owner.name))
    );
    assert!(
        pods[0]
            .spec
            .as_ref()
            .unwrap()
            .node_name
            .as_ref()
            .unwrap()
            .starts_with("sim-node-")
    );
    // Scaling down removes pods; the controller says so in an event.
    let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(sim.client(), "shop");
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    eventually(WAIT, "1 pod left", || async {
        (pods_of(&sim, "web").await.len() == 1).then_some(())
    })
    .await;
    let events = events_of(&sim, "web").await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("ScalingReplicaSet")
                && e.message
                    .as_deref()
                    .unwrap()
                    .starts_with("Scaled down replica set web-")),
        "{events:?}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn image_faults_show_in_container_states_and_events() {
    let sim = sim().await;
    sim.set_image_faults([
        ("registry.example/pull:404", ImageFault::PullError),
        ("registry.example/crash:1", ImageFault::Crash),
        ("registry.example/oom:1", ImageFault::OomKilled),
        ("registry.example/probe:1", ImageFault::NotReady),
    ]);
    deploy(&sim, "pull", 1, "registry.example/pull:404");
    deploy(&sim, "crash", 1, "registry.example/crash:1");
    deploy(&sim, "oom", 1, "registry.example/oom:1");
    deploy(&sim, "probe", 1, "registry.example/probe:1");

    let pull = eventually(WAIT, "ImagePullBackOff", || async {
        let pods = pods_of(&sim, "pull").await;
        (pods.len() == 1 && waiting_reason(&pods[0]).as_deref() == Some("ImagePullBackOff"))
            .then(|| pods[0].clone())
    })
    .await;
    assert_eq!(
        pull.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );

    // A crash loop restarts with a growing back-off (scaled to the fast
    // controller of the tests).
    let crash = eventually(WAIT, "CrashLoopBackOff with 2 restarts", || async {
        let pods = pods_of(&sim, "crash").await;
        (pods.len() == 1
            && waiting_reason(&pods[0]).as_deref() == Some("CrashLoopBackOff")
            && restarts(&pods[0]) >= 2)
            .then(|| pods[0].clone())
    })
    .await;
    let last = crash
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .last_state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));

    let oom = eventually(WAIT, "OOMKilled", || async {
        let pods = pods_of(&sim, "oom").await;
        let last = pods.first()?.status.as_ref()?.container_statuses.as_ref()?[0]
            .last_state
            .clone()?
            .terminated?;
        Some(last)
    })
    .await;
    assert_eq!(
        (oom.exit_code, oom.reason.as_deref()),
        (137, Some("OOMKilled"))
    );

    let probe = eventually(WAIT, "running, not ready", || async {
        let pods = pods_of(&sim, "probe").await;
        let status = pods.first()?.status.clone()?;
        (status.phase.as_deref() == Some("Running")).then_some(status)
    })
    .await;
    assert!(!probe.container_statuses.unwrap()[0].ready);

    // The kubelet's warnings, one object per repeated event, counted.
    let warnings = |events: Vec<Event>| -> Vec<(String, String, i32)> {
        events
            .into_iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .map(|e| {
                (
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                    e.count.unwrap_or(0),
                )
            })
            .collect()
    };
    let pod_name = |p: &Pod| p.metadata.name.clone().unwrap();
    let pull_events = warnings(events_of(&sim, &pod_name(&pull)).await);
    assert!(
        pull_events.iter().any(|(r, m, _)| r == "Failed"
            && m.starts_with("Failed to pull image \"registry.example/pull:404\"")),
        "{pull_events:?}"
    );
    let crash_events = eventually(WAIT, "BackOff counted twice", || async {
        let events = warnings(events_of(&sim, &pod_name(&crash)).await);
        events
            .iter()
            .any(|(r, m, c)| {
                r == "BackOff"
                    && m.starts_with("Back-off restarting failed container crash")
                    && *c >= 2
            })
            .then_some(events)
    })
    .await;
    assert_eq!(
        crash_events
            .iter()
            .filter(|(r, _, _)| r == "BackOff")
            .count(),
        1,
        "aggregated: {crash_events:?}"
    );
    let probe_pod = pods_of(&sim, "probe").await.remove(0);
    let probe_events = warnings(events_of(&sim, &pod_name(&probe_pod)).await);
    assert!(
        probe_events
            .iter()
            .any(|(r, m, _)| r == "Unhealthy" && m.starts_with("Readiness probe failed")),
        "{probe_events:?}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn pods_past_the_capacity_are_unschedulable() {
    let sim = sim().await;
    sim.set_pod_capacity(Some(3));
    deploy(&sim, "web", 5, "registry.example/web:1");
    let pending = eventually(WAIT, "2 unschedulable pods", || async {
        let pods = pods_of(&sim, "web").await;
        let pending: Vec<Pod> = pods
            .into_iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter().any(|c| {
                            c.type_ == "PodScheduled"
                                && c.reason.as_deref() == Some("Unschedulable")
                        })
                    })
            })
            .collect();
        (pending.len() == 2).then_some(pending)
    })
    .await;
    let condition = pending[0]
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()[0]
        .clone();
    assert_eq!(condition.status, "False");
    assert!(
        condition
            .message
            .unwrap()
            .starts_with("0/3 nodes are available: 3 Insufficient cpu.")
    );
    assert!(pending[0].spec.as_ref().unwrap().node_name.is_none());
    let events = events_of(&sim, pending[0].metadata.name.as_deref().unwrap()).await;
    assert_eq!(events[0].reason.as_deref(), Some("FailedScheduling"));
    // Room again: they get scheduled and ready.
    sim.set_pod_capacity(None);
    eventually(WAIT, "5 ready", || async {
        let deployment: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(sim.client(), "shop");
        let d = deployment.get("web").await.ok()?;
        (d.status?.ready_replicas == Some(5)).then_some(())
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test]
async fn a_pod_nobody_owns_starts_and_runs() {
    let sim = sim().await;
    let api: Api<Pod> = Api::namespaced(sim.client(), "shop");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "debug", "labels": {"run": "debug"}},
        "spec": {"containers": [{"name": "debug", "image": "registry.example/tools:1"}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &pod).await.unwrap();
    let running = eventually(WAIT, "Running and ready", || async {
        let pod = api.get("debug").await.ok()?;
        let status = pod.status.clone()?;
        (status.phase.as_deref() == Some("Running") && status.container_statuses?[0].ready)
            .then_some(pod)
    })
    .await;
    // Scheduled once, onto a node, with that node's address.
    let spec = running.spec.clone().unwrap();
    let node = spec.node_name.clone().unwrap_or_default();
    assert!(node.starts_with("sim-node-"), "{node:?}");
    let status = running.status.clone().unwrap();
    let index: u32 = node["sim-node-".len()..].parse().unwrap();
    assert_eq!(
        status.host_ip.as_deref(),
        Some(format!("10.0.0.{}", 10 + index).as_str())
    );
    let pod_ip = status.pod_ip.clone().unwrap();
    assert!(pod_ip.starts_with(&format!("10.244.{index}.")), "{pod_ip}");
    assert_eq!(status.pod_ips.unwrap()[0].ip, pod_ip);
    // And it stays so: ticks later nothing has changed.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later = api.get("debug").await.unwrap();
    assert_eq!(
        later.metadata.resource_version, running.metadata.resource_version,
        "the pod changed while running: {:?}",
        later.status
    );
    let events = events_of(&sim, "debug").await;
    let mut reasons: Vec<(String, i32)> = events
        .iter()
        .map(|e| (e.reason.clone().unwrap_or_default(), e.count.unwrap_or(0)))
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [("Scheduled".to_string(), 1), ("Started".to_string(), 1)],
        "{events:?}"
    );
    let scheduled = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("Scheduled"))
        .and_then(|e| e.message.clone())
        .unwrap_or_default();
    assert_eq!(
        scheduled,
        format!("Successfully assigned shop/debug to {node}")
    );
    api.delete("debug", &Default::default()).await.unwrap();
    sim.shutdown().await;
}
