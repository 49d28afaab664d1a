//! The accept loop of a simulated cluster: hyper connections over a TCP
//! listener (TLS with `SimConfig::tls`) that the `refuse` fault can close
//! and reopen on the same port.
//!
//! Every connection task stops when the cluster shuts down or when the
//! listener is closed by a fault (connections are cut, as when a member
//! apiserver goes away).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpSocket};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::shared::Shared;
use super::tls::Tls;

/// Binds with `SO_REUSEADDR` so a refused cluster can reopen its port at once.
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Serves `app` until shutdown, honouring the `refuse` fault; over TLS
/// when `tls` is given.
pub(crate) async fn run(
    shared: Arc<Shared>,
    listener: TcpListener,
    app: Router,
    tracker: TaskTracker,
    tls: Option<Tls>,
) {
    let addr = shared.addr;
    let mut listener = Some(listener);
    let mut faults = shared.faults.subscribe();
    // Cancelled to cut every open connection when the listener closes.
    let mut connections = CancellationToken::new();
    loop {
        let refuse = faults.borrow_and_update().refuse;
        if refuse && listener.is_some() {
            listener = None;
            connections.cancel();
            connections = CancellationToken::new();
            tracing::info!(cluster = %shared.name, %addr, "refusing connections");
        }
        if !refuse && listener.is_none() {
            match bind(addr) {
                Ok(l) => {
                    tracing::info!(cluster = %shared.name, %addr, "accepting connections again");
                    listener = Some(l);
                }
                Err(err) => {
                    tracing::warn!(cluster = %shared.name, %addr, cause = %err, "cannot reopen port, retrying");
                    tokio::select! {
                        _ = shared.shutdown.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                    }
                }
            }
        }
        let accepted = match &listener {
            Some(l) => tokio::select! {
                _ = shared.shutdown.cancelled() => break,
                changed = faults.changed() => { if changed.is_err() { break } continue }
                accepted = l.accept() => accepted,
            },
            None => tokio::select! {
                _ = shared.shutdown.cancelled() => break,
                changed = faults.changed() => { if changed.is_err() { break } continue }
            },
        };
        let (stream, _peer) = match accepted {
            Ok(pair) => pair,
            Err(err) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(cluster = %shared.name, cause = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let cut = connections.clone();
        let shutdown = shared.shutdown.clone();
        let tls = tls.clone();
        tracker.spawn(async move {
            let Some(tls) = tls else {
                return serve(stream, service, cut, shutdown).await;
            };
            let handshake = tls.acceptor.accept(stream);
            tokio::select! {
                accepted = tokio::time::timeout(TLS_HANDSHAKE, handshake) => {
                    if let Ok(Ok(stream)) = accepted {
                        serve(stream, service, cut, shutdown).await;
                    }
                }
                _ = cut.cancelled() => {}
                _ = shutdown.cancelled() => {}
            }
        });
    }
    connections.cancel();
}

/// How long a client has for its TLS handshake.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// One connection, until it ends, the listener is closed by a fault
/// (`cut`) or the cluster shuts down.
async fn serve<S>(
    stream: S,
    service: TowerToHyperService<Router>,
    cut: CancellationToken,
    shutdown: CancellationToken,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = cut.cancelled() => {}
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
        }
    }
}
