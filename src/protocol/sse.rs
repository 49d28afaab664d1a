//! Server-Sent Events framing (`hub → transports/sse → [these lines] →
//! EventSource / curl -N`): each message is one event whose `id:` is the
//! cursor, `event:` the message type and `data:` the JSON on one line; the
//! stream opens with a `retry:` hint, and heartbeat events (no `id:`) keep
//! proxies awake and say how current each member is. The transport only decides *when* to write these.

use std::time::Duration;

use bytes::Bytes;

use super::messages::ServerMessage;

/// One event: `id:` (the cursor), `event:` (the message type), `data:` (the
/// encoded message, which holds no newline).
pub fn frame(id: &str, event: &str, data: &[u8]) -> Bytes {
    debug_assert!(!data.contains(&b'\n'), "SSE data is one line");
    let mut out = Vec::with_capacity(data.len() + id.len() + event.len() + 24);
    out.extend_from_slice(b"id: ");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"\nevent: ");
    out.extend_from_slice(event.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// A subscription's `heartbeat` (docs/PROTOCOL.md): an event with no
/// `id:` line, so it never moves a client's `Last-Event-ID`.
pub fn heartbeat_frame(data: &[u8]) -> Bytes {
    debug_assert!(!data.contains(&b'\n'), "SSE data is one line");
    let mut out = Vec::with_capacity(data.len() + 26);
    out.extend_from_slice(b"event: heartbeat\ndata: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// Encodes `message` and frames it as the event of `cursor`.
pub fn message_frame(cursor: &str, message: &ServerMessage<'_>) -> Bytes {
    frame(cursor, message.kind(), &message.encode())
}

/// The reconnect delay a stream starts with (`retry:` in milliseconds).
pub fn retry(delay: Duration) -> Bytes {
    Bytes::from(format!("retry: {}\n\n", delay.as_millis()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_have_the_documented_lines() {
        assert_eq!(
            &frame("e-1", "patch", b"{}")[..],
            b"id: e-1\nevent: patch\ndata: {}\n\n"
        );
        let synced = ServerMessage::Synced {
            cursor: "e-4",
            resumed: false,
            count: 1,
            reason: None,
            at: None,
            as_of: None,
        };
        assert_eq!(
            &message_frame("e-4", &synced)[..],
            &b"id: e-4\nevent: synced\ndata: {\"type\":\"synced\",\"cursor\":\"e-4\",\"resumed\":false,\"count\":1}\n\n"[..]
        );
        assert_eq!(&retry(Duration::from_secs(2))[..], b"retry: 2000\n\n");
        assert_eq!(
            &heartbeat_frame(b"{\"type\":\"heartbeat\"}")[..],
            b"event: heartbeat\ndata: {\"type\":\"heartbeat\"}\n\n"
        );
    }
}
