//! Bounded answers from a member's API server: every kube-rs client the
//! gateway builds for a member (or for Karpor) reads at most a bounded number
//! of bytes per answer, so an endpoint that answers without end costs an
//! error with a reason, not memory.
//!
//! The bounds follow what Kubernetes sends:
//! - a watch (`watch=true`) is a stream of events, one per line: each line
//!   is at most [`MAX_EVENT_BYTES`] (an object is at most 1.5 MiB in etcd by
//!   default; its JSON, in an event, fits several times over);
//! - any other answer (a list — kube-rs's watcher pages them, 500 objects a
//!   page —, discovery, one object, a status write's echo) is at most
//!   [`MAX_LIST_BYTES`].
//!
//! The probe reads its own answers with a tighter bound (`probe.rs`).
//!
//! The connections are bounded too: each one's read buffer grows to at
//! most [`MAX_READ_BUFFER`]. hyper's own bound is about 408 KiB, and a
//! buffer keeps what it grew to for the connection's life: a pod watch's
//! streamed initial list grew every member's pod watch connection to it
//! (docs/benchmarks/25-fleet-scale.md). kube-rs builds its client with no
//! setting for it, so the stack is built here from kube-rs's own parts
//! (its TLS connector, base URI, authentication and extra headers, its
//! retry policy where asked), as kube-rs builds it, without its tracing
//! spans; a configuration with a proxy keeps kube-rs's whole stack.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tower::{Layer, Service};

/// The bound on one watch event.
pub const MAX_EVENT_BYTES: u64 = 8 << 20;
/// The bound on any other answer: a page of a list at most.
pub const MAX_LIST_BYTES: u64 = 64 << 20;
/// The most a connection's read buffer grows to (hyper's least is 8 KiB).
pub const MAX_READ_BUFFER: usize = 64 << 10;

/// A kube-rs client for `config` whose answers are bounded as above.
///
/// A server without a CA of its own is checked against the system's roots,
/// as kube-rs does, but read once for every client instead of once per
/// client (5 ms each, and a root store per member, with thousands of
/// members).
pub fn client(mut config: kube::Config) -> kube::Result<kube::Client> {
    if config.root_cert.is_none()
        && !config.accept_invalid_certs
        && let Some(roots) = system_roots()
    {
        config.root_cert = Some(roots.clone());
    }
    if config.proxy_url.is_some() {
        // kube-rs's stack knows proxies (and refuses those it was built without).
        return Ok(kube::client::ClientBuilder::try_from(config)?
            .with_layer(&BoundLayer)
            .build());
    }
    use kube::client::ConfigExt as _;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let executor = hyper_util::rt::TokioExecutor::new();
    let connections: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(executor)
            .http1_max_buf_size(MAX_READ_BUFFER)
            .build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = tower::ServiceBuilder::new()
        .layer(BoundLayer)
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(connections);
    Ok(kube::client::ClientBuilder::new(service, config.default_namespace.clone()).build())
}

/// The system's root certificates (DER; `SSL_CERT_FILE` and `SSL_CERT_DIR`
/// are honoured), read on first use; None when there are none, and kube-rs
/// then asks the platform's verifier as it would.
fn system_roots() -> Option<&'static Vec<Vec<u8>>> {
    static ROOTS: std::sync::OnceLock<Option<Vec<Vec<u8>>>> = std::sync::OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::debug!(cause = %e, "a system root certificate could not be read");
            }
            let roots: Vec<Vec<u8>> = found.certs.into_iter().map(|c| c.to_vec()).collect();
            (!roots.is_empty()).then_some(roots)
        })
        .as_ref()
}

/// What an answer exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    /// Every line (watch event) at most this long.
    Line(u64),
    /// The whole answer at most this long.
    Total(u64),
}

impl Bound {
    /// The bound of the answer to a request for `uri`.
    fn of(uri: &http::Uri) -> Self {
        let query = uri.query().unwrap_or("");
        let watch = query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1");
        if watch {
            Bound::Line(MAX_EVENT_BYTES)
        } else {
            Bound::Total(MAX_LIST_BYTES)
        }
    }
}

/// The error an answer over its bound ends with.
#[derive(Debug)]
pub struct TooLarge(Bound);

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = |max: u64| {
            if max >= 1 << 20 {
                format!("{} MiB", max >> 20)
            } else {
                format!("{max} bytes")
            }
        };
        match self.0 {
            Bound::Line(max) => write!(f, "a watch event is over {}: not read further", size(max)),
            Bound::Total(max) => write!(f, "the answer is over {}: not read further", size(max)),
        }
    }
}

impl std::error::Error for TooLarge {}

/// The tower layer that bounds every answer's body.
#[derive(Debug, Clone, Copy)]
struct BoundLayer;

impl<S> Layer<S> for BoundLayer {
    type Service = BoundService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        BoundService { inner }
    }
}

#[derive(Debug, Clone)]
struct BoundService<S> {
    inner: S,
}

impl<S, B, Req> Service<http::Request<Req>> for BoundService<S>
where
    S: Service<http::Request<Req>, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Bounded<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Req>) -> Self::Future {
        let bound = Bound::of(request.uri());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await?;
            Ok(answer.map(|body| Bounded::new(body, bound)))
        })
    }
}

/// A body that ends with [`TooLarge`] once it passes its bound.
#[derive(Debug)]
pub struct Bounded<B> {
    inner: B,
    bound: Bound,
    /// Bytes counted against the bound: since the last newline for
    /// [`Bound::Line`], in all for [`Bound::Total`].
    counted: u64,
    failed: bool,
}

impl<B> Bounded<B> {
    fn new(inner: B, bound: Bound) -> Self {
        Self {
            inner,
            bound,
            counted: 0,
            failed: false,
        }
    }

    /// Counts `data`; false once the bound is passed.
    fn count(&mut self, data: &[u8]) -> bool {
        let len = data.len() as u64;
        match self.bound {
            Bound::Total(max) => {
                self.counted += len;
                self.counted <= max
            }
            Bound::Line(max) => {
                match data.iter().rposition(|&b| b == b'\n') {
                    // The line before the last newline in this chunk ended
                    // within it: only its start was counted before.
                    Some(at) => {
                        let first = data.iter().position(|&b| b == b'\n').unwrap_or(at);
                        if self.counted + first as u64 > max {
                            return false;
                        }
                        if !lines_within(&data[first + 1..=at], max) {
                            return false;
                        }
                        self.counted = (data.len() - at - 1) as u64;
                    }
                    None => self.counted += len,
                }
                self.counted <= max
            }
        }
    }
}

/// Whether every newline-ended line in `data` is at most `max` bytes.
fn lines_within(data: &[u8], max: u64) -> bool {
    data.split(|&b| b == b'\n')
        .all(|line| line.len() as u64 <= max)
}

impl<B> Body for Bounded<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && !self.count(data)
                {
                    self.failed = true;
                    return Poll::Ready(Some(Err(Box::new(TooLarge(self.bound)))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    /// A server on loopback that answers one request with `body` (one
    /// write, as a fast server would), and its URL.
    async fn answering(body: Vec<u8>) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = vec![0u8; 4096];
            let _ = socket.read(&mut head).await;
            let mut answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            answer.extend_from_slice(&body);
            socket.write_all(&answer).await.unwrap();
        });
        url
    }

    #[tokio::test]
    async fn an_answer_larger_than_the_read_buffer_is_read_whole() {
        let items: Vec<String> = (0..20_000).map(|i| format!("{{\"n\":{i}}}")).collect();
        let body = format!("{{\"items\":[{}]}}", items.join(",")).into_bytes();
        assert!(body.len() > 2 * MAX_READ_BUFFER, "{} bytes", body.len());
        let url = answering(body.clone()).await;
        let client = client(kube::Config::new(url.parse().unwrap())).unwrap();
        let request = http::Request::get("/api/v1/things")
            .body(Vec::new())
            .unwrap();
        let text = client.request_text(request).await.unwrap();
        assert_eq!(text.as_bytes(), &body[..]);
    }

    #[test]
    fn a_client_with_a_proxy_is_kube_rs_own() {
        let mut config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        config.proxy_url = Some("http://proxy.invalid:3128".parse().unwrap());
        // kube-rs is built without its proxy features: it says so.
        let Err(err) = client(config) else {
            panic!("a proxy kube-rs cannot use is refused");
        };
        let err = err.to_string();
        assert!(err.contains("proxy"), "{err}");
    }

    fn uri(s: &str) -> http::Uri {
        s.parse().unwrap()
    }

    #[test]
    fn each_request_gets_the_bound_of_what_it_asks() {
        let cases = [
            (
                "/apis/apps/v1/deployments?watch=true&resourceVersion=5",
                Bound::Line(MAX_EVENT_BYTES),
            ),
            (
                "/api/v1/pods?limit=500&resourceVersion=0",
                Bound::Total(MAX_LIST_BYTES),
            ),
            ("/api/v1/pods?watch=1", Bound::Line(MAX_EVENT_BYTES)),
            ("/apis", Bound::Total(MAX_LIST_BYTES)),
            ("/version", Bound::Total(MAX_LIST_BYTES)),
            (
                "/api/v1/namespaces/a/pods/p?watchful=true",
                Bound::Total(MAX_LIST_BYTES),
            ),
            ("/api/v1/pods?watch=false", Bound::Total(MAX_LIST_BYTES)),
        ];
        for (path, bound) in cases {
            assert_eq!(Bound::of(&uri(path)), bound, "{path}");
        }
    }

    /// A body of `chunks`, read through the bound.
    async fn read(chunks: Vec<Vec<u8>>, bound: Bound) -> Result<usize, String> {
        let stream = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(c)))),
        );
        let body = Bounded::new(http_body_util::StreamBody::new(stream), bound);
        body.collect()
            .await
            .map(|b| b.to_bytes().len())
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn a_whole_answer_is_cut_at_its_bound() {
        assert_eq!(
            read(vec![vec![b'x'; 10]; 3], Bound::Total(30)).await,
            Ok(30)
        );
        let over = read(vec![vec![b'x'; 10]; 4], Bound::Total(30)).await;
        assert_eq!(
            over,
            Err("the answer is over 30 bytes: not read further".into())
        );
    }

    #[tokio::test]
    async fn a_watch_is_cut_at_its_first_long_line_whatever_the_chunks() {
        // Many short lines in all: read to the end.
        let lines = b"0123456789\n".repeat(100);
        let in_chunks = |size: usize| lines.chunks(size).map(<[u8]>::to_vec).collect();
        for size in [1, 7, 11, 64, 2000] {
            assert_eq!(
                read(in_chunks(size), Bound::Line(10)).await,
                Ok(1100),
                "chunks of {size}"
            );
        }
        // One line too long, wherever the chunks cut it.
        let mut long = b"0123456789\n".repeat(3);
        long.extend_from_slice(b"0123456789A\n");
        long.extend_from_slice(&b"0123456789\n".repeat(3));
        for size in [1, 5, 11, 12, 30, 2000] {
            let chunks = long.chunks(size).map(<[u8]>::to_vec).collect();
            let read = read(chunks, Bound::Line(10)).await;
            assert!(
                read.as_ref()
                    .is_err_and(|e| e.contains("a watch event is over")),
                "chunks of {size}: {read:?}"
            );
        }
    }
}
