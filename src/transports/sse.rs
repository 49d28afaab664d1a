//! Server-Sent Events: `GET /api/v1/events?topic=…&topic=…[&since=CURSOR]`.
//! `id:` is the cursor, `event:` the message type, `data:` one JSON line;
//! comment heartbeats keep proxies from closing the stream; `Last-Event-ID`
//! (or `since`) resumes. Pleasant from `curl -N`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::session::{self, Message, Undelivered};
use super::state::Transports;
use crate::auth::{Credential, Principal};
use crate::error::Error;
use crate::protocol::{ServerMessage, SubscribeOptions, error_response, sse};

/// Where the stream is served.
pub const PATH: &str = "/api/v1/events";

/// Longest accepted query string.
const MAX_QUERY: usize = 16 * 1024;

/// A message's SSE event: the frame cached on a hub change, else made now.
fn frame_of(m: &Message) -> Bytes {
    m.sse
        .clone()
        .unwrap_or_else(|| sse::frame(&m.cursor, m.kind, &m.json))
}

struct Request {
    topics: Vec<String>,
    since: Option<String>,
    debounce_ms: Option<String>,
    fields: Vec<String>,
}

fn parse_query(raw: Option<&str>) -> Result<Request, Error> {
    let raw = raw.unwrap_or("");
    if raw.len() > MAX_QUERY {
        return Err(Error::BadRequest(format!(
            "the query string is longer than {MAX_QUERY} bytes"
        )));
    }
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw)
        .map_err(|e| Error::BadRequest(format!("malformed query string: {e}")))?;
    let mut request = Request {
        topics: Vec::new(),
        since: None,
        debounce_ms: None,
        fields: Vec::new(),
    };
    for (key, value) in pairs {
        match key.as_str() {
            "topic" => request.topics.push(value),
            "since" => request.since = Some(value),
            "debounceMs" => request.debounce_ms = Some(value),
            "field" => request.fields.push(value),
            other => {
                return Err(Error::BadRequest(format!(
                    "unknown query parameter {other:?}; this endpoint takes topic (repeatable), since, debounceMs and field (repeatable)"
                )));
            }
        }
    }
    Ok(request)
}

/// Handles `GET /api/v1/events` (authenticated by the middleware).
pub async fn events(
    State(t): State<Arc<Transports>>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    axum::Extension(principal): axum::Extension<Principal>,
    axum::Extension(credential): axum::Extension<Credential>,
    RawQuery(query): RawQuery,
) -> Response {
    let request = match parse_query(query.as_deref()) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let patterns = match session::patterns(&request.topics, t.config.max_topics_per_request) {
        Ok(p) => p,
        Err(e) => return Error::BadRequest(e).into_response(),
    };
    let options =
        match SubscribeOptions::from_query(request.debounce_ms.as_deref(), &request.fields) {
            Ok(o) => o,
            Err(e) => return error_response(StatusCode::BAD_REQUEST, "bad_option", &e),
        };
    let client = super::state::client_of(&extensions, Some(&principal), &t.auth);
    if !t.limits.allow_subscribe(&client) {
        let message = format!(
            "at most {} subscriptions per second per client",
            t.config.max_subscribes_per_client_second
        );
        let mut response = error_response(StatusCode::TOO_MANY_REQUESTS, "rate_limited", &message);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    }
    let permit = match t.admit(&client) {
        Ok(p) => p,
        Err(response) => return *response,
    };
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let since = last_event_id.or(request.since);
    let started = session::start(&t, patterns, since.as_deref(), &principal, &options);
    let (tx, rx) = mpsc::channel::<Chunk>(8);
    let transports = t.clone();
    tokio::spawn(async move {
        let _permit = permit;
        transports.metrics.sse_sessions.inc();
        run(&transports, started, &tx, principal, credential).await;
        transports.metrics.sse_sessions.dec();
    });
    let body = Body::from_stream(futures::StreamExt::map(ReceiverStream::new(rx), |chunk| {
        Ok::<_, std::convert::Infallible>(*chunk)
    }));
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// What the session hands its connection: one or more whole events. Boxed
/// because a channel allocates its slots 32 at a time, for as long as it
/// lives: 8-byte slots make that 256 bytes per session instead of 1 KiB
/// (one small allocation per chunk instead; a chunk carries every message
/// queued when the session woke).
type Chunk = Box<Bytes>;

/// Hands `bytes` (holding `messages` messages) to the connection.
async fn send(
    t: &Transports,
    tx: &mpsc::Sender<Chunk>,
    bytes: Bytes,
    messages: usize,
) -> Result<(), Undelivered> {
    let len = bytes.len();
    session::hand_over(t, tx, Box::new(bytes)).await?;
    t.metrics.sent(messages, len);
    Ok(())
}

async fn run(
    t: &Transports,
    started: session::Started,
    tx: &mpsc::Sender<Chunk>,
    mut principal: Principal,
    credential: Credential,
) {
    let session::Started {
        mut subscription,
        mut shaper,
        initial,
        synced,
    } = started;
    let result: Result<(), Undelivered> = async {
        send(t, tx, sse::retry(t.config.sse_retry), 1).await?;
        // By value: the snapshot frames are freed once sent, not kept for the session.
        for message in initial {
            send(t, tx, frame_of(&message), 1).await?;
        }
        send(t, tx, sse::message_frame(&synced.cursor, &synced.message()), 1).await?;
        let mut heartbeat = tokio::time::interval(t.config.heartbeat);
        heartbeat.reset();
        let mut recheck = session::recheck_at(&principal);
        // Made once, not per message: each registers a waiter when polled.
        let mut shutdown = std::pin::pin!(t.shutdown.cancelled());
        let mut closed = std::pin::pin!(tx.closed());
        loop {
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = &mut closed => return Err(Undelivered::Closed),
                _ = heartbeat.tick() => send(t, tx, Bytes::from_static(sse::HEARTBEAT), 1).await?,
                _ = session::until(recheck) => {
                    // Boxed: an authentication round trip is a large future, and
                    // inline it would be part of every idle session's task.
                    match Box::pin(session::recheck(t, credential.0.as_deref(), &principal)).await {
                        Ok(renewed) => {
                            principal = renewed;
                            recheck = session::recheck_at(&principal);
                        }
                        Err(revoked) => {
                            let (code, message) = match revoked {
                                session::Revoked::Expired(why) => ("token_expired", format!("the session's credential is no longer valid: {why}")),
                                session::Revoked::Changed => ("permissions_changed", "the session's grants changed; reconnect".to_string()),
                            };
                            let error = ServerMessage::Error { code, message: &message, id: None };
                            // The event's id becomes Last-Event-ID: only a
                            // cursor this subscription may resume from.
                            let cursor = t.hub.cursor(subscription.resume_seq());
                            let _ = send(t, tx, sse::message_frame(&cursor, &error), 1).await;
                            return Ok(());
                        }
                    }
                }
                message = session::next(t, &mut subscription, &principal, shaper.as_mut()) => match message {
                    Some(first) => {
                        // Everything already queued goes out as one chunk:
                        // one wake-up of the connection and one write.
                        let mut ats = vec![first.at];
                        let mut chunk = frame_of(&first);
                        let mut joined: Option<bytes::BytesMut> = None;
                        while ats.len() < session::MAX_BATCH {
                            let Some(m) = session::try_next(t, &mut subscription, &principal, shaper.as_mut()) else {
                                break;
                            };
                            joined
                                .get_or_insert_with(|| bytes::BytesMut::from(&chunk[..]))
                                .extend_from_slice(&frame_of(&m));
                            ats.push(m.at);
                        }
                        if let Some(joined) = joined {
                            chunk = joined.freeze();
                        }
                        send(t, tx, chunk, ats.len()).await?;
                        for at in ats.into_iter().flatten() {
                            t.metrics.observe_delivery(at);
                        }
                    }
                    None => return Ok(()),
                },
            }
        }
    }
    .await;
    if let Err(Undelivered::Slow) = result {
        t.metrics.slow_consumer_closes.inc();
        tracing::info!("SSE subscriber closed: it did not read for longer than the write timeout");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries() {
        let r = parse_query(Some("topic=clusters%2F*&topic=apps/**&since=e-3"))
            .ok()
            .unwrap();
        assert_eq!(r.topics, ["clusters/*", "apps/**"]);
        assert_eq!(r.since.as_deref(), Some("e-3"));
        let r = parse_query(Some(
            "topic=apps/**&debounceMs=1000&field=/phase&field=/reason",
        ))
        .ok()
        .unwrap();
        assert_eq!(r.debounce_ms.as_deref(), Some("1000"));
        assert_eq!(r.fields, ["/phase", "/reason"]);
        assert!(parse_query(Some("topics=x")).is_err());
        assert!(parse_query(Some(&"topic=a&".repeat(3000))).is_err());
    }
}
