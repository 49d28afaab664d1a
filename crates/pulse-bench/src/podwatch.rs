//! The pod watch over a fleet (docs/BENCHMARKS.md, scenario 9): simulated
//! members in this process, each running Deployments whose pods the
//! simulator's kubelet keeps, and the `kube-pulse serve` binary over them —
//! once with the pod watch, once with `podWatch.enabled: false`. Only the
//! gateway's process is measured: CPU seconds and RSS for its initial sync,
//! then over a steady window in which the benchmark scales Deployments down
//! and up (pods deleted and created) while one Deployment per member
//! crash-loops (pods restart, Warning events repeat).
//!
//! Bounded: the plan fixes members, pods and the window; every wait has a
//! deadline.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_pulse_sim::pods::ImageFault;
use kube_pulse_sim::{ConvergeConfig, SimCluster, SimConfig, WorkloadSeed, workload_manifest};
use serde::Serialize;
use serde_json::Value;

use crate::proc;
use crate::scenarios::Plan;
use crate::targets::{free_port, get, http_client, wait_for_port};

/// The image of the one crash-looping Deployment per member.
const CRASH_IMAGE: &str = "registry.example/crash:1";
/// The namespace of every Deployment.
const NAMESPACE: &str = "shop";
/// How long the members may take to create their pods, and the gateway to sync.
const SETTLE_LIMIT: Duration = Duration::from_secs(600);

/// Both runs over one fleet.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PodFleet {
    pub(crate) members: usize,
    pub(crate) pods_per_member: usize,
    /// Seconds the simulators took to create and start every pod (before
    /// any gateway ran).
    pub(crate) fleet_ready_seconds: f64,
    pub(crate) runs: Vec<PodWatchRun>,
    /// `podWatch.onDemand` over the same fleet: the stages of one gateway.
    pub(crate) on_demand: Vec<DemandStage>,
    /// Why the on-demand run stopped early, if it did.
    pub(crate) on_demand_error: Option<String>,
}

/// One stage of the on-demand run: who looks, and what that costs.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct DemandStage {
    pub(crate) stage: &'static str,
    /// Members whose pod and event watches run (their clusters report 6
    /// watched resources, not 4).
    pub(crate) members_watched: usize,
    /// Watches open on the simulators (every resource of every member).
    pub(crate) open_watches: usize,
    /// Pod watch requests the simulators served since the gateway started.
    pub(crate) pod_watches: u64,
    /// Seconds from the stage's start until the fleet showed it.
    pub(crate) seconds: f64,
    /// The gateway's RSS then, in MB.
    pub(crate) rss_mb: f64,
}

/// One gateway run, with or without the pod watch.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct PodWatchRun {
    pub(crate) pod_watch: bool,
    /// `initialLists` of the gateway: `streaming` or `paged`.
    pub(crate) initial_lists: &'static str,
    /// How much this process's RSS (the simulators') grew during the
    /// initial sync, in MB: what serving the initial state cost the members.
    pub(crate) simulators_rss_growth_mb: f64,
    /// Watch and list requests for pods the simulators served until every
    /// member synced: one watch each when streamed, one list (or its pages)
    /// and one watch when paged; more means restarted watches.
    pub(crate) pod_requests: (u64, u64),
    /// From spawning the gateway until every member is Healthy with every watch Syncing.
    pub(crate) sync_seconds: f64,
    /// The gateway's CPU seconds (user + system) over that time.
    pub(crate) sync_cpu_seconds: f64,
    /// Its RSS then, in MB.
    pub(crate) synced_rss_mb: f64,
    /// Objects the gateway holds for the fleet (the sum of the cluster documents' `cache.objects`).
    pub(crate) objects: u64,
    pub(crate) steady_seconds: f64,
    /// The gateway's CPU seconds over the steady window.
    pub(crate) steady_cpu_seconds: f64,
    /// This process's (the simulators') CPU seconds over the same window: they share the cores.
    pub(crate) simulators_cpu_seconds: f64,
    /// The gateway's RSS at the end of the window, and its peak (`VmHWM`), in MB.
    pub(crate) steady_rss_mb: f64,
    pub(crate) peak_rss_mb: f64,
    /// Pods the benchmark deleted and created during the window (crash-loop restarts not counted).
    pub(crate) pods_churned: u64,
    pub(crate) error: Option<String>,
}

/// Deployments of one member: `d0` crash-loops, the rest run.
fn seeds(plan: &Plan) -> Vec<WorkloadSeed> {
    (0..plan.pod_deployments)
        .map(|d| WorkloadSeed {
            kind: "Deployment".into(),
            namespace: NAMESPACE.into(),
            name: format!("d{d}"),
            replicas: plan.pod_replicas,
            image: if d == 0 {
                CRASH_IMAGE.into()
            } else {
                "registry.example/app:1".into()
            },
        })
        .collect()
}

/// The pods of `sim`, and how many of them have started (phase `Running`;
/// a crash-looping pod is `Running` between its restarts).
pub(crate) fn pod_count(sim: &SimCluster) -> (usize, usize) {
    let Some(def) = sim.store().catalog().find("", "v1", "pods").cloned() else {
        return (0, 0);
    };
    let pods = sim.store().snapshot(&def);
    let running = pods
        .iter()
        .filter(|p| p.pointer("/status/phase").and_then(Value::as_str) == Some("Running"))
        .count();
    (pods.len(), running)
}

/// Waits until every member holds all its pods and each of them has
/// started. The kubelet emulation creates a pod `Pending` at one step and
/// starts it at the next (`pod_tick` later): a member that merely holds
/// its pods still writes every one of them again, with its events, one
/// step on. A gateway started then would race that burst (the simulators
/// taking both cores, 100 000 pod changes on its watches) and measure the
/// race, not its sync: how much of the burst it met depended on how long
/// the fleet took to create.
async fn settle(sims: &[SimCluster], plan: &Plan, deadline: Instant) -> anyhow::Result<()> {
    let want = plan.pod_deployments * plan.pod_replicas as usize;
    while sims.iter().any(|s| pod_count(s) != (want, want)) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the members did not start their pods within {SETTLE_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Starts the members and waits until each holds all its pods, started.
async fn start_fleet(plan: &Plan) -> anyhow::Result<(Vec<SimCluster>, f64)> {
    let started = Instant::now();
    let mut sims = Vec::with_capacity(plan.pod_members);
    for m in 0..plan.pod_members {
        let sim = SimCluster::start(SimConfig {
            workloads: seeds(plan),
            // Each Deployment reaches its replicas in one step; steps are
            // sparse, as the kubelet emulation rebuilds every pod per step.
            converge: ConvergeConfig {
                tick: plan.pod_tick,
                pods_per_tick: plan.pod_replicas,
            },
            image_faults: [(CRASH_IMAGE.to_string(), ImageFault::Crash)].into(),
            window: 10_000,
            ..SimConfig::named(&format!("m{m}"))
        })
        .await?;
        sims.push(sim);
    }
    settle(&sims, plan, started + SETTLE_LIMIT).await?;
    Ok((sims, started.elapsed().as_secs_f64()))
}

/// The gateway process over the fleet.
pub(crate) struct Gateway {
    child: Child,
    pub(crate) addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// `pod_watch`: the config file's `podWatch` block, in flow style.
    pub(crate) async fn start(
        bin: &Path,
        sims: &[SimCluster],
        pod_watch: &str,
        initial_lists: &str,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let port = free_port();
        let clusters: String = sims
            .iter()
            .map(|s| format!("- {{name: {}, server: '{}'}}\n", s.name(), s.url()))
            .collect();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{port}\nclusters:\n{clusters}podWatch: {pod_watch}\ninitialLists: {initial_lists}\n"
            ),
        )?;
        let child = Command::new(bin)
            .args(["serve", "--config"])
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let gateway = Self {
            child,
            addr,
            _dir: dir,
        };
        wait_for_port(addr, "kube-pulse").await?;
        Ok(gateway)
    }

    pub(crate) fn pids(&self) -> Vec<u32> {
        proc::tree(&[self.child.id()])
    }

    pub(crate) fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..200 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The cluster documents, when every one is Healthy with all `watches` Syncing.
pub(crate) fn all_synced(docs: &Value, members: usize, watches: u64) -> Option<u64> {
    (members_with(docs, watches) == members).then(|| {
        docs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["cache"]["objects"].as_u64())
            .sum()
    })
}

/// Scales `d1` of every member between its replicas and half of them.
fn churn(sims: &[SimCluster], plan: &Plan, down: bool) -> anyhow::Result<u64> {
    let half = plan.pod_replicas / 2;
    let replicas = if down {
        plan.pod_replicas - half
    } else {
        plan.pod_replicas
    };
    for sim in sims {
        let manifest = workload_manifest(&WorkloadSeed {
            kind: "Deployment".into(),
            namespace: NAMESPACE.into(),
            name: "d1".into(),
            replicas,
            image: "registry.example/app:1".into(),
        });
        sim.apply(&manifest)
            .map_err(|e| anyhow::anyhow!("scaling d1 on {}: {e:?}", sim.name()))?;
    }
    Ok(u64::from(half) * sims.len() as u64)
}

async fn run_one(
    bin: &Path,
    sims: &[SimCluster],
    plan: &Plan,
    (pod_watch, initial_lists): (bool, &'static str),
) -> anyhow::Result<PodWatchRun> {
    // Deployments, StatefulSets, Namespaces and Nodes, then Pods and Warning events.
    let watches = if pod_watch { 6 } else { 4 };
    // The previous run's last churn may have left pods just created.
    settle(sims, plan, Instant::now() + SETTLE_LIMIT).await?;
    let me = [std::process::id()];
    let sims_rss_before = proc::rss(&me);
    let pod_requests = |verb: &str| -> u64 {
        sims.iter()
            .map(|s| s.stats().count("core/pods", verb))
            .sum()
    };
    let requests_before = (pod_requests("watch"), pod_requests("list"));
    let started = Instant::now();
    let block = format!("{{enabled: {pod_watch}}}");
    let gateway = Gateway::start(bin, sims, &block, initial_lists).await?;
    let http = http_client();
    let url = format!("http://{}/api/v1/clusters", gateway.addr);
    let mut run = PodWatchRun {
        pod_watch,
        initial_lists,
        ..PodWatchRun::default()
    };
    let result = async {
        let deadline = started + SETTLE_LIMIT;
        run.objects = loop {
            let body = get(&http, &url).await.unwrap_or_default();
            let docs: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            if let Some(objects) = all_synced(&docs, sims.len(), watches) {
                break objects;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "not every member synced within {SETTLE_LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let pids = gateway.pids();
        run.sync_seconds = started.elapsed().as_secs_f64();
        run.sync_cpu_seconds = proc::cpu_seconds(&pids);
        run.synced_rss_mb = proc::rss(&pids) as f64 / 1e6;
        run.simulators_rss_growth_mb =
            (proc::rss(&me) as f64 - sims_rss_before as f64).max(0.0) / 1e6;
        run.pod_requests = (
            pod_requests("watch") - requests_before.0,
            pod_requests("list") - requests_before.1,
        );

        let (gateway_before, sims_before) = (proc::cpu_seconds(&pids), proc::cpu_seconds(&me));
        let window = Instant::now();
        let mut down = true;
        while window.elapsed() < plan.pod_steady {
            run.pods_churned += churn(sims, plan, down)?;
            down = !down;
            let left = plan.pod_steady.saturating_sub(window.elapsed());
            tokio::time::sleep(plan.pod_churn_every.min(left)).await;
        }
        run.steady_seconds = window.elapsed().as_secs_f64();
        run.steady_cpu_seconds = proc::cpu_seconds(&pids) - gateway_before;
        run.simulators_cpu_seconds = proc::cpu_seconds(&me) - sims_before;
        run.steady_rss_mb = proc::rss(&pids) as f64 / 1e6;
        run.peak_rss_mb = proc::peak_rss(&pids) as f64 / 1e6;
        // Leave d1 as it started for the next run.
        if !down {
            churn(sims, plan, false)?;
        }
        Ok(())
    }
    .await;
    gateway.stop();
    if let Err(e) = result {
        run.error = Some(e.to_string());
    }
    Ok(run)
}

/// How many members are Healthy with `watches` resources all Syncing.
pub(crate) fn members_with(docs: &Value, watches: u64) -> usize {
    docs["items"].as_array().map_or(0, |items| {
        items
            .iter()
            .filter(|d| {
                d["phase"] == "Healthy"
                    && d["resources"]["total"].as_u64() == Some(watches)
                    && d["resources"]["synced"].as_u64() == Some(watches)
            })
            .count()
    })
}

/// An SSE subscription held open (not read: the stream's few messages wait
/// in the socket), closed when dropped.
pub(crate) async fn hold_stream(
    http: &crate::targets::HttpClient,
    addr: SocketAddr,
    topic: &str,
) -> anyhow::Result<Box<dyn std::any::Any + Send>> {
    let url = format!("http://{addr}/api/v1/events?topic={topic}");
    let request = http::Request::get(url).body(http_body_util::Full::new(bytes::Bytes::new()))?;
    let response = http.request(request).await?;
    anyhow::ensure!(
        response.status() == 200,
        "{topic}: HTTP {}",
        response.status()
    );
    Ok(Box::new(response))
}

/// `podWatch.onDemand` (linger 5 s) over the fleet: nobody looking, one
/// member's apps looked at, every app, then nobody again after the linger.
async fn run_on_demand(
    bin: &Path,
    sims: &[SimCluster],
    plan: &Plan,
    stages: &mut Vec<DemandStage>,
) -> anyhow::Result<()> {
    settle(sims, plan, Instant::now() + SETTLE_LIMIT).await?;
    let pod_watches = || -> u64 {
        sims.iter()
            .map(|s| s.stats().count("core/pods", "watch"))
            .sum()
    };
    let open = || -> usize { sims.iter().map(|s| s.stats().open_watches).sum() };
    let before = pod_watches();
    let block = "{enabled: true, onDemand: true, lingerSeconds: 5}";
    let mut started = Instant::now();
    let gateway = Gateway::start(bin, sims, block, "streaming").await?;
    let http = http_client();
    let url = format!("http://{}/api/v1/clusters", gateway.addr);
    let members = sims.len();
    let mut streams = Vec::new();
    let result = async {
        let plan_of = [
            ("nobody looks", None, 0),
            ("one member's apps (apps/m0/**)", Some("apps/m0/**"), 1),
            ("every app (apps/**)", Some("apps/**"), members),
            ("nobody again, after the linger", None, 0),
        ];
        for (i, (stage, topic, watched)) in plan_of.into_iter().enumerate() {
            if i == plan_of.len() - 1 {
                streams.clear();
            }
            if let Some(topic) = topic {
                streams.push(hold_stream(&http, gateway.addr, topic).await?);
            }
            let deadline = started + SETTLE_LIMIT;
            loop {
                let body = get(&http, &url).await.unwrap_or_default();
                let docs: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let (six, four) = (members_with(&docs, 6), members_with(&docs, 4));
                if six == watched && four == members - watched {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{stage}: {six} members watched, {four} not, within {SETTLE_LIMIT:?}"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            stages.push(DemandStage {
                stage,
                members_watched: watched,
                open_watches: open(),
                pod_watches: pod_watches() - before,
                seconds: started.elapsed().as_secs_f64(),
                rss_mb: proc::rss(&gateway.pids()) as f64 / 1e6,
            });
            started = Instant::now();
        }
        Ok(())
    }
    .await;
    drop(streams);
    gateway.stop();
    result
}

/// The scenario: the fleet, then the gateway with and without the pod watch.
pub(crate) async fn pod_fleet(bin: &Path, plan: &Plan) -> anyhow::Result<PodFleet> {
    let (sims, fleet_ready_seconds) = start_fleet(plan).await?;
    let mut runs = Vec::new();
    // Streamed initial state with and without the pod watch, then paged.
    for (pod_watch, initial_lists) in [(true, "streaming"), (false, "streaming"), (true, "paged")] {
        eprintln!(
            "pods: kube-pulse over {} members × {} pods, pod watch {}, initial lists {initial_lists}",
            plan.pod_members,
            plan.pod_deployments * plan.pod_replicas as usize,
            if pod_watch { "on" } else { "off" }
        );
        runs.push(run_one(bin, &sims, plan, (pod_watch, initial_lists)).await?);
    }
    eprintln!("pods: kube-pulse over the same fleet, pods watched on demand");
    let mut on_demand = Vec::new();
    let on_demand_error = run_on_demand(bin, &sims, plan, &mut on_demand)
        .await
        .err()
        .map(|e| e.to_string());
    for sim in sims {
        sim.shutdown().await;
    }
    Ok(PodFleet {
        members: plan.pod_members,
        pods_per_member: plan.pod_deployments * plan.pod_replicas as usize,
        fleet_ready_seconds,
        runs,
        on_demand,
        on_demand_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_only_when_every_member_is_healthy_with_every_watch() {
        let doc = |phase: &str, synced: u64, objects: u64| {
            serde_json::json!({"phase": phase,
                "resources": {"total": 5, "synced": synced, "failing": 0},
                "cache": {"objects": objects}})
        };
        let list = |docs: Vec<Value>| serde_json::json!({ "items": docs });
        // (documents, members, expected)
        let cases = [
            (
                list(vec![doc("Healthy", 5, 10), doc("Healthy", 5, 7)]),
                2,
                Some(17),
            ),
            (
                list(vec![doc("Healthy", 5, 10), doc("Healthy", 4, 7)]),
                2,
                None,
            ),
            (
                list(vec![doc("Healthy", 5, 10), doc("Degraded", 5, 7)]),
                2,
                None,
            ),
            (list(vec![doc("Healthy", 5, 10)]), 2, None),
            (Value::Null, 1, None),
        ];
        for (docs, members, want) in cases {
            assert_eq!(all_synced(&docs, members, 5), want, "{docs}");
        }
    }

    #[test]
    fn one_deployment_per_member_crash_loops() {
        let plan = Plan::smoke();
        let seeds = seeds(&plan);
        assert_eq!(seeds.len(), plan.pod_deployments);
        assert_eq!(seeds.iter().filter(|s| s.image == CRASH_IMAGE).count(), 1);
        assert!(seeds.iter().all(|s| s.replicas == plan.pod_replicas));
    }
}
