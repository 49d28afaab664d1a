//! The engine's wiring, driven through `apply`: observations in, hub
//! documents out. The status machines have their own tables; these check
//! what the engine adds — cluster thresholds across probes, cluster ⇄ sync
//! feedback (counts up, ClusterDown/ClusterUp down), app documents from
//! workloads, namespaces and tasks, and that a repeat publishes nothing.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{Engine, Observation};
use crate::hub::{Hub, HubConfig};
use crate::status::app::{ActiveTask, Workload};
use crate::status::cluster::{ClusterInput, ProbeFailure, Thresholds};
use crate::status::sync::{Gvr, SyncInput};

const CLUSTER: &str = "clusters/c";
const DEPLOYMENTS: &str = "clusters/c/sync/apps/v1/deployments";
const APP: &str = "apps/c/shop/web";

/// `(topic, JSON pointer, value)`; `Value::Null` at pointer "" means the
/// topic is gone from the hub.
type Expect = (&'static str, &'static str, Value);

fn t(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
}

fn cluster(input: ClusterInput) -> Observation {
    Observation::Cluster {
        cluster: "c".into(),
        input,
    }
}

fn ok() -> Observation {
    cluster(ClusterInput::ProbeSucceeded {
        latency_ms: 10,
        version: Some("v1.31.0".into()),
    })
}

fn down() -> Observation {
    cluster(ClusterInput::ProbeFailed {
        failure: ProbeFailure::Disconnected,
        message: "connection refused".into(),
        latency_ms: None,
    })
}

fn sync(input: SyncInput) -> Observation {
    Observation::sync("c", &Gvr::new("apps", "v1", "deployments"), input)
}

fn web(expected: i32, ready: i32) -> Workload {
    Workload {
        kind: "Deployment",
        namespace: "shop".into(),
        name: "web".into(),
        app: "web".into(),
        generation: 1,
        observed_generation: 1,
        expected,
        replicas: expected,
        updated: expected,
        ready,
        available: ready,
        failure: None,
        terminating: false,
        images: vec!["web:1".into()],
    }
}

fn applied(w: Workload) -> Observation {
    Observation::WorkloadApplied {
        cluster: "c".into(),
        workload: w,
    }
}

fn registered() -> [(Observation, Vec<Expect>); 3] {
    [
        (
            Observation::Registered {
                cluster: "c".into(),
                server: "https://c".into(),
            },
            vec![(CLUSTER, "/phase", json!("Pending"))],
        ),
        (
            cluster(ClusterInput::Started),
            vec![(CLUSTER, "/phase", json!("Initializing"))],
        ),
        (ok(), vec![(CLUSTER, "/phase", json!("Healthy"))]),
    ]
}

fn run(name: &str, thresholds: Thresholds, steps: Vec<(Observation, Vec<Expect>)>) {
    let hub = Hub::new(HubConfig::default());
    let mut engine = Engine::new(hub.clone(), thresholds);
    for (i, (observation, expects)) in steps.into_iter().enumerate() {
        let what = format!("{name}, step {i} ({observation:?})");
        engine.apply(observation, t(i as i64));
        for (topic, pointer, want) in expects {
            let doc = hub.get(topic).map(|d| (*d.doc).clone());
            let got = match (&doc, pointer) {
                (None, _) => Value::Null,
                (Some(doc), p) => doc.pointer(p).cloned().unwrap_or(Value::Null),
            };
            assert_eq!(got, want, "{what}: {topic}{pointer} in {doc:?}");
        }
    }
}

#[test]
fn cluster_phases_follow_probes_through_both_thresholds() {
    let thresholds = Thresholds {
        success: 2,
        failure: 2,
    };
    let mut steps = registered().to_vec();
    steps.extend([
        (
            down(),
            vec![
                (CLUSTER, "/phase", json!("Healthy")),
                (CLUSTER, "/reason", json!("Ready")),
                (
                    CLUSTER,
                    "/message",
                    json!("probe failed (1/2): connection refused"),
                ),
            ],
        ),
        (
            down(),
            vec![
                (CLUSTER, "/phase", json!("Unhealthy")),
                (CLUSTER, "/reason", json!("Disconnected")),
            ],
        ),
        (
            ok(),
            vec![
                (CLUSTER, "/phase", json!("Unhealthy")),
                (
                    CLUSTER,
                    "/message",
                    json!("recovering: 1/2 probes succeeded"),
                ),
            ],
        ),
        (ok(), vec![(CLUSTER, "/phase", json!("Healthy"))]),
        (
            Observation::Unregistered {
                cluster: "c".into(),
            },
            vec![
                (CLUSTER, "/phase", json!("Removed")),
                (CLUSTER, "/reason", json!("Unregistered")),
            ],
        ),
        // A removed cluster takes no more input.
        (ok(), vec![(CLUSTER, "/phase", json!("Removed"))]),
    ]);
    run("thresholds 2/2", thresholds, steps);

    // With the defaults (success 1, failure 2) one good probe heals.
    let mut steps = registered().to_vec();
    steps.extend([
        (down(), vec![(CLUSTER, "/phase", json!("Healthy"))]),
        (down(), vec![(CLUSTER, "/phase", json!("Unhealthy"))]),
        (ok(), vec![(CLUSTER, "/phase", json!("Healthy"))]),
    ]);
    run("default thresholds", Thresholds::default(), steps);
}

#[test]
fn sync_registry_phases_and_the_cluster_they_feed() {
    let mut steps = registered().to_vec();
    steps.extend([
        (
            sync(SyncInput::ListStarted),
            vec![
                (DEPLOYMENTS, "/phase", json!("Listing")),
                (
                    CLUSTER,
                    "/resources",
                    json!({"total": 1, "synced": 0, "failing": 0}),
                ),
            ],
        ),
        (
            sync(SyncInput::ListDone {
                count: 20,
                resource_version: Some("7".into()),
            }),
            vec![
                (DEPLOYMENTS, "/phase", json!("Syncing")),
                (DEPLOYMENTS, "/objects", json!(20)),
                (CLUSTER, "/phase", json!("Healthy")),
                (CLUSTER, "/resources/synced", json!(1)),
            ],
        ),
        (
            sync(SyncInput::Failed {
                reason: "Forbidden".into(),
                message: "403".into(),
            }),
            vec![
                (DEPLOYMENTS, "/phase", json!("Error")),
                (DEPLOYMENTS, "/reason", json!("Forbidden")),
                (CLUSTER, "/phase", json!("Degraded")),
                (CLUSTER, "/reason", json!("ResourcesFailing")),
                (CLUSTER, "/resources/failing", json!(1)),
            ],
        ),
        (
            sync(SyncInput::ListDone {
                count: 20,
                resource_version: Some("8".into()),
            }),
            vec![
                (DEPLOYMENTS, "/phase", json!("Syncing")),
                (CLUSTER, "/phase", json!("Healthy")),
            ],
        ),
        // The cluster going down stops its syncs; coming back resumes them.
        (down(), vec![(DEPLOYMENTS, "/phase", json!("Syncing"))]),
        (
            down(),
            vec![
                (CLUSTER, "/phase", json!("Unhealthy")),
                (DEPLOYMENTS, "/phase", json!("Stopped")),
                (DEPLOYMENTS, "/reason", json!("ClusterUnhealthy")),
            ],
        ),
        (
            ok(),
            vec![
                (CLUSTER, "/phase", json!("Healthy")),
                (DEPLOYMENTS, "/phase", json!("Syncing")),
            ],
        ),
        (
            sync(SyncInput::Removed),
            vec![
                (DEPLOYMENTS, "/phase", json!("Stopped")),
                (DEPLOYMENTS, "/reason", json!("RemovedFromRegistry")),
                (CLUSTER, "/resources/total", json!(0)),
            ],
        ),
        (
            Observation::Unregistered {
                cluster: "c".into(),
            },
            vec![(DEPLOYMENTS, "", Value::Null)],
        ),
    ]);
    run("sync registry", Thresholds::default(), steps);
}

#[test]
fn a_resource_retrying_after_an_api_error_keeps_the_cluster_degraded() {
    let forbidden = || {
        sync(SyncInput::FailedRetrying {
            reason: "Forbidden".into(),
            message: "403".into(),
            until: t(100),
        })
    };
    let degraded = |failing: u64| {
        vec![
            (CLUSTER, "/phase", json!("Degraded")),
            (CLUSTER, "/resources/failing", json!(failing)),
        ]
    };
    let mut steps = registered().to_vec();
    steps.extend([
        (
            sync(SyncInput::ListStarted),
            vec![(CLUSTER, "/phase", json!("Healthy"))],
        ),
        (forbidden(), degraded(1)),
        // Every retry lists again and fails again: the cluster stays Degraded throughout.
        (sync(SyncInput::ListStarted), degraded(1)),
        (forbidden(), degraded(1)),
        (sync(SyncInput::ListStarted), degraded(1)),
        (ok(), degraded(1)),
        (forbidden(), degraded(1)),
        (sync(SyncInput::ListStarted), degraded(1)),
        (
            sync(SyncInput::ListDone {
                count: 2,
                resource_version: Some("9".into()),
            }),
            vec![
                (CLUSTER, "/phase", json!("Healthy")),
                (CLUSTER, "/resources/failing", json!(0)),
            ],
        ),
        // Only the failure that made it Degraded and the recovery are transitions.
        (
            ok(),
            vec![
                (CLUSTER, "/history/3/to", json!("Degraded")),
                (CLUSTER, "/history/4/to", json!("Healthy")),
                (CLUSTER, "/history/5", Value::Null),
            ],
        ),
    ]);
    run("retrying", Thresholds::default(), steps);
}

#[test]
fn app_stable_states_and_tasks() {
    let task = ActiveTask {
        id: "t1".into(),
        state: "Updating".into(),
        status: "Running".into(),
        progress: 40,
    };
    let mut steps = registered().to_vec();
    steps.extend([
        (
            Observation::NamespacesListed {
                cluster: "c".into(),
                names: vec!["shop".into()],
            },
            vec![(APP, "", Value::Null)],
        ),
        (
            applied(web(3, 3)),
            vec![
                (APP, "/phase", json!("Running")),
                (APP, "/state", json!("Running")),
            ],
        ),
        (applied(web(3, 1)), vec![(APP, "/phase", json!("Degraded"))]),
        (
            Observation::Task {
                cluster: "c".into(),
                namespace: "shop".into(),
                app: "web".into(),
                task: Some(task),
            },
            vec![
                (APP, "/phase", json!("Degraded")),
                (APP, "/state", json!("Updating")),
                (APP, "/task/progress", json!(40)),
            ],
        ),
        (
            Observation::Task {
                cluster: "c".into(),
                namespace: "shop".into(),
                app: "web".into(),
                task: None,
            },
            vec![
                (APP, "/state", json!("Degraded")),
                (APP, "/task", Value::Null),
            ],
        ),
        (applied(web(0, 0)), vec![(APP, "/phase", json!("Stopped"))]),
        (
            Observation::NamespaceDeleted {
                cluster: "c".into(),
                name: "shop".into(),
            },
            vec![(APP, "/phase", json!("NotExisted"))],
        ),
        (
            Observation::NamespaceApplied {
                cluster: "c".into(),
                name: "shop".into(),
            },
            vec![(APP, "/phase", json!("Stopped"))],
        ),
        (
            Observation::WorkloadDeleted {
                cluster: "c".into(),
                kind: "Deployment",
                namespace: "shop".into(),
                name: "web".into(),
            },
            vec![(APP, "/phase", json!("Stopped"))],
        ),
        (
            Observation::Unregistered {
                cluster: "c".into(),
            },
            vec![(APP, "", Value::Null)],
        ),
    ]);
    run("apps", Thresholds::default(), steps);
}

#[test]
fn a_repeat_publishes_nothing_and_unknown_clusters_are_ignored() {
    let hub = Hub::new(HubConfig::default());
    let mut engine = Engine::new(hub.clone(), Thresholds::default());
    for (i, (observation, _)) in registered().into_iter().enumerate() {
        engine.apply(observation, t(i as i64));
    }
    engine.apply(applied(web(2, 2)), t(5));
    let rev = |topic: &str| hub.get(topic).map(|d| d.rev);
    let (cluster_rev, app_rev) = (rev(CLUSTER), rev(APP));
    assert!(app_rev.is_some());
    // The same probe result and a relist with the same workload: no change.
    engine.apply(ok(), t(6));
    engine.apply(
        Observation::WorkloadsListed {
            cluster: "c".into(),
            kind: "Deployment",
            items: vec![web(2, 2)],
        },
        t(7),
    );
    assert_eq!((rev(CLUSTER), rev(APP)), (cluster_rev, app_rev));
    // Observations about a cluster that never registered change nothing.
    engine.apply(
        Observation::WorkloadApplied {
            cluster: "other".into(),
            workload: web(1, 1),
        },
        t(8),
    );
    engine.apply(
        Observation::sync("other", &Gvr::new("", "v1", "pods"), SyncInput::ListStarted),
        t(9),
    );
    assert_eq!(hub.get("apps/other/shop/web").map(|d| d.rev), None);
    assert_eq!(hub.get("clusters/other").map(|d| d.rev), None);
    assert_eq!(
        hub.get("clusters/other/sync/core/v1/pods").map(|d| d.rev),
        None
    );
}
