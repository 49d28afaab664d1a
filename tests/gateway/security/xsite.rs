//! Issue 17, items 1, 4 and 8 against the real binary: cross-site and
//! DNS-rebinding writes and framing (the request guard), the demo's and the
//! simulator's control API behind authentication, and health details
//! filtered by the caller's read grants.

use std::time::{Duration, Instant};

use pulse_testkit::binary::{Binary, demo};
use pulse_testkit::http::{get_json, http};
use pulse_testkit::sim::sim_with;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(30);
const READER: &str = "reader-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// A token file: `reader` reads cluster `a` (or `dev`), `admin` holds `*`.
fn tokens_file(dir: &std::path::Path, reader_reads: &str) -> String {
    let path = dir.join("tokens.yaml");
    std::fs::write(
        &path,
        format!(
            "tokens:\n\
             - {{subject: reader, token: {READER}, read: [{reader_reads}]}}\n\
             - {{subject: admin, token: {ADMIN}, read: ['*'], write: ['*']}}\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// Polls `url` (bounded) until it answers 200.
async fn until_ok(url: &str, token: Option<&str>) {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut request = http().get(url);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        if let Ok(r) = request.send().await
            && r.status() == StatusCode::OK
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url} did not answer 200 in {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends `head` (and `body`) on a raw connection and returns the status
/// code of the answer: headers the test must control exactly (Host, Origin,
/// an upgrade) go out as written.
async fn raw_status(url: &str, head: &str, body: &str) -> u16 {
    let addr = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{head}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(WAIT, async {
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("an answer within the deadline");
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"))
}

fn upgrade_head(host: &str, origin: &str) -> String {
    format!(
        "GET /api/v1/ws HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    )
}

const STOP_WEB: &str = r#"{"type":"Stop","cluster":"dev","namespace":"shop","app":"web"}"#;

/// POST /api/v1/tasks with exactly these headers (besides reqwest's own).
async fn post_task(url: &str, headers: &[(&str, &str)], body: &str) -> (StatusCode, Value) {
    let mut request = http()
        .post(format!("{url}/api/v1/tasks"))
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn task_count(url: &str) -> usize {
    let list: Value = get_json(&format!("{url}/api/v1/tasks")).await;
    list["items"].as_array().expect("a task list").len()
}

#[tokio::test]
async fn cross_site_and_rebinding_requests_are_refused_and_legitimate_ones_work() {
    let running = Binary::start(&demo(&[
        "--allow-origin",
        "https://karpor.example.com",
        "--allowed-host",
        "pulse.test",
    ]));
    let url = running.url.clone();
    let port = port_of(&url);
    until_ok(&format!("{url}/api/v1/apps/dev/shop/web"), None).await;
    let own = format!("http://127.0.0.1:{port}");

    // A cross-site form POST (text/plain, evil Origin) creates nothing.
    let form = [
        ("content-type", "text/plain"),
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ];
    let (status, body) = post_task(&url, &form, STOP_WEB).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "forbidden_origin");
    // Without an Origin but with a browser's fetch metadata from another site.
    let metadata_only = [
        ("content-type", "application/json"),
        ("sec-fetch-site", "cross-site"),
    ];
    let (status, body) = post_task(&url, &metadata_only, STOP_WEB).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // A non-JSON body is refused whoever sends it.
    for headers in [
        vec![("content-type", "text/plain")],
        vec![("content-type", "text/plain"), ("origin", own.as_str())],
        vec![("content-type", "application/x-www-form-urlencoded")],
        vec![],
    ] {
        let (status, body) = post_task(&url, &headers, STOP_WEB).await;
        assert_eq!(
            status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{headers:?}: {body}"
        );
        assert_eq!(body["code"], "unsupported_media_type");
    }
    // REST with a foreign Host (what a rebinding page sends) is refused.
    let foreign = format!("evil.example:{port}");
    let status = raw_status(
        &url,
        &format!("GET /api/v1/clusters HTTP/1.1\r\nHost: {foreign}\r\n"),
        "",
    )
    .await;
    assert_eq!(status, 421);
    let refused = http()
        .get(format!("{url}/api/v1/clusters"))
        .header("host", &foreign)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::MISDIRECTED_REQUEST);
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("--allowed-host"),
        "{body}"
    );
    let status = raw_status(
        &url,
        &format!("POST /api/v1/tasks HTTP/1.1\r\nHost: {foreign}\r\nOrigin: http://{foreign}\r\nContent-Type: application/json\r\n"),
        STOP_WEB,
    )
    .await;
    assert_eq!(status, 421, "a rebinding POST");
    // The summary probe answers whatever the Host.
    let status = raw_status(
        &url,
        &format!("GET /livez HTTP/1.1\r\nHost: {foreign}\r\n"),
        "",
    )
    .await;
    assert_eq!(status, 200);
    // The rebinding upgrade gets no 101; a foreign Origin neither.
    let rebinding = upgrade_head(&foreign, &format!("http://{foreign}"));
    assert_eq!(raw_status(&url, &rebinding, "").await, 421);
    let foreign_origin = upgrade_head(&format!("127.0.0.1:{port}"), "http://evil.example");
    assert_eq!(raw_status(&url, &foreign_origin, "").await, 403);
    assert_eq!(task_count(&url).await, 0, "no refused request made a task");

    // The legitimate ways still work.
    let same_origin = upgrade_head(&format!("127.0.0.1:{port}"), &own);
    assert_eq!(raw_status(&url, &same_origin, "").await, 101);
    let named = upgrade_head(
        &format!("pulse.test:{port}"),
        &format!("http://pulse.test:{port}"),
    );
    assert_eq!(raw_status(&url, &named, "").await, 101, "--allowed-host");
    let json = ("content-type", "application/json");
    let ways: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "same-origin browser",
            vec![json, ("origin", &own), ("sec-fetch-site", "same-origin")],
        ),
        ("curl, no Origin", vec![json]),
        (
            "--allow-origin",
            vec![
                ("content-type", "application/json; charset=utf-8"),
                ("origin", "https://karpor.example.com"),
                ("sec-fetch-site", "cross-site"),
            ],
        ),
        (
            "loopback dev server",
            vec![json, ("origin", "http://localhost:5173")],
        ),
    ];
    for (i, (what, headers)) in ways.iter().enumerate() {
        let app = ["web", "cart", "db", "ingest"][i];
        let namespace = if app == "ingest" { "analytics" } else { "shop" };
        let task = json!({"type": "Stop", "cluster": "dev", "namespace": namespace, "app": app})
            .to_string();
        let (status, body) = post_task(&url, headers, &task).await;
        assert_eq!(status, StatusCode::CREATED, "{what}: {body}");
    }
    let status = raw_status(
        &url,
        &format!("GET /api/v1/clusters HTTP/1.1\r\nHost: pulse.test:{port}\r\n"),
        "",
    )
    .await;
    assert_eq!(status, 200, "--allowed-host name");
    assert_eq!(task_count(&url).await, 4);

    // Framing: the page (and every other answer) may only be framed by its own origin.
    for path in ["/", "/api/v1/clusters", "/nope"] {
        let response = http().get(format!("{url}{path}")).send().await.unwrap();
        let headers = response.headers();
        assert_eq!(headers["x-frame-options"], "SAMEORIGIN", "{path}");
        assert_eq!(
            headers["content-security-policy"], "frame-ancestors 'self'",
            "{path}"
        );
    }
}

#[tokio::test]
async fn the_simulator_control_api_needs_the_admin_grant() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens_file(dir.path(), "dev");
    let running = Binary::start(&demo(&["--auth", "tokens", "--tokens-file", &tokens]));
    let url = running.url.clone();
    let faults = format!("{url}/_sim/clusters/dev/faults");
    let put = |token: Option<&'static str>, content_type: &'static str| {
        let mut request = http()
            .put(&faults)
            .header("content-type", content_type)
            .body(r#"{"notReady": false}"#);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        request.send()
    };
    let none = put(None, "application/json").await.unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    let reader = put(Some(READER), "application/json").await.unwrap();
    assert_eq!(reader.status(), StatusCode::FORBIDDEN);
    let body: Value = reader.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("admin"),
        "{body}"
    );
    let plain = put(Some(ADMIN), "text/plain").await.unwrap();
    assert_eq!(plain.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let admin = put(Some(ADMIN), "application/json").await.unwrap();
    assert_eq!(admin.status(), StatusCode::OK);
    // The list too.
    let list = http()
        .get(format!("{url}/_sim/clusters"))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), StatusCode::UNAUTHORIZED);
    let list = http()
        .get(format!("{url}/_sim/clusters"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), StatusCode::OK);

    // `sim --token`: its control API needs the token as its Kubernetes API does.
    let sim = Binary::start(&["sim", "--listen", "127.0.0.1:0", "--token", "t0k-t0k"]);
    let sim_url = sim.url.clone();
    for (method, path) in [
        (reqwest::Method::GET, "/_sim/faults"),
        (reqwest::Method::PUT, "/_sim/faults"),
        (reqwest::Method::DELETE, "/_sim/faults"),
        (reqwest::Method::GET, "/_sim/stats"),
    ] {
        let denied = http()
            .request(method.clone(), format!("{sim_url}{path}"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(denied.status(), StatusCode::UNAUTHORIZED, "{method} {path}");
        let wrong = http()
            .request(method.clone(), format!("{sim_url}{path}"))
            .bearer_auth("nope")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "{method} {path}");
    }
    let allowed = http()
        .put(format!("{sim_url}/_sim/faults"))
        .bearer_auth("t0k-t0k")
        .body(r#"{"notReady": true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status(), StatusCode::OK);
}

#[tokio::test]
async fn health_details_name_only_clusters_the_caller_may_see() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens_file(dir.path(), "a");
    // Member `a` answers; member `b` accepts connections and never answers,
    // so it stays Initializing and fails the Syncer check for a minute.
    let a = sim_with(|c| c.name = "a".into()).await;
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "clusters:\n\
             - {{name: a, server: '{}'}}\n\
             - {{name: b, server: 'http://{}'}}\n\
             probe: {{intervalSeconds: 1, timeoutSeconds: 60}}\n",
            a.url(),
            silent.local_addr().unwrap()
        ),
    )
    .unwrap();
    let gateway = Binary::start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
        "--auth",
        "tokens",
        "--tokens-file",
        &tokens,
    ]);
    let url = gateway.url.clone();
    let details = |token: &'static str| {
        let url = url.clone();
        async move {
            let response = http()
                .get(format!("{url}/readyz/Syncer"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            (response.status(), response.text().await.unwrap())
        }
    };
    // `a` has answered: only `b` is left in the admin's reason.
    let deadline = Instant::now() + WAIT;
    let admin = loop {
        let (status, body) = details(ADMIN).await;
        if body.contains("cluster b") && !body.contains("cluster a") {
            break (status, body);
        }
        assert!(Instant::now() < deadline, "admin never saw only b: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(admin.0, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        admin.1,
        "internal server error: cluster b has not answered yet\n"
    );
    // The reader of `a` learns that the check fails, not about `b`.
    let (status, body) = details(READER).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body, "internal server error: reason withheld\n");
    // Still 401 without a token.
    let anonymous = http()
        .get(format!("{url}/readyz/Syncer"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    drop(silent);
    a.shutdown().await;
}
