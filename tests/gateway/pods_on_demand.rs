//! Pods on demand (`podWatch.onDemand`): a member's pod and event watches
//! run only while a client's subscription reaches its apps, and for the
//! linger after; meanwhile its app documents say `podsWatched: false`.
//! With replicas over NATS, a client of any replica counts for the
//! member's owner. Counted by the simulator's request accounting.
//! docs/STATUS.md "Pods on demand", docs/SCALE-OUT.md "Pods on demand
//! across replicas".

use std::time::Duration;

use kube_pulse::gateway::{Gateway, GatewayConfig};
use kube_pulse::sources::{SyncRegistry, SyncResource};
use kube_pulse_sim::SimCluster;
use pulse_testkit::gateway::{doc_where, start_gateway};
use pulse_testkit::nats::nats;
use pulse_testkit::scale::{LEASE, WITHIN, owners, replica_with, three_members};
use pulse_testkit::sim::{deployment, sim, sim_with};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replicas_the_owner_watches_the_pods_a_client_of_another_replica_looks_at() {
    let Some(nats) = nats().await else {
        return;
    };
    let host = sim().await;
    let members = three_members().await;
    let sims: Vec<&SimCluster> = members.iter().collect();
    let names: Vec<String> = members.iter().map(|s| s.name().to_string()).collect();
    let on_demand = |c: &mut GatewayConfig| {
        c.pipeline.source.pod_watch.on_demand = true;
        c.pipeline.source.pod_watch.linger_seconds = 1;
    };
    let r1 = replica_with("r1", &host, &sims, &nats, LEASE, on_demand).await;
    let r2 = replica_with("r2", &host, &sims, &nats, LEASE, on_demand).await;
    let owners = owners(&host, &[&r1, &r2], &names).await;
    // A member, its owner, and the other replica, where the client is.
    let member = names[0].clone();
    let (owner, other) = if owners[&member] == r1.id {
        (&r1, &r2)
    } else {
        (&r2, &r1)
    };
    let sim_of = |m: &str| members.iter().find(|s| s.name() == m).unwrap();
    let app = format!("apps/{member}/shop/web");
    eprintln!(
        "owners {owners:?}; {member} run by {}, looked at on {}",
        owner.id, other.id
    );

    // Nobody looks: every replica serves the app without pod detail.
    for r in [&r1, &r2] {
        let doc = doc_where(r.gateway.hub(), &app, WAIT, |d| d["ready"] == 1).await;
        assert_eq!(doc["podsWatched"], false, "{}: {doc:#}", r.id);
    }
    assert!(names.iter().all(|m| pod_watches(sim_of(m)) == 0));

    // A client of the other replica looks at the member's apps: the owner
    // watches its pods and events, and the detail reaches the client.
    let topic = format!("apps/{member}/**");
    let mut apps =
        SseReader::open(&format!("{}/api/v1/events?topic={topic}", other.url), None).await;
    apps.until_synced().await;
    let doc = doc_where(other.gateway.hub(), &app, WITHIN, |d| {
        d["pods"]["total"] == 1
    })
    .await;
    assert!(doc.get("podsWatched").is_none(), "{doc:#}");
    let sim = sim_of(&member);
    assert_eq!((pod_watches(sim), event_watches(sim)), (1, 1));
    let deadline = std::time::Instant::now() + WITHIN;
    loop {
        let e = apps.next_within(WITHIN).await.expect("the stream goes on");
        if e.data["patch"]["pods"]["total"] == 1 || e.data["doc"]["pods"]["total"] == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pod detail reaches the subscriber"
        );
    }
    // Only that member: the others' pods stay unwatched.
    for m in names.iter().filter(|m| **m != member) {
        assert_eq!(pod_watches(sim_of(m)), 0, "{m}");
    }

    // The client goes: the other replica says so, and after the linger the
    // owner stops the watches.
    drop(apps);
    doc_where(other.gateway.hub(), &app, WITHIN, |d| {
        d["podsWatched"] == false
    })
    .await;
    assert_eq!(
        (pod_watches(sim), event_watches(sim)),
        (1, 1),
        "no new watch"
    );

    // Looked at again, then the replica the client is on stops: once its
    // report is no longer believed (15 s) and the linger is over, the
    // owner stops the watches again.
    let mut again =
        SseReader::open(&format!("{}/api/v1/events?topic=apps/**", other.url), None).await;
    again.until_synced().await;
    doc_where(owner.gateway.hub(), &app, WITHIN, |d| {
        d["pods"]["total"] == 1
    })
    .await;
    other.token.cancel();
    doc_where(owner.gateway.hub(), &app, WITHIN, |d| {
        d["podsWatched"] == false
    })
    .await;
    assert_eq!(pod_watches(sim), 2, "watched a second time, and stopped");
    drop(again);
    owner.token.cancel();
    for s in members {
        s.shutdown().await;
    }
    host.shutdown().await;
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
