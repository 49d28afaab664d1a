//! `kube-pulse demo --leases --nats URL --push-member prod` (src/demo/,
//! docs/AGENT.md "In the demo"): the real binary against a real
//! `nats-server` on loopback. prod is watched by the agent the demo runs in
//! its own process and served from what it publishes: its cluster document
//! says `mode: push`, `agent.connected: true` with its version, Healthy,
//! over REST and over SSE, where its heartbeats keep arriving; its sync
//! documents and apps are served, beside dev and staging, pulled as
//! always. A Stop task on prod runs through the agent (the hub key the
//! demo gives it). `PUT /_sim/agent {"running": false}` makes prod
//! `Unknown (AgentLost)` within the demo's grace, its apps `stale`;
//! `{"running": true}` brings it back (JSON bodies only, as every simulator
//! route). SIGTERM stops the demo, agent included, with success. A push
//! member the demo does not have is refused before anything listens.
//! Loopback only, every wait bounded.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the test
//! says so and passes, unless `CI` is set: then it fails.

use std::time::{Duration, Instant};

use pulse_testkit::binary::{Binary, spawn_binary, terminate};
use pulse_testkit::docs::Replica;
use pulse_testkit::http::{create_task, http, rest};
use pulse_testkit::nats::nats;
use pulse_testkit::poll::eventually;
use pulse_testkit::sse::SseReader;
use serde_json::{Value, json};

/// The member the demo's agent pushes.
const PUSHED: &str = "prod";
/// The members the demo's gateway pulls.
const PULLED: [&str; 2] = ["dev", "staging"];
/// Bound of each wait for the demo to settle on a loaded machine.
const WITHIN: Duration = Duration::from_secs(60);

/// Whether a cluster document is a push member, Healthy, its agent connected.
fn pushed_and_healthy(doc: &Value) -> bool {
    doc["mode"] == "push"
        && doc["phase"] == "Healthy"
        && doc["agent"]["connected"] == true
        && doc["agent"]["version"] == env!("CARGO_PKG_VERSION")
        && doc["agent"]["lastHeartbeatAt"].is_string()
}

/// PUT /_sim/agent: the demo's agent started or stopped.
async fn set_agent(url: &str, running: bool) {
    let response = http()
        .put(format!("{url}/_sim/agent"))
        .json(&json!({ "running": running }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let view: Value = response.json().await.unwrap();
    assert_eq!(view, json!({"member": PUSHED, "running": running}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_serves_a_member_pushed_by_its_agent_beside_pulled_ones() {
    let Some(nats) = nats().await else {
        return;
    };
    // Refused before anything listens: no such simulated cluster.
    let refused = tokio::task::spawn_blocking({
        let url = nats.url.clone();
        move || {
            let child = spawn_binary(&[
                "demo",
                "--listen",
                "127.0.0.1:0",
                "--no-scenario",
                "--leases",
                "--nats",
                &url,
                "--push-member",
                "nowhere",
            ]);
            child.wait_with_output().unwrap()
        }
    });
    let refused = tokio::time::timeout(WITHIN, refused)
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("--push-member nowhere: no such simulated cluster"),
        "{stderr}"
    );

    let mut demo = Binary::start(&[
        "demo",
        "--listen",
        "127.0.0.1:0",
        "--no-scenario",
        "--leases",
        "--nats",
        &nats.url,
        "--push-member",
        PUSHED,
    ]);
    let url = demo.url.clone();
    let cluster = format!("/api/v1/clusters/{PUSHED}");
    let pushed = eventually(
        WITHIN,
        "prod pushed, Healthy, its agent connected",
        || async {
            let doc = rest(&url, &cluster).await?;
            pushed_and_healthy(&doc).then_some(doc)
        },
    )
    .await;
    assert_eq!(pushed["name"], PUSHED, "{pushed}");
    for name in PULLED {
        let doc = eventually(WITHIN, "the pulled members Healthy", || async {
            let doc = rest(&url, &format!("/api/v1/clusters/{name}")).await?;
            (doc["phase"] == "Healthy").then_some(doc)
        })
        .await;
        assert!(
            doc.get("mode").is_none_or(|m| m == "pull") && doc.get("agent").is_none(),
            "{name} is pulled: {doc}"
        );
    }
    // The agent's documents: prod's sync registry and its apps.
    let apps = eventually(WITHIN, "prod's apps served, Running", || async {
        let list = rest(&url, &format!("/api/v1/apps?cluster={PUSHED}")).await?;
        let items = list["items"].as_array()?.clone();
        // The agent publishes its documents one by one: wait for web too.
        let running = items.iter().any(|a| a["app"] == "web")
            && items
                .iter()
                .all(|a| a["state"] == "Running" && a.get("stale").is_none());
        running.then_some(items)
    })
    .await;
    let names: Vec<&str> = apps.iter().filter_map(|a| a["app"].as_str()).collect();
    assert!(names.contains(&"web"), "{names:?}");
    // The same sync registry resources as a pulled member's, all syncing.
    eventually(WITHIN, "prod's sync documents as dev's", || async {
        let resources = |list: Value| -> Option<Vec<(Value, Value)>> {
            let mut items: Vec<(Value, Value)> = list["items"]
                .as_array()?
                .iter()
                .map(|s| (s["resource"].clone(), s["phase"].clone()))
                .collect();
            items.sort_by_key(|(r, _)| r.to_string());
            Some(items)
        };
        let prod = resources(rest(&url, &format!("/api/v1/clusters/{PUSHED}/sync")).await?)?;
        let dev = resources(rest(&url, "/api/v1/clusters/dev/sync").await?)?;
        let syncing = prod.len() >= 6 && prod.iter().all(|(_, p)| p == "Syncing");
        (syncing && prod == dev).then_some(())
    })
    .await;

    // Over SSE: the snapshot says push, and heartbeats keep arriving as patches.
    let mut sse = SseReader::open(
        &format!("{url}/api/v1/events?topic=clusters/{PUSHED}"),
        None,
    )
    .await;
    let mut held = Replica::default();
    for event in sse.until_synced().await {
        held.apply(&event.data);
    }
    let topic = format!("clusters/{PUSHED}");
    let (_, first) = held.docs.get(&topic).cloned().expect("prod's snapshot");
    assert!(pushed_and_healthy(&first), "{first}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let event = sse.next().await;
        held.apply(&event.data);
        let (_, doc) = &held.docs[&topic];
        if doc["agent"]["lastHeartbeatAt"] != first["agent"]["lastHeartbeatAt"] {
            assert!(pushed_and_healthy(doc), "{doc}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no new heartbeat over SSE in 20 s"
        );
    }

    // A task on the pushed member runs through its agent.
    let stop = json!({"type": "Stop", "cluster": PUSHED, "namespace": "shop", "app": "web"});
    let id = create_task(&url, stop).await;
    let task = eventually(WITHIN, "the Stop task on prod ends", || async {
        let task = rest(&url, &format!("/api/v1/tasks/{id}")).await?;
        (!["Pending", "Running"].contains(&task["status"].as_str()?)).then_some(task)
    })
    .await;
    assert_eq!(task["status"], "Succeeded", "{task}");
    eventually(WITHIN, "prod's web Stopped", || async {
        let app = rest(&url, &format!("/api/v1/apps/{PUSHED}/shop/web")).await?;
        (app["state"] == "Stopped").then_some(())
    })
    .await;

    // The agent stopped: lost within the demo's grace (and a heartbeat, and
    // slack). Its route has the simulator's guards: JSON bodies only.
    let plain = http()
        .put(format!("{url}/_sim/agent"))
        .header("content-type", "text/plain")
        .body(r#"{"running": false}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 415);
    set_agent(&url, false).await;
    let grace = kube_pulse::demo::AGENT_GRACE + kube_pulse::demo::AGENT_HEARTBEAT;
    let stopped = Instant::now();
    eventually(
        grace + Duration::from_secs(10),
        "prod Unknown (AgentLost)",
        || async {
            let doc = rest(&url, &cluster).await?;
            (doc["phase"] == "Unknown"
                && doc["reason"] == "AgentLost"
                && doc["agent"]["connected"] == false)
                .then_some(())?;
            let app = rest(&url, &format!("/api/v1/apps/{PUSHED}/shop/web")).await?;
            (app["stale"]["reason"] == "AgentLost").then_some(())
        },
    )
    .await;
    eprintln!("lost after {:?}", stopped.elapsed());
    for name in PULLED {
        let doc = rest(&url, &format!("/api/v1/clusters/{name}"))
            .await
            .unwrap();
        assert_eq!(doc["phase"], "Healthy", "{name}: {doc}");
    }
    // Started again: a new session, current at once.
    set_agent(&url, true).await;
    eventually(WITHIN, "prod back, its apps current", || async {
        let doc = rest(&url, &cluster).await?;
        pushed_and_healthy(&doc).then_some(())?;
        let app = rest(&url, &format!("/api/v1/apps/{PUSHED}/shop/web")).await?;
        (app["state"] == "Stopped" && app.get("stale").is_none()).then_some(())
    })
    .await;

    let status = tokio::task::spawn_blocking(move || terminate(&mut demo.child))
        .await
        .unwrap();
    assert!(status.success(), "the demo stops cleanly: {status:?}");
}
