//! Live queries at fleet size (docs/PROTOCOL.md "Live queries";
//! docs/BENCHMARKS.md, scenario 22): a gateway over a hub of
//! `query_docs` app documents (100 clusters × 10 namespaces), on a runtime
//! of its own whose threads are named `kp-gateway`, and `query_count` live
//! queries over WebSockets (20 a socket): a cluster's apps sorted by name
//! (a page of 20), a namespace's apps not Running sorted by state, a
//! cluster's apps counted by state, and one in fifty fleet-wide: every
//! app not Running, sorted by state then name, a page of 10. A driver on
//! the gateway's runtime changes `query_rate` documents a second (an
//! app's state, readiness and `changedAt`, its time in µs).
//!
//! Measured over the window: the gateway threads' CPU (utime + stime of
//! `/proc/self/task/*` named `kp-gateway`, which include the hub's puts)
//! per change; the bytes and frames each query's client received per
//! minute; from each frame that carries a `changedAt`, the time from the
//! change to the frame; then, with the queries gone, the same for one
//! subscriber of the whole pattern (`apps/**`), what a client filtering
//! on its own side would receive. The same window with a tenth of the
//! queries says whether the cost per change follows the queries a change
//! reaches or all of them.
//!
//! Bounded: sizes from the plan, every wait has a deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use kube_pulse::hub::{Hub, HubConfig};
use kube_pulse::transports::TransportConfig;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::scenarios::{Plan, percentile};

const CLUSTERS: usize = 100;
const NAMESPACES: usize = 10;
const QUERIES_PER_SOCKET: usize = 20;
/// Bound of every wait for the gateway or the clients.
const WAIT: Duration = Duration::from_secs(120);

/// One window of changes against a number of queries.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct QueryWindow {
    pub(crate) queries: usize,
    /// Queries whose patterns match a change, on average (the ones it reaches).
    pub(crate) reached_per_change: f64,
    pub(crate) seconds: f64,
    pub(crate) changes: u64,
    pub(crate) server_cpu_seconds: f64,
    pub(crate) server_us_per_change: f64,
    pub(crate) bytes_per_query_minute: f64,
    pub(crate) frames_per_query_minute: f64,
    pub(crate) latency_samples: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    /// Time until every query had its rows and `synced`.
    pub(crate) subscribed_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct LiveQueries {
    pub(crate) docs: usize,
    pub(crate) rate: u32,
    pub(crate) windows: Vec<QueryWindow>,
    /// One subscriber of `apps/**` at the same rate.
    pub(crate) pattern_bytes_per_minute: f64,
    pub(crate) pattern_frames_per_minute: f64,
    pub(crate) pattern_server_us_per_change: f64,
}

fn topic(i: usize) -> (String, usize, usize) {
    let (c, n) = (i % CLUSTERS, (i / CLUSTERS) % NAMESPACES);
    (format!("apps/c{c:02}/ns{n}/app{i:06}"), c, n)
}

fn doc(i: usize, state: &str, ready: u64, changed_at: u64) -> Value {
    let (_, c, n) = topic(i);
    json!({"cluster": format!("c{c:02}"), "namespace": format!("ns{n}"), "app": format!("app{i:06}"),
           "state": state, "ready": ready, "expected": 3, "changedAt": changed_at})
}

/// The `subscribe` of query `q`, and whether its pattern matches a
/// change of cluster `c`, namespace `n`.
fn query(q: usize) -> (Value, Box<dyn Fn(usize, usize) -> bool + Send + Sync>) {
    let (c, n) = (q % CLUSTERS, (q / CLUSTERS) % NAMESPACES);
    let id = format!("q{q}");
    if q % 50 == 49 {
        let op = json!({"op": "subscribe", "id": id, "topics": ["apps/**"],
            "filter": {"ne": ["/state", "Running"]}, "sort": ["/state", "/app"], "limit": 10});
        return (op, Box::new(|_, _| true));
    }
    match q % 3 {
        0 => (
            json!({"op": "subscribe", "id": id, "topics": [format!("apps/c{c:02}/**")], "sort": ["/app"], "limit": 20}),
            Box::new(move |cc, _| cc == c),
        ),
        1 => (
            json!({"op": "subscribe", "id": id, "topics": [format!("apps/c{c:02}/ns{n}/*")],
                "filter": {"ne": ["/state", "Running"]}, "sort": ["/state"], "limit": 50}),
            Box::new(move |cc, nn| cc == c && nn == n),
        ),
        _ => (
            json!({"op": "subscribe", "id": id, "topics": [format!("apps/c{c:02}/**")], "groupBy": "/state"}),
            Box::new(move |cc, _| cc == c),
        ),
    }
}

/// CPU seconds of this process's threads named `kp-gateway`.
fn gateway_cpu() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let ticks: u64 = tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "kp-gateway")
        })
        .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
        .filter_map(|stat| {
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .sum();
    ticks as f64 / 100.0
}

fn micros_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64
}

/// What the clients count while `measuring`.
#[derive(Default)]
struct Counts {
    measuring: AtomicBool,
    bytes: AtomicU64,
    frames: AtomicU64,
    synced: AtomicU64,
    latencies_us: Mutex<Vec<u32>>,
}

/// The largest `changedAt` a frame carries (in `doc`, `patch` or `rows`).
fn changed_at(text: &str) -> Option<u64> {
    if !text.contains("changedAt") {
        return None;
    }
    let value: Value = serde_json::from_str(text).ok()?;
    let mut best = None;
    let mut look = |v: &Value| {
        if let Some(at) = v.get("changedAt").and_then(Value::as_u64) {
            best = best.max(Some(at));
        }
    };
    look(&value["doc"]);
    look(&value["patch"]);
    best
}

/// One socket of the clients: its subscribes, then every frame counted.
async fn client(url: String, ops: Vec<Value>, counts: Arc<Counts>) -> anyhow::Result<()> {
    let ws_url = format!("{}/api/v1/ws", url.replacen("http://", "ws://", 1));
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url).await?;
    for op in ops {
        ws.send(Message::Text(op.to_string().into())).await?;
    }
    while let Some(frame) = ws.next().await {
        let Message::Text(text) = frame? else {
            continue;
        };
        if text.contains("\"type\":\"error\"") {
            anyhow::bail!("a query was refused: {text}");
        }
        if text.contains("\"type\":\"synced\"") {
            counts.synced.fetch_add(1, Ordering::Relaxed);
        }
        if !counts.measuring.load(Ordering::Relaxed) {
            continue;
        }
        counts.bytes.fetch_add(text.len() as u64, Ordering::Relaxed);
        counts.frames.fetch_add(1, Ordering::Relaxed);
        if let Some(at) = changed_at(&text) {
            let lag = micros_now().saturating_sub(at).min(u64::from(u32::MAX)) as u32;
            counts.latencies_us.lock().push(lag);
        }
    }
    Ok(())
}

/// The gateway over `hub` on a runtime of its own (threads `kp-gateway`),
/// with the driver's changes running there too.
struct Gateway {
    url: String,
    runtime: tokio::runtime::Handle,
    stop: tokio_util::sync::CancellationToken,
    thread: std::thread::JoinHandle<()>,
}

fn start_gateway(hub: Arc<Hub>) -> anyhow::Result<Gateway> {
    let stop = tokio_util::sync::CancellationToken::new();
    let token = stop.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kp-gateway")
            .enable_all()
            .build()
            .expect("a runtime");
        let handle = runtime.handle().clone();
        runtime.block_on(async move {
            let config = TransportConfig {
                max_subscribes_per_client_second: 100_000,
                max_subscribes_per_second: 100_000,
                ..TransportConfig::default()
            };
            let health = kube_pulse::health::Health {
                livez: vec![Arc::new(kube_pulse::health::checks::Ping)],
                readyz: vec![Arc::new(kube_pulse::health::checks::Ping)],
                format: Default::default(),
                timeout: Duration::from_secs(1),
            };
            let state =
                kube_pulse::http::router::GatewayState::new(hub, config, health, token.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a port");
            let _ = tx.send((
                format!("http://{}", listener.local_addr().expect("bound")),
                handle,
            ));
            let app = kube_pulse::http::router::app(state);
            let _ = kube_pulse::http::server::serve(listener, app, None, token).await;
        });
    });
    let (url, runtime) = rx.recv_timeout(Duration::from_secs(20))?;
    Ok(Gateway {
        url,
        runtime,
        stop,
        thread,
    })
}

/// Changes `rate` documents a second for `window` on the gateway's runtime;
/// how many it changed.
async fn drive(gateway: &Gateway, hub: &Arc<Hub>, docs: usize, rate: u32, window: Duration) -> u64 {
    let hub = hub.clone();
    let task = gateway.runtime.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
        let end = tokio::time::Instant::now() + window;
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut changes = 0;
        while tokio::time::Instant::now() < end {
            tick.tick().await;
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let i = (seed % docs as u64) as usize;
            let state = match seed % 10 {
                0 => "Degraded",
                1 => "Stopped",
                _ => "Running",
            };
            let ready = if state == "Running" { 3 } else { seed % 3 };
            hub.put(&topic(i).0, doc(i, state, ready, micros_now()));
            changes += 1;
        }
        changes
    });
    task.await.unwrap_or(0)
}

/// One window with `queries` live queries.
async fn window(
    gateway: &Gateway,
    hub: &Arc<Hub>,
    plan: &Plan,
    queries: usize,
) -> anyhow::Result<QueryWindow> {
    let counts = Arc::new(Counts::default());
    let (mut ops, mut reach) = (Vec::new(), Vec::new());
    for q in 0..queries {
        let (op, matches) = query(q);
        ops.push(op);
        reach.push(matches);
    }
    let started = Instant::now();
    let mut clients = Vec::new();
    for chunk in ops.chunks(QUERIES_PER_SOCKET) {
        clients.push(tokio::spawn(client(
            gateway.url.clone(),
            chunk.to_vec(),
            counts.clone(),
        )));
    }
    let deadline = Instant::now() + WAIT;
    while counts.synced.load(Ordering::Relaxed) < queries as u64 {
        if let Some(done) = clients.iter_mut().find(|c| c.is_finished()) {
            match done.await {
                Ok(Err(e)) => return Err(e),
                other => anyhow::bail!("a client ended before its queries synced: {other:?}"),
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "queries not synced within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let subscribed_seconds = started.elapsed().as_secs_f64();
    let reached: f64 = (0..1000)
        .map(|i| {
            let (_, c, n) = topic(i * 97 % plan.query_docs);
            reach.iter().filter(|m| m(c, n)).count() as f64
        })
        .sum::<f64>()
        / 1000.0;
    counts.measuring.store(true, Ordering::Relaxed);
    let cpu = gateway_cpu();
    let began = Instant::now();
    let changes = drive(
        gateway,
        hub,
        plan.query_docs,
        plan.query_rate,
        plan.query_window,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seconds = began.elapsed().as_secs_f64();
    let server_cpu_seconds = gateway_cpu() - cpu;
    counts.measuring.store(false, Ordering::Relaxed);
    for c in clients {
        c.abort();
    }
    let mut lat = std::mem::take(&mut *counts.latencies_us.lock());
    lat.sort_unstable();
    let minutes = seconds / 60.0;
    Ok(QueryWindow {
        queries,
        reached_per_change: reached,
        seconds,
        changes,
        server_cpu_seconds,
        server_us_per_change: server_cpu_seconds * 1e6 / changes.max(1) as f64,
        bytes_per_query_minute: counts.bytes.load(Ordering::Relaxed) as f64
            / queries as f64
            / minutes,
        frames_per_query_minute: counts.frames.load(Ordering::Relaxed) as f64
            / queries as f64
            / minutes,
        latency_samples: lat.len(),
        p50_ms: percentile(&lat, 0.5),
        p99_ms: percentile(&lat, 0.99),
        max_ms: lat.last().map_or(0.0, |m| f64::from(*m) / 1000.0),
        subscribed_seconds,
    })
}

pub(crate) async fn live_queries(plan: &Plan) -> anyhow::Result<LiveQueries> {
    let hub = Hub::new(HubConfig::default());
    for i in 0..plan.query_docs {
        let state = match i % 20 {
            0 => "Degraded",
            1 => "Stopped",
            _ => "Running",
        };
        hub.put(
            &topic(i).0,
            doc(i, state, if state == "Running" { 3 } else { 1 }, 0),
        );
    }
    let gateway = start_gateway(hub.clone())?;
    let mut windows = Vec::new();
    for queries in [plan.query_count / 10, plan.query_count] {
        windows.push(window(&gateway, &hub, plan, queries.max(1)).await?);
    }
    // The whole pattern, filtered by the client: one subscriber.
    let counts = Arc::new(Counts::default());
    let op = json!({"op": "subscribe", "id": "all", "topics": ["apps/**"]});
    let reader = tokio::spawn(client(gateway.url.clone(), vec![op], counts.clone()));
    let deadline = Instant::now() + WAIT;
    while counts.synced.load(Ordering::Relaxed) < 1 {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the pattern subscriber not synced"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    counts.measuring.store(true, Ordering::Relaxed);
    let cpu = gateway_cpu();
    let began = Instant::now();
    let changes = drive(
        &gateway,
        &hub,
        plan.query_docs,
        plan.query_rate,
        plan.query_window,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let minutes = began.elapsed().as_secs_f64() / 60.0;
    let pattern_cpu = gateway_cpu() - cpu;
    reader.abort();
    gateway.stop.cancel();
    let _ = tokio::task::spawn_blocking(move || gateway.thread.join()).await;
    Ok(LiveQueries {
        docs: plan.query_docs,
        rate: plan.query_rate,
        windows,
        pattern_bytes_per_minute: counts.bytes.load(Ordering::Relaxed) as f64 / minutes,
        pattern_frames_per_minute: counts.frames.load(Ordering::Relaxed) as f64 / minutes,
        pattern_server_us_per_change: pattern_cpu * 1e6 / changes.max(1) as f64,
    })
}
