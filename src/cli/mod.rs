//! Command-line interface: `sim`, `demo` and `serve`, each with `--help`,
//! and the conversion of flags into library configuration.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config;
use crate::error::{Error, Result};
use crate::gateway::GatewayConfig;
use crate::telemetry::LogFormat;

#[cfg(feature = "demo")]
pub mod sim;

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
}

/// The arguments of a subcommand this build leaves out, whatever they are.
#[cfg(not(feature = "demo"))]
#[derive(Debug, Args)]
pub struct NotBuilt {
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
    /// With --karpor: serve the Cluster status schema that has
    /// `conditions` (Karpor 0.6 keeps only `healthy`).
    #[arg(long, requires = "karpor")]
    pub karpor_conditions: bool,
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
    pub nats: Option<String>,
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

/// Settings of the push transports shared by `demo` and `serve`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// Browser origin allowed to open WebSockets and read REST/SSE cross-origin
    /// (repeatable; `*` for any). Same-origin and loopback origins are always allowed.
    #[arg(
        long = "allow-origin",
        value_name = "ORIGIN",
        env = "KUBE_PULSE_ALLOW_ORIGINS",
        value_delimiter = ','
    )]
    pub allow_origins: Vec<String>,
    /// Host name this gateway answers for besides IP literals and `localhost`
    /// (repeatable; `*.example.com` for names below it, `*` for any). Other
    /// `Host`s get 421, which stops DNS rebinding (docs/SECURITY.md).
    #[arg(
        long = "allowed-host",
        value_name = "NAME",
        env = "KUBE_PULSE_ALLOWED_HOSTS",
        value_delimiter = ',',
        value_parser = parse_allowed_host
    )]
    pub allowed_hosts: Vec<String>,
    /// Most SSE + WebSocket sessions at once.
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,
    /// Most sessions per client IP address.
    #[arg(long, default_value_t = 1000)]
    pub max_connections_per_ip: usize,
    /// Most sessions per authenticated subject.
    #[arg(long, default_value_t = 200)]
    pub max_connections_per_token: usize,
    /// Subscribe operations per second per client (IP address and subject).
    #[arg(long, default_value_t = 100)]
    pub max_subscribes_per_client: u32,
    /// Seconds a session's write may stay blocked before the client counts
    /// as a slow consumer and is closed (WebSocket 4008).
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = seconds())]
    pub write_timeout: u64,
    /// Serve everything (API, streams, health, UI) under this path, e.g.
    /// `/pulse` behind another app's origin.
    #[arg(long, env = "KUBE_PULSE_BASE_PATH", default_value = "/", value_parser = parse_base_path)]
    pub base_path: String,
    /// Bytes of changes kept for resume besides their count (default 64 MiB;
    /// `serve` takes `replayLogBytes` from its config file otherwise).
    #[arg(long, value_name = "BYTES")]
    pub replay_log_bytes: Option<usize>,
    /// Connection timeouts and limits, trusted proxies.
    #[command(flatten)]
    pub connections: ConnectionArgs,
}

/// Timeouts and limits of accepted TCP connections and the trusted proxies
/// (docs/SECURITY.md). Unset flags take `serve`'s config file values, then
/// the defaults.
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    /// Seconds for a request's headers to arrive (also while an HTTP/1.1
    /// keep-alive connection waits for its next request) [default: 10].
    #[arg(long, value_name = "SECONDS", value_parser = seconds())]
    pub header_read_timeout: Option<u64>,
    /// Seconds for a TLS handshake to complete [default: 10].
    #[arg(long, value_name = "SECONDS", value_parser = seconds())]
    pub tls_handshake_timeout: Option<u64>,
    /// Seconds a connection with no request in flight stays open; SSE and
    /// WebSocket streams are not cut [default: 60].
    #[arg(long, value_name = "SECONDS", value_parser = seconds())]
    pub idle_timeout: Option<u64>,
    /// Most open TCP connections per peer IP address; trusted proxies are
    /// exempt [default: --max-connections-per-ip + 100].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sockets_per_ip: Option<u64>,
    /// Most open TCP connections in all [default: the open-files limit
    /// minus 64, minus 16 per member cluster].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sockets: Option<u64>,
    /// Address block of a reverse proxy whose forwarding header names the
    /// client, e.g. 10.0.0.0/8 (repeatable); other peers' headers are ignored.
    #[arg(
        long = "trusted-proxy",
        value_name = "CIDR",
        env = "KUBE_PULSE_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    pub trusted_proxies: Vec<crate::http_settings::Cidr>,
    /// The header trusted proxies name the client in [default: x-forwarded-for].
    #[arg(long, value_enum)]
    pub forwarded_header: Option<crate::http_settings::ForwardedHeader>,
}

fn seconds() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..=3600)
}

impl ConnectionArgs {
    /// The connection settings of these flags over `file`'s (flags win);
    /// the per-IP cap defaults to `sessions_per_ip` + [`SPARE_PER_IP`](crate::http::connections::SPARE_PER_IP).
    pub fn to_settings(
        &self,
        file: &config::ConnectionsFile,
        sessions_per_ip: usize,
    ) -> crate::http::connections::ConnectionSettings {
        let defaults = crate::http::connections::ConnectionSettings::default();
        let secs = |flag: Option<u64>, file: Option<u64>, default| {
            flag.or(file)
                .map_or(default, std::time::Duration::from_secs)
        };
        let count = |flag: Option<u64>, file: Option<usize>| flag.map(|n| n as usize).or(file);
        let trusted = if self.trusted_proxies.is_empty() {
            file.trusted_proxies.clone()
        } else {
            self.trusted_proxies.clone()
        };
        crate::http::connections::ConnectionSettings {
            header_read_timeout: secs(
                self.header_read_timeout,
                file.header_read_timeout_seconds,
                defaults.header_read_timeout,
            ),
            tls_handshake_timeout: secs(
                self.tls_handshake_timeout,
                file.tls_handshake_timeout_seconds,
                defaults.tls_handshake_timeout,
            ),
            idle_timeout: secs(
                self.idle_timeout,
                file.idle_timeout_seconds,
                defaults.idle_timeout,
            ),
            max_per_ip: count(self.max_sockets_per_ip, file.max_sockets_per_ip)
                .unwrap_or(sessions_per_ip.max(1) + crate::http::connections::SPARE_PER_IP),
            max_total: count(self.max_sockets, file.max_sockets),
            trusted_proxies: crate::http::client_ip::TrustedProxies {
                cidrs: trusted,
                header: self
                    .forwarded_header
                    .or(file.forwarded_header)
                    .unwrap_or_default(),
            },
        }
    }
}

fn parse_allowed_host(raw: &str) -> Result<String, String> {
    crate::http_settings::validate_allowed_host(raw).map(|()| raw.to_string())
}

fn parse_base_path(raw: &str) -> Result<String, String> {
    crate::http::web::validate_base_path(raw).map(|()| raw.to_string())
}

impl PushArgs {
    /// The transports' configuration these flags describe: connection and
    /// rate limits at least 1, the other settings at their defaults.
    pub fn to_config(&self) -> crate::transports::TransportConfig {
        crate::transports::TransportConfig {
            allowed_origins: self.allow_origins.clone(),
            allowed_hosts: self.allowed_hosts.clone(),
            max_connections: self.max_connections.max(1),
            max_connections_per_ip: self.max_connections_per_ip.max(1),
            max_connections_per_token: self.max_connections_per_token.max(1),
            max_subscribes_per_client_second: self.max_subscribes_per_client.max(1),
            write_timeout: std::time::Duration::from_secs(self.write_timeout),
            ..Default::default()
        }
    }
}

/// Authentication and TLS, shared by `demo` and `serve` (docs/SECURITY.md).
#[derive(Debug, Args)]
pub struct SecurityArgs {
    /// How callers authenticate.
    #[arg(long, value_enum, env = "KUBE_PULSE_AUTH", default_value = "none")]
    pub auth: crate::auth::ModeName,
    /// Allow `--auth none` on a listener that is not loopback.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// `--auth tokens`: YAML file of tokens (or their SHA-256) with subjects and scopes.
    #[arg(long, value_name = "PATH", env = "KUBE_PULSE_TOKENS_FILE")]
    pub tokens_file: Option<PathBuf>,
    /// `--auth jwt`: file holding the HS256 secret.
    #[arg(long, value_name = "PATH")]
    pub jwt_hs256_secret_file: Option<PathBuf>,
    /// `--auth jwt`: PEM public key, RSA (RS256) or EC P-256 (ES256); repeatable.
    #[arg(long = "jwt-public-key", value_name = "PATH")]
    pub jwt_public_keys: Vec<PathBuf>,
    /// `--auth jwt`: JWKS file of public keys.
    #[arg(long, value_name = "PATH")]
    pub jwt_jwks: Option<PathBuf>,
    /// `--auth jwt`: required `iss`.
    #[arg(long)]
    pub jwt_issuer: Option<String>,
    /// `--auth jwt`: required `aud`.
    #[arg(long)]
    pub jwt_audience: Option<String>,
    /// `--auth jwt`: clock skew allowed on `exp`/`nbf`, in seconds.
    #[arg(long, default_value_t = 30)]
    pub jwt_leeway: u64,
    /// `--auth kubernetes`: kubeconfig of the host cluster (default: in-cluster or KUBECONFIG).
    #[arg(long, value_name = "PATH")]
    pub auth_kubeconfig: Option<PathBuf>,
    /// `--auth kubernetes`: context in that kubeconfig.
    #[arg(long, requires = "auth_kubeconfig")]
    pub auth_context: Option<String>,
    /// `--auth kubernetes`: audience the TokenReview asks for; repeatable.
    #[arg(long = "token-review-audience", value_name = "AUD")]
    pub token_review_audiences: Vec<String>,
    /// `--auth kubernetes`: seconds a review answer is reused (sessions re-check then).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub auth_cache_ttl: u64,
    /// Accept the token as `?access_token=` on the WebSocket endpoint (it ends up in access logs).
    #[arg(long)]
    pub ws_query_token: bool,
    /// TLS certificate chain (PEM); with --tls-key, serves HTTPS (HTTP/2 and HTTP/1.1).
    #[arg(
        long,
        value_name = "PATH",
        requires = "tls_key",
        env = "KUBE_PULSE_TLS_CERT"
    )]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM). Both files are reloaded when they change.
    #[arg(
        long,
        value_name = "PATH",
        requires = "tls_cert",
        env = "KUBE_PULSE_TLS_KEY"
    )]
    pub tls_key: Option<PathBuf>,
    // Failed-authentication throttle (docs/SECURITY.md, "Abuse resistance").
    /// Rejected tokens one client address may send per window before it is
    /// refused (429) without its tokens being checked [default: 20;
    /// `serve`: `authFailures.maxPerIp` of the config file otherwise].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_auth_failures_per_ip: Option<u32>,
    /// Seconds of that window, from an address's first failure [default: 60;
    /// `serve`: `authFailures.windowSeconds` otherwise].
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub auth_failure_window: Option<u64>,
}

impl SecurityArgs {
    /// The authentication settings these flags describe.
    pub fn auth_settings(&self) -> crate::auth::AuthSettings {
        crate::auth::AuthSettings {
            mode: self.auth,
            insecure_no_auth: self.insecure_no_auth,
            tokens_file: self.tokens_file.clone(),
            jwt: crate::auth::jwt::JwtSettings {
                hs256_secret: self.jwt_hs256_secret_file.clone(),
                public_keys: self.jwt_public_keys.clone(),
                jwks: self.jwt_jwks.clone(),
                issuer: self.jwt_issuer.clone(),
                audience: self.jwt_audience.clone(),
                leeway: self.jwt_leeway,
            },
            kubeconfig: self.auth_kubeconfig.clone(),
            context: self.auth_context.clone(),
            review_audiences: self.token_review_audiences.clone(),
            cache_ttl: std::time::Duration::from_secs(self.auth_cache_ttl),
            query_token: self.ws_query_token,
            failures: Default::default(),
        }
    }

    /// The failure throttle's limits: these flags over `file` (the config
    /// file's, or the defaults).
    pub fn failure_limits(&self, file: crate::auth::FailureLimits) -> crate::auth::FailureLimits {
        crate::auth::FailureLimits {
            per_ip: self.max_auth_failures_per_ip.unwrap_or(file.per_ip),
            window: self
                .auth_failure_window
                .map_or(file.window, std::time::Duration::from_secs),
        }
    }

    /// TLS when both a certificate and a key are given (reloaded every 10 s).
    pub fn tls(&self) -> Option<crate::http::server::TlsSettings> {
        Some(crate::http::server::TlsSettings {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            reload_every: std::time::Duration::from_secs(10),
        })
    }
}

/// Settings of tasks (user actions on apps) shared by `demo` and `serve`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// Deadline of a task that sets no `timeoutSeconds`, in seconds.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub task_timeout: u64,
    /// How long finished tasks stay readable, in seconds.
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    pub task_retention: u64,
    /// Most tasks kept in memory (finished ones make room for new ones).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_tasks: u64,
}

impl TaskArgs {
    /// The task settings these flags describe (seconds become durations).
    pub fn to_settings(&self) -> crate::tasks::TaskSettings {
        crate::tasks::TaskSettings {
            default_timeout: std::time::Duration::from_secs(self.task_timeout),
            retention: std::time::Duration::from_secs(self.task_retention),
            capacity: self.max_tasks as usize,
        }
    }
}

/// Flags of `serve`: the member clusters and the gateway's settings.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the gateway.
    #[arg(long, env = "KUBE_PULSE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// YAML file naming the member clusters (see deploy/config.example.yaml).
    #[arg(long, env = "KUBE_PULSE_CONFIG", conflicts_with = "kubeconfig")]
    pub config: Option<PathBuf>,
    /// Kubeconfig whose contexts are the member clusters.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Context to use (repeatable); all contexts when omitted.
    #[arg(long = "context", value_name = "NAME", requires = "kubeconfig")]
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
    /// serves them all (docs/SCALE-OUT.md).
    #[arg(long, value_name = "URL", env = "KUBE_PULSE_NATS")]
    pub nats: Option<String>,
    /// Copies of the stream and of the task bucket on distinct servers of a
    /// JetStream cluster, 1 to 5 (default 1; 3 on three servers survives
    /// one of them down). Wins over `streamReplicas` of the file.
    #[arg(long, value_name = "N", env = "KUBE_PULSE_NATS_STREAM_REPLICAS")]
    pub nats_stream_replicas: Option<usize>,
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

impl ServeArgs {
    /// Where the members come from, to re-read on SIGHUP and file changes.
    pub fn member_source(&self) -> Option<crate::pipeline::MemberSource> {
        match (&self.config, &self.kubeconfig) {
            (Some(path), _) => Some(crate::pipeline::MemberSource::File(path.clone())),
            (None, Some(path)) => Some(crate::pipeline::MemberSource::Kubeconfig {
                path: path.clone(),
                contexts: self.contexts.clone(),
            }),
            (None, None) => None,
        }
    }

    /// The Karpor settings of the flags over the config file's `karpor:`
    /// (flags win); None without a Karpor kubeconfig. The kubeconfig must be
    /// readable now; Karpor itself may answer later.
    pub fn karpor(
        &self,
        file: Option<&crate::config::KarporFile>,
    ) -> Result<Option<crate::karpor::KarporSettings>> {
        let file = file.cloned().unwrap_or_default();
        let Some(kubeconfig) = self.karpor_kubeconfig.clone().or(file.kubeconfig) else {
            if self.karpor_context.is_some() || self.karpor_allow_exec || self.karpor_read_only {
                return Err(Error::Settings(
                    "--karpor-context, --karpor-allow-exec and --karpor-read-only need --karpor-kubeconfig (or karpor.kubeconfig in the config file)".into(),
                ));
            }
            return Ok(None);
        };
        if let Err(source) = std::fs::File::open(&kubeconfig) {
            return Err(Error::Read {
                path: kubeconfig,
                source,
            });
        }
        Ok(Some(crate::karpor::KarporSettings {
            kubeconfig,
            context: self.karpor_context.clone().or(file.context),
            allow_exec: self.karpor_allow_exec || file.allow_exec,
            status: (!(self.karpor_read_only || file.read_only)).then(|| {
                crate::karpor::WriterSettings {
                    replica: self
                        .replica_id
                        .clone()
                        .filter(|id| !id.is_empty())
                        .unwrap_or_else(crate::karpor::default_replica),
                    ..Default::default()
                }
            }),
        }))
    }

    /// Where the Leases' host cluster is, from the flags over the config
    /// file's `leases:` (flags win); None without one.
    pub fn lease_host(
        &self,
        file: &crate::config::LeasesFile,
    ) -> Result<Option<crate::scale::LeaseHost>> {
        use crate::scale::LeaseHost;
        if file.in_cluster && file.kubeconfig.is_some() {
            return Err(Error::Settings(
                "leases: give kubeconfig or inCluster: true, not both".into(),
            ));
        }
        Ok(match (&self.lease_kubeconfig, self.lease_in_cluster) {
            (Some(path), _) => Some(LeaseHost::Kubeconfig(path.clone())),
            (None, true) => Some(LeaseHost::InCluster),
            (None, false) if file.in_cluster => Some(LeaseHost::InCluster),
            (None, false) => file.kubeconfig.clone().map(LeaseHost::Kubeconfig),
        })
    }

    /// The Lease settings of the flags over the config file's `leases:`
    /// (flags win); None without a lease host cluster.
    pub async fn leases(
        &self,
        file: Option<&crate::config::LeasesFile>,
    ) -> Result<Option<crate::scale::LeaseSettings>> {
        let file = file.cloned().unwrap_or_default();
        let Some(host) = self.lease_host(&file)? else {
            if self.lease_namespace.is_some() || self.lease_duration.is_some() {
                return Err(Error::Settings(
                    "--lease-namespace and --lease-duration need --lease-kubeconfig or --lease-in-cluster (or leases.kubeconfig or leases.inCluster in the config file)".into(),
                ));
            }
            return Ok(None);
        };
        let client = match host {
            crate::scale::LeaseHost::Kubeconfig(path) => {
                crate::karpor::api::kube_config(&path, None)
                    .await
                    .map_err(|e| Error::Settings(format!("lease kubeconfig: {e}")))?
            }
            crate::scale::LeaseHost::InCluster => crate::scale::in_cluster_config()?,
        };
        let namespace = self
            .lease_namespace
            .clone()
            .or(file.namespace)
            .unwrap_or_else(|| client.default_namespace.trim().to_string());
        let seconds = self
            .lease_duration
            .or(file.duration_seconds)
            .unwrap_or(crate::scale::DEFAULT_DURATION.as_secs());
        let settings = crate::scale::LeaseSettings {
            client,
            namespace,
            replica: self
                .replica_id
                .clone()
                .filter(|id| !id.is_empty())
                .unwrap_or_else(crate::karpor::default_replica),
            duration: std::time::Duration::from_secs(seconds),
        };
        settings.validate()?;
        Ok(Some(settings))
    }

    /// The stream of changes of `--nats` over the config file's `nats:`
    /// (the flag wins over `url`); None without a URL.
    pub fn nats(
        &self,
        file: Option<&crate::config::NatsFile>,
    ) -> Result<Option<crate::scale::NatsSettings>> {
        let file = file.cloned().unwrap_or_default();
        let replicas = self.nats_stream_replicas.or(file.stream_replicas);
        let Some(url) = self.nats.clone().or(file.url) else {
            if file.stream.is_some() || file.history_per_topic.is_some() || replicas.is_some() {
                return Err(Error::Settings(
                    "nats: stream, historyPerTopic and streamReplicas (--nats-stream-replicas) need a url (or --nats)".into(),
                ));
            }
            return Ok(None);
        };
        let mut settings = crate::scale::NatsSettings::new(url);
        if let Some(stream) = file.stream {
            settings.stream = stream;
        }
        if let Some(history) = file.history_per_topic {
            settings.history = history;
        }
        if let Some(replicas) = replicas {
            settings.replicas = replicas;
        }
        settings.validate()?;
        Ok(Some(settings))
    }

    /// How often the member source's file is checked (None: only on SIGHUP).
    pub fn reload_interval(&self) -> Option<std::time::Duration> {
        (self.config_reload_interval > 0)
            .then(|| std::time::Duration::from_secs(self.config_reload_interval))
    }

    /// The address and gateway configuration these flags and the config
    /// file describe: flags win over the file; every member's client
    /// configuration is resolved here, before anything listens.
    pub async fn resolve(&self) -> Result<(SocketAddr, GatewayConfig)> {
        let mut file_hosts = Vec::new();
        let mut auth_failures = crate::auth::FailureLimits::default();
        let mut karpor_file = None;
        let mut leases_file = None;
        let mut nats_file = None;
        let (clusters, file_listen, pipeline, health, connections) = match (
            &self.config,
            &self.kubeconfig,
        ) {
            (Some(path), _) => {
                let file = config::load_file(path)?;
                auth_failures = crate::auth::FailureLimits::from_file(&file.auth_failures);
                let pipeline = crate::pipeline::PipelineConfig::from_file(&file);
                let connections = file.connections_file();
                file_hosts = file.allowed_hosts;
                karpor_file = file.karpor;
                leases_file = file.leases;
                nats_file = file.nats;
                (
                    file.clusters,
                    file.listen,
                    pipeline,
                    file.health,
                    connections,
                )
            }
            (None, Some(path)) => (
                config::from_kubeconfig(path, &self.contexts)?,
                None,
                Default::default(),
                Default::default(),
                Default::default(),
            ),
            (None, None) if self.karpor_kubeconfig.is_some() => (
                Vec::new(),
                None,
                Default::default(),
                Default::default(),
                Default::default(),
            ),
            (None, None) => {
                return Err(Error::Settings(
                        "serve needs --config FILE, --kubeconfig PATH (or KUBECONFIG) or --karpor-kubeconfig PATH".into(),
                    ));
            }
        };
        let addr = self
            .listen
            .or(file_listen)
            .unwrap_or(([0, 0, 0, 0], 8080).into());
        let mut base = GatewayConfig {
            pipeline,
            health,
            ..GatewayConfig::default()
        };
        base.auth.failures = auth_failures;
        let mut gateway = shared_flags(base, addr, &self.push, &self.tasks, &self.security)?;
        // `--allowed-host` wins over `allowedHosts`.
        if self.push.allowed_hosts.is_empty() {
            gateway.transports.allowed_hosts = file_hosts;
        }
        gateway.connections =
            (self.push.connections).to_settings(&connections, self.push.max_connections_per_ip);
        gateway.members = crate::pipeline::members(&clusters).await?;
        gateway.karpor = self.karpor(karpor_file.as_ref())?;
        gateway.leases = self.leases(leases_file.as_ref()).await?;
        gateway.nats = self.nats(nats_file.as_ref())?;
        if gateway.nats.is_some() && gateway.leases.is_none() {
            return Err(Error::Settings(
                "--nats needs Lease ownership: --lease-kubeconfig PATH or --lease-in-cluster (or leases: in the config file)".into(),
            ));
        }
        Ok((addr, gateway))
    }
}

/// Applies the flags `serve` and `demo` share (transports, tasks,
/// authentication, TLS, replay log) onto `base`, after refusing to serve
/// `addr` without authentication where that is not allowed.
fn shared_flags(
    mut base: GatewayConfig,
    addr: SocketAddr,
    push: &PushArgs,
    tasks: &TaskArgs,
    security: &SecurityArgs,
) -> Result<GatewayConfig> {
    let mut auth = security.auth_settings();
    auth.check_listener(addr).map_err(Error::Settings)?;
    auth.failures = security.failure_limits(base.auth.failures);
    if let Some(bytes) = push.replay_log_bytes {
        base.pipeline.hub.log_bytes = bytes;
    }
    Ok(GatewayConfig {
        transports: push.to_config(),
        tasks: tasks.to_settings(),
        base_path: push.base_path.clone(),
        auth,
        tls: security.tls(),
        connections: (push.connections)
            .to_settings(&Default::default(), push.max_connections_per_ip),
        ..base
    })
}

#[cfg(feature = "demo")]
impl DemoArgs {
    /// The address and demo options these flags describe.
    pub fn resolve(&self) -> Result<(SocketAddr, crate::demo::DemoOptions)> {
        let defaults = crate::demo::DemoOptions::default();
        let options = crate::demo::DemoOptions {
            clusters: self.clusters.into(),
            scenario: !self.no_scenario,
            converge: kube_pulse_sim::ConvergeConfig {
                tick: std::time::Duration::from_millis(self.tick_ms.max(10)),
                ..Default::default()
            },
            gateway: shared_flags(
                defaults.gateway,
                self.listen,
                &self.push,
                &self.tasks,
                &self.security,
            )?,
            karpor: self
                .karpor
                .then_some(kube_pulse_sim::karpor::KarporOptions {
                    conditions: self.karpor_conditions,
                    default_registry: true,
                }),
            leases: self.leases,
            nats: self
                .nats
                .as_ref()
                .map(|url| {
                    let settings = crate::scale::NatsSettings::new(url.as_str());
                    settings.validate().map(|()| settings)
                })
                .transpose()?,
        };
        Ok((self.listen, options))
    }
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

    #[tokio::test]
    async fn nats_comes_from_the_flag_or_the_file_and_needs_leases() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("member");
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\ncurrent-context: m\nclusters:\n- name: m\n  cluster: {server: 'http://127.0.0.1:1'}\ncontexts:\n- name: m\n  context: {cluster: m, user: u}\nusers:\n- name: u\n  user: {token: t}\n",
        )
        .unwrap();
        let path = kubeconfig.to_str().unwrap();
        let serve = |extra: &[&str]| {
            let mut args = vec![
                "kube-pulse",
                "serve",
                "--kubeconfig",
                path,
                "--listen",
                "127.0.0.1:0",
            ];
            args.extend_from_slice(extra);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Serve(args) => args,
                _ => panic!("serve expected"),
            }
        };
        assert!(serve(&[]).nats(None).unwrap().is_none());
        let file = crate::config::NatsFile {
            url: Some("nats://file:4222".into()),
            stream: Some("PULSE_A".into()),
            history_per_topic: Some(4),
            stream_replicas: Some(3),
        };
        let settings = serve(&[]).nats(Some(&file)).unwrap().unwrap();
        assert_eq!(
            (
                settings.url.as_str(),
                settings.stream.as_str(),
                settings.history,
                settings.replicas
            ),
            ("nats://file:4222", "PULSE_A", 4, 3)
        );
        // The flag wins over streamReplicas; either is validated.
        let five = serve(&["--nats-stream-replicas", "5"]);
        assert_eq!(five.nats(Some(&file)).unwrap().unwrap().replicas, 5);
        let err = serve(&["--nats-stream-replicas", "6"])
            .nats(Some(&file))
            .unwrap_err();
        assert!(
            err.to_string().contains("streamReplicas must be 1 to 5"),
            "{err}"
        );
        let list = serve(&["--nats", "nats://a:4222, tls://b:4222"]);
        let settings = list.nats(None).unwrap().unwrap();
        assert_eq!(settings.servers(), ["nats://a:4222", "tls://b:4222"]);
        assert_eq!(settings.replicas, crate::scale::DEFAULT_REPLICAS);
        let err = serve(&["--nats", "nats://a:4222,http://b:4222"])
            .nats(None)
            .unwrap_err();
        assert!(err.to_string().contains("\"http://b:4222\""), "{err}");
        let replicas_alone = crate::config::NatsFile {
            stream_replicas: Some(3),
            ..Default::default()
        };
        assert!(serve(&[]).nats(Some(&replicas_alone)).is_err());
        assert!(serve(&["--nats-stream-replicas", "3"]).nats(None).is_err());
        let flag = serve(&["--nats", "nats://flag:4222"]);
        assert_eq!(
            flag.nats(Some(&file)).unwrap().unwrap().url,
            "nats://flag:4222"
        );
        let defaults = flag.nats(None).unwrap().unwrap();
        assert_eq!(
            (defaults.stream.as_str(), defaults.history),
            (crate::scale::DEFAULT_STREAM, crate::scale::DEFAULT_HISTORY)
        );
        let err = serve(&["--nats", "http://x:1"]).nats(None).unwrap_err();
        assert!(err.to_string().contains("nats://HOST:PORT"), "{err}");
        let orphan = crate::config::NatsFile {
            stream: Some("S".into()),
            ..Default::default()
        };
        assert!(serve(&[]).nats(Some(&orphan)).is_err());
        let err = serve(&["--nats", "nats://127.0.0.1:4222"])
            .resolve()
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("--nats needs Lease ownership"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn lease_flags_win_over_the_file_and_need_a_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("host");
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\ncurrent-context: host\nclusters:\n- name: host\n  cluster: {server: 'http://127.0.0.1:1'}\ncontexts:\n- name: host\n  context: {cluster: host, user: u, namespace: pulse}\nusers:\n- name: u\n  user: {token: t}\n",
        )
        .unwrap();
        let serve = |extra: &[&str]| {
            let mut args = vec![
                "kube-pulse",
                "serve",
                "--kubeconfig",
                "kc",
                "--replica-id",
                "r-1",
            ];
            args.extend_from_slice(extra);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Serve(args) => args,
                _ => panic!("serve expected"),
            }
        };
        let path = kubeconfig.to_str().unwrap();
        assert!(serve(&[]).leases(None).await.unwrap().is_none());
        let err = serve(&["--lease-namespace", "x"])
            .leases(None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("need --lease-kubeconfig"), "{err}");
        // The context's namespace and the default duration.
        let settings = serve(&["--lease-kubeconfig", path])
            .leases(None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (settings.namespace.as_str(), settings.replica.as_str()),
            ("pulse", "r-1")
        );
        assert_eq!(settings.duration, crate::scale::DEFAULT_DURATION);
        // The file's block, and flags over it.
        let file = crate::config::LeasesFile {
            kubeconfig: Some(kubeconfig.clone()),
            namespace: Some("from-file".into()),
            duration_seconds: Some(30),
            ..Default::default()
        };
        let settings = serve(&[]).leases(Some(&file)).await.unwrap().unwrap();
        assert_eq!(settings.namespace, "from-file");
        assert_eq!(settings.duration.as_secs(), 30);
        let flags = serve(&["--lease-namespace", "flag", "--lease-duration", "9"]);
        let settings = flags.leases(Some(&file)).await.unwrap().unwrap();
        assert_eq!(
            (settings.namespace.as_str(), settings.duration.as_secs()),
            ("flag", 9)
        );
        let err = serve(&["--lease-kubeconfig", path, "--lease-duration", "1"])
            .leases(None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("3 to 600 seconds"), "{err}");
    }

    #[tokio::test]
    async fn the_lease_host_is_a_kubeconfig_or_the_pods_own_cluster() {
        use crate::config::LeasesFile;
        use crate::scale::LeaseHost;
        let serve = |extra: &[&str]| {
            let mut args = vec!["kube-pulse", "serve", "--kubeconfig", "kc"];
            args.extend_from_slice(extra);
            match Cli::try_parse_from(args).map(|c| c.command) {
                Ok(Command::Serve(args)) => Ok(args),
                Ok(_) => panic!("serve expected"),
                Err(e) => Err(e.to_string()),
            }
        };
        let kubeconfig = |p: &str| Some(LeaseHost::Kubeconfig(p.into()));
        let in_file = LeasesFile {
            in_cluster: true,
            ..Default::default()
        };
        let path_in_file = LeasesFile {
            kubeconfig: Some("/file/kc".into()),
            ..Default::default()
        };
        let none = LeasesFile::default();
        // (flags, file, host)
        let cases: &[(&[&str], &LeasesFile, Option<LeaseHost>)] = &[
            (&[], &none, None),
            (&["--lease-in-cluster"], &none, Some(LeaseHost::InCluster)),
            (&[], &in_file, Some(LeaseHost::InCluster)),
            (&[], &path_in_file, kubeconfig("/file/kc")),
            // Flags win over the file, either way round.
            (
                &["--lease-kubeconfig", "/flag/kc"],
                &in_file,
                kubeconfig("/flag/kc"),
            ),
            (
                &["--lease-in-cluster"],
                &path_in_file,
                Some(LeaseHost::InCluster),
            ),
        ];
        for (flags, file, want) in cases {
            let got = serve(flags).unwrap().lease_host(file).unwrap();
            assert_eq!(&got, want, "{flags:?} {file:?}");
        }
        // Both at once is a mistake, in the flags and in the file.
        let err = serve(&["--lease-in-cluster", "--lease-kubeconfig", "kc"]).unwrap_err();
        assert!(err.contains("cannot be used with"), "{err}");
        let both = LeasesFile {
            in_cluster: true,
            kubeconfig: Some("kc".into()),
            ..Default::default()
        };
        let err = serve(&[]).unwrap().lease_host(&both).unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
        // The namespace-only flags name the in-cluster way too.
        let err = serve(&["--lease-duration", "9"])
            .unwrap()
            .leases(None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("--lease-in-cluster"), "{err}");
        // Outside a pod, in-cluster is refused and says why; inside one it
        // takes the pod's namespace unless the flag names another.
        let in_pod = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
            && std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .exists();
        let settings = serve(&["--lease-in-cluster", "--replica-id", "r-1"])
            .unwrap()
            .leases(None)
            .await;
        if in_pod {
            let settings = settings.unwrap().unwrap();
            let pod =
                std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                    .unwrap();
            assert_eq!(settings.namespace, pod.trim());
        } else {
            let err = settings.unwrap_err().to_string();
            assert!(
                err.contains("lease host cluster in-cluster")
                    && (err.contains("not running in a pod")
                        || err.contains("service account is not mounted")),
                "{err}"
            );
        }
    }

    #[test]
    fn connection_flags_win_over_the_file() {
        let parse = |extra: &[&str]| {
            let mut args = vec!["kube-pulse", "serve", "--kubeconfig", "kc"];
            args.extend_from_slice(extra);
            match Cli::try_parse_from(args).map(|c| c.command) {
                Ok(Command::Serve(args)) => Ok(args),
                Ok(_) => panic!("serve expected"),
                Err(e) => Err(e.to_string()),
            }
        };
        let file = config::ConnectionsFile {
            idle_timeout_seconds: Some(30),
            max_sockets: Some(500),
            trusted_proxies: vec!["192.0.2.0/24".parse().unwrap()],
            ..Default::default()
        };
        let args = parse(&["--idle-timeout", "5", "--max-connections-per-ip", "7"]).unwrap();
        let s = args
            .push
            .connections
            .to_settings(&file, args.push.max_connections_per_ip);
        assert_eq!(s.idle_timeout, std::time::Duration::from_secs(5));
        assert_eq!(s.header_read_timeout, std::time::Duration::from_secs(10));
        assert_eq!((s.max_per_ip, s.max_total), (107, Some(500)));
        assert!(s.trusted_proxies.contains("192.0.2.9".parse().unwrap()));
        let args = parse(&[
            "--trusted-proxy",
            "10.0.0.0/8",
            "--trusted-proxy",
            "fd00::/8",
        ])
        .unwrap();
        let s = args.push.connections.to_settings(&file, 1000);
        assert!(!s.trusted_proxies.contains("192.0.2.9".parse().unwrap()));
        assert!(s.trusted_proxies.contains("fd00::1".parse().unwrap()));
        assert_eq!(s.max_per_ip, 1100);
        let err = parse(&["--trusted-proxy", "10.0.0.0/40"]).unwrap_err();
        assert!(err.contains("not an address block"), "{err}");
        assert!(parse(&["--idle-timeout", "0"]).is_err());
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
        assert!(Cli::try_parse_from(["kube-pulse", "serve", "--context", "x"]).is_err());
        assert!(Cli::try_parse_from(["kube-pulse", "demo", "--clusters", "0"]).is_err());
    }

    #[cfg(feature = "demo")]
    #[test]
    fn demo_nats_needs_leases_and_a_nats_url() {
        let demo = |extra: &[&str]| -> Result<Box<DemoArgs>, clap::Error> {
            let mut args = vec!["kube-pulse", "demo"];
            args.extend_from_slice(extra);
            match Cli::try_parse_from(args)?.command {
                Command::Demo(args) => Ok(args),
                _ => panic!("demo expected"),
            }
        };
        let url = "nats://127.0.0.1:4222";
        assert!(demo(&["--nats", url]).is_err());
        let (_, options) = demo(&["--leases", "--karpor", "--nats", url])
            .unwrap()
            .resolve()
            .unwrap();
        assert!(options.karpor.is_some() && options.nats.is_some());
        let (_, options) = demo(&["--leases", "--nats", url])
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(options.nats.unwrap().url, url);
        let (_, options) = demo(&["--leases"]).unwrap().resolve().unwrap();
        assert!(options.nats.is_none());
        let err = demo(&["--leases", "--nats", "http://127.0.0.1:4222"])
            .unwrap()
            .resolve()
            .unwrap_err();
        assert!(err.to_string().contains("nats://HOST:PORT"), "{err}");
    }

    #[cfg(feature = "demo")]
    #[test]
    fn auth_failure_flags_win_over_the_defaults() {
        let limits = |extra: &[&str]| {
            let mut args = vec!["kube-pulse", "demo"];
            args.extend_from_slice(extra);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Demo(args) => args.resolve().unwrap().1.gateway.auth.failures,
                _ => panic!("demo expected"),
            }
        };
        assert_eq!(limits(&[]), crate::auth::FailureLimits::default());
        let set = limits(&[
            "--max-auth-failures-per-ip",
            "5",
            "--auth-failure-window",
            "9",
        ]);
        assert_eq!(
            (set.per_ip, set.window),
            (5, std::time::Duration::from_secs(9))
        );
        let zero = ["kube-pulse", "demo", "--max-auth-failures-per-ip", "0"];
        assert!(Cli::try_parse_from(zero).is_err());
    }
}
