//! What a client sends, as tungstenite reads it: with `permessage-deflate`
//! agreed, each compressed message (RSV1 on its first frame) is inflated
//! and handed on as one plain frame, so tungstenite (which knows no
//! extension) checks its size, its UTF-8 and the protocol as for any other
//! (`client ──▶ ws::upgrade ──▶ [ws::inflate] ──▶ tungstenite`). Every
//! other frame goes through as it came, faults included, for tungstenite
//! to refuse. Writes go straight through ([`crate::write_through`]): the
//! gateway's compressed frames are made in `ws::wire`.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut, BytesMut};
use flate2::{Decompress, FlushDecompress};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `permessage-deflate` agreed (`ws::upgrade` negotiates it), with
/// `client_no_context_takeover`: each message the client sends inflates on
/// its own, so no inflater outlives a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deflate;

/// The tail a sender leaves off each compressed message (RFC 7692 §7.2.1).
const SYNC_TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// A message that inflates past the size limit (closed with 1009).
#[derive(Debug)]
pub(crate) struct TooLong(pub(crate) usize);

impl std::fmt::Display for TooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a compressed message inflates to more than {} bytes",
            self.0
        )
    }
}

impl std::error::Error for TooLong {}

/// The client's side of a socket, compressed messages inflated.
pub(crate) struct Inflating<S> {
    io: S,
    /// None without `permessage-deflate`: a plain pass-through.
    state: Option<Box<State>>,
}

struct State {
    /// Largest message, inflated.
    limit: usize,
    /// Made for each compressed message and dropped after it (a socket
    /// sends a few short operations: it keeps no 32 KiB window between them).
    inflater: Option<Decompress>,
    /// Bytes read from the client and not yet looked at.
    raw: BytesMut,
    /// Bytes for tungstenite.
    ready: BytesMut,
    /// The opcode and inflated bytes of a compressed message whose last
    /// frame has not come.
    message: Option<(u8, Vec<u8>)>,
    /// After a frame longer than the limit, everything goes through (for
    /// tungstenite to refuse).
    through: bool,
    eof: bool,
}

impl<S> Inflating<S> {
    pub(crate) fn new(io: S, deflate: Option<Deflate>, limit: usize) -> Self {
        let state = deflate.map(|Deflate| {
            Box::new(State {
                limit,
                inflater: None,
                raw: BytesMut::new(),
                ready: BytesMut::new(),
                message: None,
                through: false,
                eof: false,
            })
        });
        Self { io, state }
    }
}

/// One frame's header, as the client wrote it.
struct Header {
    fin: bool,
    rsv1: bool,
    opcode: u8,
    mask: Option<[u8; 4]>,
    /// Header bytes, then payload bytes.
    header_len: usize,
    payload_len: u64,
}

fn parse_header(raw: &[u8]) -> Option<Header> {
    let (&b0, rest) = raw.split_first()?;
    let &b1 = rest.first()?;
    let masked = b1 & 0x80 != 0;
    let (payload_len, mut at) = match b1 & 0x7f {
        126 => (
            u64::from(u16::from_be_bytes(raw.get(2..4)?.try_into().ok()?)),
            4,
        ),
        127 => (u64::from_be_bytes(raw.get(2..10)?.try_into().ok()?), 10),
        n => (u64::from(n), 2),
    };
    let mask = if masked {
        let key: [u8; 4] = raw.get(at..at + 4)?.try_into().ok()?;
        at += 4;
        Some(key)
    } else {
        None
    };
    Some(Header {
        fin: b0 & 0x80 != 0,
        rsv1: b0 & 0x40 != 0,
        opcode: b0 & 0x0f,
        mask,
        header_len: at,
        payload_len,
    })
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

impl State {
    /// Looks at the next whole frame in `raw`: false when more bytes are needed.
    fn step(&mut self) -> std::io::Result<bool> {
        if self.through {
            let moved = !self.raw.is_empty();
            let raw = self.raw.split();
            self.ready.unsplit(raw);
            return Ok(moved);
        }
        let Some(h) = parse_header(&self.raw) else {
            return Ok(false);
        };
        // A frame over the limit goes through unread: tungstenite refuses
        // it by its header.
        if h.payload_len > self.limit as u64 {
            self.through = true;
            return self.step();
        }
        let total = h.header_len + h.payload_len as usize;
        if self.raw.len() < total {
            self.raw.reserve(total - self.raw.len());
            return Ok(false);
        }
        let control = h.opcode & 0x08 != 0;
        let compressed_start = !control && h.rsv1 && h.opcode != 0 && self.message.is_none();
        let continues = !control && h.opcode == 0 && !h.rsv1 && self.message.is_some();
        if !(compressed_start || continues) {
            // Anything else, as it came (a fault included).
            let frame = self.raw.split_to(total);
            self.ready.unsplit(frame);
            return Ok(true);
        }
        let mut frame = self.raw.split_to(total);
        let payload = &mut frame[h.header_len..];
        if let Some(key) = h.mask {
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= key[i & 3];
            }
        }
        if compressed_start {
            self.message = Some((h.opcode, Vec::new()));
        }
        self.inflate(payload)?;
        if h.fin {
            self.inflate(&SYNC_TAIL)?;
            let (opcode, message) = self.message.take().expect("a message under way");
            self.inflater = None;
            self.put_frame(opcode, &message);
        }
        Ok(true)
    }

    /// Inflates `input` onto the message under way, within the limit.
    fn inflate(&mut self, input: &[u8]) -> std::io::Result<()> {
        let limit = self.limit;
        let inflater = self.inflater.get_or_insert_with(|| Decompress::new(false));
        let (_, out) = self.message.as_mut().expect("a message under way");
        let start = inflater.total_in();
        loop {
            let consumed = (inflater.total_in() - start) as usize;
            if out.len() == out.capacity() {
                // Never more room than one byte past the limit (what is
                // held is within it: checked after each round below).
                let room = limit + 1 - out.len();
                out.reserve_exact(out.capacity().max(256).min(room));
            }
            inflater
                .decompress_vec(&input[consumed..], out, FlushDecompress::Sync)
                .map_err(|e| invalid(format!("invalid compressed message: {e}")))?;
            if out.len() > limit {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    TooLong(limit),
                ));
            }
            let consumed = (inflater.total_in() - start) as usize;
            if consumed == input.len() && out.len() < out.capacity() {
                return Ok(());
            }
        }
    }

    /// A whole plain frame, masked with a zero key (a server reads only
    /// masked frames).
    fn put_frame(&mut self, opcode: u8, payload: &[u8]) {
        self.ready.reserve(14 + payload.len());
        self.ready.put_u8(0x80 | opcode);
        match payload.len() {
            n if n < 126 => self.ready.put_u8(0x80 | n as u8),
            n if n <= 0xffff => {
                self.ready.put_u8(0x80 | 126);
                self.ready.put_u16(n as u16);
            }
            n => {
                self.ready.put_u8(0x80 | 127);
                self.ready.put_u64(n as u64);
            }
        }
        self.ready.put_u32(0);
        self.ready.extend_from_slice(payload);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Inflating<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let Some(state) = this.state.as_deref_mut() else {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        };
        loop {
            if !state.ready.is_empty() {
                let n = state.ready.len().min(buf.remaining());
                buf.put_slice(&state.ready[..n]);
                state.ready.advance(n);
                if state.ready.is_empty() {
                    // An idle socket holds no buffer.
                    state.ready = BytesMut::new();
                }
                return Poll::Ready(Ok(()));
            }
            if state.step()? {
                if state.raw.is_empty() {
                    state.raw = BytesMut::new();
                }
                continue;
            }
            if state.eof {
                // What is left of a cut frame goes through for tungstenite to see.
                if !state.raw.is_empty() {
                    let rest = state.raw.split();
                    state.ready.unsplit(rest);
                    continue;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 4096];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                state.eof = true;
            } else {
                state.raw.extend_from_slice(read.filled());
            }
        }
    }
}

crate::write_through::write_through!(Inflating<S>, [S: AsyncWrite + Unpin]);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A client frame: masked with `key`, RSV1 when `rsv1`.
    fn frame(fin: bool, rsv1: bool, opcode: u8, payload: &[u8], key: [u8; 4]) -> Vec<u8> {
        let mut out = vec![(u8::from(fin) << 7) | (u8::from(rsv1) << 6) | opcode];
        match payload.len() {
            n if n < 126 => out.push(0x80 | n as u8),
            n if n <= 0xffff => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i & 3]));
        out
    }

    /// `data` compressed as a client with context takeover would: one
    /// compressor across messages, the sync tail left off.
    fn deflate(c: &mut flate2::Compress, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(data.len() + 64);
        c.compress_vec(data, &mut out, flate2::FlushCompress::Sync)
            .unwrap();
        assert!(out.ends_with(&SYNC_TAIL));
        out.truncate(out.len() - 4);
        out
    }

    async fn read_all(
        input: Vec<u8>,
        deflate: Option<Deflate>,
        limit: usize,
    ) -> std::io::Result<Vec<u8>> {
        let (mut client, server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            // Small writes: frames arrive cut anywhere.
            for piece in input.chunks(7) {
                if client.write_all(piece).await.is_err() {
                    return;
                }
            }
        });
        let mut reader = Inflating::new(server, deflate, limit);
        let mut out = Vec::new();
        let result = reader.read_to_end(&mut out).await;
        writer.abort();
        result.map(|_| out)
    }

    const DEFLATE: Option<Deflate> = Some(Deflate);

    #[tokio::test]
    async fn compressed_messages_become_plain_frames() {
        let key = [1, 2, 3, 4];
        let fresh = || flate2::Compress::new(flate2::Compression::default(), false);
        let first = br#"{"op":"subscribe","id":"a","topics":["apps/**"]}"#;
        let second = br#"{"op":"subscribe","id":"b","topics":["apps/**"]}"#;
        let one = deflate(&mut fresh(), first);
        // The second comes in two frames with a ping between them.
        let two = deflate(&mut fresh(), second);
        let (a, b) = two.split_at(two.len() / 2);
        let mut input = frame(true, true, 1, &one, key);
        input.extend(frame(false, true, 1, a, key));
        input.extend(frame(true, false, 9, b"hi", key));
        input.extend(frame(true, false, 0, b, key));
        input.extend(frame(true, false, 1, b"plain", key));
        let out = read_all(input, DEFLATE, 1024).await.unwrap();
        let mut want = Vec::new();
        for (opcode, payload) in [
            (1u8, &first[..]),
            (9, b"hi"),
            (1, &second[..]),
            (1, b"plain"),
        ] {
            // Pings and plain frames as they came; inflated ones with a zero key.
            let k = if payload == b"hi" || payload == b"plain" {
                key
            } else {
                [0; 4]
            };
            want.extend(frame(true, false, opcode, payload, k));
        }
        assert_eq!(out, want);
    }

    #[tokio::test]
    async fn without_the_extension_bytes_go_through() {
        let input = frame(true, true, 1, b"not really compressed", [9; 4]);
        assert_eq!(read_all(input.clone(), None, 16).await.unwrap(), input);
    }

    #[tokio::test]
    async fn a_message_that_inflates_past_the_limit_is_refused() {
        let mut c = flate2::Compress::new(flate2::Compression::default(), false);
        let bomb = deflate(&mut c, &vec![b'a'; 1 << 20]);
        assert!(bomb.len() < 2048);
        let err = read_all(frame(true, true, 1, &bomb, [7; 4]), DEFLATE, 64 * 1024)
            .await
            .unwrap_err();
        assert!(err.get_ref().is_some_and(|e| e.is::<TooLong>()), "{err}");
    }

    #[tokio::test]
    async fn bad_compressed_data_is_an_error_and_long_frames_go_through() {
        let err = read_all(frame(true, true, 1, &[0xff; 40], [7; 4]), DEFLATE, 1024)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("invalid compressed message"),
            "{err}"
        );
        // Longer than the limit: untouched, for tungstenite to refuse by its header.
        let long = frame(true, true, 1, &[0u8; 300], [7; 4]);
        assert_eq!(read_all(long.clone(), DEFLATE, 100).await.unwrap(), long);
    }

    #[tokio::test]
    async fn a_client_that_keeps_its_context_against_the_agreement_is_refused() {
        // client_no_context_takeover was agreed: the second message, which
        // refers back into the first, cannot be read on its own.
        let mut c = flate2::Compress::new(flate2::Compression::default(), false);
        let text = br#"{"op":"subscribe","id":"a","topics":["apps/**","clusters/**"]}"#;
        let mut input = frame(true, true, 1, &deflate(&mut c, text), [5; 4]);
        input.extend(frame(true, true, 1, &deflate(&mut c, text), [5; 4]));
        let err = read_all(input, DEFLATE, 1024).await.unwrap_err();
        assert!(
            err.to_string().contains("invalid compressed message"),
            "{err}"
        );
    }
}
