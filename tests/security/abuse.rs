//! Abuse end to end against the real binary (issue 17, items 2, 5 and 7):
//! subscription churn with unique patterns gives its memory back, the
//! WebSocket `auth` operation is held to the per-subject limits, and failed
//! authentication is throttled per socket and per client address.
//! Loopback only: other client addresses are 127.0.0.x source addresses.

use std::net::{IpAddr, SocketAddr};
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::{Ws, spawn_binary, terminate, wait_for_url, ws_next, ws_send};

/// A `kube-pulse` process, stopped (SIGTERM, bounded) when dropped.
struct Binary {
    child: Child,
    url: String,
}

impl Binary {
    fn start(args: &[&str]) -> Self {
        let mut child = spawn_binary(args);
        let url = wait_for_url(&mut child);
        Self { child, url }
    }

    /// The process's resident set size, in KiB (`VmRSS`).
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            terminate(&mut self.child);
        }
    }
}

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
    let bin = Binary::start(&[
        "demo",
        "--listen",
        "127.0.0.1:0",
        "--clusters",
        "1",
        "--no-scenario",
        "--replay-log-bytes",
        "1048576",
    ]);
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
