//! One stream of changes over NATS JetStream (src/scale/stream.rs): a real
//! `nats-server -js` on loopback, a simulated host cluster holding the
//! Leases, three simulated members and three gateway replicas. A client on
//! any replica sees every member's documents, equal to what the owner
//! serves, and follows changes made on another replica's members.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the tests
//! say so and pass, unless `CI` is set: then they fail.

mod common;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{Replica as Docs, Ws, eventually, sim, sim_with, start_gateway, ws_next, ws_send};
use kube_pulse::gateway::Gateway;
use kube_pulse::scale::{LeaseSettings, NatsSettings, preferred_owner};
use kube_pulse_sim::{SimCluster, WorkloadSeed, workload_manifest};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Short Leases, so that failover takes seconds.
const LEASE: Duration = Duration::from_secs(3);
/// Generous bound for what a loaded 2-core machine does in a few lease
/// durations and relists.
const WITHIN: Duration = Duration::from_secs(120);

/// A `nats-server` with JetStream on a free loopback port, killed on drop.
struct Nats {
    binary: std::path::PathBuf,
    child: Option<Child>,
    port: u16,
    url: String,
    dir: tempfile::TempDir,
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Nats {
    /// Starts the server (again: same port, same store) and waits until
    /// it accepts connections.
    async fn start(&mut self) {
        let child = Command::new(&self.binary)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        self.child = Some(child);
        let port = self.port;
        eventually(WITHIN, "nats-server accepts connections", || async {
            TcpStream::connect(("127.0.0.1", port)).ok().map(drop)
        })
        .await;
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `nats-server` binary: on PATH, or where Debian installs it.
fn nats_server() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([std::path::PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("nats-server"))
        .find(|p| p.is_file())
}

/// Starts NATS, or None (with a message) when the binary is missing
/// outside CI; with `CI` set a missing binary fails the test.
async fn nats() -> Option<Nats> {
    let Some(binary) = nats_server() else {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
        assert!(
            !ci,
            "nats-server is not installed (scripts/test.sh installs it: apt-get install nats-server)"
        );
        eprintln!(
            "SKIPPED: nats-server is not installed; `apt-get install nats-server` (or scripts/test.sh) to run the scale-out tests"
        );
        return None;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut nats = Nats {
        binary,
        child: None,
        port,
        url: format!("nats://127.0.0.1:{port}"),
        dir: tempfile::tempdir().unwrap(),
    };
    nats.start().await;
    Some(nats)
}

/// The app the tests create on a member.
fn seed() -> WorkloadSeed {
    WorkloadSeed {
        kind: "Deployment".into(),
        namespace: "shop".into(),
        name: "web".into(),
        replicas: 1,
        image: "registry.example/web:1".into(),
    }
}

/// One gateway replica and what stops it.
struct Replica {
    id: String,
    url: String,
    gateway: Arc<Gateway>,
    token: CancellationToken,
}

async fn replica(id: &str, host: &SimCluster, members: &[&SimCluster], nats: &Nats) -> Replica {
    let token = CancellationToken::new();
    let leases = LeaseSettings {
        client: host.kube_config(),
        namespace: "default".into(),
        replica: id.into(),
        duration: LEASE,
    };
    let nats = NatsSettings::new(nats.url.clone());
    let (url, gateway) = start_gateway(
        members,
        |c| {
            c.leases = Some(leases);
            c.nats = Some(nats);
        },
        &token,
    )
    .await;
    Replica {
        id: id.into(),
        url,
        gateway: Arc::new(gateway),
        token,
    }
}

/// Waits until every member is held by the one of `live` that rendezvous
/// hashing prefers, which runs it (and no other replica does); returns
/// member → owner.
async fn owners(
    host: &SimCluster,
    live: &[&Replica],
    members: &[String],
) -> BTreeMap<String, String> {
    eventually(WITHIN, "every member owned by one live replica", || async {
        let holders = common::lease_holders(host).await;
        let mut owners = BTreeMap::new();
        for m in members {
            let holder = holders.get(m)?.clone()?;
            let running: Vec<&str> = live
                .iter()
                .filter(|r| r.gateway.pipeline().members().contains(m))
                .map(|r| r.id.as_str())
                .collect();
            let ids: Vec<String> = live.iter().map(|r| r.id.clone()).collect();
            if running != [holder.as_str()] || preferred_owner(m, &ids) != Some(&holder) {
                return None;
            }
            owners.insert(m.clone(), holder);
        }
        Some(owners)
    })
    .await
}

/// A WebSocket subscriber on `url` to `topics`, applying every message to
/// shared documents, and every message of each topic in order.
struct Subscriber {
    docs: Arc<parking_lot::Mutex<Docs>>,
    seen: Arc<parking_lot::Mutex<BTreeMap<String, Vec<Value>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Subscriber {
    async fn open(url: &str, topics: &[&str]) -> Self {
        let ws_url = format!("{}/api/v1/ws", url.replace("http://", "ws://"));
        let mut ws: Ws = tokio_tungstenite::connect_async(ws_url)
            .await
            .expect("websocket connects")
            .0;
        ws_send(
            &mut ws,
            json!({"op": "subscribe", "id": "s", "topics": topics}),
        )
        .await;
        let docs = Arc::new(parking_lot::Mutex::new(Docs::default()));
        let seen = Arc::new(parking_lot::Mutex::new(
            BTreeMap::<String, Vec<Value>>::new(),
        ));
        let (d, s) = (docs.clone(), seen.clone());
        let task = tokio::spawn(async move {
            loop {
                // ws_next fails the task after 20 s without a message;
                // probes change the cluster documents more often.
                let Ok(message) = ws_next(&mut ws).await else {
                    return;
                };
                if let Some(topic) = message["topic"].as_str() {
                    s.lock()
                        .entry(topic.to_string())
                        .or_default()
                        .push(message.clone());
                }
                d.lock().apply(&message);
            }
        });
        Self { docs, seen, task }
    }

    fn doc(&self, topic: &str) -> Option<(u64, Value)> {
        self.docs.lock().docs.get(topic).cloned()
    }
}

/// `GET {url}{path}`: the document, None on 404.
async fn rest(url: &str, path: &str) -> Option<Value> {
    let response = common::http()
        .get(format!("{url}{path}"))
        .send()
        .await
        .unwrap();
    if response.status() == 404 {
        return None;
    }
    assert_eq!(response.status(), 200, "{path}");
    Some(response.json().await.unwrap())
}

/// Waits until the subscriber's document of `topic` equals, at the same
/// revision, the owner's hub, and REST on `owner` serves that document.
async fn converged(
    sub: &Subscriber,
    owner: &Replica,
    topic: &str,
    path: &str,
    what: &str,
) -> Value {
    eventually(WITHIN, what, || async {
        let (rev, doc) = sub.doc(topic)?;
        let held = owner.gateway.hub().get(topic)?;
        if held.rev != rev || *held.doc != doc {
            return None;
        }
        (rest(&owner.url, path).await? == doc).then_some(doc)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_one_replica_sees_every_member_and_follows_changes_on_others() {
    let Some(mut nats) = nats().await else {
        return;
    };
    let host = sim().await;
    let named = |name: &'static str| sim_with(move |c| c.name = name.into());
    let (a, b, c) = (named("a").await, named("b").await, named("c").await);
    let sims = [&a, &b, &c];
    let members: Vec<String> = sims.iter().map(|s| s.name().to_string()).collect();
    let r1 = replica("r1", &host, &sims, &nats).await;
    let r2 = replica("r2", &host, &sims, &nats).await;
    let r3 = replica("r3", &host, &sims, &nats).await;
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
        published += common::metric(&r.url, "kube_pulse_stream_published_total").await;
        let consumed = common::metric(&r.url, "kube_pulse_stream_consumed_total").await;
        assert!(consumed > 0.0, "{} consumed nothing", r.id);
        let metrics = common::http()
            .get(format!("{}/metrics", r.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains("kube_pulse_stream_consumer_lag_messages{stream=\"KUBE_PULSE\"} "),
            "{}: no lag series",
            r.id
        );
        let ready = common::http()
            .get(format!("{}/readyz/Nats", r.url))
            .send()
            .await
            .unwrap();
        assert_eq!(
            ready.status(),
            200,
            "{}: {}",
            r.id,
            ready.text().await.unwrap()
        );
    }
    assert!(published >= 4.0, "{published}");

    // The broker goes away: readiness says so on every replica, and each
    // keeps serving the last documents it has, of every member.
    nats.kill();
    for r in live {
        let why = eventually(WITHIN, "/readyz/Nats fails without the broker", || async {
            let ready = common::http()
                .get(format!("{}/readyz/Nats", r.url))
                .send()
                .await
                .unwrap();
            (ready.status() == 500).then_some(ready.text().await.unwrap())
        })
        .await;
        assert!(why.contains("nats"), "{}: {why}", r.id);
    }
    let listed = rest(&r1.url, "/api/v1/clusters").await.unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 3, "{listed}");

    // It comes back (same port, same store): every replica is ready again,
    // and changes on the other replica's member flow to r1 again.
    nats.start().await;
    for r in live {
        eventually(WITHIN, "/readyz/Nats passes again", || async {
            let ready = common::http()
                .get(format!("{}/readyz/Nats", r.url))
                .send()
                .await
                .unwrap();
            (ready.status() == 200).then_some(())
        })
        .await;
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
    let host = sim().await;
    let named = |name: &'static str| sim_with(move |c| c.name = name.into());
    let (a, b, c) = (named("a").await, named("b").await, named("c").await);
    let sims = [&a, &b, &c];
    let members: Vec<String> = sims.iter().map(|s| s.name().to_string()).collect();
    let r1 = replica("r1", &host, &sims, &nats).await;
    let r2 = replica("r2", &host, &sims, &nats).await;
    let r3 = replica("r3", &host, &sims, &nats).await;
    let mut live = vec![r1, r2, r3];
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
    let (before, _) = sub.doc(&topic).unwrap();
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
    // status machine starts afresh (a new `since`), so it makes at least one
    // revision after `before`; it may have made all of them by `moved_at`.
    let doc = eventually(WITHIN, "the watcher follows the new owner", || async {
        let (rev, doc) = sub.doc(&topic)?;
        let held = next.gateway.hub().get(&topic)?;
        (rev > before && held.rev == rev && *held.doc == doc).then_some(doc)
    })
    .await;
    assert_eq!(rest(&next.url, &path).await.as_ref(), Some(&doc));
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
    eprintln!(
        "{topic} on {watcher}: revisions {revs:?} across the move from {stopping} to {}",
        next.id
    );
    sub.task.abort();
    for r in &live {
        r.token.cancel();
        r.gateway.stop().await;
    }
}

#[tokio::test]
async fn nats_needs_leases_and_a_read_only_karpor() {
    // Refused before anything connects: no NATS server is needed.
    let start = |config: kube_pulse::gateway::GatewayConfig| async move {
        let token = CancellationToken::new();
        let err = Gateway::start(config, &token)
            .await
            .expect_err("refused")
            .to_string();
        token.cancel();
        err
    };
    let nats = Some(NatsSettings::new("nats://127.0.0.1:1"));
    let err = start(kube_pulse::gateway::GatewayConfig {
        nats: nats.clone(),
        ..Default::default()
    })
    .await;
    assert!(err.contains("--nats needs Lease ownership"), "{err}");
    let host = sim().await;
    let err = start(kube_pulse::gateway::GatewayConfig {
        nats,
        leases: Some(LeaseSettings {
            client: host.kube_config(),
            namespace: "default".into(),
            replica: "r1".into(),
            duration: LEASE,
        }),
        karpor: Some(kube_pulse::karpor::KarporSettings {
            kubeconfig: "unused".into(),
            context: None,
            allow_exec: false,
            status: Some(Default::default()),
        }),
        ..Default::default()
    })
    .await;
    assert!(err.contains("--karpor-read-only"), "{err}");
}
