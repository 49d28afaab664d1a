//! Gateway memory per watched object (docs/BENCHMARKS.md, scenario 11): one
//! simulated member holding ConfigMaps of about 1 KiB, a sync registry that
//! names `core/v1/configmaps`, and a fresh `kube-pulse serve` process per
//! size. Each run waits until the ConfigMaps' sync document is `Syncing`
//! with every object counted, lets the process settle, and reads its RSS
//! (and peak) and the CPU it took; the slope of RSS over the object count
//! is the cost of one watched object. Then the registry leaves the
//! configuration (SIGHUP) and RSS is read again once the watch stopped, and
//! once more after the registry came back and every object was counted
//! again: what the watch freed is reused, so RSS stays where it was.
//!
//! Bounded: the plan fixes the sizes; every wait has a deadline.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_pulse_sim::{SimCluster, SimConfig};
use serde::Serialize;
use serde_json::{Value, json};

use crate::proc;
use crate::scenarios::Plan;
use crate::targets::{HttpClient, free_port, get, http_client, wait_for_port};

/// How long one gateway may take to count every object.
const SYNC_LIMIT: Duration = Duration::from_secs(600);
/// Quiet time before RSS is read, once synced.
const SETTLE: Duration = Duration::from_secs(3);

/// The runs over one member, one per size.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RegistryMemory {
    /// Bytes of each ConfigMap's data.
    pub(crate) object_bytes: usize,
    pub(crate) runs: Vec<RegistryRun>,
    /// The slope of RSS over the object count (non-zero sizes), in bytes per object.
    pub(crate) bytes_per_object: Option<f64>,
}

/// One gateway run over `objects` ConfigMaps.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct RegistryRun {
    pub(crate) objects: usize,
    /// From spawning the gateway until the ConfigMaps' document is Syncing with every object.
    pub(crate) sync_seconds: f64,
    /// The gateway's CPU (user + system) until then.
    pub(crate) sync_cpu_seconds: f64,
    pub(crate) rss_mb: f64,
    pub(crate) peak_rss_mb: f64,
    /// RSS once the registry is gone from the configuration (SIGHUP) and
    /// the ConfigMaps' document says `RemovedFromRegistry`.
    pub(crate) removed_rss_mb: f64,
    /// RSS once the registry is back (SIGHUP) and every object counted again.
    pub(crate) readded_rss_mb: f64,
    pub(crate) error: Option<String>,
}

/// Whether the ConfigMaps' sync document says its watch stopped for leaving the registry.
fn removed(docs: &Value) -> bool {
    docs["items"].as_array().is_some_and(|items| {
        items.iter().any(|d| {
            d["resource"]["resource"] == "configmaps" && d["reason"] == "RemovedFromRegistry"
        })
    })
}

/// The ConfigMaps' sync document's `objects` once it is `Syncing`.
pub(crate) fn synced_objects(docs: &Value) -> Option<u64> {
    docs["items"]
        .as_array()?
        .iter()
        .find(|d| d["resource"]["resource"] == "configmaps" && d["phase"] == "Syncing")
        .and_then(|d| d["objects"].as_u64())
}

/// Adds ConfigMaps `from..to` to the member, each with `bytes` of data.
pub(crate) fn fill(sim: &SimCluster, from: usize, to: usize, bytes: usize) -> anyhow::Result<()> {
    let def = sim
        .store()
        .catalog()
        .find("", "v1", "configmaps")
        .ok_or_else(|| anyhow::anyhow!("the simulator serves no configmaps"))?
        .clone();
    let filler = "x".repeat(bytes);
    for i in from..to {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i:06}"), "namespace": "default", "labels": {"app": "bench"}},
            "data": {"filler": filler}});
        sim.store()
            .create(&def, Some("default"), cm, false)
            .map_err(|e| anyhow::anyhow!("creating a ConfigMap: {e:?}"))?;
    }
    Ok(())
}

/// Polls the member's sync documents until `done` holds, for at most `SYNC_LIMIT`.
pub(crate) async fn wait_for(
    http: &HttpClient,
    url: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> anyhow::Result<()> {
    let asked = Instant::now();
    loop {
        let body = get(http, url).await.unwrap_or_default();
        if done(&serde_json::from_str(&body).unwrap_or(Value::Null)) {
            return Ok(());
        }
        anyhow::ensure!(
            asked.elapsed() < SYNC_LIMIT,
            "{what} not within {SYNC_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    for _ in 0..200 {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

async fn run_one(bin: &Path, sim: &SimCluster, objects: usize) -> anyhow::Result<RegistryRun> {
    let dir = tempfile::tempdir()?;
    let port = free_port();
    let config = dir.path().join("config.yaml");
    let base = format!(
        "listen: 127.0.0.1:{port}\nclusters:\n- {{name: m0, server: '{}'}}\npodWatch: {{enabled: false}}\n",
        sim.url()
    );
    let registry = "syncRegistries:\n- {name: bench, clusters: ['*'], resources: [{group: '', version: v1, resource: configmaps}]}\n";
    std::fs::write(&config, format!("{base}{registry}"))?;
    let started = Instant::now();
    let child = Command::new(bin)
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let mut run = RegistryRun {
        objects,
        ..RegistryRun::default()
    };
    let result = async {
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        wait_for_port(addr, "kube-pulse").await?;
        let http = http_client();
        let url = format!("http://{addr}/api/v1/clusters/m0/sync");
        let synced = |docs: &Value| synced_objects(docs) == Some(objects as u64);
        wait_for(&http, &url, &format!("{objects} ConfigMaps synced"), synced).await?;
        run.sync_seconds = started.elapsed().as_secs_f64();
        run.sync_cpu_seconds = proc::cpu_seconds(&proc::tree(&[pid]));
        tokio::time::sleep(SETTLE).await;
        let pids = proc::tree(&[pid]);
        run.rss_mb = proc::rss(&pids) as f64 / 1e6;
        run.peak_rss_mb = proc::peak_rss(&pids) as f64 / 1e6;

        // The registry leaves the configuration: the watch and what it kept go.
        std::fs::write(&config, format!("{base}syncRegistries: []\n"))?;
        Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()?;
        wait_for(&http, &url, "the registry's removal applied", removed).await?;
        tokio::time::sleep(SETTLE).await;
        run.removed_rss_mb = proc::rss(&pids) as f64 / 1e6;

        // And back: a new watch counts them all again, in the memory freed.
        std::fs::write(&config, format!("{base}{registry}"))?;
        Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()?;
        wait_for(&http, &url, "the registry's return synced", synced).await?;
        tokio::time::sleep(SETTLE).await;
        run.readded_rss_mb = proc::rss(&pids) as f64 / 1e6;
        anyhow::Ok(())
    }
    .await;
    stop(child);
    if let Err(e) = result {
        run.error = Some(e.to_string());
    }
    Ok(run)
}

/// The cost of one object: the least-squares slope of RSS over the object
/// count, through the non-zero sizes that completed (at least two).
fn per_object(runs: &[RegistryRun]) -> Option<f64> {
    let points: Vec<(f64, f64)> = runs
        .iter()
        .filter(|r| r.error.is_none() && r.objects > 0)
        .map(|r| (r.objects as f64, r.rss_mb * 1e6))
        .collect();
    crate::curves::slope(&points)
}

/// A run's RSS above the empty run's, per object.
pub(crate) fn above_empty(runs: &[RegistryRun], run: &RegistryRun) -> Option<f64> {
    let empty = runs.iter().find(|r| r.objects == 0 && r.error.is_none())?;
    (run.objects > 0 && run.error.is_none())
        .then(|| (run.rss_mb - empty.rss_mb) * 1e6 / run.objects as f64)
}

/// The scenario: one member filled size by size, a fresh gateway per size.
pub(crate) async fn registry_memory(bin: &Path, plan: &Plan) -> anyhow::Result<RegistryMemory> {
    let sim = SimCluster::start(SimConfig::named("m0")).await?;
    let mut sizes = plan.registry_sizes.clone();
    sizes.sort_unstable();
    let mut runs = Vec::new();
    let mut filled = 0;
    for objects in sizes {
        fill(&sim, filled, objects, plan.registry_object_bytes)?;
        filled = filled.max(objects);
        eprintln!("registry: kube-pulse over {objects} ConfigMaps");
        runs.push(run_one(bin, &sim, objects).await?);
    }
    sim.shutdown().await;
    Ok(RegistryMemory {
        object_bytes: plan.registry_object_bytes,
        bytes_per_object: per_object(&runs),
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_syncing_configmaps_document_counts() {
        let doc = |resource: &str, phase: &str, objects: u64| {
            json!({"resource": {"group": "", "version": "v1", "resource": resource},
                   "phase": phase, "objects": objects})
        };
        let list = |docs: Vec<Value>| json!({ "items": docs });
        let cases = [
            (
                list(vec![
                    doc("namespaces", "Syncing", 3),
                    doc("configmaps", "Syncing", 7),
                ]),
                Some(7),
            ),
            (list(vec![doc("configmaps", "Listing", 5)]), None),
            (list(vec![doc("namespaces", "Syncing", 3)]), None),
            (Value::Null, None),
        ];
        for (docs, want) in cases {
            assert_eq!(synced_objects(&docs), want, "{docs}");
        }
    }

    #[test]
    fn per_object_cost_is_the_slope_over_the_non_zero_sizes() {
        let run = |objects, rss_mb, error: Option<&str>| RegistryRun {
            objects,
            rss_mb,
            error: error.map(str::to_string),
            ..RegistryRun::default()
        };
        // 10 MB at rest, then 200 bytes per object: the empty run stays out
        // of the slope, which sees only what each object adds.
        let runs = [
            run(0, 10.0, None),
            run(10_000, 14.0, None),
            run(20_000, 16.0, None),
            run(40_000, 20.0, None),
        ];
        let slope = per_object(&runs).unwrap();
        assert!((slope - 200.0).abs() < 1e-6, "{slope}");
        assert_eq!(above_empty(&runs, &runs[1]), Some(400.0));
        assert_eq!(above_empty(&runs, &runs[3]), Some(250.0));
        assert_eq!(above_empty(&runs, &runs[0]), None);
        // Points off a line: the least-squares slope, not the end points'.
        let bent = [
            run(10_000, 12.0, None),
            run(20_000, 15.0, None),
            run(30_000, 16.0, None),
        ];
        let slope = per_object(&bent).unwrap();
        assert!((slope - 200.0).abs() < 1e-6, "{slope}");
        let failed = [run(20_000, 14.0, None), run(40_000, 0.0, Some("timeout"))];
        assert_eq!(per_object(&failed), None);
        assert_eq!(above_empty(&failed, &failed[0]), None);
        assert_eq!(per_object(&[run(0, 10.0, None)]), None);
        assert_eq!(per_object(&[]), None);
    }

    #[test]
    fn removal_is_read_from_the_configmaps_document() {
        let doc = |resource: &str, reason: &str| json!({"resource": {"resource": resource}, "phase": "Stopped", "reason": reason});
        assert!(removed(
            &json!({"items": [doc("configmaps", "RemovedFromRegistry")]})
        ));
        assert!(!removed(
            &json!({"items": [doc("configmaps", "ClusterUnhealthy")]})
        ));
        assert!(!removed(
            &json!({"items": [doc("pods", "RemovedFromRegistry")]})
        ));
        assert!(!removed(&Value::Null));
    }
}
