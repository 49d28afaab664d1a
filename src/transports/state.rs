//! The transports' shared state (`hub ──▶ [Transports] ──▶ sse / ws
//! sessions`): what every session reads (hub, authenticator, limits,
//! metrics, configuration, shutdown) and the admission of a new session
//! against the gateway-wide and per-client connection limits.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::limits;
use crate::hub::Hub;

/// Limits and timings of the transports.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// Interval of subscriptions' heartbeats (with `asOf`) and WebSocket pings.
    pub heartbeat: Duration,
    /// A session whose writes are blocked this long is closed (slow consumer).
    pub write_timeout: Duration,
    /// A WebSocket that sends nothing (not even pongs) this long is closed.
    pub ws_idle_timeout: Duration,
    /// Reconnect delay suggested to SSE clients (`retry:`).
    pub sse_retry: Duration,
    /// Open SSE + WebSocket sessions at most.
    pub max_connections: usize,
    /// Subscriptions one WebSocket may hold at once (default 100).
    pub max_subscriptions_per_socket: usize,
    /// Topic patterns per SSE request or per WebSocket subscribe.
    pub max_topics_per_request: usize,
    /// Largest WebSocket message a client may send, in bytes (default 64 KiB).
    pub max_ws_message_bytes: usize,
    /// Subscribe operations per second per WebSocket (burst of the same size).
    pub max_subscribes_per_second: u32,
    /// Extra origins allowed to open WebSockets and change state, and given
    /// CORS headers (`*` for any); same-origin and loopback origins are
    /// always allowed (`crate::http::guard::origin_allowed`).
    pub allowed_origins: Vec<String>,
    /// Host names the gateway answers for besides IP literals and
    /// `localhost` (`crate::http::guard`; `*.example.com`, `*` for any).
    pub allowed_hosts: Vec<String>,
    /// Open sessions per client IP address.
    pub max_connections_per_ip: usize,
    /// Open sessions per authenticated subject (with authentication on).
    pub max_connections_per_token: usize,
    /// Subscribe operations (WebSocket subscribes and SSE requests) per
    /// second per client IP and per subject, across all its sessions.
    pub max_subscribes_per_client_second: u32,
    /// Which streams are compressed for the clients that ask.
    pub compression: Compression,
}

/// Compressed streams (docs/PROTOCOL.md, "Compression"): each message is
/// compressed once and the same bytes go to every subscriber that asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compression {
    /// `permessage-deflate` for WebSockets that offer it.
    pub websocket: bool,
    /// gzip for SSE requests whose `Accept-Encoding` takes it.
    pub sse: bool,
    /// zlib's level, 1 (fastest) to 9 (smallest).
    pub level: u32,
}

impl Default for Compression {
    fn default() -> Self {
        Self {
            websocket: true,
            sse: true,
            level: 6,
        }
    }
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(15),
            write_timeout: Duration::from_secs(60),
            ws_idle_timeout: Duration::from_secs(60),
            sse_retry: Duration::from_secs(2),
            max_connections: 10_000,
            max_subscriptions_per_socket: 100,
            max_topics_per_request: 50,
            max_ws_message_bytes: 64 * 1024,
            max_subscribes_per_second: 20,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_connections_per_ip: 1000,
            max_connections_per_token: 200,
            max_subscribes_per_client_second: 100,
            compression: Compression::default(),
        }
    }
}

/// Everything a transport session needs.
pub struct Transports {
    /// Where sessions subscribe to topics.
    pub(crate) hub: Arc<Hub>,
    /// Authenticates handshakes and re-checks a session's credential.
    pub(crate) auth: Arc<crate::auth::Auth>,
    /// The per-client connection counts and subscribe rates.
    pub(super) limits: Arc<limits::Limits>,
    /// Where sessions count what they send, drop and refuse.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The limits and timings every session follows.
    pub config: TransportConfig,
    connections: Arc<Semaphore>,
    /// Every session ends itself at shutdown.
    pub(crate) shutdown: Arc<super::stopping::Signal>,
    /// Snapshot documents compressed lately, shared by the WebSockets
    /// that load them ([`crate::protocol::deflate::Recent`]).
    pub(crate) recent_snapshots: crate::protocol::deflate::Recent,
}

/// Bytes of recently compressed snapshot documents kept for other sockets.
const RECENT_SNAPSHOT_BYTES: usize = 8 * 1024 * 1024;

impl std::fmt::Debug for Transports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transports")
            .field("config", &self.config)
            .field("free_connections", &self.connections.available_permits())
            .field("shutdown", &self.shutdown.is_stopping())
            .finish_non_exhaustive()
    }
}

impl Transports {
    /// The shared state of both transports over `hub`, admitting sessions
    /// through `auth` within `config`'s limits; sessions end when
    /// `shutdown` is cancelled.
    pub(crate) fn new(
        hub: Arc<Hub>,
        auth: Arc<crate::auth::Auth>,
        config: TransportConfig,
        metrics: Arc<crate::metrics::Metrics>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            hub,
            auth,
            limits: limits::Limits::new(
                config.max_connections_per_ip,
                config.max_connections_per_token,
                config.max_subscribes_per_client_second,
            ),
            metrics,
            connections: Arc::new(Semaphore::new(config.max_connections)),
            config,
            shutdown: super::stopping::Signal::new(shutdown),
            recent_snapshots: crate::protocol::deflate::Recent::new(RECENT_SNAPSHOT_BYTES),
        })
    }

    /// A connection slot for `client` (gateway-wide and per-client limits,
    /// and its subscribe rate), or the 429 answer.
    pub(super) fn admit(&self, client: &limits::Client) -> Result<Admitted, Box<Response>> {
        let refuse = |message: String| {
            self.metrics.rejected_connections.inc();
            let mut response = crate::protocol::error_response(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_connections",
                &message,
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            Box::new(response)
        };
        let Ok(permit) = self.connections.clone().try_acquire_owned() else {
            return Err(refuse(
                "the gateway is at its connection limit; retry later".into(),
            ));
        };
        let slot = self.limits.admit(client).map_err(refuse)?;
        Ok(Admitted {
            _permit: permit,
            _slot: slot,
        })
    }
}

/// A session's places in the connection limits; released on drop.
pub(super) struct Admitted {
    _permit: tokio::sync::OwnedSemaphorePermit,
    _slot: limits::Slot,
}

/// Who a request comes from, for the per-client limits.
pub(super) fn client_of(
    extensions: &axum::http::Extensions,
    principal: Option<&crate::auth::Principal>,
    auth: &crate::auth::Auth,
) -> limits::Client {
    limits::Client {
        ip: extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip()),
        subject: principal
            .filter(|_| auth.required())
            .map(|p| p.subject.clone()),
    }
}
