//! What a member's endpoint answers reaches no further than a short reason:
//! the real binary (`serve`, its default log filter) over two endpoints that
//! are not apiservers, one answering every request 403 with a secret in the
//! body, one answering `/readyz` with a 1 GiB body. No byte of the secret
//! reaches a document or the log, and the long answer is read no further
//! than the probe's bound, so the gateway's memory stays where it was.
//! A third answers every list, watch and discovery request without end:
//! each is cut at its bound (`sources::bounded`) and the bound is the reason
//! shown.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt as _;
use pulse_testkit::binary::{path, rss_kib, wait_for_url};
use pulse_testkit::http::get_text;
use pulse_testkit::poll::eventually;

const SECRET: &str = "INTERNAL-SECRET-abc123 db_password=hunter2";
/// What the long answer would send if read to its end.
const HUGE: u64 = 1 << 30;
const CHUNK: usize = 64 * 1024;

/// Serves `app` on a loopback port; returns its address.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    format!("http://{addr}")
}

/// Every request: 403 with the secret in a plain-text body.
fn secret_endpoint() -> Router {
    Router::new().fallback(|| async { (StatusCode::FORBIDDEN, SECRET).into_response() })
}

/// `/readyz`: 200 with a body of [`HUGE`] bytes, made as it is read;
/// `sent` counts the bytes handed to the socket, `probes` the requests.
/// Every other request: 404 with the secret.
fn huge_endpoint(sent: Arc<AtomicU64>, probes: Arc<AtomicU64>) -> Router {
    Router::new()
        .route(
            "/readyz",
            axum::routing::get(move || {
                let (sent, probes) = (sent.clone(), probes.clone());
                async move {
                    probes.fetch_add(1, Ordering::SeqCst);
                    let chunks = futures::stream::iter(0..HUGE / CHUNK as u64).map(move |_| {
                        sent.fetch_add(CHUNK as u64, Ordering::SeqCst);
                        Ok::<_, std::convert::Infallible>(Bytes::from(vec![b'x'; CHUNK]))
                    });
                    Response::new(Body::from_stream(chunks))
                }
            }),
        )
        .fallback(|| async { (StatusCode::NOT_FOUND, SECRET).into_response() })
}

/// The binary with `config`, with the default log filter, its log in `log`.
fn start(config: &std::path::Path, log: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(path())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("binary starts");
    let url = wait_for_url(&mut child);
    (child, url)
}

#[tokio::test]
async fn a_members_answer_is_a_short_reason_and_a_long_one_is_not_read() {
    let sent = Arc::new(AtomicU64::new(0));
    let probes = Arc::new(AtomicU64::new(0));
    let secret = serve(secret_endpoint()).await;
    let huge = serve(huge_endpoint(sent.clone(), probes.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "clusters:\n\
             - {{name: secret, server: '{secret}', token: t}}\n\
             - {{name: huge, server: '{huge}', token: t}}\n\
             probe: {{intervalSeconds: 1, timeoutSeconds: 10, failureThreshold: 1}}\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("kube-pulse.log");
    let (mut child, url) = start(&config, &log);
    let cluster = |name: &'static str| {
        let url = url.clone();
        async move {
            let doc: serde_json::Value =
                serde_json::from_str(&get_text(&format!("{url}/api/v1/clusters/{name}")).await)
                    .ok()?;
            (doc["phase"] == "Unhealthy").then_some(doc)
        }
    };
    let within = Duration::from_secs(60);
    let denied = eventually(within, "the 403 member turns Unhealthy", || {
        cluster("secret")
    })
    .await;
    assert_eq!(denied["reason"], "Unauthorized", "{denied}");
    assert_eq!(denied["message"], "HTTP 403 Forbidden", "{denied}");
    let long = eventually(within, "the long member turns Unhealthy", || {
        cluster("huge")
    })
    .await;
    assert_eq!(long["reason"], "ApiServerNotReady", "{long}");
    let message = long["message"].as_str().unwrap();
    assert!(message.contains("/readyz is over 64 KiB"), "{long}");

    // Memory after the first long answers, then after several more.
    eventually(within, "two probes of the long member", || async {
        (probes.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    let before = rss_kib(child.id());
    let counted = probes.load(Ordering::SeqCst);
    eventually(within, "five more probes of the long member", || async {
        (probes.load(Ordering::SeqCst) >= counted + 5).then_some(())
    })
    .await;
    let after = rss_kib(child.id());
    let probes_made = probes.load(Ordering::SeqCst);
    let per_probe = sent.load(Ordering::SeqCst) / probes_made;
    assert!(
        per_probe < 16 << 20,
        "{per_probe} bytes sent per probe: the answer was read on"
    );
    assert!(
        after < before + 8 * 1024,
        "RSS went from {before} to {after} KiB over {} probes of a 1 GiB answer",
        probes_made - counted
    );

    // No byte of the secret anywhere: documents of both members, their sync
    // documents, the history, and the log.
    let mut seen = String::new();
    for path in [
        "/api/v1/clusters",
        "/api/v1/clusters/secret/sync",
        "/api/v1/clusters/huge/sync",
        "/api/v1/history?topic=clusters/secret",
    ] {
        seen.push_str(&get_text(&format!("{url}{path}")).await);
    }
    pulse_testkit::binary::terminate(&mut child);
    seen.push_str(&std::fs::read_to_string(&log).unwrap());
    for word in ["INTERNAL-SECRET", "hunter2", "db_password"] {
        assert!(!seen.contains(word), "{word} was shown:\n{seen}");
    }
}

/// An endpoint that probes well (`/readyz`, `/livez`, `/version`) and answers
/// every other request 200 with a body of [`HUGE`] bytes without a newline:
/// discovery, lists and watches alike. `sent` counts the bytes handed to the
/// socket, `asked` the requests that got the long body.
fn flood_endpoint(sent: Arc<AtomicU64>, asked: Arc<AtomicU64>) -> Router {
    let ok = || async { "ok" };
    Router::new()
        .route("/readyz", axum::routing::get(ok))
        .route("/livez", axum::routing::get(ok))
        .route(
            "/version",
            axum::routing::get(|| async {
                axum::Json(serde_json::json!({
                    "major": "1", "minor": "31", "gitVersion": "v1.31.0",
                    "platform": "linux/amd64",
                }))
            }),
        )
        .fallback(move || {
            let (sent, asked) = (sent.clone(), asked.clone());
            async move {
                asked.fetch_add(1, Ordering::SeqCst);
                let chunks = futures::stream::iter(0..HUGE / CHUNK as u64).map(move |_| {
                    sent.fetch_add(CHUNK as u64, Ordering::SeqCst);
                    Ok::<_, std::convert::Infallible>(Bytes::from(vec![b'x'; CHUNK]))
                });
                Response::builder()
                    .header("content-type", "application/json")
                    .body(Body::from_stream(chunks))
                    .unwrap()
            }
        })
}

#[tokio::test]
async fn lists_watches_and_discovery_are_read_no_further_than_their_bound() {
    let sent = Arc::new(AtomicU64::new(0));
    let asked = Arc::new(AtomicU64::new(0));
    let flood = serve(flood_endpoint(sent.clone(), asked.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        // Paged lists: the list answer's bound is the one to see (streamed,
        // the initial state would be a watch, cut at its event bound).
        format!("clusters:\n- {{name: flood, server: '{flood}', token: t}}\ninitialLists: paged\n"),
    )
    .unwrap();
    let log = dir.path().join("kube-pulse.log");
    let (mut child, url) = start(&config, &log);
    let within = Duration::from_secs(90);
    eventually(within, "three long answers cut", || async {
        (asked.load(Ordering::SeqCst) >= 3).then_some(())
    })
    .await;
    let shown = eventually(within, "the bound named in a document", || async {
        let mut shown = String::new();
        for path in ["/api/v1/clusters/flood", "/api/v1/clusters/flood/sync"] {
            shown.push_str(&get_text(&format!("{url}{path}")).await);
        }
        shown.contains("over 64 MiB").then_some(shown)
    })
    .await;
    let per_answer = sent.load(Ordering::SeqCst) / asked.load(Ordering::SeqCst);
    pulse_testkit::binary::terminate(&mut child);
    // What the server pushed ahead into the socket's buffers comes on top
    // of what the client read.
    assert!(
        per_answer < 80 << 20,
        "{per_answer} bytes sent per answer: read past the bound\n{shown}"
    );
}
