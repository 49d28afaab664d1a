//! Live queries end to end (src/query/, docs/PROTOCOL.md "Live queries"):
//! members `a` and `b` with four apps each, a gateway with tokens of three
//! grants (all, member a, namespace b/shop), and for each token live queries
//! over WebSocket and SSE: a filtered sorted window, a window with an
//! offset and a projection, and counts by state. A seeded sequence of
//! changes (scale to zero, scale up, a failing image, a new app) runs on the
//! simulated members; after each, every client's window rebuilt from the
//! wire alone equals the query evaluated here, from scratch, on what REST
//! serves to the same token. Bad queries get `bad_query`, naming the
//! member. Loopback only, every wait bounded.

use std::sync::Arc;
use std::time::Duration;

use kube_pulse::auth::{self, Auth, Mode};
use kube_pulse::gateway;
use kube_pulse::http::router::GatewayState;
use kube_pulse::tasks::{TaskSettings, Tasks};
use kube_pulse::transports::TransportConfig;
use kube_pulse_sim::{SimCluster, WorkloadSeed, workload_manifest};
use pulse_testkit::docs::QueryWindow;
use pulse_testkit::gateway::{doc_where, pipeline, serve};
use pulse_testkit::http::{http, rest_apps};
use pulse_testkit::sim::{deployment, sim_with};
use pulse_testkit::sse::SseReader;
use pulse_testkit::ws::{Ws, ws_connect_with_token, ws_next, ws_send};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);
const ROOT: &str = "root-token-0123456789";
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";

/// The apps of each member: (namespace, name, replicas).
const APPS: [(&str, &str, u32); 4] = [
    ("shop", "web", 2),
    ("shop", "cart", 1),
    ("analytics", "ingest", 3),
    ("analytics", "db", 1),
];

fn token_auth() -> Arc<Auth> {
    let file = auth::tokens::TokenFile::parse(&format!(
        "tokens:\n\
         - {{subject: root, token: {ROOT}, read: ['*']}}\n\
         - {{subject: alice, token: {ALICE}, read: [a]}}\n\
         - {{subject: bob, token: {BOB}, read: [b/shop]}}\n"
    ))
    .unwrap();
    Auth::new(Mode::Tokens(file))
}

/// A query as the test evaluates it, independently of the gateway: which
/// documents pass, their order, the window, the projection, the grouping.
struct Query {
    id: &'static str,
    /// What the client sends (beside `op`, `id` and `topics`).
    members: Value,
    passes: fn(&Value) -> bool,
    /// Compares two documents (ties broken by topic after).
    order: fn(&Value, &Value) -> std::cmp::Ordering,
    offset: usize,
    limit: usize,
    fields: &'static [&'static str],
    group_by: Option<&'static str>,
}

fn queries() -> Vec<Query> {
    let by_state = |a: &Value, b: &Value| a["state"].as_str().cmp(&b["state"].as_str());
    vec![
        Query {
            id: "not-running",
            members: json!({"filter": {"ne": ["/state", "Running"]}, "sort": ["/state"], "limit": 3}),
            passes: |d| d["state"] != "Running",
            order: by_state,
            offset: 0,
            limit: 3,
            fields: &[],
            group_by: None,
        },
        Query {
            id: "busiest",
            members: json!({
                "filter": {"or": [{"eq": ["/cluster", "a"]}, {"gte": ["/expected", 2]}]},
                "sort": ["-/expected", "/app"],
                "limit": 3,
                "offset": 1,
                "fields": ["/expected", "/state"],
            }),
            passes: |d| d["cluster"] == "a" || d["expected"].as_i64().unwrap_or(0) >= 2,
            order: |a, b| {
                let n = |d: &Value| d["expected"].as_i64().unwrap_or(i64::MIN);
                n(b).cmp(&n(a))
                    .then(a["app"].as_str().cmp(&b["app"].as_str()))
            },
            offset: 1,
            limit: 3,
            fields: &["expected", "state"],
            group_by: None,
        },
        Query {
            id: "by-state",
            members: json!({"groupBy": "/state"}),
            passes: |_| true,
            order: by_state,
            offset: 0,
            limit: 0,
            fields: &[],
            group_by: Some("state"),
        },
    ]
}

/// What `query` holds over `apps` (topic → document) from scratch.
fn evaluate(query: &Query, apps: &[(String, Value)]) -> QueryWindow {
    let mut matching: Vec<&(String, Value)> =
        apps.iter().filter(|(_, d)| (query.passes)(d)).collect();
    matching.sort_by(|(ta, a), (tb, b)| (query.order)(a, b).then(ta.cmp(tb)));
    let groups = query.group_by.map(|member| {
        let mut counts = serde_json::Map::new();
        for (_, d) in &matching {
            let key = d[member].as_str().unwrap_or("").to_string();
            let n = counts.get(&key).and_then(Value::as_u64).unwrap_or(0);
            counts.insert(key, json!(n + 1));
        }
        Value::Object(counts)
    });
    let rows = matching
        .iter()
        .skip(query.offset)
        .take(query.limit)
        .map(|(topic, doc)| {
            let doc = if query.fields.is_empty() {
                doc.clone()
            } else {
                let kept = query
                    .fields
                    .iter()
                    .filter_map(|f| doc.get(*f).map(|v| ((*f).to_string(), v.clone())));
                Value::Object(kept.collect())
            };
            (topic.clone(), 0, doc)
        })
        .collect();
    QueryWindow {
        rows,
        total: matching.len() as u64,
        groups,
    }
}

/// The window without revisions (REST lists carry none).
fn unrevised(window: &QueryWindow) -> QueryWindow {
    QueryWindow {
        rows: window
            .rows
            .iter()
            .map(|(t, _, d)| (t.clone(), 0, d.clone()))
            .collect(),
        ..window.clone()
    }
}

/// One client: a token, its transport, and a window per query.
struct Client {
    token: &'static str,
    transport: Transport,
    windows: Vec<QueryWindow>,
    /// How many messages of each type arrived.
    seen: std::collections::BTreeMap<String, usize>,
}

enum Transport {
    /// Every query on one socket.
    Ws(Box<Ws>),
    /// One stream per query.
    Sse(Vec<SseReader>),
}

impl Client {
    async fn open(url: &str, token: &'static str, ws: bool) -> Self {
        let queries = queries();
        let transport = if ws {
            let mut socket = ws_connect_with_token(url, token).await;
            for q in &queries {
                let mut op = q.members.clone();
                op["op"] = json!("subscribe");
                op["id"] = json!(q.id);
                op["topics"] = json!(["apps/**"]);
                ws_send(&mut socket, op).await;
            }
            Transport::Ws(Box::new(socket))
        } else {
            let mut streams = Vec::new();
            for q in &queries {
                let mut params = vec![("topic".to_string(), "apps/**".to_string())];
                for (name, value) in q.members.as_object().unwrap() {
                    match value {
                        Value::Array(items) if name == "sort" || name == "fields" => {
                            let key = if name == "fields" { "field" } else { "sort" };
                            for item in items {
                                params.push((key.into(), item.as_str().unwrap().into()));
                            }
                        }
                        Value::String(s) => params.push((name.clone(), s.clone())),
                        other => params.push((name.clone(), other.to_string())),
                    }
                }
                let query = serde_urlencoded::to_string(&params).unwrap();
                streams.push(
                    SseReader::open_with_token(&format!("{url}/api/v1/events?{query}"), token)
                        .await,
                );
            }
            Transport::Sse(streams)
        };
        Self {
            token,
            transport,
            windows: vec![QueryWindow::default(); queries.len()],
            seen: Default::default(),
        }
    }

    /// Applies every message that arrives within `quiet` of the last one.
    async fn drain(&mut self, quiet: Duration) {
        let ids: Vec<&str> = queries().iter().map(|q| q.id).collect();
        match &mut self.transport {
            Transport::Ws(ws) => {
                while let Ok(message) = tokio::time::timeout(quiet, ws_next(ws)).await {
                    let message = message.expect("the socket stays open");
                    if message["type"] == "error" {
                        panic!("{}: {message}", self.token);
                    }
                    let Some(i) = ids.iter().position(|id| message["sub"] == *id) else {
                        continue;
                    };
                    let kind = message["type"].as_str().unwrap_or("").to_string();
                    *self.seen.entry(kind).or_default() += 1;
                    self.windows[i]
                        .apply(&message)
                        .unwrap_or_else(|e| panic!("{}: {e}", self.token));
                }
            }
            Transport::Sse(streams) => {
                for (i, stream) in streams.iter_mut().enumerate() {
                    while let Some(event) = stream.next_or_quiet(quiet).await {
                        let event = event.expect("the stream goes on");
                        *self.seen.entry(event.event.clone()).or_default() += 1;
                        self.windows[i]
                            .apply(&event.data)
                            .unwrap_or_else(|e| panic!("{}: {e}", self.token));
                    }
                }
            }
        }
    }

    /// Waits until every window equals its query over what REST serves
    /// this client's token (both settle after a change).
    async fn converge(&mut self, url: &str, step: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            self.drain(Duration::from_millis(150)).await;
            let apps = rest_apps(url, self.token).await;
            let want: Vec<QueryWindow> = queries().iter().map(|q| evaluate(q, &apps)).collect();
            let held: Vec<QueryWindow> = self.windows.iter().map(unrevised).collect();
            if held == want {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "{step}: {} holds\n{held:#?}\nREST says\n{want:#?}",
                    self.token
                );
            }
        }
    }
}

/// Sets app `name` of `namespace` on `sim` to `replicas` of `image`.
fn set_app(sim: &SimCluster, namespace: &str, name: &str, replicas: u32, image: &str) {
    sim.apply(&workload_manifest(&WorkloadSeed {
        image: image.into(),
        ..deployment(namespace, name, replicas)
    }))
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_rebuilt_from_the_wire_equal_the_query_on_rest_for_every_grant() {
    let shutdown = CancellationToken::new();
    let member = |name: &'static str| {
        sim_with(move |c| {
            c.name = name.into();
            c.workloads = APPS
                .iter()
                .map(|(ns, app, n)| deployment(ns, app, *n))
                .collect();
        })
    };
    let (a, b) = (member("a").await, member("b").await);
    b.set_failing_images(["registry.example/broken:1"]);
    let pipeline = pipeline(&[&a, &b], vec![], &shutdown).await;
    for cluster in ["a", "b"] {
        for (ns, app, _) in APPS {
            let topic = format!("apps/{cluster}/{ns}/{app}");
            doc_where(pipeline.hub(), &topic, WAIT, |d| d["state"] == "Running").await;
        }
    }
    let tasks = Tasks::for_pipeline(&pipeline, TaskSettings::default(), &shutdown);
    let health = gateway::health_for(&pipeline, Some(tasks.clone()), Default::default());
    let state = GatewayState::for_pipeline(
        &pipeline,
        tasks.clone(),
        token_auth(),
        TransportConfig::default(),
        health,
        shutdown.clone(),
    );
    let url = serve(state, &shutdown).await.0;

    let mut clients = vec![
        Client::open(&url, ROOT, true).await,
        Client::open(&url, ROOT, false).await,
        Client::open(&url, ALICE, true).await,
        Client::open(&url, BOB, false).await,
    ];
    for client in &mut clients {
        client.converge(&url, "initial rows").await;
    }
    // Alice sees member a only, Bob b/shop only: their counts say so.
    let alice_total = clients[2].windows[2].total;
    let bob_total = clients[3].windows[2].total;
    assert_eq!((alice_total, bob_total), (4, 2));

    // A seeded walk of changes: each app of each member scaled to zero,
    // up again, given a failing image, or a new app made.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    // First rows that climb past others inside the windows (moves).
    for (step, (ns, app, n)) in [("analytics", "db", 2), ("shop", "cart", 3)]
        .into_iter()
        .enumerate()
    {
        set_app(&a, ns, app, n, "registry.example/app:1");
        for client in &mut clients {
            client
                .converge(&url, &format!("climb {step}: a/{ns}/{app} scaled to {n}"))
                .await;
        }
    }
    let mut made = 0;
    for step in 0..14 {
        let sim = if next(2) == 0 { &a } else { &b };
        let (ns, app, _) = APPS[next(APPS.len() as u64) as usize];
        let what = match next(4) {
            0 => {
                set_app(sim, ns, app, 0, "registry.example/app:1");
                format!("{}/{ns}/{app} scaled to 0", sim.name())
            }
            1 => {
                let n = 1 + next(3) as u32;
                set_app(sim, ns, app, n, "registry.example/app:1");
                format!("{}/{ns}/{app} scaled to {n}", sim.name())
            }
            2 => {
                set_app(sim, ns, app, 1, "registry.example/broken:1");
                format!("{}/{ns}/{app} on a failing image", sim.name())
            }
            _ => {
                made += 1;
                let name = format!("new{made}");
                set_app(
                    sim,
                    "shop",
                    &name,
                    1 + next(2) as u32,
                    "registry.example/app:1",
                );
                format!("{}/shop/{name} made", sim.name())
            }
        };
        for client in &mut clients {
            client.converge(&url, &format!("step {step}: {what}")).await;
        }
    }

    // The walk made every kind of message, on both transports.
    for client in &clients[..2] {
        for kind in [
            "rows", "synced", "enter", "leave", "move", "patch", "total", "groups",
        ] {
            assert!(
                client.seen.contains_key(kind),
                "{kind} never came: {:?}",
                client.seen
            );
        }
    }

    // Bad queries: `bad_query`, naming the member; the socket goes on.
    let mut ws = ws_connect_with_token(&url, ROOT).await;
    for (members, names) in [
        (
            json!({"filter": {"like": ["/state", "Run%"]}}),
            "unknown operator \"like\"",
        ),
        (
            json!({"filter": {"and": [{"eq": ["/a", 1]}, {"gt": ["state", 1]}]}}),
            "filter.and[1].gt",
        ),
        (json!({"limit": 100000}), "limit"),
        (json!({"sort": ["state"]}), "sort"),
        (json!({"sort": ["/state"], "debounceMs": 500}), "debounceMs"),
    ] {
        let mut op = members.clone();
        op["op"] = json!("subscribe");
        op["id"] = json!("bad");
        op["topics"] = json!(["apps/**"]);
        ws_send(&mut ws, op).await;
        let reply = ws_next(&mut ws).await.unwrap();
        assert_eq!(reply["type"], "error", "{members}: {reply}");
        assert_eq!(reply["code"], "bad_query", "{members}: {reply}");
        assert_eq!(reply["id"], "bad");
        let message = reply["message"].as_str().unwrap();
        assert!(message.contains(names), "{members}: {message}");
    }
    let response = http()
        .get(format!("{url}/api/v1/events?topic=apps/**&limit=x"))
        .bearer_auth(ROOT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "bad_query", "{body}");

    shutdown.cancel();
    tasks.stop().await;
    pipeline.stop().await;
    a.shutdown().await;
    b.shutdown().await;
}
