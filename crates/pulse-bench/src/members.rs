//! A fleet of Karpor members (docs/BENCHMARKS.md, scenario 20): a simulated
//! Karpor whose `Cluster` objects are the members of one `kube-pulse serve`,
//! as a Karpor installation with thousands of clusters runs it. `live` of
//! them reach simulated members (in this process); the rest point at a
//! loopback port nothing listens on, so they run their sources (probe and
//! watches, failing and retrying) without holding a socket — the machine's
//! descriptor limit, not the gateway, decides how many members can hold
//! live connections here.
//!
//! The gateway starts over an empty Karpor; then every Cluster object is
//! created in one burst. Measured over the window: `/livez` latency (every
//! 100 ms, from a thread of its own), RSS (every second), how many members are past `Initializing`
//! and how many live ones are `Healthy` (every 5 s), and the gateway's log
//! lines (at its default filter; `PULSE_BENCH_FLEET_LOG=FILE` keeps them). Bounded: counts from the plan; every wait
//! has a deadline.

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kube_pulse_sim::karpor::{self, MemberAccess};
use kube_pulse_sim::{KarporOptions, SimCluster, SimConfig};
use serde::Serialize;
use serde_json::Value;

use crate::proc;
use crate::registry::stop;
use crate::scenarios::Plan;
use crate::targets::{free_port, get, http_client, wait_for_port};

/// Simulated members the live Clusters share (each Cluster its own client).
const SIMS: usize = 4;

/// One run.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct MemberFleet {
    pub(crate) members: usize,
    pub(crate) live: usize,
    pub(crate) window_seconds: f64,
    /// RSS of the gateway over the empty Karpor, and at the end.
    pub(crate) rss_empty_mb: f64,
    pub(crate) rss_end_mb: f64,
    pub(crate) peak_rss_mb: f64,
    /// (RSS at the end − RSS empty) / members.
    pub(crate) kib_per_member: f64,
    /// Seconds after the burst until every member was past `Initializing`,
    /// and until every live member was `Healthy` (None: not within the window).
    pub(crate) all_started_seconds: Option<f64>,
    pub(crate) live_healthy_seconds: Option<f64>,
    /// Members past `Initializing` at each sample: (seconds, count).
    pub(crate) started: Vec<(f64, usize)>,
    pub(crate) livez_max_ms: f64,
    pub(crate) livez_p99_ms: f64,
    /// `/livez` answers slower than 50 ms, of all asked.
    pub(crate) livez_over_50ms: usize,
    pub(crate) livez_asked: usize,
    pub(crate) log_lines: u64,
    pub(crate) log_lines_per_second: f64,
    pub(crate) cpu_seconds: f64,
    pub(crate) error: Option<String>,
}

/// The scenario.
pub(crate) async fn member_fleet(bin: &Path, plan: &Plan) -> anyhow::Result<MemberFleet> {
    let (members, live, window) = (plan.fleet_members, plan.fleet_live, plan.fleet_window);
    let karpor = karpor::start(KarporOptions {
        default_registry: false,
        ..Default::default()
    })
    .await?;
    let mut sims = Vec::new();
    for i in 0..SIMS.min(live.max(1)) {
        sims.push(SimCluster::start(SimConfig::named(&format!("sim{i}"))).await?);
    }
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("karpor.kubeconfig");
    std::fs::write(&kubeconfig, karpor.kubeconfig("karpor"))?;
    let port = free_port();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:{port}\nkarpor:\n  kubeconfig: '{}'\n  allowEndpoints: ['127.0.0.0/8']\n",
            kubeconfig.display()
        ),
    )?;
    let mut child = Command::new(bin)
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child.id();
    let lines = Arc::new(AtomicU64::new(0));
    let stderr = child.stderr.take().expect("piped");
    let counted = lines.clone();
    std::thread::spawn(move || {
        let mut dump =
            std::env::var_os("PULSE_BENCH_FLEET_LOG").and_then(|p| std::fs::File::create(p).ok());
        for line in std::io::BufReader::new(stderr).lines() {
            if let (Some(f), Ok(l)) = (dump.as_mut(), &line) {
                use std::io::Write as _;
                let _ = writeln!(f, "{l}");
            }
            counted.fetch_add(1, Ordering::Relaxed);
        }
    });
    let mut run = MemberFleet {
        members,
        live,
        window_seconds: window.as_secs_f64(),
        ..MemberFleet::default()
    };
    let result = async {
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        wait_for_port(addr, "kube-pulse").await?;
        let http = http_client();
        tokio::time::sleep(Duration::from_secs(2)).await;
        run.rss_empty_mb = proc::rss(&proc::tree(&[pid])) as f64 / 1e6;
        let lines_before = lines.load(Ordering::Relaxed);

        // Every Cluster in one burst.
        let nowhere = format!("http://127.0.0.1:{}", free_port());
        for i in 0..members {
            let access = if i < live {
                MemberAccess::to_sim(&sims[i % sims.len()])
            } else {
                MemberAccess {
                    endpoint: nowhere.clone(),
                    ..MemberAccess::to_sim(&sims[0])
                }
            };
            karpor
                .apply(&karpor::cluster_manifest(&format!("c{i:05}"), &access))
                .map_err(|e| anyhow::anyhow!("creating a Cluster: {e:?}"))?;
        }
        let burst = Instant::now();
        // `/livez` from a thread of its own, with a blocking socket: this
        // process's runtime is busy serving the simulated members, and its
        // delays are not the gateway's.
        let probing = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let prober = {
            let probing = probing.clone();
            std::thread::spawn(move || livez_thread(addr, &probing))
        };
        let mut latencies = Vec::new();
        let mut next_count = burst;
        let mut next_rss = burst;
        let clusters = format!("http://{addr}/api/v1/clusters");
        while burst.elapsed() < window {
            let asked = Instant::now();
            if asked >= next_rss {
                next_rss += Duration::from_secs(1);
                let rss = proc::peak_rss(&proc::tree(&[pid])) as f64 / 1e6;
                run.peak_rss_mb = run.peak_rss_mb.max(rss);
            }
            if asked >= next_count {
                next_count += Duration::from_secs(5);
                let body = get(&http, &clusters).await.unwrap_or_default();
                let docs: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let items = docs["items"].as_array().cloned().unwrap_or_default();
                let started = items
                    .iter()
                    .filter(|d| d["phase"] != "Initializing" && d["phase"] != "Pending")
                    .count();
                let healthy = items
                    .iter()
                    .filter(|d| {
                        let name = d["name"].as_str().unwrap_or("");
                        let index: usize =
                            name.trim_start_matches('c').parse().unwrap_or(usize::MAX);
                        index < live && d["phase"] == "Healthy"
                    })
                    .count();
                let at = burst.elapsed().as_secs_f64();
                run.started.push((at, started));
                if started == members && run.all_started_seconds.is_none() {
                    run.all_started_seconds = Some(at);
                }
                if healthy == live && run.live_healthy_seconds.is_none() {
                    run.live_healthy_seconds = Some(at);
                }
            }
            tokio::time::sleep(Duration::from_millis(100).saturating_sub(asked.elapsed())).await;
        }
        probing.store(false, Ordering::Relaxed);
        latencies.extend(prober.join().unwrap_or_default());
        let pids = proc::tree(&[pid]);
        run.rss_end_mb = proc::rss(&pids) as f64 / 1e6;
        run.peak_rss_mb = run.peak_rss_mb.max(proc::peak_rss(&pids) as f64 / 1e6);
        run.kib_per_member =
            (run.rss_end_mb - run.rss_empty_mb) * 1e6 / 1024.0 / members.max(1) as f64;
        run.cpu_seconds = proc::cpu_seconds(&pids);
        run.livez_asked = latencies.len();
        run.livez_over_50ms = latencies.iter().filter(|&&ms| ms > 50.0).count();
        latencies.sort_by(f64::total_cmp);
        run.livez_max_ms = latencies.last().copied().unwrap_or_default();
        run.livez_p99_ms = latencies
            .get(latencies.len() * 99 / 100)
            .copied()
            .unwrap_or_default();
        run.log_lines = lines.load(Ordering::Relaxed) - lines_before;
        run.log_lines_per_second = run.log_lines as f64 / burst.elapsed().as_secs_f64();
        anyhow::Ok(())
    }
    .await;
    stop(child);
    if let Err(e) = result {
        run.error = Some(e.to_string());
    }
    Ok(run)
}

/// `GET /livez` every 100 ms over one kept-alive connection while
/// `probing`; each answer's time in ms (10 s for a failed one, after which
/// the connection is made again).
fn livez_thread(addr: SocketAddr, probing: &std::sync::atomic::AtomicBool) -> Vec<f64> {
    use std::io::{Read as _, Write as _};
    let mut out = Vec::new();
    let mut stream: Option<std::net::TcpStream> = None;
    while probing.load(Ordering::Relaxed) {
        let asked = Instant::now();
        let answered = (|| -> std::io::Result<()> {
            if stream.is_none() {
                let s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
                s.set_read_timeout(Some(Duration::from_secs(10)))?;
                s.set_nodelay(true)?;
                stream = Some(s);
            }
            let s = stream.as_mut().expect("connected");
            s.write_all(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")?;
            // Headers, then Content-Length bytes of body.
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            loop {
                let n = s.read(&mut buf)?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    if got.len() >= end + 4 + length {
                        return Ok(());
                    }
                }
            }
        })();
        match answered {
            Ok(()) => out.push(asked.elapsed().as_secs_f64() * 1e3),
            Err(_) => {
                out.push(10_000.0);
                stream = None;
            }
        }
        std::thread::sleep(Duration::from_millis(100).saturating_sub(asked.elapsed()));
    }
    out
}
