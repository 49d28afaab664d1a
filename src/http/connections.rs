//! The accepted TCP connections (`listener ──▶ [connections] ──▶ hyper ──▶
//! router`), counted before any byte is parsed: per peer IP (trusted
//! proxies exempt) and gateway-wide, under a ceiling derived from the
//! process's descriptor limit, so neither one address nor many can take the
//! descriptors `/livez` and the member watches need. At a limit, the
//! connection that has been idle longest (no request in flight: waiting for
//! its first request, between keep-alive requests or in a TLS handshake) is
//! closed to make room; only when none is idle is the new one refused.
//! Streams (SSE responses, upgraded WebSockets) are never idle here: they
//! have their own heartbeats and write timeouts.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use dashmap::DashMap;
use tokio::sync::Notify;

use crate::http::client_ip::TrustedProxies;
use crate::metrics::Metrics;

/// Timeouts and limits of accepted connections (docs/SECURITY.md,
/// "Connections").
#[derive(Debug, Clone)]
pub struct ConnectionSettings {
    /// Time for a request's headers to arrive (HTTP/1.1: every request,
    /// also while a keep-alive connection waits for its next one; any
    /// protocol: the first request after the connection or TLS handshake).
    pub header_read_timeout: Duration,
    /// Time for a TLS handshake to complete.
    pub tls_handshake_timeout: Duration,
    /// A connection with no request in flight is closed after this long.
    pub idle_timeout: Duration,
    /// Open connections per peer IP address (trusted proxies are exempt).
    pub max_per_ip: usize,
    /// Open connections of the whole gateway; None derives it from the
    /// descriptor limit ([`ceiling`]).
    pub max_total: Option<usize>,
    /// Peers whose forwarding header names the real client.
    pub trusted_proxies: TrustedProxies,
}

/// Connections a client may hold besides its push sessions (REST calls,
/// keep-alive, a page's static files): the default per-IP connection cap is
/// the per-IP session limit plus this.
pub const SPARE_PER_IP: usize = 100;

impl Default for ConnectionSettings {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_per_ip: crate::transports::TransportConfig::default().max_connections_per_ip
                + SPARE_PER_IP,
            max_total: None,
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

/// Descriptors kept free of connections: stdio, the runtime's epoll and
/// wakers, listeners, TLS and token files, DNS lookups, headroom while a
/// shed connection closes.
pub const RESERVED_FDS: usize = 64;
/// Descriptors kept free per member cluster: its probe and watches (and, in
/// the demo, the simulator's end of each).
pub const RESERVED_FDS_PER_MEMBER: usize = 16;

/// The gateway-wide connection ceiling for `members` member clusters: the
/// soft `RLIMIT_NOFILE` minus [`RESERVED_FDS`] and
/// [`RESERVED_FDS_PER_MEMBER`] each (at least 16); None where the limit
/// cannot be read (then only the per-IP cap applies).
pub fn ceiling(members: usize) -> Option<usize> {
    let limit = open_files_limit()?;
    let reserved = RESERVED_FDS + RESERVED_FDS_PER_MEMBER * members;
    Some(limit.saturating_sub(reserved).max(16))
}

/// The soft limit on open files, from `/proc/self/limits` (Linux).
fn open_files_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    soft.parse().ok()
}

/// Why a connection was closed or refused (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// Over its IP's cap with nothing idle to shed.
    PerIp,
    /// At the gateway-wide ceiling with nothing idle to shed.
    Ceiling,
    /// Closed to make room for a new connection.
    Shed,
    /// No request (head) within the header-read timeout.
    HeaderTimeout,
    /// No request in flight for the idle timeout.
    IdleTimeout,
    /// The TLS handshake did not complete in time.
    HandshakeTimeout,
}

impl Reason {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::PerIp => "per_ip",
            Self::Ceiling => "ceiling",
            Self::Shed => "shed",
            Self::HeaderTimeout => "header_timeout",
            Self::IdleTimeout => "idle_timeout",
            Self::HandshakeTimeout => "handshake_timeout",
        }
    }
}

/// Every open connection of one server.
pub(crate) struct Connections {
    pub(crate) settings: ConnectionSettings,
    ceiling: usize,
    next_id: AtomicU64,
    open: DashMap<u64, Arc<Conn>>,
    per_ip: DashMap<IpAddr, usize>,
    metrics: Arc<Metrics>,
    epoch: Instant,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("open", &self.open.len())
            .field("ceiling", &self.ceiling)
            .finish_non_exhaustive()
    }
}

/// One open connection's state, shared by its task and its requests.
#[derive(Debug)]
pub(crate) struct Conn {
    ip: IpAddr,
    in_flight: AtomicUsize,
    /// A WebSocket took it over: never idle.
    upgraded: AtomicBool,
    /// It has had a request (so the idle timeout applies, not the header one).
    served: AtomicBool,
    /// Chosen to be closed to make room; its task closes it.
    shed: AtomicBool,
    /// Milliseconds after the registry's epoch when it last became idle.
    idle_since: AtomicU64,
    wake: Notify,
}

/// A connection's place in the counts; released when the socket is dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    registry: Arc<Connections>,
    id: u64,
    pub(crate) conn: Arc<Conn>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.open.remove(&self.id);
        let ip = self.conn.ip;
        let empty = match self.registry.per_ip.get_mut(&ip) {
            Some(mut n) => {
                *n = n.saturating_sub(1);
                *n == 0
            }
            None => false,
        };
        if empty {
            self.registry.per_ip.remove_if(&ip, |_, n| *n == 0);
        }
        self.registry.metrics.connections.open.dec();
    }
}

impl Connections {
    /// The registry of one server; `members` sizes the derived ceiling.
    pub(crate) fn new(
        settings: ConnectionSettings,
        members: usize,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let ceiling = settings
            .max_total
            .or_else(|| ceiling(members))
            .unwrap_or(usize::MAX)
            .max(1);
        tracing::info!(
            ceiling,
            per_ip = settings.max_per_ip,
            header_read_timeout = ?settings.header_read_timeout,
            idle_timeout = ?settings.idle_timeout,
            "connection limits"
        );
        Arc::new(Self {
            settings,
            ceiling,
            next_id: AtomicU64::new(0),
            open: DashMap::new(),
            per_ip: DashMap::new(),
            metrics,
            epoch: Instant::now(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Counts a connection just accepted from `ip`, shedding the longest
    /// idle one (of that IP at its cap, of any at the ceiling) when needed;
    /// refuses it when nothing is idle.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Reason> {
        let exempt = self.settings.trusted_proxies.contains(ip);
        if !exempt {
            let held = self.per_ip.get(&ip).map_or(0, |n| *n);
            if held >= self.settings.max_per_ip.max(1) && !self.shed_longest_idle(Some(ip)) {
                return Err(self.refuse(Reason::PerIp));
            }
        }
        if self.open.len() >= self.ceiling && !self.shed_longest_idle(None) {
            return Err(self.refuse(Reason::Ceiling));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            ip,
            in_flight: AtomicUsize::new(0),
            upgraded: AtomicBool::new(false),
            served: AtomicBool::new(false),
            shed: AtomicBool::new(false),
            idle_since: AtomicU64::new(self.now_ms()),
            wake: Notify::new(),
        });
        self.open.insert(id, conn.clone());
        *self.per_ip.entry(ip).or_insert(0) += 1;
        self.metrics.connections.open.inc();
        Ok(Slot {
            registry: self.clone(),
            id,
            conn,
        })
    }

    fn refuse(&self, reason: Reason) -> Reason {
        self.metrics.connections.refused(reason.label());
        reason
    }

    /// Marks the connection (of `ip`, or any) idle longest to be closed;
    /// false when none is idle. A scan: it runs only at a limit.
    pub(crate) fn shed_longest_idle(&self, ip: Option<IpAddr>) -> bool {
        let mut oldest: Option<(u64, Arc<Conn>)> = None;
        for entry in self.open.iter() {
            let conn = entry.value();
            if ip.is_some_and(|ip| ip != conn.ip)
                || !conn.is_idle()
                || conn.shed.load(Ordering::Relaxed)
            {
                continue;
            }
            let since = conn.idle_since.load(Ordering::Relaxed);
            if oldest.as_ref().is_none_or(|(s, _)| since < *s) {
                oldest = Some((since, conn.clone()));
            }
        }
        let Some((_, conn)) = oldest else {
            return false;
        };
        conn.shed.store(true, Ordering::Relaxed);
        conn.wake.notify_one();
        true
    }

    /// A request starting on `slot`'s connection; it counts as in flight
    /// until the guard (moved into its response body) is dropped.
    pub(crate) fn begin_request(self: &Arc<Self>, conn: &Arc<Conn>) -> RequestGuard {
        conn.served.store(true, Ordering::Relaxed);
        conn.in_flight.fetch_add(1, Ordering::Relaxed);
        // The watcher may be waiting out the header timeout: now it is busy.
        conn.wake.notify_one();
        RequestGuard {
            registry: self.clone(),
            conn: conn.clone(),
        }
    }

    /// Restarts the first-request clock (after a TLS handshake).
    pub(crate) fn ready(&self, conn: &Conn) {
        conn.idle_since.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Resolves when the connection must be closed: shed, or idle past the
    /// header-read timeout (no request yet) or the idle timeout. Shedding
    /// and each request's start and end wake it to look again.
    pub(crate) async fn expired(&self, conn: &Conn) -> Reason {
        loop {
            let wake = conn.wake.notified();
            if conn.shed.load(Ordering::Relaxed) {
                return Reason::Shed;
            }
            let (limit, reason) = if conn.served.load(Ordering::Relaxed) {
                (self.settings.idle_timeout, Reason::IdleTimeout)
            } else {
                (self.settings.header_read_timeout, Reason::HeaderTimeout)
            };
            let wait = if conn.is_idle() {
                let idle = Duration::from_millis(
                    self.now_ms()
                        .saturating_sub(conn.idle_since.load(Ordering::Relaxed)),
                );
                if idle >= limit {
                    return reason;
                }
                limit - idle
            } else {
                // Busy: woken when a request ends (looked at again after
                // `limit` anyway).
                limit
            };
            tokio::select! {
                _ = wake => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Counts a connection closed for `reason`.
    pub(crate) fn closed(&self, reason: Reason) {
        self.metrics.connections.closed(reason.label());
    }

    /// Counts a failed accept; true when it was for lack of descriptors.
    pub(crate) fn accept_failed(&self, error: &std::io::Error) -> bool {
        // EMFILE (per process) and ENFILE (system-wide) on Linux and macOS.
        let exhausted = matches!(error.raw_os_error(), Some(24 | 23));
        self.metrics
            .connections
            .accept_error(if exhausted { "fd_exhausted" } else { "other" });
        exhausted
    }
}

impl Conn {
    fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0 && !self.upgraded.load(Ordering::Relaxed)
    }
}

/// A request in flight on a connection.
#[derive(Debug)]
pub(crate) struct RequestGuard {
    registry: Arc<Connections>,
    conn: Arc<Conn>,
}

impl RequestGuard {
    /// Marks the connection as taken over by a WebSocket (a 101 answer).
    pub(crate) fn upgraded(&self) {
        self.conn.upgraded.store(true, Ordering::Relaxed);
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.conn
            .idle_since
            .store(self.registry.now_ms(), Ordering::Relaxed);
        self.conn.in_flight.fetch_sub(1, Ordering::Relaxed);
        // Idle from now: the watcher starts the idle timeout.
        self.conn.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(per_ip: usize, total: usize) -> Arc<Connections> {
        let settings = ConnectionSettings {
            max_per_ip: per_ip,
            max_total: Some(total),
            trusted_proxies: TrustedProxies {
                cidrs: vec!["10.0.0.0/8".parse().unwrap()],
                ..Default::default()
            },
            ..Default::default()
        };
        Connections::new(settings, 0, Metrics::new())
    }

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, n])
    }

    #[test]
    fn limits_shed_the_longest_idle_connection_first() {
        let r = registry(2, 3);
        let a = r.admit(ip(1)).unwrap();
        let b = r.admit(ip(1)).unwrap();
        let _busy = r.begin_request(&a.conn);
        // At the per-IP cap: `b` is idle, so it makes room.
        let c = r.admit(ip(1)).unwrap();
        assert!(b.conn.shed.load(Ordering::Relaxed));
        assert!(!a.conn.shed.load(Ordering::Relaxed));
        drop(b);
        // Everything of that IP busy or already shed: refused.
        let _busy_c = r.begin_request(&c.conn);
        assert_eq!(r.admit(ip(1)).unwrap_err(), Reason::PerIp);
        // Other IPs are counted apart, up to the ceiling.
        let d = r.admit(ip(2)).unwrap();
        let _busy_d = r.begin_request(&d.conn);
        assert_eq!(r.admit(ip(3)).unwrap_err(), Reason::Ceiling);
        // A trusted proxy is exempt from the per-IP cap, not the ceiling.
        drop(d);
        let proxy = IpAddr::from([10, 0, 0, 1]);
        let p = r.admit(proxy).unwrap();
        let _busy_p = r.begin_request(&p.conn);
        assert_eq!(r.admit(proxy).unwrap_err(), Reason::Ceiling);
        drop((a, c, p));
        assert!(r.open.is_empty() && r.per_ip.is_empty());
    }

    #[test]
    fn an_upgraded_connection_is_never_idle() {
        let r = registry(1, 10);
        let a = r.admit(ip(1)).unwrap();
        r.begin_request(&a.conn).upgraded();
        assert_eq!(r.admit(ip(1)).unwrap_err(), Reason::PerIp);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_expire_and_busy_ones_do_not() {
        let settings = ConnectionSettings {
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            ..Default::default()
        };
        let r = Connections::new(settings, 0, Metrics::new());
        let started = Instant::now();
        let fresh = r.admit(ip(1)).unwrap();
        assert_eq!(r.expired(&fresh.conn).await, Reason::HeaderTimeout);
        assert!(started.elapsed() >= Duration::from_secs(5));
        // A request in flight (a stream) never expires.
        let guard = r.begin_request(&fresh.conn);
        let busy = tokio::time::timeout(Duration::from_secs(600), r.expired(&fresh.conn)).await;
        assert!(busy.is_err());
        // Once it ends, the idle timeout runs.
        drop(guard);
        let idle = Instant::now();
        assert_eq!(r.expired(&fresh.conn).await, Reason::IdleTimeout);
        assert!(idle.elapsed() >= Duration::from_secs(60));
        // Shedding wakes it at once.
        let other = r.admit(ip(2)).unwrap();
        let _busy = r.begin_request(&other.conn);
        drop(_busy);
        let at = Instant::now();
        assert!(r.shed_longest_idle(Some(ip(2))));
        assert_eq!(r.expired(&other.conn).await, Reason::Shed);
        assert_eq!(at.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_comes_while_the_header_clock_runs_switches_to_the_idle_timeout() {
        let settings = ConnectionSettings {
            header_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(2),
            ..Default::default()
        };
        let r = Connections::new(settings, 0, Metrics::new());
        let slot = r.admit(ip(1)).unwrap();
        let watcher = {
            let (r, conn) = (r.clone(), slot.conn.clone());
            tokio::spawn(async move { r.expired(&conn).await })
        };
        // The watcher now waits out the 60 s header timeout; a request
        // arrives and ends.
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(r.begin_request(&slot.conn));
        let ended = Instant::now();
        assert_eq!(watcher.await.unwrap(), Reason::IdleTimeout);
        assert_eq!(ended.elapsed(), Duration::from_secs(2));
    }
}
