//! A WebSocket as its session's one task drives it (`hub ──▶ [ws::wire]
//! ──▶ client`, operations the other way): the socket is read and written
//! from the same poll, and the socket's subscriptions are served there too
//! (no task per subscription, no channel between them and the writer).
//! Messages are taken from the subscriptions only when the socket can
//! take them, so what waits for a client that does not read stays in its
//! hub queues (bounded, collapsed to snapshots when they overflow); a
//! batch the socket does not take within the write timeout makes the
//! client a slow consumer.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::Sleep;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::super::session::{self, Shaping};
use super::super::shape::Shaper;
use super::super::state::Transports;
use super::super::wake_flag::WakeFlag;
use super::upgrade::Socket;
use crate::auth::Principal;
use crate::hub::Subscription;
use crate::protocol::deflate::{self, Deflated};
use crate::protocol::{self, close};

/// Replies to a socket's operations (and pings) waiting to be written; a
/// client that sends more operations while not reading the answers is a
/// slow consumer.
const MAX_REPLIES: usize = 64;

/// Batches written per wake-up before the task lets others run.
const ROUNDS: usize = 4;

/// A batch takes no more frames once it holds this many bytes (a socket
/// loading many large snapshots holds one batch of them at a time).
const BATCH_BYTES: usize = 16 * 1024;

/// How long a close frame may take to reach the client, and how long the
/// client's answering close frame is awaited: a client that resumes reading
/// within this grace sees the close code after what was buffered for it.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The close grace of a 4008 (slow consumer): what is buffered ahead of its
/// close frame is a full socket buffer, which a client coming back from a
/// stall (a background tab, a busy event loop) reads at its own pace.
const SLOW_CONSUMER_CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// A reply or a ping, written before the subscriptions' messages.
pub(super) enum Out {
    Text(Bytes),
    Ping,
}

/// One subscription of a socket.
pub(super) struct Sub {
    id: Box<str>,
    /// `{"sub":ID,`, spliced into each of its messages.
    prefix: Box<[u8]>,
    principal: Arc<Principal>,
    subscription: Subscription,
    /// `subscribed`, the initial messages and `synced`, in order, before
    /// any live message; its buffer is freed once sent.
    first: VecDeque<Bytes>,
    /// Boxed: only subscriptions with options have one.
    shaping: Option<Box<Shaping<Shaper>>>,
    /// A `heartbeat` (with `asOf`) is to be written: at every ping tick.
    heartbeat_due: bool,
}

impl Sub {
    /// Subscription `id`, whose `subscribed` message is already encoded.
    pub(super) fn new(
        id: String,
        subscribed: Bytes,
        started: session::Started,
        principal: Arc<Principal>,
    ) -> Self {
        let session::Started {
            subscription,
            shaper,
            initial,
            synced,
        } = started;
        let mut first = VecDeque::with_capacity(initial.len() + 2);
        first.push_back(subscribed);
        // By value: the snapshot frames are freed once sent, not kept for the session.
        first.extend(initial.into_iter().map(|m| m.json()));
        first.push_back(synced.message().encode());
        Self {
            prefix: protocol::subscription_prefix(&id),
            id: id.into(),
            principal,
            subscription,
            first,
            shaping: shaper.map(|s| Box::new(Shaping::new(s))),
            heartbeat_due: false,
        }
    }

    /// Its next message, with its subscription id (compressed at
    /// `deflate`'s level when the socket agreed to it): the payload, and
    /// when the hub published it.
    fn poll_next(
        &mut self,
        t: &Transports,
        deflate: Option<u32>,
        cx: &mut Context<'_>,
    ) -> Poll<(Payload, Option<std::time::Instant>)> {
        if let Some(json) = self.first.pop_front() {
            if self.first.is_empty() {
                self.first = VecDeque::new();
            }
            return Poll::Ready((self.own(t, &json, deflate), None));
        }
        if std::mem::take(&mut self.heartbeat_due) {
            let json = session::heartbeat(t, &self.subscription, &self.principal);
            return Poll::Ready((self.own(t, &json, deflate), None));
        }
        let shaping = self.shaping.as_deref_mut();
        let message = ready!(session::poll_next(
            t,
            &mut self.subscription,
            &self.principal,
            shaping,
            cx
        ));
        let payload = match deflate.and_then(|level| message.ws_deflated(level)) {
            Some(body) => Payload::Deflated(deflate::ws_payload(&self.prefix, &body)),
            None => Payload::Plain(message.ws_json(&self.prefix)),
        };
        Poll::Ready((payload, message.at))
    }

    /// A message made for this subscription alone. A snapshot's document
    /// is compressed apart from the fields before it (its cursor is the
    /// subscription's), so that sockets loading the same documents share
    /// the work ([`deflate::Recent`]).
    fn own(&self, t: &Transports, json: &Bytes, deflate: Option<u32>) -> Payload {
        let Some(level) = deflate.filter(|_| json.len() >= deflate::MIN_BYTES) else {
            return Payload::Plain(protocol::with_subscription(&self.prefix, json));
        };
        Payload::Deflated(match protocol::snapshot_doc_at(json) {
            Some(at) => {
                let body = t.recent_snapshots.deflate(&json.slice(at..), level);
                deflate::ws_payload(&[&self.prefix[..], &json[1..at]].concat(), &body)
            }
            None => deflate::ws_payload(&self.prefix, &Deflated::new(&json[1..], level)),
        })
    }
}

/// A message as the socket writes it.
enum Payload {
    /// JSON text.
    Plain(Bytes),
    /// JSON text compressed (`permessage-deflate`, RSV1 set).
    Deflated(Bytes),
}

/// What a socket has to write: replies to its operations first, then its
/// subscriptions' messages, each subscription in order and all of them in
/// turn.
pub(super) struct Outbox {
    replies: VecDeque<Out>,
    subs: Vec<Sub>,
    /// The subscription served first next time.
    turn: usize,
    /// The compression level of a socket that agreed to `permessage-deflate`.
    deflate: Option<u32>,
}

impl Outbox {
    pub(super) fn new(deflate: Option<u32>) -> Self {
        Self {
            replies: VecDeque::new(),
            subs: Vec::new(),
            turn: 0,
            deflate,
        }
    }

    /// Queues a reply; false when [`MAX_REPLIES`] are already waiting.
    pub(super) fn reply(&mut self, out: Out) -> bool {
        if self.replies.len() >= MAX_REPLIES {
            return false;
        }
        self.replies.push_back(out);
        true
    }

    /// Queues a ping unless replies are already waiting (they keep the
    /// socket as busy).
    pub(super) fn ping(&mut self) {
        if self.replies.is_empty() {
            self.replies.push_back(Out::Ping);
        }
    }

    /// Every subscription writes a `heartbeat` next.
    pub(super) fn heartbeats(&mut self) {
        for sub in &mut self.subs {
            sub.heartbeat_due = true;
        }
    }

    pub(super) fn subscriptions(&self) -> usize {
        self.subs.len()
    }

    /// How many of its subscriptions are live queries.
    pub(super) fn queries(&self) -> usize {
        self.subs
            .iter()
            .filter(|s| s.shaping.as_ref().is_some_and(|sh| sh.shaper.is_query()))
            .count()
    }

    pub(super) fn contains(&self, id: &str) -> bool {
        self.subs.iter().any(|s| &*s.id == id)
    }

    pub(super) fn add(&mut self, sub: Sub) {
        // One at a time: a first push would make room for four (a socket
        // mostly has one subscription).
        self.subs.reserve_exact(1);
        self.subs.push(sub);
    }

    /// Ends subscription `id`: nothing more of it is written. False when
    /// the socket has none of that id.
    pub(super) fn remove(&mut self, id: &str) -> bool {
        let Some(i) = self.subs.iter().position(|s| &*s.id == id) else {
            return false;
        };
        self.subs.remove(i);
        if self.subs.is_empty() {
            self.subs = Vec::new();
        }
        true
    }

    /// The next thing to write. Pending registers `cx` with every
    /// subscription that has nothing now.
    fn poll_next(&mut self, t: &Transports, cx: &mut Context<'_>) -> Poll<Next> {
        if let Some(out) = self.replies.pop_front() {
            if self.replies.is_empty() {
                self.replies = VecDeque::new();
            }
            return Poll::Ready(match out {
                Out::Text(json) => Next::Text(Payload::Plain(json), None),
                Out::Ping => Next::Ping,
            });
        }
        let n = self.subs.len();
        for k in 0..n {
            let i = (self.turn + k) % n;
            if let Poll::Ready((payload, at)) = self.subs[i].poll_next(t, self.deflate, cx) {
                self.turn = i + 1;
                return Poll::Ready(Next::Text(payload, at));
            }
        }
        Poll::Pending
    }
}

/// A frame to write: a message (with when the hub published it), or a ping.
enum Next {
    Text(Payload, Option<std::time::Instant>),
    Ping,
}

/// What happened on a socket.
pub(super) enum Event {
    /// A frame from the client.
    Frame(Message),
    /// The client closed, or the socket ended.
    Ended,
    /// A frame could not be read (too big, not UTF-8, not WebSocket).
    ReadFailed(WsError),
    /// A write failed: the socket is gone.
    WriteFailed,
    /// A batch was not taken within the write timeout.
    Slow,
}

/// Frames and bytes of messages in a written batch (pings count no message).
#[derive(Clone, Copy, Default)]
struct Batch {
    messages: usize,
    bytes: usize,
}

/// A batch's frames as the socket writes them, and how much of them it has.
struct Outgoing {
    frames: Vec<u8>,
    written: usize,
    batch: Batch,
}

/// The first byte of a final text frame (RSV1 set when compressed) and of
/// a ping (RFC 6455 §5.2).
const TEXT: u8 = 0x81;
const RSV1: u8 = 0x40;
const PING: u8 = 0x89;

/// Appends a server frame (unmasked, final) to `out`: its first byte, the
/// payload length in the shortest form, the payload.
fn put_frame(out: &mut Vec<u8>, first: u8, payload: &[u8]) {
    let len = payload.len();
    // One allocation for the header and the payload (at most 10 + len).
    out.reserve(10 + len);
    out.push(first);
    match len {
        0..=125 => out.push(len as u8),
        126..=0xffff => {
            out.push(126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

/// The socket, and what is being written to it.
pub(super) struct Wire {
    socket: Socket,
    /// Set by the socket's read side: it is polled when woken for it, and
    /// after a frame was read (tungstenite may hold more).
    readable: WakeFlag,
    /// The batch being written. The gateway writes its own frames to the
    /// connection: tungstenite's write buffer keeps the capacity of the
    /// largest batch it ever wrote (a socket's opening snapshots) for as
    /// long as the socket lives; this one is freed once written. The
    /// socket is not read meanwhile: a read may make tungstenite write
    /// (a pong, a close), which must not land inside a frame.
    out: Option<Outgoing>,
    /// The socket was read since tungstenite last flushed: a read may queue
    /// a reply of its own (a pong, a close), flushed before the next batch.
    replied: bool,
    /// Armed while a batch waits for the socket (boxed: only then); at its
    /// deadline the client is a slow consumer.
    stall: Option<Pin<Box<Sleep>>>,
}

impl Wire {
    pub(super) fn new(socket: Socket) -> Self {
        Self {
            socket,
            readable: WakeFlag::new(),
            out: None,
            replied: false,
            stall: None,
        }
    }

    /// Writes what `outbox` has while the socket takes it, then reads a
    /// frame when `reading`: ready with what happened, pending when
    /// nothing did (with `cx` registered wherever something could).
    pub(super) fn poll_event(
        &mut self,
        t: &Transports,
        outbox: &mut Outbox,
        reading: bool,
        cx: &mut Context<'_>,
    ) -> Poll<Event> {
        if self.poll_write(t, outbox, cx).is_err() {
            return Poll::Ready(Event::WriteFailed);
        }
        if reading && self.out.is_none() {
            self.readable.register(cx.waker());
            if self.readable.take() {
                let read = self.socket.poll_next_unpin(&mut self.readable.context());
                // Whatever it returned, a read may have left a reply of
                // tungstenite's own unwritten.
                self.replied = true;
                if read.is_ready() {
                    self.readable.set();
                }
                match read {
                    Poll::Ready(Some(Ok(frame))) => return Poll::Ready(Event::Frame(frame)),
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Event::ReadFailed(e)),
                    Poll::Ready(None) => return Poll::Ready(Event::Ended),
                    Poll::Pending => {}
                }
            }
        }
        if let Some(stall) = &mut self.stall
            && stall.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Event::Slow);
        }
        Poll::Pending
    }

    /// Batches of up to [`session::MAX_BATCH`] frames, each encoded once
    /// and written while the socket takes them.
    fn poll_write(
        &mut self,
        t: &Transports,
        outbox: &mut Outbox,
        cx: &mut Context<'_>,
    ) -> Result<(), WsError> {
        // Each round writes the batch before it, then makes the next: the
        // last round only writes, so that the socket is read again.
        for round in 0..=ROUNDS {
            if let Some(out) = &mut self.out {
                if poll_write_all(self.socket.get_mut(), out, cx)?.is_pending() {
                    self.arm_stall(t);
                    return Ok(());
                }
                t.metrics.sent(out.batch.messages, out.batch.bytes);
                self.out = None;
                self.stall = None;
            }
            if self.replied {
                if self.socket.poll_flush_unpin(cx)?.is_pending() {
                    self.arm_stall(t);
                    return Ok(());
                }
                self.replied = false;
                self.stall = None;
            }
            if round == ROUNDS {
                break;
            }
            let mut out = Outgoing {
                frames: Vec::new(),
                written: 0,
                batch: Batch::default(),
            };
            let mut frames = 0;
            // The delivery lag's clock, read once per batch of live changes.
            let mut now = None;
            while frames < session::MAX_BATCH && out.frames.len() < BATCH_BYTES {
                let Poll::Ready(next) = outbox.poll_next(t, cx) else {
                    break;
                };
                match next {
                    Next::Ping => put_frame(&mut out.frames, PING, &[]),
                    Next::Text(payload, at) => {
                        // The gateway's own JSON, UTF-8 as serde wrote it:
                        // a text frame as it is, RSV1 when compressed.
                        let (bytes, first) = match payload {
                            Payload::Plain(json) => (json, TEXT),
                            Payload::Deflated(bytes) => (bytes, TEXT | RSV1),
                        };
                        debug_assert!(first != TEXT || std::str::from_utf8(&bytes).is_ok());
                        put_frame(&mut out.frames, first, &bytes);
                        out.batch.bytes += bytes.len();
                        out.batch.messages += 1;
                        if at.is_some() {
                            let now = *now.get_or_insert_with(std::time::Instant::now);
                            t.metrics.observe_delivery(at, now);
                        }
                    }
                }
                frames += 1;
            }
            if frames == 0 {
                return Ok(());
            }
            self.out = Some(out);
        }
        // More may be waiting: let other tasks run, then come back.
        cx.waker().wake_by_ref();
        Ok(())
    }

    fn arm_stall(&mut self, t: &Transports) {
        self.stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(t.config.write_timeout)));
    }

    /// Sends close frame `code` after what is already buffered, within
    /// the close grace, then reads (and drops) what the client still sends
    /// until its own close frame, so the socket is not reset under it.
    pub(super) async fn close(mut self, code: u16, reason: String) {
        let grace = if code == close::SLOW_CONSUMER {
            SLOW_CONSUMER_CLOSE_GRACE
        } else {
            CLOSE_GRACE
        };
        let frame = Message::Close(Some(CloseFrame {
            code: CloseCode::from(code),
            reason: reason.into(),
        }));
        let send = async {
            self.finish_batch().await?;
            self.socket.send(frame).await
        };
        let _ = tokio::time::timeout(grace, send).await;
        let drain = async {
            while let Some(Ok(frame)) = self.socket.next().await {
                if matches!(frame, Message::Close(_)) {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(CLOSE_GRACE, drain).await;
    }

    /// Completes a close the client started: tungstenite queued its answer
    /// (the client's code echoed, RFC 6455 §5.5.1) when it read the close,
    /// and the sink's close writes it. (`WebSocketStream::close` would send
    /// a close of its own instead, which tungstenite refuses after the
    /// peer's, leaving the answer unwritten.)
    pub(super) async fn finish(mut self) {
        let close = async {
            self.finish_batch().await?;
            SinkExt::close(&mut self.socket).await
        };
        let _ = tokio::time::timeout(CLOSE_GRACE, close).await;
    }

    /// Writes the rest of the batch under way, if any: a close frame goes
    /// after whole frames only.
    async fn finish_batch(&mut self) -> Result<(), WsError> {
        let Some(out) = self.out.take() else {
            return Ok(());
        };
        let rest = &out.frames[out.written..];
        self.socket
            .get_mut()
            .write_all(rest)
            .await
            .map_err(WsError::Io)
    }
}

/// Writes what is left of `out` while `io` takes it.
fn poll_write_all<W: AsyncWrite + Unpin>(
    io: &mut W,
    out: &mut Outgoing,
    cx: &mut Context<'_>,
) -> Poll<Result<(), WsError>> {
    while out.written < out.frames.len() {
        match ready!(Pin::new(&mut *io).poll_write(cx, &out.frames[out.written..])) {
            Ok(0) => return Poll::Ready(Err(WsError::Io(std::io::ErrorKind::WriteZero.into()))),
            Ok(n) => out.written += n,
            Err(e) => return Poll::Ready(Err(WsError::Io(e))),
        }
    }
    Poll::Ready(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_tungstenite::tungstenite::protocol::frame::FrameHeader;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Control, Data, OpCode};

    #[test]
    fn frames_are_read_back_by_tungstenite() {
        for (first, len) in [
            (TEXT, 0),
            (TEXT, 125),
            (TEXT | RSV1, 126),
            (TEXT, 0xffff),
            (TEXT | RSV1, 0x10000),
            (PING, 0),
        ] {
            let payload = vec![b'x'; len];
            let mut out = Vec::new();
            put_frame(&mut out, first, &payload);
            let mut cursor = std::io::Cursor::new(&out);
            let (header, length) = FrameHeader::parse(&mut cursor).unwrap().unwrap();
            assert_eq!(length, len as u64, "the length of {len} bytes");
            assert!(header.is_final);
            assert_eq!(header.rsv1, first & RSV1 != 0);
            assert!(!header.rsv2 && !header.rsv3);
            assert!(header.mask.is_none(), "server frames are not masked");
            let opcode = match first {
                PING => OpCode::Control(Control::Ping),
                _ => OpCode::Data(Data::Text),
            };
            assert_eq!(header.opcode, opcode);
            assert_eq!(&out[cursor.position() as usize..], &payload[..]);
        }
    }
}
