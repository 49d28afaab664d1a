//! Subscription options and lifecycle end to end, over real WebSocket
//! (tokio-tungstenite) and SSE (reqwest) clients against the gateway on
//! loopback: `subscribed` / `stopped`, `bad_option`, field projection
//! (`fields`, SSE `field=`) and coalescing (`debounceMs`), with a client
//! copy that must equal the hub's (projected) documents.

use std::time::{Duration, Instant};

use kube_pulse::hub::{Hub, HubConfig};
use kube_pulse::transports::TransportConfig;
use pulse_testkit::docs::Replica;
use pulse_testkit::gateway::{gateway, start_gateway};
use pulse_testkit::sim::sim_with;
use pulse_testkit::sse::SseReader;
use pulse_testkit::ws::{Ws, ws_connect, ws_next_any, ws_send};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

fn app(phase: &str, ready: u64) -> Value {
    json!({"phase": phase, "reason": "R", "ready": ready, "workloads": {"Deployment/web": {"ready": ready}}})
}

/// Messages up to and including `synced` (lifecycle messages included).
async fn until_synced(ws: &mut Ws) -> Vec<Value> {
    let mut out = Vec::new();
    for _ in 0..1000 {
        let m = ws_next_any(ws).await.expect("messages until synced");
        let done = m["type"] == "synced";
        out.push(m);
        if done {
            return out;
        }
    }
    panic!("no synced within 1000 messages: {out:?}");
}

/// Pings and returns what came before the heartbeat: everything the
/// gateway had queued for the socket when it read the ping.
async fn before_heartbeat(ws: &mut Ws) -> Vec<Value> {
    ws_send(ws, json!({"op": "ping", "id": "p"})).await;
    let mut out = Vec::new();
    for _ in 0..1000 {
        let m = ws_next_any(ws).await.expect("a heartbeat");
        if m["type"] == "heartbeat" && m["id"] == "p" {
            return out;
        }
        // A subscription's own heartbeat is not something queued.
        if m["type"] != "heartbeat" {
            out.push(m);
        }
    }
    panic!("no heartbeat within 1000 messages");
}

#[tokio::test]
async fn lifecycle_messages_bracket_a_subscription() {
    let hub = Hub::new(HubConfig::default());
    hub.put("apps/c/ns/a", app("Running", 3));
    let (url, stop, _state, _server) = gateway(hub.clone(), TransportConfig::default()).await;
    let mut ws = ws_connect(&url).await;

    ws_send(&mut ws, json!({"op": "subscribe", "id": "s1", "topics": ["apps/**"], "debounceMs": 100, "fields": ["/reason", "/phase", "/phase"]})).await;
    let first = until_synced(&mut ws).await;
    assert_eq!(
        first[0],
        json!({"sub": "s1", "type": "subscribed", "topics": ["apps/**"], "debounceMs": 100, "fields": ["/phase", "/reason"]}),
        "the ack with normalized options comes first"
    );
    assert_eq!(first[1]["type"], "snapshot");
    assert_eq!(first[1]["doc"], json!({"phase": "Running", "reason": "R"}));
    assert_eq!(first.len(), 3);

    // Without options the ack names only the topics.
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s2", "topics": ["apps/**"]}),
    )
    .await;
    let plain = until_synced(&mut ws).await;
    assert_eq!(
        plain[0],
        json!({"sub": "s2", "type": "subscribed", "topics": ["apps/**"]})
    );
    assert_eq!(plain[1]["doc"], app("Running", 3));

    // Bad options: an error naming the subscription, and no subscription.
    let bad = [json!(10), json!(60_001), json!("1s"), json!(-5), json!(1.5)];
    for (i, debounce) in bad.into_iter().enumerate() {
        let id = format!("bad{i}");
        ws_send(
            &mut ws,
            json!({"op": "subscribe", "id": id, "topics": ["apps/**"], "debounceMs": debounce}),
        )
        .await;
        let m = ws_next_any(&mut ws).await.unwrap();
        assert_eq!(
            (m["type"].as_str(), m["code"].as_str(), m["id"].as_str()),
            (Some("error"), Some("bad_option"), Some(id.as_str())),
            "{m}"
        );
    }
    for fields in [json!([]), json!("/phase"), json!(["phase"]), json!([1])] {
        ws_send(
            &mut ws,
            json!({"op": "subscribe", "id": "badf", "topics": ["apps/**"], "fields": fields}),
        )
        .await;
        let m = ws_next_any(&mut ws).await.unwrap();
        assert_eq!(m["code"], "bad_option", "{fields}: {m}");
    }
    ws_send(&mut ws, json!({"op": "unsubscribe", "id": "bad0"})).await;
    assert_eq!(
        ws_next_any(&mut ws).await.unwrap()["code"],
        "unknown_subscription",
        "a refused subscribe leaves no subscription"
    );

    // Unsubscribe: `stopped` is the subscription's last message.
    ws_send(&mut ws, json!({"op": "unsubscribe", "id": "s2"})).await;
    assert_eq!(
        ws_next_any(&mut ws).await.unwrap(),
        json!({"sub": "s2", "type": "stopped", "reason": "unsubscribed"})
    );
    hub.put("apps/c/ns/a", app("Degraded", 1));
    let after = before_heartbeat(&mut ws).await;
    assert!(
        after.iter().all(|m| m["sub"] == "s1"),
        "nothing for s2 after stopped: {after:?}"
    );
    stop.cancel();
}

/// Patches carry only projected members; changes outside the projection
/// send nothing; `base` names the revision the client holds.
#[tokio::test]
async fn a_projected_subscription_sees_only_its_fields() {
    let hub = Hub::new(HubConfig::default());
    hub.put("apps/c/ns/a", app("Running", 3));
    let (url, stop, _state, _server) = gateway(hub.clone(), TransportConfig::default()).await;
    let mut ws = ws_connect(&url).await;
    let fields = ["/phase", "/workloads/Deployment~1web/ready"];
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "p", "topics": ["apps/**"], "fields": fields}),
    )
    .await;
    let mut replica = Replica::default();
    for m in until_synced(&mut ws).await {
        replica.apply(&m);
    }
    let project = |doc: &Value| json!({"phase": doc["phase"], "workloads": {"Deployment/web": {"ready": doc["workloads"]["Deployment/web"]["ready"]}}});
    assert_eq!(replica.docs["apps/c/ns/a"].1, project(&app("Running", 3)));

    // Outside the projection: nothing is sent.
    let mut doc = app("Running", 3);
    doc["reason"] = json!("Other");
    hub.put("apps/c/ns/a", doc);
    assert_eq!(before_heartbeat(&mut ws).await, Vec::<Value>::new());

    // Inside: a patch of the projected members from the revision the client holds.
    hub.put("apps/c/ns/a", app("Degraded", 1));
    let got = before_heartbeat(&mut ws).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["rev"], 3);
    assert_eq!(got[0]["base"], 1, "revision 2 was not sent");
    assert_eq!(
        got[0]["patch"],
        json!({"phase": "Degraded", "workloads": {"Deployment/web": {"ready": 1}}})
    );
    replica.apply(&got[0]);
    assert_eq!(
        replica.docs["apps/c/ns/a"],
        (3, project(&app("Degraded", 1)))
    );
    stop.cancel();
}

/// Many quick changes go out as the first one at once, then at most one
/// message per interval with the latest state; the copy ends equal to the
/// hub's document and the last cursor is the hub's.
#[tokio::test]
async fn a_debounced_subscription_coalesces_and_converges() {
    let hub = Hub::new(HubConfig::default());
    hub.put("apps/c/ns/a", app("Running", 0));
    let (url, stop, _state, _server) = gateway(hub.clone(), TransportConfig::default()).await;
    let mut ws = ws_connect(&url).await;
    let interval = Duration::from_millis(300);
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "d", "topics": ["apps/**"], "debounceMs": 300}),
    )
    .await;
    let mut replica = Replica::default();
    for m in until_synced(&mut ws).await {
        replica.apply(&m);
    }
    let changes = 40;
    let started = Instant::now();
    for i in 1..=changes {
        hub.put("apps/c/ns/a", app("Running", i));
    }
    let elapsed = started.elapsed();
    let want = (*hub.get("apps/c/ns/a").unwrap().doc).clone();
    let mut patches = 0;
    let mut last_cursor = String::new();
    let deadline = Instant::now() + WAIT;
    while replica.docs["apps/c/ns/a"].1 != want {
        assert!(Instant::now() < deadline, "no convergence: {replica:?}");
        let m = ws_next_any(&mut ws).await.unwrap();
        assert_eq!(m["type"], "patch", "{m}");
        replica.apply(&m);
        last_cursor = m["cursor"].as_str().unwrap().to_string();
        patches += 1;
    }
    // One at once, then one per interval the puts spanned, and the last.
    let bound = 2 + (elapsed.as_millis() / interval.as_millis()) as usize;
    assert!(
        patches <= bound,
        "{patches} patches for {changes} changes over {elapsed:?}"
    );
    assert_eq!(
        replica.docs["apps/c/ns/a"].0,
        hub.get("apps/c/ns/a").unwrap().rev
    );
    assert_eq!(
        last_cursor,
        hub.cursor(hub.seq()),
        "nothing is held back any more"
    );
    stop.cancel();
}

/// SSE takes the options as query parameters: projected snapshots and
/// coalesced patches with `base`; bad options are HTTP 400 `bad_option`.
#[tokio::test]
async fn sse_takes_options_as_query_parameters() {
    let hub = Hub::new(HubConfig::default());
    hub.put("apps/c/ns/a", app("Running", 0));
    let (url, stop, _state, _server) = gateway(hub.clone(), TransportConfig::default()).await;
    let client = reqwest::Client::new();
    for (query, want) in [
        ("debounceMs=5", "debounceMs"),
        ("debounceMs=soon", "debounceMs"),
        ("field=phase", "JSON pointer"),
        ("field=/a~x", "~"),
    ] {
        let r = client
            .get(format!("{url}/api/v1/events?topic=apps/**&{query}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{query}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], "bad_option", "{query}");
        assert!(
            body["message"].as_str().unwrap().contains(want),
            "{query}: {body}"
        );
    }
    let mut sse = SseReader::open(
        &format!("{url}/api/v1/events?topic=apps/**&debounceMs=200&field=/phase&field=/ready"),
        None,
    )
    .await;
    let mut replica = Replica::default();
    let first = sse.until_synced().await;
    assert_eq!(
        first[0].data["doc"],
        json!({"phase": "Running", "ready": 0})
    );
    for e in &first {
        replica.apply(&e.data);
    }
    for i in 1..=20 {
        hub.put(
            "apps/c/ns/a",
            app(if i % 2 == 0 { "Running" } else { "Degraded" }, i),
        );
    }
    let current = hub.get("apps/c/ns/a").unwrap();
    let want = json!({"phase": current.doc["phase"], "ready": current.doc["ready"]});
    let deadline = Instant::now() + WAIT;
    while replica.docs["apps/c/ns/a"].1 != want {
        assert!(Instant::now() < deadline, "no convergence: {replica:?}");
        let e = sse.next().await;
        assert_eq!(e.event, "patch");
        assert!(e.data["base"].is_u64(), "{:?}", e.data);
        assert_eq!(e.id, e.data["cursor"]);
        replica.apply(&e.data);
    }
    assert_eq!(replica.docs["apps/c/ns/a"].0, current.rev);
    stop.cancel();
}

/// While a change is held back, the subscription's other messages carry a
/// cursor from before it (a resume from them must not skip it); a
/// subscription with options answers `since` with fresh snapshots.
#[tokio::test]
async fn cursors_stay_below_a_held_back_change() {
    let hub = Hub::new(HubConfig::default());
    hub.put("apps/c/ns/a", app("Running", 0));
    hub.put("apps/c/ns/b", app("Running", 0));
    let (url, stop, _state, _server) = gateway(hub.clone(), TransportConfig::default()).await;
    let mut ws = ws_connect(&url).await;
    let since = hub.cursor(hub.seq());
    ws_send(&mut ws, json!({"op": "subscribe", "id": "h", "topics": ["apps/**"], "debounceMs": 60_000, "since": since})).await;
    let first = until_synced(&mut ws).await;
    let synced = first.last().unwrap();
    assert_eq!(synced["resumed"], false);
    assert!(
        synced["reason"]
            .as_str()
            .unwrap()
            .contains("does not replay"),
        "{synced}"
    );
    assert_eq!(synced["count"], 2);

    // a: the first change goes out at once, the second is held (60 s).
    hub.put("apps/c/ns/a", app("Running", 1));
    let sent = before_heartbeat(&mut ws).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["cursor"], hub.cursor(hub.seq()));
    let held = hub.put("apps/c/ns/a", app("Running", 2)).unwrap();
    assert_eq!(before_heartbeat(&mut ws).await, Vec::<Value>::new());
    // b: its first change goes out at once, at a cursor before a's held change.
    hub.put("apps/c/ns/b", app("Degraded", 1));
    let sent = before_heartbeat(&mut ws).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["topic"], "apps/c/ns/b");
    assert_eq!(sent[0]["cursor"], hub.cursor(held.seq - 1));
    stop.cancel();
}

/// Summary topics over the whole gateway and simulated members: counts of
/// clusters by phase and of a namespace's apps by state, kept live, read
/// over a projected WebSocket subscription until they match the members.
#[tokio::test]
async fn summaries_count_clusters_and_apps_live() {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let member = |name: &'static str| {
        sim_with(move |c| {
            c.name = name.into();
            c.workloads = vec![kube_pulse_sim::WorkloadSeed {
                namespace: "shop".into(),
                name: "web".into(),
                kind: "Deployment".into(),
                replicas: 1,
                image: "registry.example/web:1".into(),
            }];
        })
    };
    let (a, b) = (member("a").await, member("b").await);
    let (url, _gateway) = start_gateway(&[&a, &b], |_| {}, &shutdown).await;
    let mut ws = ws_connect(&url).await;
    ws_send(&mut ws, json!({"op": "subscribe", "id": "sum", "topics": ["summary/**"], "fields": ["/total", "/phases/Healthy/count", "/states"]})).await;
    let mut replica = Replica::default();
    let want_clusters = json!({"total": 2, "phases": {"Healthy": {"count": 2}}});
    let want_apps = json!({"total": 1, "states": {"Running": 1}});
    let deadline = Instant::now() + WAIT;
    loop {
        let done = replica.docs.get("summary/clusters").map(|d| &d.1) == Some(&want_clusters)
            && replica.docs.get("summary/apps/a/shop").map(|d| &d.1) == Some(&want_apps)
            && replica.docs.get("summary/apps/b/shop").map(|d| &d.1) == Some(&want_apps);
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "summaries did not converge: {replica:?}"
        );
        let m = tokio::time::timeout(WAIT, ws_next_any(&mut ws))
            .await
            .expect("a message")
            .unwrap();
        replica.apply(&m);
    }
    shutdown.cancel();
}
