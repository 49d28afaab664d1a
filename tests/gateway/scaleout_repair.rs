//! The stream and the task bucket repaired while replicas run
//! (src/scale/relay/stream.rs, src/scale/task_bucket.rs): a real
//! `nats-server -js` on loopback, a simulated host cluster holding the
//! Leases, members `a` and `b` with one app each, and two replicas. The
//! stream and the bucket are deleted under them: they are made again, the
//! owners publish their members' current documents into the new stream and
//! the replicas put back the tasks they knew, and changes and tasks flow
//! again, without a restart. A replica started while NATS is not up yet
//! waits for it. Every wait bounded.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the tests
//! say so and pass, unless `CI` is set: then they fail.

use std::time::Duration;

use kube_pulse::scale::NatsSettings;
use pulse_testkit::http::{create_task, http, readiness, rest};
use pulse_testkit::nats::{nats, signing_key};
use pulse_testkit::poll::eventually;
use pulse_testkit::scale::{LEASE, WITHIN, owners, replica, replica_on, seed};
use pulse_testkit::sim::{sim, sim_with};
use serde_json::{Value, json};

/// `GET {url}{path}` as JSON when it answers 200 (the task store may
/// answer 503 for a moment while its bucket is made again).
async fn get_ok(url: &str, path: &str) -> Option<Value> {
    let response = http().get(format!("{url}{path}")).send().await.ok()?;
    if response.status() != 200 {
        return None;
    }
    response.json().await.ok()
}

/// Waits until the task `id` has succeeded, as `url` serves it.
async fn succeeded(url: &str, id: &str) {
    let path = format!("/api/v1/tasks/{id}");
    eventually(WITHIN, "the task succeeds", || async {
        let task = get_ok(url, &path).await?;
        (task["status"] == "Succeeded").then_some(())
    })
    .await;
}

/// Waits until `url` serves the app of `member` in `state`.
async fn app_is(url: &str, member: &str, state: &str) {
    let path = format!("/api/v1/apps/{member}/shop/web");
    eventually(WITHIN, &format!("{path} {state} on {url}"), || async {
        (rest(url, &path).await?["state"] == state).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_stream_and_bucket_are_made_again_and_refilled_without_a_restart() {
    let Some(nats) = nats().await else {
        return;
    };
    let host = sim().await;
    let named = |name: &'static str| {
        sim_with(move |c| {
            c.name = name.into();
            c.workloads = vec![seed()];
        })
    };
    let (a, b) = (named("a").await, named("b").await);
    let members = vec!["a".to_string(), "b".to_string()];
    let r1 = replica("r1", &host, &[&a, &b], &nats).await;
    let r2 = replica("r2", &host, &[&a, &b], &nats).await;
    let live = [&r1, &r2];
    let owners = owners(&host, &live, &members).await;
    eprintln!("owners {owners:?}");
    for r in live {
        for m in &members {
            app_is(&r.url, m, "Running").await;
        }
    }
    let before = create_task(
        &r1.url,
        json!({"type": "Stop", "cluster": "a", "namespace": "shop", "app": "web"}),
    )
    .await;
    succeeded(&r1.url, &before).await;
    for r in live {
        app_is(&r.url, "a", "Stopped").await;
    }

    let admin = async_nats::connect(&nats.url).await.unwrap();
    let js = async_nats::jetstream::new(admin);
    js.delete_stream("KUBE_PULSE").await.unwrap();
    js.delete_stream("KV_KUBE_PULSE_TASKS").await.unwrap();
    let deleted_at = std::time::Instant::now();

    // The stream is made again and the owners publish their members'
    // current documents into it: a replica that starts now finds them.
    let subjects = [
        "kube-pulse.topics.clusters.a",
        "kube-pulse.topics.clusters.b",
        "kube-pulse.topics.apps.a.shop.web",
        "kube-pulse.topics.apps.b.shop.web",
    ];
    eventually(
        WITHIN,
        "the stream holds every member's documents again",
        || async {
            let stream = js.get_stream("KUBE_PULSE").await.ok()?;
            for subject in subjects {
                stream.get_last_raw_message_by_subject(subject).await.ok()?;
            }
            Some(())
        },
    )
    .await;
    eprintln!(
        "stream refilled {:?} after the deletion",
        deleted_at.elapsed()
    );
    // The task bucket is made again with the tasks the replicas knew.
    for r in live {
        eventually(WITHIN, "the earlier task is served again", || async {
            let held = get_ok(&r.url, &format!("/api/v1/tasks/{before}")).await?;
            (held["status"] == "Succeeded").then_some(())
        })
        .await;
    }
    eventually(
        WITHIN,
        "the bucket holds the earlier task again",
        || async {
            let kv = js.get_key_value("KUBE_PULSE_TASKS").await.ok()?;
            kv.entry(&before).await.ok()?.map(drop)
        },
    )
    .await;

    // Changes and tasks flow again, through both replicas: a task on b
    // created on the replica that does not run it, and a task on a.
    let not_b = live
        .iter()
        .find(|r| r.id != owners["b"])
        .unwrap_or(&live[0]);
    let stop_b = create_task(
        &not_b.url,
        json!({"type": "Stop", "cluster": "b", "namespace": "shop", "app": "web"}),
    )
    .await;
    let start_a = create_task(
        &r2.url,
        json!({"type": "Start", "cluster": "a", "namespace": "shop", "app": "web", "replicas": 1}),
    )
    .await;
    for r in live {
        succeeded(&r.url, &stop_b).await;
        succeeded(&r.url, &start_a).await;
        app_is(&r.url, "b", "Stopped").await;
        app_is(&r.url, "a", "Running").await;
        let (status, body) = readiness(&r.url, "Nats").await;
        assert_eq!(status, 200, "{}: {body}", r.id);
    }
    eprintln!("served again {:?} after the deletion", deleted_at.elapsed());
    for r in [r1, r2] {
        r.token.cancel();
        r.gateway.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_before_nats_waits_for_it() {
    let Some(mut nats) = nats().await else {
        return;
    };
    nats.kill();
    let host = sim().await;
    let a = sim_with(|c| {
        c.name = "a".into();
        c.workloads = vec![seed()];
    })
    .await;
    let settings = NatsSettings::new(nats.url.clone()).signed_with(signing_key());
    let late = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        nats.start().await;
    };
    let members = [&a];
    let (r1, ()) = tokio::join!(
        replica_on("r1", &host, &members, settings, LEASE, |_| {}),
        late
    );
    app_is(&r1.url, "a", "Running").await;
    r1.token.cancel();
    r1.gateway.stop().await;
}
