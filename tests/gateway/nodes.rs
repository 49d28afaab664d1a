//! The nodes and pods of a cluster document (src/status/capacity.rs,
//! docs/STATUS.md): a simulated member's Nodes watched once, summed into
//! `nodes` (total, ready, unschedulable, capacity, allocatable) and the
//! pod watch's `pods` (total, running, requests). Through node adds,
//! cordons, a node going NotReady and one deleted, the document equals what
//! the simulator holds, read here with a kube client and summed by the test
//! itself. Every wait bounded.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use kube_pulse_sim::{SimCluster, nodes};
use pulse_testkit::gateway::pipeline;
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{deployment, sim_with};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

/// A change made to the simulator, named.
type Step<'a> = (&'static str, Box<dyn Fn() + 'a>);

/// A quantity as the simulator writes them: whole cores, `Ki` or plain
/// bytes, `m` millicores, `Mi` mebibytes.
fn number(raw: &str, cpu: bool) -> u64 {
    let (n, unit) = raw.split_at(
        raw.find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(raw.len()),
    );
    let n: u64 = n.parse().unwrap();
    match (unit, cpu) {
        ("", true) => n * 1000,
        ("m", true) => n,
        ("", false) => n,
        ("Ki", false) => n * 1024,
        ("Mi", false) => n * 1024 * 1024,
        other => panic!("{raw}: {other:?}"),
    }
}

/// The `nodes` and `pods` blocks the simulator's objects call for.
async fn truth(sim: &SimCluster) -> (Value, Value) {
    let client = sim.client();
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let sum = |list: &str, node: &Node| {
        let status = node.status.as_ref().unwrap();
        let resources = if list == "capacity" {
            &status.capacity
        } else {
            &status.allocatable
        };
        let resources = resources.as_ref().unwrap();
        (
            number(&resources["cpu"].0, true),
            number(&resources["memory"].0, false),
            number(&resources["pods"].0, false),
        )
    };
    let mut out = json!({"total": 0, "ready": 0, "unschedulable": 0});
    for list in ["capacity", "allocatable"] {
        let (mut cpu, mut memory, mut pods) = (0, 0, 0);
        for node in &nodes.items {
            let (c, m, p) = sum(list, node);
            (cpu, memory, pods) = (cpu + c, memory + m, pods + p);
        }
        out[list] = json!({"cpuMillis": cpu, "memoryBytes": memory, "pods": pods});
    }
    for node in &nodes.items {
        out["total"] = json!(out["total"].as_u64().unwrap() + 1);
        let ready = node
            .status
            .as_ref()
            .unwrap()
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready {
            out["ready"] = json!(out["ready"].as_u64().unwrap() + 1);
        }
        if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            out["unschedulable"] = json!(out["unschedulable"].as_u64().unwrap() + 1);
        }
    }
    let pods = Api::<Pod>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap();
    let live: Vec<&Pod> = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let running = live
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count();
    let (mut cpu, mut memory) = (0, 0);
    for pod in &live {
        for container in &pod.spec.as_ref().unwrap().containers {
            let requests = container
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .unwrap();
            cpu += number(&requests["cpu"].0, true);
            memory += number(&requests["memory"].0, false);
        }
    }
    let pods = json!({"total": live.len(), "running": running, "requests": {"cpuMillis": cpu, "memoryBytes": memory}});
    (out, pods)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_document_sums_the_simulators_nodes_and_pods_through_changes() {
    let shutdown = CancellationToken::new();
    let sim = sim_with(|c| {
        c.name = "a".into();
        c.workloads = vec![deployment("shop", "web", 3), deployment("shop", "cart", 2)];
    })
    .await;
    let pipeline = pipeline(&[&sim], vec![], &shutdown).await;
    let store = sim.store();
    let now = chrono::Utc::now;
    let steps: Vec<Step<'_>> = vec![
        ("as started", Box::new(|| {})),
        (
            "two nodes join",
            Box::new(|| {
                nodes::register(store, 4, now()).unwrap();
                nodes::register(store, 5, now()).unwrap();
            }),
        ),
        (
            "sim-node-2 cordoned",
            Box::new(|| nodes::cordon(store, "sim-node-2", true).unwrap()),
        ),
        (
            "sim-node-3 NotReady",
            Box::new(|| nodes::set_ready(store, "sim-node-3", false, now()).unwrap()),
        ),
        (
            "sim-node-5 deleted",
            Box::new(|| nodes::remove(store, "sim-node-5").unwrap()),
        ),
        (
            "sim-node-2 uncordoned, sim-node-3 Ready",
            Box::new(|| {
                nodes::cordon(store, "sim-node-2", false).unwrap();
                nodes::set_ready(store, "sim-node-3", true, now()).unwrap();
            }),
        ),
    ];
    for (what, step) in steps {
        step();
        // Pods may still be starting: the truth is read again each look.
        let doc = eventually(WAIT, what, || async {
            let (want_nodes, want_pods) = truth(&sim).await;
            let doc = pipeline.hub().get("clusters/a")?.doc;
            (doc["nodes"] == want_nodes && doc["pods"] == want_pods).then_some(doc)
        })
        .await;
        eprintln!("{what}: nodes {} pods {}", doc["nodes"], doc["pods"]);
    }
    // The sums are not counts of a small sample: the sim runs 5 pods of
    // 100m and 128Mi each on 4 nodes of 4 cores.
    let doc = pipeline.hub().get("clusters/a").unwrap().doc;
    assert_eq!(doc["nodes"]["total"], 4);
    assert_eq!(doc["nodes"]["capacity"]["cpuMillis"], 16_000);
    assert_eq!(doc["pods"]["requests"]["cpuMillis"], 500);
    shutdown.cancel();
    pipeline.stop().await;
    sim.shutdown().await;
}
