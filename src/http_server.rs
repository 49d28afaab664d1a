//! The HTTP servers under the router ([`serve`]): plain TCP, HTTP/1.1
//! through hyper, and TLS, HTTP/2 and HTTP/1.1 by ALPN through rustls with
//! certificate reload. Both hand each request its peer address (for the
//! per-IP limits), take WebSocket upgrades and shut down gracefully.
//!
//! Written out rather than `axum::serve` for the memory of a long-lived
//! stream, which is what most connections here are: `axum::serve` detects a
//! cleartext HTTP/2 preface by reading the first 24 bytes on their own,
//! after which hyper grows its read buffer from 8 to 16 KiB to parse the
//! rest of the request, and every SSE or WebSocket connection keeps that
//! buffer. Serving HTTP/1.1 only, it stays 8 KiB (docs/BENCHMARKS.md,
//! scenario 3). hyper still reads while a response streams, so a client
//! that hangs up ends its stream at once.
//!
//! A connection counts until its socket is dropped, also after a WebSocket
//! upgrade took it over from hyper: shutdown waits for every socket's close
//! frame (docs/RELIABILITY.md). Accepted sockets get a fixed, modest send
//! buffer ([`SEND_BUFFER`]) instead of the kernel's auto-tuning, so a client
//! that stops reading blocks the session's writes after a few KiB, not
//! megabytes, and is noticed within the write timeout.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tower::ServiceExt;

use crate::error::{Error, Result};

/// Binds `addr`, naming it in the error.
pub async fn bind(addr: std::net::SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })
}

/// Serves `app` on `listener` until `shutdown` is cancelled, over TLS when
/// `tls` is set, then lets open connections finish their requests (streams
/// end on the same signal).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsSettings>,
    shutdown: CancellationToken,
) -> Result<()> {
    match tls {
        Some(tls) => serve_tls(listener, app, tls, shutdown).await,
        None => serve_plain(listener, app, shutdown).await,
    }
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

/// An accepted socket that counts as a connection of the server until it is
/// dropped: by hyper, or by the WebSocket session it was upgraded to.
struct Tracked {
    io: TcpStream,
    _token: TaskTrackerToken,
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

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Plain HTTP/1.1.
async fn serve_plain(
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
) -> Result<()> {
    let http = http1::Builder::new();
    let connections = TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, or reset before it was accepted:
                    // wait a moment rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        if let Err(e) = limit_send_buffer(&stream) {
            tracing::debug!(error = %e, %peer, "cannot set the send buffer size");
        }
        let stream = Tracked {
            io: stream,
            _token: connections.token(),
        };
        let service = app.clone().map_request(move |request: Request<Incoming>| {
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        });
        let connection = http
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
            .with_upgrades();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                _ = shutdown.cancelled() => {
                    // Finish the request in flight, then close.
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    // Every connection, upgraded ones included: WebSocket sessions end on
    // `shutdown` themselves, each after its close frame (bounded by their
    // close grace), SSE streams at once.
    connections.wait().await;
    Ok(())
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

/// Serves `app` over TLS (HTTP/2 and HTTP/1.1 by ALPN) until `shutdown`;
/// a changed certificate or key file is loaded without a restart.
async fn serve_tls(
    listener: TcpListener,
    app: Router,
    tls: TlsSettings,
    shutdown: CancellationToken,
) -> Result<()> {
    // rustls picks the process-wide provider: ring, as everywhere in kube-pulse.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = axum_server::tls_rustls::RustlsConfig::from_pem_file(&tls.cert, &tls.key)
        .await
        .map_err(|e| Error::Config {
            path: tls.cert.clone(),
            message: format!("cannot load the TLS certificate and key: {e}"),
        })?;
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    let watch = shutdown.clone();
    tokio::spawn(async move {
        watch.cancelled().await;
        stopper.graceful_shutdown(Some(std::time::Duration::from_secs(30)));
    });
    tokio::spawn(reload_tls(config.clone(), tls, shutdown.clone()));
    let listener = listener.into_std().map_err(Error::Serve)?;
    let service = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum_server::from_tcp_rustls(listener, config)
        .map_err(Error::Serve)?
        .handle(handle)
        .serve(service)
        .await
        .map_err(Error::Serve)
}

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
