//! How current each member is, on the wire: `synced` and every heartbeat
//! of a subscription carry `at` (the gateway's clock) and `asOf` (per
//! member the subscription reaches, its last successful probe). `asOf`
//! moves with the probes and stops when the member is lost, while `at`
//! goes on. docs/PROTOCOL.md "Heartbeats and asOf".

use std::time::Duration;

use chrono::{DateTime, Utc};
use kube_pulse_sim::SimCluster;
use pulse_testkit::gateway::{doc_where, start_gateway};
use pulse_testkit::sim::sim_with;
use pulse_testkit::sse::SseReader;
use pulse_testkit::ws::{ws_connect, ws_next_any, ws_send};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);
const HEARTBEAT: Duration = Duration::from_millis(300);

async fn member(name: &str) -> SimCluster {
    sim_with(|c| c.name = name.into()).await
}

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .unwrap_or_else(|| panic!("a time, not {value}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_of_moves_with_the_member_and_stops_when_it_is_lost() {
    let shutdown = CancellationToken::new();
    let (a, b) = (member("a").await, member("b").await);
    let (url, gateway) =
        start_gateway(&[&a, &b], |c| c.transports.heartbeat = HEARTBEAT, &shutdown).await;
    for name in ["a", "b"] {
        doc_where(gateway.hub(), &format!("clusters/{name}"), WAIT, |d| {
            d["phase"] == "Healthy"
        })
        .await;
    }

    // SSE: `synced` says it first, then every heartbeat.
    let mut sse = SseReader::open(&format!("{url}/api/v1/events?topic=clusters/*"), None).await;
    let synced = sse.until_synced().await.pop().unwrap().data;
    let members: Vec<&String> = synced["asOf"].as_object().unwrap().keys().collect();
    assert_eq!(members, ["a", "b"], "{synced}");
    let first = sse.next_heartbeat(WAIT).await;
    // Probes every 200 ms: a few heartbeats later both members moved on.
    let mut later = first.clone();
    for _ in 0..4 {
        later = sse.next_heartbeat(WAIT).await;
    }
    for m in ["a", "b"] {
        assert!(
            time(&later["asOf"][m]) > time(&first["asOf"][m]),
            "{m}: {first} then {later}"
        );
        assert!(time(&later["asOf"][m]) <= time(&later["at"]), "{later}");
    }

    // b is lost: its entry stops while `at` and a's go on.
    b.shutdown().await;
    doc_where(gateway.hub(), "clusters/b", WAIT, |d| {
        d["phase"] == "Unhealthy"
    })
    .await;
    let lost = sse.next_heartbeat(WAIT).await;
    let mut after = lost.clone();
    for _ in 0..4 {
        after = sse.next_heartbeat(WAIT).await;
    }
    assert_eq!(after["asOf"]["b"], lost["asOf"]["b"], "{lost} then {after}");
    assert!(time(&after["at"]) - time(&after["asOf"]["b"]) >= chrono::Duration::milliseconds(1000));
    assert!(
        time(&after["asOf"]["a"]) > time(&lost["asOf"]["a"]),
        "{lost} then {after}"
    );

    // WebSocket: each subscription's heartbeats name only the members its
    // patterns reach, with its `sub`.
    let mut ws = ws_connect(&url).await;
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s-a", "topics": ["apps/a/**"]}),
    )
    .await;
    let mut synced = None;
    let heartbeat = loop {
        let m = ws_next_any(&mut ws).await.expect("messages");
        if m["type"] == "synced" {
            synced = Some(m);
        } else if m["type"] == "heartbeat" {
            break m;
        }
    };
    let synced = synced.expect("synced before the first heartbeat");
    assert_eq!(synced["sub"], "s-a");
    assert_eq!(heartbeat["sub"], "s-a", "{heartbeat}");
    for m in [&synced, &heartbeat] {
        let members: Vec<&String> = m["asOf"].as_object().unwrap().keys().collect();
        assert_eq!(members, ["a"], "{m}");
    }
    shutdown.cancel();
    a.shutdown().await;
}
