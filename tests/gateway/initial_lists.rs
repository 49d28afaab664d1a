//! How watches get their initial state (`initialLists`, docs/STATUS.md
//! "Initial lists"): streamed inside the watch where the member supports
//! it, in pages where it refuses (as an apiserver without the WatchList
//! feature does), or in pages when configured so. Two simulated members
//! with the same apps and ConfigMaps, one serving streaming lists and one
//! refusing them: the gateway serves the same documents for both, through
//! the initial state and through changes after it; the members' request
//! counts show which way each resource was read. Loopback only, every
//! wait bounded.

use std::time::Duration;

use kube_pulse::pipeline::{Pipeline, PipelineConfig};
use kube_pulse::sources::{InitialLists, SyncRegistry, SyncResource};
use kube_pulse_sim::SimCluster;
use pulse_testkit::gateway::{doc_where, members, quick_pipeline};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{deployment, deployment_manifest, sim_with};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);
/// The resources every member is watched for, as the simulator counts them.
const WATCHED: [&str; 7] = [
    "apps/deployments",
    "apps/statefulsets",
    "core/namespaces",
    "core/pods",
    "core/events",
    "core/nodes",
    "core/configmaps",
];

async fn member(name: &'static str, watch_list: bool) -> SimCluster {
    let sim = sim_with(move |c| {
        c.name = name.into();
        c.watch_list = watch_list;
        c.workloads = vec![
            deployment("shop", "web", 3),
            deployment("shop", "cart", 1),
            deployment("ops", "batch", 2),
        ];
    })
    .await;
    for i in 0..25 {
        sim.apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "shop", "name": format!("cm-{i}")},
            "data": {"i": i.to_string()},
        }))
        .unwrap();
    }
    sim
}

fn config(initial_lists: InitialLists) -> PipelineConfig {
    let registry = SyncRegistry {
        name: Some("cm".into()),
        clusters: vec!["*".into()],
        resources: vec![SyncResource::all("", "v1", "configmaps")],
    };
    let mut config = quick_pipeline(vec![registry]);
    config.source.initial_lists = initial_lists;
    config
}

/// A document without what names its member or says when.
fn comparable(doc: &Value) -> Value {
    let mut doc = doc.clone();
    if let Some(map) = doc.as_object_mut() {
        for member in [
            "cluster",
            "since",
            "changedAt",
            "history",
            "lastEventAt",
            "resourceVersion",
        ] {
            map.remove(member);
        }
    }
    doc
}

/// Waits until both members' apps are Running with `web` at `replicas`
/// and its Deployment current, every watch Syncing, and returns each
/// member's documents.
async fn settled(p: &Pipeline, web_replicas: u64) -> Vec<Vec<(String, Value)>> {
    let hub = p.hub();
    let mut out = Vec::new();
    for cluster in ["streams", "pages"] {
        doc_where(hub, &format!("clusters/{cluster}"), WAIT, |d| {
            d["phase"] == "Healthy" && d["resources"]["synced"] == 7
        })
        .await;
        // Settled: its pods, and the Deployment's own status (a scale-down
        // shows the pods gone before the status says so).
        doc_where(hub, &format!("apps/{cluster}/shop/web"), WAIT, |d| {
            d["state"] == "Running"
                && d["pods"]["ready"] == web_replicas
                && d["workloads"]["Deployment/web"]["health"] == "Current"
        })
        .await;
        for app in ["shop/cart", "ops/batch"] {
            doc_where(hub, &format!("apps/{cluster}/{app}"), WAIT, |d| {
                d["state"] == "Running"
            })
            .await;
        }
        let sync = format!("clusters/{cluster}/sync/core/v1/configmaps");
        doc_where(hub, &sync, WAIT, |d| d["phase"] == "Syncing").await;
        let prefix = |t: &str| t.replacen(&format!("/{cluster}/"), "/*/", 1);
        let docs = hub
            .list(&[kube_pulse::hub::Pattern::parse(&format!("apps/{cluster}/**")).unwrap()])
            .into_iter()
            .chain(hub.get(&sync))
            .map(|d| (prefix(d.topic.as_str()), comparable(&d.doc)))
            .collect();
        out.push(docs);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_and_paged_initial_lists_give_the_same_documents() {
    let shutdown = CancellationToken::new();
    let (streams, pages) = (member("streams", true).await, member("pages", false).await);
    let p = Pipeline::start(
        members(&[&streams, &pages]),
        config(InitialLists::Streaming),
        &shutdown,
    )
    .await
    .unwrap();
    let docs = settled(&p, 3).await;
    assert_eq!(
        docs[0], docs[1],
        "the same documents for a streamed and a paged member"
    );
    assert!(docs[0].len() >= 4, "{:?}", docs[0]);
    let cm = &docs[0].last().unwrap().1;
    assert_eq!(cm["objects"], 25, "{cm}");

    // Streamed: every resource read by watches alone, no LIST. Refused:
    // one refused watch per resource, then a LIST and a watch (the watch
    // may open just after the documents settle, on a busy machine).
    let counted = |resource: &str| {
        let (s, g) = (streams.stats(), pages.stats());
        [
            s.count(resource, "list"),
            s.count(resource, "watch"),
            g.count(resource, "list"),
            g.count(resource, "watch"),
        ] == [0, 1, 1, 2]
    };
    eventually(WAIT, "every watch open", || async {
        WATCHED.iter().all(|r| counted(r)).then_some(())
    })
    .await;
    let (s, g) = (streams.stats(), pages.stats());
    for resource in WATCHED {
        assert_eq!(s.count(resource, "list"), 0, "{resource} streamed: {s:?}");
        assert_eq!(s.count(resource, "watch"), 1, "{resource} streamed: {s:?}");
        assert_eq!(g.count(resource, "list"), 1, "{resource} paged: {g:?}");
        assert_eq!(g.count(resource, "watch"), 2, "{resource} paged: {g:?}");
    }

    // Changes after the initial state arrive alike.
    for sim in [&streams, &pages] {
        sim.apply(&deployment_manifest("web", 1, "registry.example/app:1"))
            .unwrap();
    }
    let docs = settled(&p, 1).await;
    assert_eq!(docs[0], docs[1], "after a change");
    // The refusal is remembered: no further streaming attempt.
    assert_eq!(pages.stats().count("core/pods", "watch"), 2);

    shutdown.cancel();
    p.stop().await;
    streams.shutdown().await;
    pages.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_initial_lists_when_configured_so() {
    let shutdown = CancellationToken::new();
    let streams = member("streams", true).await;
    let p = Pipeline::start(members(&[&streams]), config(InitialLists::Paged), &shutdown)
        .await
        .unwrap();
    doc_where(p.hub(), "clusters/streams", WAIT, |d| {
        d["phase"] == "Healthy" && d["resources"]["synced"] == 7
    })
    .await;
    let s = streams.stats();
    for resource in WATCHED {
        assert_eq!(s.count(resource, "list"), 1, "{resource}: {s:?}");
        assert_eq!(s.count(resource, "watch"), 1, "{resource}: {s:?}");
    }
    shutdown.cancel();
    p.stop().await;
    streams.shutdown().await;
}
