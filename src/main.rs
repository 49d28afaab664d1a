//! The `kube-pulse` binary: parse flags, set up logging and signals, then
//! hand over to the library: resolve the configuration, start, bind, serve.

use clap::Parser;
use kube_pulse::cli::{Cli, Command};
use kube_pulse::gateway::Gateway;
use kube_pulse::http::server;
use kube_pulse::pipeline::reload::Reloader;
use kube_pulse::{shutdown, telemetry};
use tokio_util::sync::CancellationToken;

/// jemalloc rather than glibc's malloc: over a fleet's pod watch it took a
/// third less CPU and gave back memory freed when on-demand pod watches
/// stopped, which glibc's arenas kept (docs/benchmarks/25-fleet-scale.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let shutdown = shutdown::on_signals();
    // Boxed: the gateway's start makes a large future.
    match Box::pin(run(cli.command, shutdown)).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, shutdown: CancellationToken) -> kube_pulse::Result<()> {
    match command {
        #[cfg(feature = "demo")]
        Command::Sim(args) => kube_pulse::cli::sim::run(*args, shutdown).await,
        #[cfg(feature = "demo")]
        Command::Demo(args) => {
            let (addr, options) = args.resolve()?;
            // Boxed: the demo's start makes a large future.
            let demo = Box::pin(kube_pulse::demo::Demo::start(options, &shutdown)).await?;
            let listener = server::bind(addr).await?;
            println!("{}", demo.gateway().listening("kube-pulse demo", &listener));
            if let Some(karpor) = demo.karpor_url() {
                println!(
                    "simulated Karpor apiserver on {karpor} (kubectl --server {karpor} get clusters -o yaml)"
                );
            }
            demo.serve(listener).await
        }
        #[cfg(not(feature = "demo"))]
        Command::Sim(_) | Command::Demo(_) => {
            eprintln!(
                "error: this kube-pulse was built without the simulator (the `demo` feature); \
                 `demo` and `sim` need a build with default features"
            );
            std::process::exit(2)
        }
        Command::Serve(args) => {
            let (addr, config) = args.resolve().await?;
            let gateway = Gateway::start(config, &shutdown).await?;
            if let Some(source) = args.member_source() {
                let reloader = Reloader::new(source, gateway.member_union().clone()).await;
                reloader.spawn(args.reload_interval(), shutdown.clone())?;
            }
            let listener = server::bind(addr).await?;
            println!("{}", gateway.listening("kube-pulse", &listener));
            gateway.serve(listener, axum::Router::new()).await
        }
        Command::Agent(args) => {
            let (addr, settings) = args.resolve().await?;
            let agent = Box::pin(kube_pulse::agent::Agent::start(settings, &shutdown)).await?;
            let listener = server::bind(addr).await?;
            println!(
                "kube-pulse agent (livez, readyz, metrics) listening on http://{}/",
                listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|_| "?".into())
            );
            agent.serve(listener).await
        }
        Command::AgentKey(args) => {
            print!("{}", args.run()?);
            Ok(())
        }
        Command::HubKey(args) => {
            println!("{}", args.run()?);
            Ok(())
        }
    }
}
