//! `pulse-bench`: kube-pulse side by side with Pushpin, Nginx + Nchan and a
//! raw tokio baseline, on loopback, in one run (docs/BENCHMARKS.md).
//!
//! `pulse-bench [--smoke] [--out DIR] [--only SCENARIO,…] [--servers …]`
//! runs the scenarios and writes `results.json`, `results.md` and
//! the plots (`latency.svg`, `connections.svg`, `objects-rss.svg`,
//! `objects-sync.svg`, `pods-rss.svg`, `cpu-per-delivery.svg`); `pulse-bench raw-server` is
//! the baseline server it spawns.

mod agents;
mod compression;
mod curves;
mod latency;
mod load;
mod members;
mod objects;
mod pin;
mod plot;
mod podcurve;
mod podwatch;
mod proc;
mod queries;
mod raw;
mod registry;
mod replicas;
mod report;
mod scenarios;
mod targets;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use targets::Kind;

#[derive(Parser)]
#[command(about = "Benchmarks kube-pulse against Pushpin, Nchan and a raw baseline")]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Small sizes and short steps: checks the harness (CI), measures nothing.
    #[arg(long)]
    smoke: bool,
    /// Where results go.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Scenarios to run (default: all): fanout, ws, idle, slow, narrow, diff, sync, pods, registry,
    /// podcurve, connections, objects, cpu, latency, replicas, members, agents, queries.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Servers to compare (default: all that are installed): kube, pushpin,
    /// nchan, raw; `copy` adds a second raw baseline (an A/A control of the
    /// latency comparison).
    #[arg(long, value_delimiter = ',')]
    servers: Vec<String>,
    /// The kube-pulse binary (default: next to this one).
    #[arg(long)]
    kube_pulse: Option<PathBuf>,
    /// ConfigMap counts of the registry scenario, one gateway run each (default: the plan's).
    #[arg(long, value_delimiter = ',')]
    registry_sizes: Vec<usize>,
    /// Servers on core 0, the benchmark on the other cores (needs `taskset`).
    #[arg(long)]
    pin: bool,
    /// Rounds of the latency scenario (default: the plan's).
    #[arg(long)]
    latency_rounds: Option<usize>,
}

#[derive(Subcommand)]
enum Cmd {
    /// The raw baseline server (spawned by the benchmark).
    RawServer {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        control_port: u16,
    },
    /// One member count of the pod curve, in a process of its own (spawned
    /// by `--only podcurve`; prints its points as JSON).
    #[command(hide = true)]
    PodcurveSeries {
        #[arg(long)]
        members: usize,
    },
}

fn installed(program: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Descriptors the connection curve's largest point (20 000 sockets in one
/// process, client side and server side) needs, with room to spare.
const WANTED_FDS: u64 = 50_000;

/// Tens of thousands of sockets: lifts the descriptor limit to `WANTED_FDS`
/// where the process may raise its hard limit (root, CAP_SYS_RESOURCE),
/// else the soft limit to the hard one. Servers inherit it.
fn raise_fd_limit() -> anyhow::Result<u64> {
    let (_, hard) = rlimit::Resource::NOFILE.get()?;
    if hard < WANTED_FDS
        && rlimit::Resource::NOFILE
            .set(WANTED_FDS, WANTED_FDS)
            .is_err()
    {
        tracing::debug!(hard, "the hard descriptor limit stays");
    }
    Ok(rlimit::increase_nofile_limit(u64::MAX)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let limit = raise_fd_limit()?;
    if let Some(Cmd::RawServer { port, control_port }) = cli.command {
        return raw::run(port, control_port).await;
    }
    let bin = match cli.kube_pulse {
        Some(b) => b,
        None => std::env::current_exe()?.with_file_name("kube-pulse"),
    };
    anyhow::ensure!(
        bin.exists(),
        "no kube-pulse binary at {} (cargo build it, or --kube-pulse)",
        bin.display()
    );
    let mut plan = if cli.smoke {
        scenarios::Plan::smoke()
    } else {
        scenarios::Plan::full()
    };
    if !cli.registry_sizes.is_empty() {
        plan.registry_sizes = cli.registry_sizes.clone();
    }
    if let Some(Cmd::PodcurveSeries { members }) = cli.command {
        let run = podcurve::series(&bin, &plan, members).await?;
        println!("{}", serde_json::to_string(&run)?);
        return Ok(());
    }
    if let Some(rounds) = cli.latency_rounds {
        plan.latency_rounds = rounds;
    }
    if cli.pin {
        pin::start()?;
    }
    let mut servers = vec![Kind::KubePulse];
    let mut skipped = Vec::new();
    for (kind, program) in [(Kind::Pushpin, "pushpin"), (Kind::Nchan, "nginx")] {
        if installed(program) {
            servers.push(kind);
        } else {
            skipped.push(format!("{} ({program} is not installed)", kind.name()));
        }
    }
    servers.push(Kind::Raw);
    // The A/A control runs only when asked for by name.
    if cli.servers.iter().any(|s| s.eq_ignore_ascii_case("copy")) {
        servers.push(Kind::RawCopy);
    }
    if !cli.servers.is_empty() {
        servers.retain(|k| {
            cli.servers.iter().any(|s| {
                k.name()
                    .to_ascii_lowercase()
                    .starts_with(&s.to_ascii_lowercase())
            })
        });
    }
    let wants = |name: &str| cli.only.is_empty() || cli.only.iter().any(|o| o == name);
    let mut results = report::Results::new(&plan, limit, skipped);
    eprintln!("pulse-bench: {} servers, fd limit {limit}", servers.len());

    if wants("fanout") {
        for &n in &plan.fanout_sizes {
            for &kind in &servers {
                eprintln!("fanout: {} with {n} SSE subscribers", kind.name());
                let target = scenarios::start(kind, &bin, 1).await?;
                results
                    .fanout
                    .push(scenarios::sweep(&target, "sse", n, &plan).await);
                target.stop();
            }
        }
    }
    if wants("ws") {
        for &kind in &servers {
            let target = scenarios::start(kind, &bin, 1).await?;
            if target.ws().is_some() {
                eprintln!(
                    "ws: {} with {} WebSocket subscribers",
                    kind.name(),
                    plan.ws_size
                );
                results
                    .ws
                    .push(scenarios::sweep(&target, "ws", plan.ws_size, &plan).await);
            }
            target.stop();
        }
    }
    if wants("idle") {
        for &kind in &servers {
            eprintln!("idle: {} with {} subscribers", kind.name(), plan.idle_size);
            let target = scenarios::start(kind, &bin, 1).await?;
            let sse = |i| target.sse(i, false);
            results
                .idle
                .push(scenarios::idle(&target, plan.idle_size, "SSE", sse).await);
            target.stop();
            let target = scenarios::start(kind, &bin, 1).await?;
            if let Some(ws) = target.ws() {
                results.idle.push(
                    scenarios::idle(&target, plan.idle_size, "WebSocket", |_| ws.clone()).await,
                );
            }
            target.stop();
        }
    }
    if wants("slow") {
        for &kind in &servers {
            eprintln!("slow: {}", kind.name());
            let target = scenarios::start(kind, &bin, 1).await?;
            results.slow.push(scenarios::slow(&target, &plan).await);
            target.stop();
        }
    }
    if wants("narrow") && servers.contains(&Kind::KubePulse) {
        eprintln!("narrow: kube-pulse, {} apps", plan.narrow_size);
        let target = scenarios::start(Kind::KubePulse, &bin, plan.narrow_size).await?;
        results.narrow = Some(scenarios::narrow(&target, &plan).await);
        target.stop();
    }
    if wants("diff") {
        eprintln!("diff: the demo scenario for {:?}", plan.diff_duration);
        results.diff = Some(Box::pin(scenarios::diff(&plan)).await?);
    }
    if wants("sync") {
        eprintln!(
            "sync: {} clusters × {} objects",
            plan.sync_clusters, plan.sync_objects
        );
        results.initial_sync = Some(scenarios::initial_sync(&plan).await?);
    }
    if wants("pods") {
        eprintln!(
            "pods: {} members × {} pods, the pod watch on and off",
            plan.pod_members,
            plan.pod_deployments * plan.pod_replicas as usize
        );
        results.pod_watch = Some(podwatch::pod_fleet(&bin, &plan).await?);
    }
    if wants("podcurve") && servers.contains(&Kind::KubePulse) {
        eprintln!(
            "podcurve: kube-pulse over {:?} pods in {:?} members",
            plan.podcurve_sizes, plan.podcurve_members
        );
        results.pod_curve = Some(podcurve::pod_curve(&bin, &plan, cli.smoke).await?);
    }
    if wants("registry") {
        eprintln!(
            "registry: kube-pulse over {:?} ConfigMaps",
            plan.registry_sizes
        );
        results.registry = Some(registry::registry_memory(&bin, &plan).await?);
    }
    // The curves leave Pushpin out: it lost messages at 1 000 subscribers
    // and took 43 KiB per idle connection (scenarios 1 and 3).
    let curve_servers: Vec<Kind> = servers
        .iter()
        .copied()
        .filter(|k| *k != Kind::Pushpin)
        .collect();
    if wants("connections") {
        for &kind in &curve_servers {
            for transport in ["SSE", "WebSocket"] {
                eprintln!(
                    "connections: {} over {transport}, {:?}",
                    kind.name(),
                    plan.connection_sizes
                );
                let target = scenarios::start(kind, &bin, 1).await?;
                let curve = curves::connections(&target, transport, &plan, limit).await;
                if let Some(why) = &curve.limited {
                    eprintln!("  stopped: {why}");
                }
                results.connections.push(curve);
                target.stop();
            }
        }
    }
    if wants("objects") && servers.contains(&Kind::KubePulse) {
        eprintln!(
            "objects: kube-pulse over {:?} ConfigMaps in {:?} members",
            plan.objects_sizes, plan.objects_members
        );
        results.objects = Some(objects::objects_curve(&bin, &plan).await?);
    }
    if wants("cpu") {
        for &kind in &curve_servers {
            eprintln!(
                "cpu: {} at {}/s with {:?} SSE subscribers",
                kind.name(),
                plan.cpu_rate,
                plan.cpu_sizes
            );
            let target = scenarios::start(kind, &bin, 1).await?;
            results.cpu.push(curves::cpu(&target, &plan).await);
            target.stop();
        }
    }
    if wants("latency") {
        let compared: Vec<Kind> = [Kind::KubePulse, Kind::Nchan, Kind::Raw, Kind::RawCopy]
            .into_iter()
            .filter(|k| servers.contains(k))
            .collect();
        results.latency = latency::latency(&bin, &compared, &plan).await;
    }
    if wants("replicas") && servers.contains(&Kind::KubePulse) {
        eprintln!(
            "replicas: one process, then {:?} replicas over NATS, {} SSE subscribers",
            plan.replica_counts, plan.replica_subscribers
        );
        results.replicas = replicas::replicas(&bin, &plan).await;
    }
    if wants("members") && servers.contains(&Kind::KubePulse) {
        eprintln!(
            "members: {} Karpor Clusters, {} of them live, {:?}",
            plan.fleet_members, plan.fleet_live, plan.fleet_window
        );
        results.members = Some(members::member_fleet(&bin, &plan).await?);
    }
    if wants("agents") && servers.contains(&Kind::KubePulse) {
        if let Err(e) = targets::nats_server() {
            eprintln!("agents: skipped: {e}");
            results.skipped.push(format!("agents ({e})"));
        } else {
            eprintln!(
                "agents: a push member of {} pods against a pulled one, {:?} idle, {} changes each",
                plan.agent_deployments * plan.agent_replicas as usize,
                plan.agent_window,
                plan.agent_changes
            );
            results.agents = Some(agents::push_members(&bin, &plan).await?);
        }
    }
    if wants("queries") && servers.contains(&Kind::KubePulse) {
        eprintln!(
            "queries: {} app documents, {} live queries (and a tenth), {} changes/s for {:?}",
            plan.query_docs, plan.query_count, plan.query_rate, plan.query_window
        );
        results.queries = Some(queries::live_queries(&plan).await?);
    }
    if wants("compression") && servers.contains(&Kind::KubePulse) {
        eprintln!(
            "compression: {} subscribers to {} apps over SSE and WebSocket, plain and compressed",
            plan.compression_subscribers, plan.compression_apps
        );
        results.compression = Some(compression::compression(&bin, &plan).await?);
    }
    results.write(&cli.out)?;
    eprintln!("results in {}", cli.out.display());
    Ok(())
}
