//! Gateway RSS against pods held (docs/BENCHMARKS.md, scenario 25): pods
//! spread evenly over 1 and over 100 simulated members, each member's pods
//! those of its Deployments (as many at every size: enough that none has
//! more than the plan's replicas at the top size) which its kubelet
//! emulation keeps, and fresh `kube-pulse serve` processes per point: one
//! with the pod watch always on, read when every member is Healthy with its
//! six watches Syncing ("synced") and again once it has been left alone
//! for a while ("settled", [`settle`]); one with pods on demand, read with
//! nobody subscribed, then with one SSE subscription to `apps/**` once
//! every member's pods are watched, synced and settled. The settled
//! readings tell the memory a gateway holds from what its initial sync
//! used for a while. The members grow point after point (their
//! Deployments scaled up and every pod started before a gateway runs), so
//! the simulators are built once per member count, each member count in a
//! process of its own (`pulse-bench podcurve-series`): a series starts from
//! an empty process, not one that kept the last series' freed memory. Each
//! series' cost of a pod is the least-squares slope of its RSS over the
//! pods held.
//!
//! The simulator names a Deployment's pods with five random letters, as
//! Kubernetes does, and a name drawn twice is one pod: a point holds the
//! pods the members hold once every one has started, a few short of the
//! plan (about one in 10 000 at 5 000 replicas).
//!
//! Bounded: the plan fixes the grid; every wait has a deadline; a member
//! count stops at its first failed point, before a point whose pods would
//! take the simulators past [`SIMULATORS_RSS_LIMIT`] at the rate measured
//! so far, and at a point whose pods leave the machine less than
//! [`MEM_AVAILABLE_FLOOR`] (the point fails).

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_pulse_sim::{ConvergeConfig, SimCluster, SimConfig, WorkloadSeed, workload_manifest};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::curves::slope;
use crate::objects::{self, share};
use crate::plot::{Axis, Plot, Series};
use crate::podwatch::{Gateway, all_synced, hold_stream, members_with, pod_count};
use crate::proc;
use crate::scenarios::Plan;
use crate::targets::{get, http_client};

/// How long the members may take to start a point's pods, and a gateway to sync.
const LIMIT: Duration = Duration::from_secs(600);
/// The simulators' RSS (a series' process) not to go past: a point that
/// would, at the RSS per pod measured so far, is not run. 500 000 pods take
/// about 13 GB; the machine the curve is measured on has 23 GB.
const SIMULATORS_RSS_LIMIT: f64 = 16e9;
/// The memory the machine must keep available while a point's pods start:
/// below it the point fails rather than push the machine into swapping or
/// the OOM killer.
const MEM_AVAILABLE_FLOOR: u64 = 2_000_000_000;
/// The namespace of every Deployment.
const NAMESPACE: &str = "shop";
/// Watched resources of a member without and with its pods (and events).
const WITHOUT_PODS: u64 = 4;
const WITH_PODS: u64 = 6;

/// A settled reading ends, between the plan's least and most quiet time,
/// once the RSS fell by less than [`STILL_BYTES`] over the last [`STILL_FOR`].
const STILL_FOR: Duration = Duration::from_secs(5);
const STILL_BYTES: u64 = 1_000_000;

/// One point: a fleet size, both gateways over it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct PodCurvePoint {
    pub(crate) members: usize,
    pub(crate) deployments: usize,
    /// Pods the members hold (the plan's size less the names drawn twice).
    pub(crate) pods: usize,
    /// How long the simulators took to create and start this point's new pods.
    pub(crate) fill_seconds: f64,
    /// This process's RSS (the simulators') with the point's pods, in MB.
    pub(crate) simulators_rss_mb: f64,
    /// The pod watch always on: from spawning the gateway until every
    /// member is Healthy with its six watches Syncing.
    pub(crate) sync_seconds: f64,
    pub(crate) sync_cpu_seconds: f64,
    pub(crate) rss_mb: f64,
    /// The same gateway left alone after the synced reading: the RSS when
    /// it stopped falling, and how long after the synced reading.
    pub(crate) settled_rss_mb: f64,
    pub(crate) settled_seconds: f64,
    /// Objects the always-on gateway holds (the cluster documents' `cache.objects`).
    pub(crate) objects: u64,
    /// Pods on demand, nobody subscribed: from spawning until every member
    /// is Healthy with its four watches Syncing, and the RSS then.
    pub(crate) idle_seconds: f64,
    pub(crate) idle_rss_mb: f64,
    /// Pods on demand with `apps/**` subscribed: from the subscription
    /// until every member's six watches are Syncing, the gateway's CPU in
    /// that time, and the RSS then.
    pub(crate) demand_seconds: f64,
    pub(crate) demand_cpu_seconds: f64,
    pub(crate) demand_rss_mb: f64,
    /// The on-demand gateway, `apps/**` still subscribed, left alone after
    /// that reading.
    pub(crate) demand_settled_rss_mb: f64,
    pub(crate) demand_settled_seconds: f64,
    pub(crate) error: Option<String>,
}

/// One series' cost of a pod.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Slope {
    pub(crate) members: usize,
    pub(crate) series: String,
    pub(crate) bytes_per_pod: f64,
}

/// The grid's points in the order they ran, the slopes, and why a member
/// count stopped short of the grid, if one did.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct PodCurve {
    /// The most replicas of one Deployment, at the top size.
    pub(crate) replicas: usize,
    /// The least and the most a settled reading waits.
    pub(crate) quiet: (Duration, Duration),
    pub(crate) points: Vec<PodCurvePoint>,
    pub(crate) slopes: Vec<Slope>,
    pub(crate) stopped: Vec<String>,
}

/// How a series reads a point's RSS.
pub(crate) type Reading = fn(&PodCurvePoint) -> f64;

/// The series of the curve: their names and how a point's RSS is read.
pub(crate) const SERIES: [(&str, Reading); 5] = [
    ("pod watch always on, synced", |p| p.rss_mb),
    ("pod watch always on, settled", |p| p.settled_rss_mb),
    ("on demand, apps/** subscribed, synced", |p| p.demand_rss_mb),
    ("on demand, apps/** subscribed, settled", |p| {
        p.demand_settled_rss_mb
    }),
    ("on demand, nobody subscribed", |p| p.idle_rss_mb),
];

/// Bytes a pod for each member count and series, over the points that completed.
fn slopes(points: &[PodCurvePoint]) -> Vec<Slope> {
    let mut members: Vec<usize> = points.iter().map(|p| p.members).collect();
    members.dedup();
    let mut out = Vec::new();
    for m in members {
        for (series, rss) in SERIES {
            let xy: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.members == m && p.error.is_none())
                .map(|p| (p.pods as f64, rss(p) * 1e6))
                .collect();
            if let Some(bytes_per_pod) = slope(&xy) {
                out.push(Slope {
                    members: m,
                    series: series.to_string(),
                    bytes_per_pod,
                });
            }
        }
    }
    out
}

/// Replicas of Deployment `d` of member `m` when the fleet holds `pods`.
fn replicas(pods: usize, members: usize, deployments: usize, m: usize, d: usize) -> u32 {
    share(share(pods, members, m), deployments, d) as u32
}

fn seed(d: usize, replicas: u32) -> WorkloadSeed {
    WorkloadSeed {
        kind: "Deployment".into(),
        namespace: NAMESPACE.into(),
        name: format!("d{d}"),
        replicas,
        image: "registry.example/app:1".into(),
    }
}

/// Deployments a member, so that none has more than `most` replicas at `top` pods.
fn deployments_of(top: usize, members: usize, most: usize) -> usize {
    share(top, members, 0).div_ceil(most.max(1)).max(1)
}

/// Whether a member holds its `want` pods, every one started: all of them
/// but names drawn twice (at most one in 1 000).
fn started((held, running): (usize, usize), want: usize) -> bool {
    held == running && held <= want && held + want / 1000 >= want
}

/// Scales every member's Deployments to `pods` in all, then waits until
/// each member holds its share, every pod started; returns the pods held.
async fn grow(sims: &[SimCluster], deployments: usize, pods: usize) -> anyhow::Result<usize> {
    let members = sims.len();
    for (m, sim) in sims.iter().enumerate() {
        for d in 0..deployments {
            let manifest = workload_manifest(&seed(d, replicas(pods, members, deployments, m, d)));
            sim.apply(&manifest)
                .map_err(|e| anyhow::anyhow!("scaling d{d} on {}: {e:?}", sim.name()))?;
        }
    }
    let deadline = Instant::now() + LIMIT;
    let mut held = 0;
    for (m, sim) in sims.iter().enumerate() {
        let want = share(pods, members, m);
        loop {
            let count = pod_count(sim);
            if started(count, want) {
                held += count.0;
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{}: {count:?} pods (held, started) of {want} within {LIMIT:?}",
                sim.name(),
            );
            let available = proc::meminfo("MemAvailable:").unwrap_or(u64::MAX);
            anyhow::ensure!(
                available >= MEM_AVAILABLE_FLOOR,
                "{}: {count:?} pods (held, started) of {want} when the machine had {:.1} GB left",
                sim.name(),
                available as f64 / 1e9
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(held)
}

/// Polls the cluster documents until every member is Healthy with `watches`
/// resources Syncing; returns the objects they hold.
async fn until_members(gateway: &Gateway, members: usize, watches: u64) -> anyhow::Result<u64> {
    let http = http_client();
    let url = format!("http://{}/api/v1/clusters", gateway.addr);
    let deadline = Instant::now() + LIMIT;
    loop {
        let body = get(&http, &url).await.unwrap_or_default();
        let docs: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if let Some(objects) = all_synced(&docs, members, watches) {
            return Ok(objects);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} of {members} members with {watches} watches Syncing within {LIMIT:?}",
            members_with(&docs, watches)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Leaves the gateway alone (this process reads only its RSS) until its
/// RSS stops falling, between `least` and `most` (the plan's quiet time);
/// returns the last RSS in MB and the seconds waited.
async fn settle(pids: &[u32], (least, most): (Duration, Duration)) -> (f64, f64) {
    let started = Instant::now();
    let mut samples: Vec<(Instant, u64)> = Vec::new();
    loop {
        let now = Instant::now();
        let rss = proc::rss(pids);
        samples.push((now, rss));
        let waited = now - started;
        let still = samples
            .iter()
            .find(|(t, _)| now - *t <= STILL_FOR)
            .is_some_and(|(t, before)| {
                now - *t >= STILL_FOR - Duration::from_millis(600)
                    && before.saturating_sub(rss) < STILL_BYTES
            });
        if waited >= most || (waited >= least && still) {
            return (rss as f64 / 1e6, waited.as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The point's two gateways, one after the other.
async fn measure(
    bin: &Path,
    sims: &[SimCluster],
    quiet: (Duration, Duration),
    point: &mut PodCurvePoint,
) -> anyhow::Result<()> {
    let members = sims.len();
    let started = Instant::now();
    let gateway = Gateway::start(bin, sims, "{enabled: true}", "streaming").await?;
    let result = async {
        point.objects = until_members(&gateway, members, WITH_PODS).await?;
        let pids = gateway.pids();
        point.sync_seconds = started.elapsed().as_secs_f64();
        point.sync_cpu_seconds = proc::cpu_seconds(&pids);
        point.rss_mb = proc::rss(&pids) as f64 / 1e6;
        (point.settled_rss_mb, point.settled_seconds) = settle(&pids, quiet).await;
        anyhow::Ok(())
    }
    .await;
    gateway.stop();
    result?;

    let block = "{enabled: true, onDemand: true, lingerSeconds: 5}";
    let started = Instant::now();
    let gateway = Gateway::start(bin, sims, block, "streaming").await?;
    let result = async {
        until_members(&gateway, members, WITHOUT_PODS).await?;
        let pids = gateway.pids();
        point.idle_seconds = started.elapsed().as_secs_f64();
        point.idle_rss_mb = proc::rss(&pids) as f64 / 1e6;
        let cpu_before = proc::cpu_seconds(&pids);
        let subscribed = Instant::now();
        let _stream = hold_stream(&http_client(), gateway.addr, "apps/**").await?;
        until_members(&gateway, members, WITH_PODS).await?;
        point.demand_seconds = subscribed.elapsed().as_secs_f64();
        point.demand_cpu_seconds = proc::cpu_seconds(&pids) - cpu_before;
        point.demand_rss_mb = proc::rss(&pids) as f64 / 1e6;
        (point.demand_settled_rss_mb, point.demand_settled_seconds) = settle(&pids, quiet).await;
        anyhow::Ok(())
    }
    .await;
    gateway.stop();
    result
}

/// One member count's points in the order they ran, and why it stopped
/// short of the grid, if it did: what a `podcurve-series` process prints.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct SeriesRun {
    pub(crate) points: Vec<PodCurvePoint>,
    pub(crate) stopped: Vec<String>,
}

/// The scenario: each member count's series in a process of its own
/// (this binary's `podcurve-series`, with the same plan), one after the
/// other.
pub(crate) async fn pod_curve(bin: &Path, plan: &Plan, smoke: bool) -> anyhow::Result<PodCurve> {
    let mut curve = PodCurve {
        replicas: plan.podcurve_replicas,
        quiet: plan.podcurve_quiet,
        ..PodCurve::default()
    };
    let me = std::env::current_exe()?;
    for &members in &plan.podcurve_members {
        let mut command = Command::new(&me);
        command.arg("--kube-pulse").arg(bin);
        if smoke {
            command.arg("--smoke");
        }
        command
            .args(["podcurve-series", "--members", &members.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let output = tokio::task::spawn_blocking(move || command.output()).await??;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let run = stdout
            .lines()
            .rev()
            .find_map(|line| serde_json::from_str::<SeriesRun>(line).ok());
        match run {
            Some(run) => {
                curve.points.extend(run.points);
                curve.stopped.extend(run.stopped);
            }
            None => curve.stopped.push(format!(
                "{members} members: the series' process ended with {} and no result",
                output.status
            )),
        }
    }
    curve.slopes = slopes(&curve.points);
    Ok(curve)
}

/// One member count: its simulators in this process, grown point after point.
pub(crate) async fn series(bin: &Path, plan: &Plan, members: usize) -> anyhow::Result<SeriesRun> {
    let mut run = SeriesRun::default();
    let mut sizes = plan.podcurve_sizes.clone();
    sizes.sort_unstable();
    let (Some(&first), Some(&top)) = (sizes.first(), sizes.last()) else {
        return Ok(run);
    };
    let me = [std::process::id()];
    let empty_rss = proc::rss(&me) as f64;
    let deployments = deployments_of(top, members, plan.podcurve_replicas);
    // Every Deployment reaches its replicas in one controller step.
    let most = replicas(top, members, deployments, 0, 0).max(1);
    let mut sims = Vec::with_capacity(members);
    for m in 0..members {
        sims.push(
            SimCluster::start(SimConfig {
                workloads: (0..deployments)
                    .map(|d| seed(d, replicas(first, members, deployments, m, d)))
                    .collect(),
                converge: ConvergeConfig {
                    tick: plan.podcurve_tick,
                    pods_per_tick: most,
                },
                // No churn while a gateway runs: a short watch cache.
                window: 100,
                ..SimConfig::named(&format!("m{m}"))
            })
            .await?,
        );
    }
    for &pods in &sizes {
        // What the simulators hold per pod so far, against the next size.
        if let Some(last) = run.points.last() {
            let per_pod = (last.simulators_rss_mb * 1e6 - empty_rss).max(0.0) / last.pods as f64;
            let projected = empty_rss + per_pod * pods as f64;
            if projected > SIMULATORS_RSS_LIMIT {
                run.stopped.push(format!(
                    "{members} members: {pods} pods not run, the simulators would hold about {:.1} GB ({:.0} KB a pod)",
                    projected / 1e9,
                    per_pod / 1e3
                ));
                break;
            }
        }
        let mut point = PodCurvePoint {
            members,
            deployments,
            pods,
            ..PodCurvePoint::default()
        };
        let t = Instant::now();
        let grown = grow(&sims, deployments, pods).await;
        if let Ok(held) = grown {
            point.pods = held;
        }
        point.fill_seconds = t.elapsed().as_secs_f64();
        point.simulators_rss_mb = proc::rss(&me) as f64 / 1e6;
        eprintln!(
            "podcurve: {pods} pods over {members} members (started in {:.1} s, simulators {:.0} MB)",
            point.fill_seconds, point.simulators_rss_mb
        );
        let result = match grown {
            Ok(_) => measure(bin, &sims, plan.podcurve_quiet, &mut point).await,
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            point.error = Some(e.to_string());
        }
        eprintln!(
            "  always on: synced in {:.1} s, RSS {:.0} MB, settled {:.0} MB (after {:.0} s); on demand: {:.0} MB idle, {:.0} MB with apps/** (in {:.1} s), settled {:.0} MB (after {:.0} s){}",
            point.sync_seconds,
            point.rss_mb,
            point.settled_rss_mb,
            point.settled_seconds,
            point.idle_rss_mb,
            point.demand_rss_mb,
            point.demand_seconds,
            point.demand_settled_rss_mb,
            point.demand_settled_seconds,
            objects::stopped_note(",", point.error.as_deref())
        );
        let failed = point.error.clone();
        run.points.push(point);
        if let Some(e) = failed {
            run.stopped
                .push(format!("{members} members at {pods} pods: {e}"));
            break;
        }
    }
    for sim in sims {
        sim.shutdown().await;
    }
    Ok(run)
}

/// The scenario's table in `results.md`.
pub(crate) fn table(out: &mut String, c: &PodCurve) {
    let _ = writeln!(
        out,
        "Deployments of at most {} replicas, as many a member at every size, pods spread evenly over them; per point a gateway with the pod watch always on, then one with pods on demand (nobody subscribed, then `apps/**`); each read when synced, then settled (left alone until its RSS stops falling, {}–{} s).\n\n| members | Deployments a member | pods | simulators' start of the new pods (s) | simulators' RSS (MB) | always on: objects held | initial sync (s) | CPU in it (s) | RSS synced (MB) | settled (MB) | after (s) | on demand, nobody: synced in (s) | RSS (MB) | `apps/**`: pods synced in (s) | CPU in it (s) | RSS synced (MB) | settled (MB) | after (s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        c.replicas,
        c.quiet.0.as_secs_f64(),
        c.quiet.1.as_secs_f64()
    );
    for p in &c.points {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {:.0} | {} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} | {:.0} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} |{}",
            p.members,
            p.deployments,
            p.pods,
            p.fill_seconds,
            p.simulators_rss_mb,
            p.objects,
            p.sync_seconds,
            p.sync_cpu_seconds,
            p.rss_mb,
            p.settled_rss_mb,
            p.settled_seconds,
            p.idle_seconds,
            p.idle_rss_mb,
            p.demand_seconds,
            p.demand_cpu_seconds,
            p.demand_rss_mb,
            p.demand_settled_rss_mb,
            p.demand_settled_seconds,
            objects::stopped_note("", p.error.as_deref())
        );
    }
    if !c.slopes.is_empty() {
        out.push_str("\nRSS per pod held (least-squares slope over the points that completed):\n\n| members | series | bytes per pod |\n|---|---|---|\n");
        for s in &c.slopes {
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} |",
                s.members, s.series, s.bytes_per_pod
            );
        }
    }
    for why in &c.stopped {
        let _ = writeln!(out, "\nStopped: {why}.");
    }
}

/// RSS against pods held, a series per member count and gateway.
pub(crate) fn plot(c: &PodCurve) -> Plot {
    let mut members: Vec<usize> = c.points.iter().map(|p| p.members).collect();
    members.dedup();
    // One colour per member count, dark when synced and light when
    // settled; the on-demand series dashed.
    let palette = [
        ["#2b6cb0", "#90cdf4", "#2b6cb0", "#90cdf4", "#a0aec0"],
        ["#c05621", "#f6ad55", "#c05621", "#f6ad55", "#718096"],
    ];
    let mut series = Vec::new();
    for (i, m) in members.iter().enumerate() {
        for (j, (name, rss)) in SERIES.into_iter().enumerate() {
            series.push(Series {
                name: format!("{m} member{}, {name}", if *m == 1 { "" } else { "s" }),
                colour: palette[i % palette.len()][j],
                dashed: j >= 2,
                points: c
                    .points
                    .iter()
                    .filter(|p| p.members == *m && p.error.is_none())
                    .map(|p| (p.pods as f64, rss(p)))
                    .collect(),
            });
        }
    }
    Plot {
        title: "kube-pulse RSS against pods held".into(),
        x: Axis::linear("pods held"),
        y: Axis::linear("RSS (MB)"),
        series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pod_is_placed_and_evenly() {
        for (pods, members, deployments) in [(10_000, 1, 10), (10_000, 100, 10), (500_001, 100, 10)]
        {
            let all: Vec<u32> = (0..members)
                .flat_map(|m| {
                    (0..deployments).map(move |d| replicas(pods, members, deployments, m, d))
                })
                .collect();
            assert_eq!(all.iter().map(|&r| r as usize).sum::<usize>(), pods);
            let (lo, hi) = (all.iter().min().unwrap(), all.iter().max().unwrap());
            assert!(hi - lo <= 1, "{pods} over {members}: {lo}..{hi}");
        }
    }

    #[test]
    fn a_member_has_started_when_its_pods_run_but_names_drawn_twice() {
        assert!(started((10, 10), 10));
        assert!(!started((10, 9), 10));
        assert!(!started((9, 9), 10));
        assert!(started((49_984, 49_984), 50_000));
        assert!(!started((49_000, 49_000), 50_000));
        assert!(!started((50_001, 50_001), 50_000));
        // 500 000 pods: 100 Deployments of 5 000 on one member, one a member on 100.
        assert_eq!(deployments_of(500_000, 1, 5000), 100);
        assert_eq!(deployments_of(500_000, 100, 5000), 1);
        assert_eq!(deployments_of(40, 3, 10), 2);
    }

    #[test]
    fn the_slope_is_the_bytes_per_pod_of_each_series() {
        let point = |members, pods: usize, failed: bool| PodCurvePoint {
            members,
            pods,
            rss_mb: 100.0 + pods as f64 * 300.0 / 1e6,
            settled_rss_mb: 90.0 + pods as f64 * 250.0 / 1e6,
            demand_rss_mb: 100.0 + pods as f64 * 400.0 / 1e6,
            demand_settled_rss_mb: 100.0 + pods as f64 * 350.0 / 1e6,
            idle_rss_mb: 100.0,
            error: failed.then(|| "late".to_string()),
            ..PodCurvePoint::default()
        };
        let points = [
            point(1, 10_000, false),
            point(1, 50_000, false),
            point(1, 100_000, true),
            point(100, 10_000, false),
        ];
        let slopes = slopes(&points);
        // One member: five series of two points; 100 members: one point, no slope.
        assert_eq!(slopes.len(), SERIES.len());
        assert!(slopes.iter().all(|s| s.members == 1));
        let of = |series: &str| {
            slopes
                .iter()
                .find(|s| s.series == series)
                .unwrap()
                .bytes_per_pod
        };
        for (series, bytes) in SERIES.iter().zip([300.0, 250.0, 400.0, 350.0, 0.0]) {
            assert!((of(series.0) - bytes).abs() < 1e-6, "{}", series.0);
        }
        assert_eq!(slope(&[(1.0, 2.0)]), None);
    }
}
