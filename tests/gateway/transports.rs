//! SSE and WebSocket end to end: snapshot, `synced`, patches; resume from a
//! cursor; fresh snapshots for unknown cursors; slow readers collapse to
//! snapshots while others keep every change; overlapping subscriptions;
//! limits and bad input; graceful shutdown; upstream load independent of
//! the number of subscribers.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use kube_pulse::hub::{Hub, HubConfig};
use kube_pulse::transports::TransportConfig;
use kube_pulse_sim::workload_manifest;
use pulse_testkit::docs::Replica;
use pulse_testkit::gateway::{doc_where, gateway, gateway_on_own_runtime, pipeline};
use pulse_testkit::http::http;
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::deployment;
use pulse_testkit::sim::sim_with;
use pulse_testkit::sse::SseReader;
use pulse_testkit::ws::{Ws, ws_connect, ws_connect_small, ws_next, ws_send, ws_until_synced};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

/// A gateway over a hub holding `t/x` (subscriber queues of `queue`
/// changes, the given write timeout) with a WebSocket subscribed to `t/**`
/// whose snapshots were read; `recv_buffer` makes its receive window small.
struct Subscribed {
    hub: std::sync::Arc<Hub>,
    url: String,
    stop: CancellationToken,
    state: std::sync::Arc<kube_pulse::http::router::GatewayState>,
    ws: Ws,
}

async fn subscribed_to_t(
    queue: usize,
    write_timeout: Duration,
    recv_buffer: Option<u32>,
) -> Subscribed {
    let hub = Hub::new(HubConfig {
        log_size: 1000,
        subscriber_queue: queue,
        ..HubConfig::default()
    });
    hub.put("t/x", json!({"i": 0}));
    let config = TransportConfig {
        write_timeout,
        ..TransportConfig::default()
    };
    let (url, stop, state, _server) = gateway(hub.clone(), config).await;
    let mut ws = match recv_buffer {
        Some(size) => ws_connect_small(&url, size).await,
        None => ws_connect(&url).await,
    };
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s", "topics": ["t/**"]}),
    )
    .await;
    ws_until_synced(&mut ws).await;
    Subscribed {
        hub,
        url,
        stop,
        state,
        ws,
    }
}

#[tokio::test]
async fn sse_and_ws_get_snapshots_then_patches_from_a_live_cluster() {
    let shutdown = CancellationToken::new();
    let sim = sim_with(|c| {
        c.name = "a".into();
        c.workloads = vec![deployment("shop", "web", 1)];
    })
    .await;
    let p = pipeline(&[&sim], vec![], &shutdown).await;
    let hub = p.hub().clone();
    doc_where(&hub, "apps/a/shop/web", WAIT, |d| d["phase"] == "Running").await;
    let (url, stop, _state, server) = gateway(hub.clone(), TransportConfig::default()).await;

    let mut sse = SseReader::open(&format!("{url}/api/v1/events?topic=apps/*/shop/*"), None).await;
    let initial = sse.until_synced().await;
    assert_eq!(initial.len(), 2);
    assert_eq!(initial[0].event, "snapshot");
    assert_eq!(initial[0].data["topic"], "apps/a/shop/web");
    assert_eq!(initial[0].data["doc"]["phase"], "Running");
    assert_eq!(initial[0].id, initial[0].data["cursor"].as_str().unwrap());
    assert_eq!(initial[1].data["resumed"], false);

    let mut ws = ws_connect(&url).await;
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "apps", "topics": ["apps/a/**"]}),
    )
    .await;
    let ws_initial = ws_until_synced(&mut ws).await;
    assert_eq!(ws_initial[0]["sub"], "apps");
    assert_eq!(ws_initial[0]["type"], "snapshot");
    assert_eq!(ws_initial.last().unwrap()["type"], "synced");

    let mut sse_replica = Replica::default();
    let mut ws_replica = Replica::default();
    for e in &initial {
        sse_replica.apply(&e.data);
    }
    for m in &ws_initial {
        ws_replica.apply(m);
    }
    // Scale up: the app goes Degraded, then Running with 3 ready; both transports follow.
    let mut scaled = workload_manifest(&deployment("shop", "web", 1));
    scaled["spec"]["replicas"] = json!(3);
    sim.apply(&scaled).unwrap();
    let done = |r: &Replica| {
        r.docs
            .get("apps/a/shop/web")
            .is_some_and(|(_, d)| d["ready"] == 3 && d["phase"] == "Running")
    };
    while !done(&sse_replica) {
        let e = sse.next().await;
        assert_eq!(e.event, e.data["type"].as_str().unwrap());
        sse_replica.apply(&e.data);
    }
    while !done(&ws_replica) {
        let m = ws_next(&mut ws).await.unwrap();
        assert_eq!(m["sub"], "apps");
        ws_replica.apply(&m);
    }
    let current = hub.get("apps/a/shop/web").unwrap();
    assert_eq!(sse_replica.docs["apps/a/shop/web"].1, *current.doc);

    stop.cancel();
    assert_eq!(
        ws_next(&mut ws).await.unwrap_err(),
        Some(1001),
        "going away on shutdown"
    );
    assert!(
        sse.next_within(WAIT).await.is_none(),
        "the SSE stream ends on shutdown"
    );
    server.await.unwrap();
    p.stop().await;
    sim.shutdown().await;
}

#[tokio::test]
async fn resume_replays_exactly_the_missed_changes() {
    let hub = Hub::new(HubConfig::default());
    hub.put("clusters/a", json!({"n": 0}));
    hub.put("clusters/b", json!({"n": 0}));
    let (url, stop, _state, _server) = gateway(hub.clone(), TransportConfig::default()).await;
    let events = format!("{url}/api/v1/events?topic=clusters/a");
    let mut sse = SseReader::open(&events, None).await;
    let synced = sse.until_synced().await.pop().unwrap();
    hub.put("clusters/a", json!({"n": 1}));
    let last = sse.next().await;
    assert_eq!(last.data["patch"], json!({"n": 1}));
    drop(sse);
    // Missed while disconnected: two changes on the topic, one elsewhere.
    hub.put("clusters/a", json!({"n": 2}));
    hub.put("clusters/b", json!({"n": 1}));
    hub.put("clusters/a", json!({"n": 3}));
    let mut resumed = SseReader::open(&events, Some(&last.id)).await;
    let replay = resumed.until_synced().await;
    let kinds: Vec<(String, Value)> = replay
        .iter()
        .map(|e| (e.event.clone(), e.data["patch"]["n"].clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("patch".into(), json!(2)),
            ("patch".into(), json!(3)),
            ("synced".into(), Value::Null)
        ]
    );
    assert_eq!(replay[2].data["resumed"], true);
    assert_eq!(replay[2].data["count"], 2);
    // The same with ?since= on a fresh connection.
    let mut by_query = SseReader::open(&format!("{events}&since={}", synced.id), None).await;
    let replay = by_query.until_synced().await;
    assert_eq!(
        replay.len(),
        4,
        "three changes since the first synced, then synced: {replay:?}"
    );

    // Unknown epoch, malformed cursor, and a future sequence: fresh snapshots, and why.
    let long = format!("{}-1{}", hub.epoch(), "0".repeat(4000));
    for (since, reason) in [
        ("0abc-1", "another gateway process"),
        ("garbage", "invalid cursor"),
        // Not said back whole.
        (&long[..], "longer than 256 bytes"),
        (
            &format!("{}-99999", hub.epoch())[..],
            "ahead of this gateway",
        ),
    ] {
        let mut fresh = SseReader::open(&events, Some(since)).await;
        let got = fresh.until_synced().await;
        assert_eq!(got[0].event, "snapshot", "{since}");
        assert_eq!(got[0].data["doc"]["n"], 3);
        assert_eq!(got[1].data["resumed"], false);
        assert!(
            got[1].data["reason"].as_str().unwrap().contains(reason),
            "{since}: {:?}",
            got[1].data
        );
        assert!(got[1].data.to_string().len() < 512, "{:?}", got[1].data);
    }

    // WebSocket resume through `since`.
    let mut ws = ws_connect(&url).await;
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "x", "topics": ["clusters/*"], "since": last.id}),
    )
    .await;
    let replay = ws_until_synced(&mut ws).await;
    let topics: Vec<&str> = replay.iter().filter_map(|m| m["topic"].as_str()).collect();
    assert_eq!(topics, ["clusters/a", "clusters/b", "clusters/a"]);
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_converges_later_while_others_get_every_change() {
    let hub = Hub::new(HubConfig {
        log_size: 100_000,
        subscriber_queue: 16,
        ..HubConfig::default()
    });
    let pad = "x".repeat(16 * 1024);
    hub.put("apps/a/shop/web", json!({"i": 0, "pad": pad}));
    let config = TransportConfig {
        write_timeout: Duration::from_secs(60),
        ..TransportConfig::default()
    };
    let (url, stop, state, _server) = gateway(hub.clone(), config).await;
    let events = format!("{url}/api/v1/events?topic=apps/**");
    let mut healthy = SseReader::open(&events, None).await;
    let mut slow = SseReader::open(&events, None).await;
    let mut healthy_replica = Replica::default();
    for e in healthy.until_synced().await {
        healthy_replica.apply(&e.data);
    }
    let mut slow_replica = Replica::default();
    for e in slow.until_synced().await {
        slow_replica.apply(&e.data);
    }
    // 3000 changes of 16 KiB (48 MiB) while `slow` does not read: its socket
    // buffers and then its queue fill up. `healthy` reads each one as it comes.
    let changes = 3000u64;
    for i in 1..=changes {
        hub.put(
            "apps/a/shop/web",
            json!({"i": i, "pad": format!("{i}{pad}")}),
        );
        let e = healthy.next().await;
        assert_eq!(
            e.data["rev"].as_u64(),
            Some(i + 1),
            "the healthy reader gets every change, in order"
        );
        healthy_replica.apply(&e.data);
    }
    assert_eq!(healthy_replica.docs["apps/a/shop/web"].1["i"], changes);
    assert!(
        hub.stats().lag_events > 0,
        "the slow reader's queue overflowed: {:?}",
        hub.stats()
    );
    // The slow reader catches up to exactly the hub's state.
    let target = hub.get("apps/a/shop/web").unwrap();
    while slow_replica
        .docs
        .get("apps/a/shop/web")
        .map(|(rev, _)| *rev)
        != Some(target.rev)
    {
        let e = slow.next().await;
        slow_replica.apply(&e.data);
    }
    assert_eq!(slow_replica.docs["apps/a/shop/web"].1, *target.doc);
    assert!(
        state.transports.metrics.collapses.get() > 0,
        "it caught up through a fresh snapshot"
    );
    stop.cancel();
}

/// RFC 6455 §5.5.1: a close the client starts is answered with a close
/// frame (its code echoed) before the connection ends, subscribed or not,
/// so clients see a clean close rather than 1006.
#[tokio::test]
async fn a_close_the_client_starts_is_answered_with_a_close_frame() {
    let hub = Hub::new(HubConfig::default());
    hub.put("t/x", json!({"i": 0}));
    let (url, stop, _state, _server) = gateway(hub.clone(), TransportConfig::default()).await;
    for (code, subscribed) in [
        (CloseCode::Normal, false),
        (CloseCode::Normal, true),
        (CloseCode::Library(4000), true),
    ] {
        let mut ws = ws_connect(&url).await;
        if subscribed {
            ws_send(
                &mut ws,
                json!({"op": "subscribe", "id": "s", "topics": ["t/**"]}),
            )
            .await;
            ws_until_synced(&mut ws).await;
        }
        ws.close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
            code,
            reason: "bye".into(),
        }))
        .await
        .unwrap();
        let answer = loop {
            match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
                Some(Ok(Message::Close(frame))) => break frame,
                Some(Ok(_)) => continue,
                other => panic!("{code:?}, subscribed {subscribed}: no close frame, {other:?}"),
            }
        };
        let answer = answer.expect("the close frame carries a code");
        assert_eq!(answer.code, code, "subscribed {subscribed}");
    }
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_stuck_past_the_write_timeout_is_closed() {
    let Subscribed {
        hub,
        stop,
        state,
        mut ws,
        ..
    } = subscribed_to_t(4, Duration::from_millis(300), None).await;
    // Stop reading; publish 64 KiB changes until the server gives up on this socket.
    let pad = "y".repeat(64 * 1024);
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut i = 0u64;
    while state.transports.metrics.slow_consumer_closes.get() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline && i < 20_000,
            "no slow-consumer close after {i} changes: {} messages, {} bytes sent, {} collapses",
            state.transports.metrics.messages_sent.get(),
            state.transports.metrics.bytes_sent.get(),
            state.transports.metrics.collapses.get(),
        );
        i += 1;
        hub.put("t/x", json!({"i": i, "pad": format!("{i}{pad}")}));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Draining what was buffered ends in the slow-consumer close frame (or a cut connection).
    let mut code = None;
    for _ in 0..100_000 {
        match ws_next(&mut ws).await {
            Ok(_) => continue,
            Err(c) => {
                code = c;
                break;
            }
        }
    }
    assert!(code.is_none() || code == Some(4008), "close code {code:?}");
    stop.cancel();
}

/// Every socket gets its 1001 on shutdown, even when the process ends as
/// soon as the server returns (as the binary's `main` does): the server
/// waits for the sockets' close frames. Several rounds, since a race shows
/// up only now and then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_websocket_sees_going_away_on_shutdown() {
    const ROUNDS: usize = 4;
    const CLIENTS: usize = 30;
    let rounds = async {
        let mut seen = Vec::new();
        for round in 0..ROUNDS {
            let hub = Hub::new(HubConfig::default());
            hub.put("t/x", json!({"i": 0}));
            let (url, stop, thread) =
                gateway_on_own_runtime(hub.clone(), TransportConfig::default());
            let mut clients = Vec::new();
            for c in 0..CLIENTS {
                let mut ws = ws_connect(&url).await;
                ws_send(
                    &mut ws,
                    json!({"op": "subscribe", "id": format!("s{c}"), "topics": ["t/**"]}),
                )
                .await;
                ws_until_synced(&mut ws).await;
                clients.push(ws);
            }
            // Changes in flight while the gateway stops.
            for i in 1..=20 {
                hub.put("t/x", json!({"i": i, "round": round}));
            }
            stop.cancel();
            let codes = futures::future::join_all(clients.iter_mut().map(|ws| async move {
                loop {
                    match ws_next(ws).await {
                        Ok(_) => continue,
                        Err(code) => return code,
                    }
                }
            }))
            .await;
            tokio::task::spawn_blocking(move || thread.join().unwrap())
                .await
                .unwrap();
            seen.push(codes);
        }
        seen
    };
    let seen = tokio::time::timeout(Duration::from_secs(60), rounds)
        .await
        .expect("the rounds end within 60 s");
    for (round, codes) in seen.iter().enumerate() {
        let wrong: Vec<_> = codes.iter().filter(|c| **c != Some(1001)).collect();
        assert!(
            wrong.is_empty(),
            "round {round}: {} of {CLIENTS} sockets did not see 1001: {wrong:?}",
            wrong.len()
        );
    }
}

/// An event stream whose client reads nothing does not hold the server
/// open after shutdown: its write would wait out the write timeout (a
/// minute here, as by default), but `serve` returns once the shutdown
/// drain (10 s) is over, and the sockets go with the runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_that_read_nothing_do_not_hold_the_shutdown() {
    const STREAMS: usize = 5;
    let hub = Hub::new(HubConfig::default());
    hub.put("t/x", json!({"i": 0}));
    let config = TransportConfig::default();
    assert_eq!(config.write_timeout, Duration::from_secs(60));
    let (url, stop, thread) = gateway_on_own_runtime(hub.clone(), config);
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        let request = format!("GET /api/v1/events?topic=t/** HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes())
            .await
            .unwrap();
        streams.push(stream);
    }
    // Each change is a new 64 KiB document: the sockets' buffers fill and
    // every stream's writer waits on its socket.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 1..=40 {
        hub.put(
            "t/x",
            json!({"i": i, "blob": format!("{i}{}", "x".repeat(64 * 1024))}),
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopped = std::time::Instant::now();
    stop.cancel();
    let joined = tokio::time::timeout(
        Duration::from_secs(40),
        tokio::task::spawn_blocking(move || thread.join().unwrap()),
    )
    .await;
    assert!(
        joined.is_ok(),
        "serve had not returned 40 s after shutdown, with {STREAMS} streams that read nothing"
    );
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(30),
        "serve returned {took:?} after shutdown: the write timeout, not the drain"
    );
    drop(streams);
}

/// A client that stops reading while changes flow is closed as a slow
/// consumer, and reading again it gets the 4008 close frame after what was
/// buffered (within the close grace of the slow-consumer decision).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_sees_4008_when_it_reads_again() {
    let Subscribed {
        hub,
        stop,
        state,
        mut ws,
        ..
    } = subscribed_to_t(16, Duration::from_secs(1), None).await;
    let pad = "z".repeat(16 * 1024);
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut i = 0u64;
    while state.transports.metrics.slow_consumer_closes.get() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no slow-consumer close after {i} changes"
        );
        i += 1;
        hub.put("t/x", json!({"i": i, "pad": format!("{i}{pad}")}));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let decided = tokio::time::Instant::now();
    let code = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match ws_next(&mut ws).await {
                Ok(_) => continue,
                Err(code) => return code,
            }
        }
    })
    .await
    .expect("the socket closes within 5 s of the decision");
    assert_eq!(code, Some(4008), "after {i} changes");
    eprintln!(
        "slow consumer: 4008 read {:?} after the decision, {i} changes published",
        decided.elapsed()
    );
    stop.cancel();
}

/// A reader with a small receive window that stops reading at a low rate
/// (20 changes/s of about 1 KiB) is noticed: what the gateway holds for it
/// is bounded, so its writes block and it is closed within the write
/// timeout plus the few seconds it takes to fill that bound (WebSocket:
/// 4008; SSE: the stream ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_reader_at_a_low_rate_is_closed_within_the_write_timeout() {
    let write_timeout = Duration::from_secs(2);
    let Subscribed {
        hub,
        url,
        stop,
        state,
        mut ws,
    } = subscribed_to_t(16, write_timeout, Some(4096)).await;
    // An SSE client that sends its request and never reads.
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut sse = socket.connect(addr).await.unwrap();
    {
        use tokio::io::AsyncWriteExt;
        sse.write_all(b"GET /api/v1/events?topic=t/** HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
    }
    let bound = write_timeout + Duration::from_secs(5);
    let pad = "p".repeat(1000);
    let stopped = tokio::time::Instant::now();
    let mut i = 0u64;
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    while state.transports.metrics.slow_consumer_closes.get() < 2 {
        assert!(
            stopped.elapsed() < bound,
            "{} of 2 stalled readers closed {:?} after they stopped reading ({i} changes of 1 KiB at 20/s; {} messages, {} bytes sent, {} collapses)",
            state.transports.metrics.slow_consumer_closes.get(),
            stopped.elapsed(),
            state.transports.metrics.messages_sent.get(),
            state.transports.metrics.bytes_sent.get(),
            state.transports.metrics.collapses.get(),
        );
        ticks.tick().await;
        i += 1;
        hub.put("t/x", json!({"i": i, "pad": format!("{i}{pad}")}));
    }
    let closed_after = stopped.elapsed();
    eprintln!("stalled readers closed {closed_after:?} after they stopped reading ({i} changes)");
    let code = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match ws_next(&mut ws).await {
                Ok(_) => continue,
                Err(code) => return code,
            }
        }
    })
    .await
    .expect("the socket closes");
    assert_eq!(code, Some(4008));
    // The SSE stream ends: its chunked body reaches the last chunk.
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        use tokio::io::AsyncReadExt;
        let mut body = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match sse.read(&mut buf).await {
                Ok(0) | Err(_) => return body.len(),
                Ok(n) => body.extend_from_slice(&buf[..n]),
            }
            if body.ends_with(b"\r\n0\r\n\r\n") {
                return body.len();
            }
        }
    })
    .await
    .expect("the SSE stream ends");
    eprintln!("the stalled SSE reader had {ended} bytes waiting for it");
    stop.cancel();
}

#[tokio::test]
async fn overlapping_subscriptions_deliver_once_per_subscription() {
    let hub = Hub::new(HubConfig::default());
    hub.put("clusters/a", json!({"n": 0}));
    let (url, stop, _state, _server) = gateway(hub.clone(), TransportConfig::default()).await;
    let mut ws = ws_connect(&url).await;
    ws_send(&mut ws, json!({"op": "subscribe", "id": "one", "topics": ["clusters/*", "clusters/**", "clusters/a"]})).await;
    let first = ws_until_synced(&mut ws).await;
    assert_eq!(
        first.len(),
        2,
        "one snapshot despite three matching patterns: {first:?}"
    );
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "two", "topics": ["**"]}),
    )
    .await;
    assert_eq!(ws_until_synced(&mut ws).await.len(), 2);
    hub.put("clusters/a", json!({"n": 1}));
    let mut subs = vec![];
    for _ in 0..2 {
        let m = ws_next(&mut ws).await.unwrap();
        assert_eq!(m["patch"], json!({"n": 1}));
        subs.push(m["sub"].as_str().unwrap().to_string());
    }
    subs.sort();
    assert_eq!(subs, ["one", "two"]);
    ws_send(&mut ws, json!({"op": "unsubscribe", "id": "two"})).await;
    ws_send(&mut ws, json!({"op": "ping", "id": "p"})).await;
    let pong = ws_next(&mut ws).await.unwrap();
    assert_eq!(
        (pong["type"].as_str(), pong["id"].as_str()),
        (Some("heartbeat"), Some("p"))
    );
    hub.put("clusters/a", json!({"n": 2}));
    let m = ws_next(&mut ws).await.unwrap();
    assert_eq!(m["sub"], "one");
    ws_send(&mut ws, json!({"op": "ping"})).await;
    assert_eq!(
        ws_next(&mut ws).await.unwrap()["type"],
        "heartbeat",
        "nothing more for `two`"
    );
    stop.cancel();
}

#[tokio::test]
async fn bad_websocket_input_gets_an_error_and_the_session_goes_on() {
    let hub = Hub::new(HubConfig::default());
    hub.put("clusters/a", json!({"n": 0}));
    let config = TransportConfig {
        max_subscriptions_per_socket: 2,
        max_subscribes_per_second: 5,
        max_ws_message_bytes: 1024,
        ..TransportConfig::default()
    };
    let (url, stop, _state, _server) = gateway(hub.clone(), config).await;
    let mut ws = ws_connect(&url).await;
    let cases: Vec<(Message, &str)> = vec![
        (Message::Text("{nope".into()), "invalid_json"),
        // A key named twice: which operation was meant is not guessed.
        (
            Message::Text(
                r#"{"op":"subscribe","id":"x","topics":["clusters/*"],"op":"ping"}"#.into(),
            ),
            "invalid_json",
        ),
        (Message::Text(r#"{"op":"dance"}"#.into()), "unknown_op"),
        (Message::Text(r#"{"id":"x"}"#.into()), "invalid_op"),
        (
            Message::Text(r#"{"op":"subscribe","id":"x"}"#.into()),
            "invalid_op",
        ),
        (
            Message::Text(r#"{"op":"subscribe","id":"x","topics":["a//b"]}"#.into()),
            "bad_pattern",
        ),
        (
            Message::Text(r#"{"op":"subscribe","id":"","topics":["a"]}"#.into()),
            "invalid_id",
        ),
        (
            Message::Text(r#"{"op":"unsubscribe","id":"ghost"}"#.into()),
            "unknown_subscription",
        ),
        (
            Message::Binary(vec![1, 2, 3].into()),
            "binary_not_supported",
        ),
    ];
    for (message, code) in cases {
        ws.send(message).await.unwrap();
        let reply = ws_next(&mut ws).await.unwrap();
        assert_eq!(
            (reply["type"].as_str(), reply["code"].as_str()),
            (Some("error"), Some(code)),
            "{reply}"
        );
    }
    // Limits: two subscriptions per socket, three subscribes per second.
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s1", "topics": ["clusters/*"], "since": "nonsense"}),
    )
    .await;
    let synced = ws_until_synced(&mut ws).await.pop().unwrap();
    assert!(
        synced["reason"]
            .as_str()
            .unwrap()
            .contains("invalid cursor")
    );
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s1", "topics": ["clusters/*"]}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await.unwrap()["code"], "duplicate_id");
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s2", "topics": ["clusters/*"]}),
    )
    .await;
    ws_until_synced(&mut ws).await;
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s3", "topics": ["clusters/*"]}),
    )
    .await;
    let reply = ws_next(&mut ws).await.unwrap();
    assert!(
        matches!(
            reply["code"].as_str(),
            Some("too_many_subscriptions" | "rate_limited")
        ),
        "{reply}"
    );
    // The session still works.
    hub.put("clusters/a", json!({"n": 1}));
    let m = ws_next(&mut ws).await.unwrap();
    assert_eq!(m["type"], "patch");
    // Hammering subscribe past the rate limit ends in a policy close.
    let mut hammer = ws_connect(&url).await;
    let mut code = None;
    for i in 0..200 {
        let sent = hammer
            .send(Message::Text(
                json!({"op": "subscribe", "id": format!("h{i}"), "topics": ["zzz"]})
                    .to_string()
                    .into(),
            ))
            .await;
        if sent.is_err() {
            break;
        }
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        match ws_next(&mut hammer).await {
            Ok(_) => continue,
            Err(c) => {
                code = c;
                break;
            }
        }
    }
    assert_eq!(code, Some(1008));
    // An oversize frame closes with 1009.
    ws.send(Message::Text("x".repeat(4096).into()))
        .await
        .unwrap();
    let mut code = None;
    for _ in 0..10 {
        match ws_next(&mut ws).await {
            Ok(_) => continue,
            Err(c) => {
                code = c;
                break;
            }
        }
    }
    assert_eq!(code, Some(u16::from(CloseCode::Size)));
    stop.cancel();
}

#[tokio::test]
async fn bad_http_requests_and_limits_are_refused_clearly() {
    let hub = Hub::new(HubConfig::default());
    let config = TransportConfig {
        max_connections: 1,
        max_topics_per_request: 2,
        ..TransportConfig::default()
    };
    let (url, stop, _state, _server) = gateway(hub.clone(), config).await;
    let client = http();
    let long = format!("topic={}", "a".repeat(20_000));
    // A pattern's faults have the code a WebSocket subscribe gets for them.
    let cases = [
        ("/api/v1/events", "bad_pattern"),
        ("/api/v1/events?topic=a//b", "bad_pattern"),
        ("/api/v1/events?topic=a&colour=red", "bad_request"),
        ("/api/v1/events?topic=a&topic=b&topic=c", "bad_pattern"),
        (&format!("/api/v1/events?{long}")[..], "bad_request"),
    ];
    for (path, code) in cases {
        let response = client.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(response.status(), 400, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], code, "{path}");
    }
    let evil = client
        .get(format!("{url}/api/v1/ws"))
        .header("Origin", "https://evil.example")
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert_eq!(evil.status(), 403);
    assert_eq!(
        evil.json::<Value>().await.unwrap()["code"],
        "forbidden_origin"
    );
    // One connection allowed: the second gets 429 until the first goes.
    let first = SseReader::open(&format!("{url}/api/v1/events?topic=x"), None).await;
    let second = client
        .get(format!("{url}/api/v1/events?topic=x"))
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), 429);
    assert_eq!(
        second.json::<Value>().await.unwrap()["code"],
        "too_many_connections"
    );
    drop(first);
    eventually(WAIT, "the slot freed", || {
        let client = client.clone();
        let url = url.clone();
        async move {
            let r = client
                .get(format!("{url}/api/v1/events?topic=x"))
                .send()
                .await
                .ok()?;
            (r.status() == 200).then_some(())
        }
    })
    .await;
    stop.cancel();
}

#[tokio::test]
async fn upstream_watches_do_not_grow_with_subscribers() {
    let shutdown = CancellationToken::new();
    let sim = sim_with(|c| {
        c.name = "a".into();
        c.workloads = vec![deployment("shop", "web", 1)];
    })
    .await;
    let p = pipeline(&[&sim], vec![], &shutdown).await;
    doc_where(p.hub(), "apps/a/shop/web", WAIT, |d| {
        d["phase"] == "Running"
    })
    .await;
    // 201 subscribers from one address, faster than the per-client rate.
    let config = TransportConfig {
        max_subscribes_per_client_second: 10_000,
        ..TransportConfig::default()
    };
    let (url, stop, state, _server) = gateway(p.hub().clone(), config).await;
    let upstream =
        |s: &kube_pulse_sim::StatsSnapshot| (s.total("watch"), s.total("list"), s.open_watches);
    let mut one = SseReader::open(&format!("{url}/api/v1/events?topic=**"), None).await;
    one.until_synced().await;
    let with_one = upstream(&sim.stats());
    let mut many = Vec::new();
    for i in 0..200 {
        let topic = if i % 2 == 0 {
            "clusters/**"
        } else {
            "apps/a/shop/web"
        };
        let mut reader = SseReader::open(&format!("{url}/api/v1/events?topic={topic}"), None).await;
        reader.until_synced().await;
        many.push(reader);
    }
    assert_eq!(state.transports.metrics.sse_sessions.get(), 201);
    // Subscribers add no upstream request: 200 more cost the member no
    // list and no watch of their own (a watch the load of a full test run
    // restarts meanwhile is one more request, whatever the subscribers), and
    // it settles back to one open watch per resource: deployments,
    // statefulsets, namespaces, nodes, pods, warning events.
    let with_many = upstream(&sim.stats());
    assert_eq!(with_many.1, with_one.1, "no LIST: {:?}", sim.stats());
    assert!(
        with_many.0 < with_one.0 + 10,
        "watch requests with 1 and 201 subscribers: {with_one:?}, {with_many:?}: {:?}",
        sim.stats()
    );
    eventually(WAIT, "one open watch per resource", || async {
        (sim.stats().open_watches == 6).then_some(())
    })
    .await;
    stop.cancel();
    p.stop().await;
    sim.shutdown().await;
}

#[tokio::test]
async fn heartbeats_flow_and_silent_sockets_are_closed() {
    let hub = Hub::new(HubConfig::default());
    hub.put("clusters/a", json!({"n": 0}));
    let as_of = "2026-12-05T10:00:00.250Z";
    hub.freshness().mark("a", as_of.parse().unwrap());
    let config = TransportConfig {
        heartbeat: Duration::from_millis(100),
        ws_idle_timeout: Duration::from_millis(400),
        ..TransportConfig::default()
    };
    let (url, stop, _state, _server) = gateway(hub.clone(), config).await;
    let mut sse = SseReader::open(&format!("{url}/api/v1/events?topic=clusters/*"), None).await;
    let synced = sse.until_synced().await.pop().unwrap();
    assert_eq!(
        synced.data["asOf"],
        json!({ "a": as_of }),
        "{}",
        synced.data
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    hub.put("clusters/a", json!({"n": 1}));
    let patch = sse.next().await;
    assert_eq!(patch.event, "patch");
    assert!(sse.heartbeats >= 2, "SSE heartbeats: {}", sse.heartbeats);
    let beat = sse.last_heartbeat.clone().unwrap();
    assert_eq!(beat["type"], "heartbeat");
    assert_eq!(beat["asOf"], json!({ "a": as_of }), "{beat}");
    assert!(
        beat["at"].as_str().is_some_and(|at| at.ends_with('Z')),
        "{beat}"
    );
    assert_eq!(sse.comments, 0, "heartbeats are events now, not comments");
    // A stream that carries changes still gets its heartbeats: they say how
    // current the members are, which changes of some topics do not.
    let before = sse.heartbeats;
    let started = std::time::Instant::now();
    for n in 2..52 {
        hub.put("clusters/a", json!({ "n": n }));
        let event = sse.next().await;
        assert!(
            !event.id.is_empty(),
            "every message but heartbeats has its cursor"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let busy = sse.heartbeats - before;
    assert!(
        busy >= 3,
        "{busy} heartbeats in {:?} of changes every 20 ms",
        started.elapsed()
    );
    // A heartbeat's cursor is the subscription's, safe to resume from: the
    // last change delivered, not the gateway's position (changes of topics
    // the subscription does not match move that).
    hub.put("clusters/a", json!({"n": "last"}));
    let last = sse.next().await;
    hub.put("other/x", json!({"unmatched": true}));
    let beat = sse.next_heartbeat(Duration::from_secs(5)).await;
    assert_eq!(beat["cursor"], last.id.as_str(), "{beat}");
    // A WebSocket client that never reads never answers pings: closed as idle.
    let mut ws = ws_connect(&url).await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    let mut pings = 0;
    let code = loop {
        match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Ping(_))) => pings += 1,
            Some(Ok(Message::Close(frame))) => break frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => {}
            _ => break None,
        }
    };
    assert_eq!(code, Some(1001));
    assert!(pings >= 1, "the server pinged before giving up");
    stop.cancel();
}

/// A subscriber that fell behind gets its missed topics back as snapshots
/// one by one. Cut right after the first of them and resume with that
/// snapshot's cursor, as a browser's `Last-Event-ID` does: the resumed copy
/// equals the hub's, every topic, no revision gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_from_a_catch_up_snapshot_resumes_without_loss() {
    let hub = Hub::new(HubConfig {
        log_size: 100_000,
        subscriber_queue: 16,
        ..HubConfig::default()
    });
    let pad = "x".repeat(16 * 1024);
    let topics: Vec<String> = (0..20).map(|i| format!("apps/a/shop/w{i}")).collect();
    for t in &topics {
        hub.put(t, json!({"i": 0, "pad": pad}));
    }
    let config = TransportConfig {
        write_timeout: Duration::from_secs(60),
        ..TransportConfig::default()
    };
    let (url, stop, state, _server) = gateway(hub.clone(), config).await;
    let events = format!("{url}/api/v1/events?topic=apps/**");
    let mut slow = SseReader::open(&events, None).await;
    let mut replica = Replica::default();
    for e in slow.until_synced().await {
        replica.apply(&e.data);
    }
    // 3000 changes of 16 KiB over 20 topics while `slow` does not read.
    for i in 1..=3000u64 {
        let t = &topics[(i as usize * 7) % topics.len()];
        hub.put(t, json!({"i": i, "pad": format!("{i}{pad}")}));
    }
    assert!(hub.stats().lag_events > 0, "{:?}", hub.stats());
    // Read on until the first catch-up snapshot, then cut.
    let cut = loop {
        let e = slow.next().await;
        replica.apply(&e.data);
        if e.event == "snapshot" {
            break e.id;
        }
    };
    drop(slow);
    assert!(state.transports.metrics.collapses.get() > 0);
    let mut resumed = SseReader::open(&events, Some(&cut)).await;
    let replay = resumed.until_synced().await;
    for e in &replay {
        replica.apply(&e.data);
    }
    assert_eq!(replay.last().unwrap().data["resumed"], true, "{cut}");
    for t in &topics {
        let truth = hub.get(t).unwrap();
        let (rev, doc) = &replica.docs[t.as_str()];
        assert_eq!(
            (*rev, doc["i"].clone()),
            (truth.rev, truth.doc["i"].clone()),
            "{t} after resuming from {cut}"
        );
        assert_eq!(*doc, *truth.doc, "{t}");
    }
    stop.cancel();
}
