//! Push transports: Server-Sent Events and WebSocket over the hub
//! (`hub ──Change──▶ [transports] ──▶ browsers / curl`). Both speak the
//! protocol in `crate::protocol` (documented in `docs/PROTOCOL.md`): fresh
//! snapshots or a replay from a cursor, `synced`, then changes. They read
//! from the hub and never block it; a subscriber that falls behind gets the
//! latest snapshot of the topics it missed, and one that stops reading for
//! longer than the write timeout is closed. What they send, collapse, close
//! and refuse is counted straight into `crate::metrics`.

mod limits;
mod session;
mod shape;
pub mod sse;
mod state;
mod stopping;
mod wake_flag;
pub mod ws;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

pub use state::{Compression, TransportConfig, Transports};

/// The push routes: `/api/v1/events` (SSE, behind the authentication
/// middleware) and `/api/v1/ws` (WebSocket, which authenticates its
/// handshake or an `auth` operation itself).
pub fn router(transports: Arc<Transports>) -> Router {
    let auth = transports.auth.clone();
    Router::new()
        .route(
            sse::PATH,
            get(sse::events).layer(axum::middleware::from_fn_with_state(
                auth,
                crate::auth::require,
            )),
        )
        .route("/api/v1/ws", get(ws::upgrade))
        .with_state(transports)
}
