//! Pods on demand (`podWatch.onDemand`): a member's pod and event watches
//! run only while a client's subscription reaches its apps, and for the
//! linger after; meanwhile its app documents say `podsWatched: false`.
//! Counted by the simulator's request accounting. docs/STATUS.md "Pods on
//! demand".

use std::time::Duration;

use kube_pulse::gateway::{Gateway, GatewayConfig};
use kube_pulse::sources::{SyncRegistry, SyncResource};
use kube_pulse_sim::SimCluster;
use pulse_testkit::gateway::{doc_where, start_gateway};
use pulse_testkit::sim::{deployment, sim_with};
use pulse_testkit::sse::SseReader;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);
const APP: &str = "apps/a/shop/web";

fn pod_watches(sim: &SimCluster) -> u64 {
    sim.stats().count("core/pods", "watch")
}

fn event_watches(sim: &SimCluster) -> u64 {
    sim.stats().count("core/events", "watch")
}

/// Member `a` with `shop/web` (2 replicas), and a gateway over it with
/// pods on demand (linger 1 s) and `tweak`'s settings.
async fn on_demand_over_a(
    shutdown: &CancellationToken,
    tweak: impl FnOnce(&mut GatewayConfig),
) -> (SimCluster, String, Gateway) {
    let sim = sim_with(|c| {
        c.name = "a".into();
        c.workloads = vec![deployment("shop", "web", 2)];
    })
    .await;
    let (url, gateway) = start_gateway(
        &[&sim],
        |c| {
            c.pipeline.source.pod_watch.on_demand = true;
            c.pipeline.source.pod_watch.linger_seconds = 1;
            tweak(c);
        },
        shutdown,
    )
    .await;
    (sim, url, gateway)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_watched_while_a_client_looks_at_the_apps_and_for_the_linger_after() {
    let shutdown = CancellationToken::new();
    let (sim, url, gateway) = on_demand_over_a(&shutdown, |c| {
        c.transports.heartbeat = Duration::from_millis(300);
    })
    .await;
    let hub = gateway.hub();

    // Nobody looks: the app is known from its workload, without pod detail.
    let doc = doc_where(hub, APP, WAIT, |d| d["ready"] == 2).await;
    assert_eq!(doc["podsWatched"], false, "{doc:#}");
    assert!(doc.get("pods").is_none(), "{doc:#}");
    // A subscription that reaches no app is no demand either.
    let mut clusters =
        SseReader::open(&format!("{url}/api/v1/events?topic=clusters/*"), None).await;
    clusters.until_synced().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!((pod_watches(&sim), event_watches(&sim)), (0, 0));
    assert!(
        hub.get("clusters/a/sync/core/v1/pods").is_none(),
        "never watched"
    );

    // A client looks at the member's apps: both watches start, the pods
    // fill the document in, over the wire too.
    let mut apps = SseReader::open(&format!("{url}/api/v1/events?topic=apps/a/**"), None).await;
    apps.until_synced().await;
    let doc = doc_where(hub, APP, WAIT, |d| d["pods"]["total"] == 2).await;
    assert!(doc.get("podsWatched").is_none(), "{doc:#}");
    assert_eq!((pod_watches(&sim), event_watches(&sim)), (1, 1));
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let e = apps.next_within(WAIT).await.expect("the stream goes on");
        if e.data["patch"]["pods"]["total"] == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pod detail reaches the subscriber"
        );
    }

    // The client goes: the watches stay for the linger (1 s), then stop,
    // and the documents say so again.
    drop(apps);
    let doc = doc_where(hub, APP, WAIT, |d| d["podsWatched"] == false).await;
    assert!(doc.get("pods").is_none(), "{doc:#}");
    for resource in ["pods", "events"] {
        let topic = format!("clusters/a/sync/core/v1/{resource}");
        let sync = doc_where(hub, &topic, WAIT, |d| d["phase"] == "Stopped").await;
        assert_eq!(sync["reason"], "NoViewers", "{sync:#}");
    }
    let cluster = doc_where(hub, "clusters/a", WAIT, |d| d["phase"] == "Healthy").await;
    assert!(cluster.get("pods").is_none(), "no pod figures: {cluster:#}");
    assert_eq!(
        (pod_watches(&sim), event_watches(&sim)),
        (1, 1),
        "no new watch"
    );

    // Looked at again: watched again, with a fresh list.
    let mut again =
        SseReader::open(&format!("{url}/api/v1/events?topic=apps/*/shop/*"), None).await;
    again.until_synced().await;
    doc_where(hub, APP, WAIT, |d| d["pods"]["total"] == 2).await;
    assert_eq!((pod_watches(&sim), event_watches(&sim)), (2, 2));
    drop(clusters);
    shutdown.cancel();
    sim.shutdown().await;
}

#[tokio::test]
async fn on_demand_is_refused_with_a_stream_of_changes() {
    // Refused before anything connects: no NATS server is needed.
    let mut config = kube_pulse::gateway::GatewayConfig {
        nats: Some(kube_pulse::scale::NatsSettings::new("nats://127.0.0.1:1")),
        ..Default::default()
    };
    config.pipeline.source.pod_watch.on_demand = true;
    let err = pulse_testkit::gateway::start_refused(config).await;
    assert!(
        err.contains("podWatch.onDemand counts the subscriptions of one gateway process"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_registry_naming_pods_keeps_them_watched_with_their_detail() {
    let shutdown = CancellationToken::new();
    let (sim, _url, gateway) = on_demand_over_a(&shutdown, |_| {}).await;
    let hub = gateway.hub();
    doc_where(hub, APP, WAIT, |d| {
        d["ready"] == 2 && d["podsWatched"] == false
    })
    .await;

    // A registry names the member's pods (in one namespace): with nobody
    // subscribed, both watches run as the pod watch's own and the apps
    // have their pod detail.
    let registry = SyncRegistry {
        name: None,
        clusters: vec!["*".into()],
        resources: vec![SyncResource {
            namespace: Some("shop".into()),
            ..SyncResource::all("", "v1", "pods")
        }],
    };
    gateway.pipeline().set_registries(vec![registry]).await;
    let doc = doc_where(hub, APP, WAIT, |d| d["pods"]["total"] == 2).await;
    assert!(doc.get("podsWatched").is_none(), "{doc:#}");
    // Past the linger, the demand loop's "nobody looks" changes nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let doc = hub.get(APP).expect("the app").doc;
    assert_eq!(doc["pods"]["total"], 2, "{doc:#}");
    assert_eq!((pod_watches(&sim), event_watches(&sim)), (1, 1));

    // The registry lets go of them: nobody looks, so they stop.
    gateway.pipeline().set_registries(Vec::new()).await;
    let doc = doc_where(hub, APP, WAIT, |d| d["podsWatched"] == false).await;
    assert!(doc.get("pods").is_none(), "{doc:#}");
    let sync = doc_where(hub, "clusters/a/sync/core/v1/pods", WAIT, |d| {
        d["phase"] == "Stopped"
    })
    .await;
    assert_eq!(sync["reason"], "NoViewers", "{sync:#}");
    shutdown.cancel();
    sim.shutdown().await;
}
