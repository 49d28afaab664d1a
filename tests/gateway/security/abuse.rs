//! Abuse end to end against the real binary (issue 17, items 2, 5 and 7):
//! subscription churn with unique patterns gives its memory back, the
//! WebSocket `auth` operation is held to the per-subject limits, and failed
//! authentication is throttled per socket and per client address.
//! Loopback only: other client addresses are 127.0.0.x source addresses.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use pulse_testkit::binary::{Binary, demo};
use pulse_testkit::gateway::{ping_health, serve};
use pulse_testkit::sim::sim_with;
use pulse_testkit::ws::{Ws, ws_next, ws_send};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// A client whose requests leave from `ip` (a loopback address).
fn client_from(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(ip))
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// Opens `/api/v1/ws` from `ip` with an optional bearer token; a refused
/// upgrade gives its status, `Retry-After` and JSON body.
async fn ws_from(
    url: &str,
    ip: [u8; 4],
    token: Option<&str>,
) -> Result<Ws, (u16, Option<String>, Value)> {
    let addr: SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(IpAddr::from(ip), 0)).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let mut request = format!("{}/api/v1/ws", url.replace("http://", "ws://"))
        .into_client_request()
        .unwrap();
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    let connecting =
        tokio_tungstenite::client_async(request, tokio_tungstenite::MaybeTlsStream::Plain(stream));
    match tokio::time::timeout(Duration::from_secs(20), connecting)
        .await
        .expect("the handshake is answered")
    {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let retry = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            let body = response
                .body()
                .as_deref()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null);
            Err((response.status().as_u16(), retry, body))
        }
        Err(e) => panic!("websocket: {e}"),
    }
}

/// A gauge or counter of `/metrics` (the demo runs `--auth none`).
async fn metric(url: &str, name: &str) -> u64 {
    let text = client_from([127, 0, 0, 1])
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} in /metrics"))
        .parse()
        .unwrap()
}

/// The pattern index's (entries, nodes).
async fn index_size(url: &str) -> (u64, u64) {
    (
        metric(url, "kube_pulse_pattern_index_entries").await,
        metric(url, "kube_pulse_pattern_index_nodes").await,
    )
}

/// A pattern no other subscription shares: 251 segments, 500+ bytes (the
/// limit is 512), each a trie node.
fn unique_pattern(socket: usize, cycle: usize, k: usize) -> String {
    format!("c{socket}-{cycle}-{k}{}", "/s".repeat(250))
}

/// Subscribes `topics` as `id`: Ok once `synced` arrives, Err with the
/// error code otherwise.
async fn subscribe(ws: &mut Ws, id: &str, topics: Value) -> Result<(), String> {
    ws_send(ws, json!({"op": "subscribe", "id": id, "topics": topics})).await;
    loop {
        let message = ws_next(ws)
            .await
            .unwrap_or_else(|code| panic!("socket closed with {code:?}"));
        match message["type"].as_str() {
            Some("synced") => return Ok(()),
            Some("error") => return Err(message["code"].as_str().unwrap_or("").to_string()),
            _ => {}
        }
    }
}

/// Item 2: five sockets cycle subscribe/unsubscribe with unique long
/// patterns, within the rate limits (at most 5 live subscriptions). Before
/// the fix the index kept every node (~300 000 here, 100+ MB of RSS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pattern_churn_gives_its_memory_back() {
    const SOCKETS: usize = 5;
    const CYCLES: usize = 30;
    const PATTERNS: usize = 8;
    let bin = Binary::start(&demo(&["--replay-log-bytes", "1048576"]));
    let url = bin.url.clone();
    // Let the demo's clusters sync before the baseline.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let baseline = index_size(&url).await;
    let rss_before = bin.rss_kib();
    let started = Instant::now();
    let churners: Vec<_> = (0..SOCKETS)
        .map(|socket| {
            let url = url.clone();
            tokio::spawn(async move {
                let mut ws = ws_from(&url, [127, 0, 0, 1], None).await.unwrap();
                let mut refused = 0;
                for cycle in 0..CYCLES {
                    let topics: Vec<String> = (0..PATTERNS)
                        .map(|k| unique_pattern(socket, cycle, k))
                        .collect();
                    let id = format!("s{cycle}");
                    // Within the rate limits: a refused subscribe waits and
                    // tries again (bounded).
                    while let Err(code) = subscribe(&mut ws, &id, json!(topics)).await {
                        assert_eq!(code, "rate_limited");
                        refused += 1;
                        assert!(refused < 50, "refused too often");
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    ws_send(&mut ws, json!({"op": "unsubscribe", "id": id})).await;
                    tokio::time::sleep(Duration::from_millis(60)).await;
                }
                ws.close(None).await.unwrap();
            })
        })
        .collect();
    for churner in churners {
        tokio::time::timeout(Duration::from_secs(180), churner)
            .await
            .expect("the churn ends in time")
            .unwrap();
    }
    let churn = started.elapsed();
    // Every session is closed: the index is back at its size before.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut after = index_size(&url).await;
    while after != baseline && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        after = index_size(&url).await;
    }
    let rss_after = bin.rss_kib();
    eprintln!(
        "churned {} patterns in {churn:?}: index {baseline:?} -> {after:?}, RSS {rss_before} -> {rss_after} KiB",
        SOCKETS * CYCLES * PATTERNS
    );
    assert_eq!(after, baseline, "(entries, nodes) after the churn");
    assert!(
        rss_after < rss_before + 40 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );
}

const ALICE: &str = "alice-token-0123456789";

/// A token file (alice reads everything) in the temp directory.
fn tokens_file(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "kube-pulse-abuse-{}-{name}.yaml",
        std::process::id()
    ));
    std::fs::write(
        &path,
        format!("tokens:\n  - {{subject: alice, token: {ALICE}, read: ['*']}}\n"),
    )
    .unwrap();
    path
}

/// `kube-pulse demo --auth tokens` with `extra` flags.
fn demo_with_tokens(name: &str, extra: &[&str]) -> Binary {
    let tokens = tokens_file(name);
    let mut args = demo(&[
        "--auth",
        "tokens",
        "--tokens-file",
        tokens.to_str().unwrap(),
    ]);
    args.extend_from_slice(extra);
    Binary::start(&args)
}

/// Sends `auth` and returns the answer: the message, or the close code and reason.
async fn auth_op(ws: &mut Ws, token: &str) -> Result<Value, (Option<u16>, String)> {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    ws_send(ws, json!({"op": "auth", "token": token, "id": "a"})).await;
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("an answer to auth");
        match message {
            Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Close(frame))) => {
                return Err((
                    frame.as_ref().map(|f| u16::from(f.code)),
                    frame.map(|f| f.reason.to_string()).unwrap_or_default(),
                ));
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Err((None, String::new())),
        }
    }
}

/// Item 5: sockets opened without a token and authenticated with `auth`
/// count against the subject's session limit (2 here) and share its
/// subscribe rate (1/s here), as sockets with the token in the handshake do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_operation_is_held_to_the_subject_limits() {
    let bin = demo_with_tokens(
        "limits",
        &[
            "--max-connections-per-token",
            "2",
            "--max-subscribes-per-client",
            "1",
        ],
    );
    let url = bin.url.clone();
    // Four sockets without a token, from four addresses, each `auth` as alice.
    let mut sockets = Vec::new();
    for i in 0..4u8 {
        let mut ws = ws_from(&url, [127, 0, 0, 10 + i], None).await.unwrap();
        let answer = auth_op(&mut ws, ALICE).await;
        sockets.push((ws, answer));
    }
    for (i, (_, answer)) in sockets.iter().enumerate() {
        match (i, answer) {
            (0 | 1, Ok(m)) => assert_eq!(m["type"], "authenticated", "socket {i}"),
            (2 | 3, Err((code, reason))) => {
                assert_eq!(*code, Some(4029), "socket {i}: {reason}");
                assert!(
                    reason.contains("at most 2 open sessions per token"),
                    "{reason}"
                );
            }
            _ => panic!("socket {i}: {answer:?}"),
        }
    }
    let mut sockets: Vec<Ws> = sockets.into_iter().take(2).map(|(ws, _)| ws).collect();
    // The handshake path agrees: alice holds her two sessions.
    let (status, _, body) = ws_from(&url, [127, 0, 0, 20], Some(ALICE))
        .await
        .expect_err("a third session of alice is refused");
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("too_many_connections"))
    );
    // A renewed `auth` with the same subject is not counted twice.
    assert_eq!(
        auth_op(&mut sockets[1], ALICE).await.unwrap()["type"],
        "authenticated"
    );
    // Once the first socket is gone, one more (and only one) fits.
    let first = sockets.remove(0);
    drop(first);
    let mut third = None;
    for _ in 0..40 {
        let mut ws = ws_from(&url, [127, 0, 0, 21], None).await.unwrap();
        if auth_op(&mut ws, ALICE).await.is_ok() {
            third = Some(ws);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut third = third.expect("the closed socket's place is given back");
    // The two sockets (two addresses) share alice's subscribe rate: 1/s.
    let started = Instant::now();
    for n in 0..3 {
        for ws in [&mut sockets[0], &mut third] {
            let topics = json!(["clusters/*"]);
            ws_send(
                ws,
                json!({"op": "subscribe", "id": format!("s{n}"), "topics": topics}),
            )
            .await;
        }
    }
    let mut granted = 0;
    for ws in [&mut sockets[0], &mut third] {
        let mut answered = 0;
        while answered < 3 {
            let m = ws_next(ws).await.expect("answers to subscribe");
            match (m["type"].as_str(), m["code"].as_str()) {
                (Some("synced"), _) => {
                    granted += 1;
                    answered += 1;
                }
                (Some("error"), Some("rate_limited")) => answered += 1,
                (Some("error"), code) => panic!("unexpected error {code:?}: {m}"),
                _ => {}
            }
        }
    }
    let elapsed = started.elapsed().as_secs();
    assert!(
        granted <= 1 + elapsed,
        "{granted} subscribes granted in {elapsed} s at 1/s for alice"
    );
}

/// GET `url` from `ip` with an optional token: (status, Retry-After, body).
async fn get_from(ip: [u8; 4], url: &str, token: Option<&str>) -> (u16, Option<String>, Value) {
    let mut request = client_from(ip).get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, retry, response.json().await.unwrap_or(Value::Null))
}

/// Item 7, per socket: the third refused `auth` operation closes the socket
/// (4001); an address past its failure limit is closed at its next `auth`
/// (4029) and refused at the handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_auth_operations_close_the_socket() {
    let bin = demo_with_tokens("auth-op", &["--max-auth-failures-per-ip", "5"]);
    let url = bin.url.clone();
    const GUESSER: [u8; 4] = [127, 0, 0, 30];
    let mut ws = ws_from(&url, GUESSER, None).await.unwrap();
    for n in 0..2 {
        let answer = auth_op(&mut ws, &format!("guess-{n}-0123456789"))
            .await
            .unwrap();
        assert_eq!(answer["code"], "unauthorized", "{answer}");
    }
    let (code, reason) = auth_op(&mut ws, "guess-2-0123456789").await.unwrap_err();
    assert_eq!(code, Some(4001), "{reason}");
    assert_eq!(reason, "3 failed auth operations");
    // Two more failures on a new socket reach the address's limit (5): its
    // next `auth`, even with a good token, closes the socket unchecked.
    let mut ws = ws_from(&url, GUESSER, None).await.unwrap();
    for n in 3..5 {
        let answer = auth_op(&mut ws, &format!("guess-{n}-0123456789"))
            .await
            .unwrap();
        assert_eq!(answer["code"], "unauthorized", "{answer}");
    }
    let (code, reason) = auth_op(&mut ws, ALICE).await.unwrap_err();
    assert_eq!(code, Some(4029), "{reason}");
    assert!(
        reason.starts_with("too many failed authentications"),
        "{reason}"
    );
    // The address is refused at the handshake, with or without a token.
    for token in [None, Some(ALICE)] {
        let (status, retry, body) = ws_from(&url, GUESSER, token).await.expect_err("refused");
        assert_eq!(status, 429, "{body}");
        assert_eq!(body["code"], "too_many_auth_failures");
        let retry: u64 = retry.expect("Retry-After").parse().unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
    }
    // Another address authenticates as usual.
    let mut ws = ws_from(&url, [127, 0, 0, 31], None).await.unwrap();
    assert_eq!(
        auth_op(&mut ws, ALICE).await.unwrap()["type"],
        "authenticated"
    );
}

/// Item 7, per address: a flood of bad tokens on REST gets 429 (with
/// `Retry-After` and a JSON body) after the limit, on every route that
/// authenticates, good token or not; other addresses are not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_tokens_is_throttled_per_address() {
    let bin = demo_with_tokens("flood", &["--max-auth-failures-per-ip", "10"]);
    let url = bin.url.clone();
    const GUESSER: [u8; 4] = [127, 0, 0, 40];
    let clusters = format!("{url}/api/v1/clusters");
    let mut statuses = Vec::new();
    for n in 0..200 {
        let (status, retry, body) =
            get_from(GUESSER, &clusters, Some(&format!("guess-{n}-0123456789"))).await;
        if status == 429 {
            assert_eq!(body["code"], "too_many_auth_failures", "{body}");
            let retry: u64 = retry.expect("Retry-After").parse().unwrap();
            assert!((1..=60).contains(&retry), "{retry}");
        }
        statuses.push(status);
    }
    assert!(statuses[..10].iter().all(|s| *s == 401), "{statuses:?}");
    assert!(statuses[10..].iter().all(|s| *s == 429), "{statuses:?}");
    // Every way in from that address is refused while it is throttled, a
    // good token too (its tokens are not checked at all).
    for path in [
        "/api/v1/clusters",
        "/api/v1/events?topic=clusters/*",
        "/api/v1/tasks",
    ] {
        let (status, _, body) = get_from(GUESSER, &format!("{url}{path}"), Some(ALICE)).await;
        assert_eq!(status, 429, "{path}: {body}");
    }
    // Another address is not affected, and its successes are never throttled.
    for _ in 0..30 {
        let (status, _, body) = get_from([127, 0, 0, 41], &clusters, Some(ALICE)).await;
        assert_eq!(status, 200, "{body}");
    }
    // Health stays open to everyone.
    assert_eq!(
        get_from(GUESSER, &format!("{url}/livez"), None).await.0,
        200
    );
}

/// Item 7, `--auth kubernetes`: a rejected token's TokenReview answer is
/// reused for a while, kept apart from the accepted ones (a flood of
/// guesses cannot push a good token out of the cache), and an address past
/// its failure limit costs the host cluster no more reviews.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_mode_caches_rejections_apart_and_stops_reviewing_a_guesser() {
    use futures::StreamExt;
    use kube_pulse::auth::{Auth, FailureLimits, Mode};
    use kube_pulse_sim::reviews::{ReviewPolicy, ReviewUser};
    const ERIN: &str = "sa-token-erin";
    let host = sim_with(|c| c.name = "host".into()).await;
    host.set_review_policy(ReviewPolicy {
        users: vec![ReviewUser {
            token: ERIN.into(),
            username: "system:serviceaccount:team-a:erin".into(),
            groups: vec!["team-a".into()],
        }],
        rules: vec![],
    });
    let reviews = || {
        host.stats()
            .requests
            .iter()
            .filter(|(resource, _)| resource.contains("tokenreviews"))
            .filter_map(|(_, verbs)| verbs.get("create"))
            .sum::<u64>()
    };
    let hub = kube_pulse::hub::Hub::new(Default::default());
    let kube = kube_pulse::auth::kubernetes::KubeAuth::new(
        kube::Client::try_from(host.kube_config()).unwrap(),
        hub.clone(),
        vec![],
        Duration::from_secs(60),
    );
    let limits = FailureLimits {
        per_ip: 10,
        window: Duration::from_secs(60),
    };
    let auth = Auth::configured(Mode::Kubernetes(kube), false, limits);
    auth.authenticate(Some(ERIN)).await.unwrap();
    assert_eq!(reviews(), 1);
    // One bad token, asked again and again: one review.
    for _ in 0..20 {
        assert!(auth.authenticate(Some("sa-token-bad")).await.is_err());
    }
    assert_eq!(reviews(), 2);
    // 10 000 distinct guesses (the cache's size) cost a review each, and
    // leave the accepted token's answer in place.
    let guesses = futures::stream::iter(0..10_000)
        .map(|n| {
            let auth = auth.clone();
            async move {
                auth.authenticate(Some(&format!("guess-{n}")))
                    .await
                    .is_err()
            }
        })
        .buffer_unordered(16)
        .filter(|refused| std::future::ready(*refused))
        .count()
        .await;
    assert_eq!(guesses, 10_000);
    let before = reviews();
    auth.authenticate(Some(ERIN)).await.unwrap();
    assert_eq!(reviews(), before, "erin's answer is still cached");
    // Through the gateway: one address's guesses stop costing reviews at
    // its limit; another address still authenticates.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let health = ping_health();
    let state = kube_pulse::http::router::GatewayState::with_auth(
        hub,
        auth,
        Default::default(),
        health,
        shutdown.clone(),
    );
    let (url, _) = serve(state, &shutdown).await;
    let clusters = format!("{url}/api/v1/clusters");
    let before = reviews();
    let mut statuses = Vec::new();
    for n in 0..50 {
        let token = format!("flood-{n}");
        statuses.push(get_from([127, 0, 0, 50], &clusters, Some(&token)).await.0);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 401).count(),
        10,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        40,
        "{statuses:?}"
    );
    assert_eq!(reviews(), before + 10, "no review past the limit");
    assert_eq!(
        get_from([127, 0, 0, 51], &clusters, Some(ERIN)).await.0,
        200
    );
    shutdown.cancel();
    host.shutdown().await;
}
