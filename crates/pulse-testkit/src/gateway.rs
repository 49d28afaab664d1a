//! The gateway in this process over simulated clusters: the pipeline
//! alone, the whole gateway as `serve` starts it, or the HTTP routes over a
//! hub the test fills by hand; and waits on the hub's documents.

use std::time::{Duration, Instant};

use kube_pulse_sim::SimCluster;

/// Starts sources + engine + hub over the given simulated clusters, with
/// [`quick_pipeline`] settings.
pub async fn pipeline(
    sims: &[&SimCluster],
    registries: Vec<kube_pulse::sources::SyncRegistry>,
    shutdown: &tokio_util::sync::CancellationToken,
) -> std::sync::Arc<kube_pulse::pipeline::Pipeline> {
    kube_pulse::pipeline::Pipeline::start(members(sims), quick_pipeline(registries), shutdown)
        .await
        .expect("pipeline starts")
}

/// The simulated clusters as gateway members.
pub fn members(sims: &[&SimCluster]) -> Vec<kube_pulse::pipeline::Member> {
    sims.iter()
        .map(|s| kube_pulse::pipeline::Member {
            name: s.name().into(),
            config: s.kube_config(),
        })
        .collect()
}

/// Pipeline settings for tests: quick probes (every 200 ms, 500 ms timeout)
/// and thresholds 1 / 3.
pub fn quick_pipeline(
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
pub async fn start_gateway(
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
    // Boxed: the gateway's start makes a large future.
    let gateway = Box::pin(kube_pulse::gateway::Gateway::start(config, shutdown))
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

/// The error `Gateway::start` refuses `config` with, as text (its
/// start is cancelled in case it does start, and the test then fails).
pub async fn start_refused(config: kube_pulse::gateway::GatewayConfig) -> String {
    let token = tokio_util::sync::CancellationToken::new();
    let refused = kube_pulse::gateway::Gateway::start(config, &token)
        .await
        .expect_err("the gateway refuses this configuration")
        .to_string();
    token.cancel();
    refused
}

/// Waits until the hub document of `topic` satisfies `check`, returning it.
pub async fn doc_where(
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
pub fn label(doc: &serde_json::Value) -> String {
    format!(
        "{} ({})",
        doc["phase"].as_str().unwrap_or("?"),
        doc["reason"].as_str().unwrap_or("?")
    )
}

/// Health checks that always pass (`/livez` and `/readyz` ping), 1 s timeout.
pub fn ping_health() -> kube_pulse::health::Health {
    kube_pulse::health::Health {
        livez: vec![std::sync::Arc::new(kube_pulse::health::checks::Ping)],
        readyz: vec![std::sync::Arc::new(kube_pulse::health::checks::Ping)],
        format: Default::default(),
        timeout: Duration::from_secs(1),
    }
}

/// A gateway over `hub` on 127.0.0.1:0; returns its base URL and the shutdown
/// token that stops it (push sessions end with it).
pub async fn gateway(
    hub: std::sync::Arc<kube_pulse::hub::Hub>,
    config: kube_pulse::transports::TransportConfig,
) -> (
    String,
    tokio_util::sync::CancellationToken,
    std::sync::Arc<kube_pulse::http::router::GatewayState>,
    tokio::task::JoinHandle<()>,
) {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let health = ping_health();
    let state = kube_pulse::http::router::GatewayState::new(hub, config, health, shutdown.clone());
    let (url, task) = serve(state.clone(), &shutdown).await;
    (url, shutdown, state, task)
}

/// Serves the gateway of `state` on 127.0.0.1:0 until `shutdown`; returns
/// its base URL and the server task.
pub async fn serve(
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

/// A gateway over `hub` served on its own runtime in its own thread, which
/// (like the binary's `main`) ends as soon as `serve` returns: whatever a
/// session has not sent by then is lost. Returns the base URL, the
/// shutdown token and the thread.
pub fn gateway_on_own_runtime(
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
            let health = ping_health();
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
