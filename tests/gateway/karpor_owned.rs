//! kube-pulse writes only what it owns on Karpor's objects, end to end: a
//! simulated Karpor serving #831's Cluster schema sets `Validated`,
//! `ClusterHealthy` and `apiserver` on create, a third controller writes a
//! condition of its own, and a gateway runs through a member fault and its
//! healing; afterwards what kube-pulse does not own is byte for byte as it
//! was, `ClusterHealthy` went `False (NotReachable)` and back, and `version`
//! is the member's. The same run against Karpor 0.6's schema, which keeps
//! only `healthy`.

use std::time::Duration;

use kube_pulse_sim::Faults;
use kube_pulse_sim::karpor::{self, KarporOptions, MemberAccess};
use pulse_testkit::gateway::start_gateway;
use pulse_testkit::http::get_json;
use pulse_testkit::kubectl::{kubectl, ok};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{karpor_settings, sim};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Generous on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);

async fn status_of(server: &str, name: &str) -> Value {
    let out = ok(&kubectl(server, &["get", "clusters", name, "-o", "json"]).await);
    let object: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    object["status"].clone()
}

fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn is(status: &Value, kind: &str, expected: (&str, &str)) -> bool {
    condition(status, kind).is_some_and(|c| c["status"] == expected.0 && c["reason"] == expected.1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_karpor_831_kube_pulse_keeps_what_it_does_not_own_through_a_fault() {
    Box::pin(fault_and_heal(true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_karpor_0_6_the_same_run_keeps_healthy_only() {
    Box::pin(fault_and_heal(false)).await;
}

async fn fault_and_heal(schema_831: bool) {
    let west = sim().await;
    let karpor = karpor::start(KarporOptions {
        conditions: schema_831,
        default_registry: false,
        push_mode: false,
    })
    .await
    .unwrap();
    let server = karpor.url();
    let dir = tempfile::tempdir().unwrap();
    let access = MemberAccess::to_sim(&west);
    let path = dir.path().join("west.json");
    std::fs::write(&path, karpor::cluster_manifest("west", &access).to_string()).unwrap();
    ok(&kubectl(&server, &["apply", "-f", path.to_str().unwrap()]).await);

    // What Karpor wrote on create, and a third controller's condition.
    let created = status_of(&server, "west").await;
    let third = json!({"type": "BackupsReady", "status": "True", "lastTransitionTime": "2026-11-30T08:00:00Z",
                       "reason": "SnapshotTaken", "message": "last snapshot 2026-11-30", "observedGeneration": 1});
    if schema_831 {
        assert!(
            is(&created, "Validated", ("True", "Validated")),
            "{created}"
        );
        assert!(
            is(&created, "ClusterHealthy", ("True", "Healthy")),
            "{created}"
        );
        assert_eq!(created["apiserver"], access.endpoint.as_str());
        let mut conditions = created["conditions"].as_array().unwrap().clone();
        conditions.push(third.clone());
        let patch = json!({"status": {"conditions": conditions}}).to_string();
        ok(&kubectl(
            &server,
            &[
                "patch",
                "clusters",
                "west",
                "--subresource=status",
                "--type=merge",
                "--field-manager=backup-controller",
                "-p",
                &patch,
            ],
        )
        .await);
    } else {
        assert!(created.is_null() || created == json!({}), "{created}");
    }
    let before = status_of(&server, "west").await;

    let shutdown = CancellationToken::new();
    let settings = karpor_settings(dir.path(), &server, true);
    let (_url, _gateway) = start_gateway(&[], |c| c.karpor = Some(settings), &shutdown).await;
    let version = get_json(&format!("{}/version", west.url())).await["gitVersion"]
        .as_str()
        .expect("the member's version")
        .to_string();

    let healthy = |status: &Value| {
        status["healthy"] == true
            && (!schema_831
                || (is(status, "ClusterHealthy", ("True", "Healthy"))
                    && is(status, "Ready", ("True", "Ready"))
                    && status["version"] == version.as_str()))
    };
    let up = eventually(WAIT, "west healthy, written by kube-pulse", || async {
        let status = status_of(&server, "west").await;
        let written = !schema_831 || condition(&status, "Ready").is_some();
        (healthy(&status) && written).then_some(status)
    })
    .await;
    let healthy_since = condition(&up, "ClusterHealthy").map(|c| c["lastTransitionTime"].clone());

    west.set_faults(Faults {
        refuse: true,
        ..Faults::default()
    });
    let down = eventually(WAIT, "west unreachable on Karpor", || async {
        let status = status_of(&server, "west").await;
        let unhealthy = status.get("healthy").is_none_or(|h| h == false)
            && (!schema_831 || is(&status, "ClusterHealthy", ("False", "NotReachable")));
        unhealthy.then_some(status)
    })
    .await;
    if schema_831 {
        assert!(is(&down, "Ready", ("False", "Disconnected")), "{down}");
        assert_ne!(
            condition(&down, "ClusterHealthy").map(|c| c["lastTransitionTime"].clone()),
            None
        );
    }
    west.heal();
    let after = eventually(WAIT, "west healthy again", || async {
        let status = status_of(&server, "west").await;
        healthy(&status).then_some(status)
    })
    .await;

    if schema_831 {
        // What kube-pulse does not own is as it was, byte for byte.
        assert_eq!(
            condition(&after, "Validated"),
            condition(&before, "Validated")
        );
        assert_eq!(condition(&after, "BackupsReady"), Some(&third));
        assert_eq!(after["apiserver"], before["apiserver"]);
        assert_eq!(after["version"], version.as_str());
        // ClusterHealthy went False and back: its transition time moved.
        assert_ne!(
            condition(&after, "ClusterHealthy").map(|c| c["lastTransitionTime"].clone()),
            healthy_since
        );
        // Karpor's and the third controller's conditions kept their places.
        let types: Vec<&str> = after["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(&types[..3], ["Validated", "ClusterHealthy", "BackupsReady"]);
        assert!(
            types.contains(&"Ready") && types.contains(&"Synced"),
            "{types:?}"
        );
    } else {
        // Karpor 0.6 keeps `healthy` only.
        assert_eq!(after, json!({"healthy": true}));
    }
    // kube-pulse wrote the status with its own field manager, and only
    // through the status subresource.
    let out = ok(&kubectl(
        &server,
        &[
            "get",
            "clusters",
            "west",
            "-o",
            "json",
            "--show-managed-fields",
        ],
    )
    .await);
    let object: Value = serde_json::from_str(&out).unwrap();
    let ours: Vec<&Value> = object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["manager"] == "kube-pulse/e2e")
        .collect();
    assert!(!ours.is_empty(), "{out}");
    assert!(ours.iter().all(|e| e["subresource"] == "status"), "{out}");
    shutdown.cancel();
}
