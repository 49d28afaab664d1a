//! Scale-out: gateway replicas in this process with Leases in a simulated
//! host cluster and a NATS stream, who owns what, and WebSocket subscribers
//! that keep every message.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube_pulse::gateway::Gateway;
use kube_pulse::scale::{LeaseSettings, NatsSettings, preferred_owner};
use kube_pulse_sim::{SimCluster, WorkloadSeed};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::docs::Replica as Docs;
use crate::gateway::start_gateway;
use crate::http::rest;
use crate::nats::Nats;
use crate::poll::eventually;
use crate::ws::{Ws, ws_next, ws_send};

/// Short Leases, so that failover takes seconds.
pub const LEASE: Duration = Duration::from_secs(3);
/// Generous bound for what a loaded 2-core machine does in a few lease
/// durations and relists.
pub const WITHIN: Duration = Duration::from_secs(120);

/// The app the tests create on a member: Deployment `shop/web`, 1 replica.
pub fn seed() -> WorkloadSeed {
    crate::sim::deployment("shop", "web", 1)
}

/// One gateway replica and what stops it.
#[derive(Debug)]
pub struct Replica {
    /// The replica's name (its Lease holder identity).
    pub id: String,
    /// Its base URL.
    pub url: String,
    /// The gateway.
    pub gateway: Arc<Gateway>,
    /// Cancelling it stops the replica.
    pub token: CancellationToken,
}

/// A replica whose Leases last [`LEASE`], with the stream on `nats`.
pub async fn replica(id: &str, host: &SimCluster, members: &[&SimCluster], nats: &Nats) -> Replica {
    replica_for(id, host, members, nats, LEASE).await
}

/// A replica whose Leases last `duration`.
pub async fn replica_for(
    id: &str,
    host: &SimCluster,
    members: &[&SimCluster],
    nats: &Nats,
    duration: Duration,
) -> Replica {
    replica_with(id, host, members, nats, duration, |_| {}).await
}

/// A replica whose Leases last `duration`, its configuration changed by
/// `tweak` (another member source, say).
pub async fn replica_with(
    id: &str,
    host: &SimCluster,
    members: &[&SimCluster],
    nats: &Nats,
    duration: Duration,
    tweak: impl FnOnce(&mut kube_pulse::gateway::GatewayConfig),
) -> Replica {
    let nats = NatsSettings::new(nats.url.clone()).signed_with(crate::nats::signing_key());
    replica_on(id, host, members, nats, duration, tweak).await
}

/// A replica whose Leases last `duration`, with the stream `nats` (a
/// cluster's servers, more copies of the stream), its configuration
/// changed by `tweak`.
pub async fn replica_on(
    id: &str,
    host: &SimCluster,
    members: &[&SimCluster],
    nats: NatsSettings,
    duration: Duration,
    tweak: impl FnOnce(&mut kube_pulse::gateway::GatewayConfig),
) -> Replica {
    leased_replica(id, host, members, duration, |c| {
        c.nats = Some(nats);
        tweak(c);
    })
    .await
}

/// A replica whose Leases last `duration`, without a stream of changes,
/// its configuration changed by `tweak`.
pub async fn leased_replica(
    id: &str,
    host: &SimCluster,
    members: &[&SimCluster],
    duration: Duration,
    tweak: impl FnOnce(&mut kube_pulse::gateway::GatewayConfig),
) -> Replica {
    let token = CancellationToken::new();
    let leases = LeaseSettings {
        client: host.kube_config(),
        namespace: "default".into(),
        replica: id.into(),
        duration,
    };
    let (url, gateway) = start_gateway(
        members,
        |c| {
            c.leases = Some(leases);
            tweak(c);
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

/// Three simulated members `a`, `b` and `c`, each with the app [`seed`].
pub async fn three_members() -> [SimCluster; 3] {
    let named = |name: &'static str| {
        crate::sim::sim_with(move |c| {
            c.name = name.into();
            c.workloads = vec![seed()];
        })
    };
    [named("a").await, named("b").await, named("c").await]
}

/// Waits until every member is held by the one of `live` that rendezvous
/// hashing prefers, which runs it (and no other replica does); returns
/// member → owner.
pub async fn owners(
    host: &SimCluster,
    live: &[&Replica],
    members: &[String],
) -> BTreeMap<String, String> {
    eventually(WITHIN, "every member owned by one live replica", || async {
        let holders = lease_holders(host).await;
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
#[derive(Debug)]
pub struct Subscriber {
    /// The documents rebuilt from the messages.
    pub docs: Arc<parking_lot::Mutex<Docs>>,
    /// Every message of each topic, in order.
    pub seen: Arc<parking_lot::Mutex<BTreeMap<String, Vec<Value>>>>,
    /// Every message of the subscription, in order (`synced` included).
    pub all: Arc<parking_lot::Mutex<Vec<Value>>>,
    /// The task reading the socket.
    pub task: tokio::task::JoinHandle<()>,
}

impl Subscriber {
    /// Subscribes to `topics` on `url` from the start.
    pub async fn open(url: &str, topics: &[&str]) -> Self {
        Self::resume(url, topics, None, Docs::default()).await
    }

    /// Subscribes from `since` (a cursor), holding `docs` already.
    pub async fn resume(url: &str, topics: &[&str], since: Option<&str>, docs: Docs) -> Self {
        let ws_url = format!("{}/api/v1/ws", url.replace("http://", "ws://"));
        let mut ws: Ws = tokio_tungstenite::connect_async(ws_url)
            .await
            .expect("websocket connects")
            .0;
        let mut op = json!({"op": "subscribe", "id": "s", "topics": topics});
        if let Some(since) = since {
            op["since"] = json!(since);
        }
        ws_send(&mut ws, op).await;
        let docs = Arc::new(parking_lot::Mutex::new(docs));
        let seen = Arc::new(parking_lot::Mutex::new(
            BTreeMap::<String, Vec<Value>>::new(),
        ));
        let all = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (d, s, a) = (docs.clone(), seen.clone(), all.clone());
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
                a.lock().push(message);
            }
        });
        Self {
            docs,
            seen,
            all,
            task,
        }
    }

    /// The cursor of the last message with one.
    pub fn cursor(&self) -> Option<String> {
        let all = self.all.lock();
        let last = all.iter().rev().find_map(|m| m["cursor"].as_str())?;
        Some(last.to_string())
    }

    /// The `(rev, doc)` held of `topic`.
    pub fn doc(&self, topic: &str) -> Option<(u64, Value)> {
        self.docs.lock().docs.get(topic).cloned()
    }
}

/// Waits until the subscriber's document of `topic` equals, at the same
/// revision, the owner's hub, and REST on `owner` serves that document.
pub async fn converged(
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

/// Whether `topic` is one of `member`'s: its cluster document, its sync
/// documents or one of its apps.
pub fn of_member(topic: &str, member: &str) -> bool {
    let cluster = format!("clusters/{member}");
    topic == cluster
        || topic.starts_with(&format!("{cluster}/"))
        || topic.starts_with(&format!("apps/{member}/"))
}

/// The holder of every member Lease (`kube-pulse.io/member`) in the host
/// cluster's `default` namespace, by member.
pub async fn lease_holders(
    host: &SimCluster,
) -> std::collections::BTreeMap<String, Option<String>> {
    use k8s_openapi::api::coordination::v1::Lease;
    let api: kube::Api<Lease> = kube::Api::namespaced(host.client(), "default");
    let leases = api.list(&Default::default()).await.unwrap();
    leases
        .items
        .into_iter()
        .filter_map(|l| {
            let member = l.metadata.annotations?.get("kube-pulse.io/member")?.clone();
            Some((member, l.spec?.holder_identity))
        })
        .collect()
}

/// Each member's Lease holder, when every one of `members` is held by its
/// preferred replica among `ids`; None while one is not.
pub async fn preferred_holders(
    host: &SimCluster,
    members: &[String],
    ids: &[String],
) -> Option<std::collections::BTreeMap<String, String>> {
    let holders = lease_holders(host).await;
    let mut owners = std::collections::BTreeMap::new();
    for m in members {
        let holder = holders.get(m)?.clone()?;
        if kube_pulse::scale::preferred_owner(m, ids) != Some(&holder) {
            return None;
        }
        owners.insert(m.clone(), holder);
    }
    Some(owners)
}

/// Gateway replicas by id.
pub type Gateways = [(String, Arc<Gateway>)];

/// The replicas whose gateways are polled for a member on two of them, by id.
pub type Watched = Arc<parking_lot::Mutex<Vec<(String, Arc<Gateway>)>>>;

/// Polls `watched` every 10 ms until `stop`; fails on any moment at which
/// a member runs on two replicas (`runs_on`: the ids of those running it).
/// Returns the number of polls.
pub fn watch_for_two_owners(
    watched: Watched,
    members: Vec<String>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    runs_on: fn(&Gateways, &str) -> Vec<String>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut polls = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let replicas = watched.lock().clone();
            for m in &members {
                let on = runs_on(&replicas, m);
                assert!(on.len() <= 1, "{m} runs on {on:?} at once");
            }
            polls += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        polls
    })
}
