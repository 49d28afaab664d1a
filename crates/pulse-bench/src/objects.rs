//! Gateway RSS and initial-sync time against watched objects
//! (docs/BENCHMARKS.md, scenario 13): 10 000 to 1 000 000 ConfigMaps spread
//! evenly over 1 and over 100 simulated members (inside this process), a
//! sync registry naming `core/v1/configmaps` (metadata-only watches), and a
//! fresh `kube-pulse serve` process per point. A point is synced when every
//! member's ConfigMaps document is `Syncing` with its share counted. The
//! members are filled point after point (the counts only grow), so the
//! simulators are built once per member count.
//!
//! Bounded: the plan fixes the grid; every wait has a deadline.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_pulse_sim::{SimCluster, SimConfig};
use serde::Serialize;
use serde_json::Value;

use crate::proc;
use crate::registry::{fill, stop, synced_objects};
use crate::scenarios::Plan;
use crate::targets::{free_port, get, http_client, wait_for_port};

/// How long one gateway may take to count every object.
const SYNC_LIMIT: Duration = Duration::from_secs(900);

/// One gateway run over `objects` ConfigMaps in `members` members.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ObjectsPoint {
    pub(crate) members: usize,
    pub(crate) objects: usize,
    /// How long the simulators took to create this point's new objects.
    pub(crate) fill_seconds: f64,
    /// From spawning the gateway until every member's ConfigMaps are counted.
    pub(crate) sync_seconds: f64,
    /// The gateway's CPU (user + system) until then.
    pub(crate) sync_cpu_seconds: f64,
    pub(crate) rss_mb: f64,
    pub(crate) peak_rss_mb: f64,
    pub(crate) error: Option<String>,
}

/// The grid's points, in the order they ran.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ObjectsCurve {
    pub(crate) object_bytes: usize,
    pub(crate) points: Vec<ObjectsPoint>,
}

/// What ends a progress line (`before` ",") or a table cell (`before` "")
/// of a run that stopped early: `{before} stopped: {why}`; nothing for
/// one that did not.
pub(crate) fn stopped_note(before: &str, error: Option<&str>) -> String {
    error
        .map(|e| format!("{before} stopped: {e}"))
        .unwrap_or_default()
}

/// How many of `total` objects spread evenly over `members` member `member` holds.
pub(crate) fn share(total: usize, members: usize, member: usize) -> usize {
    total / members + usize::from(member < total % members)
}

async fn run_one(
    bin: &Path,
    sims: &[SimCluster],
    objects: usize,
    settle: Duration,
    point: &mut ObjectsPoint,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let port = free_port();
    let config = dir.path().join("config.yaml");
    let mut yaml = format!("listen: 127.0.0.1:{port}\nclusters:\n");
    for (i, sim) in sims.iter().enumerate() {
        yaml.push_str(&format!("- {{name: m{i}, server: '{}'}}\n", sim.url()));
    }
    yaml.push_str("podWatch: {enabled: false}\nsyncRegistries:\n- {name: bench, clusters: ['*'], resources: [{group: '', version: v1, resource: configmaps}]}\n");
    std::fs::write(&config, yaml)?;
    let started = Instant::now();
    let child = Command::new(bin)
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let result = async {
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        wait_for_port(addr, "kube-pulse").await?;
        let http = http_client();
        // Members still counting; a member once counted stays counted.
        let mut waiting: Vec<usize> = (0..sims.len()).collect();
        while !waiting.is_empty() {
            let mut still = Vec::new();
            for &m in &waiting {
                let url = format!("http://{addr}/api/v1/clusters/m{m}/sync");
                let body = get(&http, &url).await.unwrap_or_default();
                let docs: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                if synced_objects(&docs) != Some(share(objects, sims.len(), m) as u64) {
                    still.push(m);
                }
            }
            waiting = still;
            anyhow::ensure!(
                started.elapsed() < SYNC_LIMIT,
                "{} of {} members not synced within {SYNC_LIMIT:?}",
                waiting.len(),
                sims.len()
            );
            if !waiting.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        point.sync_seconds = started.elapsed().as_secs_f64();
        point.sync_cpu_seconds = proc::cpu_seconds(&proc::tree(&[pid]));
        tokio::time::sleep(settle).await;
        let pids = proc::tree(&[pid]);
        point.rss_mb = proc::rss(&pids) as f64 / 1e6;
        point.peak_rss_mb = proc::peak_rss(&pids) as f64 / 1e6;
        anyhow::Ok(())
    }
    .await;
    stop(child);
    result
}

/// The scenario: for each member count, members filled point after point.
pub(crate) async fn objects_curve(bin: &Path, plan: &Plan) -> anyhow::Result<ObjectsCurve> {
    let mut points = Vec::new();
    let mut sizes = plan.objects_sizes.clone();
    sizes.sort_unstable();
    for &members in &plan.objects_members {
        let mut sims = Vec::with_capacity(members);
        for i in 0..members {
            sims.push(SimCluster::start(SimConfig::named(&format!("m{i}"))).await?);
        }
        let mut filled = vec![0usize; members];
        for &objects in &sizes {
            let mut point = ObjectsPoint {
                members,
                objects,
                ..ObjectsPoint::default()
            };
            let t = Instant::now();
            for (m, sim) in sims.iter().enumerate() {
                let want = share(objects, members, m);
                fill(sim, filled[m], want, plan.objects_bytes)?;
                filled[m] = filled[m].max(want);
            }
            point.fill_seconds = t.elapsed().as_secs_f64();
            eprintln!(
                "objects: kube-pulse over {objects} ConfigMaps in {members} members (filled in {:.1} s)",
                point.fill_seconds
            );
            if let Err(e) = run_one(bin, &sims, objects, plan.settle, &mut point).await {
                point.error = Some(e.to_string());
            }
            eprintln!(
                "  synced in {:.2} s ({:.2} s CPU), RSS {:.1} MB{}",
                point.sync_seconds,
                point.sync_cpu_seconds,
                point.rss_mb,
                stopped_note(",", point.error.as_deref())
            );
            let failed = point.error.is_some();
            points.push(point);
            if failed {
                break;
            }
        }
        for sim in sims {
            sim.shutdown().await;
        }
    }
    Ok(ObjectsCurve {
        object_bytes: plan.objects_bytes,
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_spread_evenly_and_all_of_them() {
        for (total, members) in [(10_000, 1), (10_000, 100), (1_000_001, 100), (7, 3)] {
            let shares: Vec<usize> = (0..members).map(|m| share(total, members, m)).collect();
            assert_eq!(shares.iter().sum::<usize>(), total);
            let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(hi - lo <= 1, "{shares:?}");
        }
    }

    #[test]
    fn a_stopped_run_says_why_in_a_line_and_in_a_cell() {
        assert_eq!(stopped_note(",", Some("timed out")), ", stopped: timed out");
        assert_eq!(stopped_note("", Some("timed out")), " stopped: timed out");
        assert_eq!(stopped_note(",", None), "");
    }
}
