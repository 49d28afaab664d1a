//! A plain HTTP/1.1 connection whose first request opens an event stream,
//! served without hyper (`listener ──▶ server ──▶ [sse_socket] ──▶
//! router ──▶ sse`). hyper's HTTP/1 connection keeps an 8 KiB read buffer
//! and an 8 KiB header buffer for as long as the connection lives, which
//! for a status stream is hours of 16 KiB per idle subscriber
//! (docs/benchmarks/16-memory-per-connection.md). Here the request head is read into a
//! buffer that is freed once parsed; a `GET` of the events path with no
//! body is answered by the router as usual, and its response is written
//! straight to the socket (chunked, then the connection closes). Any other
//! request goes to hyper with the bytes read so far put back in front of
//! the socket ([`Prefixed`]), so hyper sees exactly what the client sent.

use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::body::HttpBody;
use axum::http::{HeaderName, HeaderValue, Method, Request, Response, Uri, Version, header};
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::protocol::sse;
use crate::transports::sse::{Direct, DirectEvents, WriteTimeout, WrittenDirectly};

/// The path served here (its query string is the router's business).
pub(crate) const EVENTS_PATH: &str = crate::transports::sse::PATH;

/// Longest request head read here; a longer one goes to hyper (which
/// accepts up to its own, larger limit).
const MAX_HEAD: usize = 8 * 1024;

/// Headers a request served here may have; more go to hyper.
const MAX_HEADERS: usize = 64;

/// What the first request of a connection is.
pub(crate) enum Head {
    /// The client closed (or failed) before sending a whole head.
    Gone,
    /// A request for the events stream, with no body (boxed: the stream's
    /// task keeps only a pointer across the router's answer).
    Stream(Box<Request<Body>>),
    /// Anything else, and what was read of it: for hyper.
    Other(Bytes),
}

/// Reads the first request head of a connection (call under the
/// header-read timeout).
pub(crate) async fn read_head<I: AsyncRead + Unpin>(io: &mut I) -> Head {
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve(buf.len().min(MAX_HEAD - buf.len()));
        }
        match io.read_buf(&mut buf).await {
            Ok(0) | Err(_) if buf.is_empty() => return Head::Gone,
            // A partial head and EOF: hyper answers it as it would.
            Ok(0) | Err(_) => return Head::Other(buf.freeze()),
            Ok(_) => {}
        }
        match parse(&buf) {
            Parsed::Partial if buf.len() < MAX_HEAD => continue,
            Parsed::Stream(request) => return Head::Stream(request),
            Parsed::Partial | Parsed::Other => return Head::Other(buf.freeze()),
        }
    }
}

enum Parsed {
    Partial,
    Stream(Box<Request<Body>>),
    Other,
}

/// Whether `buf` holds a whole head, and whether it is a request served here.
fn parse(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let len = match head.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let (Some("GET"), Some(1), Some(path)) = (head.method, head.version, head.path) else {
        return Parsed::Other;
    };
    // httparse takes a bare LF as a line end, which hyper refuses: such a
    // head is hyper's to answer, as is one a proxy might read otherwise.
    if buf[..len]
        .iter()
        .enumerate()
        .any(|(i, b)| *b == b'\n' && (i == 0 || buf[i - 1] != b'\r'))
    {
        return Parsed::Other;
    }
    // Pipelined bytes after the head, a body or an upgrade: hyper's.
    if len != buf.len() || path.split('?').next() != Some(EVENTS_PATH) {
        return Parsed::Other;
    }
    let Ok(uri) = path.parse::<Uri>() else {
        return Parsed::Other;
    };
    let mut request = Request::new(Body::empty());
    // Its event stream is polled by this connection's task as it writes.
    request.extensions_mut().insert(WrittenDirectly);
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    let map = request.headers_mut();
    for h in head.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) else {
            return Parsed::Other;
        };
        let body = name == header::TRANSFER_ENCODING
            || (name == header::CONTENT_LENGTH && value != "0")
            || name == header::UPGRADE
            || name == header::EXPECT;
        if body {
            return Parsed::Other;
        }
        map.append(name, value);
    }
    Parsed::Stream(Box::new(request))
}

/// Writes `response` to `io`: its head (with `connection: close`), then
/// its body, chunked unless its length is known (an event stream's
/// [`Direct`] chunks come framed already), until the body ends or the
/// client closes. The caller drops the connection afterwards. Not an
/// `async fn`: the stream's task keeps only what writing the body needs,
/// not the response's parts beside them.
pub(crate) fn write_response<I>(
    io: &mut I,
    response: Response<Body>,
) -> impl Future<Output = std::io::Result<()>> + Send + '_
where
    I: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (parts, body) = response.into_parts();
    let limit = parts.extensions.get::<WriteTimeout>().cloned();
    let mut source = match parts.extensions.get::<Direct>().and_then(Direct::take) {
        Some(events) => Source::Events(events),
        None => Source::Body(body),
    };
    let length = match &source {
        Source::Body(body) => HttpBody::size_hint(body).exact(),
        Source::Events(_) => None,
    };
    let head = encode_head(parts, length);
    async move {
        let limit = limit.as_ref();
        within(limit, io.write_all(&head)).await?;
        drop(head);
        loop {
            // The body first; only when it has nothing to write is the socket
            // read, to notice a client that hangs up at once. While the stream
            // is busy a gone client shows as a failed write.
            let next = std::future::poll_fn(|cx| match source.poll_data(cx) {
                Poll::Ready(data) => Poll::Ready(Some(data)),
                Poll::Pending => poll_peer_gone(io, cx).map(|()| None),
            })
            .await;
            let data = match next {
                // The client is gone.
                None => return Ok(()),
                Some(None) => break,
                Some(Some(data)) => data?,
            };
            match (&source, length) {
                // Boxed: a body not chunked already is not an event stream's.
                (Source::Body(_), None) => within(limit, Box::pin(write_chunk(io, data))).await?,
                _ => within(limit, io.write_all(&data)).await?,
            }
        }
        // The end, under the same bound: a client that reads nothing would
        // keep the connection (and its task) for ever.
        if length.is_none() {
            within(limit, io.write_all(b"0\r\n\r\n")).await?;
        }
        within(limit, io.flush()).await?;
        within(limit, io.shutdown()).await
    }
}

/// What a response's body is read from: an event stream polled in place,
/// or any other body.
// Inline on purpose: the stream is what the task polls on every delivery.
#[allow(clippy::large_enum_variant)]
enum Source {
    Events(DirectEvents),
    Body(Body),
}

impl Source {
    /// The next bytes to write (a body's empty frames skipped); None at
    /// the body's end.
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<std::io::Result<Bytes>>> {
        match self {
            Source::Events(events) => events.poll_chunk(cx).map(|chunk| chunk.map(Ok)),
            Source::Body(body) => loop {
                let frame = match std::task::ready!(Pin::new(&mut *body).poll_frame(cx)) {
                    None => return Poll::Ready(None),
                    Some(Err(e)) => return Poll::Ready(Some(Err(std::io::Error::other(e)))),
                    Some(Ok(frame)) => frame,
                };
                match frame.into_data() {
                    Ok(data) if !data.is_empty() => return Poll::Ready(Some(Ok(data))),
                    _ => continue,
                }
            },
        }
    }
}

/// Runs one write. Under a [`WriteTimeout`] (an event stream's), a write
/// the client does not take within it ends the stream as too slow.
async fn within<F>(limit: Option<&WriteTimeout>, write: F) -> std::io::Result<()>
where
    F: Future<Output = std::io::Result<()>>,
{
    let Some(limit) = limit else {
        return write.await;
    };
    let mut write = std::pin::pin!(write);
    // Most writes complete at once: the timer is armed only for one that
    // waits (boxed: only then).
    if let Some(done) = futures::FutureExt::now_or_never(&mut write) {
        return done;
    }
    match Box::pin(tokio::time::timeout(limit.limit, write)).await {
        Ok(done) => done,
        Err(_) => {
            limit.expired();
            Err(std::io::ErrorKind::TimedOut.into())
        }
    }
}

/// The response head, with the framing of a body of `length` (chunked when
/// unknown) and `connection: close`. `parts` are dropped here: a stream
/// does not keep its response headers.
fn encode_head(parts: axum::http::response::Parts, length: Option<u64>) -> Vec<u8> {
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(parts.status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(
        parts
            .status
            .canonical_reason()
            .unwrap_or("Unknown")
            .as_bytes(),
    );
    head.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        let framing = name == header::CONNECTION
            || name == header::TRANSFER_ENCODING
            || name == header::CONTENT_LENGTH;
        if !framing {
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
    }
    if !parts.headers.contains_key(header::DATE) {
        head.extend_from_slice(b"date: ");
        head.extend_from_slice(httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"connection: close\r\n");
    match length {
        Some(n) => head.extend_from_slice(format!("content-length: {n}\r\n\r\n").as_bytes()),
        None => head.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n"),
    }
    head
}

/// Chunks up to this size are copied behind their size line and written
/// with one plain write; larger ones are written vectored, uncopied. A
/// `writev` of a small event cost about half a microsecond more than a
/// `send` of it in the kernel (docs/benchmarks/19-latency-profile.md): more than
/// copying a few hundred bytes.
const COPY_CHUNKS_UP_TO: usize = 16 * 1024;

/// One chunk of a chunked body: size line, data, CRLF.
async fn write_chunk<W: AsyncWrite + Unpin>(io: &mut W, mut data: Bytes) -> std::io::Result<()> {
    if data.len() <= COPY_CHUNKS_UP_TO {
        return io.write_all(&sse::http_chunk(&data)).await;
    }
    let mut line = [0u8; 18];
    let digits = sse::chunk_size_line(data.len(), &mut line);
    let mut size = &line[..digits];
    let mut tail: &[u8] = b"\r\n";
    while !(size.is_empty() && data.is_empty() && tail.is_empty()) {
        let slices = [IoSlice::new(size), IoSlice::new(&data), IoSlice::new(tail)];
        let mut n = io.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let take = n.min(size.len());
        size = &size[take..];
        n -= take;
        let take = n.min(data.len());
        data.advance(take);
        n -= take;
        tail = &tail[n.min(tail.len())..];
    }
    Ok(())
}

/// Ready when the client has closed its side (or the socket failed); what
/// it sends on a stream meanwhile is read and dropped.
fn poll_peer_gone<I: AsyncRead + Unpin>(io: &mut I, cx: &mut Context<'_>) -> Poll<()> {
    let mut scratch = [0u8; 64];
    loop {
        let mut buf = ReadBuf::new(&mut scratch);
        match Pin::new(&mut *io).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(()),
            Poll::Ready(Ok(())) => continue,
            Poll::Ready(Err(_)) => return Poll::Ready(()),
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// A socket with bytes already read from it put back in front: hyper reads
/// `prefix` first, then the socket. The prefix is freed once read.
pub(crate) struct Prefixed<I> {
    prefix: Option<Bytes>,
    io: I,
}

impl<I> Prefixed<I> {
    pub(crate) fn new(prefix: Bytes, io: I) -> Self {
        Self {
            prefix: Some(prefix).filter(|p| !p.is_empty()),
            io,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Prefixed<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Some(prefix) = &mut this.prefix {
            let n = prefix.len().min(buf.remaining());
            buf.put_slice(&prefix[..n]);
            prefix.advance(n);
            if prefix.is_empty() {
                this.prefix = None;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

crate::write_through::write_through!(Prefixed<I>, [I: AsyncWrite + Unpin]);

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Parsed {
        parse(text.as_bytes())
    }

    #[test]
    fn only_a_bodiless_get_of_the_events_path_is_served_here() {
        let stream =
            "GET /api/v1/events?topic=apps/** HTTP/1.1\r\nHost: x\r\nLast-Event-ID: e-1\r\n\r\n";
        let Parsed::Stream(request) = head(stream) else {
            panic!("the events request is served here");
        };
        assert_eq!(request.uri().query(), Some("topic=apps/**"));
        assert_eq!(request.headers()["last-event-id"], "e-1");
        assert!(matches!(head(&stream[..30]), Parsed::Partial));
        for other in [
            "GET /api/v1/ws HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST /api/v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
            "GET /api/v1/events HTTP/1.0\r\nHost: x\r\n\r\n",
            "GET /api/v1/events HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET /api/v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET /api/v1/events HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nContent-Length: 0\r\n\r\n",
            // Bare LF line ends, anywhere in the head.
            "GET /api/v1/events HTTP/1.1\nHost: x\n\n",
            "GET /api/v1/events HTTP/1.1\r\nHost: x\n\r\n",
            "GET /api/v1/events HTTP/1.1\r\nHost: x\r\n\n",
            "GET /api/v1/events HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n",
            // A pipelined second request: hyper serves both.
            "GET /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n\r\n",
            "GET /api/v1/eventsX HTTP/1.1\r\nHost: x\r\n\r\n",
            "not http at all\r\n\r\n",
        ] {
            assert!(matches!(head(other), Parsed::Other), "{other:?}");
        }
    }

    #[tokio::test]
    async fn hyper_reads_the_prefix_then_the_socket() {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b" world").await.unwrap();
        drop(client);
        let mut io = Prefixed::new(Bytes::from_static(b"hello"), server);
        let mut all = String::new();
        io.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "hello world");
    }

    #[tokio::test]
    async fn a_streamed_body_is_chunked_and_the_connection_closes() {
        let (mut client, mut server) = tokio::io::duplex(4096);
        let body = Body::from_stream(futures::stream::iter([
            Ok::<_, std::convert::Infallible>(Bytes::from_static(b"data: 1\n\n")),
            Ok(Bytes::from_static(b"")),
            Ok(Bytes::from_static(b": hb\n\n")),
        ]));
        let response = Response::builder()
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap();
        write_response(&mut server, response).await.unwrap();
        drop(server);
        let mut text = String::new();
        client.read_to_string(&mut text).await.unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.contains("\r\ncontent-type: text/event-stream"),
            "{head}"
        );
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(head.contains("\r\ntransfer-encoding: chunked"), "{head}");
        assert_eq!(body, "9\r\ndata: 1\n\n\r\n6\r\n: hb\n\n\r\n0\r\n\r\n");
    }

    #[tokio::test]
    async fn small_chunks_are_copied_and_large_ones_written_vectored() {
        for len in [
            1,
            COPY_CHUNKS_UP_TO,
            COPY_CHUNKS_UP_TO + 1,
            3 * COPY_CHUNKS_UP_TO,
        ] {
            let (mut client, mut server) = tokio::io::duplex(1024);
            let data = Bytes::from(vec![b'x'; len]);
            let reader = tokio::spawn(async move {
                let mut all = Vec::new();
                client.read_to_end(&mut all).await.unwrap();
                all
            });
            write_chunk(&mut server, data).await.unwrap();
            drop(server);
            let mut expected = format!("{len:x}\r\n").into_bytes();
            expected.extend(std::iter::repeat_n(b'x', len));
            expected.extend_from_slice(b"\r\n");
            assert!(reader.await.unwrap() == expected, "a chunk of {len} bytes");
        }
    }
}
