//! Push members (docs/AGENT.md; docs/BENCHMARKS.md, scenario 21): the
//! release `kube-pulse agent` over a simulated member of
//! `agent_deployments × agent_replicas` pods, publishing into a
//! `nats-server` locked as deployed (the hub's user with a password, the
//! agent its own nkey user), and one hub (`kube-pulse serve` with Leases on
//! a simulated host cluster) serving that member pushed and a second,
//! identical member pulled directly.
//!
//! Measured: the agent's RSS and CPU (utime + stime from `/proc`) and its
//! reports (heartbeats and documents, from its `/metrics` counters) over an
//! idle window, then over a window of changes in which a Deployment of each
//! member gets a new image `registry.example/bench:ts<ns>x`, one change at a
//! time, each waited for on an SSE subscriber of the hub: the change's
//! latency through the agent against the pulled member's; then over a
//! churn window in which ten Deployments of the pushed member are scaled
//! to half and back (pods deleted and created) every `pod_churn_every`.
//!
//! Bounded: sizes and counts from the plan; every wait has a deadline.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kube_pulse_sim::{ConvergeConfig, SimCluster, SimConfig, WorkloadSeed};
use serde::Serialize;
use serde_json::Value;

use crate::load::{Via, now_nanos};
use crate::proc;
use crate::registry::stop;
use crate::scenarios::{Crowd, Plan, percentile};
use crate::targets::{HttpClient, free_port, get, http_client, nats_server, wait_for_port};

/// The member the agent pushes, and the one the hub pulls.
const PUSHED: &str = "edge";
const PULLED: &str = "pulled";
/// The namespace of every Deployment, and the one whose image changes.
const NAMESPACE: &str = "shop";
const CHANGED: &str = "d0";
/// The hub's NATS user and password (loopback, a server of this run's own).
const HUB_USER: &str = "kube-pulse";
const HUB_PASSWORD: &str = "pulse-bench-hub";
/// The hub's Lease duration (short: the one replica takes the members at once).
const LEASE: Duration = Duration::from_secs(3);
/// How long the members may take to create their pods, and the hub to serve them.
const SETTLE_LIMIT: Duration = Duration::from_secs(600);
/// Deployments of the pushed member the churn window scales (`d1`…).
const CHURNED: usize = 10;
/// How long one change may take to reach its subscriber before it counts as lost.
const DELIVERY_LIMIT: Duration = Duration::from_secs(5);

/// The scenario's run.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct PushMembers {
    /// Pods per member: Deployments × replicas.
    pub(crate) deployments: usize,
    pub(crate) pods_per_member: usize,
    /// The agent's `--heartbeat`.
    pub(crate) heartbeat_seconds: u64,
    /// Seconds the simulators took to create every pod of both members.
    pub(crate) members_ready_seconds: f64,
    /// From the agent's start until the hub served every app of the pushed
    /// member (in whatever phase: its pods may not be ready yet).
    pub(crate) agent_ready_seconds: f64,
    /// Objects the agent holds and the watches it runs, as its cluster document says at the end.
    pub(crate) agent_objects: u64,
    pub(crate) agent_watches: u64,
    /// Pods the churn window deleted and created (scaled down and back).
    pub(crate) pods_churned: u64,
    /// The idle window, the window of changes, and the churn window.
    pub(crate) windows: Vec<AgentWindow>,
    /// The change-to-frame latency through the agent, and pulled directly.
    pub(crate) latency: Vec<PathLatency>,
    pub(crate) error: Option<String>,
}

/// The agent (and, for context, the hub and NATS) over one window.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct AgentWindow {
    pub(crate) label: &'static str,
    pub(crate) seconds: f64,
    /// The agent's CPU seconds (user + system), and per second of the window (cores).
    pub(crate) agent_cpu_seconds: f64,
    pub(crate) agent_cores: f64,
    /// The agent's RSS at the end, and its peak (`VmHWM`), in MB.
    pub(crate) agent_rss_mb: f64,
    pub(crate) agent_peak_rss_mb: f64,
    /// The hub's and nats-server's CPU seconds, and this process's (the simulators and the subscribers).
    pub(crate) hub_cpu_seconds: f64,
    pub(crate) nats_cpu_seconds: f64,
    pub(crate) bench_cpu_seconds: f64,
    pub(crate) hub_rss_mb: f64,
    /// Reports the agent published over the window, by kind, and their bytes
    /// (subject, payload and signature header).
    pub(crate) heartbeats: u64,
    pub(crate) heartbeat_bytes: u64,
    pub(crate) docs: u64,
    pub(crate) doc_bytes: u64,
}

/// One member's change-to-frame latency.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct PathLatency {
    /// `push` (through the agent and its stream) or `pull` (the hub watches the member).
    pub(crate) mode: &'static str,
    pub(crate) changes: u64,
    pub(crate) delivered: u64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
}

/// The agent's counters as `/metrics` shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    heartbeats: u64,
    heartbeat_bytes: u64,
    docs: u64,
    doc_bytes: u64,
}

/// Reads `kube_pulse_agent_reports_total{kind}` and
/// `kube_pulse_agent_report_bytes_total{kind}` from a Prometheus text page.
fn counters(text: &str) -> Counters {
    let mut c = Counters::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let value = value as u64;
        let heartbeat = series.contains("kind=\"heartbeat\"");
        let doc = series.contains("kind=\"doc\"");
        if series.starts_with("kube_pulse_agent_reports_total{") {
            if heartbeat {
                c.heartbeats = value;
            } else if doc {
                c.docs = value;
            }
        } else if series.starts_with("kube_pulse_agent_report_bytes_total{") {
            if heartbeat {
                c.heartbeat_bytes = value;
            } else if doc {
                c.doc_bytes = value;
            }
        }
    }
    c
}

/// Deployments of one member, all healthy.
fn seeds(plan: &Plan) -> Vec<WorkloadSeed> {
    (0..plan.agent_deployments)
        .map(|d| WorkloadSeed {
            kind: "Deployment".into(),
            namespace: NAMESPACE.into(),
            name: format!("d{d}"),
            replicas: plan.agent_replicas,
            image: "registry.example/app:1".into(),
        })
        .collect()
}

fn pod_count(sim: &SimCluster) -> usize {
    sim.store()
        .catalog()
        .find("", "v1", "pods")
        .map_or(0, |def| sim.store().snapshot(def).len())
}

/// Scales `d1`…`d{scaled}` of `sim` to half their replicas (`down`) or
/// back; the pods deleted or created.
fn churn(sim: &SimCluster, plan: &Plan, scaled: usize, down: bool) -> anyhow::Result<u64> {
    let half = plan.agent_replicas / 2;
    let replicas = plan.agent_replicas - if down { half } else { 0 };
    for d in 1..=scaled {
        let manifest = kube_pulse_sim::workload_manifest(&WorkloadSeed {
            kind: "Deployment".into(),
            namespace: NAMESPACE.into(),
            name: format!("d{d}"),
            replicas,
            image: "registry.example/app:1".into(),
        });
        sim.apply(&manifest)
            .map_err(|e| anyhow::anyhow!("scaling d{d} on {}: {e:?}", sim.name()))?;
    }
    Ok(u64::from(half) * scaled as u64)
}

/// Sets `CHANGED`'s image in `sim` to the marker of `ts`.
fn change(sim: &SimCluster, ts: u64) -> anyhow::Result<()> {
    let def = sim
        .store()
        .catalog()
        .find("apps", "v1", "deployments")
        .expect("deployments are served")
        .clone();
    sim.store()
        .mutate(
            &def,
            Some(NAMESPACE),
            CHANGED,
            kube_pulse_sim::object::UpdateScope::Main,
            false,
            |current| {
                let mut next = current.clone();
                next["spec"]["template"]["spec"]["containers"][0]["image"] =
                    serde_json::json!(format!("registry.example/bench:ts{ts}x"));
                Ok(next)
            },
        )
        .map_err(|e| anyhow::anyhow!("simulator {}: {e:?}", sim.name()))?;
    Ok(())
}

/// A process of the run, its log in a file.
struct Process {
    child: Child,
    log: PathBuf,
}

impl Process {
    fn spawn(command: &mut Command, log: PathBuf) -> anyhow::Result<Self> {
        let child = command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        Ok(Self { child, log })
    }

    fn pids(&self) -> Vec<u32> {
        proc::tree(&[self.child.id()])
    }

    /// The last lines of its log, for an error.
    fn tail(&self, name: &str) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
        format!(
            "{name}: {}",
            if tail.is_empty() { "(no log)" } else { &tail }
        )
    }
}

/// What the run starts: NATS, the hub and the agent, their addresses.
struct Fleet {
    nats: Process,
    hub: Process,
    agent: Process,
    hub_addr: SocketAddr,
    agent_addr: SocketAddr,
}

impl Fleet {
    async fn start(
        bin: &Path,
        dir: &Path,
        pushed: &SimCluster,
        pulled: &SimCluster,
        host: &SimCluster,
        plan: &Plan,
    ) -> anyhow::Result<Self> {
        // The agent's identity and the hub key, by the commands an operator runs.
        let seed = dir.join("agent.nk");
        let issued = Command::new(bin)
            .args(["agent-key", "--member", PUSHED, "--seed-out"])
            .arg(&seed)
            .output()?;
        anyhow::ensure!(issued.status.success(), "kube-pulse agent-key failed");
        let agent_key = String::from_utf8_lossy(&issued.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("agent public key: ").map(str::to_string))
            .ok_or_else(|| anyhow::anyhow!("agent-key printed no public key"))?;
        let signing_key = dir.join("signing.key");
        std::fs::write(
            &signing_key,
            "kube-pulse bench signing key, 32 bytes or more\n",
        )?;
        let hub_key = Command::new(bin)
            .args(["hub-key", "--signing-key-file"])
            .arg(&signing_key)
            .output()?;
        anyhow::ensure!(hub_key.status.success(), "kube-pulse hub-key failed");
        let hub_key = String::from_utf8_lossy(&hub_key.stdout).trim().to_string();

        // NATS as deploy/nats/ locks it: the hub's user, the agent's nkey user.
        let nats_port = free_port();
        let nats_conf = dir.join("nats.conf");
        std::fs::write(
            &nats_conf,
            format!(
                "listen: 127.0.0.1:{nats_port}\njetstream {{ store_dir: '{}' }}\naccounts {{ KUBE_PULSE {{ jetstream: enabled, users: [\n{{ user: {HUB_USER}, password: {HUB_PASSWORD} }}\n{}\n] }} }}\n",
                dir.join("nats").display(),
                kube_pulse::scale::agents::nats_user_entry(PUSHED, &agent_key)
            ),
        )?;
        let nats = Process::spawn(
            Command::new(nats_server()?).arg("-c").arg(&nats_conf),
            dir.join("nats.log"),
        )?;
        wait_for_port(([127, 0, 0, 1], nats_port).into(), "nats-server").await?;
        let nats_url = format!("nats://127.0.0.1:{nats_port}");

        // The hub: one replica, the pushed member by its agent's key, the
        // other pulled.
        let hub_port = free_port();
        let config = dir.join("hub.yaml");
        std::fs::write(
            &config,
            format!(
                "clusters:\n- {{name: {PUSHED}, mode: push, agent: {agent_key}}}\n- {{name: {PULLED}, server: '{}'}}\n",
                pulled.url()
            ),
        )?;
        let password = dir.join("password");
        std::fs::write(&password, format!("{HUB_PASSWORD}\n"))?;
        let host_kubeconfig = dir.join("host.kubeconfig");
        std::fs::write(&host_kubeconfig, host.kubeconfig("host"))?;
        let hub = Process::spawn(
            Command::new(bin)
                .args(["serve", "--config"])
                .arg(&config)
                .args(["--listen", &format!("127.0.0.1:{hub_port}")])
                .arg("--lease-kubeconfig")
                .arg(&host_kubeconfig)
                .args(["--lease-namespace", "default"])
                .args(["--lease-duration", &LEASE.as_secs().to_string()])
                .args(["--replica-id", "r0"])
                .args(["--nats", &nats_url, "--nats-user", HUB_USER])
                .arg("--nats-password-file")
                .arg(&password)
                .arg("--nats-signing-key-file")
                .arg(&signing_key)
                .env("RUST_LOG", "warn"),
            dir.join("hub.log"),
        )?;
        let hub_addr: SocketAddr = ([127, 0, 0, 1], hub_port).into();
        wait_for_port(hub_addr, "kube-pulse serve").await?;

        // The agent, with the member's kubeconfig (the hub never has it).
        let kubeconfig = dir.join("member.kubeconfig");
        std::fs::write(&kubeconfig, pushed.kubeconfig(PUSHED))?;
        let agent_port = free_port();
        let agent = Process::spawn(
            Command::new(bin)
                .args(["agent", "--member", PUSHED, "--nats", &nats_url])
                .arg("--nats-nkey-seed")
                .arg(&seed)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["--hub-key", &hub_key])
                .args(["--heartbeat", &plan.agent_heartbeat.as_secs().to_string()])
                .args(["--listen", &format!("127.0.0.1:{agent_port}")])
                .env("RUST_LOG", "warn"),
            dir.join("agent.log"),
        )?;
        let agent_addr: SocketAddr = ([127, 0, 0, 1], agent_port).into();
        Ok(Self {
            nats,
            hub,
            agent,
            hub_addr,
            agent_addr,
        })
    }

    fn tails(&self) -> String {
        [
            self.agent.tail("agent"),
            self.hub.tail("hub"),
            self.nats.tail("nats-server"),
        ]
        .join("; ")
    }

    /// Agent first, NATS last: the hub leaves the stream before it goes.
    fn stop(self) {
        stop(self.agent.child);
        stop(self.hub.child);
        stop(self.nats.child);
    }
}

/// How many apps of `member` the hub serves (in `phase`, if given).
async fn served(http: &HttpClient, hub: SocketAddr, member: &str, phase: Option<&str>) -> usize {
    let url = format!("http://{hub}/api/v1/apps?cluster={member}");
    let body = get(http, &url).await.unwrap_or_default();
    let docs: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    docs["items"].as_array().map_or(0, |items| {
        items
            .iter()
            .filter(|d| phase.is_none_or(|p| d["phase"] == p))
            .count()
    })
}

/// Reads the agent's counters, or none when `/metrics` does not answer.
async fn read_counters(http: &HttpClient, agent: SocketAddr) -> anyhow::Result<Counters> {
    let text = get(http, &format!("http://{agent}/metrics")).await?;
    Ok(counters(&text))
}

/// What a window starts from.
struct Mark {
    at: Instant,
    counters: Counters,
    agent: f64,
    hub: f64,
    nats: f64,
    bench: f64,
}

impl Mark {
    async fn take(http: &HttpClient, fleet: &Fleet) -> anyhow::Result<Self> {
        Ok(Self {
            at: Instant::now(),
            counters: read_counters(http, fleet.agent_addr).await?,
            agent: proc::cpu_seconds(&fleet.agent.pids()),
            hub: proc::cpu_seconds(&fleet.hub.pids()),
            nats: proc::cpu_seconds(&fleet.nats.pids()),
            bench: proc::cpu_seconds(&[std::process::id()]),
        })
    }

    /// The window from this mark until now.
    async fn window(
        &self,
        label: &'static str,
        http: &HttpClient,
        fleet: &Fleet,
    ) -> anyhow::Result<AgentWindow> {
        let end = Mark::take(http, fleet).await?;
        let seconds = end.at.duration_since(self.at).as_secs_f64();
        let agent_pids = fleet.agent.pids();
        let agent_cpu_seconds = end.agent - self.agent;
        Ok(AgentWindow {
            label,
            seconds,
            agent_cpu_seconds,
            agent_cores: agent_cpu_seconds / seconds.max(0.001),
            agent_rss_mb: proc::rss(&agent_pids) as f64 / 1e6,
            agent_peak_rss_mb: proc::peak_rss(&agent_pids) as f64 / 1e6,
            hub_cpu_seconds: end.hub - self.hub,
            nats_cpu_seconds: end.nats - self.nats,
            bench_cpu_seconds: end.bench - self.bench,
            hub_rss_mb: proc::rss(&fleet.hub.pids()) as f64 / 1e6,
            heartbeats: end.counters.heartbeats - self.counters.heartbeats,
            heartbeat_bytes: end.counters.heartbeat_bytes - self.counters.heartbeat_bytes,
            docs: end.counters.docs - self.counters.docs,
            doc_bytes: end.counters.doc_bytes - self.counters.doc_bytes,
        })
    }
}

/// One change on `sim`, waited for on `seen` (its subscriber); whether it arrived.
async fn one_change(sim: &SimCluster, seen: &crate::load::Seen) -> anyhow::Result<bool> {
    let ts = now_nanos();
    change(sim, ts)?;
    let deadline = Instant::now() + DELIVERY_LIMIT;
    while Instant::now() < deadline {
        if seen.last.load(Ordering::Relaxed) >= ts {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(false)
}

/// The changes, alternating which member goes first; the latencies of both.
async fn changes(
    hub: SocketAddr,
    members: [&SimCluster; 2],
    plan: &Plan,
) -> anyhow::Result<Vec<PathLatency>> {
    let via = |i: usize| Via::Sse {
        addr: hub,
        path: format!(
            "/api/v1/events?topic=apps/{}/{NAMESPACE}/{CHANGED}",
            [PUSHED, PULLED][i]
        ),
    };
    let crowd = Crowd::connect(via, 2, 0).await?;
    let measured = async {
        // A warm-up change each, not counted.
        for (i, sim) in members.iter().enumerate() {
            anyhow::ensure!(
                one_change(sim, &crowd.seen[i]).await?,
                "the warm-up change on {} did not arrive within {DELIVERY_LIMIT:?}",
                sim.name()
            );
        }
        for s in &crowd.seen {
            s.latencies.lock().clear();
        }
        let mut delivered = [0u64; 2];
        for round in 0..plan.agent_changes {
            let started = Instant::now();
            for k in 0..2 {
                let i = (round + k) % 2;
                if one_change(members[i], &crowd.seen[i]).await? {
                    delivered[i] += 1;
                }
            }
            tokio::time::sleep(plan.agent_change_every.saturating_sub(started.elapsed())).await;
        }
        Ok(["push", "pull"]
            .into_iter()
            .enumerate()
            .map(|(i, mode)| {
                let mut latencies = crowd.seen[i].latencies.lock().clone();
                latencies.sort_unstable();
                PathLatency {
                    mode,
                    changes: plan.agent_changes as u64,
                    delivered: delivered[i],
                    p50_ms: percentile(&latencies, 0.5),
                    p99_ms: percentile(&latencies, 0.99),
                    max_ms: percentile(&latencies, 1.0),
                }
            })
            .collect())
    }
    .await;
    crowd.close().await;
    measured
}

/// The measured part, once everything runs.
async fn measure(
    fleet: &Fleet,
    members: [&SimCluster; 2],
    plan: &Plan,
    run: &mut PushMembers,
) -> anyhow::Result<()> {
    let http = http_client();
    let started = Instant::now();
    let deadline = started + SETTLE_LIMIT;
    loop {
        let apps = |phase| served(&http, fleet.hub_addr, PUSHED, phase);
        if run.agent_ready_seconds == 0.0 && apps(None).await >= plan.agent_deployments {
            run.agent_ready_seconds = started.elapsed().as_secs_f64();
        }
        let running = |member| served(&http, fleet.hub_addr, member, Some("Running"));
        if running(PUSHED).await >= plan.agent_deployments
            && running(PULLED).await >= plan.agent_deployments
        {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the hub did not serve both members' apps Running within {SETTLE_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_for_port(fleet.agent_addr, "kube-pulse agent").await?;
    tokio::time::sleep(plan.settle).await;

    eprintln!("agents: idle for {:?}", plan.agent_window);
    let mark = Mark::take(&http, fleet).await?;
    tokio::time::sleep(plan.agent_window).await;
    run.windows.push(mark.window("idle", &http, fleet).await?);

    eprintln!(
        "agents: {} changes on each member, one every {:?}",
        plan.agent_changes, plan.agent_change_every
    );
    let mark = Mark::take(&http, fleet).await?;
    run.latency = changes(fleet.hub_addr, members, plan).await?;
    run.windows
        .push(mark.window("changes", &http, fleet).await?);

    let scaled = plan.agent_deployments.saturating_sub(1).min(CHURNED);
    eprintln!(
        "agents: {scaled} Deployments of the pushed member scaled every {:?} for {:?}",
        plan.pod_churn_every, plan.agent_window
    );
    let mark = Mark::take(&http, fleet).await?;
    let mut down = true;
    while mark.at.elapsed() < plan.agent_window {
        run.pods_churned += churn(members[0], plan, scaled, down)?;
        down = !down;
        let left = plan.agent_window.saturating_sub(mark.at.elapsed());
        tokio::time::sleep(plan.pod_churn_every.min(left)).await;
    }
    run.windows.push(mark.window("churn", &http, fleet).await?);
    let cluster = get(
        &http,
        &format!("http://{}/api/v1/clusters/{PUSHED}", fleet.hub_addr),
    )
    .await
    .unwrap_or_default();
    let cluster: Value = serde_json::from_str(&cluster).unwrap_or(Value::Null);
    run.agent_objects = cluster["cache"]["objects"].as_u64().unwrap_or(0);
    run.agent_watches = cluster["resources"]["total"].as_u64().unwrap_or(0);
    for w in &run.windows {
        eprintln!(
            "  {}: agent {:.3} cores, RSS {:.1} MB; heartbeats {:.2}/s {:.0} B/s; docs {:.2}/s {:.0} B/s",
            w.label,
            w.agent_cores,
            w.agent_rss_mb,
            w.heartbeats as f64 / w.seconds,
            w.heartbeat_bytes as f64 / w.seconds,
            w.docs as f64 / w.seconds,
            w.doc_bytes as f64 / w.seconds,
        );
    }
    for l in &run.latency {
        eprintln!(
            "  {}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, {} of {} delivered",
            l.mode, l.p50_ms, l.p99_ms, l.max_ms, l.delivered, l.changes
        );
    }
    Ok(())
}

/// The scenario (the caller has checked that nats-server is installed).
pub(crate) async fn push_members(bin: &Path, plan: &Plan) -> anyhow::Result<PushMembers> {
    let mut run = PushMembers {
        deployments: plan.agent_deployments,
        pods_per_member: plan.agent_deployments * plan.agent_replicas as usize,
        heartbeat_seconds: plan.agent_heartbeat.as_secs(),
        ..PushMembers::default()
    };
    let started = Instant::now();
    let mut sims = Vec::new();
    for name in [PUSHED, PULLED] {
        sims.push(
            SimCluster::start(SimConfig {
                workloads: seeds(plan),
                // Each Deployment reaches its replicas (or rolls out) in one step.
                converge: ConvergeConfig {
                    tick: plan.pod_tick,
                    pods_per_tick: plan.agent_replicas,
                },
                window: 10_000,
                ..SimConfig::named(name)
            })
            .await?,
        );
    }
    let host = SimCluster::start(SimConfig::named("host")).await?;
    let deadline = started + SETTLE_LIMIT;
    while sims.iter().any(|s| pod_count(s) < run.pods_per_member) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the members did not create their pods within {SETTLE_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    run.members_ready_seconds = started.elapsed().as_secs_f64();

    let dir = tempfile::tempdir()?;
    let result = match Fleet::start(bin, dir.path(), &sims[0], &sims[1], &host, plan).await {
        Ok(fleet) => {
            let measured = measure(&fleet, [&sims[0], &sims[1]], plan, &mut run).await;
            let measured = measured.map_err(|e| anyhow::anyhow!("{e} ({})", fleet.tails()));
            fleet.stop();
            measured
        }
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        run.error = Some(e.to_string());
    }
    for sim in sims {
        sim.shutdown().await;
    }
    host.shutdown().await;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_by_kind() {
        let page = "# HELP kube_pulse_agent_reports_total On `kube-pulse agent`: reports published.\n\
            # TYPE kube_pulse_agent_reports_total counter\n\
            kube_pulse_agent_reports_total{kind=\"doc\"} 212\n\
            kube_pulse_agent_reports_total{kind=\"heartbeat\"} 7\n\
            kube_pulse_agent_report_bytes_total{kind=\"doc\"} 401234\n\
            kube_pulse_agent_report_bytes_total{kind=\"heartbeat\"} 3150\n\
            kube_pulse_agent_rejected_total{cluster=\"x\",reason=\"stale\"} 5\n";
        assert_eq!(
            counters(page),
            Counters {
                heartbeats: 7,
                heartbeat_bytes: 3150,
                docs: 212,
                doc_bytes: 401_234,
            }
        );
        assert_eq!(counters(""), Counters::default());
    }

    #[test]
    fn every_deployment_of_a_member_is_healthy_and_sized() {
        let plan = Plan::smoke();
        let seeds = seeds(&plan);
        assert_eq!(seeds.len(), plan.agent_deployments);
        assert!(seeds.iter().any(|s| s.name == CHANGED));
        assert!(seeds.iter().all(|s| s.replicas == plan.agent_replicas));
    }
}
