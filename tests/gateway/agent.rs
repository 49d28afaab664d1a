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
//! right is not served. A second agent of the member stands by on its
//! Lease and takes over when the first dies. Loopback only, every wait
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
use pulse_testkit::nats::Nats;
use pulse_testkit::poll::eventually;
use pulse_testkit::scale::{LEASE, Replica, Subscriber, WITHIN, lease_holders, replica_on};
use pulse_testkit::sim::{deploy, sim, sim_with};
use serde_json::{Value, json};

use super::nats_auth::{deployed_conf, replicas_settings};

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

/// The password of a user with every right in the account (an operator's,
/// say): broader rights than any agent or replica.
const ADMIN_PASSWORD: &str = "kp-test-admin-pw";

/// deploy/nats/'s nats.conf (as the other NATS tests run it) with one user
/// entry per agent, as `kube-pulse agent-key` prints it, and a user
/// `admin` with every right.
fn conf_with_agents(agents: &[(&str, &str)]) -> String {
    let conf = deployed_conf();
    let mut entries: String = agents
        .iter()
        .map(|(member, key)| agents::nats_user_entry(member, key) + "\n")
        .collect();
    entries.push_str(&format!("{{ user: admin, password: {ADMIN_PASSWORD} }}\n"));
    let users = "users: [";
    let at = conf.find(users).expect("a users list") + users.len();
    format!("{}\n{entries}{}", &conf[..at], &conf[at..])
}

async fn locked_nats_with_agents(agents: &[(&str, &str)]) -> Option<Nats> {
    super::nats_auth::locked_nats_with(&conf_with_agents(agents)).await
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
fn start_agent(nats: &Nats, seed: &Path, kubeconfig: &Path, hub_key: &str, id: &str) -> Binary {
    Binary::start(&[
        "--log-format",
        "json",
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
        "--agent-id",
        id,
        "--lease-duration",
        "3",
    ])
}

async fn hub_replica(
    id: &str,
    host: &kube_pulse_sim::SimCluster,
    nats: &Nats,
    dir: &Path,
    agent: &str,
    on_demand: bool,
) -> Replica {
    let settings = NatsSettings {
        agent_grace: GRACE,
        ..replicas_settings(nats, dir)
    };
    let pushed = HeldMember::pushed(MEMBER, "", agent);
    // No member sources at all: the member is reached through its agent only.
    replica_on(id, host, &[], settings, LEASE, move |c| {
        c.pushed = vec![pushed];
        c.pipeline.source.pod_watch.on_demand = on_demand;
        c.pipeline.source.pod_watch.linger_seconds = 1;
    })
    .await
}

/// What every test here runs: a locked nats-server with the users of the
/// agents of `edge` and `other`, a host cluster for the Leases, the member
/// `edge` (the app shop/web), its kubeconfig and the agent's config file,
/// and two hub replicas that have `edge` as a push member (with
/// [`setup_on_demand`], pods on demand on the replicas and the agent).
struct Setup {
    _dir: tempfile::TempDir,
    nats: Nats,
    member: kube_pulse_sim::SimCluster,
    agent: nkeys::KeyPair,
    other: nkeys::KeyPair,
    seed: std::path::PathBuf,
    kubeconfig: std::path::PathBuf,
    hub_key: String,
    r1: Replica,
    r2: Replica,
    _host: kube_pulse_sim::SimCluster,
}

async fn setup() -> Option<Setup> {
    setup_with(false).await
}

async fn setup_on_demand() -> Option<Setup> {
    setup_with(true).await
}

async fn setup_with(on_demand: bool) -> Option<Setup> {
    let dir = tempfile::tempdir().unwrap();
    let (agent, seed) = agent_identity(dir.path(), "edge");
    let (other, _) = agent_identity(dir.path(), "other");
    let nats = locked_nats_with_agents(&[
        (MEMBER, &agent.public_key()),
        ("other", &other.public_key()),
    ])
    .await?;
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
        format!(
            "probe: {{intervalSeconds: 1, timeoutSeconds: 1, successThreshold: 1}}\n\
             podWatch: {{onDemand: {on_demand}}}\n"
        ),
    )
    .unwrap();
    let hub_key = pulse_testkit::nats::signing_key().hub_key().public_key();
    let key = agent.public_key();
    let r1 = hub_replica("r1", &host, &nats, dir.path(), &key, on_demand).await;
    let r2 = hub_replica("r2", &host, &nats, dir.path(), &key, on_demand).await;
    Some(Setup {
        _dir: dir,
        nats,
        member,
        agent,
        other,
        seed,
        kubeconfig,
        hub_key,
        r1,
        r2,
        _host: host,
    })
}

impl Setup {
    fn agent(&self, id: &str) -> Binary {
        start_agent(&self.nats, &self.seed, &self.kubeconfig, &self.hub_key, id)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_member_is_served_on_every_replica_as_its_agent_sees_it() {
    let Some(setup) = setup().await else {
        return;
    };
    let Setup {
        nats,
        member,
        seed,
        kubeconfig,
        hub_key,
        r1,
        r2,
        ..
    } = &setup;
    // The truth: a gateway that reaches the member itself.
    let token = tokio_util::sync::CancellationToken::new();
    let (truth, _truth_gateway) = start_gateway(&[member], |_| {}, &token).await;

    let mut agent_process = start_agent(nats, seed, kubeconfig, hub_key, "edge-agent-0");
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
    deploy(member, "web", 4, "nginx:1.27");
    both_equal_truth(&subs, &truth, "scaled to 4", running(4, "nginx:1.27")).await;
    deploy(member, "web", 4, "nginx:1.28");
    both_equal_truth(&subs, &truth, "rolled out", running(4, "nginx:1.28")).await;
    member.set_image_faults([("nginx:crash", kube_pulse_sim::pods::ImageFault::Crash)]);
    deploy(member, "web", 4, "nginx:crash");
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
    deploy(member, "web", 2, "nginx:1.28");
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
    deploy(member, "web", 3, "nginx:1.28");
    let settled = running(3, "nginx:1.28");
    eventually(WITHIN, "the member has changed meanwhile", || async {
        settled(&rest(&truth, &format!("/api/v1/apps/{MEMBER}/shop/web")).await?).then_some(())
    })
    .await;
    let restarted = Instant::now();
    // Its container restarted: the same pod name, so it takes its Lease at once.
    let agent_process = start_agent(nats, seed, kubeconfig, hub_key, "edge-agent-0");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_watches_its_members_pods_while_a_client_of_any_replica_looks() {
    let Some(setup) = setup_on_demand().await else {
        return;
    };
    let pod_watches = || setup.member.stats().count("core/pods", "watch");
    let event_watches = || setup.member.stats().count("core/events", "watch");
    let _agent = setup.agent("edge-agent");
    served_connected(&setup, "the agent publishes", WITHIN).await;
    let app = format!("/api/v1/apps/{MEMBER}/shop/web");
    // Nobody looks: the agent watches no pods, and says so.
    let doc = eventually(WITHIN, "the app, without pod detail", || async {
        let doc = rest(&setup.r1.url, &app).await?;
        (doc["ready"] == 1).then_some(doc)
    })
    .await;
    assert_eq!(doc["podsWatched"], false, "{doc:#}");
    assert_eq!((pod_watches(), event_watches()), (0, 0));

    // A client of the replica that does not own the member looks at the
    // member's apps: the owner hears it, tells the agent, which watches
    // its pods, and the detail reaches the client.
    let owner = eventually(WITHIN, "the member owned", || async {
        lease_holders(&setup._host).await.remove(MEMBER).flatten()
    })
    .await;
    let other = if owner == setup.r1.id {
        &setup.r2
    } else {
        &setup.r1
    };
    eprintln!("{MEMBER} owned by {owner}, looked at on {}", other.id);
    let sub = Subscriber::open(&other.url, &[&format!("apps/{MEMBER}/**")]).await;
    let topic = format!("apps/{MEMBER}/shop/web");
    eventually(WITHIN, "the pod detail reaches the subscriber", || async {
        let (_, doc) = sub.doc(&topic)?;
        (doc["pods"]["total"] == 1 && doc.get("podsWatched").is_none()).then_some(())
    })
    .await;
    assert_eq!((pod_watches(), event_watches()), (1, 1));

    // The client goes: after the linger the agent stops the watches and
    // the documents say so on every replica.
    sub.task.abort();
    drop(sub);
    for replica in [&setup.r1, &setup.r2] {
        eventually(WITHIN, "podsWatched: false again", || async {
            let doc = rest(&replica.url, &app).await?;
            (doc["podsWatched"] == false && doc.get("pods").is_none()).then_some(())
        })
        .await;
    }
    assert_eq!((pod_watches(), event_watches()), (1, 1), "no new watch");
}

/// Whether both replicas serve `edge` as Healthy with its agent connected.
async fn served_connected(setup: &Setup, what: &str, within: Duration) {
    let cluster = format!("clusters/{MEMBER}");
    eventually(within, what, || async {
        for replica in [&setup.r1, &setup.r2] {
            let doc = rest(&replica.url, &format!("/api/v1/{cluster}")).await?;
            (doc["phase"] == "Healthy" && doc["agent"]["connected"] == true).then_some(())?;
        }
        Some(())
    })
    .await;
}

/// The HTTP status of `/readyz` on `url`.
async fn ready(url: &str) -> u16 {
    pulse_testkit::http::http()
        .get(format!("{url}/readyz"))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_of_a_member_stands_by_and_takes_over() {
    let Some(setup) = setup().await else {
        return;
    };
    let mut first = setup.agent("edge-agent-a");
    served_connected(&setup, "the first agent publishes", WITHIN).await;
    let second = setup.agent("edge-agent-b");
    // Alive, not ready, watching nothing: the Lease is the first one's.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(ready(&second.url).await, 503, "the second agent stands by");
    let livez = pulse_testkit::http::http()
        .get(format!("{}/livez", second.url))
        .send()
        .await
        .unwrap();
    assert_eq!(livez.status(), 200);
    let metrics = pulse_testkit::http::get_text(&format!("{}/metrics", second.url)).await;
    assert!(
        !metrics.contains("kube_pulse_agent_reports_total{kind=\"doc\"}"),
        "a standing-by agent publishes nothing"
    );
    assert_eq!(ready(&first.url).await, 200);
    // The first one killed outright: the second takes the Lease once it
    // expires, and the member stays served.
    first.child.kill().unwrap();
    let _ = first.child.wait();
    let killed = Instant::now();
    eventually(
        Duration::from_secs(15),
        "the second agent takes over",
        || async { (ready(&second.url).await == 200).then_some(()) },
    )
    .await;
    eprintln!("taken over after {:?}", killed.elapsed());
    served_connected(
        &setup,
        "the second agent publishes",
        Duration::from_secs(15),
    )
    .await;
    let lease = setup.member.kube_config();
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(kube::Client::try_from(lease).unwrap(), "default");
    let held = leases
        .get(&kube_pulse::agent::lease_name(MEMBER))
        .await
        .unwrap();
    assert_eq!(
        held.spec.unwrap().holder_identity.as_deref(),
        Some("edge-agent-b")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_on_a_members_subjects_from_anyone_but_its_agent_are_not_served() {
    let Some(setup) = setup().await else {
        return;
    };
    let _agent = setup.agent("edge-agent-0");
    served_connected(&setup, "the agent publishes", WITHIN).await;
    let app = format!("/api/v1/apps/{MEMBER}/shop/web");
    let before = eventually(WITHIN, "the app is served", || async {
        rest(&setup.r1.url, &app).await
    })
    .await;
    let report = |session: u64, topic: &str, doc: Value| {
        let report = agents::wire::Report {
            member: MEMBER.into(),
            session,
            seq: 1,
            body: agents::wire::Body::Doc {
                topic: topic.into(),
                doc: Some(doc),
            },
        };
        (report.subject(), serde_json::to_vec(&report).unwrap())
    };
    // A session started after the running agent's (5 minutes ahead, within
    // what the hub allows for clocks): it would win over the agent's
    // reports if believed.
    let forged = json!({"cluster": MEMBER, "namespace": "shop", "app": "web", "phase": "Panic", "state": "Panic"});
    let ahead = chrono::Utc::now().timestamp_millis() as u64 + 5 * 60 * 1000;
    let (subject, payload) = report(ahead, &format!("apps/{MEMBER}/shop/web"), forged.clone());

    // The other member's agent, with its own credentials: NATS refuses.
    let other_seed = setup.other.seed().unwrap();
    let other = async_nats::ConnectOptions::with_nkey(other_seed)
        .custom_inbox_prefix("_INBOX_other")
        .connect(&setup.nats.url)
        .await
        .unwrap();
    let published = async_nats::jetstream::new(other.clone())
        .publish(subject.clone(), payload.clone().into())
        .await;
    let acked = match published {
        Ok(ack) => tokio::time::timeout(Duration::from_secs(5), ack)
            .await
            .map(|a| a.is_ok()),
        Err(_) => Ok(false),
    };
    assert!(
        !matches!(acked, Ok(true)),
        "NATS took another member's report from agent other"
    );

    // A user with every right: signed with another agent's key, with a
    // made-up signature, and unsigned.
    let broad = async_nats::ConnectOptions::new()
        .user_and_password("admin".into(), ADMIN_PASSWORD.into())
        .connect(&setup.nats.url)
        .await
        .unwrap();
    let js = async_nats::jetstream::new(broad);
    let signed_by = |key: &nkeys::KeyPair| agents::wire::sign_report(key, &subject, &payload);
    // Each on a subject of its own: a new owner reading the latest report of
    // every subject (a move between replicas) meets all three.
    let elsewhere = |app: &str| {
        let (subject, payload) = report(
            u64::MAX / 2,
            &format!("apps/{MEMBER}/shop/{app}"),
            forged.clone(),
        );
        let signature = agents::wire::sign_report(&setup.other, &subject, &payload);
        (subject, payload, signature)
    };
    let (s1, p1, _) = elsewhere("forged-1");
    let (s2, p2, _) = elsewhere("forged-2");
    let forgeries = [
        (
            subject.clone(),
            payload.clone(),
            Some(signed_by(&setup.other)),
        ),
        (s1, p1, Some("bm90LWEtc2lnbmF0dXJl".to_string())),
        (s2, p2, None),
    ];
    for (subject, payload, signature) in forgeries {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(signature) = signature {
            headers.insert(agents::wire::SIGNATURE_HEADER, signature.as_str());
        }
        js.publish_with_headers(subject, headers, payload.into())
            .await
            .unwrap()
            .await
            .expect("the stream takes it: only the hub's check stands in the way");
    }
    let rejected = |url: String| async move {
        let text = pulse_testkit::http::get_text(&format!("{url}/metrics")).await;
        text.lines()
            .filter(|l| l.starts_with("kube_pulse_agent_rejected_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    eventually(WITHIN, "the owner counts the three forgeries", || async {
        let counted = rejected(setup.r1.url.clone()).await + rejected(setup.r2.url.clone()).await;
        (counted >= 3.0).then_some(())
    })
    .await;
    // A real change afterwards still flows; nothing forged was served.
    deploy(&setup.member, "web", 2, "registry.example/web:1");
    for replica in [&setup.r1, &setup.r2] {
        let doc = eventually(WITHIN, "the real change is served", || async {
            let doc = rest(&replica.url, &app).await?;
            (doc["ready"] == 2).then_some(doc)
        })
        .await;
        assert_ne!(doc["phase"], "Panic", "{doc}");
        for forged in ["forged-1", "forged-2"] {
            let path = format!("/api/v1/apps/{MEMBER}/shop/{forged}");
            assert!(
                rest(&replica.url, &path).await.is_none(),
                "{path} is not served"
            );
        }
    }
    assert_ne!(before["phase"], "Panic");
    // The same report signed with the member's agent key is believed: the
    // key is what the hub checks.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        agents::wire::SIGNATURE_HEADER,
        signed_by(&setup.agent).as_str(),
    );
    js.publish_with_headers(subject.clone(), headers, payload.clone().into())
        .await
        .unwrap()
        .await
        .unwrap();
    eventually(WITHIN, "the agent's own report is served", || async {
        (rest(&setup.r1.url, &app).await?["phase"] == "Panic").then_some(())
    })
    .await;
}
