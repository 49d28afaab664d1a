//! The benchmark scenarios (docs/BENCHMARKS.md). Every loop is bounded in
//! count and time; all traffic is on 127.0.0.1.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::load::{self, Seen, Via};
use crate::proc;
use crate::targets::{Kind, Target};

/// Sizes of a run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Plan {
    pub(crate) fanout_sizes: Vec<usize>,
    pub(crate) rates: Vec<u32>,
    pub(crate) step: Duration,
    pub(crate) ws_size: usize,
    pub(crate) idle_size: usize,
    pub(crate) slow_size: usize,
    pub(crate) slow_rate: u32,
    pub(crate) narrow_size: usize,
    pub(crate) narrow_rates: Vec<u32>,
    pub(crate) diff_duration: Duration,
    pub(crate) sync_clusters: usize,
    pub(crate) sync_objects: usize,
    /// The pod watch fleet: members, Deployments per member and their replicas.
    pub(crate) pod_members: usize,
    pub(crate) pod_deployments: usize,
    pub(crate) pod_replicas: u32,
    /// The simulators' controller step (each rebuilds every pod of its member).
    pub(crate) pod_tick: Duration,
    /// The measured steady window, and how often a Deployment per member is scaled in it.
    pub(crate) pod_steady: Duration,
    pub(crate) pod_churn_every: Duration,
    /// The pods-held curve: member counts, pod totals (spread evenly over
    /// the members' Deployments), the replicas of a Deployment at the top
    /// size (which sets the Deployments of a member), controller step.
    pub(crate) podcurve_members: Vec<usize>,
    pub(crate) podcurve_sizes: Vec<usize>,
    pub(crate) podcurve_replicas: usize,
    pub(crate) podcurve_tick: Duration,
    /// The least and the most a settled reading of the curve waits after
    /// the synced one (it ends between them once the RSS stops falling).
    pub(crate) podcurve_quiet: (Duration, Duration),
    /// ConfigMaps in a sync registry, one gateway run per size, and their data bytes.
    pub(crate) registry_sizes: Vec<usize>,
    pub(crate) registry_object_bytes: usize,
    pub(crate) p99_limit_ms: f64,
    /// The pause after the warm-up change, before the first measured step.
    pub(crate) warm_up: Duration,
    /// Quiet time before a curve's RSS is read.
    pub(crate) settle: Duration,
    /// Idle connections at which the connection curve reads RSS (one growing crowd).
    pub(crate) connection_sizes: Vec<usize>,
    /// Subscribers of the CPU-per-delivery curve, its fixed rate and step.
    pub(crate) cpu_sizes: Vec<usize>,
    pub(crate) cpu_rate: u32,
    pub(crate) cpu_step: Duration,
    /// Latency at fixed subscriber counts: their rates, step and rounds.
    pub(crate) latency_sizes: Vec<usize>,
    pub(crate) latency_rates: Vec<u32>,
    pub(crate) latency_step: Duration,
    pub(crate) latency_rounds: usize,
    /// The watched-objects curve: member counts, total object counts (each
    /// spread evenly over the members), and each object's data bytes.
    pub(crate) objects_members: Vec<usize>,
    pub(crate) objects_sizes: Vec<usize>,
    pub(crate) objects_bytes: usize,
    /// Replica counts over NATS (beside one process without a broker),
    /// their fan-out subscribers, latency rates and rounds.
    pub(crate) replica_counts: Vec<usize>,
    pub(crate) replica_subscribers: usize,
    pub(crate) replica_latency_rates: Vec<u32>,
    pub(crate) replica_rounds: usize,
    /// The Karpor member fleet: Cluster objects, how many reach a
    /// simulated member, and the measured window after their burst.
    pub(crate) fleet_members: usize,
    pub(crate) fleet_live: usize,
    pub(crate) fleet_window: Duration,
    /// Push members: Deployments × replicas of each member (the pushed one
    /// and the pulled one), the agent's heartbeat, the idle window, the
    /// changes per member and how often (the controller steps at `pod_tick`).
    pub(crate) agent_deployments: usize,
    pub(crate) agent_replicas: u32,
    pub(crate) agent_heartbeat: Duration,
    pub(crate) agent_window: Duration,
    pub(crate) agent_changes: usize,
    pub(crate) agent_change_every: Duration,
    /// Live queries: app documents in the hub, queries (the window is
    /// measured with a tenth of them too), changes a second, the window.
    pub(crate) query_docs: usize,
    pub(crate) query_count: usize,
    pub(crate) query_rate: u32,
    pub(crate) query_window: Duration,
    /// Compressed streams: apps (a snapshot each), subscribers per run,
    /// changes and their rate.
    pub(crate) compression_apps: usize,
    pub(crate) compression_subscribers: usize,
    pub(crate) compression_changes: usize,
    pub(crate) compression_rate: u32,
}

impl Plan {
    pub(crate) fn full() -> Self {
        Self {
            fanout_sizes: vec![1000, 5000, 10_000],
            rates: vec![5, 10, 20, 50, 100, 200, 500, 1000],
            step: Duration::from_secs(4),
            ws_size: 10_000,
            idle_size: 10_000,
            slow_size: 2000,
            slow_rate: 20,
            narrow_size: 10_000,
            narrow_rates: vec![100, 200, 500, 1000, 2000],
            // Two rounds of the demo script: the first fills the histories.
            diff_duration: kube_pulse_sim::scenario::round() * 2,
            sync_clusters: 100,
            sync_objects: 1000,
            pod_members: 100,
            pod_deployments: 50,
            pod_replicas: 20,
            pod_tick: Duration::from_secs(5),
            pod_steady: Duration::from_secs(60),
            pod_churn_every: Duration::from_secs(5),
            podcurve_members: vec![1, 100],
            podcurve_sizes: vec![10_000, 50_000, 100_000, 250_000, 500_000],
            podcurve_replicas: 5000,
            podcurve_tick: Duration::from_secs(20),
            // jemalloc's default decay gives dirty pages back over 10 s.
            podcurve_quiet: (Duration::from_secs(10), Duration::from_secs(30)),
            registry_sizes: vec![0, 10_000, 20_000, 40_000],
            registry_object_bytes: 1024,
            p99_limit_ms: 50.0,
            warm_up: Duration::from_secs(2),
            settle: Duration::from_secs(3),
            connection_sizes: vec![1000, 5000, 10_000, 20_000],
            cpu_sizes: vec![100, 1000, 5000, 10_000],
            cpu_rate: 20,
            cpu_step: Duration::from_secs(10),
            latency_sizes: vec![1, 1000],
            latency_rates: vec![50, 100],
            latency_step: Duration::from_secs(10),
            latency_rounds: 2,
            objects_members: vec![1, 100],
            objects_sizes: vec![10_000, 100_000, 1_000_000],
            objects_bytes: 64,
            replica_counts: vec![1, 2, 3],
            replica_subscribers: 1000,
            replica_latency_rates: vec![50],
            replica_rounds: 2,
            fleet_members: 10_000,
            fleet_live: 1_500,
            fleet_window: Duration::from_secs(150),
            agent_deployments: 100,
            agent_replicas: 10,
            // The agent's default.
            agent_heartbeat: Duration::from_secs(10),
            agent_window: Duration::from_secs(60),
            agent_changes: 50,
            agent_change_every: Duration::from_secs(1),
            query_docs: 100_000,
            query_count: 1000,
            query_rate: 200,
            query_window: Duration::from_secs(30),
            compression_apps: 100,
            compression_subscribers: 1000,
            compression_changes: 200,
            compression_rate: 50,
        }
    }

    pub(crate) fn smoke() -> Self {
        Self {
            fanout_sizes: vec![50],
            rates: vec![10, 50],
            step: Duration::from_secs(1),
            ws_size: 50,
            idle_size: 100,
            slow_size: 50,
            slow_rate: 10,
            narrow_size: 50,
            narrow_rates: vec![20],
            diff_duration: Duration::from_secs(8),
            sync_clusters: 3,
            sync_objects: 50,
            pod_members: 2,
            pod_deployments: 3,
            pod_replicas: 4,
            pod_tick: Duration::from_millis(200),
            pod_steady: Duration::from_secs(2),
            pod_churn_every: Duration::from_secs(1),
            podcurve_members: vec![1, 2],
            podcurve_sizes: vec![20, 40],
            podcurve_replicas: 10,
            podcurve_tick: Duration::from_millis(200),
            podcurve_quiet: (Duration::from_millis(500), Duration::from_secs(1)),
            registry_sizes: vec![0, 200, 400],
            registry_object_bytes: 1024,
            p99_limit_ms: 50.0,
            warm_up: Duration::from_millis(500),
            settle: Duration::from_millis(200),
            connection_sizes: vec![20, 50],
            cpu_sizes: vec![20],
            cpu_rate: 10,
            cpu_step: Duration::from_secs(1),
            latency_sizes: vec![1, 20],
            latency_rates: vec![20],
            latency_step: Duration::from_secs(1),
            latency_rounds: 1,
            objects_members: vec![1, 3],
            objects_sizes: vec![300],
            objects_bytes: 64,
            replica_counts: vec![2],
            replica_subscribers: 20,
            replica_latency_rates: vec![10],
            replica_rounds: 1,
            fleet_members: 40,
            fleet_live: 10,
            fleet_window: Duration::from_secs(8),
            agent_deployments: 5,
            agent_replicas: 2,
            agent_heartbeat: Duration::from_secs(1),
            agent_window: Duration::from_secs(5),
            agent_changes: 5,
            agent_change_every: Duration::from_millis(200),
            query_docs: 2000,
            query_count: 40,
            query_rate: 50,
            query_window: Duration::from_secs(2),
            compression_apps: 10,
            compression_subscribers: 20,
            compression_changes: 10,
            compression_rate: 20,
        }
    }
}

/// Subscribers connected to one server.
pub(crate) struct Crowd {
    pub(crate) seen: Vec<Arc<Seen>>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Crowd {
    /// Connects `n` subscribers (200 connecting at a time); `stalled` of them never read.
    pub(crate) async fn connect(
        via: impl Fn(usize) -> Via,
        n: usize,
        stalled: usize,
    ) -> anyhow::Result<Self> {
        let stop = CancellationToken::new();
        let gate = Arc::new(Semaphore::new(200));
        let mut seen = Vec::with_capacity(n);
        let mut tasks = Vec::with_capacity(n);
        for i in 0..n {
            let s = Arc::new(Seen::default());
            seen.push(s.clone());
            let (via, stop, gate) = (via(i), stop.clone(), gate.clone());
            let is_stalled = i < stalled;
            tasks.push(tokio::spawn(async move {
                let permit = gate.acquire_owned().await;
                let connected = s.clone();
                let waiter = tokio::spawn(async move {
                    for _ in 0..300 {
                        if connected.connected.load(Ordering::Relaxed) {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    drop(permit);
                });
                load::subscribe(via, s, is_stalled, stop).await;
                waiter.abort();
            }));
        }
        let crowd = Self { seen, stop, tasks };
        let deadline = Instant::now() + Duration::from_secs(30 + n as u64 / 100);
        while crowd.connected() < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::ensure!(
            crowd.connected() == n,
            "only {} of {n} subscribers connected",
            crowd.connected()
        );
        // Let initial snapshots arrive.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(crowd)
    }

    pub(crate) fn connected(&self) -> usize {
        self.seen
            .iter()
            .filter(|s| s.connected.load(Ordering::Relaxed))
            .count()
    }

    pub(crate) async fn close(self) {
        self.stop.cancel();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
        }
    }
}

/// One measured step at a fixed change rate.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Step {
    /// The offered rate.
    pub(crate) rate: u32,
    /// The rate the publisher achieved (changes accepted per second).
    pub(crate) achieved_rate: f64,
    pub(crate) sent: u64,
    pub(crate) expected: u64,
    pub(crate) delivered: u64,
    pub(crate) loss: u64,
    pub(crate) deliveries_per_sec: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) server_cpu_pct: f64,
    pub(crate) bench_cpu_pct: f64,
    /// CPU seconds over the window (publishing and settling).
    pub(crate) server_cpu_seconds: f64,
    pub(crate) bench_cpu_seconds: f64,
    pub(crate) server_rss_mb: f64,
}

/// The `p` quantile (0–1) of sorted latencies in µs, in ms.
pub(crate) fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

/// Publishes at `rate` for `duration` to `apps` apps round-robin, then
/// waits for deliveries to settle; measures the `healthy` subscribers.
pub(crate) async fn step(
    target: &Target,
    crowd: &Crowd,
    healthy: std::ops::Range<usize>,
    rate: u32,
    duration: Duration,
    per_change: impl Fn(usize) -> u64,
) -> anyhow::Result<Step> {
    for s in &crowd.seen {
        s.latencies.lock().clear();
    }
    let before: u64 = crowd.seen[healthy.clone()]
        .iter()
        .map(|s| s.deliveries.load(Ordering::Relaxed))
        .sum();
    let pids = target.pids();
    let me = [std::process::id()];
    let (cpu0, me0, t0) = (
        proc::cpu_seconds(&pids),
        proc::cpu_seconds(&me),
        Instant::now(),
    );
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sent = 0u64;
    let mut expected = 0u64;
    let end = Instant::now() + duration;
    let total = (f64::from(rate) * duration.as_secs_f64()).round() as u64;
    while sent < total && Instant::now() < end + duration {
        ticker.tick().await;
        target.publish(load::now_nanos(), sent as usize).await?;
        expected += per_change(sent as usize);
        sent += 1;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let achieved_rate = sent as f64 / elapsed;
    // Settle: until the healthy subscribers have everything, at most 3 s.
    let settle = Instant::now() + Duration::from_secs(3);
    loop {
        let delivered: u64 = crowd.seen[healthy.clone()]
            .iter()
            .map(|s| s.deliveries.load(Ordering::Relaxed))
            .sum();
        if delivered - before >= expected || Instant::now() > settle {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let delivered: u64 = crowd.seen[healthy.clone()]
        .iter()
        .map(|s| s.deliveries.load(Ordering::Relaxed))
        .sum::<u64>()
        - before;
    let window = t0.elapsed().as_secs_f64();
    let server_cpu_seconds = proc::cpu_seconds(&pids) - cpu0;
    let bench_cpu_seconds = proc::cpu_seconds(&me) - me0;
    let cpu = server_cpu_seconds / window * 100.0;
    let bench_cpu = bench_cpu_seconds / window * 100.0;
    let mut all: Vec<u32> = Vec::new();
    for s in &crowd.seen[healthy] {
        all.extend(s.latencies.lock().drain(..));
    }
    all.sort_unstable();
    Ok(Step {
        rate,
        achieved_rate,
        sent,
        expected,
        delivered,
        loss: expected.saturating_sub(delivered),
        deliveries_per_sec: delivered as f64 / elapsed,
        p50_ms: percentile(&all, 0.5),
        p99_ms: percentile(&all, 0.99),
        max_ms: all.last().map(|v| f64::from(*v) / 1000.0).unwrap_or(0.0),
        server_cpu_pct: cpu,
        bench_cpu_pct: bench_cpu,
        server_cpu_seconds,
        bench_cpu_seconds,
        server_rss_mb: proc::rss(&pids) as f64 / 1e6,
    })
}

/// One change nobody counts, then a pause: every server has registered
/// every subscription before the first measured step.
pub(crate) async fn warm_up(target: &Target, plan: &Plan) -> anyhow::Result<()> {
    target.publish(load::now_nanos(), 0).await?;
    tokio::time::sleep(plan.warm_up).await;
    Ok(())
}

/// Whether a step held its rate: the publisher achieved 95 % of the
/// offered rate, every change reached every subscriber, p99 within the limit.
fn sustains(step: &Step, plan: &Plan) -> bool {
    step.loss == 0
        && step.p99_ms <= plan.p99_limit_ms
        && step.achieved_rate >= 0.95 * f64::from(step.rate)
}

/// A rate sweep at one subscriber count.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sweep {
    pub(crate) server: Kind,
    pub(crate) transport: &'static str,
    pub(crate) subscribers: usize,
    pub(crate) steps: Vec<Step>,
    /// The highest rate with p99 ≤ the limit and no loss.
    pub(crate) sustained_rate: Option<u32>,
    pub(crate) sustained_deliveries_per_sec: Option<f64>,
    /// The highest rate with no loss, whatever the latency.
    pub(crate) lossless_rate: Option<u32>,
    pub(crate) lossless_deliveries_per_sec: Option<f64>,
    pub(crate) lossless_p99_ms: Option<f64>,
    pub(crate) error: Option<String>,
}

/// Sweeps rates upward until p99 passes the limit or changes are lost.
pub(crate) async fn sweep(
    target: &Target,
    transport: &'static str,
    n: usize,
    plan: &Plan,
) -> Sweep {
    let via = |i: usize| match transport {
        "ws" => target.ws().expect("WebSocket targets only"),
        _ => target.sse(i, false),
    };
    run_rates(target, transport, n, via, &plan.rates, |_| n as u64, plan).await
}

/// Connects `n` subscribers through `via`, warms up, then runs `rates`
/// upward while nothing is lost; `per_change(k)` is how many subscribers
/// change `k` reaches.
async fn run_rates(
    target: &Target,
    transport: &'static str,
    n: usize,
    via: impl Fn(usize) -> Via,
    rates: &[u32],
    per_change: impl Fn(usize) -> u64 + Copy,
    plan: &Plan,
) -> Sweep {
    let mut result = Sweep {
        server: target.kind,
        transport,
        subscribers: n,
        steps: Vec::new(),
        sustained_rate: None,
        sustained_deliveries_per_sec: None,
        lossless_rate: None,
        lossless_deliveries_per_sec: None,
        lossless_p99_ms: None,
        error: None,
    };
    let crowd = match Crowd::connect(via, n, 0).await {
        Ok(c) => c,
        Err(e) => {
            result.error = Some(e.to_string());
            return result;
        }
    };
    if let Err(e) = warm_up(target, plan).await {
        result.error = Some(e.to_string());
    }
    for &rate in rates {
        let step = match step(target, &crowd, 0..n, rate, plan.step, per_change).await {
            Ok(s) => s,
            Err(e) => {
                result.error = Some(e.to_string());
                break;
            }
        };
        eprintln!(
            "  {} {transport} n={n} rate={rate}/s (achieved {:.0}/s): p99 {:.1} ms, loss {}, {:.0} deliveries/s, server CPU {:.0}%",
            target.kind.name(),
            step.achieved_rate,
            step.p99_ms,
            step.loss,
            step.deliveries_per_sec,
            step.server_cpu_pct
        );
        let lossless = step.loss == 0 && step.achieved_rate >= 0.95 * f64::from(rate);
        if sustains(&step, plan) && result.steps.iter().all(|s| sustains(s, plan)) {
            result.sustained_rate = Some(rate);
            result.sustained_deliveries_per_sec = Some(step.deliveries_per_sec);
        }
        if lossless {
            result.lossless_rate = Some(rate);
            result.lossless_deliveries_per_sec = Some(step.deliveries_per_sec);
            result.lossless_p99_ms = Some(step.p99_ms);
        }
        result.steps.push(step);
        // Past the latency limit the sweep goes on while nothing is lost:
        // the highest lossless rate is the throughput figure.
        if !lossless {
            break;
        }
    }
    crowd.close().await;
    result
}

/// Memory per idle connection.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Idle {
    pub(crate) server: Kind,
    /// `SSE` or `WebSocket`.
    pub(crate) transport: &'static str,
    pub(crate) subscribers: usize,
    pub(crate) rss_before_mb: f64,
    pub(crate) rss_after_mb: f64,
    pub(crate) per_connection_kib: f64,
    /// Simulator list/watch requests and open watches with 1 and with all subscribers (kube-pulse).
    pub(crate) upstream: Option<Upstream>,
    pub(crate) error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Upstream {
    pub(crate) points: Vec<(usize, u64, u64, u64)>,
}

/// `via`: how subscriber `i` connects (SSE or WebSocket).
pub(crate) async fn idle(
    target: &Target,
    n: usize,
    transport: &'static str,
    via: impl Fn(usize) -> Via,
) -> Idle {
    let pids = target.pids();
    let before = proc::rss(&pids);
    let stats = |t: &Target| {
        t.sim.as_ref().map(|s| {
            let st = s.stats();
            (st.total("list"), st.total("watch"), st.open_watches as u64)
        })
    };
    let mut points = Vec::new();
    if let Some((l, w, o)) = stats(target) {
        points.push((0, l, w, o));
    }
    let mut result = Idle {
        server: target.kind,
        transport,
        subscribers: n,
        rss_before_mb: before as f64 / 1e6,
        rss_after_mb: 0.0,
        per_connection_kib: 0.0,
        upstream: None,
        error: None,
    };
    let mut crowds = Vec::new();
    for size in [1, n / 10, n - 1 - n / 10] {
        match Crowd::connect(&via, size, 0).await {
            Ok(c) => crowds.push(c),
            Err(e) => {
                result.error = Some(e.to_string());
                break;
            }
        }
        if let Some((l, w, o)) = stats(target) {
            let total: usize = crowds.iter().map(|c| c.seen.len()).sum();
            points.push((total, l, w, o));
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = proc::rss(&target.pids());
    result.rss_after_mb = after as f64 / 1e6;
    result.per_connection_kib = after.saturating_sub(before) as f64 / n as f64 / 1024.0;
    if !points.is_empty() {
        result.upstream = Some(Upstream { points });
    }
    for c in crowds {
        c.close().await;
    }
    result
}

/// Slow readers: a tenth of the subscribers stop reading.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Slow {
    pub(crate) server: Kind,
    pub(crate) subscribers: usize,
    pub(crate) stalled: usize,
    pub(crate) rate: u32,
    /// Three consecutive windows: p99 of the healthy readers and server RSS.
    pub(crate) windows: Vec<Step>,
    pub(crate) error: Option<String>,
}

pub(crate) async fn slow(target: &Target, plan: &Plan) -> Slow {
    let n = plan.slow_size;
    let stalled = n / 10;
    let mut result = Slow {
        server: target.kind,
        subscribers: n,
        stalled,
        rate: plan.slow_rate,
        windows: Vec::new(),
        error: None,
    };
    let crowd = match Crowd::connect(|i| target.sse(i, false), n, stalled).await {
        Ok(c) => c,
        Err(e) => {
            result.error = Some(e.to_string());
            return result;
        }
    };
    let healthy = n - stalled;
    if let Err(e) = warm_up(target, plan).await {
        result.error = Some(e.to_string());
    }
    for _ in 0..3 {
        match step(
            target,
            &crowd,
            stalled..n,
            plan.slow_rate,
            plan.step * 2,
            |_| healthy as u64,
        )
        .await
        {
            Ok(s) => result.windows.push(s),
            Err(e) => {
                result.error = Some(e.to_string());
                break;
            }
        }
    }
    crowd.close().await;
    result
}

/// Narrow subscriptions: each subscriber on its own app.
pub(crate) async fn narrow(target: &Target, plan: &Plan) -> Sweep {
    let (n, apps) = (plan.narrow_size, target.apps.max(1));
    // Change k goes to app k mod apps: the subscribers on that app.
    let per_app = move |k: usize| (n / apps + usize::from(k % apps < n % apps)) as u64;
    let via = |i: usize| target.sse(i, true);
    run_rates(
        target,
        "sse, one app each",
        n,
        via,
        &plan.narrow_rates,
        per_app,
        plan,
    )
    .await
}

/// Merge-patch bytes against full-document bytes over the demo scenario.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Diff {
    pub(crate) seconds: f64,
    /// One scenario round (its script, start to end).
    pub(crate) round_seconds: f64,
    /// Per round (the first starts with empty histories), then all of it.
    pub(crate) windows: Vec<DiffWindow>,
    /// Patch bytes by top-level member, largest first: where the bytes go.
    pub(crate) patch_bytes_by_member: Vec<(String, u64)>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct DiffWindow {
    pub(crate) label: String,
    pub(crate) changes: u64,
    pub(crate) patch_bytes: u64,
    pub(crate) full_bytes: u64,
    pub(crate) ratio_pct: f64,
}

impl DiffWindow {
    fn add(&mut self, patch: u64, full: u64) {
        self.changes += 1;
        self.patch_bytes += patch;
        self.full_bytes += full;
        self.ratio_pct = self.patch_bytes as f64 / self.full_bytes.max(1) as f64 * 100.0;
    }
}

pub(crate) async fn diff(plan: &Plan) -> anyhow::Result<Diff> {
    use kube_pulse::demo::{DemoOptions, start_clusters};
    use kube_pulse::gateway::{Gateway, GatewayConfig};
    use kube_pulse::hub::{Delivery, Pattern};
    let shutdown = tokio_util::sync::CancellationToken::new();
    let options = DemoOptions {
        converge: kube_pulse_sim::ConvergeConfig {
            tick: Duration::from_millis(100),
            pods_per_tick: 1,
        },
        ..DemoOptions::default()
    };
    let clusters = start_clusters(&options, &shutdown).await?;
    let config = GatewayConfig {
        members: clusters.iter().map(kube_pulse::demo::member).collect(),
        ..options.gateway
    };
    let gateway = Gateway::start(config, &shutdown).await?;
    let mut sub = gateway
        .hub()
        .subscribe(vec![Pattern::parse("**").expect("valid")]);
    let clusters = Arc::new(clusters);
    let scenario = {
        let (clusters, shutdown) = (clusters.clone(), shutdown.clone());
        tokio::spawn(async move { kube_pulse_sim::scenario::run(&clusters, shutdown).await })
    };
    let round = kube_pulse_sim::scenario::round();
    let mut rounds: Vec<DiffWindow> = Vec::new();
    let mut all = DiffWindow {
        label: "all".into(),
        ..Default::default()
    };
    let mut by_member: std::collections::BTreeMap<String, u64> = Default::default();
    let start = tokio::time::Instant::now();
    let end = start + plan.diff_duration;
    loop {
        let next = tokio::time::timeout_at(end, sub.next()).await;
        let Ok(delivery) = next else { break };
        if let Delivery::Change(change) = delivery
            && let (Some(patch), Some(doc)) = (&change.patch, &change.doc)
        {
            let patch_len = serde_json::to_vec(&**patch)?.len() as u64;
            let full_len = serde_json::to_vec(&**doc)?.len() as u64;
            let index = (start.elapsed().as_secs_f64() / round.as_secs_f64()) as usize;
            while rounds.len() <= index {
                rounds.push(DiffWindow {
                    label: format!("round {}", rounds.len() + 1),
                    ..Default::default()
                });
            }
            rounds[index].add(patch_len, full_len);
            all.add(patch_len, full_len);
            if let Some(members) = patch.as_object() {
                for (k, v) in members {
                    *by_member.entry(k.clone()).or_default() +=
                        (k.len() + 3 + serde_json::to_vec(v)?.len()) as u64;
                }
            }
        }
    }
    shutdown.cancel();
    let _ = scenario.await;
    gateway.stop().await;
    if let Ok(clusters) = Arc::try_unwrap(clusters) {
        for c in clusters {
            c.shutdown().await;
        }
    }
    rounds.push(all);
    Ok(Diff {
        seconds: plan.diff_duration.as_secs_f64(),
        round_seconds: round.as_secs_f64(),
        windows: rounds,
        patch_bytes_by_member: {
            let mut v: Vec<(String, u64)> = by_member.into_iter().collect();
            v.sort_by_key(|entry| std::cmp::Reverse(entry.1));
            v
        },
    })
}

/// Time until every cluster is Healthy and every sync status Syncing.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct InitialSync {
    pub(crate) clusters: usize,
    pub(crate) objects_per_cluster: usize,
    pub(crate) seconds: f64,
    pub(crate) server_rss_mb: f64,
}

pub(crate) async fn initial_sync(plan: &Plan) -> anyhow::Result<InitialSync> {
    use kube_pulse::gateway::{Gateway, GatewayConfig};
    use kube_pulse::hub::Pattern;
    use kube_pulse_sim::{SimCluster, SimConfig};
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut sims = Vec::new();
    for i in 0..plan.sync_clusters {
        let sim =
            SimCluster::start_with_shutdown(SimConfig::named(&format!("c{i}")), shutdown.clone())
                .await?;
        let def = sim
            .store()
            .catalog()
            .find("", "v1", "configmaps")
            .expect("configmaps")
            .clone();
        for j in 0..plan.sync_objects {
            let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{j}"), "namespace": "default"}, "data": {"k": "v"}});
            sim.store()
                .create(&def, Some("default"), body, false)
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
        sims.push(sim);
    }
    let mut config = GatewayConfig {
        members: sims.iter().map(kube_pulse::demo::member).collect(),
        pipeline: kube_pulse::demo::pipeline_config(),
        ..GatewayConfig::default()
    };
    config.pipeline.source.probe_interval = Duration::from_secs(5);
    let started = Instant::now();
    let gateway = Gateway::start(config, &shutdown).await?;
    let hub = gateway.hub().clone();
    let clusters = Pattern::parse("clusters/*").expect("valid");
    let syncs = Pattern::parse("clusters/*/sync/**").expect("valid");
    let expected_syncs = plan.sync_clusters * 4;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let healthy = hub
            .list(std::slice::from_ref(&clusters))
            .iter()
            .filter(|d| d.doc["phase"] == "Healthy")
            .count();
        let syncing = hub
            .list(std::slice::from_ref(&syncs))
            .iter()
            .filter(|d| d.doc["phase"] == "Syncing")
            .count();
        if healthy == plan.sync_clusters && syncing >= expected_syncs {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "not synced after 300 s: {healthy} healthy, {syncing} syncing"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let rss = proc::rss(&[std::process::id()]) as f64 / 1e6;
    shutdown.cancel();
    gateway.stop().await;
    for s in sims {
        s.shutdown().await;
    }
    Ok(InitialSync {
        clusters: plan.sync_clusters,
        objects_per_cluster: plan.sync_objects,
        seconds,
        server_rss_mb: rss,
    })
}

/// Starts a server of `kind` for the scenario.
pub(crate) async fn start(kind: Kind, bin: &Path, apps: usize) -> anyhow::Result<Target> {
    match kind {
        Kind::KubePulse => Target::kube_pulse(bin, apps).await,
        Kind::Pushpin => Target::pushpin().await,
        Kind::Nchan => Target::nchan().await,
        Kind::Raw | Kind::RawCopy => Target::raw(kind).await,
    }
}
