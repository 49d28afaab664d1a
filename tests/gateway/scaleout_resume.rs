//! Resume through a failover (docs/SCALE-OUT.md, "Cursors on every
//! replica"): two `kube-pulse serve` replicas with Leases over a real
//! `nats-server -js`, a subscriber's cursor from replica B; replica A killed
//! with SIGKILL (B takes over A's members), a member fault, a new replica C:
//! resuming on C with B's cursor replays exactly — `resumed: true`, no
//! snapshot, every patch on the revision held — since every change of
//! those topics is in the stream. Every wait bounded.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the tests
//! say so and pass, unless `CI` is set: then they fail.

use std::collections::BTreeMap;

use kube_pulse_sim::workload_manifest;
use pulse_testkit::docs::Replica as Docs;
use pulse_testkit::http::{rest, rest_docs};
use pulse_testkit::load::heavy;
use pulse_testkit::nats::nats;
use pulse_testkit::poll::eventually;
use pulse_testkit::scale::{
    Subscriber, WITHIN, lease_holders, preferred_holders, seed, three_members,
};
use pulse_testkit::sim::{clusters_yaml, sim};
use serde_json::{Value, json};

use super::scaleout_faults::Process;

/// What the subscribers follow: every member topic.
const TOPICS: [&str; 3] = ["clusters/*", "clusters/**", "apps/**"];

/// Waits until `sub` holds exactly the documents REST on `url` serves.
async fn holds_as_served(sub: &Subscriber, url: &str, what: &str) {
    eventually(WITHIN, what, || async {
        let served = rest_docs(url).await;
        let held: BTreeMap<String, Value> = sub
            .docs
            .lock()
            .docs
            .iter()
            .map(|(t, (_, d))| (t.clone(), d.clone()))
            .collect();
        (!served.is_empty() && held == served).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_resumes_exactly_on_a_new_replica_after_a_failover() {
    let _one = heavy().await;
    let Some(nats) = nats().await else {
        return;
    };
    let host = sim().await;
    let sims = three_members().await;
    let dir = tempfile::tempdir().unwrap();
    let clusters = clusters_yaml(sims.iter());
    // Every change of the test stays in the stream (probes change cluster
    // documents every second): the condition of an exact replay.
    std::fs::write(
        dir.path().join("config.yaml"),
        format!(
            "clusters:\n{clusters}probe: {{intervalSeconds: 1, timeoutSeconds: 1}}\nnats: {{historyPerTopic: 1000}}\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("host.kubeconfig"), host.kubeconfig("host")).unwrap();
    let mut processes: Vec<Process> = ["r1", "r2"]
        .iter()
        .map(|id| Process::start(id, dir.path(), &nats.url))
        .collect();
    let ids: Vec<String> = processes.iter().map(|p| p.id.clone()).collect();
    let members: Vec<String> = sims.iter().map(|s| s.name().to_string()).collect();
    let first = eventually(
        WITHIN,
        "each member held by its preferred replica",
        || async {
            let owners = preferred_holders(&host, &members, &ids).await?;
            for p in &processes {
                for m in &members {
                    let app = rest(&p.url, &format!("/api/v1/apps/{m}/shop/web")).await?;
                    if app["phase"] != "Running" {
                        return None;
                    }
                }
            }
            Some(owners)
        },
    )
    .await;
    // A: a replica that owns a member; B: the other one.
    let killed_id = first["a"].clone();
    let at = processes.iter().position(|p| p.id == killed_id).unwrap();
    let mut killed = processes.remove(at);
    let b = &processes[0];
    eprintln!("owners {first:?}; A = {killed_id}, B = {}", b.id);

    // A subscriber on B, away with its cursor.
    let mut away = Subscriber::open(&b.url, &TOPICS).await;
    holds_as_served(&away, &b.url, "the subscriber on B holds what B serves").await;
    away.task.abort();
    let _ = (&mut away.task).await;
    let cursor = away.cursor().expect("messages carry cursors");
    assert!(
        cursor.contains('.'),
        "a cursor with a stream position: {cursor}"
    );
    let held = Docs {
        docs: away.docs.lock().docs.clone(),
    };
    let before: Vec<String> = held.docs.keys().cloned().collect();

    // A killed: B takes its members over; a change made after the kill.
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    let mut scaled = workload_manifest(&seed());
    scaled["spec"]["replicas"] = json!(2);
    sims[0].apply(&scaled).unwrap();
    eventually(WITHIN, "B owns a and serves the change", || async {
        let holder = lease_holders(&host).await.get("a")?.clone()?;
        let app = rest(&b.url, "/api/v1/apps/a/shop/web").await?;
        (holder == b.id && app["ready"] == 2).then_some(())
    })
    .await;
    // A member fault.
    sims[1].set_faults(kube_pulse_sim::Faults {
        not_ready: true,
        ..Default::default()
    });
    eventually(WITHIN, "B serves b's fault", || async {
        let cluster = rest(&b.url, "/api/v1/clusters/b").await?;
        (cluster["phase"] != "Healthy").then_some(())
    })
    .await;
    // A new replica C, serving what B serves.
    processes.push(Process::start("r3", dir.path(), &nats.url));
    let (b, c) = (&processes[0], &processes[1]);
    eventually(WITHIN, "C serves b's fault and a's change", || async {
        let cluster = rest(&c.url, "/api/v1/clusters/b").await?;
        let app = rest(&c.url, "/api/v1/apps/a/shop/web").await?;
        (cluster["phase"] != "Healthy" && app["ready"] == 2).then_some(())
    })
    .await;

    // Resumed on C with B's cursor: an exact replay.
    let resumed = Subscriber::resume(&c.url, &TOPICS, Some(&cursor), held).await;
    let synced = eventually(WITHIN, "the resumed subscription is synced", || async {
        let all = resumed.all.lock();
        all.iter().find(|m| m["type"] == "synced").cloned()
    })
    .await;
    assert_eq!(synced["resumed"], true, "{synced}");
    holds_as_served(
        &resumed,
        &c.url,
        "the resumed subscriber holds what C serves",
    )
    .await;
    let all = resumed.all.lock().clone();
    let replay: Vec<&Value> = all.iter().take_while(|m| m["type"] != "synced").collect();
    let patches = replay.iter().filter(|m| m["type"] == "patch").count();
    eprintln!(
        "resumed on {} from {cursor} (B = {}): {} replayed, {patches} patches, {} messages in all",
        c.id,
        b.id,
        replay.len(),
        all.len()
    );
    assert!(patches > 0, "the changes made while away are replayed");
    for m in &all {
        assert_ne!(m["type"], "snapshot", "a snapshot on resume: {m}");
    }
    assert!(
        before
            .iter()
            .all(|t| resumed.docs.lock().docs.contains_key(t)),
        "a topic held went missing"
    );
    assert!(!resumed.task.is_finished(), "the resumed reader is reading");
    resumed.task.abort();
    sims[1].set_faults(kube_pulse_sim::Faults::default());
}
