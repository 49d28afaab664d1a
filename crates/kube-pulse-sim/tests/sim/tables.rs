//! The tables kubectl prints: one-row tables for a single object (of
//! every kind with columns, Karpor's Cluster included), `-o wide`, and the
//! rows' objects as `includeObject` asks (`--sort-by` needs whole objects).

use std::time::Duration;

use kube_pulse_sim::karpor::{self, Credential, KarporOptions, MemberAccess};
use pulse_testkit::kubectl::{kubectl, ok};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{deploy, sim};

const WAIT: Duration = Duration::from_secs(20);

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

// Multi-threaded: the test blocks on kubectl while the simulator serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_prints_one_object_as_a_table_row() {
    let sim = sim().await;
    let server = sim.url();
    deploy(&sim, "web", 2, "registry.example/web:1");
    eventually(WAIT, "web ready", || async {
        let out = kubectl(&server, &["get", "deploy", "web", "-n", "shop"]).await;
        String::from_utf8_lossy(&out.stdout)
            .contains("2/2")
            .then_some(())
    })
    .await;
    let out = ok(&kubectl(&server, &["get", "deploy", "web", "-n", "shop"]).await);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        words(lines[0]),
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{out}"
    );
    assert_eq!(words(lines[1])[..4], ["web", "2/2", "2", "2"], "{out}");
    let out = ok(&kubectl(
        &server,
        &["get", "deploy", "web", "-n", "shop", "-o", "wide"],
    )
    .await);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        words(lines[0]),
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES"
        ],
        "{out}"
    );
    assert!(lines[1].contains("registry.example/web:1"), "{out}");
    let out = ok(&kubectl(&server, &["get", "node", "sim-node-1"]).await);
    assert_eq!(
        words(out.lines().next().unwrap()),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{out}"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sorted_tables_get_whole_objects() {
    let sim = sim().await;
    let server = sim.url();
    deploy(&sim, "web", 2, "registry.example/web:1");
    eventually(WAIT, "Started events", || async {
        let out = kubectl(&server, &["get", "events", "-n", "shop"]).await;
        (String::from_utf8_lossy(&out.stdout)
            .matches("Started")
            .count()
            >= 2)
            .then_some(())
    })
    .await;
    for (resource, key) in [("events", ".lastTimestamp"), ("pods", ".status.startTime")] {
        let out = ok(&kubectl(
            &server,
            &["get", resource, "-n", "shop", &format!("--sort-by={key}")],
        )
        .await);
        assert!(out.lines().count() >= 3, "{resource}: {out}");
        assert!(!out.contains("No resources found"), "{resource}: {out}");
    }
    // And the kinds' own columns stay.
    let out = ok(&kubectl(
        &server,
        &["get", "events", "-n", "shop", "--sort-by=.lastTimestamp"],
    )
    .await);
    assert_eq!(
        words(out.lines().next().unwrap()),
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{out}"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_prints_one_karpor_cluster_as_a_table_row() {
    let karpor = karpor::start(KarporOptions::default()).await.unwrap();
    let access = MemberAccess {
        endpoint: "https://10.0.0.7:6443".into(),
        ca_bundle: None,
        insecure: true,
        credential: Credential::ServiceAccountToken("t".into()),
    };
    karpor
        .apply(&karpor::cluster_manifest("edge", &access))
        .unwrap();
    let out = ok(&kubectl(&karpor.url(), &["get", "cluster", "edge"]).await);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(words(lines[0]), ["NAME", "CREATED", "AT"], "{out}");
    assert_eq!(words(lines[1])[0], "edge", "{out}");
    karpor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_all_and_rollout_history_and_undo() {
    let sim = sim().await;
    let server = sim.url();
    deploy(&sim, "web", 1, "registry.example/web:1");
    eventually(WAIT, "revision 1", || async {
        let out = kubectl(&server, &["rollout", "history", "deploy/web", "-n", "shop"]).await;
        let out = String::from_utf8_lossy(&out.stdout).to_string();
        out.lines()
            .any(|l| words(l).first() == Some(&"1"))
            .then_some(())
    })
    .await;
    let out = ok(&kubectl(&server, &["get", "all", "-n", "shop"]).await);
    for kind in ["pod/web-", "deployment.apps/web", "replicaset.apps/web-"] {
        assert!(out.contains(kind), "{kind}: {out}");
    }
    ok(&kubectl(
        &server,
        &[
            "set",
            "image",
            "deploy/web",
            "-n",
            "shop",
            "*=registry.example/web:2",
        ],
    )
    .await);
    let revisions = || async {
        let out = ok(&kubectl(&server, &["rollout", "history", "deploy/web", "-n", "shop"]).await);
        out.lines()
            .filter_map(|l| words(l).first().and_then(|w| w.parse::<u32>().ok()))
            .collect::<Vec<u32>>()
    };
    eventually(WAIT, "revision 2", || async {
        (revisions().await == [1, 2]).then_some(())
    })
    .await;
    let out = ok(&kubectl(&server, &["rollout", "undo", "deploy/web", "-n", "shop"]).await);
    assert!(out.contains("rolled back"), "{out}");
    let image = "-o=jsonpath={.spec.template.spec.containers[0].image}";
    let out = ok(&kubectl(&server, &["get", "deploy", "web", "-n", "shop", image]).await);
    assert_eq!(out.trim(), "registry.example/web:1");
    // The template rolled back to is the newest revision now.
    eventually(WAIT, "revisions 2, 3", || async {
        (revisions().await == [2, 3]).then_some(())
    })
    .await;
    sim.shutdown().await;
}
