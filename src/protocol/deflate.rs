//! Compressed frames: a message is deflated once, without reference to any
//! other, and the same bytes go to every subscriber that negotiated
//! compression (`docs/PROTOCOL.md`, "Compression").
//!
//! - Over SSE they are spliced into one gzip stream per response (RFC
//!   1952): a header, each event's deflate blocks as they are made, and at
//!   the end a final empty block and the CRC-32 and length of everything
//!   (combined from each piece's own, so no stream keeps a compressor).
//! - Over WebSocket they are a `permessage-deflate` message (RFC 7692)
//!   with `server_no_context_takeover`: a stored block with the message's
//!   subscription id, then the shared blocks less their last four bytes.
//!
//! A piece made here ends with a sync flush (an empty stored block, `00 00
//! ff ff`), so it ends on a byte and the next piece may follow it: a
//! compressor that knows nothing of the others starts at a byte too.

use std::cell::RefCell;

use bytes::{BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, FlushCompress};

/// Below this many bytes a message is not worth compressing: it is stored
/// (SSE) or sent as it is (WebSocket).
pub const MIN_BYTES: usize = 128;

/// The tail of a sync flush, which `permessage-deflate` leaves off.
const SYNC_TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// Longest stored block (RFC 1951 §3.2.4).
const MAX_STORED: usize = 0xffff;

/// A gzip header: no name, no time, unknown OS.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff];

/// The last block of a stream: fixed Huffman codes, final, holding only
/// the end-of-block code.
const FINAL_EMPTY_BLOCK: [u8; 2] = [0x03, 0x00];

/// A message as raw deflate blocks, with what a gzip trailer needs of it.
#[derive(Debug, Clone)]
pub struct Deflated {
    /// Non-final blocks ending with a sync flush.
    pub bytes: Bytes,
    /// CRC-32 of the uncompressed message.
    pub crc: u32,
    /// Length of the uncompressed message.
    pub len: u64,
}

impl Deflated {
    /// `data` compressed at `level` (1–9), or stored when it is shorter
    /// than [`MIN_BYTES`].
    pub fn new(data: &[u8], level: u32) -> Self {
        let bytes = if data.len() < MIN_BYTES {
            stored(data)
        } else {
            compress(data, level)
        };
        Self {
            bytes,
            crc: crc32fast::hash(data),
            len: data.len() as u64,
        }
    }
}

thread_local! {
    /// One compressor per thread and level, reset after each message: a
    /// stream holds no compressor of its own.
    static COMPRESSOR: RefCell<Option<(u32, Compress)>> = const { RefCell::new(None) };
}

/// Raw deflate of `data`, sync-flushed.
fn compress(data: &[u8], level: u32) -> Bytes {
    let level = level.clamp(1, 9);
    COMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        let compressor = match &mut *cell {
            Some((l, c)) if *l == level => c,
            slot => {
                &mut slot
                    .insert((level, Compress::new(Compression::new(level), false)))
                    .1
            }
        };
        let mut out = Vec::with_capacity(data.len() / 2 + 64);
        let start = compressor.total_in();
        loop {
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(64));
            }
            let consumed = (compressor.total_in() - start) as usize;
            let status = compressor.compress_vec(&data[consumed..], &mut out, FlushCompress::Sync);
            let consumed = (compressor.total_in() - start) as usize;
            // Room left after a sync flush: the flush is complete.
            if status.is_err() || (consumed == data.len() && out.len() < out.capacity()) {
                break;
            }
        }
        compressor.reset();
        Bytes::from(out)
    })
}

/// `data` as stored blocks, the last one ending like a sync flush would.
fn stored(data: &[u8]) -> Bytes {
    let blocks = data.len() / MAX_STORED + 1;
    let mut out = BytesMut::with_capacity(data.len() + 5 * blocks + 5);
    for chunk in data.chunks(MAX_STORED) {
        put_stored(&mut out, chunk);
    }
    // An empty stored block, as a sync flush ends: its header on a byte,
    // then [`SYNC_TAIL`].
    put_stored(&mut out, &[]);
    out.freeze()
}

/// One non-final stored block: its header bits on a byte of their own,
/// the length and its complement, the bytes.
fn put_stored(out: &mut BytesMut, chunk: &[u8]) {
    debug_assert!(chunk.len() <= MAX_STORED);
    let len = chunk.len() as u16;
    out.put_u8(0);
    out.put_u16_le(len);
    out.put_u16_le(!len);
    out.extend_from_slice(chunk);
}

/// A `permessage-deflate` message payload: `prefix` stored, then `body`
/// without its sync flush tail (which the receiver puts back).
pub fn ws_payload(prefix: &[u8], body: &Deflated) -> Bytes {
    let tail = body.bytes.strip_suffix(&SYNC_TAIL).unwrap_or(&body.bytes);
    let mut out = BytesMut::with_capacity(prefix.len() + 5 + tail.len());
    for chunk in prefix.chunks(MAX_STORED) {
        put_stored(&mut out, chunk);
    }
    out.extend_from_slice(tail);
    out.freeze()
}

/// Recently compressed message bodies, by content: the same snapshot sent
/// to many sockets (a page load, a reconnect storm) is compressed once.
/// Bounded in bytes; the oldest go first. A hit is checked byte for byte.
#[derive(Debug)]
pub struct Recent {
    inner: parking_lot::Mutex<RecentInner>,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct RecentInner {
    by_hash: std::collections::HashMap<u64, (Bytes, Deflated)>,
    order: std::collections::VecDeque<u64>,
    bytes: usize,
}

impl Recent {
    /// A cache of at most `max_bytes` (bodies and their compressed forms).
    pub fn new(max_bytes: usize) -> Self {
        Self {
            inner: parking_lot::Mutex::default(),
            max_bytes,
        }
    }

    /// `body` compressed at `level`: from the cache when the same bytes were
    /// compressed lately, else compressed (outside the lock) and kept.
    pub fn deflate(&self, body: &Bytes, level: u32) -> Deflated {
        use std::hash::{BuildHasher, Hasher};
        let mut h = SEED.build_hasher();
        h.write(body);
        h.write_u32(level);
        let hash = h.finish();
        if let Some((kept, deflated)) = self.inner.lock().by_hash.get(&hash)
            && kept == body
        {
            return deflated.clone();
        }
        let deflated = Deflated::new(body, level);
        let cost = body.len() + deflated.bytes.len();
        if cost > self.max_bytes / 4 {
            return deflated;
        }
        let mut inner = self.inner.lock();
        if let Some((old_body, old)) = inner.by_hash.insert(hash, (body.clone(), deflated.clone()))
        {
            inner.bytes -= old_body.len() + old.bytes.len();
        } else {
            inner.order.push_back(hash);
        }
        inner.bytes += cost;
        while inner.bytes > self.max_bytes {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some((b, d)) = inner.by_hash.remove(&oldest) {
                inner.bytes -= b.len() + d.bytes.len();
            }
        }
        deflated
    }
}

/// The hasher keys of [`Recent`], drawn once per process.
static SEED: std::sync::LazyLock<std::hash::RandomState> =
    std::sync::LazyLock::new(std::hash::RandomState::new);

/// One response's gzip stream, made of [`Deflated`] pieces: what it keeps
/// is the running CRC-32 and length.
#[derive(Debug, Default)]
pub struct GzipStream {
    crc: crc32fast::Hasher,
    len: u64,
    started: bool,
}

impl GzipStream {
    /// Appends `piece` to `out` (after the header, for the first).
    pub fn put(&mut self, out: &mut BytesMut, piece: &Deflated) {
        if !self.started {
            self.started = true;
            out.extend_from_slice(&GZIP_HEADER);
        }
        self.crc.combine(&crc32fast::Hasher::new_with_initial_len(
            piece.crc, piece.len,
        ));
        self.len += piece.len;
        out.extend_from_slice(&piece.bytes);
    }

    /// `pieces` as the next bytes of the stream.
    pub fn chunk<'a>(&mut self, pieces: impl IntoIterator<Item = &'a Deflated>) -> Bytes {
        let mut out = BytesMut::new();
        for piece in pieces {
            self.put(&mut out, piece);
        }
        out.freeze()
    }

    /// The stream's end: the final block and the trailer (CRC-32 and
    /// length modulo 2³²).
    pub fn finish(&mut self) -> Bytes {
        let mut out = BytesMut::with_capacity(GZIP_HEADER.len() + 10);
        if !self.started {
            self.started = true;
            out.extend_from_slice(&GZIP_HEADER);
        }
        let crc = std::mem::take(&mut self.crc);
        out.extend_from_slice(&FINAL_EMPTY_BLOCK);
        out.put_u32_le(crc.finalize());
        out.put_u32_le(std::mem::take(&mut self.len) as u32);
        out.freeze()
    }
}

/// Whether an `Accept-Encoding` value accepts gzip: named (or `*`) with a
/// quality above zero, and not refused by name.
pub fn accepts_gzip(accept_encoding: &str) -> bool {
    let mut star = None;
    for item in accept_encoding.split(',') {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| {
                let (k, v) = p.split_once('=')?;
                (k.trim().eq_ignore_ascii_case("q")).then(|| v.trim().parse::<f32>().ok())?
            })
            .next()
            .unwrap_or(1.0);
        if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            return q > 0.0;
        }
        if coding == "*" {
            star = Some(q > 0.0);
        }
    }
    star.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// What a streaming reader has of `data` (no final block).
    fn inflate_raw(data: &[u8]) -> Vec<u8> {
        let mut d = flate2::Decompress::new(false);
        let mut out = Vec::with_capacity(data.len() * 20 + 64);
        d.decompress_vec(data, &mut out, flate2::FlushDecompress::Sync)
            .unwrap();
        assert_eq!(d.total_in(), data.len() as u64);
        out
    }

    fn json(n: usize) -> Vec<u8> {
        let mut s = String::from("{\"type\":\"snapshot\",\"doc\":{");
        for i in 0..n {
            s.push_str(&format!(
                "\"pod-{i}\":{{\"phase\":\"Running\",\"ready\":true}},"
            ));
        }
        s.push_str("\"end\":1}}");
        s.into_bytes()
    }

    #[test]
    fn pieces_made_apart_make_one_gzip_stream() {
        let messages = [json(200), b"tiny".to_vec(), json(3), Vec::new(), json(9000)];
        for level in [1, 6, 9] {
            let mut gzip = GzipStream::default();
            let mut wire = Vec::new();
            for m in &messages {
                let piece = Deflated::new(m, level);
                wire.extend_from_slice(&gzip.chunk([&piece]));
            }
            wire.extend_from_slice(&gzip.finish());
            let mut out = Vec::new();
            // GzDecoder checks the trailer's CRC-32 and length.
            flate2::read::GzDecoder::new(&wire[..])
                .read_to_end(&mut out)
                .unwrap();
            assert_eq!(out, messages.concat(), "level {level}");
        }
    }

    #[test]
    fn each_piece_is_readable_as_soon_as_it_arrives() {
        let mut gzip = GzipStream::default();
        let first = json(50);
        let chunk = gzip.chunk([&Deflated::new(&first, 6)]);
        // A streaming reader given only the first chunk has all of it.
        let mut d = flate2::Decompress::new(false);
        let mut out = Vec::with_capacity(first.len() + 16);
        d.decompress_vec(&chunk[10..], &mut out, flate2::FlushDecompress::Sync)
            .unwrap();
        assert_eq!(out, first);
        assert!(
            chunk.len() < first.len() / 4,
            "{} of {}",
            chunk.len(),
            first.len()
        );
    }

    #[test]
    fn an_empty_stream_is_valid_gzip() {
        let wire = GzipStream::default().finish();
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&wire[..])
            .read_to_end(&mut out)
            .unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn stored_blocks_split_at_their_limit() {
        let big = vec![b'x'; MAX_STORED * 2 + 10];
        assert_eq!(inflate_raw(&stored(&big)), big);
        assert_eq!(inflate_raw(&stored(b"")), b"");
    }

    #[test]
    fn websocket_payloads_are_the_prefix_then_the_shared_body() {
        let body = json(100);
        let shared = Deflated::new(&body[1..], 6);
        for prefix in [&b"{\"sub\":\"a\","[..], b"{", &vec![b'p'; 70_000]] {
            let mut payload = ws_payload(prefix, &shared).to_vec();
            assert!(!payload.ends_with(&SYNC_TAIL));
            // The receiver's procedure (RFC 7692 §7.2.2).
            payload.extend_from_slice(&SYNC_TAIL);
            let mut d = flate2::Decompress::new(false);
            let mut out = Vec::with_capacity(prefix.len() + body.len());
            d.decompress_vec(&payload, &mut out, flate2::FlushDecompress::Sync)
                .unwrap();
            assert_eq!(out, [prefix, &body[1..]].concat());
        }
    }

    #[test]
    fn recent_bodies_are_compressed_once_and_bounded() {
        let recent = Recent::new(64 * 1024);
        let body = Bytes::from(json(40));
        let first = recent.deflate(&body, 6);
        let again = recent.deflate(&Bytes::copy_from_slice(&body), 6);
        assert_eq!(
            first.bytes.as_ptr(),
            again.bytes.as_ptr(),
            "the same bytes, shared"
        );
        assert_eq!(inflate_raw(&again.bytes), &body[..]);
        // Other bodies push the oldest out, within the bound.
        for n in 41..200 {
            let other = Bytes::from(json(n));
            assert_eq!(inflate_raw(&recent.deflate(&other, 6).bytes), &other[..]);
        }
        assert!(recent.inner.lock().bytes <= 64 * 1024);
        let evicted = recent.deflate(&body, 6);
        assert_ne!(first.bytes.as_ptr(), evicted.bytes.as_ptr(), "made again");
        assert_eq!(inflate_raw(&evicted.bytes), &body[..]);
    }

    #[test]
    fn accept_encoding() {
        let table = [
            ("gzip", true),
            ("gzip, deflate, br, zstd", true),
            ("deflate, GZIP;q=0.5", true),
            ("br", false),
            ("", false),
            ("identity", false),
            ("gzip;q=0", false),
            ("gzip; q=0.0, *", false),
            ("*", true),
            ("*;q=0", false),
            ("x-gzip", true),
        ];
        for (header, want) in table {
            assert_eq!(accepts_gzip(header), want, "{header:?}");
        }
    }
}
