//! A locked NATS (src/scale/nats_auth.rs, deploy/nats/): a real
//! `nats-server` with the component's accounts, user and permissions (its
//! nats.conf without the cluster block) refuses clients without the
//! replicas' password, and lets the replicas' user do only what the relay
//! and the task bucket do; a gateway with that user and its password from a
//! file connects and serves, stream and tasks; a URL with credentials is
//! refused without showing them; a token and an nkey seed log in; TLS with
//! a private CA works, and a server that verifies clients takes the client
//! certificate and refuses a client without one. Loopback only, every wait
//! bounded.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the tests
//! say so and pass, unless `CI` is set: then they fail.

use std::path::Path;
use std::time::{Duration, Instant};

use kube_pulse::scale::{LeaseSettings, NatsAuthSources, NatsSettings, Secret};
use pulse_testkit::http::{http, readiness, rest};
use pulse_testkit::nats::{Nats, nats_with_config, task_bucket_stream, test_pki};
use pulse_testkit::poll::eventually;
use pulse_testkit::scale::{LEASE, WITHIN, replica_on, seed};
use pulse_testkit::sim::{sim, sim_with};
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The password of the user `kube-pulse` in these tests.
pub(crate) const PASSWORD: &str = "kp-test-s3cret-pw";
/// Bound of one connection attempt's answer.
const CONNECT: Duration = Duration::from_secs(30);

/// deploy/nats/'s nats.conf without its `cluster { … }` block (one server
/// here), its monitoring port (tests run in parallel) and its store (the
/// fixture's, a flag nats-server will not take twice): its accounts, user
/// and permissions exactly as deployed.
pub(crate) fn deployed_conf() -> String {
    let path = Path::new(ROOT).join("deploy/nats/nats-config.yaml");
    let doc: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let conf = doc["data"]["nats.conf"].as_str().unwrap();
    let (mut kept, mut depth) = (Vec::new(), 0usize);
    for line in conf.lines() {
        let code = line.split('#').next().unwrap().trim();
        if depth == 0 && (code.starts_with("http_port") || code.starts_with("store_dir")) {
            continue;
        }
        if depth == 0 && !(code.starts_with("cluster") && code.ends_with('{')) {
            kept.push(line);
            continue;
        }
        depth += code.matches('{').count();
        depth -= code.matches('}').count();
    }
    assert!(
        kept.len() < conf.lines().count(),
        "no cluster block in\n{conf}"
    );
    kept.join("\n")
}

/// The component's server with the test password, or None without the binary.
pub(crate) async fn locked_nats() -> Option<Nats> {
    locked_nats_with(&deployed_conf()).await
}

/// A server of `conf` (the component's nats.conf, users added) with the
/// variables the StatefulSet gives it, or None without the binary.
pub(crate) async fn locked_nats_with(conf: &str) -> Option<Nats> {
    nats_with_config(
        Some(conf),
        &[
            ("KUBE_PULSE_NATS_PASSWORD", PASSWORD),
            ("POD_NAME", "kube-pulse-nats-0"),
        ],
    )
    .await
}

/// The replicas' NATS settings for [`locked_nats`]: the user
/// `kube-pulse`, its password from a file in `dir` (with the line end a
/// Secret's file may have), the replicas' signing key.
pub(crate) fn replicas_settings(nats: &Nats, dir: &Path) -> NatsSettings {
    let password_file = dir.join("password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let mut settings =
        NatsSettings::new(nats.url.clone()).signed_with(pulse_testkit::nats::signing_key());
    settings.auth = NatsAuthSources {
        user: Some("kube-pulse".into()),
        password_file: Some(password_file),
        ..Default::default()
    }
    .resolve()
    .unwrap();
    settings
}

/// Connects with `options`, bounded; the client or the error's text.
async fn try_connect(
    options: async_nats::ConnectOptions,
    url: &str,
) -> Result<async_nats::Client, String> {
    match tokio::time::timeout(CONNECT, options.connect(url)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within the bound".into()),
    }
}

/// A client without credentials or with a wrong password does not get in
/// at all, so it can neither publish an envelope, nor put a task into the
/// bucket, nor delete the stream; the replicas' own user can do what the
/// relay and the bucket do and no more: neither delete nor purge the
/// stream or the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_server_lets_in_only_the_replicas_user_and_only_for_its_work() {
    let Some(nats) = locked_nats().await else {
        return;
    };
    let anonymous = try_connect(async_nats::ConnectOptions::new(), &nats.url).await;
    let err = anonymous.expect_err("a client without credentials is refused");
    assert!(err.to_lowercase().contains("authorization"), "{err}");
    let wrong = async_nats::ConnectOptions::new()
        .user_and_password("kube-pulse".into(), "not-the-password".into());
    let err = try_connect(wrong, &nats.url)
        .await
        .expect_err("a wrong password is refused");
    assert!(err.to_lowercase().contains("authorization"), "{err}");
    let token = async_nats::ConnectOptions::new().token(PASSWORD.into());
    assert!(try_connect(token, &nats.url).await.is_err(), "a token");

    // The replicas' user: what the relay and the task bucket do works.
    // (A refused request is dropped by the server: the client's request
    // times out, here after 3 s.)
    let replicas = async_nats::ConnectOptions::new()
        .user_and_password("kube-pulse".into(), PASSWORD.into())
        .request_timeout(Some(Duration::from_secs(3)));
    let client = try_connect(replicas, &nats.url).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    js.create_or_update_stream(async_nats::jetstream::stream::Config {
        name: "KUBE_PULSE".into(),
        subjects: vec!["kube-pulse.topics.>".into()],
        ..Default::default()
    })
    .await
    .expect("the replicas' user creates the stream");
    let envelope = json!({"topic": "clusters/x", "rev": 1, "replica": "intruder", "doc": null});
    js.publish("kube-pulse.topics.clusters.x", envelope.to_string().into())
        .await
        .unwrap()
        .await
        .expect("the replicas' user publishes envelopes");
    // The bucket's stream as src/scale/task_bucket.rs makes it.
    js.get_or_create_stream(task_bucket_stream())
        .await
        .expect("the replicas' user creates the bucket");
    let kv = js.get_key_value("KUBE_PULSE_TASKS").await.unwrap();
    kv.put("t1", "{}".into())
        .await
        .expect("the replicas' user puts a task");
    // … and no more.
    let deleted = js.delete_stream("KUBE_PULSE").await;
    assert!(deleted.is_err(), "the stream deleted");
    let purged = js.get_stream("KUBE_PULSE").await.unwrap().purge().await;
    assert!(purged.is_err(), "the stream purged: {purged:?}");
    let bucket = js.delete_key_value("KUBE_PULSE_TASKS").await;
    assert!(bucket.is_err(), "the bucket deleted");
    let other = js
        .create_stream(async_nats::jetstream::stream::Config {
            name: "OTHER".into(),
            subjects: vec!["other.>".into()],
            ..Default::default()
        })
        .await;
    assert!(other.is_err(), "another stream made: {other:?}");
    assert!(
        js.get_stream("KUBE_PULSE").await.is_ok(),
        "the stream is there"
    );
}

/// A gateway replica logging in as the component's user, its password
/// from a file, connects and serves: its members' documents come through
/// the stream, `/readyz/Nats` passes, and a task goes through the bucket to
/// its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_the_replicas_user_and_password_file_serves() {
    let Some(nats) = locked_nats().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let settings = replicas_settings(&nats, dir.path());
    assert!(!format!("{settings:?}").contains(PASSWORD));
    let host = sim().await;
    let member = sim_with(|c| {
        c.name = "a".into();
        c.workloads = vec![seed()];
    })
    .await;
    let r1 = replica_on("r1", &host, &[&member], settings, LEASE, |_| {}).await;
    eventually(WITHIN, "the app is served through the stream", || async {
        let app = rest(&r1.url, "/api/v1/apps/a/shop/web").await?;
        (app["state"] == "Running").then_some(())
    })
    .await;
    let (status, body) = readiness(&r1.url, "Nats").await;
    assert_eq!(status, 200, "{body}");
    let created = http()
        .post(format!("{}/api/v1/tasks", r1.url))
        .json(&json!({"type": "Stop", "cluster": "a", "namespace": "shop", "app": "web"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let task: Value = created.json().await.unwrap();
    let path = format!("/api/v1/tasks/{}", task["id"].as_str().unwrap());
    eventually(WITHIN, "the task succeeds through the bucket", || async {
        let task = rest(&r1.url, &path).await?;
        (task["status"] == "Succeeded").then_some(())
    })
    .await;
    r1.token.cancel();
    r1.gateway.stop().await;
}

/// `nats://user:password@host`: refused by the gateway before it connects
/// and by the binary before it starts, and the password is in no error and
/// no log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_with_credentials_is_refused_without_showing_them() {
    let url = format!("nats://kube-pulse:{PASSWORD}@127.0.0.1:1");
    let leases = LeaseSettings {
        client: kube::Config::new("http://127.0.0.1:1".parse().unwrap()),
        namespace: "default".into(),
        replica: "r1".into(),
        duration: LEASE,
    };
    let err = pulse_testkit::gateway::start_refused(kube_pulse::gateway::GatewayConfig {
        leases: Some(leases),
        nats: Some(NatsSettings::new(url.clone())),
        ..Default::default()
    })
    .await;
    assert!(err.contains("carries credentials"), "{err}");
    assert!(err.contains("--nats-user"), "{err}");
    assert!(!err.contains(PASSWORD), "{err}");

    // The binary, logging everything.
    let mut child = std::process::Command::new(pulse_testkit::binary::path())
        .args(pulse_testkit::binary::demo(&[
            "--leases",
            "--nats",
            url.as_str(),
        ]))
        .env("RUST_LOG", "trace")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("kube-pulse demo did not refuse the URL within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!status.success());
    assert!(stderr.contains("carries credentials"), "{stderr}");
    assert!(
        !stdout.contains(PASSWORD) && !stderr.contains(PASSWORD),
        "{stdout}{stderr}"
    );
}

/// A token from the environment (`KUBE_PULSE_NATS_TOKEN`) logs in to a
/// server that wants one; another token does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_logs_in() {
    let conf = "authorization {\n  token: $TEST_TOKEN\n}\n";
    let Some(nats) = nats_with_config(Some(conf), &[("TEST_TOKEN", PASSWORD)]).await else {
        return;
    };
    let with = |token: &str| {
        let mut settings = NatsSettings::new(nats.url.clone());
        settings.auth = NatsAuthSources {
            token: Some(Secret::new(token)),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        settings
    };
    let client = with(PASSWORD).connect("kube-pulse test").await.unwrap();
    client.flush().await.unwrap();
    let err = with("another")
        .connect("kube-pulse test")
        .await
        .unwrap_err();
    let err = err.to_string();
    assert!(err.starts_with("nats: cannot connect to"), "{err}");
    assert!(!err.contains(PASSWORD) && !err.contains("another"), "{err}");
}

/// An nkey seed from a file (`--nats-nkey-seed`) logs in to a server that
/// knows the user's public key; another user's seed does not, and the
/// error shows no seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nkey_seed_logs_in() {
    let user = nkeys::KeyPair::new_user();
    let stranger = nkeys::KeyPair::new_user();
    let conf = format!(
        "authorization {{\n  users = [ {{ nkey: {} }} ]\n}}\n",
        user.public_key()
    );
    let Some(nats) = nats_with_config(Some(&conf), &[]).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let with = |pair: &nkeys::KeyPair, name: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, pair.seed().unwrap()).unwrap();
        let mut settings = NatsSettings::new(nats.url.clone());
        settings.auth = NatsAuthSources {
            nkey_seed: Some(path),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        settings
    };
    let client = with(&user, "user.nk")
        .connect("kube-pulse test")
        .await
        .unwrap();
    client.flush().await.unwrap();
    let err = with(&stranger, "stranger.nk")
        .connect("kube-pulse test")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("nats: cannot connect to"), "{err}");
    assert!(!err.contains(&stranger.seed().unwrap()), "{err}");
}

/// TLS settings over the certificates of `pki`: `ca` and a client
/// certificate when `client` is set.
fn tls_settings(url: &str, ca: &Path, client: Option<(&Path, &Path)>) -> NatsSettings {
    let mut settings = NatsSettings::new(url);
    settings.auth = NatsAuthSources {
        ca: Some(ca.into()),
        cert: client.map(|(cert, _)| cert.into()),
        key: client.map(|(_, key)| key.into()),
        ..Default::default()
    }
    .resolve()
    .unwrap();
    settings
}

/// A server whose certificate a private CA signed: the client trusts it
/// with `--nats-ca` (on a `nats://` URL too: the CA makes TLS required),
/// and refuses it with another CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca() {
    let pki = test_pki();
    let conf = format!(
        "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n}}\n",
        pki.server_cert, pki.server_key
    );
    let Some(nats) = nats_with_config(Some(&conf), &[]).await else {
        return;
    };
    let tls_url = nats.url.replace("nats://", "tls://");
    for url in [&nats.url, &tls_url] {
        let client = tls_settings(url, &pki.ca, None)
            .connect("kube-pulse test")
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        client.flush().await.unwrap();
    }
    let err = tls_settings(&tls_url, &pki.other_ca, None)
        .connect("kube-pulse test")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("nats: cannot connect to"), "{err}");
}

/// A server that verifies clients (`verify: true`): the client with a
/// certificate the CA signed gets in, one without a certificate does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_the_client_certificate() {
    let pki = test_pki();
    let conf = format!(
        "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  verify: true\n}}\n",
        pki.server_cert, pki.server_key, pki.ca
    );
    let Some(nats) = nats_with_config(Some(&conf), &[]).await else {
        return;
    };
    let client = tls_settings(
        &nats.url,
        &pki.ca,
        Some((&pki.client_cert, &pki.client_key)),
    )
    .connect("kube-pulse test")
    .await
    .unwrap();
    client.flush().await.unwrap();
    let without = tokio::time::timeout(
        CONNECT,
        tls_settings(&nats.url, &pki.ca, None).connect("kube-pulse test"),
    )
    .await
    .expect("an answer within the bound");
    assert!(without.is_err(), "a client without a certificate got in");
}
