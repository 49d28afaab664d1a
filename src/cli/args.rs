//! The command line's grammar (`argv, env ──▶ [args] ──▶ settings ──▶
//! gateway, demo, simulator`): the top-level `kube-pulse` command, its
//! subcommands, and the flags of `demo` and `serve`. Every `--help` text is
//! the doc comment of a field here or in shared.rs (the flag groups both
//! commands take) and sim.rs; what the flags become is settings.rs.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::shared::{NatsAuthArgs, NatsUrl, PushArgs, SecurityArgs, TaskArgs};
#[cfg(feature = "demo")]
use super::sim;
use crate::telemetry::LogFormat;

/// kube-pulse: real-time push gateway for Kubernetes status.
#[derive(Debug, Parser)]
#[command(name = "kube-pulse", version, about, long_about = None)]
pub struct Cli {
    /// Log output format (filter with RUST_LOG).
    #[arg(
        long,
        global = true,
        env = "KUBE_PULSE_LOG_FORMAT",
        value_enum,
        default_value = "pretty"
    )]
    pub log_format: LogFormat,
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands: what the binary runs.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one simulated Kubernetes cluster (for kubectl, scripts and tests).
    #[cfg(feature = "demo")]
    Sim(Box<sim::SimArgs>),
    /// Run the embedded demo: simulated member clusters, a scenario and the gateway.
    #[cfg(feature = "demo")]
    Demo(Box<DemoArgs>),
    /// Not in this build (it was built without the `demo` feature).
    #[cfg(not(feature = "demo"))]
    #[command(hide = true)]
    Sim(NotBuilt),
    /// Not in this build (it was built without the `demo` feature).
    #[cfg(not(feature = "demo"))]
    #[command(hide = true)]
    Demo(NotBuilt),
    /// Run the gateway against real member clusters.
    Serve(Box<ServeArgs>),
    /// Run inside a member cluster the hub cannot reach: watch it and push
    /// its status to the hub over NATS (docs/AGENT.md).
    Agent(Box<super::agent::AgentArgs>),
    /// Make a new identity for an agent: writes its nkey seed and prints
    /// the hub config and NATS user entries that trust it.
    AgentKey(super::agent::AgentKeyArgs),
    /// Print the replicas' public hub key (agents' --hub-key) from their
    /// signing key.
    HubKey(super::agent::HubKeyArgs),
}

/// The arguments of a subcommand this build leaves out, whatever they are.
#[cfg(not(feature = "demo"))]
#[derive(Debug, Args)]
pub struct NotBuilt {
    /// Whatever followed the subcommand: ignored, the build has none.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub args: Vec<String>,
}

/// Flags of `demo`: the simulated clusters and the gateway in front of them.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Address of the gateway and web demo.
    #[arg(long, env = "KUBE_PULSE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Number of simulated member clusters.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=50))]
    pub clusters: u16,
    /// Do not play the scenario (clusters stay as seeded).
    #[arg(long)]
    pub no_scenario: bool,
    /// Milliseconds between workload controller steps.
    #[arg(long, default_value_t = 500)]
    pub tick_ms: u64,
    /// Put a simulated Karpor apiserver between the clusters and the
    /// gateway: a Cluster object per simulated cluster and Karpor's default
    /// sync registry, members read from there and status written back
    /// (`kubectl --server URL get clusters -o yaml` shows it).
    #[arg(long)]
    pub karpor: bool,
    /// With --karpor: serve Karpor #831's Cluster status schema
    /// (`apiserver`, `version`, `conditions`; set on create as Karpor does);
    /// without it, Karpor 0.6's, which keeps only `healthy`.
    #[arg(long, requires = "karpor")]
    pub karpor_conditions: bool,
    /// With --karpor: Karpor #836's Cluster schema, whose spec has `mode`
    /// (`pull` or `push`: an agent in the member cluster); without it,
    /// `spec.mode` is pruned as by a Karpor without #836.
    #[arg(long, requires = "karpor")]
    pub karpor_push_mode: bool,
    /// Own the members through Leases held in the first simulated cluster
    /// (namespace `default`), as one of several replicas would: the lease
    /// metrics and `/readyz/Leases` show (docs/SCALE-OUT.md).
    #[arg(long)]
    pub leases: bool,
    /// With --leases: publish the members' changes to the NATS JetStream
    /// server at URL (`nats://HOST:PORT`) and read the stream, as one of
    /// several replicas would: the stream metrics and `/readyz/Nats` show
    /// (docs/SCALE-OUT.md).
    #[arg(long, value_name = "URL", requires = "leases")]
    pub nats: Option<NatsUrl>,
    /// With --nats: make the simulated member NAME (`dev`, `staging`,
    /// `prod`, `cluster-4`…) a push member: an agent in the demo's process
    /// watches it and publishes its status over NATS with the gateway's own
    /// NATS login, and the gateway serves it from there, beside the pulled
    /// members (docs/AGENT.md, "In the demo").
    #[arg(
        long,
        value_name = "NAME",
        requires = "nats",
        conflicts_with = "karpor"
    )]
    pub push_member: Option<String>,
    /// With --nats: how the NATS client logs in and checks the server.
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
    /// Push transport limits and the base path.
    #[command(flatten)]
    pub push: PushArgs,
    /// Task deadlines, retention and capacity.
    #[command(flatten)]
    pub tasks: TaskArgs,
    /// Authentication and TLS.
    #[command(flatten)]
    pub security: SecurityArgs,
}

/// Flags of `serve`: the member clusters and the gateway's settings.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the gateway.
    #[arg(long, env = "KUBE_PULSE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// YAML file naming the member clusters (see deploy/config.example.yaml).
    #[arg(long, env = "KUBE_PULSE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Kubeconfig whose contexts are the member clusters; without --config
    /// and without this flag, the file `KUBECONFIG` names (a `KUBECONFIG`
    /// in the environment is no conflict with --config: the file wins).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Context to use (repeatable); all contexts when omitted. Needs
    /// --kubeconfig (or KUBECONFIG), not --config.
    #[arg(long = "context", value_name = "NAME")]
    pub contexts: Vec<String>,
    /// Seconds between checks of the --config file (or kubeconfig) for a
    /// change, which then applies its members and sync registries live
    /// (SIGHUP does at once); 0: only on SIGHUP.
    #[arg(
        long,
        value_name = "SECONDS",
        env = "KUBE_PULSE_CONFIG_RELOAD_INTERVAL",
        default_value_t = 10
    )]
    pub config_reload_interval: u64,
    /// Kubeconfig of Karpor's apiserver (its ConfigMap `karpor-kubeconfig`,
    /// key `config`): its Cluster objects become members and its
    /// SyncRegistry objects sync registries, live, beside --config's.
    #[arg(long, value_name = "PATH", env = "KUBE_PULSE_KARPOR_KUBECONFIG")]
    pub karpor_kubeconfig: Option<PathBuf>,
    /// Context of the Karpor kubeconfig; its current context when omitted.
    #[arg(long, value_name = "NAME", env = "KUBE_PULSE_KARPOR_CONTEXT")]
    pub karpor_context: Option<String>,
    /// Run the exec credential plugins Karpor's Cluster objects name
    /// (commands chosen by whoever may edit Clusters); without it such
    /// clusters show `Unhealthy (CredentialsUnsupported)`.
    #[arg(long, env = "KUBE_PULSE_KARPOR_ALLOW_EXEC")]
    pub karpor_allow_exec: bool,
    /// Address blocks Karpor's Cluster endpoints may reach although denied
    /// (repeatable): by default loopback, link-local (cloud metadata) and
    /// unspecified addresses are refused, and such clusters show
    /// `Unhealthy (EndpointNotAllowed)`.
    #[arg(
        long = "karpor-allow-endpoint",
        value_name = "CIDR",
        env = "KUBE_PULSE_KARPOR_ALLOW_ENDPOINTS",
        value_delimiter = ','
    )]
    pub karpor_allow_endpoints: Vec<crate::http_settings::Cidr>,
    /// Address blocks Karpor's Cluster endpoints may not reach, besides
    /// the default ones (repeatable; e.g. the cluster's service network).
    #[arg(
        long = "karpor-deny-endpoint",
        value_name = "CIDR",
        env = "KUBE_PULSE_KARPOR_DENY_ENDPOINTS",
        value_delimiter = ','
    )]
    pub karpor_deny_endpoints: Vec<crate::http_settings::Cidr>,
    /// Only read Karpor: write no status onto its Cluster and SyncRegistry
    /// objects (by default kube-pulse writes what it computes there).
    #[arg(long, env = "KUBE_PULSE_KARPOR_READ_ONLY")]
    pub karpor_read_only: bool,
    /// This replica's name, in the field manager of its status writes
    /// (`kube-pulse/{replica}`) and as the holder of its Leases; default
    /// the pod's name, else the host name.
    #[arg(long, value_name = "ID", env = "POD_NAME")]
    pub replica_id: Option<String>,
    /// Kubeconfig of the host cluster whose Leases (`coordination.k8s.io/v1`)
    /// decide which replica runs which member: with it, several replicas
    /// share the members, each run by one (docs/SCALE-OUT.md).
    #[arg(long, value_name = "PATH", env = "KUBE_PULSE_LEASE_KUBECONFIG")]
    pub lease_kubeconfig: Option<PathBuf>,
    /// The host cluster of the Leases is the one this pod runs in, reached
    /// through the pod's service account (no kubeconfig); the Leases'
    /// namespace then defaults to the pod's.
    #[arg(
        long,
        env = "KUBE_PULSE_LEASE_IN_CLUSTER",
        conflicts_with = "lease_kubeconfig"
    )]
    pub lease_in_cluster: bool,
    /// Namespace of the Leases; default the kubeconfig context's (else
    /// `default`), or in-cluster the pod's.
    #[arg(long, value_name = "NS", env = "KUBE_PULSE_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Seconds a Lease stays held without renewal (renewed every third of
    /// it); a dead replica's members move after about this long. Default 15.
    #[arg(long, value_name = "SECONDS", env = "KUBE_PULSE_LEASE_DURATION")]
    pub lease_duration: Option<u64>,
    /// `nats://HOST:PORT` of a NATS server with JetStream (or several
    /// servers of one cluster, separated by commas): with Leases, the
    /// owners publish every member's documents there and every replica
    /// serves them all (docs/SCALE-OUT.md). Credentials never go in the
    /// URL (it is refused): see --nats-user and the other --nats-* flags.
    #[arg(
        long,
        value_name = "URL",
        env = "KUBE_PULSE_NATS",
        hide_env_values = true
    )]
    pub nats: Option<NatsUrl>,
    /// Copies of the stream and of the task bucket on distinct servers of a
    /// JetStream cluster, 1 to 5 (default 1; 3 on three servers survives
    /// one of them down). Wins over `streamReplicas` of the file.
    #[arg(long, value_name = "N", env = "KUBE_PULSE_NATS_STREAM_REPLICAS")]
    pub nats_stream_replicas: Option<usize>,
    /// Seconds a push member's agent may send no heartbeat before the
    /// member is `Unknown (AgentLost)` (default 40; docs/AGENT.md). Wins
    /// over `agentGraceSeconds` of the file.
    #[arg(long, value_name = "SECONDS", env = "KUBE_PULSE_AGENT_GRACE",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub agent_grace: Option<u64>,
    /// How the NATS client logs in and checks the server.
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
    /// Push transport limits and the base path.
    #[command(flatten)]
    pub push: PushArgs,
    /// Task deadlines, retention and capacity.
    #[command(flatten)]
    pub tasks: TaskArgs,
    /// Authentication and TLS.
    #[command(flatten)]
    pub security: SecurityArgs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_replay_log_byte_budget_is_a_flag() {
        let parse = |extra: &[&str]| {
            let mut args = vec!["kube-pulse", "serve", "--kubeconfig", "kc"];
            args.extend_from_slice(extra);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Serve(args) => args.push.replay_log_bytes,
                _ => panic!("serve expected"),
            }
        };
        assert_eq!(parse(&[]), None);
        assert_eq!(parse(&["--replay-log-bytes", "1048576"]), Some(1 << 20));
    }

    #[test]
    #[cfg(feature = "demo")]
    fn sim_flags_become_config() {
        let cli = Cli::try_parse_from([
            "kube-pulse",
            "sim",
            "--listen",
            "127.0.0.1:0",
            "--app",
            "shop/web:2",
            "--statefulset",
            "shop/db",
            "--token",
            "s3cret",
            "--deny",
            "apps/deployments",
        ])
        .unwrap();
        let Command::Sim(args) = cli.command else {
            panic!("sim expected")
        };
        let config = args.to_config();
        assert_eq!(config.workloads.len(), 2);
        assert_eq!(config.workloads[1].kind, "StatefulSet");
        assert_eq!(config.token.as_deref(), Some("s3cret"));
        assert_eq!(config.deny, ["apps/deployments"]);
        let karpor = |extra: &[&str]| {
            let mut args = vec!["kube-pulse", "sim"];
            args.extend_from_slice(extra);
            Cli::try_parse_from(args).map(|cli| match cli.command {
                Command::Sim(args) => args.to_config().karpor,
                _ => panic!("sim expected"),
            })
        };
        assert_eq!(karpor(&[]).unwrap(), None);
        let plain = karpor(&["--karpor"]).unwrap().unwrap();
        assert!(!plain.conditions && plain.default_registry);
        assert!(
            karpor(&["--karpor", "--karpor-conditions"])
                .unwrap()
                .unwrap()
                .conditions
        );
        for bad in [
            &["--karpor-conditions"][..],
            &["--karpor", "--app", "shop/web"],
        ] {
            assert!(karpor(bad).is_err(), "{bad:?}");
        }
        assert!(Cli::try_parse_from(["kube-pulse", "demo", "--clusters", "0"]).is_err());
    }
}
