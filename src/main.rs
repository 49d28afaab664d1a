//! The `kube-pulse` binary: parse flags, set up logging and signals, bind,
//! and hand over to the library.

use anyhow::Context;
use clap::Parser;
use kube_pulse::cli::{Cli, Command};
#[cfg(feature = "demo")]
use kube_pulse::demo;
use kube_pulse::{config, serve, shutdown, telemetry};
#[cfg(feature = "demo")]
use kube_pulse_sim as sim;
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let shutdown = shutdown::on_signals();
    match cli.command {
        #[cfg(feature = "demo")]
        Command::Sim(args) => {
            let cluster = sim::SimCluster::start_with_shutdown(args.to_config(), shutdown.clone())
                .await
                .with_context(|| format!("cannot listen on {}", args.listen))?;
            cluster.set_failing_images(args.failing_images.clone());
            let control = match args.control_listen {
                Some(addr) => {
                    let listener = TcpListener::bind(addr)
                        .await
                        .with_context(|| format!("cannot listen on {addr}"))?;
                    println!("control API on http://{}/", listener.local_addr()?);
                    let app = cluster.control_router();
                    let token = shutdown.clone();
                    Some(tokio::spawn(kube_pulse::gateway::serve(
                        listener, app, token,
                    )))
                }
                None => None,
            };
            println!(
                "simulated cluster {} listening on {}",
                cluster.name(),
                cluster.url()
            );
            shutdown.cancelled().await;
            cluster.shutdown().await;
            if let Some(task) = control {
                task.await??;
            }
        }
        #[cfg(feature = "demo")]
        Command::Demo(args) => {
            let auth = args.security.auth_settings();
            auth.check_listener(args.listen)
                .map_err(anyhow::Error::msg)?;
            let listener = TcpListener::bind(args.listen)
                .await
                .with_context(|| format!("cannot listen on {}", args.listen))?;
            println!(
                "kube-pulse demo listening on {}://{}{}",
                scheme(&args.security),
                listener.local_addr()?,
                slash(&args.push.base_path)
            );
            let options = demo::DemoOptions {
                clusters: args.clusters.into(),
                scenario: !args.no_scenario,
                converge: sim::ConvergeConfig {
                    tick: std::time::Duration::from_millis(args.tick_ms.max(10)),
                    ..Default::default()
                },
                transports: args.push.to_config(),
                tasks: args.tasks.to_settings(),
                base_path: args.push.base_path.clone(),
                auth,
                tls: args.security.tls(),
            };
            demo::run(listener, options, shutdown).await?;
        }
        #[cfg(not(feature = "demo"))]
        Command::Sim(_) | Command::Demo(_) => {
            eprintln!(
                "error: this kube-pulse was built without the simulator (the `demo` feature); \
                 `demo` and `sim` need a build with default features"
            );
            std::process::exit(2);
        }
        Command::Serve(args) => {
            let (clusters, file_listen, pipeline, health) = match (&args.config, &args.kubeconfig) {
                (Some(path), _) => {
                    let file = config::load_file(path)?;
                    let pipeline = file.pipeline();
                    (file.clusters, file.listen, pipeline, file.health)
                }
                (None, Some(path)) => (
                    config::from_kubeconfig(path, &args.contexts)?,
                    None,
                    Default::default(),
                    Default::default(),
                ),
                (None, None) => {
                    anyhow::bail!("serve needs --config FILE or --kubeconfig PATH (or KUBECONFIG)")
                }
            };
            let addr = args
                .listen
                .or(file_listen)
                .unwrap_or(([0, 0, 0, 0], 8080).into());
            let auth = args.security.auth_settings();
            auth.check_listener(addr).map_err(anyhow::Error::msg)?;
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            println!(
                "kube-pulse listening on {}://{}{}",
                scheme(&args.security),
                listener.local_addr()?,
                slash(&args.push.base_path)
            );
            let settings = serve::Settings {
                pipeline,
                transports: args.push.to_config(),
                health,
                tasks: args.tasks.to_settings(),
                base_path: args.push.base_path.clone(),
                auth,
                tls: args.security.tls(),
            };
            serve::run(listener, clusters, settings, shutdown).await?;
        }
    }
    Ok(())
}

fn scheme(security: &kube_pulse::cli::SecurityArgs) -> &'static str {
    if security.tls_cert.is_some() {
        "https"
    } else {
        "http"
    }
}

/// `/` or `{base}/`: where the UI is.
fn slash(base: &str) -> String {
    if base == "/" {
        "/".into()
    } else {
        format!("{base}/")
    }
}
