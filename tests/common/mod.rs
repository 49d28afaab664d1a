//! Shared fixtures for the integration tests: simulated clusters on
//! ephemeral loopback ports, kubectl runs, the binary, and polling helpers.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_pulse_sim::SimCluster;

pub(crate) mod nats;
pub(crate) mod scale;

#[allow(unused_imports)]
pub(crate) use kube_pulse_sim::testing::{eventually, kubectl, ok, sim, sim_with};

/// A plain HTTP client for raw requests.
pub(crate) fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// `GET {base}/readyz/{check}`: its status code and body.
pub(crate) async fn readiness(base: &str, check: &str) -> (u16, String) {
    let response = http()
        .get(format!("{base}/readyz/{check}"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The sum of the samples of metric `name` (a name, or a name with its
/// labels, `kube_pulse_x_total{reason="y"}`) in `{base}/metrics`: 0 when
/// absent.
pub(crate) async fn metric(base: &str, name: &str) -> f64 {
    let name = name.trim_end();
    let text = http()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// GETs `url` and parses the JSON answer (any status).
pub(crate) async fn get_json(url: &str) -> serde_json::Value {
    http().get(url).send().await.unwrap().json().await.unwrap()
}

/// The kube-pulse binary, started with `args`, stdout piped.
pub(crate) fn spawn_binary(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kube-pulse"))
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts")
}

/// Reads stdout lines of `child` until one contains `http://`, returning the URL.
pub(crate) fn wait_for_url(child: &mut Child) -> String {
    use std::io::{BufRead, BufReader};
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find("http://") {
                let _ = tx.send(line[at..].trim_end_matches('/').to_string());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the binary prints the address it listens on")
}

/// Sends SIGTERM and waits (bounded) for the process to exit; returns its status.
pub(crate) fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process did not stop within 20 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts sources + engine + hub over the given simulated clusters, with
/// [`quick_pipeline`] settings.
pub(crate) async fn pipeline(
    sims: &[&SimCluster],
    registries: Vec<kube_pulse::sources::SyncRegistry>,
    shutdown: &tokio_util::sync::CancellationToken,
) -> std::sync::Arc<kube_pulse::pipeline::Pipeline> {
    kube_pulse::pipeline::Pipeline::start(members(sims), quick_pipeline(registries), shutdown)
        .await
        .expect("pipeline starts")
}

/// The simulated clusters as gateway members.
pub(crate) fn members(sims: &[&SimCluster]) -> Vec<kube_pulse::pipeline::Member> {
    sims.iter()
        .map(|s| kube_pulse::pipeline::Member {
            name: s.name().into(),
            config: s.kube_config(),
        })
        .collect()
}

/// Pipeline settings for tests: quick probes (every 200 ms, 500 ms timeout)
/// and thresholds 1 / 3.
pub(crate) fn quick_pipeline(
    registries: Vec<kube_pulse::sources::SyncRegistry>,
) -> kube_pulse::pipeline::PipelineConfig {
    kube_pulse::pipeline::PipelineConfig {
        source: kube_pulse::sources::SourceConfig {
            probe_interval: Duration::from_millis(200),
            probe_timeout: Duration::from_millis(500),
            ..Default::default()
        },
        thresholds: kube_pulse::status::cluster::Thresholds {
            success: 1,
            failure: 3,
        },
        registries,
        ..Default::default()
    }
}

/// The whole gateway (`kube_pulse::gateway::Gateway`, as `serve` starts it)
/// over `sims` with quick probes, served on 127.0.0.1:0 until `shutdown`;
/// `tweak` adjusts its configuration. Returns the base URL and the gateway.
pub(crate) async fn start_gateway(
    sims: &[&SimCluster],
    tweak: impl FnOnce(&mut kube_pulse::gateway::GatewayConfig),
    shutdown: &tokio_util::sync::CancellationToken,
) -> (String, kube_pulse::gateway::Gateway) {
    let mut config = kube_pulse::gateway::GatewayConfig {
        members: members(sims),
        pipeline: quick_pipeline(vec![]),
        ..Default::default()
    };
    tweak(&mut config);
    let gateway = kube_pulse::gateway::Gateway::start(config, shutdown)
        .await
        .expect("gateway starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = gateway.router(axum::Router::new());
    let token = shutdown.clone();
    tokio::spawn(async move {
        kube_pulse::http::server::serve(listener, app, None, token)
            .await
            .unwrap();
    });
    (url, gateway)
}

/// Waits until the hub document of `topic` satisfies `check`, returning it.
pub(crate) async fn doc_where(
    hub: &kube_pulse::hub::Hub,
    topic: &str,
    within: Duration,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let current = hub.get(topic).map(|d| (*d.doc).clone());
        if let Some(doc) = &current
            && check(doc)
        {
            return doc.clone();
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting on {topic}; last document: {current:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `phase (reason)` of a status document.
pub(crate) fn label(doc: &serde_json::Value) -> String {
    format!(
        "{} ({})",
        doc["phase"].as_str().unwrap_or("?"),
        doc["reason"].as_str().unwrap_or("?")
    )
}

/// A gateway over `hub` on 127.0.0.1:0; returns its base URL and the shutdown
/// token that stops it (push sessions end with it).
pub(crate) async fn gateway(
    hub: std::sync::Arc<kube_pulse::hub::Hub>,
    config: kube_pulse::transports::TransportConfig,
) -> (
    String,
    tokio_util::sync::CancellationToken,
    std::sync::Arc<kube_pulse::http::router::GatewayState>,
    tokio::task::JoinHandle<()>,
) {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let health = kube_pulse::health::Health {
        livez: vec![std::sync::Arc::new(kube_pulse::health::checks::Ping)],
        readyz: vec![std::sync::Arc::new(kube_pulse::health::checks::Ping)],
        format: Default::default(),
        timeout: Duration::from_secs(1),
    };
    let state = kube_pulse::http::router::GatewayState::new(hub, config, health, shutdown.clone());
    let (url, task) = serve(state.clone(), &shutdown).await;
    (url, shutdown, state, task)
}

/// Serves the gateway of `state` on 127.0.0.1:0 until `shutdown`; returns
/// its base URL and the server task.
pub(crate) async fn serve(
    state: std::sync::Arc<kube_pulse::http::router::GatewayState>,
    shutdown: &tokio_util::sync::CancellationToken,
) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let token = shutdown.clone();
    let app = kube_pulse::http::router::app(state);
    let task = tokio::spawn(async move {
        kube_pulse::http::server::serve(listener, app, None, token)
            .await
            .unwrap();
    });
    (url, task)
}

/// One Server-Sent Event.
#[derive(Debug, Clone)]
pub(crate) struct SseEvent {
    pub(crate) id: String,
    pub(crate) event: String,
    pub(crate) data: serde_json::Value,
}

/// A minimal SSE reader over a streaming HTTP response.
pub(crate) struct SseReader {
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
    pub(crate) comments: usize,
}

impl SseReader {
    /// Opens `GET {url}` (with an optional Last-Event-ID) and checks the SSE headers.
    pub(crate) async fn open(url: &str, last_event_id: Option<&str>) -> Self {
        Self::open_request(url, last_event_id, None).await
    }

    /// Opens `GET {url}` with a bearer token.
    pub(crate) async fn open_with_token(url: &str, token: &str) -> Self {
        Self::open_request(url, None, Some(token)).await
    }

    async fn open_request(url: &str, last_event_id: Option<&str>, token: Option<&str>) -> Self {
        let client = reqwest::Client::new();
        let mut request = client.get(url);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{url}");
        let headers = response.headers();
        assert_eq!(headers["content-type"], "text/event-stream");
        assert_eq!(headers["cache-control"], "no-cache");
        assert_eq!(headers["x-accel-buffering"], "no");
        Self {
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
            comments: 0,
        }
    }

    /// The next event, None when the stream ended; panics after `within`.
    pub(crate) async fn next_within(&mut self, within: Duration) -> Option<SseEvent> {
        use futures::StreamExt;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = SseEvent {
                    id: String::new(),
                    event: "message".into(),
                    data: serde_json::Value::Null,
                };
                let mut is_event = false;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        event.id = v.into();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event.event = v.into();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        event.data = serde_json::from_str(v).expect("data is one JSON line");
                        is_event = true;
                    } else if line.starts_with(':') {
                        self.comments += 1;
                    }
                }
                if is_event {
                    return Some(event);
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .expect("an SSE event within the deadline");
            match chunk {
                Some(Ok(bytes)) => self.buffer.push_str(std::str::from_utf8(&bytes).unwrap()),
                _ => return None,
            }
        }
    }

    pub(crate) async fn next(&mut self) -> SseEvent {
        self.next_within(Duration::from_secs(20))
            .await
            .expect("the stream goes on")
    }

    /// Events up to and including `synced`.
    pub(crate) async fn until_synced(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        loop {
            let e = self.next().await;
            let done = e.event == "synced";
            events.push(e);
            if done {
                return events;
            }
        }
    }
}

/// Applies protocol messages to a local copy of documents, as a client does.
#[derive(Debug, Default)]
pub(crate) struct Replica {
    pub(crate) docs: std::collections::BTreeMap<String, (u64, serde_json::Value)>,
}

impl Replica {
    pub(crate) fn apply(&mut self, message: &serde_json::Value) {
        let topic = message["topic"].as_str().unwrap_or("").to_string();
        let rev = message["rev"].as_u64().unwrap_or(0);
        match message["type"].as_str().unwrap() {
            "snapshot" => {
                self.docs.insert(topic, (rev, message["doc"].clone()));
            }
            "patch" => {
                let (have, doc) = self
                    .docs
                    .get_mut(&topic)
                    .expect("a patch follows a snapshot");
                if rev <= *have {
                    return;
                }
                // A shaped subscription's patch names its base revision.
                let base = message["base"].as_u64().unwrap_or(rev - 1);
                assert_eq!(base, *have, "patches arrive in revision order for {topic}");
                json_patch::merge(doc, &message["patch"]);
                *have = rev;
            }
            "removed" => {
                self.docs.remove(&topic);
            }
            _ => {}
        }
    }
}

/// A WebSocket client connection.
pub(crate) type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Sends one JSON operation.
pub(crate) async fn ws_send(ws: &mut Ws, value: serde_json::Value) {
    use futures::SinkExt;
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        value.to_string().into(),
    ))
    .await
    .unwrap();
}

/// The next JSON text message (skipping pings and the per-subscription
/// lifecycle messages `subscribed` and `stopped`, which tests/subscriptions.rs
/// reads with [`ws_next_any`]), or the close frame's code.
pub(crate) async fn ws_next(ws: &mut Ws) -> Result<serde_json::Value, Option<u16>> {
    loop {
        let m = ws_next_any(ws).await?;
        if m["type"] != "subscribed" && m["type"] != "stopped" {
            return Ok(m);
        }
    }
}

/// The next JSON text message (skipping pings), or the close frame's code.
pub(crate) async fn ws_next_any(ws: &mut Ws) -> Result<serde_json::Value, Option<u16>> {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("a message within the deadline");
        match message {
            Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Close(frame))) => return Err(frame.map(|f| u16::from(f.code))),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Err(None),
        }
    }
}

/// Messages up to and including `synced`.
pub(crate) async fn ws_until_synced(ws: &mut Ws) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    loop {
        let m = ws_next(ws).await.expect("messages until synced");
        let done = m["type"] == "synced";
        out.push(m);
        if done {
            return out;
        }
    }
}

/// A gateway over `hub` served on its own runtime in its own thread, which
/// (like the binary's `main`) ends as soon as `serve` returns: whatever a
/// session has not sent by then is lost. Returns the base URL, the
/// shutdown token and the thread.
pub(crate) fn gateway_on_own_runtime(
    hub: std::sync::Arc<kube_pulse::hub::Hub>,
    config: kube_pulse::transports::TransportConfig,
) -> (
    String,
    tokio_util::sync::CancellationToken,
    std::thread::JoinHandle<()>,
) {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let token = shutdown.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let health = kube_pulse::health::Health {
                livez: vec![std::sync::Arc::new(kube_pulse::health::checks::Ping)],
                readyz: vec![std::sync::Arc::new(kube_pulse::health::checks::Ping)],
                format: Default::default(),
                timeout: Duration::from_secs(1),
            };
            let state =
                kube_pulse::http::router::GatewayState::new(hub, config, health, token.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(format!("http://{}", listener.local_addr().unwrap()))
                .unwrap();
            let app = kube_pulse::http::router::app(state);
            kube_pulse::http::server::serve(listener, app, None, token)
                .await
                .unwrap();
        });
        // The runtime is dropped here, with every task still on it.
    });
    let url = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the gateway listens");
    (url, shutdown, thread)
}

/// A WebSocket client whose socket has a receive buffer of about
/// `recv_buffer` bytes (set before connecting, so the window stays small).
pub(crate) async fn ws_connect_small(url: &str, recv_buffer: u32) -> Ws {
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(recv_buffer).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let ws_url = format!("{}/api/v1/ws", url.replace("http://", "ws://"));
    tokio_tungstenite::client_async(ws_url, tokio_tungstenite::MaybeTlsStream::Plain(stream))
        .await
        .expect("websocket connects")
        .0
}

/// A kubeconfig in `dir` for a (simulated) Karpor apiserver at `server`,
/// as the `karpor-kubeconfig` ConfigMap holds one.
pub(crate) fn karpor_kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("karpor-kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: karpor\n  cluster: {{server: '{server}'}}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: karpor\n  context: {{cluster: karpor, user: u}}\ncurrent-context: karpor\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// `to` relative to `from` (both absolute), for kustomize, which takes
/// only relative paths.
pub(crate) fn relative(from: &std::path::Path, to: &std::path::Path) -> std::path::PathBuf {
    let (from, to) = (from.canonicalize().unwrap(), to.canonicalize().unwrap());
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut path = std::path::PathBuf::new();
    for _ in from.components().skip(common) {
        path.push("..");
    }
    to.components().skip(common).for_each(|c| path.push(c));
    path
}

/// The holder of every member Lease (`kube-pulse.io/member`) in the host
/// cluster's `default` namespace, by member.
pub(crate) async fn lease_holders(
    host: &SimCluster,
) -> std::collections::BTreeMap<String, Option<String>> {
    use k8s_openapi::api::coordination::v1::Lease;
    let api: kube::Api<Lease> = kube::Api::namespaced(host.client(), "default");
    let leases = api.list(&Default::default()).await.unwrap();
    leases
        .items
        .into_iter()
        .filter_map(|l| {
            let member = l.metadata.annotations?.get("kube-pulse.io/member")?.clone();
            Some((member, l.spec?.holder_identity))
        })
        .collect()
}
