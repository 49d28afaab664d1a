//! What both transports do the same way: open a hub subscription, decide
//! between a replay from the client's cursor and fresh snapshots, keep only
//! what the session's principal may see, and turn deliveries into encoded
//! messages.

use std::borrow::BorrowMut;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Sleep;

use super::shape::{Shaped, Shaper};
use super::state::Transports;
use crate::auth::Principal;
use crate::hub::{Change, Delivery, EncodeCache, Pattern, Replayed, Subscription, TopicDoc};
use crate::protocol::deflate::{self, Deflated};
use crate::protocol::{self, Cursor, QueryRow, ServerMessage, SubscribeOptions, Synced};
use crate::query::{LiveQuery, QueryMembers, QueryOut, QuerySpec};

/// The gateway's clock and, per member `subscription`'s patterns reach
/// and `principal` may see, when the member was last known current: the
/// `at` and `asOf` of `synced` and of heartbeats (docs/PROTOCOL.md).
fn as_of(
    t: &Transports,
    subscription: &Subscription,
    principal: &Principal,
) -> (String, BTreeMap<String, String>) {
    let millis = |at: chrono::DateTime<chrono::Utc>| crate::status::time::millis(&at);
    let members = t
        .hub
        .freshness()
        .reached(subscription.patterns(), |m| principal.can_see_cluster(m))
        .into_iter()
        .map(|(m, at)| (m, millis(at)))
        .collect();
    (millis(chrono::Utc::now()), members)
}

/// A subscription's heartbeat, made when it is sent:
/// `{"type":"heartbeat","cursor","at","asOf"}`. Its cursor is where the
/// subscription may be resumed from (every change up to it delivered), not
/// the gateway's position a ping's answer gives: a client that keeps the
/// last cursor it received, as docs/PROTOCOL.md asks, must never skip a
/// change it has not had, such as a topic still waiting for its catch-up
/// snapshot.
pub(super) fn heartbeat(
    t: &Transports,
    subscription: &Subscription,
    principal: &Principal,
) -> Bytes {
    let (at, members) = as_of(t, subscription, principal);
    let cursor = t.hub.cursor(subscription.resume_seq());
    ServerMessage::Heartbeat {
        cursor: &cursor,
        id: None,
        at: Some(&at),
        as_of: Some(&members),
    }
    .encode()
}

/// A started subscription: its first messages, then live deliveries.
pub(super) struct Started {
    pub(super) subscription: Subscription,
    /// Present when the subscription has options (`debounceMs`, `fields`).
    pub(super) shaper: Option<Shaper>,
    /// Snapshots or replayed changes, each with its cursor and type.
    pub(super) initial: Vec<Message>,
    pub(super) synced: Synced,
}

/// One message, as each transport writes it: its JSON (WebSocket) or its
/// SSE event.
#[derive(Debug, Clone)]
pub(super) struct Message {
    pub(super) kind: &'static str,
    encoded: Encoded,
    /// When the hub published it (live changes only), for the delivery-lag metric.
    pub(super) at: Option<std::time::Instant>,
}

#[derive(Debug, Clone)]
enum Encoded {
    /// A hub change at its own cursor: its JSON and SSE event are made
    /// once, on the change, and shared by every subscriber (which takes
    /// only the one its transport writes).
    Shared(Arc<Change>),
    /// Made for this subscription alone.
    Own { cursor: String, json: Bytes },
}

impl Message {
    /// A message encoded for one subscription: `json` at `cursor`.
    fn own(
        kind: &'static str,
        cursor: String,
        json: Bytes,
        at: Option<std::time::Instant>,
    ) -> Self {
        Self {
            kind,
            encoded: Encoded::Own { cursor, json },
            at,
        }
    }

    /// The JSON message.
    pub(super) fn json(&self) -> Bytes {
        match &self.encoded {
            Encoded::Shared(change) => shared_json(change).clone(),
            Encoded::Own { json, .. } => json.clone(),
        }
    }

    /// The JSON message as WebSocket subscription `prefix` gets it (see
    /// [`protocol::with_subscription`]): for a shared change, made once for
    /// the first prefix asked and taken as it is by every socket whose
    /// subscription has the same id.
    pub(super) fn ws_json(&self, prefix: &[u8]) -> Bytes {
        if let Encoded::Shared(change) = &self.encoded {
            let shared = change.encoded.ws.get_or_init(|| {
                let json = protocol::with_subscription(prefix, shared_json(change));
                Box::new((prefix.into(), json))
            });
            if *shared.0 == *prefix {
                return shared.1.clone();
            }
        }
        protocol::with_subscription(prefix, &self.json())
    }

    /// The SSE event: `id:` the cursor, `event:` the type, `data:` the JSON.
    pub(super) fn sse_frame(&self) -> Bytes {
        match &self.encoded {
            Encoded::Shared(change) => change
                .encoded
                .sse
                .get_or_init(|| {
                    protocol::sse::frame(&change.cursor, self.kind, shared_json(change))
                })
                .clone(),
            Encoded::Own { cursor, json } => protocol::sse::frame(cursor, self.kind, json),
        }
    }
    /// The SSE event as a chunk of a chunked body (made once for a shared
    /// change).
    pub(super) fn sse_chunk(&self) -> Bytes {
        match &self.encoded {
            Encoded::Shared(change) => change
                .encoded
                .sse_chunk
                .get_or_init(|| protocol::sse::http_chunk(&self.sse_frame()))
                .clone(),
            Encoded::Own { .. } => protocol::sse::http_chunk(&self.sse_frame()),
        }
    }

    /// The SSE event compressed at `level` (made once for a shared change).
    pub(super) fn sse_deflated(&self, level: u32) -> Deflated {
        self.deflated_once(
            |cache| &cache.sse_deflated,
            || Deflated::new(&self.sse_frame(), level),
        )
    }

    /// The JSON message's fields (after its opening brace) compressed at
    /// `level`, for a WebSocket to put its subscription id before; None
    /// for a message too short to be worth it (made once for a shared change).
    pub(super) fn ws_deflated(&self, level: u32) -> Option<Deflated> {
        let json = self.json();
        (json.len() >= deflate::MIN_BYTES).then(|| {
            self.deflated_once(
                |cache| &cache.ws_deflated,
                || Deflated::new(&json[1..], level),
            )
        })
    }

    /// `make()`, kept in the change's `cell` when the change is shared, so
    /// that every later subscriber takes it as it is.
    fn deflated_once(
        &self,
        cell: impl FnOnce(&EncodeCache) -> &OnceLock<Box<Deflated>>,
        make: impl FnOnce() -> Deflated,
    ) -> Deflated {
        match &self.encoded {
            Encoded::Shared(change) => {
                (**cell(&change.encoded).get_or_init(|| Box::new(make()))).clone()
            }
            Encoded::Own { .. } => make(),
        }
    }
}

/// A change's JSON message at its own cursor, made by the first subscriber
/// that needs it (the hub makes it when it publishes; a change applied
/// from another replica's stream may come without).
fn shared_json(change: &Change) -> &Bytes {
    change
        .encoded
        .json
        .get_or_init(|| change.message(&change.cursor).encode())
}

/// Why a session's credential no longer holds.
pub(super) enum Revoked {
    /// Expired, revoked, or no longer accepted: (WebSocket close code 4001).
    Expired(String),
    /// Still valid, but its read grants changed: reconnect (close code 4003).
    Changed,
}

/// When the session must check its credential again (its expiry).
pub(super) fn recheck_at(principal: &Principal) -> Option<tokio::time::Instant> {
    principal.expires.map(|at| {
        let left = (at - chrono::Utc::now()).to_std().unwrap_or_default();
        tokio::time::Instant::now() + left
    })
}

/// Authenticates `token` again for a live session of `current`: the same
/// subject with the same read grants continues (with the new expiry).
pub(super) async fn recheck(
    transports: &Transports,
    token: Option<&str>,
    current: &Principal,
) -> Result<Principal, Revoked> {
    match transports.auth.authenticate(token).await {
        Err(e) => Err(Revoked::Expired(e.to_string())),
        Ok(p) if p.subject != current.subject || p.read != current.read => Err(Revoked::Changed),
        Ok(p) => Ok(p),
    }
}

/// Parses topic patterns, naming the first bad one.
pub(super) fn patterns(raw: &[String], max: usize) -> Result<Vec<Pattern>, String> {
    if raw.is_empty() {
        return Err("at least one topic is required, e.g. topic=clusters/*".into());
    }
    if raw.len() > max {
        return Err(format!(
            "at most {max} topics per request, got {}",
            raw.len()
        ));
    }
    raw.iter().map(|t| Pattern::parse(t)).collect()
}

/// The live query a subscription asks for (None: a plain subscription);
/// the error names the bad member (`bad_query`).
pub(super) fn query_spec(
    members: &QueryMembers,
    options: &SubscribeOptions,
) -> Result<Option<QuerySpec>, String> {
    if !members.any() {
        return Ok(None);
    }
    if options.debounce_ms.is_some() {
        return Err(
            "debounceMs does not apply to a live query: it sends what changes in its window".into(),
        );
    }
    QuerySpec::parse(members, &crate::query::Limits::default()).map(Some)
}

/// Subscribes and prepares the initial messages: a replay when `since` is a
/// cursor of this process still in the log, else fresh snapshots (with the
/// reason in `synced`). A subscription with options always starts from
/// fresh (projected) snapshots: the replay log holds changes as published.
/// `synced` carries `at` and `asOf`.
pub(super) fn start(
    transports: &Transports,
    patterns: Vec<Pattern>,
    since: Option<&str>,
    principal: &Principal,
    options: &SubscribeOptions,
    query: Option<QuerySpec>,
) -> Started {
    let mut started = match query {
        Some(spec) => start_query(transports, patterns, since, principal, options, spec),
        None if !options.is_plain() => {
            start_shaped(transports, patterns, since, principal, options)
        }
        None => start_plain(transports, patterns, since, principal),
    };
    started.synced.as_of = Some(as_of(transports, &started.subscription, principal));
    // A client looks at these patterns (on-demand pod watches).
    started.subscription.count_as_demand();
    started
}

/// A subscription without options: a replay from `since`, or snapshots.
fn start_plain(
    transports: &Transports,
    patterns: Vec<Pattern>,
    since: Option<&str>,
    principal: &Principal,
) -> Started {
    let hub = &transports.hub;
    let subscription = hub.subscribe(patterns.clone());
    let at = subscription.seq();
    let now = hub.cursor(at);
    let fallback = |reason: Option<String>, subscription: Subscription| {
        let initial: Vec<Message> = subscription
            .snapshot()
            .iter()
            .filter(|doc| principal.can_see(&doc.topic, Some(&doc.doc)))
            .map(|doc| snapshot_message(doc, &now))
            .collect();
        let synced = Synced {
            cursor: now.clone(),
            resumed: false,
            count: initial.len(),
            reason,
            as_of: None,
        };
        Started {
            subscription,
            shaper: None,
            initial,
            synced,
        }
    };
    let Some(raw) = since else {
        return fallback(None, subscription);
    };
    // No cursor is this long: it is not read, nor said back in the reason.
    if raw.len() > MAX_CURSOR {
        return fallback(
            Some(format!(
                "invalid cursor: longer than {MAX_CURSOR} bytes; sending fresh snapshots"
            )),
            subscription,
        );
    }
    let cursor = match Cursor::parse(raw) {
        Ok(c) => c,
        Err(e) => {
            return fallback(
                Some(format!("invalid cursor: {e}; sending fresh snapshots")),
                subscription,
            );
        }
    };
    // Collapsed topics come first, at the client's own cursor: until the
    // replayed changes that follow, it has nothing more than that.
    let (replayed, from) = if cursor.epoch == hub.epoch() {
        if cursor.seq > at {
            return fallback(
                Some(format!(
                    "cursor {raw:?} is ahead of this gateway (at {now}); sending fresh snapshots"
                )),
                subscription,
            );
        }
        let Some(replayed) = subscription.replay_since(cursor.seq) else {
            return fallback(
                Some(format!(
                    "cursor {raw:?} is older than the replay log; sending fresh snapshots"
                )),
                subscription,
            );
        };
        (replayed, hub.cursor(cursor.seq))
    } else {
        // Another replica's cursor: its place in the shared stream of
        // changes means the same here (docs/SCALE-OUT.md).
        let Some(replayed) = cursor
            .stream
            .as_ref()
            .and_then(|stream| subscription.replay_from_stream(stream))
        else {
            let why = match cursor.stream {
                Some(_) => "is older than this replica's replay log, or of another stream",
                None => "is from another gateway process",
            };
            return fallback(
                Some(format!("cursor {raw:?} {why}; sending fresh snapshots")),
                subscription,
            );
        };
        (replayed, raw.to_owned())
    };
    let streamed_through = match &cursor.stream {
        Some(stream) if cursor.epoch != hub.epoch() => Some(stream.position),
        _ => None,
    };
    let initial: Vec<Message> = replayed
        .into_iter()
        .filter_map(|r| match r {
            Replayed::Change(c) => principal
                .can_see(&c.topic, c.doc.as_deref())
                .then(|| replayed_message(&c)),
            Replayed::Doc(doc) => principal
                .can_see(&doc.topic, Some(&doc.doc))
                .then(|| snapshot_message(doc, &from)),
            Replayed::Removed { topic, rev } => principal.can_see(&topic, None).then(|| {
                let json = ServerMessage::Removed {
                    topic: &topic,
                    rev: Some(rev),
                    cursor: &from,
                }
                .encode();
                Message::own("removed", from.clone(), json, None)
            }),
        })
        .collect();
    let mut subscription = subscription;
    if let Some(position) = streamed_through {
        subscription.skip_streamed_through(position);
    }
    let synced = Synced {
        cursor: now,
        resumed: true,
        count: initial.len(),
        reason: None,
        as_of: None,
    };
    Started {
        subscription,
        shaper: None,
        initial,
        synced,
    }
}

/// [`start`] for a subscription with options: fresh snapshots, projected.
fn start_shaped(
    transports: &Transports,
    patterns: Vec<Pattern>,
    since: Option<&str>,
    principal: &Principal,
    options: &SubscribeOptions,
) -> Started {
    let subscription = transports.hub.subscribe(patterns);
    let now = transports.hub.cursor(subscription.seq());
    let mut shaper = Shaper::new(options.clone());
    let initial: Vec<Message> = subscription
        .snapshot()
        .iter()
        .filter(|doc| principal.can_see(&doc.topic, Some(&doc.doc)))
        .map(|doc| {
            let view = shaper.initial(doc);
            snapshot_message(
                &TopicDoc {
                    topic: doc.topic.clone(),
                    rev: doc.rev,
                    doc: view,
                },
                &now,
            )
        })
        .collect();
    let synced = Synced {
        cursor: now,
        resumed: false,
        count: initial.len(),
        reason: since.map(|_| {
            "a subscription with debounceMs or fields does not replay; sending fresh snapshots"
                .to_string()
        }),
        as_of: None,
    };
    Started {
        subscription,
        shaper: Some(shaper),
        initial,
        synced,
    }
}

/// [`start`] for a live query: its `rows` (the window, the count, the
/// groups) over what the caller may see now; no replay.
fn start_query(
    transports: &Transports,
    patterns: Vec<Pattern>,
    since: Option<&str>,
    principal: &Principal,
    options: &SubscribeOptions,
    spec: QuerySpec,
) -> Started {
    let subscription = transports.hub.subscribe(patterns);
    let now = transports.hub.cursor(subscription.seq());
    let docs = subscription
        .snapshot()
        .iter()
        .filter(|doc| principal.can_see(&doc.topic, Some(&doc.doc)))
        .map(|doc| (doc.topic.clone(), doc.rev, doc.doc.clone()));
    let (query, initial) = LiveQuery::new(
        spec,
        options.fields.clone(),
        &crate::query::Limits::default(),
        docs,
    );
    let rows: Vec<QueryRow<'_>> = initial
        .rows
        .iter()
        .map(|r| QueryRow {
            topic: &r.topic,
            rev: r.rev,
            doc: &r.doc,
        })
        .collect();
    let json = ServerMessage::Rows {
        cursor: &now,
        total: initial.total,
        rows: &rows,
        groups: initial.groups.as_ref(),
        next: initial.next.as_deref(),
    }
    .encode();
    let synced = Synced {
        cursor: now.clone(),
        resumed: false,
        count: rows.len(),
        reason: since.map(|_| "a live query does not replay; sending its rows afresh".to_string()),
        as_of: None,
    };
    Started {
        subscription,
        shaper: Some(Shaper::for_query(options.clone(), query)),
        initial: vec![Message::own("rows", now, json, None)],
        synced,
    }
}

/// A topic's whole document at `cursor`.
fn snapshot_message(doc: &TopicDoc, cursor: &str) -> Message {
    let json = ServerMessage::Snapshot {
        topic: &doc.topic,
        rev: doc.rev,
        cursor,
        doc: &doc.doc,
    }
    .encode();
    Message::own("snapshot", cursor.to_string(), json, None)
}

/// A hub change as a message: its JSON and SSE frame are encoded by the
/// first subscriber that needs them and shared by every later one.
fn change_message(change: Arc<Change>) -> Message {
    Message {
        kind: change.message(&change.cursor).kind(),
        at: Some(change.published),
        encoded: Encoded::Shared(change),
    }
}

/// A change from the replay log as it was published: its message, made when
/// the hub published it. No SSE frame is cached: the log keeps one encoding.
fn replayed_message(change: &Change) -> Message {
    let cursor = change.cursor.as_str();
    let json = change
        .encoded
        .json
        .get()
        .cloned()
        .unwrap_or_else(|| change.message(cursor).encode());
    let kind = change.message(cursor).kind();
    Message::own(kind, change.cursor.clone(), json, Some(change.published))
}

/// A shaper with the timer of what it holds back, for [`poll_next`].
pub(super) struct Shaping<S> {
    pub(super) shaper: S,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<S: BorrowMut<Shaper>> Shaping<S> {
    pub(super) fn new(shaper: S) -> Self {
        Self {
            shaper,
            timer: None,
        }
    }
}

/// The next message of a subscription that `principal` may see, shaped by
/// its options when it has a shaper: ready
/// with it, else pending with `cx` registered on the subscription's queue
/// and, shaped, on the timer of what it holds back. For tasks that poll
/// their streams themselves (an event stream, a WebSocket's subscriptions).
pub(super) fn poll_next<S: BorrowMut<Shaper>>(
    transports: &Transports,
    subscription: &mut Subscription,
    principal: &Principal,
    shaping: Option<&mut Shaping<S>>,
    cx: &mut Context<'_>,
) -> Poll<Message> {
    let Some(shaping) = shaping else {
        loop {
            let delivery = ready!(subscription.poll_next(cx));
            if visible(principal, &delivery) {
                let resume = subscription.resume_seq();
                return Poll::Ready(message(transports, delivery, resume));
            }
        }
    };
    // Deliveries feed the shaper, its timer flushes what it held back, and
    // what it makes goes out in order.
    loop {
        let shaper = shaping.shaper.borrow_mut();
        if let Some(message) = try_next_shaped(transports, subscription, principal, shaper) {
            return Poll::Ready(message);
        }
        match subscription.poll_next(cx) {
            Poll::Ready(delivery) => {
                feed_visible(transports, shaper, principal, delivery);
                continue;
            }
            Poll::Pending => {}
        }
        let Some(due) = shaper.due() else {
            return Poll::Pending;
        };
        let timer = shaping
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        ready!(timer.as_mut().poll(cx));
        shaping
            .shaper
            .borrow_mut()
            .flush(tokio::time::Instant::now());
    }
}

/// Like [`poll_next`], but only what was queued behind the last message
/// ([`Subscription::try_next_queued`]; with a shaper, what it has ready):
/// the rest of a batch. None: nothing more now.
pub(super) fn try_next(
    transports: &Transports,
    subscription: &mut Subscription,
    principal: &Principal,
    shaper: Option<&mut Shaper>,
) -> Option<Message> {
    if let Some(shaper) = shaper {
        return try_next_shaped(transports, subscription, principal, shaper);
    }
    loop {
        let delivery = subscription.try_next_queued()?;
        if visible(principal, &delivery) {
            return Some(message(transports, delivery, subscription.resume_seq()));
        }
    }
}

/// [`try_next`] through a shaper: what it has made, else what is queued
/// now, else what its interval lets out now.
fn try_next_shaped(
    transports: &Transports,
    subscription: &mut Subscription,
    principal: &Principal,
    shaper: &mut Shaper,
) -> Option<Message> {
    loop {
        if let Some(out) = shaper.pop() {
            return Some(shaped_message(transports, subscription, shaper, out));
        }
        match subscription.try_next() {
            Some(delivery) => feed_visible(transports, shaper, principal, delivery),
            None => {
                shaper.flush(tokio::time::Instant::now());
                let out = shaper.pop()?;
                return Some(shaped_message(transports, subscription, shaper, out));
            }
        }
    }
}

/// Feeds the shaper what `principal` may see; a live query also hears of
/// what it may not (the topic leaves it).
fn feed_visible(
    transports: &Transports,
    shaper: &mut Shaper,
    principal: &Principal,
    delivery: Delivery,
) {
    if visible(principal, &delivery) {
        return feed(transports, shaper, delivery);
    }
    match &delivery {
        Delivery::Change(change) => shaper.hidden(&change.topic, change.rev),
        Delivery::Resync { topic, current } => {
            shaper.hidden(topic, current.as_ref().map_or(0, |d| d.rev));
        }
    }
}

fn feed(transports: &Transports, shaper: &mut Shaper, delivery: Delivery) {
    let now = tokio::time::Instant::now();
    match delivery {
        Delivery::Change(change) => shaper.change(&change, now),
        Delivery::Resync { topic, current } => {
            transports.metrics.collapses.inc();
            shaper.resync(&topic, current.as_ref(), now);
        }
    }
}

/// A shaped message, at a cursor below every change the shaper still
/// holds back (and below what the subscription itself is behind on).
fn shaped_message(
    transports: &Transports,
    subscription: &Subscription,
    shaper: &Shaper,
    out: Shaped,
) -> Message {
    let mut seq = subscription.resume_seq();
    if let Some(floor) = shaper.floor() {
        seq = seq.min(floor.saturating_sub(1));
    }
    let cursor = transports.hub.cursor(seq);
    let message = match &out {
        Shaped::Snapshot { topic, rev, doc } => ServerMessage::Snapshot {
            topic,
            rev: *rev,
            cursor: &cursor,
            doc,
        },
        Shaped::Patch {
            topic,
            rev,
            base,
            patch,
        } => ServerMessage::Patch {
            topic,
            rev: *rev,
            cursor: &cursor,
            patch,
            base: Some(*base),
        },
        Shaped::Removed { topic, rev } => ServerMessage::Removed {
            topic,
            rev: *rev,
            cursor: &cursor,
        },
        Shaped::Query(out) => query_message(out, &cursor),
    };
    let (kind, json) = (message.kind(), message.encode());
    Message::own(kind, cursor, json, None)
}

/// A live query's operation as its message.
fn query_message<'a>(out: &'a QueryOut, cursor: &'a str) -> ServerMessage<'a> {
    match out {
        QueryOut::Leave { topic, index } => ServerMessage::Leave {
            topic,
            index: *index,
            cursor,
        },
        QueryOut::Move { topic, from, to } => ServerMessage::Move {
            topic,
            from: *from,
            to: *to,
            cursor,
        },
        QueryOut::Enter {
            topic,
            index,
            rev,
            doc,
        } => ServerMessage::Enter {
            topic,
            rev: *rev,
            index: *index,
            cursor,
            doc,
        },
        QueryOut::Patch {
            topic,
            rev,
            base,
            patch,
        } => ServerMessage::Patch {
            topic,
            rev: *rev,
            cursor,
            patch,
            base: Some(*base),
        },
        QueryOut::Total { total } => ServerMessage::Total {
            total: *total,
            cursor,
        },
        QueryOut::Groups { groups } => ServerMessage::Groups { groups, cursor },
    }
}

/// Why a message could not be handed to a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Undelivered {
    /// The connection is gone.
    Closed,
    /// It did not take the message within the write timeout.
    Slow,
}

/// Hands `value` to a connection's queue: at once when there is room, else
/// waiting at most the write timeout (whose timer is armed only then).
pub(super) async fn hand_over<T>(
    transports: &Transports,
    tx: &mpsc::Sender<T>,
    value: T,
) -> Result<(), Undelivered> {
    let value = match tx.try_send(value) {
        Ok(()) => return Ok(()),
        Err(mpsc::error::TrySendError::Closed(_)) => return Err(Undelivered::Closed),
        Err(mpsc::error::TrySendError::Full(value)) => value,
    };
    // Boxed: the timer and the wait make a future of a few hundred bytes,
    // needed only when the connection is behind; inline it would be part of
    // every idle session's task.
    let wait = Box::pin(tokio::time::timeout(
        transports.config.write_timeout,
        tx.send(value),
    ));
    match wait.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(Undelivered::Closed),
        Err(_) => Err(Undelivered::Slow),
    }
}

/// Most messages a session hands its connection in one write.
pub(super) const MAX_BATCH: usize = 64;

/// The longest cursor read; a cursor is `{epoch}-{seq}`, with a stream's
/// `.{stream}-{position}` behind it, well under this.
const MAX_CURSOR: usize = 256;

fn visible(principal: &Principal, delivery: &Delivery) -> bool {
    match delivery {
        Delivery::Change(c) => principal.can_see(&c.topic, c.doc.as_deref()),
        Delivery::Resync { topic, current } => {
            principal.can_see(topic, current.as_ref().map(|d| &*d.doc))
        }
    }
}

/// The message of a delivery whose cursor is `resume` (see
/// [`Subscription::resume_seq`]): every cursor a client sees is safe to
/// resume from, including while some of its topics wait for a resync.
fn message(transports: &Transports, delivery: Delivery, resume: u64) -> Message {
    match delivery {
        Delivery::Change(change) if change.seq == resume => change_message(change),
        Delivery::Change(change) => {
            // Behind on another topic: this change's own cursor would skip
            // what that topic missed, so it goes out with an earlier one
            // (encoded for this subscription alone; the shared encoding
            // keeps the change's cursor).
            let cursor = transports.hub.cursor(resume);
            let message = change.message(&cursor);
            let (kind, json) = (message.kind(), message.encode());
            Message::own(kind, cursor, json, Some(change.published))
        }
        Delivery::Resync { topic, current } => {
            transports.metrics.collapses.inc();
            let cursor = transports.hub.cursor(resume);
            match current {
                Some(doc) => snapshot_message(&doc, &cursor),
                None => {
                    let json = ServerMessage::Removed {
                        topic: &topic,
                        rev: None,
                        cursor: &cursor,
                    }
                    .encode();
                    Message::own("removed", cursor, json, None)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::{ChangeKind, Topic};

    fn shared_change() -> Message {
        change_message(Arc::new(Change {
            topic: Topic::new("apps/c/ns/a"),
            rev: 2,
            seq: 7,
            cursor: "e-7".into(),
            position: 0,
            streamed_at: Default::default(),
            kind: ChangeKind::Snapshot,
            doc: Some(Arc::new(serde_json::json!({"phase": "Running"}))),
            patch: None,
            at: chrono::Utc::now(),
            published: std::time::Instant::now(),
            encoded: EncodeCache::default(),
            remote: false,
        }))
    }

    #[test]
    fn sockets_naming_a_subscription_alike_share_its_websocket_message() {
        let message = shared_change();
        let (s1, s2) = (
            protocol::subscription_prefix("s1"),
            protocol::subscription_prefix("s2"),
        );
        let first = message.ws_json(&s1);
        let again = message.clone().ws_json(&s1);
        let other = message.ws_json(&s2);
        // The first id asked for is made once and shared, byte for byte.
        assert_eq!(first.as_ptr(), again.as_ptr());
        assert_ne!(first.as_ptr(), other.as_ptr());
        for (json, id) in [(&first, "s1"), (&other, "s2")] {
            let value: serde_json::Value = serde_json::from_slice(json).unwrap();
            assert_eq!(value["sub"], id);
            assert_eq!(value["topic"], "apps/c/ns/a");
            assert_eq!(value["doc"]["phase"], "Running");
        }
    }

    #[test]
    fn a_shared_changes_sse_chunk_is_made_once_around_its_event() {
        let message = shared_change();
        let chunk = message.sse_chunk();
        assert_eq!(chunk.as_ptr(), message.clone().sse_chunk().as_ptr());
        let frame = message.sse_frame();
        let line = format!("{:x}\r\n", frame.len());
        assert_eq!(&chunk[..line.len()], line.as_bytes());
        assert_eq!(&chunk[line.len()..chunk.len() - 2], &frame[..]);
        assert!(chunk.ends_with(b"\r\n"));
    }

    #[test]
    fn a_message_of_one_subscription_gets_its_id_each_time() {
        let own = Message::own(
            "snapshot",
            "e-1".into(),
            Bytes::from_static(b"{\"a\":1}"),
            None,
        );
        let prefix = protocol::subscription_prefix("q1");
        assert_eq!(&own.ws_json(&prefix)[..], br#"{"sub":"q1","a":1}"#);
    }
}
