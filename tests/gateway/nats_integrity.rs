//! Integrity of what replicas accept (src/scale/signing.rs): against a real
//! `nats-server` locked as deploy/nats/ locks it, a client holding the
//! replicas' own user and password (every right a replica has) but not
//! their signing key publishes forged changes — a document at a high
//! revision, a removal, a forged app, a large topic of no member — and puts
//! a forged task into the bucket. None is served over REST or WebSocket,
//! the task is neither listed nor run, each is counted in
//! `kube_pulse_relay_rejected_total`, and the replica's real changes and
//! tasks still flow afterwards. A client with another role's credentials
//! (a second user allowed only to read the stream's state) publishes, puts
//! and deletes nothing. Loopback only, every wait bounded.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the tests
//! say so and pass, unless `CI` is set: then they fail.

use std::time::Duration;

use pulse_testkit::http::{create_task, get_text, rest};
use pulse_testkit::nats::task_bucket_stream;
use pulse_testkit::poll::eventually;
use pulse_testkit::scale::{LEASE, Subscriber, WITHIN, replica_on, seed};
use pulse_testkit::sim::{sim, sim_with};
use serde_json::{Value, json};

use super::nats_auth::{PASSWORD, locked_nats, replicas_settings};

/// `kube_pulse_relay_rejected_total{source, reason}` on `url`.
async fn rejected(url: &str, source: &str, reason: &str) -> f64 {
    let text = get_text(&format!("{url}/metrics")).await;
    let labels = format!("{{source=\"{source}\",reason=\"{reason}\"}}");
    text.lines()
        .filter_map(|l| l.strip_prefix("kube_pulse_relay_rejected_total"))
        .filter_map(|l| l.strip_prefix(labels.as_str()))
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .sum()
}

/// Creates a task on `url` and waits until it succeeds; its JSON.
async fn task_succeeds(url: &str, request: Value) -> Value {
    let path = format!("/api/v1/tasks/{}", create_task(url, request).await);
    eventually(WITHIN, "the task succeeds", || async {
        let task = rest(url, &path).await?;
        (task["status"] == "Succeeded").then_some(task)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgeries_from_the_replicas_own_user_are_neither_served_nor_run() {
    let Some(nats) = locked_nats().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let settings = replicas_settings(&nats, dir.path());
    let host = sim().await;
    let member = sim_with(|c| {
        c.name = "a".into();
        c.workloads = vec![seed()];
    })
    .await;
    let r1 = replica_on("r1", &host, &[&member], settings, LEASE, |_| {}).await;
    let app = "/api/v1/apps/a/shop/web";
    eventually(WITHIN, "the app is served through the stream", || async {
        (rest(&r1.url, app).await?["state"] == "Running").then_some(())
    })
    .await;
    let sub = Subscriber::open(&r1.url, &["clusters/*", "apps/**"]).await;
    // A real task, whose stored form the intruder copies below.
    let stop = json!({"type": "Stop", "cluster": "a", "namespace": "shop", "app": "web"});
    let done = task_succeeds(&r1.url, stop).await;
    eventually(WITHIN, "the app is stopped", || async {
        (rest(&r1.url, app).await?["state"] == "Stopped").then_some(())
    })
    .await;
    let cluster_before = rest(&r1.url, "/api/v1/clusters/a").await.unwrap();

    // The intruder: the replicas' user and password, no signing key.
    let intruder = async_nats::ConnectOptions::new()
        .user_and_password("kube-pulse".into(), PASSWORD.into())
        .connect(&nats.url)
        .await
        .unwrap();
    let js = async_nats::jetstream::new(intruder);
    let forge = |topic: &str, rev: u64, doc: Value| {
        json!({"topic": topic, "rev": rev, "replica": "r9", "doc": doc}).to_string()
    };
    let big = "x".repeat(200 << 10);
    let forgeries = [
        // A document at a high revision: would hide every later change.
        (
            "kube-pulse.topics.clusters.a",
            forge("clusters/a", 1 << 40, json!({"phase": "Forged"})),
            None,
        ),
        // A removal of the real member, with a made-up MAC.
        (
            "kube-pulse.topics.clusters.a",
            forge("clusters/a", (1 << 40) + 1, Value::Null),
            Some("bm90LXRoZS1tYWM"),
        ),
        (
            "kube-pulse.topics.apps.a.shop.web",
            forge(
                "apps/a/shop/web",
                1 << 40,
                json!({"state": "Forged", "message": "forged"}),
            ),
            None,
        ),
        // A large topic of no member: would be parked.
        (
            "kube-pulse.topics.clusters.zz",
            forge("clusters/zz", 1, json!({"phase": "Forged", "pad": big})),
            None,
        ),
    ];
    for (subject, payload, mac) in forgeries {
        let ack = match mac {
            Some(mac) => {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(kube_pulse::scale::SIGNATURE_HEADER, mac);
                js.publish_with_headers(subject, headers, payload.into())
                    .await
            }
            None => js.publish(subject, payload.into()).await,
        };
        ack.unwrap().await.expect("the server takes the forgery");
    }
    // A Start task to 3 replicas, made from the real task's stored form.
    let forged_id = "0f0f0f0f-0000-4000-8000-00000000f0f0";
    let mut task = done.clone();
    let fields = task.as_object_mut().unwrap();
    for gone in ["finished", "reason"] {
        fields.remove(gone);
    }
    fields.insert("id".into(), json!(forged_id));
    fields.insert("type".into(), json!("Start"));
    fields.insert("replicas".into(), json!(3));
    fields.insert("status".into(), json!("Pending"));
    fields.insert("progress".into(), json!(0));
    fields.insert("state".into(), json!("Starting"));
    let kv = js.get_key_value("KUBE_PULSE_TASKS").await.unwrap();
    kv.put(forged_id, task.to_string().into()).await.unwrap();

    eventually(WITHIN, "every forgery is rejected and counted", || async {
        let unsigned = rejected(&r1.url, "stream", "unsigned").await;
        let bad_mac = rejected(&r1.url, "stream", "bad-mac").await;
        let task = rejected(&r1.url, "bucket", "unsigned").await;
        (unsigned >= 3.0 && bad_mac >= 1.0 && task >= 1.0).then_some(())
    })
    .await;
    // Time to act on them, were they believed (the issue saw 0.1 s for a
    // change, 0.5 s for a task).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cluster = rest(&r1.url, "/api/v1/clusters/a")
        .await
        .expect("the member is still served");
    assert_ne!(cluster["phase"], "Forged", "{cluster}");
    assert_eq!(cluster["phase"], cluster_before["phase"], "{cluster}");
    let served = rest(&r1.url, app).await.unwrap();
    assert_eq!(served["state"], "Stopped", "the forged task ran: {served}");
    assert!(rest(&r1.url, "/api/v1/clusters/zz").await.is_none());
    let forged_path = format!("/api/v1/tasks/{forged_id}");
    assert!(
        rest(&r1.url, &forged_path).await.is_none(),
        "forged task served"
    );
    let tasks = get_text(&format!("{}/api/v1/tasks", r1.url)).await;
    assert!(!tasks.contains(forged_id), "{tasks}");

    // What replicas sign still flows: a later change, at a revision far
    // below the forged one, and a task.
    let start =
        json!({"type": "Start", "cluster": "a", "namespace": "shop", "app": "web", "replicas": 1});
    task_succeeds(&r1.url, start).await;
    eventually(WITHIN, "the app runs again", || async {
        (rest(&r1.url, app).await?["state"] == "Running").then_some(())
    })
    .await;
    let rev_of = |topic: &str| sub.doc(topic).map(|(rev, _)| rev);
    eventually(WITHIN, "the subscriber sees the app run again", || async {
        let (_, doc) = sub.doc("apps/a/shop/web")?;
        (doc["state"] == "Running").then_some(())
    })
    .await;
    assert!(rev_of("clusters/a").is_some_and(|rev| rev < 1 << 40));
    let all = sub.all.lock().clone();
    for message in &all {
        let text = message.to_string();
        assert!(
            !text.contains("Forged") && !text.contains("forged"),
            "{text}"
        );
        let removal = message["type"] == "removed" && message["topic"] == "clusters/a";
        assert!(!removal, "a removal reached the subscriber: {text}");
    }
    assert!(!all.iter().any(|m| m["topic"] == "clusters/zz"));
    sub.task.abort();
    r1.token.cancel();
    r1.gateway.stop().await;
}

/// A client with another role's credentials (a second user of the
/// kube-pulse account that may only read the stream's state) gets in, but
/// can neither publish a change, nor put a task, nor delete the stream:
/// the stream and the bucket hold nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_roles_credentials_publish_put_and_delete_nothing() {
    let reader = r#"
          {
            user: reader
            password: "reader-pw"
            permissions: {
              publish: { allow: ["$JS.API.STREAM.INFO.KUBE_PULSE"] }
              subscribe: { allow: ["_INBOX.>"] }
            }
          }"#;
    let conf = super::nats_auth::deployed_conf();
    assert!(conf.contains("users: ["), "{conf}");
    let conf = conf.replacen("users: [", &format!("users: [{reader}"), 1);
    let Some(nats) = super::nats_auth::locked_nats_with(&conf).await else {
        return;
    };
    let connect = |user: &str, password: &str| {
        async_nats::ConnectOptions::new()
            .user_and_password(user.into(), password.into())
            .request_timeout(Some(Duration::from_secs(3)))
            .connect(nats.url.clone())
    };
    // The replicas' user makes the stream and the bucket.
    let replicas = async_nats::jetstream::new(connect("kube-pulse", PASSWORD).await.unwrap());
    replicas
        .create_or_update_stream(async_nats::jetstream::stream::Config {
            name: "KUBE_PULSE".into(),
            subjects: vec!["kube-pulse.topics.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    replicas
        .get_or_create_stream(task_bucket_stream())
        .await
        .unwrap();

    let other = async_nats::jetstream::new(connect("reader", "reader-pw").await.unwrap());
    let info = other.get_stream("KUBE_PULSE").await;
    assert!(info.is_ok(), "the other role reads the stream's state");
    let envelope =
        json!({"topic": "clusters/x", "rev": 1, "replica": "r9", "doc": {"phase": "Forged"}});
    let published = match other
        .publish("kube-pulse.topics.clusters.x", envelope.to_string().into())
        .await
    {
        Ok(ack) => ack.await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(published.is_err(), "the other role published a change");
    let kv = other.get_key_value("KUBE_PULSE_TASKS").await;
    if let Ok(kv) = kv {
        assert!(kv.put("t1", "{}".into()).await.is_err(), "a task put");
    }
    assert!(
        other.delete_stream("KUBE_PULSE").await.is_err(),
        "the stream deleted"
    );
    assert!(
        other.delete_stream("KV_KUBE_PULSE_TASKS").await.is_err(),
        "the bucket deleted"
    );
    // Nothing of it is there.
    let mut stream = replicas.get_stream("KUBE_PULSE").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 0);
    let mut bucket = replicas.get_stream("KV_KUBE_PULSE_TASKS").await.unwrap();
    assert_eq!(bucket.info().await.unwrap().state.messages, 0);
}
