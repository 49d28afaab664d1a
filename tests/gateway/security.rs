//! Security end to end: authentication in every mode, per-topic filtering on
//! REST, SSE, WebSocket and resume replay, task write grants, session
//! expiry, origin checks, per-client limits, a reconnect storm, and TLS with
//! a certificate made in the test.

mod abuse;
mod conn;
mod edges;
mod xsite;

use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use kube_pulse::auth::{self, Auth, Mode};
use kube_pulse::gateway;
use kube_pulse::http::router::GatewayState;
use kube_pulse::pipeline::Pipeline;
use kube_pulse::tasks::{TaskSettings, Tasks};
use kube_pulse::transports::TransportConfig;
use kube_pulse_sim::SimCluster;
use kube_pulse_sim::reviews::{AccessRule, ReviewPolicy, ReviewUser};
use pulse_testkit::gateway::{doc_where, pipeline, serve};
use pulse_testkit::http::http;
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{deployment, sim_with};
use pulse_testkit::sse::SseReader;
use pulse_testkit::ws::{Ws, ws_next, ws_send, ws_until_synced};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";
const ROOT: &str = "root-token-0123456789";

/// Members `a` and `b` (shop/web, analytics/ingest each), a pipeline and tasks.
struct Members {
    a: SimCluster,
    b: SimCluster,
    pipeline: Arc<Pipeline>,
    tasks: Arc<Tasks>,
    shutdown: CancellationToken,
}

impl Members {
    async fn start() -> Self {
        let shutdown = CancellationToken::new();
        let member = |name: &'static str| {
            sim_with(move |c| {
                c.name = name.into();
                c.workloads = vec![
                    deployment("shop", "web", 1),
                    deployment("analytics", "ingest", 1),
                ];
            })
        };
        let (a, b) = (member("a").await, member("b").await);
        let pipeline = pipeline(&[&a, &b], vec![], &shutdown).await;
        for topic in [
            "apps/a/shop/web",
            "apps/b/shop/web",
            "apps/b/analytics/ingest",
        ] {
            doc_where(pipeline.hub(), topic, WAIT, |d| d["phase"] == "Running").await;
        }
        let tasks = Tasks::for_pipeline(&pipeline, TaskSettings::default(), &shutdown);
        Self {
            a,
            b,
            pipeline,
            tasks,
            shutdown,
        }
    }

    /// A gateway over the members with `auth`, on 127.0.0.1:0.
    async fn gateway(&self, auth: Arc<Auth>, config: TransportConfig) -> String {
        let health =
            gateway::health_for(&self.pipeline, Some(self.tasks.clone()), Default::default());
        let state = GatewayState::for_pipeline(
            &self.pipeline,
            self.tasks.clone(),
            auth,
            config,
            health,
            self.shutdown.clone(),
        );
        serve(state, &self.shutdown).await.0
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.tasks.stop().await;
        self.pipeline.stop().await;
        self.a.shutdown().await;
        self.b.shutdown().await;
    }
}

fn token_auth() -> Arc<Auth> {
    let file = auth::tokens::TokenFile::parse(&format!(
        "tokens:\n\
         - {{subject: alice, token: {ALICE}, read: [a], write: [a/shop]}}\n\
         - {{subject: bob, token: {BOB}, read: [b/shop]}}\n\
         - {{subject: root, token: {ROOT}, read: ['*'], write: ['*']}}\n"
    ))
    .unwrap();
    Auth::new(Mode::Tokens(file))
}

async fn get(url: &str, token: Option<&str>) -> (StatusCode, Value) {
    let mut request = http().get(url);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn post(url: &str, token: &str, body: Value) -> (StatusCode, Value) {
    let response = http()
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// An SSE stream read raw, so the test can look at every byte.
async fn sse_raw(url: &str, token: &str, last_event_id: Option<&str>) -> reqwest::Response {
    let mut request = http().get(url).bearer_auth(token);
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response
}

/// Reads a raw stream until `until` appears in it (or the deadline).
async fn read_until(response: &mut reqwest::Response, until: &str) -> String {
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !text.contains(until) {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {until:?} in {text}"))
            .unwrap()
            .expect("the stream goes on");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text
}

fn mentions_b(text: &str) -> bool {
    text.contains("clusters/b") || text.contains("apps/b/") || text.contains("\"cluster\":\"b\"")
}

async fn ws_connect(url: &str, protocols: Option<&str>) -> Result<Ws, u16> {
    let mut request = format!("{}/api/v1/ws", url.replace("http://", "ws://"))
        .into_client_request()
        .unwrap();
    if let Some(p) = protocols {
        request
            .headers_mut()
            .insert("sec-websocket-protocol", p.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(e) => panic!("websocket: {e}"),
    }
}

fn bearer_protocol(token: &str) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token);
    format!("kube-pulse, {}{encoded}", auth::WS_TOKEN_PROTOCOL)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_token_sees_only_its_grants_everywhere() {
    let m = Members::start().await;
    let url = m.gateway(token_auth(), TransportConfig::default()).await;

    // No token, or a wrong one: 401 everywhere data lives; health stays open.
    for path in [
        "/api/v1/clusters",
        "/api/v1/apps",
        "/api/v1/events?topic=**",
        "/api/v1/tasks",
        "/metrics",
    ] {
        let (status, body) = get(&format!("{url}{path}"), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        // The WebSocket's codes: no credential, then one not accepted.
        assert_eq!(body["code"], "unauthenticated", "{path}");
        let (status, body) = get(&format!("{url}{path}"), Some("wrong-token-0123456789")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(body["code"], "unauthorized", "{path}");
    }
    assert_eq!(get(&format!("{url}/readyz"), None).await.0, StatusCode::OK);
    assert_eq!(
        ws_connect(&url, Some(&bearer_protocol("wrong-token-0123456789")))
            .await
            .err(),
        Some(401)
    );

    // REST: lists, reads and history hold a's documents only.
    let (_, clusters) = get(&format!("{url}/api/v1/clusters"), Some(ALICE)).await;
    let names: Vec<&str> = clusters["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a"]);
    let (_, apps) = get(&format!("{url}/api/v1/apps"), Some(ALICE)).await;
    assert!(
        apps["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["cluster"] == "a"),
        "{apps}"
    );
    assert_eq!(apps["items"].as_array().unwrap().len(), 2);
    for path in [
        "/api/v1/clusters/b",
        "/api/v1/clusters/b/sync",
        "/api/v1/apps/b/shop/web",
        "/api/v1/history?topic=clusters/b",
        "/api/v1/apps?cluster=b",
    ] {
        let (status, body) = get(&format!("{url}{path}"), Some(ALICE)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert!(!body.to_string().contains("Running"), "{path}: {body}");
    }
    assert_eq!(
        get(&format!("{url}/metrics"), Some(ALICE)).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        get(&format!("{url}/metrics"), Some(ROOT)).await.0,
        StatusCode::OK
    );
    // bob holds b/shop: the cluster document, that namespace's apps, no sync documents.
    let (_, apps) = get(&format!("{url}/api/v1/apps"), Some(BOB)).await;
    let topics: Vec<String> = apps["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{}/{}/{}", a["cluster"], a["namespace"], a["app"]).replace('"', ""))
        .collect();
    assert_eq!(topics, ["b/shop/web"]);
    assert_eq!(
        get(&format!("{url}/api/v1/clusters/b"), Some(BOB)).await.0,
        StatusCode::OK
    );
    let (_, sync) = get(&format!("{url}/api/v1/clusters/b/sync"), Some(BOB)).await;
    assert_eq!(sync["items"], json!([]));

    // SSE on `**` and `*` patterns: snapshots and live changes of a only.
    let mut sse = sse_raw(
        &format!("{url}/api/v1/events?topic=**&topic=clusters/*"),
        ALICE,
        None,
    )
    .await;
    let initial = read_until(&mut sse, "event: synced").await;
    assert!(initial.contains("apps/a/shop/web"), "{initial}");
    assert!(!mentions_b(&initial), "{initial}");
    let cursor = initial
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("id: "))
        .unwrap()
        .to_string();
    // WebSocket with the token in the subprotocol, same view.
    let mut ws = ws_connect(&url, Some(&bearer_protocol(ALICE)))
        .await
        .unwrap();
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s", "topics": ["**"]}),
    )
    .await;
    let snapshot = ws_until_synced(&mut ws).await;
    assert!(
        !mentions_b(&serde_json::to_string(&snapshot).unwrap()),
        "{snapshot:?}"
    );
    assert!(snapshot.iter().any(|m| m["topic"] == "apps/a/shop/web"));

    // Changes on both clusters: b's first, so a's arrive after them.
    scale(&m.b, 3);
    doc_where(m.pipeline.hub(), "apps/b/shop/web", WAIT, |d| {
        d["expected"] == 3
    })
    .await;
    scale(&m.a, 2);
    let live = read_until(&mut sse, "\"expected\":2").await;
    assert!(!mentions_b(&live), "{live}");
    let mut seen_ws = String::new();
    while !seen_ws.contains("\"expected\":2") {
        seen_ws.push_str(&ws_next(&mut ws).await.unwrap().to_string());
    }
    assert!(!mentions_b(&seen_ws), "{seen_ws}");

    // Resume from before the changes: the replay skips b as well.
    let mut resumed = sse_raw(
        &format!("{url}/api/v1/events?topic=**"),
        ALICE,
        Some(&cursor),
    )
    .await;
    let replay = read_until(&mut resumed, "event: synced").await;
    assert!(replay.contains("\"resumed\":true"), "{replay}");
    assert!(replay.contains("\"expected\":2"), "{replay}");
    assert!(!mentions_b(&replay), "{replay}");

    // Tasks: the write grant decides; others' tasks are invisible.
    let task = |cluster: &str, namespace: &str, app: &str| json!({"type": "Stop", "cluster": cluster, "namespace": namespace, "app": app, "executor": "external"});
    let (status, denied) = post(
        &format!("{url}/api/v1/tasks"),
        ALICE,
        task("b", "shop", "web"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{denied}");
    assert_eq!(denied["message"], "alice may not act on apps in b/shop");
    let (status, _) = post(
        &format!("{url}/api/v1/tasks"),
        ALICE,
        task("a", "analytics", "ingest"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, created) = post(
        &format!("{url}/api/v1/tasks"),
        ALICE,
        task("a", "shop", "web"),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap();
    let (status, _) = post(
        &format!("{url}/api/v1/tasks"),
        BOB,
        task("b", "shop", "web"),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "bob reads b/shop but may not act"
    );
    let (_, bobs) = get(&format!("{url}/api/v1/tasks"), Some(BOB)).await;
    assert_eq!(bobs["items"], json!([]));
    assert_eq!(
        get(&format!("{url}/api/v1/tasks/{id}"), Some(BOB)).await.0,
        StatusCode::NOT_FOUND
    );
    let report = http()
        .patch(format!("{url}/api/v1/tasks/{id}/status"))
        .bearer_auth(BOB)
        .json(&json!({"status": "Running"}))
        .send()
        .await
        .unwrap();
    assert_eq!(report.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        get(&format!("{url}/api/v1/tasks/{id}"), Some(ALICE))
            .await
            .0,
        StatusCode::OK
    );
    // bob's SSE on tasks and apps never shows alice's task on cluster a.
    let mut bob_sse = SseReader::open_with_token(
        &format!("{url}/api/v1/events?topic=tasks/*&topic=apps/**"),
        BOB,
    )
    .await;
    let events = bob_sse.until_synced().await;
    assert!(
        events.iter().all(|e| !e.data.to_string().contains(id)),
        "{events:?}"
    );
    m.stop().await;
}

/// Sets shop/web's replicas on a simulated member.
fn scale(sim: &SimCluster, replicas: i64) {
    let def = sim
        .store()
        .catalog()
        .find("apps", "v1", "deployments")
        .unwrap()
        .clone();
    sim.store()
        .mutate(
            &def,
            Some("shop"),
            "web",
            kube_pulse_sim::object::UpdateScope::Main,
            false,
            |current| {
                let mut next = current.clone();
                next["spec"]["replicas"] = json!(replicas);
                Ok(next)
            },
        )
        .unwrap();
}

#[tokio::test]
async fn a_socket_without_a_token_must_authenticate_first() {
    let m = Members::start().await;
    let url = m.gateway(token_auth(), TransportConfig::default()).await;
    let mut ws = ws_connect(&url, None).await.unwrap();
    // A ping's answer carries the hub's cursor: not before authenticating.
    ws_send(&mut ws, json!({"op": "ping", "id": "p0"})).await;
    let refused = ws_next(&mut ws).await.unwrap();
    assert_eq!(
        (refused["code"].as_str(), refused["id"].as_str()),
        (Some("unauthenticated"), Some("p0")),
        "{refused}"
    );
    assert!(refused.get("cursor").is_none(), "{refused}");
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s", "topics": ["clusters/*"]}),
    )
    .await;
    let refused = ws_next(&mut ws).await.unwrap();
    assert_eq!(refused["code"], "unauthenticated");
    ws_send(
        &mut ws,
        json!({"op": "auth", "token": "nope-0123456789abcdef", "id": "x"}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await.unwrap()["code"], "unauthorized");
    ws_send(&mut ws, json!({"op": "auth", "token": ALICE, "id": "a1"})).await;
    let ok = ws_next(&mut ws).await.unwrap();
    assert_eq!(
        (ok["type"].as_str(), ok["subject"].as_str()),
        (Some("authenticated"), Some("alice"))
    );
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s", "topics": ["clusters/*"]}),
    )
    .await;
    let snapshot = ws_until_synced(&mut ws).await;
    assert_eq!(snapshot.len(), 2, "clusters/a and synced: {snapshot:?}");
    // Another subject's token on the same socket: grants change, the socket closes.
    ws_send(&mut ws, json!({"op": "auth", "token": BOB})).await;
    assert_eq!(ws_next(&mut ws).await, Err(Some(4003)));
    // A socket that never authenticates is closed after 10 s.
    let mut idle = ws_connect(&url, None).await.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(ws_next(&mut idle).await, Err(Some(4001)));
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    // A browser from a foreign origin is refused before any of that.
    let mut request = format!("{}/api/v1/ws", url.replace("http://", "ws://"))
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("origin", "https://evil.example".parse().unwrap());
    request.headers_mut().insert(
        "sec-websocket-protocol",
        bearer_protocol(ALICE).parse().unwrap(),
    );
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status().as_u16(), 403),
        other => panic!("foreign origin accepted: {:?}", other.map(|_| ())),
    }
    m.stop().await;
}

fn jwt_for(key: &EncodingKey, alg: Algorithm, claims: Value) -> String {
    jsonwebtoken::encode(&Header::new(alg), &claims, key).unwrap()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A token past `exp` but inside the leeway still verifies; its session must
/// last until the leeway ends, or a live session re-checks it in a busy
/// loop until then.
#[test]
fn a_jwt_session_lasts_until_the_leeway_ends() {
    let dir = tempfile::tempdir().unwrap();
    let secret = b"a-very-long-shared-secret-of-32-bytes-or-more";
    let secret_path = dir.path().join("hs256");
    std::fs::write(&secret_path, secret).unwrap();
    let verifier = auth::jwt::JwtVerifier::new(&auth::jwt::JwtSettings {
        hs256_secret: Some(secret_path),
        public_keys: vec![],
        jwks: None,
        issuer: None,
        audience: None,
        leeway: 30,
    })
    .unwrap();
    let exp = now() - 5;
    let token = jwt_for(
        &EncodingKey::from_secret(secret).unwrap(),
        Algorithm::HS256,
        json!({"sub": "dave", "exp": exp, "pulse": {"read": ["a"]}}),
    );
    let p = verifier.verify(&token).expect("inside the leeway");
    let until = p.expires.expect("a JWT session expires").timestamp();
    assert_eq!(until, exp + 30);
    assert!(until > now(), "the next re-check is in the future");
}

#[test]
fn jwt_tokens_are_verified_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let secret = b"a-very-long-shared-secret-of-32-bytes-or-more";
    let secret_path = dir.path().join("hs256");
    std::fs::write(&secret_path, secret).unwrap();
    let rsa_pub = std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/jwt-rsa-test-key.pub.pem"
    ));
    let rsa_priv = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/jwt-rsa-test-key.pem"
    ))
    .unwrap();
    let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let ec_pub = dir.path().join("ec.pub.pem");
    std::fs::write(&ec_pub, ec.public_key_pem()).unwrap();
    let verifier = auth::jwt::JwtVerifier::new(&auth::jwt::JwtSettings {
        hs256_secret: Some(secret_path),
        public_keys: vec![rsa_pub.clone(), ec_pub],
        jwks: None,
        issuer: Some("https://issuer.example".into()),
        audience: Some("kube-pulse".into()),
        leeway: 0,
    })
    .unwrap();
    let good = |extra: Value| {
        let mut claims = json!({"sub": "carol", "exp": now() + 600, "iss": "https://issuer.example", "aud": "kube-pulse", "pulse": {"read": ["a"], "write": ["a/shop"]}});
        json_patch::merge(&mut claims, &extra);
        claims
    };
    let hs = EncodingKey::from_secret(secret).unwrap();
    let rs = EncodingKey::from_rsa_pem(&rsa_priv).unwrap();
    let es = EncodingKey::from_ec_pem(ec.serialize_pem().as_bytes()).unwrap();
    for (name, token) in [
        ("HS256", jwt_for(&hs, Algorithm::HS256, good(json!({})))),
        ("RS256", jwt_for(&rs, Algorithm::RS256, good(json!({})))),
        ("ES256", jwt_for(&es, Algorithm::ES256, good(json!({})))),
    ] {
        let p = verifier
            .verify(&token)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.subject, "carol");
        assert!(p.read.allows("a", None) && !p.read.allows("b", None));
        assert!(p.write.allows("a", Some("shop")));
    }
    let other_secret = EncodingKey::from_secret(b"another-secret-that-is-32-bytes-long!!").unwrap();
    // One signature character changed, away from the end: the last
    // base64url character of a 32-byte MAC carries padding bits, so changing
    // it may not change the signature at all.
    let mut tampered = jwt_for(&hs, Algorithm::HS256, good(json!({})));
    let at = tampered.len() - 10;
    let replacement = if &tampered[at..=at] == "A" { "B" } else { "A" };
    tampered.replace_range(at..=at, replacement);
    // alg none: header {"alg":"none"}, no signature.
    use base64::Engine;
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&good(json!({})))
    );
    // Key confusion: HS256 "signed" with the RSA public key as the secret.
    let confused = jwt_for(
        &EncodingKey::from_secret(&std::fs::read(&rsa_pub).unwrap()).unwrap(),
        Algorithm::HS256,
        good(json!({})),
    );
    let bad: Vec<(&str, String)> = vec![
        (
            "bad signature",
            jwt_for(&other_secret, Algorithm::HS256, good(json!({}))),
        ),
        ("tampered", tampered),
        (
            "expired",
            jwt_for(&hs, Algorithm::HS256, good(json!({"exp": now() - 10}))),
        ),
        (
            "not yet valid",
            jwt_for(&hs, Algorithm::HS256, good(json!({"nbf": now() + 600}))),
        ),
        (
            "wrong audience",
            jwt_for(&hs, Algorithm::HS256, good(json!({"aud": "someone-else"}))),
        ),
        (
            "wrong issuer",
            jwt_for(
                &hs,
                Algorithm::HS256,
                good(json!({"iss": "https://evil.example"})),
            ),
        ),
        (
            "no exp",
            jwt_for(&hs, Algorithm::HS256, good(json!({"exp": null}))),
        ),
        ("alg none", none),
        ("key confusion", confused),
        (
            "HS384",
            jwt_for(
                &EncodingKey::from_secret(secret).unwrap(),
                Algorithm::HS384,
                good(json!({})),
            ),
        ),
        (
            "bad scope",
            jwt_for(
                &hs,
                Algorithm::HS256,
                good(json!({"pulse": {"read": ["a/b/c"]}})),
            ),
        ),
        ("garbage", "not.a.jwt".into()),
    ];
    for (name, token) in bad {
        assert!(verifier.verify(&token).is_err(), "{name} was accepted");
    }
}

#[test]
fn jwks_keys_are_chosen_by_kid_and_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let es = EncodingKey::from_ec_pem(ec.serialize_pem().as_bytes()).unwrap();
    let rsa_priv = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/jwt-rsa-test-key.pem"
    ))
    .unwrap();
    let rs = EncodingKey::from_rsa_pem(&rsa_priv).unwrap();
    let mut ec_jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&es, Algorithm::ES256).unwrap();
    ec_jwk.common.key_id = Some("ec-1".into());
    let mut rsa_jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&rs, Algorithm::RS256).unwrap();
    rsa_jwk.common.key_id = Some("rsa-1".into());
    let jwks = dir.path().join("jwks.json");
    std::fs::write(
        &jwks,
        serde_json::to_vec(&json!({"keys": [ec_jwk, rsa_jwk]})).unwrap(),
    )
    .unwrap();
    let verifier = auth::jwt::JwtVerifier::new(&auth::jwt::JwtSettings {
        jwks: Some(jwks),
        ..Default::default()
    })
    .unwrap();
    let claims = json!({"sub": "frank", "exp": now() + 600, "pulse": {"read": ["a"]}});
    let with_kid = |alg, kid: &str, key: &EncodingKey| {
        let mut header = Header::new(alg);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, &claims, key).unwrap()
    };
    assert_eq!(
        verifier
            .verify(&with_kid(Algorithm::ES256, "ec-1", &es))
            .unwrap()
            .subject,
        "frank"
    );
    assert_eq!(
        verifier
            .verify(&with_kid(Algorithm::RS256, "rsa-1", &rs))
            .unwrap()
            .subject,
        "frank"
    );
    assert!(
        verifier
            .verify(&with_kid(Algorithm::ES256, "rsa-1", &es))
            .is_err(),
        "kid of another key"
    );
    assert!(
        verifier
            .verify(&jwt_for(&es, Algorithm::ES256, claims.clone()))
            .is_ok(),
        "no kid: any ES256 key"
    );
    let hs = EncodingKey::from_secret(b"a-very-long-shared-secret-of-32-bytes-or-more").unwrap();
    assert!(
        verifier
            .verify(&jwt_for(&hs, Algorithm::HS256, claims))
            .is_err(),
        "no HS256 key configured"
    );
}

#[tokio::test]
async fn the_query_token_is_opt_in() {
    let m = Members::start().await;
    let url_off = m.gateway(token_auth(), TransportConfig::default()).await;
    let file = auth::tokens::TokenFile::parse(&format!(
        "tokens: [{{subject: alice, token: {ALICE}, read: [a]}}]"
    ))
    .unwrap();
    let url_on = m
        .gateway(
            Auth::with_query_token(Mode::Tokens(file), true),
            TransportConfig::default(),
        )
        .await;
    let with_query = |url: &str| {
        format!(
            "{}/api/v1/ws?access_token={ALICE}",
            url.replace("http://", "ws://")
        )
    };
    // Off: the query is ignored, so the socket must still authenticate.
    let (mut ws, _) = tokio_tungstenite::connect_async(with_query(&url_off))
        .await
        .unwrap();
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s", "topics": ["clusters/*"]}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await.unwrap()["code"], "unauthenticated");
    let (mut ws, _) = tokio_tungstenite::connect_async(with_query(&url_on))
        .await
        .unwrap();
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s", "topics": ["clusters/*"]}),
    )
    .await;
    assert_eq!(ws_until_synced(&mut ws).await.len(), 2);
    m.stop().await;
}

#[tokio::test]
async fn expiring_tokens_end_live_sessions() {
    let m = Members::start().await;
    let dir = tempfile::tempdir().unwrap();
    let secret = b"a-very-long-shared-secret-of-32-bytes-or-more";
    let path = dir.path().join("hs256");
    std::fs::write(&path, secret).unwrap();
    let verifier = auth::jwt::JwtVerifier::new(&auth::jwt::JwtSettings {
        hs256_secret: Some(path),
        ..Default::default()
    })
    .unwrap();
    let url = m
        .gateway(Auth::new(Mode::Jwt(verifier)), TransportConfig::default())
        .await;
    let key = EncodingKey::from_secret(secret).unwrap();
    let short = jwt_for(
        &key,
        Algorithm::HS256,
        json!({"sub": "dave", "exp": now() + 2, "pulse": {"read": ["*"]}}),
    );
    let mut ws = ws_connect(&url, Some(&bearer_protocol(&short)))
        .await
        .unwrap();
    ws_send(
        &mut ws,
        json!({"op": "subscribe", "id": "s", "topics": ["clusters/*"]}),
    )
    .await;
    ws_until_synced(&mut ws).await;
    let mut sse = sse_raw(
        &format!("{url}/api/v1/events?topic=clusters/*"),
        &short,
        None,
    )
    .await;
    read_until(&mut sse, "event: synced").await;
    let mut code = None;
    while code.is_none() {
        code = ws_next(&mut ws).await.err();
    }
    assert_eq!(code, Some(Some(4001)));
    let ended = read_until(&mut sse, "token_expired").await;
    assert!(ended.contains("event: error"), "{ended}");
    assert!(
        sse.chunk().await.unwrap().is_none(),
        "the stream ends after the error"
    );
    // The expired token opens nothing new.
    let (status, body) = get(&format!("{url}/api/v1/clusters"), Some(&short)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("xpired"),
        "{body}"
    );
    // A renewed token keeps a socket open past the first expiry.
    let first = jwt_for(
        &key,
        Algorithm::HS256,
        json!({"sub": "dave", "exp": now() + 2, "pulse": {"read": ["*"]}}),
    );
    let mut ws = ws_connect(&url, Some(&bearer_protocol(&first)))
        .await
        .unwrap();
    let renewed = jwt_for(
        &key,
        Algorithm::HS256,
        json!({"sub": "dave", "exp": now() + 600, "pulse": {"read": ["*"]}}),
    );
    ws_send(&mut ws, json!({"op": "auth", "token": renewed, "id": "r"})).await;
    assert_eq!(ws_next(&mut ws).await.unwrap()["type"], "authenticated");
    tokio::time::sleep(Duration::from_secs(3)).await;
    ws_send(&mut ws, json!({"op": "ping", "id": "p"})).await;
    assert_eq!(ws_next(&mut ws).await.unwrap()["type"], "heartbeat");
    m.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_mode_follows_rbac_on_the_host_cluster() {
    let m = Members::start().await;
    // The host cluster answers the reviews (here: a third simulated cluster).
    let host = sim_with(|c| c.name = "host".into()).await;
    let rule = |verb: &str, resource: &str, namespaces: &[&str], names: &[&str]| AccessRule {
        subjects: vec!["group:team-a".into()],
        verbs: vec![verb.into()],
        api_groups: vec![kube_pulse::auth::kubernetes::GROUP.into()],
        resources: vec![resource.into()],
        namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
        resource_names: names.iter().map(|s| s.to_string()).collect(),
        non_resource_urls: vec![],
    };
    host.set_review_policy(ReviewPolicy {
        users: vec![
            ReviewUser {
                token: "sa-token-erin".into(),
                username: "system:serviceaccount:team-a:erin".into(),
                groups: vec!["team-a".into()],
            },
            ReviewUser {
                token: "sa-token-prometheus".into(),
                username: "system:serviceaccount:monitoring:prometheus".into(),
                groups: vec!["system:serviceaccounts".into()],
            },
        ],
        rules: vec![
            rule("get", "clusters", &[], &["a"]),
            rule("get", "apps", &["shop"], &["b"]),
            rule("create", "tasks", &["shop"], &["a"]),
            // What a Prometheus service account is given for metrics.
            AccessRule {
                subjects: vec!["system:serviceaccount:monitoring:prometheus".into()],
                verbs: vec!["get".into()],
                non_resource_urls: vec!["/metrics".into()],
                ..AccessRule::default()
            },
        ],
    });
    let client = kube::Client::try_from(host.kube_config()).unwrap();
    let kube = auth::kubernetes::KubeAuth::new(
        client,
        m.pipeline.hub().clone(),
        vec![],
        Duration::from_secs(60),
    );
    let url = m
        .gateway(
            Auth::new(Mode::Kubernetes(kube)),
            TransportConfig::default(),
        )
        .await;
    const ERIN: &str = "sa-token-erin";
    assert_eq!(
        get(&format!("{url}/api/v1/clusters"), Some("sa-token-unknown"))
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    let (_, apps) = get(&format!("{url}/api/v1/apps"), Some(ERIN)).await;
    let mut topics: Vec<String> = apps["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{}/{}/{}", a["cluster"], a["namespace"], a["app"]).replace('"', ""))
        .collect();
    topics.sort();
    assert_eq!(topics, ["a/analytics/ingest", "a/shop/web", "b/shop/web"]);
    // Deployments, StatefulSets, Namespaces, Nodes, Pods and Warning events.
    assert_eq!(
        get(&format!("{url}/api/v1/clusters/a/sync"), Some(ERIN))
            .await
            .1["items"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    assert_eq!(
        get(&format!("{url}/api/v1/clusters/b/sync"), Some(ERIN))
            .await
            .1["items"],
        json!([])
    );
    let task = |cluster: &str| json!({"type": "Stop", "cluster": cluster, "namespace": "shop", "app": "web", "executor": "external"});
    assert_eq!(
        post(&format!("{url}/api/v1/tasks"), ERIN, task("a"))
            .await
            .0,
        StatusCode::CREATED
    );
    let (status, body) = post(&format!("{url}/api/v1/tasks"), ERIN, task("b")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // Metrics: `get` on the URL /metrics, as for the apiserver's; no
    // grant on clusters gives it.
    let (status, body) = get(&format!("{url}/metrics"), Some(ERIN)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("/metrics"),
        "{body}"
    );
    let metrics = http()
        .get(format!("{url}/metrics"))
        .bearer_auth("sa-token-prometheus")
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    assert!(metrics.text().await.unwrap().contains("kube_pulse_"));
    // Answers are cached: a second round costs the host no new reviews.
    let reviews = |h: &SimCluster| h.stats().total("create");
    let before = reviews(&host);
    get(&format!("{url}/api/v1/apps"), Some(ERIN)).await;
    assert_eq!(reviews(&host), before);
    host.shutdown().await;
    m.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_client_limits_and_a_reconnect_storm() {
    let m = Members::start().await;
    let url = m
        .gateway(
            token_auth(),
            TransportConfig {
                max_connections_per_token: 3,
                max_subscribes_per_client_second: 10_000,
                ..TransportConfig::default()
            },
        )
        .await;
    let events = format!("{url}/api/v1/events?topic=clusters/*");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(sse_raw(&events, BOB, None).await);
    }
    let refused = http().get(&events).bearer_auth(BOB).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["message"], "at most 3 open sessions per token");
    drop(held);

    // 300 clients reconnect at once while changes flow: all get their
    // snapshot, and the status engine keeps up.
    let url = m
        .gateway(
            token_auth(),
            TransportConfig {
                max_connections_per_token: 1000,
                max_subscribes_per_client_second: 10_000,
                ..TransportConfig::default()
            },
        )
        .await;
    let storm: Vec<_> = (0..300)
        .map(|_| {
            let url = format!("{url}/api/v1/events?topic=apps/**");
            tokio::spawn(async move {
                let mut r = sse_raw(&url, ROOT, None).await;
                read_until(&mut r, "event: synced").await
            })
        })
        .collect();
    scale(&m.a, 4);
    for client in storm {
        let snapshot = client.await.unwrap();
        assert!(snapshot.contains("apps/a/shop/web"));
    }
    doc_where(m.pipeline.hub(), "apps/a/shop/web", WAIT, |d| {
        d["expected"] == 4
    })
    .await;
    assert_eq!(m.pipeline.check_engine(), Ok(()));
    m.stop().await;
}

/// A gateway on the TLS listener (the certificate and key files given,
/// looked at again every `reload_every`), holding `clusters/a`, with the
/// test's tokens: its port, its shutdown token and its server task.
async fn tls_gateway(
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    reload_every: Duration,
) -> (
    u16,
    Arc<kube_pulse::hub::Hub>,
    CancellationToken,
    tokio::task::JoinHandle<kube_pulse::error::Result<()>>,
) {
    let hub = kube_pulse::hub::Hub::new(Default::default());
    hub.put("clusters/a", json!({"name": "a", "phase": "Healthy"}));
    let shutdown = CancellationToken::new();
    let health = kube_pulse::health::Health {
        livez: vec![Arc::new(kube_pulse::health::checks::Ping)],
        readyz: vec![Arc::new(kube_pulse::health::checks::Ping)],
        format: Default::default(),
        timeout: Duration::from_secs(1),
    };
    let state = GatewayState::with_auth(
        hub.clone(),
        token_auth(),
        TransportConfig::default(),
        health,
        shutdown.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let tls = kube_pulse::http::server::TlsSettings {
        cert,
        key,
        reload_every,
    };
    let server = tokio::spawn(kube_pulse::http::server::serve(
        listener,
        kube_pulse::http::router::app(state),
        Some(tls),
        shutdown.clone(),
    ));
    (port, hub, shutdown, server)
}

/// The TLS listener's shutdown waits for WebSocket sessions like the
/// plain one's: each socket reads its 1001 before `serve` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_websockets_see_going_away_on_shutdown() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    const CLIENTS: usize = 5;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let (port, hub, shutdown, server) =
        tls_gateway(cert_path, key_path, Duration::from_secs(60)).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut sockets = Vec::new();
    for c in 0..CLIENTS {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let stream = connector.connect(name, tcp).await.expect("TLS handshake");
        let mut request = format!("wss://localhost:{port}/api/v1/ws")
            .into_client_request()
            .unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {ROOT}").parse().unwrap());
        let (mut ws, _) = tokio_tungstenite::client_async(request, stream)
            .await
            .expect("a WebSocket over TLS");
        let subscribe =
            json!({"op": "subscribe", "id": format!("s{c}"), "topics": ["clusters/**"]});
        ws.send(Message::Text(subscribe.to_string().into()))
            .await
            .unwrap();
        loop {
            let message = tokio::time::timeout(WAIT, ws.next())
                .await
                .expect("a message within the wait")
                .expect("the socket is open")
                .unwrap();
            if let Message::Text(text) = message
                && serde_json::from_str::<Value>(&text).unwrap()["type"] == "synced"
            {
                break;
            }
        }
        sockets.push(ws);
    }
    for i in 1..=10 {
        hub.put(
            "clusters/a",
            json!({"name": "a", "phase": "Healthy", "i": i}),
        );
    }
    shutdown.cancel();
    let codes = futures::future::join_all(sockets.iter_mut().map(|ws| async move {
        loop {
            match tokio::time::timeout(WAIT, ws.next()).await {
                Ok(Some(Ok(Message::Close(frame)))) => return frame.map(|f| u16::from(f.code)),
                Ok(Some(Ok(_))) => continue,
                _ => return None,
            }
        }
    }))
    .await;
    assert_eq!(codes, vec![Some(1001); CLIENTS], "close codes over TLS");
    tokio::time::timeout(WAIT, server)
        .await
        .expect("serve returns after the sessions ended")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_end_to_end_with_http2_and_certificate_reload() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let issue = || {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().clone())
    };
    let (pem, key, first_der) = issue();
    std::fs::write(&cert_path, &pem).unwrap();
    std::fs::write(&key_path, &key).unwrap();
    let (port, _hub, shutdown, server) = tls_gateway(
        cert_path.clone(),
        key_path.clone(),
        Duration::from_millis(100),
    )
    .await;

    // A client trusting exactly one certificate, speaking HTTP/2 by ALPN.
    let get_with = |trusted: rustls::pki_types::CertificateDer<'static>| async move {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(trusted).unwrap();
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_only()
            .enable_http1()
            .enable_http2()
            .build();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build::<_, http_body_util::Empty<bytes::Bytes>>(connector);
        let request = http::Request::get(format!("https://localhost:{port}/api/v1/clusters"))
            .header("authorization", format!("Bearer {ROOT}"))
            .body(http_body_util::Empty::new())
            .unwrap();
        client.request(request).await
    };
    let response = get_with(first_der.clone())
        .await
        .expect("TLS with the first certificate");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), http::Version::HTTP_2);
    use http_body_util::BodyExt;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("Healthy"));

    // A new certificate is picked up without a restart.
    let (pem, key, second_der) = issue();
    std::fs::write(&key_path, &key).unwrap();
    std::fs::write(&cert_path, &pem).unwrap();
    eventually(WAIT, "the new certificate is served", || {
        let der = second_der.clone();
        let get_with = &get_with;
        async move { get_with(der).await.ok().map(|_| ()) }
    })
    .await;
    assert!(
        get_with(first_der).await.is_err(),
        "the old certificate is gone"
    );
    shutdown.cancel();
    server.await.unwrap().unwrap();
}
