//! The plain-TCP HTTP server under the router: HTTP/1.1 through hyper, with
//! WebSocket upgrades, each connection's peer address for the per-IP limits,
//! and graceful shutdown. (The TLS listener, [`crate::gateway::serve_tls`],
//! speaks HTTP/2 and HTTP/1.1 by ALPN.)
//!
//! Written out rather than `axum::serve` for the memory of a long-lived
//! stream, which is what most connections here are: `axum::serve` detects a
//! cleartext HTTP/2 preface by reading the first 24 bytes on their own,
//! after which hyper grows its read buffer from 8 to 16 KiB to parse the
//! rest of the request, and every SSE or WebSocket connection keeps that
//! buffer. Serving HTTP/1.1 only, it stays 8 KiB (docs/BENCHMARKS.md,
//! scenario 3). hyper still reads while a response streams, so a client
//! that hangs up ends its stream at once.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::error::Result;

/// Serves `app` until `shutdown` is cancelled, then lets open connections
/// finish their requests (streams end on the same signal).
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) -> Result<()> {
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
    connections.wait().await;
    Ok(())
}
