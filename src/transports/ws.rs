//! WebSocket: `GET /api/v1/ws`. Clients send `subscribe` / `unsubscribe` /
//! `ping` operations; many subscriptions share one socket and every server
//! message carries its subscription id (`sub`). A reader task handles
//! operations, one forwarder per subscription feeds a bounded outbox, and a
//! writer owns the socket; protocol pings keep it alive.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::limits::Bucket;
use super::session;
use super::state::Transports;
use crate::auth::{AuthError, Principal};
use crate::protocol::{self, ClientOp, ServerMessage, SubscribeOptions, close};

/// Messages waiting for the writer; forwarders wait (up to the write timeout) when it is full.
const OUTBOX: usize = 64;
/// Longest accepted subscription id.
const MAX_ID_LEN: usize = 128;

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
/// Host and Origin were checked by `crate::guard`, in front of every route).
pub async fn upgrade(
    State(t): State<Arc<Transports>>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    ws: WebSocketUpgrade,
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
    ws.protocols([crate::auth::WS_PROTOCOL])
        .max_message_size(max)
        .max_frame_size(max)
        // Mostly server→client: a small read buffer (client operations are
        // short; longer ones take several reads), a modest write buffer.
        .read_buffer_size(1024)
        .write_buffer_size(16 * 1024)
        .on_upgrade(move |socket| async move {
            let _admitted = admitted;
            t.metrics.ws_sessions.inc();
            let session = Session {
                principal: principal.map(Arc::new),
                token,
                client,
            };
            run(t.clone(), socket, session).await;
            t.metrics.ws_sessions.dec();
        })
}

/// Who a socket belongs to; `principal` is None until an `auth` operation.
struct Session {
    principal: Option<Arc<Principal>>,
    token: Option<String>,
    client: super::limits::Client,
}

enum Out {
    Text(Bytes),
    Ping,
}

/// An outbox slot. Boxed because a channel allocates its slots 32 at a
/// time, for as long as it lives: 8-byte slots make that 256 bytes per
/// socket instead of 1 KiB, for one small allocation per queued message.
type Queued = Box<Out>;

/// How long a close frame may take to reach the client, and how long the
/// client's answering close frame is awaited: a client that resumes reading
/// within this grace sees the close code after what was buffered for it.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The close grace of a 4008 (slow consumer): what is buffered ahead of its
/// close frame is a full socket buffer, which a client coming back from a
/// stall (a background tab, a busy event loop) reads at its own pace.
const SLOW_CONSUMER_CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Refused subscribes in a row after which a socket is closed (policy).
const MAX_REFUSED_IN_A_ROW: u32 = 20;

/// Failed `auth` operations after which a socket is closed (4001).
const MAX_AUTH_FAILURES: u32 = 3;

/// Queues one message for the writer; false when the socket is gone or
/// slow (then `slow` is cancelled).
async fn push(
    t: &Transports,
    outbox: &mpsc::Sender<Queued>,
    slow: &CancellationToken,
    out: Out,
) -> bool {
    match session::hand_over(t, outbox, Box::new(out)).await {
        Ok(()) => true,
        Err(session::Undelivered::Closed) => false,
        Err(session::Undelivered::Slow) => {
            slow.cancel();
            false
        }
    }
}

/// A queued message as a frame: (frame, payload bytes).
fn frame_of(out: Out) -> Option<(Message, usize)> {
    Some(match out {
        Out::Text(bytes) => {
            let len = bytes.len();
            (Message::Text(Utf8Bytes::try_from(bytes).ok()?), len)
        }
        Out::Ping => (Message::Ping(Bytes::new()), 0),
    })
}

/// The close frame the reader asks for; None when it went without asking
/// (then `close` is None and this never completes again).
async fn close_requested(
    close: &mut Option<oneshot::Receiver<(u16, String)>>,
) -> Option<(u16, String)> {
    match close {
        Some(rx) => rx.await.ok(),
        None => std::future::pending().await,
    }
}

/// Owns the socket's sending half: writes what is queued (up to
/// [`session::MAX_BATCH`] frames) and flushes once, so a burst costs one
/// write, not one per message. It alone sends the close frame: the one the
/// reader asks for on `close` (ahead of queued messages, abandoning a write
/// in flight), or 4008 when a write stays blocked for the write timeout.
/// The close frame goes out after what is already buffered, within
/// [`CLOSE_GRACE`].
async fn write(
    t: Arc<Transports>,
    mut sink: futures::stream::SplitSink<WebSocket, Message>,
    mut outbox: mpsc::Receiver<Queued>,
    close: oneshot::Receiver<(u16, String)>,
    slow: CancellationToken,
) {
    // None once the reader has gone without asking for a close frame.
    let mut close = Some(close);
    let closing: Option<(u16, String)> = loop {
        let first = tokio::select! {
            biased;
            request = close_requested(&mut close) => match request {
                Some(request) => break Some(request),
                None => {
                    close = None;
                    continue;
                }
            },
            first = outbox.recv() => match first {
                Some(first) => first,
                None => break None,
            },
        };
        let (mut messages, mut sent) = (0, 0);
        let batch = async {
            let mut next = Some(first);
            let mut frames = 0;
            while let Some(out) = next.take() {
                if let Some((message, len)) = frame_of(*out) {
                    sink.feed(message).await?;
                    if len > 0 {
                        messages += 1;
                        sent += len;
                    }
                    frames += 1;
                }
                if frames < session::MAX_BATCH {
                    next = outbox.try_recv().ok();
                }
            }
            sink.flush().await
        };
        let written = tokio::select! {
            biased;
            request = close_requested(&mut close) => match request {
                // A feed abandoned here leaves no partial frame: tungstenite
                // buffers whole frames.
                Some(request) => break Some(request),
                None => {
                    close = None;
                    continue;
                }
            },
            written = tokio::time::timeout(t.config.write_timeout, batch) => written,
        };
        match written {
            Ok(Ok(())) => t.metrics.sent(messages, sent),
            Ok(Err(_)) => return,
            Err(_) => {
                slow.cancel();
                break Some((
                    close::SLOW_CONSUMER,
                    "slow consumer: messages were not read in time".into(),
                ));
            }
        }
    };
    match closing {
        Some((code, reason)) => {
            let frame = Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            }));
            let grace = if code == close::SLOW_CONSUMER {
                SLOW_CONSUMER_CLOSE_GRACE
            } else {
                CLOSE_GRACE
            };
            let _ = tokio::time::timeout(grace, sink.send(frame)).await;
        }
        None => {
            let _ = tokio::time::timeout(CLOSE_GRACE, sink.close()).await;
        }
    }
}

/// `stopped` for subscription `id`.
fn stopped(id: &str, reason: &str) -> Out {
    let id_json = serde_json::to_vec(id).expect("strings encode");
    Out::Text(protocol::with_subscription(
        &id_json,
        &ServerMessage::Stopped { reason }.encode(),
    ))
}

fn error(code: &str, message: &str, id: Option<&str>) -> Out {
    Out::Text(ServerMessage::Error { code, message, id }.encode())
}

/// Feeds one subscription into the outbox until it ends or the socket is
/// slow: `subscribed` (already encoded), its initial messages, `synced`,
/// then its changes.
fn forward(
    t: Arc<Transports>,
    id: String,
    subscribed: Bytes,
    started: session::Started,
    principal: Arc<Principal>,
    outbox: mpsc::Sender<Queued>,
    slow: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let id_json = serde_json::to_vec(&id).expect("strings encode");
        let session::Started {
            mut subscription,
            mut shaper,
            initial,
            synced,
        } = started;
        let push = |bytes: Bytes| push(&t, &outbox, &slow, Out::Text(bytes));
        if !push(protocol::with_subscription(&id_json, &subscribed)).await {
            return;
        }
        // By value: the snapshot frames are freed once sent, not kept for the session.
        for message in initial {
            if !push(protocol::with_subscription(&id_json, &message.json)).await {
                return;
            }
        }
        if !push(protocol::with_subscription(
            &id_json,
            &synced.message().encode(),
        ))
        .await
        {
            return;
        }
        let mut shutdown = std::pin::pin!(t.shutdown.cancelled());
        loop {
            let message = tokio::select! {
                _ = &mut shutdown => return,
                m = session::next(&t, &mut subscription, &principal, shaper.as_mut()) => m,
            };
            let Some(message) = message else { return };
            if !push(protocol::with_subscription(&id_json, &message.json)).await {
                return;
            }
            if let Some(at) = message.at {
                t.metrics.observe_delivery(at);
            }
        }
    })
}

/// The close code for a read error.
fn close_for(err: &axum::Error) -> (u16, String) {
    let text = err.to_string();
    let lower = text.to_ascii_lowercase();
    if lower.contains("too long") || lower.contains("space limit") || lower.contains("too big") {
        (close::TOO_BIG, "message too big".into())
    } else if lower.contains("utf-8") || lower.contains("utf8") {
        (close::INVALID_PAYLOAD, "text frames must be UTF-8".into())
    } else {
        (close::INVALID_PAYLOAD, "protocol error".into())
    }
}

/// A socket's state, owned by its reader loop.
struct Socket {
    session: Session,
    /// The place in its subject's session count that an `auth` operation
    /// took (a socket authenticated at its handshake holds it in its
    /// admission instead); released when the socket ends.
    subject_slot: Option<super::limits::Slot>,
    /// `auth` operations refused on this socket (closed at [`MAX_AUTH_FAILURES`]).
    auth_failures: u32,
    subscriptions: HashMap<String, JoinHandle<()>>,
    bucket: Bucket,
    outbox: mpsc::Sender<Queued>,
    slow: CancellationToken,
}

async fn run(t: Arc<Transports>, socket: WebSocket, session: Session) {
    let (sink, mut stream) = socket.split();
    let (outbox, outbox_rx) = mpsc::channel::<Queued>(OUTBOX);
    let (close_tx, close_rx) = oneshot::channel();
    let slow = CancellationToken::new();
    let writer = tokio::spawn(write(t.clone(), sink, outbox_rx, close_rx, slow.clone()));
    let auth_deadline = session
        .principal
        .is_none()
        .then(|| tokio::time::Instant::now() + AUTH_GRACE);
    let mut s = Socket {
        session,
        subject_slot: None,
        auth_failures: 0,
        subscriptions: HashMap::new(),
        bucket: Bucket::new(t.config.max_subscribes_per_second),
        outbox: outbox.clone(),
        slow: slow.clone(),
    };
    let mut last_seen = Instant::now();
    let mut ping = tokio::time::interval(t.config.heartbeat);
    ping.reset();
    let reply = |out: Out| outbox.try_send(Box::new(out)).is_ok();
    let close: Option<(u16, String)> = loop {
        let waiting_for_auth = auth_deadline.filter(|_| s.session.principal.is_none());
        // The credential's expiry, from whichever principal the socket holds now.
        let recheck = s.session.principal.as_deref().and_then(session::recheck_at);
        tokio::select! {
            _ = t.shutdown.cancelled() => break Some((close::GOING_AWAY, "server shutting down".into())),
            _ = slow.cancelled() => {
                t.metrics.slow_consumer_closes.inc();
                break Some((close::SLOW_CONSUMER, "slow consumer: messages were not read in time".into()));
            }
            _ = session::until(waiting_for_auth) => {
                break Some((close::UNAUTHORIZED, "no auth operation within 10 s".into()));
            }
            _ = session::until(recheck) => {
                let current = s.session.principal.clone().expect("rechecks follow authentication");
                match Box::pin(session::recheck(&t, s.session.token.as_deref(), &current)).await {
                    Ok(renewed) => s.session.principal = Some(Arc::new(renewed)),
                    Err(revoked) => break Some(revoked_close(revoked)),
                }
            }
            _ = ping.tick() => {
                if last_seen.elapsed() > t.config.ws_idle_timeout {
                    break Some((close::GOING_AWAY, "idle timeout".into()));
                }
                let _ = outbox.try_send(Box::new(Out::Ping));
            }
            frame = stream.next() => {
                let frame = match frame {
                    None => break None,
                    Some(Err(e)) => break Some(close_for(&e)),
                    Some(Ok(frame)) => frame,
                };
                last_seen = Instant::now();
                let out = match frame {
                    // Boxed: `auth` makes a large future, which inline would
                    // be part of every idle socket's task.
                    Message::Text(text) => match Box::pin(handle(&t, text.as_str(), &mut s)).await {
                        Ok(out) => out,
                        Err(close) => break Some(close),
                    },
                    Message::Binary(_) => Some(error("binary_not_supported", "send operations as JSON text frames", None)),
                    Message::Ping(_) | Message::Pong(_) => None,
                    Message::Close(_) => break None,
                };
                if let Some(out) = out
                    && !reply(out)
                {
                    slow.cancel();
                }
                if s.bucket.refused_in_a_row >= MAX_REFUSED_IN_A_ROW {
                    break Some((close::POLICY, "subscribe rate limit exceeded repeatedly".into()));
                }
            }
        }
    };
    let mut subscriptions = std::mem::take(&mut s.subscriptions);
    drop(s);
    for (_, task) in subscriptions.drain() {
        task.abort();
    }
    // The writer sends the close frame (ahead of anything still queued);
    // without one it finishes the queue and closes.
    let closing = close.is_some();
    if let Some(close) = close {
        let _ = close_tx.send(close);
    } else {
        drop(close_tx);
    }
    drop(outbox);
    let _ = writer.await;
    if closing {
        // Finish the closing handshake: read (and drop) what the client still
        // sends until its close frame, so the socket is not reset under it.
        let drain = async {
            while let Some(Ok(frame)) = stream.next().await {
                if matches!(frame, Message::Close(_)) {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(CLOSE_GRACE, drain).await;
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

/// Handles one client operation: the reply, if any, or the close it calls for.
async fn handle(
    t: &Arc<Transports>,
    text: &str,
    s: &mut Socket,
) -> Result<Option<Out>, (u16, String)> {
    let op = match parse(text) {
        Ok(op) => op,
        Err(reply) => return Ok(Some(reply)),
    };
    match op {
        ClientOp::Auth { token, id } => authenticate(t, s, &token, id.as_deref()).await,
        ClientOp::Unsubscribe { id } if s.subscriptions.contains_key(&id) => {
            let task = s.subscriptions.remove(&id).expect("checked above");
            task.abort();
            // The forwarder is gone once this returns: `stopped` is the
            // subscription's last message.
            let _ = task.await;
            Ok(Some(stopped(&id, "unsubscribed")))
        }
        op => Ok(operate(t, s, op)),
    }
}

/// Parses one client operation, or the error message for the client.
#[cfg(test)]
pub(crate) fn parse_op(text: &str) -> Result<ClientOp, Bytes> {
    parse(text).map_err(|out| match out {
        Out::Text(bytes) => bytes,
        _ => Bytes::new(),
    })
}

/// Parses one client operation, or the error reply.
fn parse(text: &str) -> Result<ClientOp, Out> {
    let value: serde_json::Value = match serde_json::from_str(text) {
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
                    &format!("a subscription id has 1 to {MAX_ID_LEN} characters"),
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
            s.subscriptions.retain(|_, task| !task.is_finished());
            if s.subscriptions.contains_key(&id) {
                return Some(error(
                    "duplicate_id",
                    &format!("subscription {id:?} exists; unsubscribe first"),
                    Some(&id),
                ));
            }
            if s.subscriptions.len() >= t.config.max_subscriptions_per_socket {
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
            let subscribed = ServerMessage::Subscribed {
                topics: &topics,
                debounce_ms: options.debounce_ms,
                fields: options.fields.as_ref().map(|f| f.pointers()),
            }
            .encode();
            let started = session::start(t, patterns, since.as_deref(), &principal, &options);
            let task = forward(
                t.clone(),
                id.clone(),
                subscribed,
                started,
                principal,
                s.outbox.clone(),
                s.slow.clone(),
            );
            s.subscriptions.insert(id, task);
            None
        }
        ClientOp::Unsubscribe { id } => Some(error(
            "unknown_subscription",
            &format!("no subscription {id:?}"),
            Some(&id),
        )),
        ClientOp::Auth { .. } => None,
        ClientOp::Ping { id } => {
            let cursor = t.hub.cursor(t.hub.seq());
            let heartbeat = ServerMessage::Heartbeat {
                cursor: &cursor,
                id: id.as_deref(),
            };
            Some(Out::Text(heartbeat.encode()))
        }
    }
}

/// The `auth` operation: authenticates a socket opened without a token, or
/// renews the token of an authenticated one (same subject and grants, else
/// the socket closes with 4003). A refused token counts against the
/// client's address (see `crate::auth::throttle`) and the socket: the
/// third closes it with 4001; an address over its failure limit closes it
/// with 4029 without the token being looked at.
async fn authenticate(
    t: &Arc<Transports>,
    s: &mut Socket,
    token: &str,
    id: Option<&str>,
) -> Result<Option<Out>, (u16, String)> {
    let principal = match t
        .auth
        .authenticate_from(s.session.client.ip, Some(token))
        .await
    {
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
    s.session.token = Some(token.to_string());
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
