//! Server-Sent Events: `GET /api/v1/events?topic=…&topic=…[&since=CURSOR]`.
//! `id:` is the cursor, `event:` the message type, `data:` one JSON line;
//! heartbeat events (with `asOf`) keep proxies from closing the stream; `Last-Event-ID`
//! (or `since`) resumes. Pleasant from `curl -N`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::session::{self, Message, Shaping, Undelivered};
use super::shape::Shaper;
use super::state::{Admitted, Transports};
use crate::auth::{Credential, Principal};
use crate::error::Error;
use crate::hub::Subscription;
use crate::protocol::deflate::{self, Deflated, GzipStream};
use crate::protocol::{ServerMessage, SubscribeOptions, error_response, sse};
use crate::query::QueryMembers;
use serde_json::Value;

/// Where the stream is served.
pub const PATH: &str = "/api/v1/events";

/// Bytes of opening frames (snapshots) a gzip stream compresses together.
const OPENING_CHUNK: usize = 64 * 1024;

/// Longest accepted query string.
const MAX_QUERY: usize = 16 * 1024;

struct Request {
    topics: Vec<String>,
    since: Option<String>,
    debounce_ms: Option<String>,
    fields: Vec<String>,
    /// A live query's parameters, as JSON values (checked later).
    query: QueryMembers,
}

/// A number parameter as JSON (a number when it reads as one, else the
/// text, which the query's checks refuse by name).
fn number_or_text(value: String) -> Value {
    match value.parse::<u64>() {
        Ok(n) => Value::from(n),
        Err(_) => Value::String(value),
    }
}

fn parse_query(raw: Option<&str>) -> Result<Request, Error> {
    let raw = raw.unwrap_or("");
    if raw.len() > MAX_QUERY {
        return Err(Error::BadRequest(format!(
            "the query string is longer than {MAX_QUERY} bytes"
        )));
    }
    let pairs = crate::protocol::query_string::pairs_once(raw, &["topic", "field", "sort"])
        .map_err(Error::BadRequest)?;
    let mut request = Request {
        topics: Vec::new(),
        since: None,
        debounce_ms: None,
        fields: Vec::new(),
        query: QueryMembers::default(),
    };
    let mut sort: Vec<Value> = Vec::new();
    for (key, value) in pairs {
        match key.as_str() {
            "topic" => request.topics.push(value),
            "since" => request.since = Some(value),
            "debounceMs" => request.debounce_ms = Some(value),
            "field" => request.fields.push(value),
            "filter" => {
                let filter = crate::protocol::strict_json::parse(&value).map_err(|e| {
                    Error::BadRequest(format!(
                        "filter: not JSON ({e}); e.g. filter={{\"eq\":[\"/phase\",\"Running\"]}}"
                    ))
                })?;
                request.query.filter = Some(filter);
            }
            "sort" => sort.extend(value.split(',').map(|f| Value::String(f.to_string()))),
            "limit" => request.query.limit = Some(number_or_text(value)),
            "offset" => request.query.offset = Some(number_or_text(value)),
            "after" => request.query.after = Some(Value::String(value)),
            "groupBy" => request.query.group_by = Some(Value::String(value)),
            other => {
                return Err(Error::BadRequest(format!(
                    "unknown query parameter {other:?}; this endpoint takes topic (repeatable), since, debounceMs, field (repeatable), and for a live query filter, sort, limit, offset, after and groupBy"
                )));
            }
        }
    }
    if !sort.is_empty() {
        request.query.sort = Some(Value::Array(sort));
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
        Err(e) => return Error::BadPattern(e).into_response(),
    };
    let options =
        match SubscribeOptions::from_query(request.debounce_ms.as_deref(), &request.fields) {
            Ok(o) => o,
            Err(e) => return error_response(StatusCode::BAD_REQUEST, "bad_option", &e),
        };
    let query = match session::query_spec(&request.query, &options) {
        Ok(q) => q,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, "bad_query", &e),
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
    let admitted = match t.admit(&client) {
        Ok(p) => p,
        Err(response) => return *response,
    };
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let since = last_event_id.or(request.since);
    let started = session::start(&t, patterns, since.as_deref(), &principal, &options, query);
    let compression = t.config.compression;
    let gzip = compression.sse
        && headers
            .get_all(header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(deflate::accepts_gzip);
    let gzip = gzip.then_some(compression.level);
    let direct = extensions.get::<WrittenDirectly>().is_some();
    let stream = EventStream::new(&t, started, principal, credential, admitted, gzip, direct);
    let mut response = if direct {
        let mut response = StatusCode::OK.into_response();
        let extensions = response.extensions_mut();
        extensions.insert(WriteTimeout {
            limit: t.config.write_timeout,
            metrics: t.metrics.clone(),
        });
        extensions.insert(Direct::new(stream));
        response
    } else {
        (StatusCode::OK, through_a_task(stream)).into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if compression.sse {
        h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    if gzip.is_some() {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

/// Marks a request whose response the connection that read it writes to
/// its socket itself ([`crate::http::sse_socket`], the plain listener): the
/// event stream is then polled by that connection's task, the only task
/// of the stream. Through hyper (TLS, HTTP/2) a task of its own feeds
/// hyper's body through a channel instead.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WrittenDirectly;

/// Set on an event stream written directly, in place of its body (which
/// is empty): the stream itself, for the connection to take
/// ([`Direct::take`]) and poll inside its own task. Behind the response
/// body's box it was one more object apart in memory per delivery
/// (docs/benchmarks/33-objects-per-delivery.md). Its chunks come framed
/// as chunks of an HTTP/1.1 chunked body already, so that a change's chunk
/// is made once for every stream (the copy of each event behind its size
/// line was 1 % of the server's CPU at 1 000 subscribers,
/// docs/benchmarks/30-same-message.md).
#[derive(Clone)]
pub(crate) struct Direct(Arc<parking_lot::Mutex<Option<DirectEvents>>>);

impl Direct {
    fn new(stream: EventStream) -> Self {
        Self(Arc::new(parking_lot::Mutex::new(Some(DirectEvents(
            stream,
        )))))
    }

    /// The stream, once.
    pub(crate) fn take(&self) -> Option<DirectEvents> {
        self.0.lock().take()
    }
}

/// An event stream written directly: its chunks, each one or more whole
/// events framed as an HTTP/1.1 chunk.
pub(crate) struct DirectEvents(EventStream);

impl DirectEvents {
    /// The next chunk; None once the stream ended.
    pub(crate) fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.0.poll_chunk(cx)
    }
}

/// Set on an event stream written directly: a write that waits longer than
/// `limit` for the client to read means a slow subscriber, and the stream
/// ends ([`WriteTimeout::expired`]).
#[derive(Clone)]
pub(crate) struct WriteTimeout {
    pub(crate) limit: std::time::Duration,
    metrics: Arc<crate::metrics::Metrics>,
}

impl WriteTimeout {
    /// Counts and logs the close of a subscriber that stopped reading.
    pub(crate) fn expired(&self) {
        slow_close(&self.metrics);
    }
}

fn slow_close(metrics: &crate::metrics::Metrics) {
    metrics.slow_consumer_closes.inc();
    tracing::info!("SSE subscriber closed: it did not read for longer than the write timeout");
}

/// What a task feeding hyper hands the body: one or more whole events.
/// Boxed because a channel allocates its slots 32 at a time, for as long
/// as it lives: 8-byte slots make that 256 bytes per stream instead of
/// 1 KiB.
type Chunk = Box<Bytes>;

/// `stream` as hyper's body, fed by a task of its own: the task waits at
/// most the write timeout for room in the channel, then ends the stream.
fn through_a_task(mut stream: EventStream) -> Body {
    let (tx, rx) = mpsc::channel::<Chunk>(8);
    tokio::spawn(async move {
        let t = stream.t.clone();
        let mut closed = std::pin::pin!(tx.closed());
        loop {
            let chunk = tokio::select! {
                chunk = futures::StreamExt::next(&mut stream) => chunk,
                () = &mut closed => return,
            };
            let Some(Ok(chunk)) = chunk else { return };
            match session::hand_over(&t, &tx, Box::new(chunk)).await {
                Ok(()) => {}
                Err(Undelivered::Closed) => return,
                Err(Undelivered::Slow) => return slow_close(&t.metrics),
            }
        }
    });
    Body::from_stream(futures::StreamExt::map(ReceiverStream::new(rx), |chunk| {
        Ok::<_, std::convert::Infallible>(*chunk)
    }))
}

/// An SSE session as a stream of chunks, each one or more whole events: the
/// `retry:` hint, the initial messages, `synced`, then live messages (all
/// queued ones in one chunk), heartbeats, and the credential's checks at its
/// expiry. Polled by whatever writes it; nothing runs between polls, so a
/// writer that waits on its client leaves the changes in the subscription's
/// queue (and, when that fills, the hub collapses them to a resync).
struct EventStream {
    t: Arc<Transports>,
    subscription: Subscription,
    /// Present when the subscription has options (`debounceMs`, `fields`).
    shaping: Option<Shaping<Box<Shaper>>>,
    /// `retry:`, then the initial messages, then `synced`.
    opening: Option<Box<Opening>>,
    heartbeat: Heartbeat,
    /// A `heartbeat` event is to be written: at every tick, busy or not (it
    /// carries `asOf`, which changes flowing for some topics say nothing
    /// about for the others).
    heartbeat_due: bool,
    /// When the credential must be checked again (its expiry).
    recheck: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The check under way.
    renewing: Option<Renewing>,
    stopping: super::stopping::Stopping,
    principal: Principal,
    credential: Credential,
    ended: bool,
    /// A gzip response: its stream, and the compression level.
    gzip: Option<(GzipStream, u32)>,
    /// Written directly ([`Direct`]): each chunk carries its own framing.
    chunked: bool,
    _admitted: Admitted,
}

/// The heartbeat's timer, ticking every `period` (a tick missed while the
/// stream was busy is not made up for). A stream goes idle after every
/// message it writes, so the timer is asked twice per delivery: polling
/// tokio's timer each time cost about 2 % of the server's CPU at 1 000
/// subscribers (docs/benchmarks/19-latency-profile.md), and reading the
/// clock to compare with its deadline about 1 % (§30). The timer is polled
/// with the subscription's alarm waker instead, and asked again only once
/// the alarm was raised: a flag in the subscription's queue, which the
/// stream loads on every delivery anyway (an object of its own was one
/// more cache miss per delivery, §33).
struct Heartbeat {
    sleep: Pin<Box<tokio::time::Sleep>>,
    period: std::time::Duration,
    /// The subscription's alarm waker, made once.
    alarm: std::task::Waker,
    /// The timer has been polled with `alarm` (its wake-up raises the alarm).
    armed: bool,
}

impl Heartbeat {
    fn new(period: std::time::Duration, subscription: &Subscription) -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep(period)),
            period,
            alarm: subscription.alarm(),
            armed: false,
        }
    }

    /// Ready at a tick. The task is woken through the subscription, so the
    /// caller waits in [`Subscription::poll_next`] after a pending answer.
    fn poll(&mut self, subscription: &Subscription) -> Poll<()> {
        if self.armed && !subscription.take_alarm() {
            return Poll::Pending;
        }
        self.armed = true;
        match self
            .sleep
            .as_mut()
            .poll(&mut Context::from_waker(&self.alarm))
        {
            Poll::Ready(()) => {
                let next = tokio::time::Instant::now() + self.period;
                self.sleep.as_mut().reset(next);
                // The reset timer is polled (and armed) on the next ask.
                self.armed = false;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A batch's bytes: one frame as it is (no copy), more joined.
#[derive(Default)]
struct Frames {
    first: Option<Bytes>,
    joined: Option<BytesMut>,
}

impl Frames {
    fn push(&mut self, frame: Bytes) {
        match self.first.take() {
            None if self.joined.is_none() => self.first = Some(frame),
            first => {
                let joined = self.joined();
                if let Some(first) = first {
                    joined.extend_from_slice(&first);
                }
                joined.extend_from_slice(&frame);
            }
        }
    }

    fn joined(&mut self) -> &mut BytesMut {
        self.joined.get_or_insert_with(BytesMut::new)
    }

    fn freeze(self) -> Bytes {
        self.joined
            .map(BytesMut::freeze)
            .or(self.first)
            .unwrap_or_default()
    }
}

type Renewing = Pin<Box<dyn Future<Output = Result<Principal, session::Revoked>> + Send>>;

/// What a stream sends before live messages.
struct Opening {
    retry: Option<Bytes>,
    /// By value: each snapshot is freed once its frame is made.
    initial: std::vec::IntoIter<Message>,
    synced: Option<Bytes>,
}

impl Opening {
    fn next(&mut self) -> Option<Bytes> {
        if let Some(retry) = self.retry.take() {
            return Some(retry);
        }
        if let Some(message) = self.initial.next() {
            return Some(message.sse_frame());
        }
        self.synced.take()
    }
}

impl EventStream {
    fn new(
        t: &Arc<Transports>,
        started: session::Started,
        principal: Principal,
        credential: Credential,
        admitted: Admitted,
        gzip: Option<u32>,
        chunked: bool,
    ) -> Self {
        let session::Started {
            subscription,
            shaper,
            initial,
            synced,
        } = started;
        let opening = Opening {
            retry: Some(sse::retry(t.config.sse_retry)),
            initial: initial.into_iter(),
            synced: Some(sse::message_frame(&synced.cursor, &synced.message())),
        };
        let heartbeat = Heartbeat::new(t.config.heartbeat, &subscription);
        let recheck =
            session::recheck_at(&principal).map(|at| Box::pin(tokio::time::sleep_until(at)));
        t.metrics.sse_sessions.inc();
        Self {
            t: t.clone(),
            subscription,
            shaping: shaper.map(|s| Shaping::new(Box::new(s))),
            opening: Some(Box::new(opening)),
            heartbeat,
            heartbeat_due: false,
            recheck,
            renewing: None,
            stopping: t.shutdown.wait(),
            principal,
            credential,
            ended: false,
            gzip: gzip.map(|level| (GzipStream::default(), level)),
            chunked,
            _admitted: admitted,
        }
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.ended {
            // A gzip stream's final block and trailer, once.
            let trailer = self.gzip.take().map(|(mut gzip, _)| gzip.finish());
            return Poll::Ready(trailer.map(|t| self.counted(t, 0)));
        }
        if let Some(opening) = &mut self.opening {
            match opening.next() {
                // Compressed, the opening goes in chunks of many frames:
                // snapshots compressed together share their field names.
                Some(frame) if self.gzip.is_some() => {
                    let mut frames = BytesMut::from(&frame[..]);
                    let mut count = 1;
                    while frames.len() < OPENING_CHUNK
                        && let Some(frame) = opening.next()
                    {
                        frames.extend_from_slice(&frame);
                        count += 1;
                    }
                    return Poll::Ready(Some(self.sent(frames.freeze(), count)));
                }
                Some(frame) => return Poll::Ready(Some(self.sent(frame, 1))),
                None => self.opening = None,
            }
        }
        if self.stopping.poll(cx).is_ready() {
            self.ended = true;
            return self.poll_chunk(cx);
        }
        if let Some(error) = self.poll_credential(cx) {
            self.ended = true;
            return Poll::Ready(Some(self.sent(error, 1)));
        }
        // The timer is polled only when it woke (see `Heartbeat`).
        while self.heartbeat.poll(&self.subscription).is_ready() {
            self.heartbeat_due = true;
        }
        if std::mem::take(&mut self.heartbeat_due) {
            let json = session::heartbeat(&self.t, &self.subscription, &self.principal);
            return Poll::Ready(Some(self.sent(sse::heartbeat_frame(&json), 1)));
        }
        let (t, principal) = (&self.t, &self.principal);
        let shaping = self.shaping.as_mut();
        if let Poll::Ready(first) =
            session::poll_next(t, &mut self.subscription, principal, shaping, cx)
        {
            return Poll::Ready(Some(self.batch(first)));
        }
        Poll::Pending
    }

    /// `first` and every message already queued behind it (up to
    /// [`session::MAX_BATCH`]) as one chunk: one write for all of them. A
    /// shared change alone in its batch goes as the chunk made once for
    /// every stream; in a gzip response each message is compressed once (a
    /// shared change for every stream) and the pieces spliced into this
    /// response's stream.
    fn batch(&mut self, first: Message) -> Bytes {
        let now = std::time::Instant::now();
        let metrics = &self.t.metrics;
        let mut chunk = Frames::default();
        let mut next = Some(first);
        let mut count = 0;
        while let Some(m) = next.take() {
            metrics.observe_delivery(m.at, now);
            count += 1;
            if count < session::MAX_BATCH {
                let shaper = self.shaping.as_mut().map(|s| s.shaper.as_mut());
                next = session::try_next(&self.t, &mut self.subscription, &self.principal, shaper);
            }
            match &mut self.gzip {
                Some((stream, level)) => stream.put(chunk.joined(), &m.sse_deflated(*level)),
                None if self.chunked && count == 1 && next.is_none() => {
                    metrics.sent(1, m.sse_frame().len());
                    return m.sse_chunk();
                }
                None => chunk.push(m.sse_frame()),
            }
        }
        self.counted(chunk.freeze(), count)
    }

    /// `frames` (made for this stream alone) as the response writes them:
    /// compressed in a gzip response.
    fn sent(&mut self, frames: Bytes, messages: usize) -> Bytes {
        let chunk = match &mut self.gzip {
            Some((gzip, level)) => gzip.chunk([&Deflated::new(&frames, *level)]),
            None => frames,
        };
        self.counted(chunk, messages)
    }

    /// Counts `chunk` as written and frames it for a stream written directly.
    fn counted(&self, chunk: Bytes, messages: usize) -> Bytes {
        self.t.metrics.sent(messages, chunk.len());
        if self.chunked {
            sse::http_chunk(&chunk)
        } else {
            chunk
        }
    }

    /// The error event that ends the stream when the credential no longer
    /// holds at its expiry; None while it holds (a renewed credential moves
    /// the next check to its own expiry).
    fn poll_credential(&mut self, cx: &mut Context<'_>) -> Option<Bytes> {
        if self.renewing.is_none() {
            let timer = self.recheck.as_mut()?;
            if timer.as_mut().poll(cx).is_pending() {
                return None;
            }
            self.recheck = None;
            let (t, current) = (self.t.clone(), self.principal.clone());
            let token = self.credential.0.clone();
            self.renewing = Some(Box::pin(async move {
                session::recheck(&t, token.as_deref(), &current).await
            }));
        }
        let renewing = self.renewing.as_mut()?;
        let checked = match renewing.as_mut().poll(cx) {
            Poll::Pending => return None,
            Poll::Ready(checked) => checked,
        };
        self.renewing = None;
        let revoked = match checked {
            Ok(renewed) => {
                self.recheck =
                    session::recheck_at(&renewed).map(|at| Box::pin(tokio::time::sleep_until(at)));
                self.principal = renewed;
                // The new timer is polled (and registered) on the next poll.
                cx.waker().wake_by_ref();
                return None;
            }
            Err(revoked) => revoked,
        };
        let (code, message) = match revoked {
            session::Revoked::Expired(why) => (
                "token_expired",
                format!("the session's credential is no longer valid: {why}"),
            ),
            session::Revoked::Changed => (
                "permissions_changed",
                "the session's grants changed; reconnect".to_string(),
            ),
        };
        let error = ServerMessage::Error {
            code,
            message: &message,
            id: None,
        };
        // The event's id becomes Last-Event-ID: only a cursor this
        // subscription may resume from.
        let cursor = self.t.hub.cursor(self.subscription.resume_seq());
        Some(sse::message_frame(&cursor, &error))
    }
}

impl futures::Stream for EventStream {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_chunk(cx).map(|chunk| chunk.map(Ok))
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.t.metrics.sse_sessions.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the heartbeat ticks now, the way the stream asks: the
    /// heartbeat, then the subscription (which registers `cx`).
    fn ticked(
        heartbeat: &mut Heartbeat,
        subscription: &mut Subscription,
        cx: &mut Context<'_>,
    ) -> bool {
        let ticked = heartbeat.poll(subscription).is_ready();
        assert!(subscription.poll_next(cx).is_pending(), "nothing published");
        ticked
    }

    #[tokio::test(start_paused = true)]
    async fn the_heartbeat_ticks_once_per_period_and_wakes_its_task() {
        use std::time::Duration;
        let hub = crate::hub::Hub::new(crate::hub::HubConfig::default());
        let mut subscription = hub.subscribe(vec![crate::hub::Pattern::parse("**").unwrap()]);
        let mut heartbeat = Heartbeat::new(Duration::from_secs(10), &subscription);
        let task = Arc::new(Woken(std::sync::atomic::AtomicUsize::new(0)));
        let waker = futures::task::waker(task.clone());
        let mut cx = Context::from_waker(&waker);
        let sub = &mut subscription;
        assert!(!ticked(&mut heartbeat, sub, &mut cx));
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(task.count(), 0, "not woken before the first tick");
        assert!(!ticked(&mut heartbeat, sub, &mut cx));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(task.count(), 1, "woken at the first tick");
        assert!(ticked(&mut heartbeat, sub, &mut cx));
        assert!(
            !ticked(&mut heartbeat, sub, &mut cx),
            "the next tick is a period away"
        );
        // Ticks missed meanwhile (a busy stream) are not made up for.
        tokio::time::advance(Duration::from_secs(35)).await;
        assert!(ticked(&mut heartbeat, sub, &mut cx));
        assert!(!ticked(&mut heartbeat, sub, &mut cx));
        // The timer wakes the task that waits on the subscription, period
        // after period.
        let woken = task.count();
        for period in 1..=3 {
            tokio::time::advance(Duration::from_secs(10)).await;
            assert_eq!(task.count(), woken + period, "woken at tick {period}");
            assert!(ticked(&mut heartbeat, sub, &mut cx));
            assert!(!ticked(&mut heartbeat, sub, &mut cx));
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(task.count(), woken + 3, "not woken between ticks");
        // A published change still wakes it, and leaves the heartbeat be.
        hub.put("apps/a/b/c", serde_json::json!({"i": 1}));
        assert_eq!(task.count(), woken + 4);
        assert!(!heartbeat.poll(sub).is_ready());
        assert!(sub.poll_next(&mut cx).is_ready());
    }

    struct Woken(std::sync::atomic::AtomicUsize);

    impl Woken {
        fn count(&self) -> usize {
            self.0.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    impl futures::task::ArcWake for Woken {
        fn wake_by_ref(this: &Arc<Self>) {
            this.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn a_batch_of_one_frame_is_not_copied() {
        let one = Bytes::from_static(b"data: 1\n\n");
        let mut frames = Frames::default();
        frames.push(one.clone());
        assert_eq!(frames.freeze().as_ptr(), one.as_ptr());
        let mut frames = Frames::default();
        for f in ["a\n\n", "b\n\n", "c\n\n"] {
            frames.push(Bytes::from_static(f.as_bytes()));
        }
        assert_eq!(&frames.freeze()[..], b"a\n\nb\n\nc\n\n");
        assert!(Frames::default().freeze().is_empty());
    }

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
        // Repeatable: topic, field, sort; any other parameter takes one value.
        let r = parse_query(Some("topic=apps/**&sort=/state&sort=-/ready&limit=5"))
            .ok()
            .unwrap();
        assert_eq!(r.query.sort, Some(serde_json::json!(["/state", "-/ready"])));
        for raw in [
            "topic=apps/**&limit=1&limit=2",
            "topic=apps/**&groupBy=/phase&groupBy=/name",
            "topic=apps/**&since=e-1&since=e-2",
            "topic=clusters/%zz",
            "topic=clusters/%ff",
        ] {
            assert!(parse_query(Some(raw)).is_err(), "{raw}");
        }
    }
}
