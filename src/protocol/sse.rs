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

/// `data` as one chunk of an HTTP/1.1 chunked body: its size line, the
/// data, CRLF. Empty data has no chunk (an empty one ends the body): empty.
pub fn http_chunk(data: &[u8]) -> Bytes {
    if data.is_empty() {
        return Bytes::new();
    }
    let mut line = [0u8; 18];
    let digits = chunk_size_line(data.len(), &mut line);
    let mut chunk = Vec::with_capacity(digits + data.len() + 2);
    chunk.extend_from_slice(&line[..digits]);
    chunk.extend_from_slice(data);
    chunk.extend_from_slice(b"\r\n");
    Bytes::from(chunk)
}

/// Writes a chunk's size line (`n` in hexadecimal, CRLF) into `out`;
/// returns its length.
pub fn chunk_size_line(n: usize, out: &mut [u8; 18]) -> usize {
    let digits = (usize::BITS - n.leading_zeros()).div_ceil(4).max(1) as usize;
    for (i, byte) in out[..digits].iter_mut().enumerate() {
        let nibble = (n >> (4 * (digits - 1 - i))) & 0xf;
        *byte = b"0123456789abcdef"[nibble];
    }
    out[digits..digits + 2].copy_from_slice(b"\r\n");
    digits + 2
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

    #[test]
    fn chunks_have_hexadecimal_size_lines() {
        for n in [0, 1, 9, 15, 16, 255, 4096, 1 << 40, usize::MAX] {
            let mut out = [0u8; 18];
            let len = chunk_size_line(n, &mut out);
            assert_eq!(&out[..len], format!("{n:x}\r\n").as_bytes());
        }
        assert_eq!(&http_chunk(b"data: 1\n\n")[..], b"9\r\ndata: 1\n\n\r\n");
        let long = vec![b'x'; 300];
        let chunk = http_chunk(&long);
        assert_eq!(&chunk[..5], b"12c\r\n");
        assert_eq!(&chunk[5..305], &long[..]);
        assert_eq!(&chunk[305..], b"\r\n");
        assert!(http_chunk(b"").is_empty(), "no chunk ends the body early");
    }
}
