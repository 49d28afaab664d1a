//! What the scale-out tests share (tests/scaleout.rs,
//! tests/scaleout_faults.rs): gateway replicas in this process with Leases
//! in a simulated host cluster and a NATS stream, who owns what, and
//! WebSocket subscribers that keep every message.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube_pulse::gateway::Gateway;
use kube_pulse::scale::{LeaseSettings, NatsSettings, preferred_owner};
use kube_pulse_sim::{SimCluster, WorkloadSeed};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::nats::Nats;
use super::{Replica as Docs, Ws, eventually, start_gateway, ws_next, ws_send};

/// Short Leases, so that failover takes seconds.
pub(crate) const LEASE: Duration = Duration::from_secs(3);
/// Generous bound for what a loaded 2-core machine does in a few lease
/// durations and relists.
pub(crate) const WITHIN: Duration = Duration::from_secs(120);

/// The app the tests create on a member.
pub(crate) fn seed() -> WorkloadSeed {
    WorkloadSeed {
        kind: "Deployment".into(),
        namespace: "shop".into(),
        name: "web".into(),
        replicas: 1,
        image: "registry.example/web:1".into(),
    }
}

/// One gateway replica and what stops it.
pub(crate) struct Replica {
    pub(crate) id: String,
    pub(crate) url: String,
    pub(crate) gateway: Arc<Gateway>,
    pub(crate) token: CancellationToken,
}

pub(crate) async fn replica(
    id: &str,
    host: &SimCluster,
    members: &[&SimCluster],
    nats: &Nats,
) -> Replica {
    replica_for(id, host, members, nats, LEASE).await
}

/// A replica whose Leases last `duration`.
pub(crate) async fn replica_for(
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
pub(crate) async fn replica_with(
    id: &str,
    host: &SimCluster,
    members: &[&SimCluster],
    nats: &Nats,
    duration: Duration,
    tweak: impl FnOnce(&mut kube_pulse::gateway::GatewayConfig),
) -> Replica {
    let nats = NatsSettings::new(nats.url.clone());
    replica_on(id, host, members, nats, duration, tweak).await
}

/// A replica whose Leases last `duration`, with the stream `nats` (a
/// cluster's servers, more copies of the stream), its configuration
/// changed by `tweak`.
pub(crate) async fn replica_on(
    id: &str,
    host: &SimCluster,
    members: &[&SimCluster],
    nats: NatsSettings,
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
            c.nats = Some(nats);
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
pub(crate) async fn three_members() -> [SimCluster; 3] {
    let named = |name: &'static str| {
        super::sim_with(move |c| {
            c.name = name.into();
            c.workloads = vec![seed()];
        })
    };
    [named("a").await, named("b").await, named("c").await]
}

/// Waits until every member is held by the one of `live` that rendezvous
/// hashing prefers, which runs it (and no other replica does); returns
/// member → owner.
pub(crate) async fn owners(
    host: &SimCluster,
    live: &[&Replica],
    members: &[String],
) -> BTreeMap<String, String> {
    eventually(WITHIN, "every member owned by one live replica", || async {
        let holders = super::lease_holders(host).await;
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
pub(crate) struct Subscriber {
    pub(crate) docs: Arc<parking_lot::Mutex<Docs>>,
    pub(crate) seen: Arc<parking_lot::Mutex<BTreeMap<String, Vec<Value>>>>,
    /// Every message of the subscription, in order (`synced` included).
    pub(crate) all: Arc<parking_lot::Mutex<Vec<Value>>>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Subscriber {
    pub(crate) async fn open(url: &str, topics: &[&str]) -> Self {
        Self::resume(url, topics, None, Docs::default()).await
    }

    /// Subscribes from `since` (a cursor), holding `docs` already.
    pub(crate) async fn resume(
        url: &str,
        topics: &[&str],
        since: Option<&str>,
        docs: Docs,
    ) -> Self {
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
    pub(crate) fn cursor(&self) -> Option<String> {
        let all = self.all.lock();
        let last = all.iter().rev().find_map(|m| m["cursor"].as_str())?;
        Some(last.to_string())
    }

    pub(crate) fn doc(&self, topic: &str) -> Option<(u64, Value)> {
        self.docs.lock().docs.get(topic).cloned()
    }
}

/// `GET {url}{path}`: the document, None on 404.
pub(crate) async fn rest(url: &str, path: &str) -> Option<Value> {
    let response = super::http()
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
pub(crate) async fn converged(
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

/// Every document REST on `url` serves, by topic: each cluster, its sync
/// documents and every app (what a subscriber to `clusters/**` and
/// `apps/**` rebuilds).
pub(crate) async fn rest_docs(url: &str) -> BTreeMap<String, Value> {
    let http = super::http();
    let get = |path: String| {
        let http = http.clone();
        let url = format!("{url}{path}");
        async move {
            let body: Value = http.get(&url).send().await.unwrap().json().await.unwrap();
            body["items"].as_array().cloned().unwrap_or_default()
        }
    };
    let mut docs = BTreeMap::new();
    for cluster in get("/api/v1/clusters".into()).await {
        let name = cluster["name"].as_str().unwrap().to_string();
        for sync in get(format!("/api/v1/clusters/{name}/sync")).await {
            let resource = &sync["resource"];
            let group = resource["group"]
                .as_str()
                .filter(|g| !g.is_empty())
                .unwrap_or("core");
            let topic = format!(
                "clusters/{name}/sync/{group}/{}/{}",
                resource["version"].as_str().unwrap(),
                resource["resource"].as_str().unwrap()
            );
            docs.insert(topic, sync);
        }
        docs.insert(format!("clusters/{name}"), cluster);
    }
    for app in get("/api/v1/apps".into()).await {
        let topic = format!(
            "apps/{}/{}/{}",
            app["cluster"].as_str().unwrap(),
            app["namespace"].as_str().unwrap(),
            app["app"].as_str().unwrap()
        );
        docs.insert(topic, app);
    }
    docs
}

/// Whether `topic` is one of `member`'s: its cluster document, its sync
/// documents or one of its apps.
pub(crate) fn of_member(topic: &str, member: &str) -> bool {
    let cluster = format!("clusters/{member}");
    topic == cluster
        || topic.starts_with(&format!("{cluster}/"))
        || topic.starts_with(&format!("apps/{member}/"))
}
