//! Watches proven alive: a watch whose member sends bookmarks and then goes
//! silent (its connection open, nothing arriving, bookmarks included: the
//! simulator's `silentWatches` fault) is detected within its bound and
//! restarted, its sync saying `Silent` until a list completes again; other
//! resources are not touched. A member that sends no bookmarks is not
//! judged by them. docs/RELIABILITY.md "Silent watches".

use std::time::{Duration, Instant};

use kube_pulse_sim::SimCluster;
use pulse_testkit::gateway::{doc_where, start_gateway};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{deploy, deployment, sim_with};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);
/// The silence a watch is allowed here (bookmarks come every 200 ms).
const BOUND: Duration = Duration::from_secs(2);
const TOPIC: &str = "clusters/a/sync/apps/v1/deployments";

async fn member(bookmarks: Duration) -> SimCluster {
    sim_with(|c| {
        c.name = "a".into();
        c.bookmark_interval = bookmarks;
        c.workloads = vec![deployment("shop", "web", 1)];
    })
    .await
}

/// A gateway over `sim` whose watches may stay silent for [`BOUND`].
async fn gateway(sim: &SimCluster, shutdown: &CancellationToken) -> kube_pulse::gateway::Gateway {
    let (_, gateway) = start_gateway(
        &[sim],
        |c| c.pipeline.source.watch_silence = BOUND,
        shutdown,
    )
    .await;
    doc_where(gateway.hub(), TOPIC, WAIT, |d| d["phase"] == "Syncing").await;
    gateway
}

fn watches(sim: &SimCluster) -> u64 {
    sim.stats().count("apps/deployments", "watch")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_watch_is_restarted_within_its_bound_and_says_why() {
    let shutdown = CancellationToken::new();
    let sim = member(Duration::from_millis(200)).await;
    let gateway = gateway(&sim, &shutdown).await;
    let hub = gateway.hub();
    // A few bookmarks: the member has shown it sends them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = watches(&sim);

    let mut faults = sim.faults();
    faults.silent_watches = vec!["apps/deployments".into()];
    sim.set_faults(faults);
    let silenced = Instant::now();
    let doc = doc_where(hub, TOPIC, WAIT, |d| d["reason"] == "Silent").await;
    let detected = silenced.elapsed();
    // Counted from the last bookmark, which came at most 200 ms before.
    assert!(
        detected + Duration::from_millis(250) >= BOUND && detected < BOUND * 5,
        "detected after {detected:?}, bound {BOUND:?}"
    );
    assert!(
        doc["lastError"]
            .as_str()
            .is_some_and(|e| e.starts_with("no event and no bookmark for 2 s")),
        "{doc:#}"
    );
    // Restarted: a new watch request, and the sync keeps saying why.
    eventually(WAIT, "the watch restarted", || async {
        (watches(&sim) > before).then_some(())
    })
    .await;
    let doc = doc_where(hub, TOPIC, WAIT, |d| d["phase"] == "Listing").await;
    assert_eq!(doc["reason"], "Silent", "{doc:#}");
    // Other resources go on.
    let namespaces = hub.get("clusters/a/sync/core/v1/namespaces").unwrap();
    assert_eq!(namespaces.doc["phase"], "Syncing");

    // Healed: the relist completes, and changes flow again.
    sim.heal();
    doc_where(hub, TOPIC, WAIT, |d| d["phase"] == "Syncing").await;
    deploy(&sim, "api", 1, "registry.example/api:1");
    doc_where(hub, "apps/a/shop/api", WAIT, |d: &Value| {
        d["phase"] == "Running"
    })
    .await;
    shutdown.cancel();
    gateway.stop().await;
}

#[tokio::test]
async fn a_member_without_bookmarks_is_not_judged_by_them() {
    let shutdown = CancellationToken::new();
    // Bookmarks once an hour: none arrives during the test.
    let sim = member(Duration::from_secs(3600)).await;
    let gateway = gateway(&sim, &shutdown).await;
    let hub = gateway.hub();
    let before = watches(&sim);
    // Nothing changes for three bounds: the quiet watch stays as it is.
    tokio::time::sleep(BOUND * 3).await;
    let doc = hub.get(TOPIC).unwrap();
    assert_eq!(
        (doc.doc["phase"].as_str(), doc.doc["reason"].as_str()),
        (Some("Syncing"), Some("Watching")),
        "{:#}",
        doc.doc
    );
    assert_eq!(watches(&sim), before, "no watch was restarted");
    shutdown.cancel();
    gateway.stop().await;
}
