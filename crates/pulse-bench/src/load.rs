//! The load side: subscribers that parse every frame for the publish
//! timestamp, and what they measured. Every change carries `bench:ts<nanos>x`
//! (in kube-pulse, as the image tag of the benchmark Deployment; for the
//! peers, in the published message), so latency is "change accepted" →
//! "frame parsed", on one clock.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use memchr::memmem;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

pub(crate) const MARKER: &[u8] = b"bench:ts";

/// The marker's searcher, built once: a subscriber scans every byte it reads.
static FINDER: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(MARKER));

/// Nanoseconds since the Unix epoch.
pub(crate) fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// What one subscriber has seen.
#[derive(Default)]
pub(crate) struct Seen {
    /// Latencies in microseconds of changes newer than the last one seen.
    pub(crate) latencies: Mutex<Vec<u32>>,
    pub(crate) last: AtomicU64,
    pub(crate) connected: AtomicBool,
    pub(crate) deliveries: AtomicU64,
}

impl Seen {
    /// Records every timestamp in `bytes` (with `carry`, the unparsed tail of
    /// the previous read).
    pub(crate) fn scan(&self, carry: &mut Vec<u8>, bytes: &[u8]) {
        carry.extend_from_slice(bytes);
        let mut at = 0;
        let mut keep_from = carry.len().saturating_sub(MARKER.len() + 24);
        while let Some(pos) = FINDER.find(&carry[at..]) {
            let start = at + pos + MARKER.len();
            let digits = carry[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if start + digits >= carry.len() {
                // The number may go on in the next read.
                keep_from = at + pos;
                break;
            }
            let ts: u64 = std::str::from_utf8(&carry[start..start + digits])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            if ts > self.last.load(Ordering::Relaxed) {
                self.last.store(ts, Ordering::Relaxed);
                let latency = now_nanos().saturating_sub(ts) / 1000;
                self.latencies
                    .lock()
                    .push(latency.min(u64::from(u32::MAX)) as u32);
                self.deliveries.fetch_add(1, Ordering::Relaxed);
            }
            at = start + digits;
            keep_from = keep_from.max(at);
        }
        carry.drain(..keep_from.min(carry.len()));
    }
}

/// How a subscriber connects.
#[derive(Clone, Debug)]
pub(crate) enum Via {
    /// `GET path` as Server-Sent Events.
    Sse { addr: SocketAddr, path: String },
    /// A WebSocket to `url`, sending `hello` (if any) once open.
    Ws { url: String, hello: Option<String> },
}

/// Runs one subscriber until `stop`; a `stalled` one connects, then never reads.
pub(crate) async fn subscribe(via: Via, seen: Arc<Seen>, stalled: bool, stop: CancellationToken) {
    // A refused connection (a 502 from a busy proxy) is retried, as a
    // browser would, a bounded number of times before it is connected.
    for attempt in 0..20u64 {
        let result: Result<(), String> = match &via {
            Via::Sse { addr, path } => sse(*addr, path, &seen, stalled, &stop)
                .await
                .map_err(|e| e.to_string()),
            Via::Ws { url, hello } => ws(url, hello.clone(), &seen, stalled, &stop)
                .await
                .map_err(|e| e.to_string()),
        };
        match result {
            Err(e) if !seen.connected.load(Ordering::Relaxed) && !stop.is_cancelled() => {
                tracing::debug!(cause = %e, attempt, "subscriber refused; retrying");
                tokio::time::sleep(Duration::from_millis(100 * (attempt + 1))).await;
            }
            Err(e) => {
                if !stop.is_cancelled() {
                    tracing::debug!(cause = %e, "subscriber ended");
                }
                return;
            }
            Ok(()) => return,
        }
    }
}

async fn sse(
    addr: SocketAddr,
    path: &str,
    seen: &Seen,
    stalled: bool,
    stop: &CancellationToken,
) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut carry = Vec::new();
    // The response head: the stream is live once it is in.
    let n = stream.read(&mut buf).await?;
    if n == 0 || !buf[..n].starts_with(b"HTTP/1.1 200") {
        return Err(std::io::Error::other(format!(
            "refused: {}",
            String::from_utf8_lossy(&buf[..n.min(120)])
        )));
    }
    seen.connected.store(true, Ordering::Relaxed);
    if stalled {
        // Hold the socket without reading until the scenario ends.
        stop.cancelled().await;
        return Ok(());
    }
    seen.scan(&mut carry, &buf[..n]);
    // One wait for the end, registered once: a read costs no timer.
    let stopped = stop.cancelled();
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            biased;
            read = stream.read(&mut buf) => match read {
                Ok(0) => return Err(std::io::Error::other("closed by the server")),
                Ok(n) => seen.scan(&mut carry, &buf[..n]),
                Err(e) => return Err(e),
            },
            () = &mut stopped => return Ok(()),
        }
    }
}

async fn ws(
    url: &str,
    hello: Option<String>,
    seen: &Seen,
    stalled: bool,
    stop: &CancellationToken,
) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(16 * 1024);
    let (mut socket, _) =
        tokio_tungstenite::connect_async_with_config(url, Some(config), false).await?;
    if let Some(hello) = hello {
        socket.send(Message::Text(hello.into())).await?;
    }
    seen.connected.store(true, Ordering::Relaxed);
    if stalled {
        stop.cancelled().await;
        return Ok(());
    }
    let mut carry = Vec::new();
    let stopped = stop.cancelled();
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            biased;
            message = socket.next() => match message {
                Some(Ok(Message::Text(text))) => seen.scan(&mut carry, text.as_bytes()),
                Some(Ok(Message::Binary(bytes))) => seen.scan(&mut carry, &bytes),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
            () = &mut stopped => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_found_across_reads() {
        let seen = Seen::default();
        let mut carry = Vec::new();
        let t1 = now_nanos() - 1_000_000;
        let t2 = t1 + 1;
        let text = format!("data: {{\"images\":[\"r/bench:ts{t1}x\"]}}\n\ndata: bench:ts{t2}x\n\n");
        for piece in text.as_bytes().chunks(7) {
            seen.scan(&mut carry, piece);
        }
        assert_eq!(seen.deliveries.load(Ordering::Relaxed), 2);
        // An old timestamp again (a snapshot after a patch) is not a delivery.
        seen.scan(&mut carry, format!("bench:ts{t1}x").as_bytes());
        assert_eq!(seen.deliveries.load(Ordering::Relaxed), 2);
        assert!(seen.latencies.lock()[0] >= 1000);
    }
}
