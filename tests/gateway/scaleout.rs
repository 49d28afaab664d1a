//! One stream of changes over NATS JetStream (src/scale/relay/): a real
//! `nats-server -js` on loopback, a simulated host cluster holding the
//! Leases, three simulated members and three gateway replicas. A client on
//! any replica sees every member's documents, equal to what the owner
//! serves, and follows changes made on another replica's members.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the tests
//! say so and pass, unless `CI` is set: then they fail. The helpers are in
//! pulse_testkit::scale; the faults of scaling out (an owner killed,
//! upstream load, scaling down and up) are in the scaleout_faults module.

use std::collections::BTreeMap;

use kube_pulse::scale::{NatsSettings, preferred_owner};
use kube_pulse_sim::{SimCluster, workload_manifest};
use pulse_testkit::docs::Replica as Docs;
use pulse_testkit::http::{get_text, http, metric, readiness, rest};
use pulse_testkit::nats::{Nats, nats, stream_connected_again};
use pulse_testkit::poll::eventually;
use pulse_testkit::scale::{Replica, Subscriber, WITHIN, converged, owners, replica, seed};
use pulse_testkit::sim::{sim, sim_with};
use serde_json::{Value, json};

/// The simulated host cluster, three simulated members `a`, `b` and `c`
/// (without workloads), their names, and replicas `r1`, `r2`, `r3` sharing
/// them through Leases and `nats`.
async fn fleet(nats: &Nats) -> (SimCluster, [SimCluster; 3], Vec<String>, [Replica; 3]) {
    let host = sim().await;
    let named = |name: &'static str| sim_with(move |c| c.name = name.into());
    let members = [named("a").await, named("b").await, named("c").await];
    let names = members.iter().map(|s| s.name().to_string()).collect();
    let sims: Vec<&SimCluster> = members.iter().collect();
    let replicas = [
        replica("r1", &host, &sims, nats).await,
        replica("r2", &host, &sims, nats).await,
        replica("r3", &host, &sims, nats).await,
    ];
    (host, members, names, replicas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_one_replica_sees_every_member_and_follows_changes_on_others() {
    let Some(mut nats) = nats().await else {
        return;
    };
    let (host, [a, b, c], members, [r1, r2, r3]) = fleet(&nats).await;
    let sims = [&a, &b, &c];
    let live = [&r1, &r2, &r3];
    let owners = owners(&host, &live, &members).await;
    let by_id = |id: &str| *live.iter().find(|r| r.id == id).unwrap();
    eprintln!("owners {owners:?}");

    // A subscriber on r1 gets every member's cluster document, as the
    // owner's hub and REST have it; so does REST on r1 itself.
    let sub = Subscriber::open(&r1.url, &["clusters/*", "apps/**"]).await;
    for m in &members {
        let owner = by_id(&owners[m]);
        let topic = format!("clusters/{m}");
        let path = format!("/api/v1/clusters/{m}");
        // The owner serves its own member from the stream too: wait for
        // its healthy document there, then for the subscriber to have it.
        eventually(WITHIN, "the owner serves its member healthy", || async {
            let held = owner.gateway.hub().get(&topic)?;
            (held.doc["phase"] == "Healthy").then_some(())
        })
        .await;
        let doc = converged(
            &sub,
            owner,
            &topic,
            &path,
            &format!("{topic} on r1 as on {}", owner.id),
        )
        .await;
        assert_eq!(doc["phase"], "Healthy", "{topic}: {doc}");
        eventually(WITHIN, "REST on r1 serves the owner's document", || async {
            let here = rest(&r1.url, &path).await?;
            let there = rest(&owner.url, &path).await?;
            (here == there).then_some(())
        })
        .await;
    }
    let listed = rest(&r1.url, "/api/v1/clusters").await.unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 3, "{listed}");

    // asOf: every replica knows it for every member, its own from its
    // engine, the others' from their owners' reports on the stream
    // (docs/SCALE-OUT.md "asOf across replicas"), within a report period.
    for r in live {
        let url = format!("{}/api/v1/events?topic=clusters/*", r.url);
        eventually(WITHIN, "every member's asOf on every replica", || async {
            let mut sse = pulse_testkit::sse::SseReader::open(&url, None).await;
            let synced = sse.until_synced().await.pop()?.data;
            let known: Vec<&String> = synced["asOf"].as_object()?.keys().collect();
            (known == members.iter().collect::<Vec<_>>()).then_some(())
        })
        .await;
    }

    // A change on a member another replica runs reaches the subscriber on r1.
    let (remote, owner) = owners
        .iter()
        .find(|(_, o)| o.as_str() != "r1")
        .map(|(m, o)| (m.clone(), by_id(o)))
        .expect("r1 does not own all three members");
    let sim_of = sims.iter().find(|s| s.name() == remote).unwrap();
    sim_of.apply(&workload_manifest(&seed())).unwrap();
    let topic = format!("apps/{remote}/shop/web");
    let path = format!("/api/v1/apps/{remote}/shop/web");
    let app = converged(
        &sub,
        owner,
        &topic,
        &path,
        &format!("{topic} from {} on r1", owner.id),
    )
    .await;
    eprintln!("{topic} on r1: {}", app["phase"]);
    assert!(
        r1.gateway.pipeline().members().names() != members,
        "r1 runs only its own members"
    );

    // Published by the owners, consumed everywhere, ready everywhere.
    let mut published = 0.0;
    for r in live {
        published += metric(&r.url, "kube_pulse_stream_published_total").await;
        let consumed = metric(&r.url, "kube_pulse_stream_consumed_total").await;
        assert!(consumed > 0.0, "{} consumed nothing", r.id);
        let metrics = get_text(&format!("{}/metrics", r.url)).await;
        assert!(
            metrics.contains("kube_pulse_stream_consumer_lag_messages{stream=\"KUBE_PULSE\"} "),
            "{}: no lag series",
            r.id
        );
        assert!(
            metrics.contains("kube_pulse_stream_connected{stream=\"KUBE_PULSE\"} 1\n"),
            "{}: not connected in\n{metrics}",
            r.id
        );
        let (status, body) = readiness(&r.url, "Nats").await;
        assert_eq!(status, 200, "{}: {body}", r.id);
    }
    assert!(published >= 4.0, "{published}");

    // The broker goes away: readiness says so on every replica, and each
    // keeps serving the last documents it has, of every member.
    nats.kill();
    for r in live {
        let why = eventually(WITHIN, "/readyz/Nats fails without the broker", || async {
            let (status, body) = readiness(&r.url, "Nats").await;
            (status == 500).then_some(body)
        })
        .await;
        assert!(why.contains("nats"), "{}: {why}", r.id);
        // The alert KubePulseStreamDisconnected reads the same from /metrics.
        let connected = r#"kube_pulse_stream_connected{stream="KUBE_PULSE"}"#;
        eventually(WITHIN, "kube_pulse_stream_connected 0", || async {
            (metric(&r.url, connected).await == 0.0).then_some(())
        })
        .await;
    }
    let listed = rest(&r1.url, "/api/v1/clusters").await.unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 3, "{listed}");

    // It comes back (same port, same store): every replica is ready again,
    // and changes on the other replica's member flow to r1 again.
    nats.start().await;
    for r in live {
        stream_connected_again(&r.url).await;
    }
    let mut scaled = workload_manifest(&seed());
    scaled["spec"]["replicas"] = json!(2);
    sim_of.apply(&scaled).unwrap();
    let app = eventually(
        WITHIN,
        "the scaled app reaches r1 after the broker returned",
        || async {
            let (_, doc) = sub.doc(&topic)?;
            let held = owner.gateway.hub().get(&topic)?;
            (*held.doc == doc && doc["ready"] == 2 && doc["phase"] == "Running").then_some(doc)
        },
    )
    .await;
    eprintln!("{topic} on r1 after the broker returned: {}", app["phase"]);
    sub.task.abort();
    for r in live {
        r.token.cancel();
        r.gateway.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_continue_on_other_replicas_when_the_owner_stops() {
    let Some(nats) = nats().await else {
        return;
    };
    // The members' simulators live as long as the test.
    let (host, _members, members, replicas) = fleet(&nats).await;
    let mut live = Vec::from(replicas);
    let refs: Vec<&Replica> = live.iter().collect();
    let first = owners(&host, &refs, &members).await;
    // The owner of a member stops; a subscriber on another replica follows it.
    let (member, stopping) = first
        .iter()
        .next()
        .map(|(m, o)| (m.clone(), o.clone()))
        .unwrap();
    // The watcher is neither the owner nor the replica that takes over:
    // it has the member's documents only from the stream, before and after.
    let others: Vec<String> = live
        .iter()
        .map(|r| r.id.clone())
        .filter(|id| *id != stopping)
        .collect();
    let taker = preferred_owner(&member, &others).unwrap().clone();
    let watcher = others.iter().find(|id| **id != taker).unwrap().clone();
    let watcher_url = live.iter().find(|r| r.id == watcher).unwrap().url.clone();
    let topic = format!("clusters/{member}");
    let sub = Subscriber::open(&watcher_url, &["clusters/*"]).await;
    let path = format!("/api/v1/clusters/{member}");
    let owner = live.iter().find(|r| r.id == stopping).unwrap();
    converged(
        &sub,
        owner,
        &topic,
        &path,
        "the watcher has the owner's document",
    )
    .await;
    let (before, before_doc) = eventually(WITHIN, "the member is Healthy", || async {
        let (rev, doc) = sub.doc(&topic)?;
        let held = owner.gateway.hub().get(&topic)?;
        (held.rev == rev && *held.doc == doc && doc["phase"] == "Healthy").then_some((rev, doc))
    })
    .await;
    let at = live.iter().position(|r| r.id == stopping).unwrap();
    let stopped = live.remove(at);
    stopped.token.cancel();
    stopped.gateway.stop().await;
    let refs: Vec<&Replica> = live.iter().collect();
    let after = owners(&host, &refs, &members).await;
    let next = refs.iter().find(|r| r.id == after[&member]).unwrap();
    assert_eq!(next.id, taker);
    // From here on only the new owner makes revisions of the topic.
    let moved_at = next.gateway.hub().get(&topic).unwrap().rev;
    assert!(moved_at >= before, "{moved_at} < {before}");
    // The new owner continues the topic's revisions: the watcher gets the
    // new owner's documents as patches, each following the one before. Its
    // status machine continues the document, but its watches relist (the
    // resource counts change), so it makes at least one revision after
    // `before`; it may have made all of them by `moved_at`. REST is read
    // in the same round: the new owner's document may still be moving.
    let doc = eventually(WITHIN, "the watcher follows the new owner", || async {
        let (rev, doc) = sub.doc(&topic)?;
        let held = next.gateway.hub().get(&topic)?;
        let served = rest(&next.url, &path).await?;
        (rev > before && held.rev == rev && *held.doc == doc && served == doc).then_some(doc)
    })
    .await;
    let messages = sub.seen.lock().get(&topic).cloned().unwrap();
    let revs: Vec<(String, u64)> = messages
        .iter()
        .map(|m| {
            (
                m["type"].as_str().unwrap().to_string(),
                m["rev"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let first_rev = revs[0].1;
    for (i, (kind, rev)) in revs.iter().enumerate().skip(1) {
        assert_eq!(
            (kind.as_str(), *rev),
            ("patch", first_rev + i as u64),
            "revisions of {topic} on {watcher}: {revs:?}"
        );
    }
    // ... and its status machine continued the published document: the
    // transitions before the move are kept, with their numbers and times,
    // and `since` moved only if the new owner made a transition of its own.
    let history = |doc: &Value| doc["history"].as_object().cloned().unwrap_or_default();
    let (then, now) = (history(&before_doc), history(&doc));
    assert!(!then.is_empty(), "{before_doc}");
    for (number, transition) in &then {
        assert_eq!(
            now.get(number),
            Some(transition),
            "transition {number} of {topic} across the move: {before_doc} → {doc}"
        );
    }
    let new: Vec<&String> = now.keys().filter(|k| !then.contains_key(*k)).collect();
    if new.is_empty() {
        assert_eq!(doc["since"], before_doc["since"], "{before_doc} → {doc}");
        assert_eq!(doc["phase"], "Healthy", "{doc}");
    }
    eprintln!(
        "{topic} on {watcher}: revisions {revs:?} across the move from {stopping} to {}; since {} → {}, transitions {:?} → {:?}",
        next.id,
        before_doc["since"],
        doc["since"],
        then.keys().collect::<Vec<_>>(),
        now.keys().collect::<Vec<_>>(),
    );
    sub.task.abort();
    for r in &live {
        r.token.cancel();
        r.gateway.stop().await;
    }
}

#[tokio::test]
async fn nats_needs_leases() {
    // Refused before anything connects: no NATS server is needed.
    let err = pulse_testkit::gateway::start_refused(kube_pulse::gateway::GatewayConfig {
        nats: Some(NatsSettings::new("nats://127.0.0.1:1")),
        ..Default::default()
    })
    .await;
    assert!(err.contains("--nats needs Lease ownership"), "{err}");
}

/// A subscriber on one replica disconnects; while it is away the members
/// change; it reconnects to another replica with the cursor of its last
/// message. That replica replays exactly what it missed: `synced` says
/// resumed, no topic it held comes again as a snapshot, every patch applies
/// to the revision it holds, and its documents end equal to that replica's
/// hub and REST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_resumes_on_another_replica_from_its_cursor() {
    let Some(nats) = nats().await else {
        return;
    };
    let (host, [a, b, c], members, [r1, r2, r3]) = fleet(&nats).await;
    let sims = [&a, &b, &c];
    let live = [&r1, &r2, &r3];
    owners(&host, &live, &members).await;
    for s in sims {
        s.apply(&workload_manifest(&seed())).unwrap();
    }
    let topics = ["clusters/*", "apps/**"];
    let mut first = Subscriber::open(&r1.url, &topics).await;
    let all = topics.map(|t| kube_pulse::hub::Pattern::parse(t).unwrap());
    // Every member's cluster and app document on r1, as r1 serves them.
    eventually(
        WITHIN,
        "the subscriber on r1 has every document",
        || async {
            let docs = first.docs.lock().docs.clone();
            let served = r1.gateway.hub().list(&all);
            let members_topics = served.len();
            let equal = served
                .iter()
                .all(|d| docs.get(d.topic.as_str()) == Some(&(d.rev, (*d.doc).clone())));
            (equal && members_topics == 6 && docs.len() == 6).then_some(())
        },
    )
    .await;
    // It goes away holding what it applied, up to its last message's cursor.
    first.task.abort();
    let _ = (&mut first.task).await;
    let cursor = first.cursor().expect("messages carry cursors");
    let held = first.docs.lock().docs.clone();
    assert!(
        cursor.contains('.'),
        "a cursor with a stream position: {cursor}"
    );
    let held = Docs { docs: held };
    let before: BTreeMap<String, u64> = held
        .docs
        .iter()
        .map(|(t, (r, _))| (t.clone(), *r))
        .collect();
    // While it is away, every app rolls out a new image.
    for s in sims {
        let mut next = seed();
        next.image = "registry.example/web:2".into();
        s.apply(&workload_manifest(&next)).unwrap();
    }
    eventually(WITHIN, "r2 has every app's new image", || async {
        let served = r2.gateway.hub().list(&all);
        let rolled = served
            .iter()
            .filter(|d| d.topic.as_str().starts_with("apps/"))
            .filter(|d| d.doc.to_string().contains("registry.example/web:2"))
            .count();
        (rolled == 3).then_some(())
    })
    .await;
    let second = Subscriber::resume(&r2.url, &topics, Some(&cursor), held).await;
    let synced = eventually(WITHIN, "the resumed subscription is synced", || async {
        second
            .all
            .lock()
            .iter()
            .find(|m| m["type"] == "synced")
            .cloned()
    })
    .await;
    assert_eq!(synced["resumed"], true, "{synced}");
    let replay: Vec<Value> = second
        .all
        .lock()
        .iter()
        .take_while(|m| m["type"] != "synced")
        .cloned()
        .collect();
    assert!(
        !replay.is_empty(),
        "the changes made while away are replayed"
    );
    for m in &replay {
        let topic = m["topic"].as_str().unwrap_or_default();
        assert!(
            !(m["type"] == "snapshot" && before.contains_key(topic)),
            "{topic} was held and came again as a snapshot: {m}"
        );
    }
    // Every document ends as r2 serves it, at the same revision.
    eventually(WITHIN, "the resumed subscriber converges to r2", || async {
        let docs = second.docs.lock().docs.clone();
        for d in r2.gateway.hub().list(&all) {
            if docs.get(d.topic.as_str()) != Some(&(d.rev, (*d.doc).clone())) {
                return None;
            }
            let path = format!("/api/v1/{}", d.topic);
            if rest(&r2.url, &path).await.as_ref() != Some(&*d.doc) {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert!(
        !second.task.is_finished(),
        "the resumed reader is still reading"
    );
    eprintln!(
        "resumed on r2 from {cursor}: {} replayed ({} patches), then live",
        replay.len(),
        replay.iter().filter(|m| m["type"] == "patch").count()
    );
    second.task.abort();
    for r in live {
        r.token.cancel();
        r.gateway.stop().await;
    }
}

/// A task created on one replica for a member another replica runs is
/// stored in the shared bucket, run once by the member's owner (one scale
/// write reaches the member), and its progress shows on all three replicas
/// (REST and a WebSocket subscriber on `tasks/{id}` on each); the app's
/// transitional state shows everywhere too. Cancelling a task on a third
/// replica stops it where it runs. A replica started afterwards lists every
/// task as soon as it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_created_on_one_replica_runs_once_on_the_owner_and_shows_everywhere() {
    let Some(nats) = nats().await else {
        return;
    };
    let (host, [a, b, c], members, [r1, r2, r3]) = fleet(&nats).await;
    let sims = [&a, &b, &c];
    let live = [&r1, &r2, &r3];
    let owners = owners(&host, &live, &members).await;
    // A member, its owner, and a replica that does not run it.
    let (member, owner) = owners
        .iter()
        .map(|(m, o)| (m.clone(), *live.iter().find(|r| r.id == *o).unwrap()))
        .next()
        .unwrap();
    let elsewhere = *live.iter().find(|r| r.id != owner.id).unwrap();
    let sim_of = *sims.iter().find(|s| s.name() == member).unwrap();
    let mut web = seed();
    web.replicas = 2;
    sim_of.apply(&workload_manifest(&web)).unwrap();
    let app_path = format!("/api/v1/apps/{member}/shop/web");
    for r in live {
        eventually(WITHIN, "every replica has the app running", || async {
            let app = rest(&r.url, &app_path).await?;
            (app["state"] == "Running").then_some(())
        })
        .await;
    }
    // Three requests for one app, one through each replica at once: one
    // active task per app holds across replicas, so exactly one is accepted.
    sim_of
        .apply(&workload_manifest(&pulse_testkit::sim::deployment(
            "shop", "cart", 1,
        )))
        .unwrap();
    let cart_path = format!("/api/v1/apps/{member}/shop/cart");
    for r in live {
        eventually(
            WITHIN,
            "every replica has the second app running",
            || async {
                let app = rest(&r.url, &cart_path).await?;
                (app["state"] == "Running").then_some(())
            },
        )
        .await;
    }
    let at_once = live.map(|r| {
        http()
            .post(format!("{}/api/v1/tasks", r.url))
            .json(&json!({"type": "Stop", "cluster": member, "namespace": "shop", "app": "cart"}))
            .send()
    });
    let mut answers = Vec::new();
    let mut cart_id = String::new();
    for answer in futures::future::join_all(at_once).await {
        let answer = answer.unwrap();
        let status = answer.status().as_u16();
        let body: Value = answer.json().await.unwrap();
        if status == 201 {
            cart_id = body["id"].as_str().unwrap().to_string();
        }
        answers.push(status);
    }
    answers.sort_unstable();
    assert_eq!(
        answers,
        [201, 409, 409],
        "three requests for one app at once"
    );
    // The accepted one runs to its end before the Deployments' patches are counted.
    eventually(WITHIN, "the second app stopped", || async {
        let app = rest(&owner.url, &cart_path).await?;
        (app["state"] == "Stopped" && app.get("task").is_none()).then_some(())
    })
    .await;

    let patches_before = sim_of.stats().count("apps/deployments", "patch");
    let created = http()
        .post(format!("{}/api/v1/tasks", elsewhere.url))
        .json(&json!({"type": "Stop", "cluster": member, "namespace": "shop", "app": "web"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "accepted on {}", elsewhere.id);
    let task: Value = created.json().await.unwrap();
    let id = task["id"].as_str().unwrap().to_string();
    let topic = format!("tasks/{id}");
    let subs: Vec<Subscriber> = {
        let mut subs = Vec::new();
        for r in live {
            subs.push(Subscriber::open(&r.url, &[&topic]).await);
        }
        subs
    };
    for (r, sub) in live.iter().zip(&subs) {
        let done = eventually(
            WITHIN,
            "the task succeeds, seen on every replica",
            || async {
                let (_, doc) = sub.doc(&topic)?;
                (doc["status"] == "Succeeded").then_some(doc)
            },
        )
        .await;
        assert_eq!(done["progress"], 100, "{}: {done}", r.id);
        let listed = rest(&r.url, &format!("/api/v1/tasks/{id}")).await.unwrap();
        assert_eq!(listed["status"], "Succeeded", "REST on {}: {listed}", r.id);
        let seen = sub.seen.lock().get(&topic).cloned().unwrap_or_default();
        eprintln!(
            "{}: {} messages on {topic}: {:?}",
            r.id,
            seen.len(),
            seen.iter()
                .map(|m| format!("{} {}", m["type"], m["rev"]))
                .collect::<Vec<_>>()
        );
    }
    for r in live {
        eventually(WITHIN, "every replica shows the app stopped", || async {
            let app = rest(&r.url, &app_path).await?;
            (app["state"] == "Stopped").then_some(())
        })
        .await;
    }
    let patches = sim_of.stats().count("apps/deployments", "patch") - patches_before;
    assert_eq!(patches, 1, "the Stop task scaled the Deployment once");

    // A Start task created on the owner, cancelled through a third replica.
    let third = *live
        .iter()
        .find(|r| r.id != owner.id && r.id != elsewhere.id)
        .unwrap();
    // No room for pods: the Start task stays active until it is cancelled.
    sim_of.set_pod_capacity(Some(0));
    let created = http()
        .post(format!("{}/api/v1/tasks", owner.url))
        .json(&json!({"type": "Start", "cluster": member, "namespace": "shop", "app": "web"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let start: Value = created.json().await.unwrap();
    let start_id = start["id"].as_str().unwrap().to_string();
    let cancelled = http()
        .delete(format!("{}/api/v1/tasks/{start_id}", third.url))
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200, "cancelled through {}", third.id);
    for r in live {
        eventually(WITHIN, "every replica shows the task cancelled", || async {
            let t = rest(&r.url, &format!("/api/v1/tasks/{start_id}")).await?;
            (t["status"] == "Cancelled").then_some(())
        })
        .await;
    }

    // Another Start, still waiting for room when its replica stops: the
    // member's next owner takes the task over and finishes it.
    let created = http()
        .post(format!("{}/api/v1/tasks", elsewhere.url))
        .json(&json!({"type": "Start", "cluster": member, "namespace": "shop", "app": "web"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let again: Value = created.json().await.unwrap();
    let again_id = again["id"].as_str().unwrap().to_string();
    eventually(WITHIN, "the owner runs the task", || async {
        let t = rest(&owner.url, &format!("/api/v1/tasks/{again_id}")).await?;
        (t["status"] == "Running").then_some(())
    })
    .await;
    owner.token.cancel();
    owner.gateway.stop().await;
    let rest_of: Vec<&Replica> = live.iter().copied().filter(|r| r.id != owner.id).collect();
    let moved = self::owners(&host, &rest_of, &members).await;
    let next = moved[&member].clone();
    sim_of.set_pod_capacity(None);
    for r in &rest_of {
        let t = eventually(WITHIN, "the next owner finishes the task", || async {
            let t = rest(&r.url, &format!("/api/v1/tasks/{again_id}")).await?;
            (t["status"] == "Succeeded").then_some(t)
        })
        .await;
        eprintln!(
            "{}: task {again_id} {} after its owner stopped ({next} took over): {}",
            r.id, t["status"], t["message"]
        );
    }

    // A replica started now lists every task stored before it, as soon as
    // it serves: its watch of the bucket begins with what the bucket holds.
    let late = replica("r4", &host, &sims, &nats).await;
    let listed = rest(&late.url, "/api/v1/tasks").await.unwrap();
    let statuses: BTreeMap<&str, &str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| Some((t["id"].as_str()?, t["status"].as_str()?)))
        .collect();
    assert_eq!(
        statuses,
        BTreeMap::from([
            (cart_id.as_str(), "Succeeded"),
            (id.as_str(), "Succeeded"),
            (start_id.as_str(), "Cancelled"),
            (again_id.as_str(), "Succeeded"),
        ]),
        "the tasks listed by a replica started after them"
    );
    for sub in subs {
        sub.task.abort();
    }
    for r in rest_of.into_iter().chain([&late]) {
        r.token.cancel();
        r.gateway.stop().await;
    }
}
