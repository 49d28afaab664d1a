//! A published change and its encoding (`engine → hub publish → [Change]
//! → subscriptions, replay log → transports`): what happened to a topic,
//! numbered by the hub, and its JSON message made once for every
//! subscriber.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::protocol::ServerMessage;
use crate::protocol::deflate::Deflated;
use crate::protocol::topic::Topic;

/// What happened to a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// First document of a topic.
    Snapshot,
    /// A change to an existing document (see `patch`).
    Patch,
    /// The topic is gone (no document, no patch).
    Removed,
}

/// One published change, shared by every subscriber. The replay log keeps a
/// slimmer copy (see [`Hub::changes_since`](super::Hub::changes_since)):
/// its message in `encoded.json`, no `patch`, and a `doc` only where
/// visibility reads it (task topics).
#[derive(Debug, Serialize)]
pub struct Change {
    /// The topic that changed.
    pub topic: Topic,
    /// The topic's revision after the change; counts from 1 per topic within a process.
    pub rev: u64,
    /// Hub-wide sequence number of the change within this process epoch.
    pub seq: u64,
    /// `{epoch}-{seq}` (with a stream of changes `{epoch}-{seq}.{stream}-{position}`):
    /// where a client resumes from.
    pub cursor: String,
    /// With a stream of changes shared by replicas: the stream position this
    /// hub was at when it published the change (every message of the stream
    /// up to it was in the hub by then); 0 without one.
    #[serde(skip)]
    pub position: u64,
    /// With a stream of changes: the stream sequence of this change itself,
    /// once known (a remote change's message; the echo of one this replica
    /// published); 0 while unknown. Set on the replay log's copy.
    #[serde(skip)]
    pub streamed_at: AtomicU64,
    /// Snapshot, patch or removal.
    pub kind: ChangeKind,
    /// The document after the change (None when removed, and in the replay
    /// log except for task topics, whose visibility reads their target).
    pub doc: Option<Arc<Value>>,
    /// RFC 7386 merge patch from the previous revision (for `Patch`; None in
    /// the replay log, whose message carries it).
    pub patch: Option<Arc<Value>>,
    /// When the hub published the change.
    pub at: DateTime<Utc>,
    /// The same moment on the monotonic clock: what the delivery-lag
    /// histogram measures from (an `Instant` subtraction, where the date
    /// arithmetic of `at` cost about 1 % of the server's CPU at 1 000
    /// subscribers, docs/benchmarks/30-same-message.md).
    #[serde(skip)]
    pub published: std::time::Instant,
    /// Applied from another replica's stream of changes
    /// ([`Hub::apply_remote`](super::Hub::apply_remote)), not made by this
    /// process: not to be published again.
    #[serde(skip)]
    pub remote: bool,
    /// Encodings made once and shared by every subscriber (see `transports`).
    #[serde(skip)]
    pub encoded: EncodeCache,
}

impl Change {
    /// The server message of this change, carrying `cursor` (its own, or an
    /// earlier one for a subscriber that is behind on other topics).
    pub fn message<'a>(&'a self, cursor: &'a str) -> ServerMessage<'a> {
        // A document the hub holds is never JSON `null`: this only stands
        // in for an absent one (a logged patch keeps no document), so that
        // encoding cannot fail.
        static NULL: Value = Value::Null;
        let (topic, rev) = (&self.topic, self.rev);
        match self.kind {
            ChangeKind::Snapshot => ServerMessage::Snapshot {
                topic,
                rev,
                cursor,
                doc: self.doc.as_deref().unwrap_or(&NULL),
            },
            ChangeKind::Patch => ServerMessage::Patch {
                topic,
                rev,
                cursor,
                patch: self.patch.as_deref().unwrap_or(&NULL),
                base: None,
            },
            ChangeKind::Removed => ServerMessage::Removed {
                topic,
                rev: Some(rev),
                cursor,
            },
        }
    }
}

impl PartialEq for Change {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.topic,
            self.rev,
            self.seq,
            self.kind,
            &self.doc,
            &self.patch,
        ) == (
            &other.topic,
            other.rev,
            other.seq,
            other.kind,
            &other.doc,
            &other.patch,
        )
    }
}

/// Encoded forms of a change: the JSON message and its SSE frame.
#[derive(Debug, Default)]
pub struct EncodeCache {
    /// The change as one JSON message at its own cursor (without a WebSocket
    /// `sub`), made once when the hub publishes it.
    pub json: OnceLock<Bytes>,
    /// The change as an SSE frame (`id:`, `event:`, `data:`), made on first use.
    pub sse: OnceLock<Bytes>,
    /// That frame as a chunk of an HTTP/1.1 chunked body, for the event
    /// streams the gateway writes to their sockets itself; made on first use.
    pub sse_chunk: OnceLock<Bytes>,
    /// The SSE frame compressed, for gzip streams; made on first use.
    pub sse_deflated: OnceLock<Box<Deflated>>,
    /// The JSON message's fields (after its opening brace) compressed, for
    /// WebSockets with `permessage-deflate`; made on first use.
    pub ws_deflated: OnceLock<Box<Deflated>>,
    /// The JSON message with a WebSocket subscription's `{"sub":ID,` before
    /// its fields, for the first id asked for (that prefix, then the
    /// message): sockets mostly name a subscription alike (the JS client's
    /// first is `s1`), so they share it; made on first use.
    pub ws: OnceLock<Box<(Box<[u8]>, Bytes)>>,
}

/// A change's JSON message at its own cursor, as every subscriber gets it.
pub(super) fn encode(change: &Change) -> Bytes {
    change.message(&change.cursor).encode()
}
