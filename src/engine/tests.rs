//! The engine's wiring, driven through `apply`: observations in, hub
//! documents out. The status machines have their own tables; these check
//! what the engine adds — cluster thresholds across probes, cluster ⇄ sync
//! feedback (counts up, ClusterDown/ClusterUp down), app documents from
//! workloads, namespaces and tasks, and that a repeat publishes nothing.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{Engine, Observation};
use crate::hub::{Hub, HubConfig};
use crate::status::app::{ActiveTask, Workload};
use crate::status::capacity::{NodeFacts, Resources};
use crate::status::cluster::{ClusterInput, ProbeFailure, Thresholds};
use crate::status::pods::PodSummary;
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
        clock_skew_seconds: Some(0),
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
        paused: false,
        progressing: None,
        terminating: false,
        images: vec!["web:1".into()],
        selector: [("app".to_string(), "web".to_string())].into(),
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
            // Its document is removed (its transition to Removed is logged).
            vec![(CLUSTER, "", Value::Null)],
        ),
        // A removed cluster takes no more input: nothing brings it back.
        (ok(), vec![(CLUSTER, "", Value::Null)]),
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
        // A cluster outage does not bring a removed resource back ...
        (
            down(),
            vec![(DEPLOYMENTS, "/reason", json!("RemovedFromRegistry"))],
        ),
        (
            down(),
            vec![
                (CLUSTER, "/phase", json!("Unhealthy")),
                (DEPLOYMENTS, "/reason", json!("RemovedFromRegistry")),
                (CLUSTER, "/resources/total", json!(0)),
            ],
        ),
        (ok(), vec![(CLUSTER, "/phase", json!("Healthy"))]),
        // ... a new watch does: the resource is back in a registry.
        (
            sync(SyncInput::ListStarted),
            vec![
                (DEPLOYMENTS, "/phase", json!("Listing")),
                (CLUSTER, "/resources/total", json!(1)),
            ],
        ),
        (
            sync(SyncInput::ListDone {
                count: 4,
                resource_version: Some("12".into()),
            }),
            vec![
                (DEPLOYMENTS, "/phase", json!("Syncing")),
                (DEPLOYMENTS, "/objects", json!(4)),
                (CLUSTER, "/resources/synced", json!(1)),
            ],
        ),
        (
            sync(SyncInput::Removed),
            vec![(DEPLOYMENTS, "/reason", json!("RemovedFromRegistry"))],
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

/// A member found down before its watches report (an unauthorized one:
/// its probe and its watches fail alike) stops the resources it reports
/// afterwards too, instead of showing the member's failure as theirs.
#[test]
fn a_resource_first_seen_while_its_cluster_is_down_is_stopped() {
    let unauthorized = || {
        cluster(ClusterInput::ProbeFailed {
            failure: ProbeFailure::Unauthorized,
            message: "Unauthorized".into(),
            latency_ms: Some(3),
        })
    };
    let mut steps = registered()[..2].to_vec();
    steps.extend([
        (unauthorized(), vec![]),
        (
            unauthorized(),
            vec![(CLUSTER, "/phase", json!("Unhealthy"))],
        ),
        (sync(SyncInput::ListStarted), vec![]),
        (
            sync(SyncInput::FailedRetrying {
                reason: "Unauthorized".into(),
                message: "401".into(),
                until: t(60),
            }),
            vec![
                (DEPLOYMENTS, "/phase", json!("Stopped")),
                (DEPLOYMENTS, "/reason", json!("ClusterUnhealthy")),
                (CLUSTER, "/resources/failing", json!(0)),
            ],
        ),
        // The member answers again: the resource waits for its watch.
        (
            ok(),
            vec![
                (CLUSTER, "/phase", json!("Healthy")),
                (DEPLOYMENTS, "/phase", json!("Pending")),
                (DEPLOYMENTS, "/reason", json!("ClusterRecovered")),
            ],
        ),
    ]);
    run("first seen while down", Thresholds::default(), steps);
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

#[test]
fn gone_apps_expire_after_the_retention_unless_they_come_back() {
    let retention = std::time::Duration::from_secs(60);
    let deleted = || Observation::WorkloadDeleted {
        cluster: "c".into(),
        kind: "Deployment",
        namespace: "shop".into(),
        name: "web".into(),
    };
    let ns_deleted = || Observation::NamespaceDeleted {
        cluster: "c".into(),
        name: "shop".into(),
    };
    let task = |active: bool| Observation::Task {
        cluster: "c".into(),
        namespace: "shop".into(),
        app: "web".into(),
        task: active.then(|| ActiveTask {
            id: "t1".into(),
            state: "Starting".into(),
            status: "Running".into(),
            progress: 10,
        }),
    };
    let gone = Value::Null;
    // Each case starts with `web` Running at t(4). A step is (second, an
    // observation to apply or None to call `expire`, `/phase` of the app
    // afterwards — Null: the topic is gone from the hub).
    type Step = (i64, Option<Observation>, Value);
    let cases: Vec<(&str, Vec<Step>)> = vec![
        (
            "workloads deleted",
            vec![
                (10, Some(deleted()), json!("Stopped")),
                (11, None, json!("Stopped")),
                (69, None, json!("Stopped")),
                (70, None, gone.clone()),
            ],
        ),
        (
            "namespace deleted",
            vec![
                (10, Some(ns_deleted()), json!("NotExisted")),
                (69, None, json!("NotExisted")),
                (70, None, gone.clone()),
            ],
        ),
        (
            "namespace, then workloads deleted: counted from the first",
            vec![
                (10, Some(ns_deleted()), json!("NotExisted")),
                (30, Some(deleted()), json!("NotExisted")),
                (69, None, json!("NotExisted")),
                (70, None, gone.clone()),
            ],
        ),
        (
            "workload re-created within the retention",
            vec![
                (10, Some(deleted()), json!("Stopped")),
                (50, Some(applied(web(2, 2))), json!("Running")),
                (70, None, json!("Running")),
                (500, None, json!("Running")),
                // Deleted again: the retention starts over.
                (600, Some(deleted()), json!("Stopped")),
                (659, None, json!("Stopped")),
                (660, None, gone.clone()),
                // A workload appearing later starts a new document.
                (700, Some(applied(web(1, 1))), json!("Running")),
            ],
        ),
        (
            "scaled to zero is not gone",
            vec![
                (10, Some(applied(web(0, 0))), json!("Stopped")),
                (10_000, None, json!("Stopped")),
            ],
        ),
        (
            "an active task keeps the app",
            vec![
                (10, Some(deleted()), json!("Stopped")),
                (20, Some(task(true)), json!("Stopped")),
                (1000, None, json!("Stopped")),
                (1010, Some(task(false)), json!("Stopped")),
                (1011, None, gone.clone()),
            ],
        ),
    ];
    for (name, steps) in cases {
        let hub = Hub::new(HubConfig::default());
        let mut engine = Engine::new(hub.clone(), Thresholds::default()).with_retention(retention);
        for (i, (observation, _)) in registered().into_iter().enumerate() {
            engine.apply(observation, t(i as i64));
        }
        let listed = Observation::NamespacesListed {
            cluster: "c".into(),
            names: vec!["shop".into()],
        };
        engine.apply(listed, t(3));
        engine.apply(applied(web(2, 2)), t(4));
        for (at, observation, want) in steps {
            let what = format!("{name}, at {at} ({observation:?})");
            match observation {
                Some(observation) => engine.apply(observation, t(at)),
                None => engine.expire(t(at)),
            }
            let doc = hub.get(APP).map(|d| (*d.doc).clone());
            let got = doc.as_ref().map_or(Value::Null, |d| d["phase"].clone());
            assert_eq!(got, want, "{what}: {doc:?}");
            if let Some(doc) = &doc
                && at == 700
            {
                assert_eq!(doc["history"], json!({}), "{what}: a new document");
            }
        }
        // The cluster document is never expired.
        engine.expire(t(100_000));
        assert!(hub.get(CLUSTER).is_some(), "{name}");
    }
}

#[test]
fn expiry_runs_every_tenth_of_the_retention_within_1_to_30_s() {
    let hub = Hub::new(HubConfig::default());
    let secs = std::time::Duration::from_secs;
    for (retention, period) in [(1, 1), (20, 2), (600, 30), (100_000, 30)] {
        let engine =
            Engine::new(hub.clone(), Thresholds::default()).with_retention(secs(retention));
        assert_eq!(engine.expiry_period(), secs(period), "{retention}");
    }
}

#[test]
fn an_unregistered_cluster_leaves_nothing_and_late_observations_bring_nothing_back() {
    let hub = Hub::new(HubConfig::default());
    let metrics = crate::metrics::Metrics::new();
    let mut engine = Engine::new(hub.clone(), Thresholds::default()).with_metrics(metrics.clone());
    let forbidden = || {
        sync(SyncInput::FailedRetrying {
            reason: "Forbidden".into(),
            message: "403".into(),
            until: t(100),
        })
    };
    let mut at = 0;
    let mut apply = |engine: &mut Engine, o: Observation| {
        at += 1;
        engine.apply(o, t(at));
    };
    for (observation, _) in registered() {
        apply(&mut engine, observation);
    }
    for observation in [
        sync(SyncInput::ListStarted),
        forbidden(),
        applied(web(1, 1)),
    ] {
        apply(&mut engine, observation);
    }
    let of_c = |hub: &Hub| -> Vec<String> {
        let all = crate::hub::Pattern::parse("**").unwrap();
        hub.list(&[all])
            .into_iter()
            .map(|d| d.topic.to_string())
            .filter(|t| t == CLUSTER || t.starts_with("clusters/c/") || t.starts_with("apps/c/"))
            .collect()
    };
    assert_eq!(of_c(&hub), [APP, CLUSTER, DEPLOYMENTS]);
    let text = metrics.render(&hub);
    for family in [
        "watch_lists_total",
        "watch_errors_total",
        "probe_latency_seconds_count",
    ] {
        let series = format!("kube_pulse_{family}{{cluster=\"c\"");
        assert!(text.contains(&series), "{series} missing in\n{text}");
    }

    let mut removed = hub.subscribe(vec![crate::hub::Pattern::parse("**").unwrap()]);
    apply(
        &mut engine,
        Observation::Unregistered {
            cluster: "c".into(),
        },
    );
    assert!(of_c(&hub).is_empty(), "{:?}", of_c(&hub));
    let mut gone = Vec::new();
    while let Some(delivery) = removed.try_next() {
        match delivery {
            crate::hub::Delivery::Change(c) if c.kind == crate::hub::ChangeKind::Removed => {
                gone.push(c.topic.to_string())
            }
            other => panic!("only removals expected, got {other:?}"),
        }
    }
    gone.sort();
    assert_eq!(gone, [APP, CLUSTER, DEPLOYMENTS]);
    assert!(!metrics.render(&hub).contains("cluster=\"c\""));

    // What a source still stopping could have sent after it: nothing comes back.
    let late = [
        ok(),
        down(),
        cluster(ClusterInput::Started),
        sync(SyncInput::ListStarted),
        forbidden(),
        applied(web(2, 2)),
        Observation::WorkloadsListed {
            cluster: "c".into(),
            kind: "Deployment",
            items: vec![web(2, 2)],
        },
        Observation::NamespacesListed {
            cluster: "c".into(),
            names: vec!["shop".into()],
        },
        Observation::NamespaceApplied {
            cluster: "c".into(),
            name: "shop".into(),
        },
        Observation::Task {
            cluster: "c".into(),
            namespace: "shop".into(),
            app: "web".into(),
            task: None,
        },
        Observation::Unregistered {
            cluster: "c".into(),
        },
    ];
    for observation in late {
        let what = format!("{observation:?}");
        apply(&mut engine, observation);
        assert!(
            of_c(&hub).is_empty(),
            "{what} brought back {:?}",
            of_c(&hub)
        );
        let text = metrics.render(&hub);
        assert!(
            !text.contains("cluster=\"c\""),
            "{what} brought back series:\n{text}"
        );
    }

    // A new incarnation of the name starts afresh: nothing of the removed
    // one is held to continue.
    for (observation, _) in registered() {
        apply(&mut engine, observation);
    }
    assert_eq!(of_c(&hub), [CLUSTER]);
    let doc = hub.get(CLUSTER).unwrap().doc;
    assert_eq!(doc["phase"], json!("Healthy"));
    let history: Vec<Value> = crate::status::lifecycle::transitions(&doc)
        .iter()
        .map(|t| json!([t["number"], t["to"], t["at"]]))
        .collect();
    assert_eq!(
        history[..],
        [
            json!([1, "Initializing", history[0][2]]),
            json!([2, "Healthy", doc["since"]])
        ],
        "{doc}"
    );
}

/// A document time, as `t(s)` serializes.
fn millis(s: i64) -> String {
    t(s).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `(number, from, to, reason)` of a document's history, oldest first.
fn history(hub: &Hub, topic: &str) -> Vec<(u64, String, String, String)> {
    let doc = hub.get(topic).unwrap().doc;
    crate::status::lifecycle::transitions(&doc)
        .iter()
        .map(|t| {
            let text = |field: &str| t[field].as_str().unwrap().to_string();
            (
                t["number"].as_u64().unwrap(),
                text("from"),
                text("to"),
                text("reason"),
            )
        })
        .collect()
}

/// Every topic of member `c` in `from`, put into `to` as the stream of
/// changes brings them: at the revision of the replica that published them.
fn streamed(from: &Hub, to: &Hub) {
    let all = crate::hub::Pattern::parse("**").unwrap();
    for held in from.list(&[all]) {
        to.apply_remote(held.topic.as_ref(), held.rev, Some((*held.doc).clone()));
    }
}

#[test]
fn a_new_owner_continues_the_documents_its_predecessor_published() {
    // The previous owner runs the member for a while.
    let previous = Hub::new(HubConfig::default());
    let mut owner = Engine::new(previous.clone(), Thresholds::default());
    let mut before: Vec<Observation> = registered().into_iter().map(|(o, _)| o).collect();
    before.extend([
        sync(SyncInput::ListStarted),
        sync(SyncInput::ListDone {
            count: 3,
            resource_version: Some("7".into()),
        }),
        applied(web(2, 2)),
        applied(web(2, 1)),
        applied(web(2, 2)),
    ]);
    for (i, observation) in before.into_iter().enumerate() {
        owner.apply(observation, t(i as i64));
    }
    let published = |topic: &str| previous.get(topic).unwrap();
    let cluster_then = published(CLUSTER);
    let app_then = published(APP);
    let sync_then = published(DEPLOYMENTS);
    assert_eq!(cluster_then.doc["phase"], json!("Healthy"));
    assert_eq!(app_then.doc["phase"], json!("Running"));
    assert_eq!(history(&previous, APP).len(), 2);

    // The next owner's hub holds them from the stream; its engine never ran `c`.
    let hub = Hub::new(HubConfig::default());
    streamed(&previous, &hub);
    let mut changes = hub.subscribe(vec![crate::hub::Pattern::parse("**").unwrap()]);
    while changes.try_next().is_some() {}
    let mut engine = Engine::new(hub.clone(), Thresholds::default());
    let at = |s| t(100 + s);
    engine.apply(
        Observation::Registered {
            cluster: "c".into(),
            server: "https://c".into(),
        },
        at(0),
    );
    // The restored document is the published one: nothing to publish.
    assert_eq!(hub.get(CLUSTER).unwrap(), cluster_then);
    for (i, observation) in [
        cluster(ClusterInput::Credentials(None)),
        cluster(ClusterInput::Started),
        ok(),
    ]
    .into_iter()
    .enumerate()
    {
        engine.apply(observation, at(1 + i as i64));
    }
    // Healthy as it was, with the counts it showed until its watches report.
    assert_eq!(hub.get(CLUSTER).unwrap(), cluster_then);

    // Its watches start again: a relist, numbered after the published transitions.
    let sync_history = history(&previous, DEPLOYMENTS);
    engine.apply(sync(SyncInput::ListStarted), at(4));
    engine.apply(
        sync(SyncInput::ListDone {
            count: 3,
            resource_version: Some("9".into()),
        }),
        at(5),
    );
    let n = sync_history.len() as u64;
    let mut want = sync_history.clone();
    let step = |number, from: &str, to: &str, reason: &str| {
        (number, from.to_string(), to.to_string(), reason.to_string())
    };
    want.extend([
        step(n + 1, "Syncing", "Listing", "Relist"),
        step(n + 2, "Listing", "Syncing", "Watching"),
    ]);
    assert_eq!(history(&hub, DEPLOYMENTS), want);
    let sync_now = hub.get(DEPLOYMENTS).unwrap();
    assert_eq!(sync_now.rev, sync_then.rev + 2);
    assert_eq!(sync_now.doc["resourceVersion"], json!("9"));

    // Its workloads are listed: the app continues, then changes.
    engine.apply(
        Observation::WorkloadsListed {
            cluster: "c".into(),
            kind: "Deployment",
            items: vec![web(2, 2)],
        },
        at(6),
    );
    assert_eq!(hub.get(APP).unwrap(), app_then, "the same app, nothing new");
    engine.apply(applied(web(2, 1)), at(7));
    let mut want = history(&previous, APP);
    want.push(step(3, "Running", "Degraded", "ReplicasNotReady"));
    assert_eq!(history(&hub, APP), want);
    let app_now = hub.get(APP).unwrap();
    assert_eq!(app_now.rev, app_then.rev + 1);
    assert_eq!(app_now.doc["since"], json!(millis(107)));

    // The cluster kept its phase, `since` and history through all of it, and
    // its revisions follow the published ones.
    let cluster_now = hub.get(CLUSTER).unwrap();
    for field in ["phase", "reason", "since", "history"] {
        assert_eq!(cluster_now.doc[field], cluster_then.doc[field], "{field}");
    }
    assert_eq!(cluster_now.doc["resources"]["synced"], json!(1));
    assert!(cluster_now.rev > cluster_then.rev);
    let mut revs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    while let Some(delivery) = changes.try_next() {
        let crate::hub::Delivery::Change(change) = delivery else {
            panic!("{delivery:?}");
        };
        assert_eq!(change.kind, crate::hub::ChangeKind::Patch, "{change:?}");
        revs.entry(change.topic.to_string())
            .or_default()
            .push(change.rev);
    }
    let following = |from: u64, to: u64| ((from + 1)..=to).collect::<Vec<_>>();
    assert_eq!(revs[CLUSTER], following(cluster_then.rev, cluster_now.rev));
    assert_eq!(revs[DEPLOYMENTS], following(sync_then.rev, sync_now.rev));
    assert_eq!(revs[APP], following(app_then.rev, app_now.rev));
}

#[test]
fn a_removed_or_unreadable_document_is_not_continued() {
    let removed = json!({"name": "c", "server": "https://c", "phase": "Removed",
        "reason": "Unregistered", "message": "removed from the configuration",
        "since": millis(5), "history": {"1": {"from": "Healthy", "to": "Removed",
        "reason": "Unregistered", "at": millis(5)}},
        "probe": {"latencyMs": null, "lastError": null, "serverVersion": null,
            "consecutiveSuccesses": 0, "consecutiveFailures": 0},
        "resources": {"total": 0, "synced": 0, "failing": 0},
        "cache": {"objects": 0, "lastListAt": null}});
    let cases = [
        ("removed", removed),
        ("unreadable", json!({"phase": 5})),
        ("another member's", json!({"name": "d"})),
    ];
    for (name, doc) in cases {
        let hub = Hub::new(HubConfig::default());
        hub.apply_remote(CLUSTER, 4, Some(doc));
        let mut engine = Engine::new(hub.clone(), Thresholds::default());
        engine.apply(
            Observation::Registered {
                cluster: "c".into(),
                server: "https://c".into(),
            },
            t(10),
        );
        let held = hub.get(CLUSTER).unwrap();
        assert_eq!(held.doc["phase"], json!("Pending"), "{name}");
        assert_eq!(held.doc["since"], json!(millis(10)), "{name}");
        assert!(history(&hub, CLUSTER).is_empty(), "{name}");
        assert_eq!(held.rev, 5, "{name}: the revisions still continue");
    }
}

/// A pod of `web` (labels `app=web`) in `shop`: ready, or with a container state.
fn pod(name: &str, labels: Value, ready: bool, restarts: i32, state: Value) -> PodSummary {
    let last = if restarts > 0 {
        json!({"terminated": {"exitCode": 1, "reason": "Error"}})
    } else {
        json!({})
    };
    let p: crate::status::objects::PodObject = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "shop", "labels": labels},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}],
            "containerStatuses": [{"name": "app", "image": "web:1", "imageID": "", "ready": ready,
                "restartCount": restarts, "state": state, "lastState": last}]},
    }))
    .unwrap();
    PodSummary::from_pod(&p, &mut crate::status::labels::LabelSets::default())
}

fn pod_applied(pod: PodSummary) -> Observation {
    Observation::PodApplied {
        cluster: "c".into(),
        pod,
    }
}

fn warning(event: &str, kind: &str, name: &str, reason: &str, seconds: i64) -> Observation {
    let e: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": event, "namespace": "shop"},
        "involvedObject": {"kind": kind, "name": name, "namespace": "shop"},
        "type": "Warning", "reason": reason, "message": format!("{reason} of {name}"),
        "count": 2, "lastTimestamp": t(seconds),
    }))
    .unwrap();
    let (key, warning) = crate::status::pods::Warning::from_event(&e).unwrap();
    Observation::WarningApplied {
        cluster: "c".into(),
        key,
        warning,
    }
}

#[test]
fn pods_and_warnings_fold_into_their_app() {
    let hub = Hub::new(HubConfig::default());
    let mut engine = Engine::new(hub.clone(), Thresholds::default());
    for (i, (observation, _)) in registered().into_iter().enumerate() {
        engine.apply(observation, t(i as i64));
    }
    let doc = || (*hub.get(APP).unwrap().doc).clone();
    let rev = || hub.get(APP).map(|d| d.rev);
    engine.apply(applied(web(3, 2)), t(5));
    // Before the first pod list: no pod summary, the workload's reason.
    assert_eq!(doc().get("pods"), None);
    assert_eq!(doc()["reason"], "ReplicasNotReady");
    let running = json!({"running": {}});
    let crash = json!({"waiting": {"reason": "CrashLoopBackOff"}});
    let web_labels = json!({"app": "web", "pod-template-hash": "abc"});
    engine.apply(
        Observation::PodsListed {
            cluster: "c".into(),
            items: vec![
                pod("web-1", web_labels.clone(), true, 0, running.clone()),
                pod("web-2", web_labels.clone(), true, 0, running.clone()),
                pod("web-3", web_labels.clone(), false, 5, crash.clone()),
                // Another app's pod in the same namespace is not web's.
                pod("api-1", json!({"app": "api"}), false, 0, running.clone()),
            ],
        },
        t(6),
    );
    let d = doc();
    assert_eq!(
        (d["phase"].clone(), d["reason"].clone()),
        (json!("Degraded"), json!("CrashLoopBackOff"))
    );
    assert_eq!(
        d["message"],
        "2/3 ready: 1 pod CrashLoopBackOff (container app exited 1, 5 restarts)"
    );
    assert_eq!(
        d["pods"],
        json!({"total": 3, "ready": 2, "more": 0, "problems": [{"pod": "web-3", "container": "app",
            "reason": "CrashLoopBackOff", "message": "Error", "restarts": 5, "exitCode": 1}]})
    );
    // A warning about web's pod shows; one about another app's pod does not;
    // the latest of web's wins.
    engine.apply(warning("e1", "Pod", "web-3", "BackOff", 7), t(7));
    engine.apply(warning("e2", "Pod", "api-1", "Unhealthy", 9), t(8));
    assert_eq!(doc()["lastWarning"]["object"], "Pod/web-3");
    engine.apply(warning("e3", "Deployment", "web", "FailedCreate", 9), t(9));
    assert_eq!(
        doc()["lastWarning"],
        json!({"reason": "FailedCreate", "message": "FailedCreate of web", "object": "Deployment/web",
            "count": 2, "lastSeen": "2023-11-14T22:13:29Z"})
    );
    // An unchanged pod status publishes nothing.
    let before = rev();
    engine.apply(
        pod_applied(pod("web-1", web_labels.clone(), true, 0, running.clone())),
        t(10),
    );
    assert_eq!(rev(), before);
    // The crashing pod is replaced by a ready one: its warnings go with it.
    engine.apply(
        Observation::PodDeleted {
            cluster: "c".into(),
            namespace: "shop".into(),
            name: "web-3".into(),
        },
        t(11),
    );
    engine.apply(
        pod_applied(pod("web-4", web_labels, true, 0, running)),
        t(12),
    );
    engine.apply(applied(web(3, 3)), t(12));
    let d = doc();
    assert_eq!(d["reason"], "AllReady");
    assert_eq!(
        d["pods"],
        json!({"total": 3, "ready": 3, "more": 0, "problems": []})
    );
    assert_eq!(d["lastWarning"]["object"], "Deployment/web");
    // The workload's own warning goes when the event is deleted.
    engine.apply(
        Observation::WarningDeleted {
            cluster: "c".into(),
            key: ("shop".into(), "e3".into()),
        },
        t(13),
    );
    assert_eq!(doc().get("lastWarning"), None);
}

#[test]
fn warnings_are_capped_per_member() {
    let hub = Hub::new(HubConfig::default());
    let mut engine = Engine::new(hub.clone(), Thresholds::default());
    for (i, (observation, _)) in registered().into_iter().enumerate() {
        engine.apply(observation, t(i as i64));
    }
    let items = (0..super::model::MAX_WARNINGS + 10)
        .map(|i| {
            let Observation::WarningApplied { key, warning, .. } = warning(
                &format!("e{i:05}"),
                "Pod",
                &format!("gone-{i}"),
                "BackOff",
                i as i64,
            ) else {
                unreachable!()
            };
            (key, warning)
        })
        .collect();
    engine.apply(
        Observation::WarningsListed {
            cluster: "c".into(),
            items,
        },
        t(5),
    );
    let model = &engine.clusters["c"];
    assert_eq!(model.warnings.len(), super::model::MAX_WARNINGS);
    // The oldest went.
    assert!(
        !model
            .warnings
            .contains_key(&("shop".to_string(), "e00000".to_string()))
    );
    // A pod list drops the warnings of pods that are gone.
    engine.apply(
        Observation::PodsListed {
            cluster: "c".into(),
            items: vec![],
        },
        t(6),
    );
    assert!(engine.clusters["c"].warnings.is_empty());
}

/// The bytes a node map holds: its table (hashbrown: a power of two of
/// buckets for the capacity at 7/8 load, one control byte each plus a
/// group's worth) and each name's own allocation (rounded up to 16, as
/// the allocator hands them out).
fn node_map_bytes(map: &HashMap<Box<str>, NodeFacts>) -> usize {
    let buckets = (map.capacity() * 8 / 7).next_power_of_two().max(4);
    let table = buckets * (std::mem::size_of::<(Box<str>, NodeFacts)>() + 1) + 16;
    let names: usize = map.keys().map(|k| k.len().div_ceil(16) * 16).sum();
    table + names
}

#[test]
fn a_hundred_members_of_fifty_nodes_hold_under_500_bytes_a_node() {
    let hub = Hub::new(HubConfig::default());
    let mut engine = Engine::new(hub.clone(), Thresholds::default());
    let facts = NodeFacts {
        ready: true,
        unschedulable: false,
        capacity: Resources {
            cpu_millis: 16_000,
            memory_bytes: 64 << 30,
            pods: 110,
        },
        allocatable: Resources {
            cpu_millis: 15_800,
            memory_bytes: 62 << 30,
            pods: 110,
        },
    };
    for m in 0..100 {
        let cluster = format!("member-{m:03}");
        engine.apply(
            Observation::Registered {
                cluster: cluster.clone(),
                server: format!("https://{cluster}"),
            },
            t(0),
        );
        let items = (0..50)
            .map(|n| (format!("ip-10-0-{m}-{n}.eu-west-1.compute.internal"), facts))
            .collect();
        engine.apply(Observation::NodesListed { cluster, items }, t(1));
    }
    let held: usize = engine
        .clusters
        .values()
        .filter_map(|c| c.nodes.as_ref())
        .map(node_map_bytes)
        .sum();
    let per_node = held / 5000;
    eprintln!("nodes held: {held} bytes for 5000 nodes, {per_node} bytes a node");
    assert!(per_node <= 500, "{per_node} bytes a node");
    let doc = hub.get("clusters/member-042").unwrap().doc;
    assert_eq!(doc["nodes"]["total"], 50);
    assert_eq!(doc["nodes"]["allocatable"]["cpuMillis"], 790_000);
}
