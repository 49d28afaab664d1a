//! Karpor's default sync registry on a member that does not serve
//! `policy/v1beta1` (no Kubernetes ≥ 1.25 does): the cluster stays
//! `Healthy` with a warning naming the resource, the resource's sync is
//! `NotServed` without flapping, and in steady state kube-pulse writes
//! Karpor's objects no more (at most once per SyncRegistry), with a Kind —
//! never a plural — for every resource.

use std::time::{Duration, Instant};

use kube_pulse_sim::karpor::{self, KarporOptions, MemberAccess};
use pulse_testkit::gateway::start_gateway;
use pulse_testkit::http::get_json;
use pulse_testkit::kubectl::{kubectl, ok};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{karpor_settings, sim};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Generous on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);

/// How long the steady state is watched (the 5-minute figure is a
/// measurement: docs/BENCHMARKS.md §10).
const STEADY: Duration = Duration::from_secs(25);

const PDB: &str = "clusters/east/sync/policy/v1beta1/poddisruptionbudgets";

async fn karpor_status(server: &str, kind: &str, name: &str) -> Value {
    let out = ok(&kubectl(server, &["get", kind, name, "-o", "json"]).await);
    let object: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    object["status"].clone()
}

fn is(status: &Value, kind: &str, expected: (&str, &str)) -> bool {
    status["conditions"].as_array().is_some_and(|all| {
        all.iter()
            .any(|c| c["type"] == kind && c["status"] == expected.0 && c["reason"] == expected.1)
    })
}

/// The gateway's sync document of `topic`.
async fn sync_doc(url: &str, topic: &str) -> Option<Value> {
    let all = get_json(&format!("{url}/api/v1/clusters/east/sync")).await;
    let resource = topic.rsplit('/').next()?;
    all["items"]
        .as_array()?
        .iter()
        .find(|d| d["resource"]["resource"] == resource)
        .cloned()
}

/// The number of the latest transition in a document's history.
fn last_transition(doc: &Value) -> u64 {
    doc["history"]
        .as_object()
        .and_then(|h| h.keys().filter_map(|k| k.parse().ok()).max())
        .unwrap_or(0)
}

/// kube-pulse's SyncRegistry writes, from its metrics.
async fn registry_writes(url: &str) -> f64 {
    let metrics = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    metrics
        .lines()
        .find(|l| {
            l.starts_with("kube_pulse_karpor_status_writes_total{")
                && l.contains("kind=\"SyncRegistry\"")
                && l.contains("result=\"written\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karpors_default_registry_leaves_a_cluster_healthy_with_a_warning_and_writes_settle() {
    let east = sim().await;
    let karpor = karpor::start(KarporOptions {
        conditions: true,
        default_registry: true,
        push_mode: false,
    })
    .await
    .unwrap();
    let server = karpor.url();
    karpor
        .apply(&karpor::cluster_manifest(
            "east",
            &MemberAccess::to_sim(&east),
        ))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let settings = karpor_settings(dir.path(), &server, true);
    let (url, _gateway) = start_gateway(&[], |c| c.karpor = Some(settings), &shutdown).await;

    // Healthy, with a warning naming the resource; the sync is NotServed.
    let cluster = eventually(
        WAIT,
        "east Healthy with every served resource syncing",
        || async {
            let doc = get_json(&format!("{url}/api/v1/clusters/east")).await;
            let settled = doc["phase"] == "Healthy"
                && doc["resources"]["notServed"] == 1
                && doc["resources"]["synced"].as_u64()? + 1
                    == doc["resources"]["total"].as_u64()?;
            settled.then_some(doc)
        },
    )
    .await;
    assert_eq!(cluster["reason"], "Ready");
    let warnings = cluster["warnings"].as_array().expect("a warning");
    assert!(
        warnings.iter().any(|w| w["reason"] == "ResourceNotServed"
            && w["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("policy/v1beta1/poddisruptionbudgets "))),
        "{cluster}"
    );
    let pdb = sync_doc(&url, PDB).await.expect("the pdb sync document");
    assert_eq!(pdb["phase"], "NotServed", "{pdb}");
    // The member serves no policy/v1beta1 at all: said as for a resource.
    assert_eq!(
        pdb["message"], "policy/v1beta1/poddisruptionbudgets is not served by this cluster",
        "{pdb}"
    );
    assert_eq!(pdb["kind"], "PodDisruptionBudget", "{pdb}");
    assert!(pdb.get("retryAt").is_none_or(Value::is_null), "{pdb}");

    // Karpor's objects: the Cluster healthy and synced, the registry with a
    // Kind for every resource.
    let registry = eventually(WAIT, "Karpor's objects written", || async {
        let cluster = karpor_status(&server, "clusters", "east").await;
        let registry =
            karpor_status(&server, "syncclusterresources", karpor::DEFAULT_REGISTRY).await;
        let east = registry["clusters"].as_array()?.first()?.clone();
        let settled = is(&cluster, "Ready", ("True", "Ready"))
            && is(&cluster, "Synced", ("True", "AllSynced"))
            && is(&cluster, "ClusterHealthy", ("True", "Healthy"))
            && east["status"] == "NotServed"
            && east["resources"]
                .as_array()?
                .iter()
                .all(|r| r["status"] == "Syncing" || r["status"] == "NotServed");
        settled.then_some(registry)
    })
    .await;
    let resources = registry["clusters"][0]["resources"].as_array().unwrap();
    assert_eq!(resources.len(), karpor::DEFAULT_SYNC_RESOURCES.len());
    for r in resources {
        let kind = r["kind"].as_str().unwrap_or_default();
        assert!(
            // A plural (`poddisruptionbudgets`) is all lower case.
            kind.starts_with(|c: char| c.is_ascii_uppercase()),
            "a Kind, not a plural: {r}"
        );
    }
    let pdb_entry = resources
        .iter()
        .find(|r| r["apiVersion"] == "policy/v1beta1")
        .unwrap();
    assert_eq!(pdb_entry["kind"], "PodDisruptionBudget");
    assert_eq!(pdb_entry["reason"], "NotServed");
    assert!(
        !pdb_entry["message"].as_str().unwrap().contains("retrying"),
        "{pdb_entry}"
    );

    // Steady state: no transition, at most one more registry write.
    let (history, writes) = (last_transition(&pdb), registry_writes(&url).await);
    let started = Instant::now();
    while started.elapsed() < STEADY {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let doc = sync_doc(&url, PDB).await.unwrap();
        assert_eq!(doc["phase"], "NotServed", "{doc}");
        assert_eq!(last_transition(&doc), history, "the history grew: {doc}");
    }
    let more = registry_writes(&url).await - writes;
    assert!(more <= 1.0, "{more} SyncRegistry writes in {STEADY:?}");
    let cluster = get_json(&format!("{url}/api/v1/clusters/east")).await;
    assert_eq!(cluster["phase"], "Healthy", "{cluster}");
    shutdown.cancel();
}

/// A resource the member does not serve is not retried: installing its CRD
/// changes nothing until the next lookup, which comes when the member
/// answers again after an outage (or after the slow period); then it
/// lists and syncs, with discovery's kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_not_served_is_looked_up_again_when_the_member_comes_back() {
    use kube_pulse::sources::{SyncRegistry, SyncResource};
    use kube_pulse_sim::Faults;
    use pulse_testkit::gateway::{doc_where, pipeline};
    use pulse_testkit::sim::sim_with;

    const GADGETS: &str = "clusters/a/sync/pulse.example.com/v1/gadgets";
    let shutdown = CancellationToken::new();
    let a = sim_with(|c| c.name = "a".into()).await;
    let registry = SyncRegistry {
        name: Some("gadgets".into()),
        clusters: vec!["a".into()],
        resources: vec![SyncResource::all("pulse.example.com", "v1", "gadgets")],
    };
    let p = pipeline(&[&a], vec![registry], &shutdown).await;
    let hub = p.hub().clone();
    let not_served = doc_where(&hub, GADGETS, WAIT, |d| d["phase"] == "NotServed").await;
    assert!(
        not_served.get("kind").is_none(),
        "no kind to tell: {not_served}"
    );
    let cluster = doc_where(&hub, "clusters/a", WAIT, |d| {
        d["phase"] == "Healthy" && d["resources"]["notServed"] == 1
    })
    .await;
    assert_eq!(cluster["warnings"][0]["reason"], "ResourceNotServed");

    // Served now, but not looked up again: nothing changes.
    a.apply(&serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.pulse.example.com"},
        "spec": {
            "group": "pulse.example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = hub.get(GADGETS).unwrap().doc.as_ref().clone();
    assert_eq!(still, not_served, "not retried with a backoff");

    // The member fails a probe and answers again: looked up, listed, synced.
    a.set_faults(Faults {
        refuse: true,
        ..Faults::default()
    });
    doc_where(&hub, "clusters/a", WAIT, |d| {
        d["probe"]["consecutiveFailures"].as_u64() >= Some(1)
    })
    .await;
    a.heal();
    let synced = doc_where(&hub, GADGETS, WAIT, |d| d["phase"] == "Syncing").await;
    assert_eq!(synced["kind"], "Gadget");
    let cluster = doc_where(&hub, "clusters/a", WAIT, |d| {
        d["phase"] == "Healthy" && d["resources"].get("notServed").is_none()
    })
    .await;
    assert!(cluster.get("warnings").is_none(), "{cluster}");
    p.stop().await;
    a.shutdown().await;
}
