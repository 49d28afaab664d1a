//! Live queries against random documents and random queries, on the wire
//! (docs/PROTOCOL.md "Live queries"). A hub filled by hand with app
//! documents of three members, a gateway with tokens of four grants, and
//! per seed a set of random queries (filters of every operator nested up to
//! three levels, sorts of up to two fields either way, limits, offsets, a
//! keyset `after`, projections, group-bys). Every token holds all of them
//! on one WebSocket, two tokens also over one SSE stream per query. Then a
//! random walk of creates, patches and removals: after each step every
//! client's windows, rebuilt from the wire alone, equal the queries
//! evaluated here, from scratch and by the documented rules (written again
//! for this test, not the gateway's code), on what REST serves that token;
//! each row at the revision the hub holds. Now and then a socket
//! reconnects with `since`: a live query answers with fresh rows and
//! `resumed: false` with a reason. Loopback only, every wait bounded.
//! `KUBE_PULSE_QUERY_SEED=<n>` replays one seed.

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Duration;

use kube_pulse::auth::{self, Auth, Mode};
use kube_pulse::http::router::GatewayState;
use kube_pulse::hub::{Hub, HubConfig};
use kube_pulse::transports::TransportConfig;
use pulse_testkit::docs::QueryWindow;
use pulse_testkit::gateway::{ping_health, serve};
use pulse_testkit::http::rest_apps;
use pulse_testkit::sse::SseReader;
use pulse_testkit::ws::{Ws, ws_connect_with_token, ws_next, ws_send};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Below `ws_next`'s own 20 s, so a missing message fails here, saying what.
const WAIT: Duration = Duration::from_secs(15);
const SEEDS: [u64; 3] = [0x5eed_0001, 0x0bad_cafe, 0x7357_2026];
const STEPS: usize = 80;
const QUERIES: usize = 9;

/// (subject, token, read grants).
const TOKENS: [(&str, &str, &str); 4] = [
    ("root", "root-token-0123456789", "['*']"),
    ("alice", "alice-token-0123456789", "[a]"),
    ("bob", "bob-token-0123456789", "[b/shop]"),
    ("carol", "carol-token-0123456789", "[a/analytics, c]"),
];
/// Tokens that also hold every query over SSE.
const SSE_TOKENS: [usize; 2] = [0, 2];

const CLUSTERS: [&str; 3] = ["a", "b", "c"];
const NAMESPACES: [&str; 3] = ["shop", "analytics", "ops"];
const APPS: [&str; 5] = ["web", "cart", "db", "ingest", "api"];
const STATES: [&str; 5] = ["Running", "Degraded", "Stopped", "Starting", "Panic"];
const REASONS: [&str; 3] = ["ImagePullBackOff", "CrashLoopBackOff", "Unschedulable"];
const TEAMS: [&str; 2] = ["red", "blue"];

/// A small deterministic generator (a PCG-style LCG).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

// ---------------------------------------------------------------- documents

fn topic_of(cluster: &str, namespace: &str, app: &str) -> String {
    format!("apps/{cluster}/{namespace}/{app}")
}

/// A random app document: state, expected and ready replicas (ready now
/// and then a fraction, so numbers compare by value), maybe a reason,
/// maybe an owner with or without a team.
fn random_doc(rng: &mut Rng, cluster: &str, namespace: &str, app: &str) -> Value {
    let expected = rng.below(5);
    let ready = if rng.chance(5) {
        json!(rng.below(expected + 1) as f64 + 0.5)
    } else {
        json!(rng.below(expected + 1))
    };
    let mut doc = json!({
        "cluster": cluster,
        "namespace": namespace,
        "app": app,
        "state": rng.pick(&STATES),
        "expected": expected,
        "ready": ready,
    });
    if rng.chance(2) {
        doc["reason"] = json!(rng.pick(&REASONS));
    }
    match rng.below(3) {
        0 => doc["owner"] = json!({"team": rng.pick(&TEAMS)}),
        1 => doc["owner"] = json!({}),
        _ => {}
    }
    doc
}

/// One random step on the hub: a new (or replaced) app, a field of an
/// existing one changed, or an app removed. Returns what it did.
fn random_change(rng: &mut Rng, hub: &Hub) -> String {
    let held: Vec<String> = hub
        .list(&[kube_pulse::hub::Pattern::parse("apps/**").unwrap()])
        .into_iter()
        .map(|d| d.topic.as_str().to_string())
        .collect();
    let existing = (!held.is_empty()).then(|| held[rng.below(held.len() as u64) as usize].clone());
    match (rng.below(6), existing) {
        (0 | 1, Some(topic)) => {
            let mut doc = (*hub.get(&topic).unwrap().doc).clone();
            let what = match rng.below(5) {
                0 => {
                    doc["state"] = json!(rng.pick(&STATES));
                    "state"
                }
                1 => {
                    doc["expected"] = json!(rng.below(5));
                    "expected"
                }
                2 => {
                    doc["ready"] = json!(rng.below(4));
                    "ready"
                }
                3 => {
                    if doc.get("reason").is_some() {
                        doc.as_object_mut().unwrap().remove("reason");
                    } else {
                        doc["reason"] = json!(rng.pick(&REASONS));
                    }
                    "reason"
                }
                _ => {
                    doc["owner"] = json!({"team": rng.pick(&TEAMS)});
                    "owner"
                }
            };
            hub.put(&topic, doc);
            format!("{topic}: {what} changed")
        }
        (2, Some(topic)) => {
            hub.remove(&topic);
            format!("{topic} removed")
        }
        _ => {
            let (c, ns, app) = (rng.pick(&CLUSTERS), rng.pick(&NAMESPACES), rng.pick(&APPS));
            let topic = topic_of(c, ns, app);
            hub.put(&topic, random_doc(rng, c, ns, app));
            format!("{topic} put")
        }
    }
}

// ------------------------------------------------------------------ queries

/// A filter as this test generates and evaluates it.
#[derive(Debug, Clone)]
enum Filter {
    Eq(&'static str, Value),
    Ne(&'static str, Value),
    /// `lt`, `lte`, `gt` or `gte`.
    Cmp(&'static str, &'static str, Value),
    In(&'static str, Vec<Value>),
    Exists(&'static str),
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
}

const POINTERS: [&str; 8] = [
    "/state",
    "/cluster",
    "/namespace",
    "/reason",
    "/owner/team",
    "/expected",
    "/ready",
    "/owner",
];

/// A value worth comparing the member at `pointer` with.
fn value_for(rng: &mut Rng, pointer: &str) -> Value {
    match pointer {
        "/state" => json!(rng.pick(&STATES)),
        "/cluster" => json!(rng.pick(&CLUSTERS)),
        "/namespace" => json!(rng.pick(&NAMESPACES)),
        "/reason" => json!(rng.pick(&REASONS)),
        "/owner/team" => json!(rng.pick(&TEAMS)),
        "/owner" => json!({}),
        // Numbers, now and then as a fraction or of the other JSON form.
        _ => match rng.below(4) {
            0 => json!(rng.below(4) as f64),
            1 => json!(rng.below(4) as f64 + 0.5),
            _ => json!(rng.below(5)),
        },
    }
}

fn random_filter(rng: &mut Rng, depth: u32) -> Filter {
    if depth == 0 || rng.chance(2) {
        let pointer = rng.pick(&POINTERS);
        return match rng.below(6) {
            0 => Filter::Eq(pointer, value_for(rng, pointer)),
            1 => Filter::Ne(pointer, value_for(rng, pointer)),
            2 | 3 => {
                // Strings with strings, numbers with numbers, and now and
                // then a string against a number member (never passes).
                let pointer = rng.pick(&["/state", "/reason", "/expected", "/ready"]);
                let value = if rng.chance(6) {
                    json!("Running")
                } else {
                    value_for(rng, pointer)
                };
                Filter::Cmp(rng.pick(&["lt", "lte", "gt", "gte"]), pointer, value)
            }
            4 => {
                let n = 1 + rng.below(3);
                Filter::In(pointer, (0..n).map(|_| value_for(rng, pointer)).collect())
            }
            _ => Filter::Exists(pointer),
        };
    }
    let children = |rng: &mut Rng| -> Vec<Filter> {
        (0..1 + rng.below(3))
            .map(|_| random_filter(rng, depth - 1))
            .collect()
    };
    match rng.below(3) {
        0 => Filter::And(children(rng)),
        1 => Filter::Or(children(rng)),
        _ => Filter::Not(Box::new(random_filter(rng, depth - 1))),
    }
}

impl Filter {
    fn to_json(&self) -> Value {
        match self {
            Filter::Eq(p, v) => json!({"eq": [p, v]}),
            Filter::Ne(p, v) => json!({"ne": [p, v]}),
            Filter::Cmp(op, p, v) => json!({ *op: [p, v] }),
            Filter::In(p, vs) => json!({"in": [p, vs]}),
            Filter::Exists(p) => json!({ "exists": p }),
            Filter::And(fs) => json!({"and": fs.iter().map(Filter::to_json).collect::<Vec<_>>()}),
            Filter::Or(fs) => json!({"or": fs.iter().map(Filter::to_json).collect::<Vec<_>>()}),
            Filter::Not(f) => json!({"not": f.to_json()}),
        }
    }

    /// Whether `doc` passes, by the rules of docs/PROTOCOL.md.
    fn passes(&self, doc: &Value) -> bool {
        match self {
            Filter::Eq(p, v) => doc.pointer(p).is_some_and(|m| json_eq(m, v)),
            Filter::Ne(p, v) => !doc.pointer(p).is_some_and(|m| json_eq(m, v)),
            Filter::Cmp(op, p, v) => {
                let Some(m) = doc.pointer(p) else {
                    return false;
                };
                let order = match (m, v) {
                    (Value::Number(a), Value::Number(b)) => {
                        a.as_f64().unwrap().partial_cmp(&b.as_f64().unwrap())
                    }
                    (Value::String(a), Value::String(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
                    _ => None,
                };
                order.is_some_and(|o| match *op {
                    "lt" => o == Ordering::Less,
                    "lte" => o != Ordering::Greater,
                    "gt" => o == Ordering::Greater,
                    _ => o != Ordering::Less,
                })
            }
            Filter::In(p, vs) => doc
                .pointer(p)
                .is_some_and(|m| vs.iter().any(|v| json_eq(m, v))),
            Filter::Exists(p) => doc.pointer(p).is_some(),
            Filter::And(fs) => fs.iter().all(|f| f.passes(doc)),
            Filter::Or(fs) => fs.iter().any(|f| f.passes(doc)),
            Filter::Not(f) => !f.passes(doc),
        }
    }
}

/// JSON equality with numbers by value (`1` = `1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// The documented order of values: missing < null < false < true <
/// numbers < strings < arrays < objects.
fn value_order(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    fn rank(v: Option<&Value>) -> u8 {
        match v {
            None => 0,
            Some(Value::Null) => 1,
            Some(Value::Bool(false)) => 2,
            Some(Value::Bool(true)) => 3,
            Some(Value::Number(_)) => 4,
            Some(Value::String(_)) => 5,
            Some(Value::Array(_)) => 6,
            Some(Value::Object(_)) => 7,
        }
    }
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            x.as_f64().unwrap().total_cmp(&y.as_f64().unwrap())
        }
        (Some(Value::String(x)), Some(Value::String(y))) => x.as_bytes().cmp(y.as_bytes()),
        (Some(x @ (Value::Array(_) | Value::Object(_))), Some(y)) if rank(a) == rank(Some(y)) => {
            x.to_string().cmp(&y.to_string())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

/// A random query, as sent and as evaluated.
#[derive(Debug, Clone)]
struct Query {
    id: String,
    filter: Option<Filter>,
    /// (pointer, descending).
    sort: Vec<(&'static str, bool)>,
    limit: Option<u64>,
    offset: u64,
    fields: Vec<&'static str>,
    group_by: Option<&'static str>,
    /// A keyset start: the token and the row (topic, document) it names.
    after: Option<(String, String, Value)>,
}

fn random_query(rng: &mut Rng, id: usize) -> Query {
    let filter = (!rng.chance(4)).then(|| random_filter(rng, 3));
    let sort = (0..rng.below(3))
        .map(|_| {
            (
                rng.pick(&["/state", "/expected", "/ready", "/reason", "/owner/team"]),
                rng.chance(2),
            )
        })
        .collect();
    let group_by = rng
        .chance(3)
        .then(|| rng.pick(&["/state", "/cluster", "/reason", "/ready"]));
    let limit = match rng.below(5) {
        0 => None,
        1 => Some(0),
        2 => Some(1),
        _ => Some(2 + rng.below(6)),
    };
    let offset = if rng.chance(3) { rng.below(4) } else { 0 };
    let fields = if rng.chance(3) {
        vec!["/state", "/expected"]
    } else {
        vec![]
    };
    Query {
        id: format!("q{id}"),
        filter,
        sort,
        limit,
        offset,
        fields,
        group_by,
        after: None,
    }
}

impl Query {
    /// The subscribe members beside `op`, `id` and `topics`.
    fn members(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        if let Some(f) = &self.filter {
            m.insert("filter".into(), f.to_json());
        }
        if !self.sort.is_empty() {
            m.insert("sort".into(), json!(self.sort_text()));
        }
        if let Some(limit) = self.limit {
            m.insert("limit".into(), json!(limit));
        }
        if self.offset > 0 {
            m.insert("offset".into(), json!(self.offset));
        }
        if !self.fields.is_empty() {
            m.insert("fields".into(), json!(self.fields));
        }
        if let Some(g) = self.group_by {
            m.insert("groupBy".into(), json!(g));
        }
        if let Some((token, _, _)) = &self.after {
            m.insert("after".into(), json!(token));
        }
        // A query of nothing but a projection is not a live query: name
        // the default limit to make it one.
        if m.keys().all(|k| k == "fields") {
            m.insert("limit".into(), json!(50));
        }
        m
    }

    fn sort_text(&self) -> Vec<String> {
        self.sort
            .iter()
            .map(|(p, desc)| format!("{}{p}", if *desc { "-" } else { "" }))
            .collect()
    }

    /// The same query as SSE parameters.
    fn sse_params(&self) -> String {
        let mut params = vec![("topic".to_string(), "apps/**".to_string())];
        for (name, value) in self.members() {
            match (name.as_str(), value) {
                ("sort", Value::Array(items)) => {
                    let text: Vec<&str> = items.iter().map(|v| v.as_str().unwrap()).collect();
                    params.push(("sort".into(), text.join(",")));
                }
                ("fields", Value::Array(items)) => {
                    for item in items {
                        params.push(("field".into(), item.as_str().unwrap().into()));
                    }
                }
                (_, Value::String(s)) => params.push((name, s)),
                (_, other) => params.push((name, other.to_string())),
            }
        }
        serde_urlencoded::to_string(&params).unwrap()
    }

    fn order(&self, (ta, a): (&str, &Value), (tb, b): (&str, &Value)) -> Ordering {
        for (pointer, desc) in &self.sort {
            let o = value_order(a.pointer(pointer), b.pointer(pointer));
            let o = if *desc { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        ta.cmp(tb)
    }

    /// The window, total and groups of this query over `apps`, from scratch.
    fn evaluate(&self, apps: &[(String, Value)]) -> QueryWindow {
        let mut matching: Vec<&(String, Value)> = apps
            .iter()
            .filter(|(_, d)| self.filter.as_ref().is_none_or(|f| f.passes(d)))
            .collect();
        matching.sort_by(|(ta, a), (tb, b)| self.order((ta, a), (tb, b)));
        let groups = self.group_by.map(|pointer| {
            let mut counts = serde_json::Map::new();
            for (_, d) in &matching {
                let key = match d.pointer(pointer) {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                };
                let n = counts.get(&key).and_then(Value::as_u64).unwrap_or(0);
                counts.insert(key, json!(n + 1));
            }
            Value::Object(counts)
        });
        let limit = self
            .limit
            .unwrap_or(if self.group_by.is_some() { 0 } else { 50 });
        let rows = matching
            .iter()
            .filter(|(t, d)| match &self.after {
                Some((_, at, anchor)) => self.order((t, d), (at, anchor)) == Ordering::Greater,
                None => true,
            })
            .skip(self.offset as usize)
            .take(limit as usize)
            .map(|(topic, doc)| {
                let doc = if self.fields.is_empty() {
                    doc.clone()
                } else {
                    let kept = self.fields.iter().filter_map(|f| {
                        let name = &f[1..];
                        doc.get(name).map(|v| (name.to_string(), v.clone()))
                    });
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
}

// ------------------------------------------------------------------ clients

fn token_auth() -> Arc<Auth> {
    let lines: String = TOKENS
        .iter()
        .map(|(subject, token, read)| {
            format!("- {{subject: {subject}, token: {token}, read: {read}}}\n")
        })
        .collect();
    let file = auth::tokens::TokenFile::parse(&format!("tokens:\n{lines}")).unwrap();
    Auth::new(Mode::Tokens(file))
}

/// One token's view: its queries on one WebSocket, maybe also over SSE.
struct Client {
    token: &'static str,
    ws: Ws,
    ws_windows: Vec<QueryWindow>,
    sse: Vec<(SseReader, QueryWindow)>,
    /// The newest cursor the socket carried.
    cursor: Option<String>,
    /// Messages of each type applied, both transports.
    seen: std::collections::BTreeMap<String, usize>,
}

async fn subscribe_all(ws: &mut Ws, queries: &[Query], since: Option<&str>) {
    for q in queries {
        let mut op = Value::Object(q.members());
        op["op"] = json!("subscribe");
        op["id"] = json!(q.id);
        op["topics"] = json!(["apps/**"]);
        if let Some(since) = since {
            op["since"] = json!(since);
        }
        ws_send(ws, op).await;
    }
}

impl Client {
    async fn open(url: &str, token: &'static str, queries: &[Query], sse: bool) -> Self {
        let mut ws = ws_connect_with_token(url, token).await;
        subscribe_all(&mut ws, queries, None).await;
        let mut streams = Vec::new();
        if sse {
            for q in queries {
                let url = format!("{url}/api/v1/events?{}", q.sse_params());
                streams.push((
                    SseReader::open_with_token(&url, token).await,
                    QueryWindow::default(),
                ));
            }
        }
        Self {
            token,
            ws,
            ws_windows: vec![QueryWindow::default(); queries.len()],
            sse: streams,
            cursor: None,
            seen: Default::default(),
        }
    }

    /// Applies one WebSocket message; returns it.
    async fn read_ws(&mut self, queries: &[Query], until: tokio::time::Instant) -> Option<Value> {
        let message = tokio::time::timeout_at(until, ws_next(&mut self.ws))
            .await
            .ok()?
            .unwrap_or_else(|code| panic!("{}: the socket closed ({code:?})", self.token));
        assert_ne!(message["type"], "error", "{}: {message}", self.token);
        if let Some(cursor) = message["cursor"].as_str() {
            self.cursor = Some(cursor.to_string());
        }
        if let Some(i) = queries.iter().position(|q| message["sub"] == q.id.as_str()) {
            let kind = format!("ws {}", message["type"].as_str().unwrap_or(""));
            *self.seen.entry(kind).or_default() += 1;
            self.ws_windows[i]
                .apply(&message)
                .unwrap_or_else(|e| panic!("{} {}: {e}", self.token, queries[i].id));
        }
        Some(message)
    }

    /// Reads until every window equals its query over what REST serves
    /// this token, each row at the revision the hub holds (a projected row
    /// stays at the revision that last changed what it carries).
    async fn converge(&mut self, url: &str, hub: &Hub, queries: &[Query], step: &str) {
        let until = tokio::time::Instant::now() + WAIT;
        let apps = rest_apps(url, self.token).await;
        let want: Vec<QueryWindow> = queries
            .iter()
            .map(|q| {
                let mut window = q.evaluate(&apps);
                if q.fields.is_empty() {
                    for (topic, rev, _) in &mut window.rows {
                        *rev = hub.get(topic).map_or(0, |held| held.rev);
                    }
                }
                window
            })
            .collect();
        let comparable = |query: &Query, window: &QueryWindow| -> QueryWindow {
            let mut window = window.clone();
            if !query.fields.is_empty() {
                for row in &mut window.rows {
                    row.1 = 0;
                }
            }
            window
        };
        for (i, query) in queries.iter().enumerate() {
            while comparable(query, &self.ws_windows[i]) != want[i] {
                if self.read_ws(queries, until).await.is_none() {
                    panic!(
                        "{step}: {} over WebSocket, {} = {query:?}\nholds {:#?}\nREST says {:#?}",
                        self.token, query.id, self.ws_windows[i], want[i]
                    );
                }
            }
            if let Some((stream, window)) = self.sse.get_mut(i) {
                while comparable(query, window) != want[i] {
                    let left = until.saturating_duration_since(tokio::time::Instant::now());
                    let Some(Some(event)) = stream.next_or_quiet(left).await else {
                        panic!(
                            "{step}: {} over SSE, {} = {query:?}\nholds {window:#?}\nREST says {:#?}",
                            self.token, query.id, want[i]
                        );
                    };
                    *self.seen.entry(format!("sse {}", event.event)).or_default() += 1;
                    window
                        .apply(&event.data)
                        .unwrap_or_else(|e| panic!("{step}: {} SSE {}: {e}", self.token, query.id));
                }
            }
        }
    }

    /// Reconnects the socket with `since` the newest cursor it saw: every
    /// live query answers with fresh rows, then `synced` saying it did not
    /// replay and why.
    async fn reconnect(&mut self, url: &str, queries: &[Query]) {
        let since = self.cursor.clone().expect("a cursor arrived");
        let _ = self.ws.close(None).await;
        self.ws = ws_connect_with_token(url, self.token).await;
        subscribe_all(&mut self.ws, queries, Some(&since)).await;
        let until = tokio::time::Instant::now() + WAIT;
        let mut synced = 0;
        while synced < queries.len() {
            let message = self
                .read_ws(queries, until)
                .await
                .unwrap_or_else(|| panic!("{}: synced after reconnecting", self.token));
            if message["type"] == "synced" {
                assert_eq!(message["resumed"], false, "{message}");
                assert!(message["reason"].is_string(), "{message}");
                synced += 1;
            }
        }
    }
}

/// The `after` of a first page of `query` (limit 3) and the row it
/// names, asked over a socket of its own; None when nothing follows.
async fn first_page_after(url: &str, query: &Query) -> Option<(String, String, Value)> {
    let mut ws = ws_connect_with_token(url, TOKENS[0].1).await;
    let mut op = json!({"op": "subscribe", "id": "page", "topics": ["apps/**"], "limit": 3});
    if !query.sort.is_empty() {
        op["sort"] = json!(query.sort_text());
    }
    ws_send(&mut ws, op).await;
    let rows = ws_next(&mut ws).await.unwrap();
    assert_eq!(rows["type"], "rows", "{rows}");
    let next = rows["next"].as_str()?.to_string();
    let last = rows["rows"].as_array().unwrap().last()?.clone();
    Some((
        next,
        last["topic"].as_str()?.to_string(),
        last["doc"].clone(),
    ))
}

async fn run_seed(seed: u64) {
    let mut rng = Rng(seed);
    let shutdown = CancellationToken::new();
    let hub = Hub::new(HubConfig::default());
    for _ in 0..40 {
        let (c, ns, app) = (rng.pick(&CLUSTERS), rng.pick(&NAMESPACES), rng.pick(&APPS));
        hub.put(&topic_of(c, ns, app), random_doc(&mut rng, c, ns, app));
    }
    let state = GatewayState::with_auth(
        hub.clone(),
        token_auth(),
        TransportConfig::default(),
        ping_health(),
        shutdown.clone(),
    );
    let url = serve(state, &shutdown).await.0;

    let mut queries: Vec<Query> = (0..QUERIES).map(|i| random_query(&mut rng, i)).collect();
    // One query pages with a keyset `after`, one counts by state only.
    queries[0].limit = Some(4);
    queries[0].group_by = None;
    queries[0].after = first_page_after(&url, &queries[0]).await;
    assert!(queries[0].after.is_some(), "40 apps fill more than a page");
    queries[1].limit = Some(0);
    queries[1].group_by = Some("/state");

    let mut clients = Vec::new();
    for (i, (_, token, _)) in TOKENS.iter().enumerate() {
        clients.push(Client::open(&url, token, &queries, SSE_TOKENS.contains(&i)).await);
    }
    for client in &mut clients {
        client
            .converge(
                &url,
                &hub,
                &queries,
                &format!("seed {seed:#x}: initial rows"),
            )
            .await;
    }
    for step in 0..STEPS {
        let what: Vec<String> = (0..1 + rng.below(3))
            .map(|_| random_change(&mut rng, &hub))
            .collect();
        let step = format!("seed {seed:#x} step {step}: {}", what.join("; "));
        for client in &mut clients {
            client.converge(&url, &hub, &queries, &step).await;
        }
        if rng.chance(12) {
            let i = rng.below(clients.len() as u64) as usize;
            clients[i].reconnect(&url, &queries).await;
            clients[i]
                .converge(&url, &hub, &queries, &format!("{step}; reconnected"))
                .await;
        }
    }
    // Nothing more arrives that would change a settled window.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for client in &mut clients {
        while client
            .read_ws(
                &queries,
                tokio::time::Instant::now() + Duration::from_millis(50),
            )
            .await
            .is_some()
        {}
        client
            .converge(&url, &hub, &queries, &format!("seed {seed:#x}: at rest"))
            .await;
    }
    // The walk made every kind of message, over both transports.
    for client in clients.iter().filter(|c| !c.sse.is_empty()) {
        let kinds = ["rows", "enter", "leave", "move", "patch", "total", "groups"];
        for kind in kinds
            .iter()
            .flat_map(|k| [format!("ws {k}"), format!("sse {k}")])
        {
            assert!(
                client.seen.get(&kind).is_some_and(|n| *n > 0),
                "seed {seed:#x}: {} never got {kind}: {:?}",
                client.token,
                client.seen
            );
        }
    }
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queries_over_random_changes_equal_rest_for_every_grant() {
    let seeds: Vec<u64> = match std::env::var("KUBE_PULSE_QUERY_SEED") {
        Ok(seed) => vec![seed.parse().expect("a seed is a number")],
        Err(_) => SEEDS.to_vec(),
    };
    for seed in seeds {
        run_seed(seed).await;
    }
}
