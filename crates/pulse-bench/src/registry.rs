//! Gateway memory per watched object (docs/BENCHMARKS.md, scenario 10): one
//! simulated member holding ConfigMaps of about 1 KiB, a sync registry that
//! names `core/v1/configmaps`, and a fresh `kube-pulse serve` process per
//! size. Each run waits until the ConfigMaps' sync document is `Syncing`
//! with every object counted, lets the process settle, and reads its RSS
//! (and peak); the difference between sizes over the difference in objects
//! is the cost of one watched object. Then the registry leaves the
//! configuration (SIGHUP) and RSS is read again once the watch stopped.
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
use crate::targets::{free_port, get, http_client, wait_for_port};

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
    /// (RSS at the largest size − RSS at the smallest non-zero size) per object, in bytes.
    pub(crate) bytes_per_object: Option<f64>,
}

/// One gateway run over `objects` ConfigMaps.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct RegistryRun {
    pub(crate) objects: usize,
    /// From spawning the gateway until the ConfigMaps' document is Syncing with every object.
    pub(crate) sync_seconds: f64,
    pub(crate) rss_mb: f64,
    pub(crate) peak_rss_mb: f64,
    /// RSS once the registry is gone from the configuration (SIGHUP) and
    /// the ConfigMaps' document says `RemovedFromRegistry`.
    pub(crate) removed_rss_mb: f64,
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
fn synced_objects(docs: &Value) -> Option<u64> {
    docs["items"]
        .as_array()?
        .iter()
        .find(|d| d["resource"]["resource"] == "configmaps" && d["phase"] == "Syncing")
        .and_then(|d| d["objects"].as_u64())
}

/// Adds ConfigMaps `from..to` to the member, each with `bytes` of data.
fn fill(sim: &SimCluster, from: usize, to: usize, bytes: usize) -> anyhow::Result<()> {
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

fn stop(mut child: Child) {
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
        loop {
            let body = get(&http, &url).await.unwrap_or_default();
            let docs: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            if synced_objects(&docs) == Some(objects as u64) {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < SYNC_LIMIT,
                "{objects} ConfigMaps not synced within {SYNC_LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        run.sync_seconds = started.elapsed().as_secs_f64();
        tokio::time::sleep(SETTLE).await;
        let pids = proc::tree(&[pid]);
        run.rss_mb = proc::rss(&pids) as f64 / 1e6;
        run.peak_rss_mb = proc::peak_rss(&pids) as f64 / 1e6;

        // The registry leaves the configuration: the watch and what it kept go.
        std::fs::write(&config, format!("{base}syncRegistries: []\n"))?;
        Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()?;
        let asked = Instant::now();
        loop {
            let body = get(&http, &url).await.unwrap_or_default();
            if removed(&serde_json::from_str(&body).unwrap_or(Value::Null)) {
                break;
            }
            anyhow::ensure!(
                asked.elapsed() < SYNC_LIMIT,
                "the registry's removal was not applied within {SYNC_LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(SETTLE).await;
        run.removed_rss_mb = proc::rss(&pids) as f64 / 1e6;
        Ok(())
    }
    .await;
    stop(child);
    if let Err(e) = result {
        run.error = Some(e.to_string());
    }
    Ok(run)
}

/// The cost of one object between the smallest non-zero and the largest size.
fn per_object(runs: &[RegistryRun]) -> Option<f64> {
    let ok: Vec<&RegistryRun> = runs
        .iter()
        .filter(|r| r.error.is_none() && r.objects > 0)
        .collect();
    let (low, high) = (
        ok.iter().min_by_key(|r| r.objects)?,
        ok.iter().max_by_key(|r| r.objects)?,
    );
    (high.objects > low.objects)
        .then(|| (high.rss_mb - low.rss_mb) * 1e6 / (high.objects - low.objects) as f64)
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
    fn per_object_cost_spans_the_non_zero_sizes() {
        let run = |objects, rss_mb, error: Option<&str>| RegistryRun {
            objects,
            rss_mb,
            error: error.map(str::to_string),
            ..RegistryRun::default()
        };
        let runs = [
            run(0, 10.0, None),
            run(20_000, 14.0, None),
            run(40_000, 18.0, None),
        ];
        assert_eq!(per_object(&runs), Some(200.0));
        let failed = [run(20_000, 14.0, None), run(40_000, 0.0, Some("timeout"))];
        assert_eq!(per_object(&failed), None);
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
