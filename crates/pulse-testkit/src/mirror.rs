//! Clients that rebuild every document from the wire, as a browser does:
//! a WebSocket or an SSE stream on its own socket (with a receive buffer
//! the test chooses), and a [`Mirror`] of `(rev, doc)` per topic that
//! records every revision gap instead of hiding it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::Message;

/// Which transport a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A WebSocket.
    Ws,
    /// Server-Sent Events.
    Sse,
}

/// Documents rebuilt from snapshots, patches and removals.
#[derive(Debug, Default)]
pub struct Mirror {
    /// `(rev, doc)` by topic.
    pub docs: BTreeMap<String, (u64, Value)>,
    /// The cursor of the last subscription message (safe to resume from).
    pub cursor: Option<String>,
    /// Whether the initial snapshots (or the replay) are complete.
    pub synced: bool,
    /// `resumed` of the last `synced`.
    pub resumed: Option<bool>,
    /// Topics where a patch did not start from the revision held.
    pub gaps: BTreeSet<String>,
    /// Snapshots received after `synced` (catch-up snapshots of a lagging subscription).
    pub late_snapshots: usize,
    /// Patches at or below the revision held after `synced` (ignored), by
    /// topic: a revision that went back.
    pub stale: BTreeSet<String>,
    /// `removed` messages received after `synced`, by topic.
    pub removed: BTreeSet<String>,
    /// Topics snapshotted since the (re)subscription, until `synced`: with
    /// `resumed: false` they are the whole state, and every other document
    /// held from before is dropped.
    fresh: BTreeSet<String>,
    /// Messages applied (heartbeats not counted).
    pub messages: usize,
}

impl Mirror {
    /// Prepares for a resubscription (resume) on a new connection.
    pub fn resubscribe(&mut self) {
        self.synced = false;
        self.fresh.clear();
    }

    /// Applies one message of the subscription, as docs/PROTOCOL.md says a client must.
    pub fn apply(&mut self, message: &Value) {
        let kind = message["type"].as_str().unwrap_or_default();
        if kind == "heartbeat" {
            return;
        }
        self.messages += 1;
        if let Some(cursor) = message["cursor"].as_str() {
            self.cursor = Some(cursor.to_string());
        }
        let topic = message["topic"].as_str().unwrap_or_default().to_string();
        let rev = message["rev"].as_u64().unwrap_or(0);
        match kind {
            "snapshot" => {
                if self.synced {
                    self.late_snapshots += 1;
                } else {
                    self.fresh.insert(topic.clone());
                }
                self.docs.insert(topic, (rev, message["doc"].clone()));
            }
            "patch" => match self.docs.get_mut(&topic) {
                Some((have, _)) if rev <= *have => {
                    if self.synced {
                        self.stale.insert(topic);
                    }
                }
                Some((have, doc)) if rev == *have + 1 => {
                    json_patch::merge(doc, &message["patch"]);
                    *have = rev;
                }
                _ => {
                    self.gaps.insert(topic);
                }
            },
            "removed" => {
                if self.synced {
                    self.removed.insert(topic.clone());
                }
                self.docs.remove(&topic);
            }
            "synced" => {
                self.synced = true;
                self.resumed = message["resumed"].as_bool();
                let fresh = std::mem::take(&mut self.fresh);
                if self.resumed == Some(false) {
                    self.docs.retain(|topic, _| fresh.contains(topic));
                }
            }
            other => panic!("unexpected message {other:?}: {message}"),
        }
    }

    /// Topics whose document differs from `truth` (missing, extra or different).
    pub fn differences(&self, truth: &BTreeMap<String, Value>) -> Vec<String> {
        differences(self.docs.iter().map(|(t, (_, d))| (t, d)), truth)
    }
}

/// Topics whose document in `held` (topic, document) differs from `truth`:
/// missing, extra or different.
pub fn differences<'a>(
    held: impl IntoIterator<Item = (&'a String, &'a Value)>,
    truth: &BTreeMap<String, Value>,
) -> Vec<String> {
    let held: BTreeMap<&String, &Value> = held.into_iter().collect();
    let mut wrong: Vec<String> = truth
        .iter()
        .filter(|(topic, doc)| held.get(topic).copied() != Some(*doc))
        .map(|(topic, _)| topic.clone())
        .collect();
    wrong.extend(
        held.keys()
            .filter(|t| !truth.contains_key(**t))
            .map(|t| (*t).clone()),
    );
    wrong
}

/// What a connection yields: a message, or its end with the WebSocket
/// close code (None: no close frame, or an SSE stream that ended).
pub type Next = Result<Value, Option<u16>>;

/// One open subscription on every status document (`clusters/**`,
/// `apps/**`, `tasks/**`: what REST lists; not the summary topics).
#[derive(Debug)]
pub enum Conn {
    /// A WebSocket subscription.
    Ws(Box<tokio_tungstenite::WebSocketStream<TcpStream>>),
    /// An SSE stream.
    Sse(SseConn),
}

/// An SSE response body being read, and the bytes of an incomplete event.
#[derive(Debug)]
pub struct SseConn {
    body: hyper::body::Incoming,
    buffer: Vec<u8>,
    ready: std::collections::VecDeque<Value>,
}

/// A loopback socket to `base` (http://IP:PORT) with a receive buffer of
/// about `recv_buffer` bytes when given (set before connecting, so the TCP
/// window stays small).
async fn socket(base: &str, recv_buffer: Option<u32>) -> TcpStream {
    let addr: std::net::SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size).unwrap();
    }
    socket.connect(addr).await.unwrap()
}

impl Conn {
    /// Subscribes to every status document over `via`, resuming from `since` when given.
    pub async fn open(base: &str, via: Via, since: Option<&str>, recv_buffer: Option<u32>) -> Self {
        let stream = socket(base, recv_buffer).await;
        match via {
            Via::Ws => {
                let url = format!("{}/api/v1/ws", base.replace("http://", "ws://"));
                let (mut ws, _) = tokio_tungstenite::client_async(url, stream)
                    .await
                    .expect("the WebSocket opens");
                let mut op = json!({"op": "subscribe", "id": "all", "topics": ["clusters/**", "apps/**", "tasks/**"]});
                if let Some(cursor) = since {
                    op["since"] = json!(cursor);
                }
                ws.send(Message::Text(op.to_string().into())).await.unwrap();
                Conn::Ws(Box::new(ws))
            }
            Via::Sse => {
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                        .await
                        .unwrap();
                tokio::spawn(connection);
                let host = base.trim_start_matches("http://");
                let mut request = http::Request::get(
                    "/api/v1/events?topic=clusters/**&topic=apps/**&topic=tasks/**",
                )
                .header(http::header::HOST, host)
                .header(http::header::ACCEPT, "text/event-stream");
                if let Some(cursor) = since {
                    request = request.header("Last-Event-ID", cursor);
                }
                let response = sender
                    .send_request(request.body(http_body_util::Empty::<Bytes>::new()).unwrap())
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200, "the SSE stream opens");
                Conn::Sse(SseConn {
                    body: response.into_body(),
                    buffer: Vec::new(),
                    ready: Default::default(),
                })
            }
        }
    }

    /// The next message within `within`; Err(None) also when nothing came.
    pub async fn next_within(&mut self, within: Duration) -> Next {
        match tokio::time::timeout(within, self.next()).await {
            Ok(next) => next,
            Err(_) => Err(None),
        }
    }

    /// Lets the kernel buffer more for a WebSocket that was opened with a
    /// small receive buffer, so a reader that resumes after a stall drains
    /// what was queued for it quickly (a 4 KiB window drains at the pace of
    /// delayed acknowledgements, and the close frame behind it has only the
    /// gateway's close grace).
    pub fn widen_receive_buffer(&self) {
        if let Conn::Ws(ws) = self {
            socket2::SockRef::from(ws.get_ref())
                .set_recv_buffer_size(1 << 20)
                .expect("SO_RCVBUF can grow");
        }
    }

    /// The next message, or the end of the connection.
    pub async fn next(&mut self) -> Next {
        match self {
            Conn::Ws(ws) => loop {
                match ws.next().await {
                    Some(Ok(Message::Text(text))) => {
                        let message: Value = serde_json::from_str(&text).expect("a JSON message");
                        // Lifecycle messages SSE has no counterpart of.
                        if message["type"] != "subscribed" && message["type"] != "stopped" {
                            return Ok(message);
                        }
                    }
                    Some(Ok(Message::Close(frame))) => return Err(frame.map(|f| u16::from(f.code))),
                    Some(Ok(_)) => continue,
                    Some(Err(_)) | None => return Err(None),
                }
            },
            Conn::Sse(sse) => loop {
                if let Some(message) = sse.ready.pop_front() {
                    return Ok(message);
                }
                match sse.body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            sse.buffer.extend_from_slice(&data);
                            sse.split();
                        }
                    }
                    Some(Err(_)) | None => return Err(None),
                }
            },
        }
    }
}

impl SseConn {
    /// Moves every complete event of the buffer to `ready` (comments and
    /// `retry:` are skipped; the `data:` line is the message).
    fn split(&mut self) {
        while let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
            let block = std::str::from_utf8(&block).expect("UTF-8 events");
            if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) {
                self.ready
                    .push_back(serde_json::from_str(data).expect("one JSON line"));
            }
        }
    }
}

/// A subscriber reading in its own task into a shared [`Mirror`].
#[derive(Debug)]
pub struct Reader {
    /// What it rebuilt so far.
    pub mirror: Arc<parking_lot::Mutex<Mirror>>,
    task: tokio::task::JoinHandle<()>,
}

impl Reader {
    /// Reads `conn` into a mirror until it ends or the reader is dropped.
    pub fn spawn(conn: Conn) -> Self {
        Self::continue_with(conn, Mirror::default())
    }

    /// Reads `conn` into `mirror` (documents already held, e.g. before a resume).
    pub fn continue_with(mut conn: Conn, mirror: Mirror) -> Self {
        let mirror = Arc::new(parking_lot::Mutex::new(mirror));
        let m = mirror.clone();
        let task = tokio::spawn(async move {
            while let Ok(message) = conn.next().await {
                m.lock().apply(&message);
            }
        });
        Self { mirror, task }
    }

    /// Whether its initial snapshots are complete.
    pub fn synced(&self) -> bool {
        self.mirror.lock().synced
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Opens `count` readers on every status document of `url`, alternating
/// WebSocket and SSE (WebSocket first), and waits (bounded by `within`)
/// until each has its initial snapshots.
pub async fn synced_readers(url: &str, count: usize, within: Duration) -> Vec<Reader> {
    let mut readers = Vec::new();
    for i in 0..count {
        let via = if i % 2 == 0 { Via::Ws } else { Via::Sse };
        readers.push(Reader::spawn(Conn::open(url, via, None, None).await));
    }
    crate::poll::eventually(within, "every reader synced", || async {
        readers.iter().all(Reader::synced).then_some(())
    })
    .await;
    readers
}
