//! A replicated stream of changes (`streamReplicas: 3`, src/scale/relay/)
//! on a three-server JetStream cluster: three real `nats-server -js` routed
//! to each other on loopback, a simulated host cluster holding the Leases,
//! three simulated members and three gateway replicas given the list of the
//! three servers. One server is killed with SIGKILL — the one leading the
//! stream, and if no replica was connected to it, after it is back, one a
//! replica is connected to — and the stream goes on: a later change of
//! every member reaches the subscribers on every replica, REST serves what
//! they rebuilt, `/readyz/Nats` passes again everywhere, and a task created
//! afterwards runs.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the test
//! says so and passes, unless `CI` is set: then it fails.

use std::collections::BTreeMap;
use std::time::Instant;

use kube_pulse::scale::{NatsSettings, task_bucket_of};
use kube_pulse_sim::{SimCluster, workload_manifest};
use pulse_testkit::http::{http, rest};
use pulse_testkit::nats::{NatsCluster, Placement, nats_cluster, stream_connected_again};
use pulse_testkit::poll::eventually;
use pulse_testkit::scale::{
    LEASE, Replica, Subscriber, WITHIN, converged, owners, replica_on, seed, three_members,
};
use pulse_testkit::sim::sim;
use serde_json::{Value, json};

/// Copies of the stream and of the task bucket: one per server.
const REPLICAS: usize = 3;
const STREAM: &str = kube_pulse::scale::DEFAULT_STREAM;

/// Where `stream` is once it has a copy on [`REPLICAS`] servers, every
/// one current, as the live servers `up` report it.
async fn placement(cluster: &NatsCluster, up: &[usize], stream: &str) -> Placement {
    let what = format!("{stream} placed on {REPLICAS} servers, every copy current");
    eventually(WITHIN, &what, || async {
        for &i in up {
            if let Some(placed) = cluster.placement(i, stream).await
                && placed.current
                && placed.servers.len() == REPLICAS
            {
                return Some(placed);
            }
        }
        None
    })
    .await
}

/// Scales every member's app to `replicas` and waits until every
/// subscriber holds, for each member, the owner's document with that many
/// ready pods; then until REST on each replica serves every document its
/// subscriber rebuilt.
async fn every_member_scaled(
    sims: &[&SimCluster],
    live: &[&Replica],
    subs: &[Subscriber],
    owners: &BTreeMap<String, String>,
    replicas: u64,
) {
    for s in sims {
        let mut scaled = workload_manifest(&seed());
        scaled["spec"]["replicas"] = json!(replicas);
        s.apply(&scaled).unwrap();
    }
    for (r, sub) in live.iter().zip(subs) {
        for (member, owner) in owners {
            let owner = live.iter().find(|o| o.id == *owner).unwrap();
            let topic = format!("apps/{member}/shop/web");
            let what = format!("{topic} with {replicas} ready pods on {}", r.id);
            eventually(WITHIN, &what, || async {
                assert!(
                    !sub.task.is_finished(),
                    "the subscriber on {} ended (20 s without a message)",
                    r.id
                );
                let (rev, doc) = sub.doc(&topic)?;
                let held = owner.gateway.hub().get(&topic)?;
                (held.rev == rev && *held.doc == doc && doc["ready"] == replicas).then_some(())
            })
            .await;
        }
        eventually(
            WITHIN,
            "REST serves what the subscriber rebuilt",
            || async {
                let docs = sub.docs.lock().docs.clone();
                for (topic, (_, doc)) in &docs {
                    if rest(&r.url, &format!("/api/v1/{topic}")).await.as_ref() != Some(doc) {
                        return None;
                    }
                }
                (docs.len() == 2 * owners.len()).then_some(())
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_goes_on_when_a_nats_server_of_three_is_killed() {
    let Some(mut cluster) = nats_cluster().await else {
        return;
    };
    let host = sim().await;
    let [a, b, c] = three_members().await;
    let sims = [&a, &b, &c];
    let members: Vec<String> = sims.iter().map(|s| s.name().to_string()).collect();
    let settings = NatsSettings {
        replicas: REPLICAS,
        ..NatsSettings::new(cluster.url.clone()).signed_with(pulse_testkit::nats::signing_key())
    };
    let mut replicas = Vec::new();
    for id in ["r1", "r2", "r3"] {
        replicas.push(replica_on(id, &host, &sims, settings.clone(), LEASE, |_| {}).await);
    }
    let live: Vec<&Replica> = replicas.iter().collect();
    let owners = owners(&host, &live, &members).await;
    eprintln!("owners {owners:?}");

    // The stream and the task bucket each have a copy on every server.
    let mut up: Vec<usize> = (0..cluster.names().len()).collect();
    let mut names = cluster.names();
    names.sort();
    for stream in [STREAM.to_string(), format!("KV_{}", task_bucket_of(STREAM))] {
        let placed = placement(&cluster, &up, &stream).await;
        eprintln!("{stream} on {placed:?}");
        assert_eq!(placed.servers, names, "{stream}");
    }

    // Subscribers on every replica get every member's app, then a change.
    let mut subs = Vec::new();
    for r in &live {
        subs.push(Subscriber::open(&r.url, &["clusters/*", "apps/**"]).await);
    }
    for (r, sub) in live.iter().zip(&subs) {
        for (member, owner) in &owners {
            let owner = live.iter().find(|o| o.id == *owner).unwrap();
            let topic = format!("apps/{member}/shop/web");
            let path = format!("/api/v1/{topic}");
            converged(sub, owner, &topic, &path, &format!("{topic} on {}", r.id)).await;
        }
    }
    every_member_scaled(&sims, &live, &subs, &owners, 2).await;

    // Kill the server leading the stream; if no replica was connected to
    // it, bring it back and kill one a replica is connected to.
    let mut ready = 2;
    let mut killed: Option<usize> = None;
    for round in 1..=2 {
        let victim = match killed.take() {
            None => {
                let leader = placement(&cluster, &up, STREAM).await.leader;
                cluster.index_of(&leader)
            }
            Some(back) => {
                cluster.start(back).await;
                up.push(back);
                placement(&cluster, &up, STREAM).await;
                let mut chosen = None;
                for &i in &up {
                    let clients = cluster.clients(i).await;
                    if clients.iter().any(|c| c.starts_with("kube-pulse ")) {
                        chosen = Some(i);
                    }
                }
                chosen.expect("a server with a replica's connection")
            }
        };
        let clients: Vec<String> = cluster
            .clients(victim)
            .await
            .into_iter()
            .filter(|c| c.starts_with("kube-pulse "))
            .collect();
        let leads = placement(&cluster, &up, STREAM).await.leader == cluster.names()[victim];
        eprintln!(
            "round {round}: killing {} (leads {STREAM}: {leads}; clients {clients:?})",
            cluster.names()[victim]
        );
        let at = Instant::now();
        cluster.kill(victim);
        up.retain(|&i| i != victim);

        // A later change of every member reaches every subscriber, and
        // REST on every replica serves what its subscriber rebuilt.
        ready += 1;
        every_member_scaled(&sims, &live, &subs, &owners, ready).await;
        eprintln!(
            "round {round}: every member's change reached every replica {:.1?} after the kill",
            at.elapsed()
        );
        for r in &live {
            stream_connected_again(&r.url).await;
        }
        eprintln!(
            "round {round}: /readyz/Nats 200 on every replica {:.1?} after the kill",
            at.elapsed()
        );
        if !clients.is_empty() {
            break;
        }
        assert!(round < 2, "the second victim had a replica's connection");
        killed = Some(victim);
    }

    // A task created now, on a replica that does not run its member, runs.
    let (member, owner) = owners.iter().next().unwrap();
    let elsewhere = live.iter().find(|r| r.id != *owner).unwrap();
    // While the task bucket's stream elects a leader on the survivors, a
    // task is refused with 503 and a JSON error (the client retries).
    let task: Value = eventually(WITHIN, "a task accepted", || async {
        let created = http()
            .post(format!("{}/api/v1/tasks", elsewhere.url))
            .json(&json!({"type": "Stop", "cluster": member, "namespace": "shop", "app": "web"}))
            .send()
            .await
            .unwrap();
        let status = created.status();
        let body: Value = created.json().await.unwrap();
        if status == 201 {
            return Some(body);
        }
        assert_eq!(status, 503, "refused on {}: {body}", elsewhere.id);
        assert!(
            body["code"].is_string() && body["message"].is_string(),
            "{body}"
        );
        eprintln!("a task refused on {} meanwhile: {body}", elsewhere.id);
        None
    })
    .await;
    let id = task["id"].as_str().unwrap().to_string();
    let app_path = format!("/api/v1/apps/{member}/shop/web");
    for r in &live {
        eventually(
            WITHIN,
            "the task succeeds, seen on every replica",
            || async {
                let t = rest(&r.url, &format!("/api/v1/tasks/{id}")).await?;
                (t["status"] == "Succeeded").then_some(())
            },
        )
        .await;
        eventually(WITHIN, "every replica shows the app stopped", || async {
            let app = rest(&r.url, &app_path).await?;
            (app["state"] == "Stopped").then_some(())
        })
        .await;
    }
    for sub in subs {
        sub.task.abort();
    }
    for r in &live {
        r.token.cancel();
        r.gateway.stop().await;
    }
}
