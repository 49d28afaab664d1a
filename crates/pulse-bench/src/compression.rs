//! Scenario 26: compressed streams (docs/PROTOCOL.md "Compression"). One
//! kube-pulse over one simulated member with `apps` apps; per transport
//! (SSE, WebSocket), with and without compression, `subscribers` clients
//! subscribe to `apps/**` (a snapshot of every app each), then `changes`
//! changes are published at `rate` (a patch each, to every subscriber).
//! Each client counts the bytes it reads off its socket (after the response
//! head: chunk and frame headers included) and inflates what is
//! compressed to find `synced` and every change's timestamp; the server's
//! CPU comes from /proc. All traffic on 127.0.0.1.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::load::{self, Seen};
use crate::proc;
use crate::scenarios::{Plan, percentile};
use crate::targets::Target;

/// One transport with or without compression.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CompressionRun {
    pub(crate) transport: &'static str,
    pub(crate) compressed: bool,
    /// Subscribers that received their snapshots and `synced`.
    pub(crate) synced: usize,
    /// Bytes read per subscriber until `synced` (the snapshots).
    pub(crate) snapshot_bytes_per_subscriber: f64,
    /// Server CPU per snapshot delivered (µs), connecting included.
    pub(crate) snapshot_cpu_us: f64,
    pub(crate) deliveries: u64,
    pub(crate) expected: u64,
    /// Bytes read per patch delivered (heartbeats and pings included).
    pub(crate) patch_bytes_per_delivery: f64,
    /// Server CPU per patch delivered (µs).
    pub(crate) patch_cpu_us: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Compression {
    pub(crate) apps: usize,
    pub(crate) subscribers: usize,
    pub(crate) changes: usize,
    pub(crate) rate: u32,
    pub(crate) runs: Vec<CompressionRun>,
}

/// What one client counted.
#[derive(Default)]
struct Meter {
    seen: Seen,
    bytes: AtomicU64,
    synced: AtomicBool,
}

const SYNCED: &[u8] = br#""type":"synced""#;

/// Finds `needle` across reads (keeping the tail of the last one).
fn found_across(tail: &mut Vec<u8>, bytes: &[u8], needle: &[u8]) -> bool {
    tail.extend_from_slice(bytes);
    let hit = tail.windows(needle.len()).any(|w| w == needle);
    let keep = tail.len().saturating_sub(needle.len());
    tail.drain(..keep);
    hit
}

/// A streaming inflater of raw deflate data: each call gives what its
/// input completes (the server sync-flushes every piece).
struct Inflater(flate2::write::DeflateDecoder<Vec<u8>>);

impl Inflater {
    fn new() -> Self {
        Self(flate2::write::DeflateDecoder::new(Vec::new()))
    }

    fn inflate(&mut self, input: &[u8]) -> std::io::Result<Vec<u8>> {
        use std::io::Write;
        self.0.write_all(input)?;
        self.0.flush()?;
        Ok(std::mem::take(self.0.get_mut()))
    }
}

/// What a client does with the decoded text it reads.
struct Sink<'a> {
    meter: &'a Meter,
    carry: Vec<u8>,
    tail: Vec<u8>,
}

impl<'a> Sink<'a> {
    fn new(meter: &'a Meter) -> Self {
        Self {
            meter,
            carry: Vec::new(),
            tail: Vec::new(),
        }
    }

    fn text(&mut self, bytes: &[u8]) {
        self.meter.seen.scan(&mut self.carry, bytes);
        if !self.meter.synced.load(Ordering::Relaxed) && found_across(&mut self.tail, bytes, SYNCED)
        {
            self.meter.synced.store(true, Ordering::Relaxed);
        }
    }
}

/// Connects, sends `request` and reads the response head, which must
/// start with `status`: the stream, the head (lower case), and the bytes
/// read past it (counted).
async fn open(
    addr: SocketAddr,
    request: &str,
    status: &str,
    meter: &Meter,
) -> std::io::Result<(TcpStream, String, Vec<u8>)> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("closed before the response head"));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            if !head.starts_with(status) {
                return Err(std::io::Error::other(head));
            }
            let rest = buf[end + 4..].to_vec();
            meter.bytes.fetch_add(rest.len() as u64, Ordering::Relaxed);
            return Ok((stream, head, rest));
        }
    }
}

/// Reads what the server sent next into `raw` (counted), waiting at most
/// 200 ms; false once the server closed.
async fn read_more(
    stream: &mut TcpStream,
    chunk: &mut [u8],
    raw: &mut Vec<u8>,
    meter: &Meter,
) -> std::io::Result<bool> {
    match tokio::time::timeout(Duration::from_millis(200), stream.read(chunk)).await {
        Ok(Ok(0)) => Ok(false),
        Ok(Ok(n)) => {
            meter.bytes.fetch_add(n as u64, Ordering::Relaxed);
            raw.extend_from_slice(&chunk[..n]);
            Ok(true)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(true),
    }
}

/// An SSE client: chunked body, gzip when `compressed`.
async fn sse(
    addr: SocketAddr,
    compressed: bool,
    meter: &Meter,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    let encoding = if compressed {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    let request = format!(
        "GET /api/v1/events?topic=apps/** HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{encoding}\r\n"
    );
    let (mut stream, head, mut raw) = open(addr, &request, "http/1.1 200", meter).await?;
    let gzip = head.contains("content-encoding: gzip");
    if gzip != compressed {
        return Err(std::io::Error::other(format!(
            "gzip {gzip}, asked {compressed}"
        )));
    }
    let mut sink = Sink::new(meter);
    let mut inflater = Inflater::new();
    let mut header_left = if gzip { 10 } else { 0 };
    let mut chunk = vec![0u8; 16 * 1024];
    while !stop.load(Ordering::Relaxed) {
        // Whole chunks of the chunked body: `SIZE\r\nDATA\r\n`.
        while let Some(line) = raw.windows(2).position(|w| w == b"\r\n") {
            let size =
                usize::from_str_radix(std::str::from_utf8(&raw[..line]).unwrap_or("").trim(), 16)
                    .map_err(|_| std::io::Error::other("bad chunk size"))?;
            if raw.len() < line + 2 + size + 2 {
                break;
            }
            let mut data = &raw[line + 2..line + 2 + size];
            if gzip {
                let skip = header_left.min(data.len());
                header_left -= skip;
                data = &data[skip..];
                let text = inflater.inflate(data)?;
                sink.text(&text);
            } else {
                sink.text(data);
            }
            raw.drain(..line + 2 + size + 2);
        }
        if !read_more(&mut stream, &mut chunk, &mut raw, meter).await? {
            return Ok(());
        }
    }
    Ok(())
}

/// A WebSocket client: offers `permessage-deflate` when `compressed`.
async fn ws(
    addr: SocketAddr,
    compressed: bool,
    meter: &Meter,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    let offer = if compressed {
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
    } else {
        ""
    };
    let request = format!(
        "GET /api/v1/ws HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{offer}\r\n"
    );
    let (mut stream, head, mut raw) = open(addr, &request, "http/1.1 101", meter).await?;
    if head.contains("permessage-deflate") != compressed {
        return Err(std::io::Error::other(format!("extension agreed: {head}")));
    }
    // One operation, sent plain (a compressing client may send it either way).
    let op = br#"{"op":"subscribe","id":"s","topics":["apps/**"]}"#;
    let mut frame = vec![0x81, 0x80 | op.len() as u8, 0, 0, 0, 0];
    frame.extend_from_slice(op);
    stream.write_all(&frame).await?;
    let mut sink = Sink::new(meter);
    let mut inflater = Inflater::new();
    let mut chunk = vec![0u8; 16 * 1024];
    while !stop.load(Ordering::Relaxed) {
        // Whole frames: FIN and opcode, length, payload (servers do not mask).
        while raw.len() >= 2 {
            let (b0, b1) = (raw[0], raw[1]);
            let (len, at) = match b1 & 0x7f {
                126 if raw.len() >= 4 => (u16::from_be_bytes([raw[2], raw[3]]) as usize, 4),
                127 if raw.len() >= 10 => (
                    u64::from_be_bytes(raw[2..10].try_into().unwrap_or_default()) as usize,
                    10,
                ),
                126 | 127 => break,
                n => (usize::from(n), 2),
            };
            if raw.len() < at + len {
                break;
            }
            let payload = &raw[at..at + len];
            match b0 & 0x0f {
                1 | 2 if b0 & 0x40 != 0 => {
                    let mut compressed = payload.to_vec();
                    compressed.extend_from_slice(&[0, 0, 0xff, 0xff]);
                    let text = inflater.inflate(&compressed)?;
                    sink.text(&text);
                }
                1 | 2 => sink.text(payload),
                9 => {
                    // A ping: the pong echoes it (masked, as a client must).
                    let mut pong = vec![0x8a, 0x80 | len as u8, 0, 0, 0, 0];
                    pong.extend_from_slice(payload);
                    stream.write_all(&pong).await?;
                }
                8 => return Ok(()),
                _ => {}
            }
            raw.drain(..at + len);
        }
        if !read_more(&mut stream, &mut chunk, &mut raw, meter).await? {
            return Ok(());
        }
    }
    Ok(())
}

async fn run_one(
    target: &Target,
    addr: SocketAddr,
    transport: &'static str,
    compressed: bool,
    plan: &Plan,
) -> anyhow::Result<CompressionRun> {
    let n = plan.compression_subscribers;
    let pids = target.pids();
    let stop = Arc::new(AtomicBool::new(false));
    let meters: Vec<Arc<Meter>> = (0..n).map(|_| Arc::new(Meter::default())).collect();
    let cpu0 = proc::cpu_seconds(&pids);
    let mut tasks = Vec::with_capacity(n);
    for meter in &meters {
        let (meter, stop) = (meter.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let result = if transport == "SSE" {
                sse(addr, compressed, &meter, &stop).await
            } else {
                ws(addr, compressed, &meter, &stop).await
            };
            if let Err(e) = result
                && !stop.load(Ordering::Relaxed)
            {
                tracing::warn!(cause = %e, "compression subscriber ended");
            }
        }));
        // Paced like a crowd arriving, so the listener's backlog never fills.
        tokio::task::yield_now().await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while meters.iter().any(|m| !m.synced.load(Ordering::Relaxed)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let synced = meters
        .iter()
        .filter(|m| m.synced.load(Ordering::Relaxed))
        .count();
    let snapshot_cpu = proc::cpu_seconds(&pids) - cpu0;
    let snapshot_bytes: u64 = meters.iter().map(|m| m.bytes.load(Ordering::Relaxed)).sum();

    // Patches: `changes` at `rate`, one app each, to every subscriber. The
    // snapshots' timestamps (earlier runs' changes) are not deliveries.
    for m in &meters {
        m.seen.latencies.lock().clear();
    }
    let before: u64 = meters
        .iter()
        .map(|m| m.seen.deliveries.load(Ordering::Relaxed))
        .sum();
    let (bytes0, cpu1) = (snapshot_bytes_now(&meters), proc::cpu_seconds(&pids));
    let interval = Duration::from_secs_f64(1.0 / f64::from(plan.compression_rate.max(1)));
    let mut ticker = tokio::time::interval(interval);
    for i in 0..plan.compression_changes {
        ticker.tick().await;
        target.publish(load::now_nanos(), i).await?;
    }
    let expected = (plan.compression_changes * synced) as u64;
    let settle = Instant::now() + Duration::from_secs(10);
    let delivered = || -> u64 {
        meters
            .iter()
            .map(|m| m.seen.deliveries.load(Ordering::Relaxed))
            .sum::<u64>()
            - before
    };
    while delivered() < expected && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deliveries = delivered();
    let patch_cpu = proc::cpu_seconds(&pids) - cpu1;
    let patch_bytes = snapshot_bytes_now(&meters) - bytes0;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    let mut latencies: Vec<u32> = Vec::new();
    for m in &meters {
        latencies.extend(m.seen.latencies.lock().drain(..));
    }
    latencies.sort_unstable();
    let per = |total: f64, count: u64| {
        if count == 0 {
            0.0
        } else {
            total / count as f64
        }
    };
    Ok(CompressionRun {
        transport,
        compressed,
        synced,
        snapshot_bytes_per_subscriber: per(snapshot_bytes as f64, synced as u64),
        snapshot_cpu_us: per(snapshot_cpu * 1e6, (synced * plan.compression_apps) as u64),
        deliveries,
        expected,
        patch_bytes_per_delivery: per(patch_bytes as f64, deliveries),
        patch_cpu_us: per(patch_cpu * 1e6, deliveries),
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
    })
}

fn snapshot_bytes_now(meters: &[Arc<Meter>]) -> u64 {
    meters.iter().map(|m| m.bytes.load(Ordering::Relaxed)).sum()
}

/// The scenario: SSE and WebSocket, each plain then compressed, on one gateway.
pub(crate) async fn compression(bin: &std::path::Path, plan: &Plan) -> anyhow::Result<Compression> {
    let target = Target::kube_pulse(bin, plan.compression_apps).await?;
    let crate::load::Via::Sse { addr, .. } = target.sse(0, false) else {
        anyhow::bail!("kube-pulse serves SSE");
    };
    let mut runs = Vec::new();
    for transport in ["SSE", "WebSocket"] {
        for compressed in [false, true] {
            eprintln!("  {transport}, compressed: {compressed}");
            runs.push(run_one(&target, addr, transport, compressed, plan).await?);
            tokio::time::sleep(plan.settle).await;
        }
    }
    target.stop();
    Ok(Compression {
        apps: plan.compression_apps,
        subscribers: plan.compression_subscribers,
        changes: plan.compression_changes,
        rate: plan.compression_rate,
        runs,
    })
}

impl Compression {
    pub(crate) fn markdown(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "\n### 26. Compressed streams\n\n{} subscribers to `apps/**` over {} apps, then {} changes at {}/s.\n",
            self.subscribers, self.apps, self.changes, self.rate
        );
        out.push_str("| transport | compressed | synced | snapshot bytes per subscriber | server CPU per snapshot (µs) | patches delivered / expected | bytes per patch | server CPU per patch (µs) | p50 / p99 (ms) |\n|---|---|---|---|---|---|---|---|---|\n");
        for r in &self.runs {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.0} | {:.1} | {} / {} | {:.0} | {:.2} | {:.1} / {:.1} |",
                r.transport,
                if r.compressed { "yes" } else { "no" },
                r.synced,
                r.snapshot_bytes_per_subscriber,
                r.snapshot_cpu_us,
                r.deliveries,
                r.expected,
                r.patch_bytes_per_delivery,
                r.patch_cpu_us,
                r.p50_ms,
                r.p99_ms
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_needle_is_found_across_reads() {
        let mut tail = Vec::new();
        assert!(!found_across(&mut tail, br#"{"type":"sn"#, SYNCED));
        assert!(!found_across(&mut tail, br#"apshot"}{"type":"syn"#, SYNCED));
        assert!(found_across(&mut tail, br#"ced","cursor":"x"}"#, SYNCED));
    }
}
