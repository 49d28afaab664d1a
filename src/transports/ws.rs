//! WebSocket: `GET /api/v1/ws`. Clients send `subscribe` / `unsubscribe` /
//! `ping` / `auth` operations; many subscriptions share one socket and
//! every server message carries its subscription id (`sub`). One task per
//! socket reads and answers the operations, serves its subscriptions and
//! writes ([`wire`]); protocol pings keep it alive.

mod inflate;
mod upgrade;
mod wire;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::limits::Bucket;
use super::session;
use super::state::Transports;
use crate::auth::{AuthError, Principal};
use crate::protocol::{self, ClientOp, ServerMessage, SubscribeOptions, close};
use crate::query::{QueryMembers, QuerySpec};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use upgrade::Upgrade;
use wire::{Event, Out, Outbox, Sub, Wire};

/// Longest accepted subscription id.
const MAX_ID_LEN: usize = 128;
/// Most live queries one socket holds (each keeps the order of what it matches).
const MAX_QUERIES_PER_SOCKET: usize = 20;

/// How long a socket opened without a token may wait before `auth`.
const AUTH_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The token of a WebSocket handshake: `Authorization: Bearer`, the
/// `base64url.bearer.authorization.k8s.io.` subprotocol, or (opt-in) `?access_token=`.
fn handshake_token(t: &Transports, headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    crate::auth::bearer(headers)
        .or_else(|| crate::auth::ws_protocol_token(headers))
        .or_else(|| {
            t.auth.allow_query_token.then(|| {
                serde_urlencoded::from_str::<Vec<(String, String)>>(query.unwrap_or(""))
                    .ok()?
                    .into_iter()
                    .find(|(k, _)| k == "access_token")
                    .map(|(_, v)| v)
            })?
        })
}

/// Handles the upgrade request: credential and connection limits first (the
/// Host and Origin were checked by `crate::http::guard`, in front of every route).
pub(crate) async fn upgrade(
    State(t): State<Arc<Transports>>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    ws: Upgrade,
) -> Response {
    let token = handshake_token(&t, &headers, query.as_deref());
    // The address the per-client limits count, for the failure throttle.
    let ip = super::state::client_of(&extensions, None, &t.auth).ip;
    let principal = match (&token, t.auth.required()) {
        (Some(_), _) | (None, false) => {
            match t.auth.authenticate_from(ip, token.as_deref()).await {
                Ok(p) => Some(p),
                Err(e) => return e.into_response(),
            }
        }
        // No token: the socket must send an `auth` operation first (not
        // from an address that is refused for its failures).
        (None, true) => match t.auth.check_throttle(ip) {
            Ok(()) => None,
            Err(e) => return e.into_response(),
        },
    };
    let client = super::state::client_of(&extensions, principal.as_ref(), &t.auth);
    let admitted = match t.admit(&client) {
        Ok(a) => a,
        Err(response) => return *response,
    };
    let max = t.config.max_ws_message_bytes;
    let config = WebSocketConfig::default()
        .max_message_size(Some(max))
        .max_frame_size(Some(max))
        // Mostly server→client: a small read buffer (client operations are
        // short; longer ones take several reads). tungstenite writes only
        // its pongs and the close: the gateway writes its frames itself
        // (`ws::wire`).
        .read_buffer_size(256);
    let compression = t.config.compression;
    ws.accept(
        config,
        compression.websocket,
        max,
        move |socket, deflate| {
            t.metrics.ws_sessions.inc();
            let session = Session {
                principal: principal.map(Arc::new),
                token,
                client,
            };
            let level = deflate.map(|_| compression.level);
            // A future wrapping the session's, not an async block awaiting
            // it: that would keep room for both in the task.
            futures::FutureExt::map(run(t.clone(), socket, session, level), move |()| {
                t.metrics.ws_sessions.dec();
                drop(admitted);
            })
        },
    )
}

/// Who a socket belongs to; `principal` is None until an `auth` operation.
struct Session {
    principal: Option<Arc<Principal>>,
    token: Option<String>,
    client: super::limits::Client,
}

/// Refused subscribes in a row after which a socket is closed (policy).
const MAX_REFUSED_IN_A_ROW: u32 = 20;

/// Failed `auth` operations after which a socket is closed (4001).
const MAX_AUTH_FAILURES: u32 = 3;

/// `stopped` for subscription `id`.
fn stopped(id: &str, reason: &str) -> Out {
    Out::Text(protocol::with_subscription(
        &protocol::subscription_prefix(id),
        &ServerMessage::Stopped { reason }.encode(),
    ))
}

fn error(code: &str, message: &str, id: Option<&str>) -> Out {
    Out::Text(ServerMessage::Error { code, message, id }.encode())
}

/// The close code for a read error.
fn close_for(err: &WsError) -> (u16, String) {
    use tokio_tungstenite::tungstenite::error::CapacityError;
    let too_big = (close::TOO_BIG, "message too big".to_string());
    match err {
        WsError::Capacity(CapacityError::MessageTooLong { .. }) => too_big,
        WsError::Io(e) if e.get_ref().is_some_and(|e| e.is::<inflate::TooLong>()) => too_big,
        WsError::Utf8(_) => (close::INVALID_PAYLOAD, "text frames must be UTF-8".into()),
        WsError::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            (close::INVALID_PAYLOAD, e.to_string())
        }
        _ => (close::INVALID_PAYLOAD, "protocol error".into()),
    }
}

/// A socket's state, owned by its task.
struct Socket {
    session: Session,
    /// The place in its subject's session count that an `auth` operation
    /// took (a socket authenticated at its handshake holds it in its
    /// admission instead); released when the socket ends.
    subject_slot: Option<super::limits::Slot>,
    /// `auth` operations refused on this socket (closed at [`MAX_AUTH_FAILURES`]).
    auth_failures: u32,
    bucket: Bucket,
    /// Replies, and the subscriptions whose messages the task writes.
    outbox: Outbox,
}

/// An operation that waits for authentication (an `auth`, or the check of
/// the credential at its expiry); boxed, as only a socket doing one has it.
type Waiting = Pin<Box<dyn Future<Output = Waited> + Send>>;

/// What a [`Waiting`] operation found.
enum Waited {
    Auth {
        token: String,
        id: Option<String>,
        result: Result<Principal, AuthError>,
    },
    Recheck(Result<Principal, session::Revoked>),
}

/// What a client operation calls for.
enum Step {
    Reply(Option<Out>),
    Wait(Waiting),
}

/// How a socket ends.
enum End {
    /// With this close frame.
    Close(u16, String),
    /// The client closed (or the socket ended): the close is finished.
    Peer,
}

/// Resolves when the waiting operation completes (never without one).
async fn waited(waiting: &mut Option<Waiting>) -> Waited {
    match waiting {
        Some(operation) => operation.await,
        None => std::future::pending().await,
    }
}

fn slow_consumer(t: &Transports) -> End {
    t.metrics.slow_consumer_closes.inc();
    End::Close(
        close::SLOW_CONSUMER,
        "slow consumer: messages were not read in time".into(),
    )
}

/// A socket's one task: reads and answers operations, serves every
/// subscription, writes, pings, and re-checks the credential, until the
/// socket closes (then it sends the close frame). Not an `async fn`: one
/// keeps its arguments beside the values made of them for as long as it
/// runs, which for an idle socket's task was 416 bytes of 1 568
/// (`-Zprint-type-sizes`); the async block here uses its state in place.
fn run(
    t: Arc<Transports>,
    socket: upgrade::Socket,
    session: Session,
    deflate: Option<u32>,
) -> impl Future<Output = ()> + Send {
    let mut wire = Wire::new(socket);
    let auth_deadline = session
        .principal
        .is_none()
        .then(|| tokio::time::Instant::now() + AUTH_GRACE);
    let mut s = Socket {
        session,
        subject_slot: None,
        auth_failures: 0,
        bucket: Bucket::new(t.config.max_subscribes_per_second),
        outbox: Outbox::new(deflate),
    };
    async move {
        let mut last_seen = Instant::now();
        let mut next_ping = tokio::time::Instant::now() + t.config.heartbeat;
        // One timer for the ping, the wait for `auth` and the credential's expiry.
        let mut timer = std::pin::pin!(tokio::time::sleep_until(next_ping));
        let mut stopping = t.shutdown.wait();
        // The socket is not read while an operation waits; writes go on.
        let mut waiting: Option<Waiting> = None;
        // When to check the credential again, worked out once per expiry: made
        // afresh on every wake-up it moved by microseconds each time, and
        // resetting the timer takes the timer driver's lock.
        let mut recheck_of: Option<(chrono::DateTime<chrono::Utc>, tokio::time::Instant)> = None;
        let end = loop {
            let idle = waiting.is_none();
            let waiting_for_auth = auth_deadline.filter(|_| idle && s.session.principal.is_none());
            // The credential's expiry, from whichever principal the socket holds now.
            let recheck = s
                .session
                .principal
                .as_deref()
                .filter(|_| idle)
                .and_then(|p| {
                    let expires = p.expires?;
                    match recheck_of {
                        Some((of, at)) if of == expires => Some(at),
                        _ => {
                            let at = session::recheck_at(p)?;
                            recheck_of = Some((expires, at));
                            Some(at)
                        }
                    }
                });
            let due = [waiting_for_auth, recheck]
                .into_iter()
                .flatten()
                .fold(next_ping, std::cmp::min);
            if timer.deadline() != due {
                timer.as_mut().reset(due);
            }
            // In this order (no random start on every wake-up): shutdown, the
            // timer, an operation done, then the socket.
            tokio::select! {
                biased;
                () = std::future::poll_fn(|cx| stopping.poll(cx)) => break End::Close(close::GOING_AWAY, "server shutting down".into()),
                () = &mut timer => {
                    let now = tokio::time::Instant::now();
                    if waiting_for_auth.is_some_and(|at| at <= now) {
                        break End::Close(close::UNAUTHORIZED, "no auth operation within 10 s".into());
                    }
                    if let Some(current) = s.session.principal.clone()
                        && recheck.is_some_and(|at| at <= now)
                    {
                        let (t, token) = (t.clone(), s.session.token.clone());
                        waiting = Some(Box::pin(async move {
                            Waited::Recheck(session::recheck(&t, token.as_deref(), &current).await)
                        }));
                    }
                    if next_ping <= now {
                        if last_seen.elapsed() > t.config.ws_idle_timeout {
                            break End::Close(close::GOING_AWAY, "idle timeout".into());
                        }
                        s.outbox.ping();
                        s.outbox.heartbeats();
                        next_ping = now + t.config.heartbeat;
                    }
                }
                done = waited(&mut waiting) => {
                    waiting = None;
                    let out = match done {
                        Waited::Auth { token, id, result } => {
                            match authenticated(&t, &mut s, token, id.as_deref(), result) {
                                Ok(out) => out,
                                Err((code, reason)) => break End::Close(code, reason),
                            }
                        }
                        Waited::Recheck(Ok(renewed)) => {
                            s.session.principal = Some(Arc::new(renewed));
                            None
                        }
                        Waited::Recheck(Err(revoked)) => {
                            let (code, reason) = revoked_close(revoked);
                            break End::Close(code, reason);
                        }
                    };
                    if let Some(out) = out
                        && !s.outbox.reply(out)
                    {
                        break slow_consumer(&t);
                    }
                }
                event = std::future::poll_fn(|cx| wire.poll_event(&t, &mut s.outbox, idle, cx)) => {
                    let frame = match event {
                        Event::Frame(frame) => frame,
                        Event::Ended | Event::WriteFailed => break End::Peer,
                        Event::ReadFailed(e) => {
                            let (code, reason) = close_for(&e);
                            break End::Close(code, reason);
                        }
                        Event::Slow => break slow_consumer(&t),
                    };
                    last_seen = Instant::now();
                    let out = match frame {
                        Message::Text(text) => match handle(&t, text.as_str(), &mut s) {
                            Step::Reply(out) => out,
                            Step::Wait(operation) => {
                                waiting = Some(operation);
                                None
                            }
                        },
                        Message::Binary(_) => Some(error("binary_not_supported", "send operations as JSON text frames", None)),
                        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => None,
                        Message::Close(_) => break End::Peer,
                    };
                    if let Some(out) = out
                        && !s.outbox.reply(out)
                    {
                        break slow_consumer(&t);
                    }
                    if s.bucket.refused_in_a_row >= MAX_REFUSED_IN_A_ROW {
                        break End::Close(close::POLICY, "subscribe rate limit exceeded repeatedly".into());
                    }
                }
            }
        };
        // The subscriptions end (and leave the hub) before the close: nothing
        // more of them is written.
        drop(s);
        // Boxed: the close's timers and frame would otherwise be part of every
        // idle socket's task.
        match end {
            End::Close(code, reason) => Box::pin(wire.close(code, reason)).await,
            End::Peer => Box::pin(wire.finish()).await,
        }
    }
}

fn revoked_close(revoked: session::Revoked) -> (u16, String) {
    match revoked {
        session::Revoked::Expired(why) => (
            close::UNAUTHORIZED,
            truncate(&format!("credential no longer valid: {why}")),
        ),
        session::Revoked::Changed => (
            close::PERMISSIONS_CHANGED,
            "grants changed; reconnect".into(),
        ),
    }
}

/// Close reasons are at most 123 bytes.
fn truncate(text: &str) -> String {
    let mut end = text.len().min(120);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Handles one client operation: the reply, if any, or the authentication
/// it waits for.
fn handle(t: &Arc<Transports>, text: &str, s: &mut Socket) -> Step {
    let op = match parse(text) {
        Ok(op) => op,
        Err(reply) => return Step::Reply(Some(reply)),
    };
    match op {
        ClientOp::Auth { token, id } => {
            let (t, ip) = (t.clone(), s.session.client.ip);
            Step::Wait(Box::pin(async move {
                let result = t.auth.authenticate_from(ip, Some(&token)).await;
                Waited::Auth { token, id, result }
            }))
        }
        // Its messages not yet written are dropped with it: `stopped` is the
        // subscription's last message.
        ClientOp::Unsubscribe { id } if s.outbox.remove(&id) => {
            Step::Reply(Some(stopped(&id, "unsubscribed")))
        }
        op => Step::Reply(operate(t, s, op)),
    }
}

/// Parses one client operation, or the error message for the client.
#[cfg(test)]
pub(crate) fn parse_op(text: &str) -> Result<ClientOp, bytes::Bytes> {
    parse(text).map_err(|out| match out {
        Out::Text(bytes) => bytes,
        _ => bytes::Bytes::new(),
    })
}

/// Parses one client operation, or the error reply.
fn parse(text: &str) -> Result<ClientOp, Out> {
    // Strict: a key named twice would leave the operation to the parser.
    let value = match protocol::strict_json::parse(text) {
        Ok(v) => v,
        Err(e) => {
            return Err(error(
                "invalid_json",
                &format!("the message is not JSON: {e}"),
                None,
            ));
        }
    };
    let id = value.get("id").and_then(|v| v.as_str()).map(str::to_string);
    let op = match value.get("op").and_then(|v| v.as_str()) {
        Some("subscribe" | "unsubscribe" | "ping" | "auth") => {
            match serde_json::from_value::<ClientOp>(value) {
                Ok(op) => op,
                Err(e) => return Err(error("invalid_op", &e.to_string(), id.as_deref())),
            }
        }
        Some(other) => {
            return Err(error(
                "unknown_op",
                &format!("unknown op {other:?}; use subscribe, unsubscribe, ping or auth"),
                id.as_deref(),
            ));
        }
        None => {
            return Err(error(
                "invalid_op",
                "an operation needs an \"op\" field",
                id.as_deref(),
            ));
        }
    };
    Ok(op)
}

/// Subscribe, unsubscribe, ping: the reply, if any.
fn operate(t: &Arc<Transports>, s: &mut Socket, op: ClientOp) -> Option<Out> {
    match op {
        ClientOp::Subscribe {
            id,
            topics,
            since,
            debounce_ms,
            fields,
            filter,
            sort,
            limit,
            offset,
            after,
            group_by,
        } => {
            let Some(principal) = s.session.principal.clone() else {
                return Some(error(
                    "unauthenticated",
                    "send {\"op\": \"auth\", \"token\": …} before subscribing",
                    Some(&id),
                ));
            };
            if id.is_empty() || id.len() > MAX_ID_LEN {
                return Some(error(
                    "invalid_id",
                    &format!("a subscription id has 1 to {MAX_ID_LEN} bytes (UTF-8)"),
                    None,
                ));
            }
            if !s.bucket.take() || !t.limits.allow_subscribe(&s.session.client) {
                let message = format!(
                    "at most {} subscribe operations per second per socket, {} per client",
                    t.config.max_subscribes_per_second, t.config.max_subscribes_per_client_second
                );
                return Some(error("rate_limited", &message, Some(&id)));
            }
            if s.outbox.contains(&id) {
                return Some(error(
                    "duplicate_id",
                    &format!("subscription {id:?} exists; unsubscribe first"),
                    Some(&id),
                ));
            }
            if s.outbox.subscriptions() >= t.config.max_subscriptions_per_socket {
                let message = format!(
                    "at most {} subscriptions per socket",
                    t.config.max_subscriptions_per_socket
                );
                return Some(error("too_many_subscriptions", &message, Some(&id)));
            }
            let patterns = match session::patterns(&topics, t.config.max_topics_per_request) {
                Ok(p) => p,
                Err(e) => return Some(error("bad_pattern", &e, Some(&id))),
            };
            let options = match SubscribeOptions::parse(debounce_ms.as_ref(), fields.as_ref()) {
                Ok(o) => o,
                Err(e) => return Some(error("bad_option", &e, Some(&id))),
            };
            let members = QueryMembers {
                filter,
                sort,
                limit,
                offset,
                after,
                group_by,
            };
            let query = match session::query_spec(&members, &options) {
                Ok(q) => q,
                Err(e) => return Some(error("bad_query", &e, Some(&id))),
            };
            if query.is_some() && s.outbox.queries() >= MAX_QUERIES_PER_SOCKET {
                let message = format!("at most {MAX_QUERIES_PER_SOCKET} live queries per socket");
                return Some(error("too_many_subscriptions", &message, Some(&id)));
            }
            let normalized = query.as_ref().map(QuerySpec::normalized);
            let subscribed = ServerMessage::Subscribed {
                topics: &topics,
                debounce_ms: options.debounce_ms,
                fields: options.fields.as_ref().map(|f| f.pointers()),
                query: normalized.as_ref(),
            }
            .encode();
            let started =
                session::start(t, patterns, since.as_deref(), &principal, &options, query);
            s.outbox.add(Sub::new(id, subscribed, started, principal));
            None
        }
        ClientOp::Unsubscribe { id } => Some(error(
            "unknown_subscription",
            &format!("no subscription {id:?}"),
            Some(&id),
        )),
        ClientOp::Auth { .. } => None,
        // The answer carries the hub's cursor, which says how busy it is:
        // only for an authenticated socket.
        ClientOp::Ping { id } if s.session.principal.is_none() => Some(error(
            "unauthenticated",
            "send {\"op\": \"auth\", \"token\": …} before pinging",
            id.as_deref(),
        )),
        ClientOp::Ping { id } => {
            let cursor = t.hub.cursor(t.hub.seq());
            let heartbeat = ServerMessage::Heartbeat {
                cursor: &cursor,
                id: id.as_deref(),
                at: None,
                as_of: None,
            };
            Some(Out::Text(heartbeat.encode()))
        }
    }
}

/// The `auth` operation, once its token is checked: authenticates a socket
/// opened without a token, or renews the token of an authenticated one
/// (same subject and grants, else the socket closes with 4003). A refused
/// token counts against the client's address (see `crate::auth::throttle`)
/// and the socket: the third closes it with 4001; an address over its
/// failure limit closes it with 4029 without the token being looked at.
fn authenticated(
    t: &Arc<Transports>,
    s: &mut Socket,
    token: String,
    id: Option<&str>,
    result: Result<Principal, AuthError>,
) -> Result<Option<Out>, (u16, String)> {
    let principal = match result {
        Ok(p) => p,
        Err(e @ AuthError::Throttled { .. }) => {
            return Err((close::TOO_MANY, truncate(&e.to_string())));
        }
        Err(e @ (AuthError::Invalid(_) | AuthError::Missing)) => {
            s.auth_failures += 1;
            if s.auth_failures >= MAX_AUTH_FAILURES {
                return Err((
                    close::UNAUTHORIZED,
                    format!("{MAX_AUTH_FAILURES} failed auth operations"),
                ));
            }
            return Ok(Some(error(e.code(), &e.to_string(), id)));
        }
        Err(e) => return Ok(Some(error(e.code(), &e.to_string(), id))),
    };
    if let Some(current) = &s.session.principal
        && (current.subject != principal.subject || current.read != principal.read)
    {
        return Err(revoked_close(session::Revoked::Changed));
    }
    count_subject(t, s, &principal.subject)?;
    let reply = ServerMessage::Authenticated {
        subject: &principal.subject,
        expires: principal.expires,
        id,
    }
    .encode();
    s.session.token = Some(token);
    s.session.principal = Some(Arc::new(principal));
    Ok(Some(Out::Text(reply)))
}

/// Counts a socket that `auth` authenticated against its subject's session
/// limit, and charges its later subscribes to the subject's rate, as a
/// handshake with the token would have. A renewal (the socket already
/// counts for that subject) changes nothing; over the limit, the socket
/// closes with 4029.
fn count_subject(t: &Transports, s: &mut Socket, subject: &str) -> Result<(), (u16, String)> {
    if !t.auth.required() || s.session.client.subject.is_some() {
        return Ok(());
    }
    let client = super::limits::Client {
        ip: None,
        subject: Some(subject.to_string()),
    };
    match t.limits.admit(&client) {
        Ok(slot) => {
            s.subject_slot = Some(slot);
            s.session.client.subject = client.subject;
            Ok(())
        }
        Err(message) => {
            t.metrics.rejected_connections.inc();
            Err((
                close::TOO_MANY,
                truncate(&format!("too_many_connections: {message}")),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_limits_bursts() {
        let mut b = Bucket::new(3);
        assert!(b.take() && b.take() && b.take());
        assert!(!b.take());
        assert!(!b.take());
        assert_eq!(b.refused_in_a_row, 2);
    }
}
