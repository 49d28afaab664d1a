//! Cookie sessions for the native `EventSource` (issue 39) against the real
//! binary with `--auth tokens`: a bearer token on a same-origin `POST
//! /api/v1/session` gets an HttpOnly, Secure, SameSite=Strict cookie; the
//! cookie alone then opens an SSE stream and reads REST with the token's
//! grants; it never acts (a task POST with only the cookie is 401); a
//! cross-origin or cross-site POST gets no cookie; a bad token gets none
//! and counts as one failed authentication; DELETE ends the session.

use std::time::Duration;

use pulse_testkit::binary::{Binary, demo};
use pulse_testkit::http::http;
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN, SET_COOKIE};
use serde_json::{Value, json};

const READER: &str = "reader-token-0123456789";

/// `kube-pulse demo --auth tokens`: `reader` reads everything and may not act.
fn gateway(name: &str) -> Binary {
    let path = std::env::temp_dir().join(format!(
        "kube-pulse-cookie-{}-{name}.yaml",
        std::process::id()
    ));
    std::fs::write(
        &path,
        format!("tokens:\n  - {{subject: reader, token: {READER}, read: ['*']}}\n"),
    )
    .unwrap();
    Binary::start(&demo(&[
        "--auth",
        "tokens",
        "--tokens-file",
        path.to_str().unwrap(),
        "--max-auth-failures-per-ip",
        "5",
    ]))
}

/// POSTs /api/v1/session with `headers`; the status, the Set-Cookie value and the body.
async fn issue(url: &str, headers: &[(&str, String)]) -> (StatusCode, Option<String>, Value) {
    let mut request = http().post(format!("{url}/api/v1/session"));
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let cookie = response
        .headers()
        .get(SET_COOKIE)
        .map(|v| v.to_str().unwrap().to_string());
    let body = response.json().await.unwrap_or(Value::Null);
    (status, cookie, body)
}

/// The `name=value` part of a Set-Cookie value.
fn pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cookie_session_reads_like_its_token_and_never_acts() {
    let bin = gateway("reads");
    let url = bin.url.clone();
    let host = url.trim_start_matches("http://").to_string();
    let bearer = format!("Bearer {READER}");

    // Same origin (as a browser's fetch from the gateway's page sends it).
    let (status, set, body) = issue(
        &url,
        &[
            (AUTHORIZATION.as_str(), bearer.clone()),
            (ORIGIN.as_str(), url.clone()),
            ("sec-fetch-site", "same-origin".into()),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["subject"], "reader");
    assert!(body["expires"].is_string(), "{body}");
    let set = set.expect("a Set-Cookie");
    for attribute in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{set}");
    }
    let cookie = pair(&set);
    assert!(cookie.starts_with("kube_pulse_session="), "{cookie}");

    // The cookie alone reads REST …
    let clusters = http()
        .get(format!("{url}/api/v1/clusters"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(clusters.status(), StatusCode::OK);
    let items = clusters.json::<Value>().await.unwrap()["items"].clone();
    assert_eq!(items.as_array().map(Vec::len), Some(1), "{items}");
    // … and opens an SSE stream that sends its snapshot and `synced`.
    let mut stream = http()
        .get(format!("{url}/api/v1/events?topic=clusters/*"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let mut text = String::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    while !text.contains("event: synced") {
        let chunk = tokio::time::timeout_at(until, stream.chunk())
            .await
            .expect("synced within 20 s")
            .unwrap()
            .expect("the stream goes on");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("event: snapshot"), "{text}");
    drop(stream);

    // It never acts: a task with only the cookie is not authenticated.
    let task = http()
        .post(format!("{url}/api/v1/tasks"))
        .header(COOKIE, &cookie)
        .header(ORIGIN, &url)
        .json(&json!({"type": "Stop", "cluster": "c0", "namespace": "shop", "app": "web"}))
        .send()
        .await
        .unwrap();
    assert_eq!(task.status(), StatusCode::UNAUTHORIZED);
    // Without a cookie, or with a made-up one, nothing is read.
    for headers in [
        vec![],
        vec![(COOKIE, "kube_pulse_session=made-up".to_string())],
    ] {
        let mut request = http().get(format!("{url}/api/v1/clusters"));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        assert_eq!(
            request.send().await.unwrap().status(),
            StatusCode::UNAUTHORIZED
        );
    }

    // DELETE ends it: the cookie reads nothing any more.
    let end = http()
        .delete(format!("{url}/api/v1/session"))
        .header(COOKIE, &cookie)
        .header(ORIGIN, &url)
        .header(HOST, &host)
        .send()
        .await
        .unwrap();
    assert_eq!(end.status(), StatusCode::NO_CONTENT);
    assert!(
        end.headers()[SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let after = http()
        .get(format!("{url}/api/v1/clusters"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cookie_for_another_origin_a_cross_site_request_or_a_bad_token() {
    let bin = gateway("refused");
    let url = bin.url.clone();
    let bearer = format!("Bearer {READER}");
    let refused = [
        // Another origin, even a loopback one the guard lets act.
        vec![
            (AUTHORIZATION.as_str(), bearer.clone()),
            (ORIGIN.as_str(), "http://127.0.0.1:1".to_string()),
        ],
        // A browser saying the request comes from another site.
        vec![
            (AUTHORIZATION.as_str(), bearer.clone()),
            ("sec-fetch-site", "cross-site".to_string()),
        ],
        // No bearer token: a cookie cannot be had without one.
        vec![(ORIGIN.as_str(), url.clone())],
    ];
    for headers in refused {
        let (status, set, body) = issue(&url, &headers).await;
        assert!(
            status == StatusCode::FORBIDDEN || status == StatusCode::UNAUTHORIZED,
            "{headers:?}: {status} {body}"
        );
        assert_eq!(set, None, "{headers:?}");
    }
    // A bad token: 401, no cookie, one failure against the address's budget
    // of 5 (the fifth bad token locks it out; the sixth request is 429).
    for n in 1..=5 {
        let (status, set, _) = issue(
            &url,
            &[(AUTHORIZATION.as_str(), "Bearer nope-0123456789".into())],
        )
        .await;
        assert_eq!(
            (status, set),
            (StatusCode::UNAUTHORIZED, None),
            "bad token {n}"
        );
    }
    let (status, set, body) = issue(&url, &[(AUTHORIZATION.as_str(), bearer)]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], "too_many_auth_failures");
    assert_eq!(set, None);
}
