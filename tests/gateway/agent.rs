//! Members behind firewalls (src/agent/, src/scale/agents/, docs/AGENT.md):
//! the real `kube-pulse agent` binary watches a simulated member the hub
//! cannot reach (its address is in no hub configuration) and publishes its
//! status into a real `nats-server` whose users are locked per agent; two
//! gateway replicas own the member through Leases and serve it. Subscribers
//! on both replicas rebuild the member's documents from the wire and they
//! equal what a gateway pulling the member directly shows, through a scale,
//! a rollout, a crash loop and a Stop task run by the agent; the agent
//! killed (SIGKILL) makes the member `Unknown (AgentLost)` within the
//! grace and 5 s, its documents marked stale; started again, the member is
//! current within 10 s and an old cursor still resumes. An agent with
//! member a's credentials cannot publish on member b's subjects (NATS
//! refuses), and a forged report on b's subjects from a client with every
//! right (the replicas' user) is not served. Loopback only, every wait
//! bounded.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the tests
//! say so and pass, unless `CI` is set: then they fail.

use std::path::Path;
use std::time::{Duration, Instant};

use kube_pulse::pipeline::HeldMember;
use kube_pulse::scale::{NatsSettings, agents};
use pulse_testkit::binary::Binary;
use pulse_testkit::gateway::start_gateway;
use pulse_testkit::http::{create_task, rest};
use pulse_testkit::nats::{Nats, nats_with_config};
use pulse_testkit::poll::eventually;
use pulse_testkit::scale::{LEASE, Replica, Subscriber, WITHIN, replica_on};
use pulse_testkit::sim::{deploy, sim, sim_with};
use serde_json::{Value, json};

use super::nats_auth::{PASSWORD, deployed_conf, replicas_settings};

/// The hub's grace for a silent agent in these tests.
const GRACE: Duration = Duration::from_secs(4);
/// The member the agent pushes.
const MEMBER: &str = "edge";

/// A user nkey and its seed file in `dir`.
fn agent_identity(dir: &Path, name: &str) -> (nkeys::KeyPair, std::path::PathBuf) {
    let pair = nkeys::KeyPair::new_user();
    let path = dir.join(format!("{name}.nk"));
    std::fs::write(&path, format!("{}\n", pair.seed().unwrap())).unwrap();
    (pair, path)
}

/// deploy/nats/'s nats.conf (as the other NATS tests run it) with one user
/// entry per agent, as `kube-pulse agent-key` prints it.
fn conf_with_agents(agents: &[(&str, &str)]) -> String {
    let conf = deployed_conf();
    let entries: String = agents
        .iter()
        .map(|(member, key)| agents::nats_user_entry(member, key) + "\n")
        .collect();
    let users = "users: [";
    let at = conf.find(users).expect("a users list") + users.len();
    format!("{}\n{entries}{}", &conf[..at], &conf[at..])
}

async fn locked_nats_with_agents(agents: &[(&str, &str)]) -> Option<Nats> {
    nats_with_config(
        Some(&conf_with_agents(agents)),
        &[
            ("KUBE_PULSE_NATS_PASSWORD", PASSWORD),
            ("POD_NAME", "kube-pulse-nats-0"),
        ],
    )
    .await
}

/// The fields of an app document that say how it is, for comparing the
/// agent's view with a gateway pulling the member.
fn app_view(doc: &Value) -> Value {
    let workloads: Value = doc["workloads"]
        .as_object()
        .map(|w| {
            w.iter()
                .map(|(k, w)| {
                    (
                        k.clone(),
                        json!([w["expected"], w["ready"], w["health"], w["images"]]),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into()
        })
        .unwrap_or(Value::Null);
    json!({
        "phase": doc["phase"], "reason": doc["reason"], "state": doc["state"],
        "expected": doc["expected"], "ready": doc["ready"], "workloads": workloads,
    })
}

/// Waits until the pulled gateway's app document passes `settled`, and the
/// app document on both subscribers equals it in what it says; returns it.
async fn both_equal_truth(
    subs: &[&Subscriber],
    truth: &str,
    what: &str,
    settled: impl Fn(&Value) -> bool,
) -> Value {
    let topic = format!("apps/{MEMBER}/shop/web");
    eventually(WITHIN, what, || async {
        let truth = rest(truth, &format!("/api/v1/{topic}")).await?;
        if !settled(&truth) {
            return None;
        }
        let want = app_view(&truth);
        for sub in subs {
            let (_, doc) = sub.doc(&topic)?;
            if app_view(&doc) != want || doc.get("stale").is_some() {
                return None;
            }
        }
        Some(truth)
    })
    .await
}

/// Whether an app document is Running with `ready` pods of `image`, its
/// rollout done.
fn running(ready: u64, image: &'static str) -> impl Fn(&Value) -> bool {
    move |doc| {
        doc["phase"] == "Running"
            && doc["ready"] == ready
            && doc["workloads"]["Deployment/web"]["health"] == "Current"
            && doc["workloads"]["Deployment/web"]["images"]
                .to_string()
                .contains(image)
    }
}

/// The agent binary for `member`'s simulator at `kubeconfig`.
fn start_agent(nats: &Nats, seed: &Path, kubeconfig: &Path, hub_key: &str) -> Binary {
    Binary::start(&[
        "agent",
        "--member",
        MEMBER,
        "--nats",
        &nats.url,
        "--nats-nkey-seed",
        seed.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--heartbeat",
        "1",
        "--hub-key",
        hub_key,
        "--config",
        kubeconfig.with_file_name("agent.yaml").to_str().unwrap(),
    ])
}

async fn hub_replica(
    id: &str,
    host: &kube_pulse_sim::SimCluster,
    nats: &Nats,
    dir: &Path,
    agent: &str,
) -> Replica {
    let settings = NatsSettings {
        agent_grace: GRACE,
        ..replicas_settings(nats, dir)
    };
    let pushed = HeldMember::pushed(MEMBER, "", agent);
    // No member sources at all: the member is reached through its agent only.
    replica_on(id, host, &[], settings, LEASE, move |c| {
        c.pushed = vec![pushed]
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_member_is_served_on_every_replica_as_its_agent_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, seed) = agent_identity(dir.path(), "edge");
    let (other, _) = agent_identity(dir.path(), "other");
    let Some(nats) = locked_nats_with_agents(&[
        (MEMBER, &agent.public_key()),
        ("other", &other.public_key()),
    ])
    .await
    else {
        return;
    };
    let host = sim().await;
    let member = sim_with(|c| {
        c.name = MEMBER.into();
        c.workloads = vec![pulse_testkit::scale::seed()];
    })
    .await;
    let kubeconfig = dir.path().join("member.kubeconfig");
    std::fs::write(&kubeconfig, member.kubeconfig(MEMBER)).unwrap();
    std::fs::write(
        dir.path().join("agent.yaml"),
        "probe: {intervalSeconds: 1, timeoutSeconds: 1, successThreshold: 1}\n",
    )
    .unwrap();
    let hub_key = pulse_testkit::nats::signing_key().hub_key().public_key();

    // The truth: a gateway that reaches the member itself.
    let token = tokio_util::sync::CancellationToken::new();
    let (truth, _truth_gateway) = start_gateway(&[&member], |_| {}, &token).await;

    let r1 = hub_replica("r1", &host, &nats, dir.path(), &agent.public_key()).await;
    let r2 = hub_replica("r2", &host, &nats, dir.path(), &agent.public_key()).await;
    let mut agent_process = start_agent(&nats, &seed, &kubeconfig, &hub_key);
    let topics = ["clusters/*", "apps/**"];
    let s1 = Subscriber::open(&r1.url, &topics).await;
    let s2 = Subscriber::open(&r2.url, &topics).await;
    let subs = [&s1, &s2];
    let cluster = format!("clusters/{MEMBER}");
    eventually(
        WITHIN,
        "both replicas serve the member as pushed and healthy",
        || async {
            for sub in subs {
                let (_, doc) = sub.doc(&cluster)?;
                let ok = doc["phase"] == "Healthy"
                    && doc["mode"] == "push"
                    && doc["agent"]["connected"] == true
                    && doc["agent"]["version"] == env!("CARGO_PKG_VERSION");
                ok.then_some(())?;
            }
            Some(())
        },
    )
    .await;
    both_equal_truth(
        &subs,
        &truth,
        "the app as the member has it",
        running(1, "web:1"),
    )
    .await;

    // Scale, rollout, crash loop.
    deploy(&member, "web", 4, "nginx:1.27");
    both_equal_truth(&subs, &truth, "scaled to 4", running(4, "nginx:1.27")).await;
    deploy(&member, "web", 4, "nginx:1.28");
    both_equal_truth(&subs, &truth, "rolled out", running(4, "nginx:1.28")).await;
    member.set_image_faults([("nginx:crash", kube_pulse_sim::pods::ImageFault::Crash)]);
    deploy(&member, "web", 4, "nginx:crash");
    // A crash loop keeps changing restart counts: compare its phase and reason.
    let app = format!("apps/{MEMBER}/shop/web");
    let failing = eventually(WITHIN, "the member's app crash-loops", || async {
        let truth = rest(&truth, &format!("/api/v1/{app}")).await?;
        let message = truth["message"].as_str().unwrap_or_default();
        message.contains("pods CrashLoopBackOff").then_some(truth)
    })
    .await;
    eventually(WITHIN, "the crash loop shows on both replicas", || async {
        for sub in subs {
            let (_, doc) = sub.doc(&app)?;
            let message = doc["message"].as_str().unwrap_or_default();
            let same = doc["phase"] == failing["phase"]
                && doc["reason"] == failing["reason"]
                && message.contains("pods CrashLoopBackOff");
            same.then_some(())?;
        }
        Some(())
    })
    .await;
    deploy(&member, "web", 2, "nginx:1.28");
    both_equal_truth(&subs, &truth, "back to running", running(2, "nginx:1.28")).await;

    // A Stop task: asked on r2, acted on by the agent, progress from its reports.
    let stop = json!({"type": "Stop", "cluster": MEMBER, "namespace": "shop", "app": "web"});
    let id = create_task(&r2.url, stop).await;
    let task = eventually(
        WITHIN,
        "the Stop task succeeds through the agent",
        || async {
            let task = rest(&r1.url, &format!("/api/v1/tasks/{id}")).await?;
            (task["status"] == "Succeeded").then_some(task)
        },
    )
    .await;
    assert_eq!(task["progress"], 100, "{task}");
    both_equal_truth(&subs, &truth, "stopped", |t| t["phase"] == "Stopped").await;
    let states: Vec<Value> = s1
        .seen
        .lock()
        .get(&format!("apps/{MEMBER}/shop/web"))
        .into_iter()
        .flatten()
        .filter_map(|m| {
            m.pointer("/patch/state")
                .or(m.pointer("/doc/state"))
                .cloned()
        })
        .collect();
    assert!(
        states.contains(&json!("Stopping")),
        "the transitional state was shown: {states:?}"
    );

    // The agent killed outright: lost within the grace and 5 s.
    let cursor = s1.cursor().expect("a cursor");
    // Taken after the cursor: anything between is held twice, not missed.
    let held = pulse_testkit::docs::Replica {
        docs: s1.docs.lock().docs.clone(),
    };
    let killed = Instant::now();
    agent_process.child.kill().unwrap();
    let _ = agent_process.child.wait();
    eventually(
        GRACE + Duration::from_secs(5),
        "Unknown (AgentLost) within the grace",
        || async {
            for sub in subs {
                let (_, doc) = sub.doc(&cluster)?;
                (doc["phase"] == "Unknown"
                    && doc["reason"] == "AgentLost"
                    && doc["agent"]["connected"] == false)
                    .then_some(())?;
                let (_, app) = sub.doc(&format!("apps/{MEMBER}/shop/web"))?;
                (app["stale"]["reason"] == "AgentLost").then_some(())?;
            }
            Some(())
        },
    )
    .await;
    eprintln!("lost after {:?} (grace {GRACE:?})", killed.elapsed());

    // Meanwhile the member changes; the agent started again brings it.
    deploy(&member, "web", 3, "nginx:1.28");
    let settled = running(3, "nginx:1.28");
    eventually(WITHIN, "the member has changed meanwhile", || async {
        settled(&rest(&truth, &format!("/api/v1/apps/{MEMBER}/shop/web")).await?).then_some(())
    })
    .await;
    let restarted = Instant::now();
    let agent_process = start_agent(&nats, &seed, &kubeconfig, &hub_key);
    eventually(
        Duration::from_secs(10),
        "current again within 10 s",
        || async {
            let truth = rest(&truth, &format!("/api/v1/apps/{MEMBER}/shop/web")).await?;
            for sub in subs {
                let (_, doc) = sub.doc(&cluster)?;
                (doc["phase"] == "Healthy" && doc["agent"]["connected"] == true).then_some(())?;
                let (_, app) = sub.doc(&format!("apps/{MEMBER}/shop/web"))?;
                (app_view(&app) == app_view(&truth) && app.get("stale").is_none()).then_some(())?;
            }
            Some(())
        },
    )
    .await;
    eprintln!("current again after {:?}", restarted.elapsed());
    // The cursor from before the loss resumes on the other replica.
    let resumed = Subscriber::resume(&r2.url, &topics, Some(&cursor), held).await;
    both_equal_truth(
        &[&resumed],
        &truth,
        "resumed from the old cursor",
        running(3, "nginx:1.28"),
    )
    .await;
    let first = resumed.all.lock().first().cloned().unwrap_or_default();
    assert_ne!(first["type"], "reset", "the cursor resumed: {first}");
    drop(agent_process);
}
