//! The HTTP servers under the router ([`serve`], [`serve_with`]): plain
//! TCP, HTTP/1.1 through hyper, and TLS, HTTP/2 and HTTP/1.1 by ALPN through
//! rustls with certificate reload. One accept loop serves both: it counts
//! every connection before reading it ([`crate::http::connections`]: per IP, a
//! ceiling, idle shedding, header-read/handshake/idle timeouts), backs off
//! when descriptors run out, hands each request its client address
//! ([`crate::http::client_ip`]: the peer, or the browser behind a trusted proxy),
//! takes WebSocket upgrades and shuts down gracefully.
//!
//! Written out rather than `axum::serve` for the memory of a long-lived
//! stream, which is what most connections here are: `axum::serve` detects a
//! cleartext HTTP/2 preface by reading the first 24 bytes on their own,
//! after which hyper grows its read buffer from 8 to 16 KiB to parse the
//! rest of the request, and every SSE or WebSocket connection keeps that
//! buffer. Serving HTTP/1.1 only, it stays 8 KiB (docs/benchmarks/01-08-side-by-side.md,
//! memory). On the plain listener an event stream does not keep even
//! that: the first request head is read here, and a `GET` of the events
//! path is answered without hyper ([`crate::http::sse_socket`]; its read and
//! header buffers are 16 KiB of a stream's 27, §16). Streams over TLS stay
//! with hyper. Either way the socket is read while a response streams, so
//! a client that hangs up ends its stream at once.
//!
//! A connection counts until its socket is dropped, also after a WebSocket
//! upgrade took it over from hyper: shutdown waits for every socket's close
//! frame (docs/RELIABILITY.md). Accepted sockets get a fixed, modest send
//! buffer ([`SEND_BUFFER`]) instead of the kernel's auto-tuning, so a client
//! that stops reading blocks the session's writes after a few KiB, not
//! megabytes, and is noticed within the write timeout.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum_server::accept::Accept;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tower::ServiceExt;

use crate::error::{Error, Result};
use crate::http::connections::{Conn, ConnectionSettings, Connections, Reason, Slot};
use crate::http::sse_socket::{Head, Prefixed};
use crate::metrics::Metrics;

/// Binds `addr`, naming it in the error.
pub async fn bind(addr: std::net::SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })
}

/// Serves `app` on `listener` until `shutdown` is cancelled, over TLS when
/// `tls` is set, then lets open connections finish their requests (streams
/// end on the same signal). Connection limits and timeouts at their
/// defaults, metrics of its own: see [`serve_with`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsSettings>,
    shutdown: CancellationToken,
) -> Result<()> {
    let connections = Connections::new(ConnectionSettings::default(), 0, Metrics::new());
    serve_on(listener, app, tls, connections, shutdown).await
}

/// [`serve`] with connection limits and timeouts `settings` (the ceiling
/// derived for `members` member clusters), counted in `metrics`.
pub async fn serve_with(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsSettings>,
    settings: ConnectionSettings,
    members: usize,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<()> {
    let connections = Connections::new(settings, members, metrics);
    serve_on(listener, app, tls, connections, shutdown).await
}

/// The send buffer asked for on every accepted socket (Linux doubles it
/// for its bookkeeping and stops auto-tuning it, which would otherwise grow
/// it to `net.ipv4.tcp_wmem`'s maximum, 4 MiB by default). What a stalled
/// reader can hold in the kernel is bounded by this; a healthy one is not
/// slowed at the rates status streams have (32 KiB per round trip).
pub const SEND_BUFFER: u32 = 32 * 1024;

/// Sets [`SEND_BUFFER`] on an accepted socket (through a duplicate of its
/// descriptor: std and tokio offer the setter only on an unconnected socket).
#[cfg(unix)]
fn limit_send_buffer(stream: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    let duplicate = std::net::TcpStream::from(stream.as_fd().try_clone_to_owned()?);
    tokio::net::TcpSocket::from_std_stream(duplicate).set_send_buffer_size(SEND_BUFFER)
}

#[cfg(not(unix))]
fn limit_send_buffer(_: &TcpStream) -> std::io::Result<()> {
    Ok(())
}

/// An accepted socket that counts as a connection of the server (for
/// shutdown, and against its IP and the ceiling) until it is dropped: by
/// hyper, or by the WebSocket session it was upgraded to.
struct Tracked {
    io: TcpStream,
    _token: TaskTrackerToken,
    slot: Slot,
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

crate::write_through::write_through!(Tracked);

/// [`Connection::drive`]'s flag for an HTTP/1.1 connection.
const HTTP1: bool = true;

/// Accept errors are logged at most this often (the rest are counted).
const LOG_EVERY: Duration = Duration::from_secs(10);

/// How long connections may take to finish once the server shuts down:
/// an event stream's last bytes to a client that does not read them would
/// otherwise hold the process open for the write timeout, or for ever (a
/// WebSocket session ends within its own close grace, well before). Each
/// hyper connection is cut after it, and the server stops waiting for the
/// rest (event streams written without hyper).
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(10);

/// The accept loop of both listeners: counts each connection against its
/// IP and the ceiling before anything is read, backs off when descriptors
/// run out, and serves each connection on its own task.
async fn serve_on(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsSettings>,
    connections: Arc<Connections>,
    shutdown: CancellationToken,
) -> Result<()> {
    let tls = match tls {
        Some(tls) => Some(tls_acceptor(tls, &connections.settings, &shutdown).await?),
        None => None,
    };
    let tracker = TaskTracker::new();
    let mut last_log: Option<(Instant, u64)> = None;
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    let exhausted = connections.accept_failed(&e);
                    log_rate_limited(&mut last_log, &e);
                    if exhausted {
                        // Out of descriptors: free one idle connection and
                        // give the closes a moment rather than spin.
                        connections.shed_longest_idle(None);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    } else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    continue;
                }
            },
        };
        let slot = match connections.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(reason) => {
                tracing::debug!(%peer, reason = reason.label(), "connection refused");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        if let Err(e) = limit_send_buffer(&stream) {
            tracing::debug!(error = %e, %peer, "cannot set the send buffer size");
        }
        let stream = Tracked {
            io: stream,
            _token: tracker.token(),
            slot,
        };
        let connection = Connection {
            app: app.clone(),
            connections: connections.clone(),
            peer,
            shutdown: shutdown.clone(),
        };
        // A task of each kind: the handshake and HTTP/2 make a future
        // several KiB larger than a plain connection's, and one future for
        // both would size every plain connection's task for TLS.
        match &tls {
            Some(acceptor) => tracker.spawn(connection.serve_tls(stream, acceptor.clone())),
            None => tracker.spawn(connection.serve_plain(stream)),
        };
    }
    drop(listener);
    tracker.close();
    // Every connection, upgraded ones included: WebSocket sessions end on
    // `shutdown` themselves, each after its close frame (bounded by their
    // close grace), SSE streams at once; but a stream whose client reads
    // nothing may be waiting on its socket for the write timeout (a minute
    // by default). What has not ended once the drain is over is left to the
    // runtime, which drops it (and its socket) as the process ends.
    if tokio::time::timeout(SHUTDOWN_DRAIN, tracker.wait())
        .await
        .is_err()
    {
        tracing::info!(
            connections = tracker.len(),
            "connections not finished {SHUTDOWN_DRAIN:?} after shutdown: cut"
        );
    }
    Ok(())
}

/// Logs a failed accept, at most once per [`LOG_EVERY`] with the number
/// left unlogged since.
fn log_rate_limited(last: &mut Option<(Instant, u64)>, error: &std::io::Error) {
    match last {
        Some((at, unlogged)) if at.elapsed() < LOG_EVERY => *unlogged += 1,
        _ => {
            let unlogged = last.map_or(0, |(_, n)| n);
            tracing::warn!(%error, unlogged, "accepting a connection failed");
            *last = Some((Instant::now(), 0));
        }
    }
}

/// One accepted connection and what serving it needs.
struct Connection {
    app: Router,
    connections: Arc<Connections>,
    peer: SocketAddr,
    shutdown: CancellationToken,
}

impl Connection {
    /// The router behind the per-request bookkeeping: the client address
    /// (trusted proxies), and the request counted in flight until its
    /// response body is done (a stream stays in flight; a 101 marks the
    /// connection as upgraded).
    fn service(
        &self,
        conn: Arc<Conn>,
    ) -> impl tower::Service<
        Request<Incoming>,
        Response = axum::response::Response,
        Error = std::convert::Infallible,
        Future = impl Future<
            Output = std::result::Result<axum::response::Response, std::convert::Infallible>,
        > + Send
                 + 'static,
    > + Clone
    + Send
    + 'static {
        let (app, connections, peer) = (self.app.clone(), self.connections.clone(), self.peer);
        tower::service_fn(move |request: Request<Incoming>| {
            let guard = connections.begin_request(&conn);
            let mut request = request.map(Body::new);
            crate::http::client_ip::attach(
                &connections.settings.trusted_proxies,
                peer,
                &mut request,
            );
            let app = app.clone();
            async move {
                let response = app.oneshot(request).await?;
                if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                    guard.upgraded();
                }
                Ok(response.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _in_flight = &guard;
                        frame
                    }))
                }))
            }
        })
    }

    /// A plain connection: its first request head is read here (under the
    /// header-read timeout); an events stream is answered without hyper
    /// ([`crate::http::sse_socket`]), anything else goes to hyper with what was
    /// read put back in front. Not an `async fn`, which would keep its
    /// arguments beside the values made of them for the connection's life:
    /// the async block holds the connection once, and what serves a stream
    /// borrows it.
    fn serve_plain(self, mut stream: Tracked) -> impl Future<Output = ()> + Send {
        let conn = stream.slot.conn.clone();
        async move {
            let head = tokio::select! {
                head = crate::http::sse_socket::read_head(&mut stream) => head,
                reason = self.connections.expired(&conn) => {
                    self.connections.closed(reason);
                    return;
                }
                _ = self.shutdown.cancelled() => return,
            };
            match head {
                Head::Gone => {}
                Head::Stream(request) => self.serve_stream(&mut stream, request, &conn).await,
                // Boxed: hyper's connection is a large future, and inline every
                // stream's task would be that size.
                Head::Other(read) => {
                    let io = TokioIo::new(Prefixed::new(read, stream));
                    Box::pin(self.serve_http1(io, conn)).await
                }
            }
        }
    }

    /// An events stream: the router answers the request (the same layers
    /// as through hyper: host and origin guard, authentication, limits),
    /// and the response goes straight to the socket; the connection closes
    /// when it ends. It counts as in flight meanwhile, like any request.
    async fn serve_stream(
        &self,
        stream: &mut Tracked,
        mut request: Box<Request>,
        conn: &Arc<Conn>,
    ) {
        let _in_flight = self.connections.begin_request(conn);
        let trusted = &self.connections.settings.trusted_proxies;
        crate::http::client_ip::attach(trusted, self.peer, &mut request);
        // Boxed: the router's future is large and needed only until the
        // response head; inline it would size the task for the stream's life.
        let Ok(response) = Box::pin(self.app.clone().oneshot(unbox(request))).await;
        if let Err(e) = crate::http::sse_socket::write_response(stream, response).await {
            tracing::debug!(error = %e, peer = %self.peer, "event stream ended with an error");
        }
    }

    /// HTTP/1.1 with upgrades, under the header-read and idle timeouts.
    async fn serve_http1<I>(self, io: TokioIo<I>, conn: Arc<Conn>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut http = http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(self.connections.settings.header_read_timeout);
        let service = TowerToHyperService::new(self.service(conn.clone()));
        let connection = http.serve_connection(io, service).with_upgrades();
        self.drive(connection, &conn, HTTP1, |c| c.graceful_shutdown())
            .await;
    }

    /// HTTP/2 (chosen by ALPN), with keep-alive pings to notice dead peers.
    async fn serve_http2<I>(self, io: TokioIo<I>, conn: Arc<Conn>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut http = http2::Builder::new(TokioExecutor::new());
        http.timer(TokioTimer::new())
            .keep_alive_interval(Some(Duration::from_secs(20)))
            .keep_alive_timeout(Duration::from_secs(20));
        let service = TowerToHyperService::new(self.service(conn.clone()));
        let connection = http.serve_connection(io, service);
        self.drive(connection, &conn, !HTTP1, |c| c.graceful_shutdown())
            .await;
    }

    /// The TLS handshake (bounded), then HTTP/2 or HTTP/1.1 by ALPN.
    async fn serve_tls(self, stream: Tracked, acceptor: TlsAcceptor) {
        let conn = stream.slot.conn.clone();
        let handshake = tokio::select! {
            handshake = acceptor.accept(stream, ()) => handshake,
            reason = self.connections.expired(&conn) => {
                self.connections.closed(reason);
                return;
            }
        };
        let stream = match handshake {
            Ok((stream, _)) => stream,
            Err(e) => {
                if e.kind() == std::io::ErrorKind::TimedOut {
                    self.connections.closed(Reason::HandshakeTimeout);
                }
                tracing::debug!(error = %e, peer = %self.peer, "TLS handshake failed");
                return;
            }
        };
        self.connections.ready(&conn);
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        if h2 {
            self.serve_http2(TokioIo::new(stream), conn).await
        } else {
            self.serve_http1(TokioIo::new(stream), conn).await
        }
    }

    /// Runs `connection` until it ends, expires (closed at once: nothing is
    /// in flight) or the server shuts down (requests in flight finish).
    /// `http1`: a timeout error is hyper's header-read timeout.
    async fn drive<C>(
        self,
        connection: C,
        conn: &Conn,
        http1: bool,
        graceful: impl FnOnce(Pin<&mut C>),
    ) where
        C: Future<Output = hyper::Result<()>>,
    {
        let mut connection = std::pin::pin!(connection);
        let result = tokio::select! {
            result = connection.as_mut() => result,
            reason = self.connections.expired(conn) => {
                self.connections.closed(reason);
                return;
            }
            _ = self.shutdown.cancelled() => {
                graceful(connection.as_mut());
                match tokio::time::timeout(SHUTDOWN_DRAIN, connection).await {
                    Ok(result) => result,
                    Err(_) => {
                        tracing::debug!(peer = %self.peer, "connection cut: not finished {SHUTDOWN_DRAIN:?} after shutdown");
                        return;
                    }
                }
            }
        };
        if let Err(e) = result {
            if http1 && e.is_timeout() {
                self.connections.closed(Reason::HeaderTimeout);
            }
            tracing::debug!(error = %e, peer = %self.peer, "connection ended with an error");
        }
    }
}

/// The value of `boxed`, its allocation freed now (moved out with `*`, a
/// box is freed only when its binding goes out of scope).
#[allow(clippy::boxed_local)] // Taking the box is the point: it is freed here.
fn unbox<T>(boxed: Box<T>) -> T {
    *boxed
}

/// Where the TLS certificate chain and key are (PEM).
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first.
    pub cert: std::path::PathBuf,
    /// PEM private key of the leaf certificate (a secret: only its path is kept).
    pub key: std::path::PathBuf,
    /// How often the files are checked for a change (then reloaded).
    pub reload_every: std::time::Duration,
}

/// The TLS acceptor, bounded by the handshake timeout, of the certificate
/// and key (offering HTTP/2 and HTTP/1.1 by ALPN); a changed certificate or
/// key file is loaded without a restart until `shutdown`.
async fn tls_acceptor(
    tls: TlsSettings,
    settings: &ConnectionSettings,
    shutdown: &CancellationToken,
) -> Result<TlsAcceptor> {
    // rustls picks the process-wide provider: ring, as everywhere in kube-pulse.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = axum_server::tls_rustls::RustlsConfig::from_pem_file(&tls.cert, &tls.key)
        .await
        .map_err(|e| Error::Config {
            path: tls.cert.clone(),
            message: format!("cannot load the TLS certificate and key: {e}"),
        })?;
    tokio::spawn(reload_tls(config.clone(), tls, shutdown.clone()));
    Ok(axum_server::tls_rustls::RustlsAcceptor::new(config)
        .handshake_timeout(settings.tls_handshake_timeout))
}

/// Accepts TLS on an accepted socket.
type TlsAcceptor = axum_server::tls_rustls::RustlsAcceptor;

/// Reloads the certificate and key when either file changes.
async fn reload_tls(
    config: axum_server::tls_rustls::RustlsConfig,
    tls: TlsSettings,
    shutdown: CancellationToken,
) {
    let stamp = |tls: &TlsSettings| {
        let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        (modified(&tls.cert), modified(&tls.key))
    };
    let mut last = stamp(&tls);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(tls.reload_every) => {}
        }
        let now = stamp(&tls);
        if now == last {
            continue;
        }
        match config.reload_from_pem_file(&tls.cert, &tls.key).await {
            Ok(()) => {
                tracing::info!(cert = %tls.cert.display(), "TLS certificate reloaded");
                last = now;
            }
            // Half-written files: keep serving the old pair and try again.
            Err(e) => {
                tracing::warn!(cause = %e, "TLS certificate reload failed; keeping the current one")
            }
        }
    }
}
