//! Command-line interface: `sim`, `demo` and `serve`, each with `--help`,
//! and the conversion of flags into library configuration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::sim::{ConvergeConfig, ResourceDef, SimConfig, WorkloadSeed};
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
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one simulated Kubernetes cluster (for kubectl, scripts and tests).
    Sim(Box<SimArgs>),
    /// Run the embedded demo: simulated member clusters, a scenario and the gateway.
    Demo(DemoArgs),
    /// Run the gateway against real member clusters.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Address of the simulated apiserver (plain HTTP).
    #[arg(long, env = "KUBE_PULSE_SIM_LISTEN", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Cluster name (shown in logs and the control API).
    #[arg(long, default_value = "sim")]
    pub name: String,
    /// Require `Authorization: Bearer TOKEN` on API requests.
    #[arg(long, env = "KUBE_PULSE_SIM_TOKEN")]
    pub token: Option<String>,
    /// Namespace to create at start (repeatable).
    #[arg(long = "namespace", value_name = "NAME")]
    pub namespaces: Vec<String>,
    /// Deployment to create at start: NAMESPACE/NAME[:REPLICAS] (repeatable).
    #[arg(long = "app", value_name = "NS/NAME[:REPLICAS]", value_parser = parse_workload)]
    pub apps: Vec<(String, String, u32)>,
    /// StatefulSet to create at start: NAMESPACE/NAME[:REPLICAS] (repeatable).
    #[arg(long = "statefulset", value_name = "NS/NAME[:REPLICAS]", value_parser = parse_workload)]
    pub statefulsets: Vec<(String, String, u32)>,
    /// Container image of the seeded workloads.
    #[arg(long, default_value = "registry.example/app:1.0")]
    pub image: String,
    /// Image whose pods never become ready (repeatable).
    #[arg(long = "failing-image", value_name = "IMAGE")]
    pub failing_images: Vec<String>,
    /// Answer 403 for GROUP/RESOURCE[:VERB], e.g. apps/deployments or core/namespaces:watch (repeatable).
    #[arg(long = "deny", value_name = "RULE")]
    pub deny: Vec<String>,
    /// Extra resource GROUP/VERSION/PLURAL/KIND[/cluster] (repeatable), e.g. example.com/v1/widgets/Widget.
    #[arg(long = "crd", value_name = "SPEC", value_parser = parse_crd)]
    pub crds: Vec<ResourceDef>,
    /// Events kept for watch resume; older resourceVersions get 410 Expired.
    #[arg(long, default_value_t = 1000)]
    pub window: usize,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 10)]
    pub bookmark_secs: u64,
    /// Milliseconds between workload controller steps.
    #[arg(long, default_value_t = 500)]
    pub tick_ms: u64,
    /// Pods created or readied per workload per step.
    #[arg(long, default_value_t = 1)]
    pub pods_per_tick: u32,
    /// Also serve the control API (`/_sim/...`) here, so it survives the `refuse` fault.
    #[arg(long, value_name = "ADDR")]
    pub control_listen: Option<SocketAddr>,
}

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
    #[command(flatten)]
    pub push: PushArgs,
    #[command(flatten)]
    pub tasks: TaskArgs,
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
    /// Serve everything (API, streams, health, UI) under this path, e.g.
    /// `/pulse` behind another app's origin.
    #[arg(long, env = "KUBE_PULSE_BASE_PATH", default_value = "/", value_parser = parse_base_path)]
    pub base_path: String,
}

fn parse_base_path(raw: &str) -> Result<String, String> {
    crate::web::validate_base_path(raw).map(|()| raw.to_string())
}

impl PushArgs {
    pub fn to_config(&self) -> crate::transports::TransportConfig {
        crate::transports::TransportConfig {
            allowed_origins: self.allow_origins.clone(),
            max_connections: self.max_connections.max(1),
            max_connections_per_ip: self.max_connections_per_ip.max(1),
            max_connections_per_token: self.max_connections_per_token.max(1),
            max_subscribes_per_client_second: self.max_subscribes_per_client.max(1),
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
}

impl SecurityArgs {
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
        }
    }

    pub fn tls(&self) -> Option<crate::gateway::TlsSettings> {
        Some(crate::gateway::TlsSettings {
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
    pub fn to_settings(&self) -> crate::tasks::TaskSettings {
        crate::tasks::TaskSettings {
            default_timeout: std::time::Duration::from_secs(self.task_timeout),
            retention: std::time::Duration::from_secs(self.task_retention),
            capacity: self.max_tasks as usize,
        }
    }
}

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
    #[command(flatten)]
    pub push: PushArgs,
    #[command(flatten)]
    pub tasks: TaskArgs,
    #[command(flatten)]
    pub security: SecurityArgs,
}

/// Parses `NAMESPACE/NAME[:REPLICAS]`.
pub fn parse_workload(s: &str) -> Result<(String, String, u32), String> {
    let (path, replicas) = match s.rsplit_once(':') {
        Some((p, r)) => (
            p,
            r.parse::<u32>()
                .map_err(|_| format!("replicas {r:?} is not a non-negative integer"))?,
        ),
        None => (s, 1),
    };
    let (ns, name) = path
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| format!("{s:?} must look like NAMESPACE/NAME[:REPLICAS]"))?;
    Ok((ns.to_string(), name.to_string(), replicas))
}

/// Parses `GROUP/VERSION/PLURAL/KIND[/cluster]`.
pub fn parse_crd(s: &str) -> Result<ResourceDef, String> {
    let parts: Vec<&str> = s.split('/').collect();
    let (group, version, plural, kind, namespaced) = match parts.as_slice() {
        [g, v, p, k] => (*g, *v, *p, *k, true),
        [g, v, p, k, "cluster"] => (*g, *v, *p, *k, false),
        _ => {
            return Err(format!(
                "{s:?} must look like GROUP/VERSION/PLURAL/KIND[/cluster]"
            ));
        }
    };
    if [group, version, plural, kind].iter().any(|p| p.is_empty()) || !group.contains('.') {
        return Err(format!(
            "{s:?}: group must be a domain (e.g. example.com) and no part may be empty"
        ));
    }
    let mut def = ResourceDef::custom(group, version, plural, kind);
    def.namespaced = namespaced;
    Ok(def)
}

impl SimArgs {
    /// The simulator configuration these flags describe.
    pub fn to_config(&self) -> SimConfig {
        let seeds = |list: &[(String, String, u32)], kind: &str| -> Vec<WorkloadSeed> {
            list.iter()
                .map(|(ns, name, replicas)| WorkloadSeed {
                    kind: kind.into(),
                    namespace: ns.clone(),
                    name: name.clone(),
                    replicas: *replicas,
                    image: self.image.clone(),
                })
                .collect()
        };
        let mut workloads = seeds(&self.apps, "Deployment");
        workloads.extend(seeds(&self.statefulsets, "StatefulSet"));
        SimConfig {
            name: self.name.clone(),
            listen: self.listen,
            token: self.token.clone(),
            extra_resources: self.crds.clone(),
            window: self.window.max(1),
            bookmark_interval: Duration::from_secs(self.bookmark_secs.max(1)),
            converge: ConvergeConfig {
                tick: Duration::from_millis(self.tick_ms.max(10)),
                pods_per_tick: self.pods_per_tick.max(1),
            },
            deny: self.deny.clone(),
            namespaces: self.namespaces.clone(),
            workloads,
            reviews: Default::default(),
        }
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
    fn workload_specs() {
        assert_eq!(
            parse_workload("shop/web:3").unwrap(),
            ("shop".into(), "web".into(), 3)
        );
        assert_eq!(parse_workload("shop/web").unwrap().2, 1);
        for bad in ["web", "/web", "shop/", "shop/web:x", "a/b/c", "shop/web:-1"] {
            assert!(parse_workload(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn crd_specs() {
        let def = parse_crd("example.com/v1/widgets/Widget").unwrap();
        assert!(def.namespaced);
        assert_eq!(def.api_version(), "example.com/v1");
        assert!(
            !parse_crd("example.com/v1/globals/Global/cluster")
                .unwrap()
                .namespaced
        );
        for bad in [
            "widgets",
            "core/v1/widgets/Widget",
            "example.com/v1//Widget",
        ] {
            assert!(parse_crd(bad).is_err(), "{bad}");
        }
    }

    #[test]
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
        assert!(Cli::try_parse_from(["kube-pulse", "serve", "--context", "x"]).is_err());
        assert!(Cli::try_parse_from(["kube-pulse", "demo", "--clusters", "0"]).is_err());
    }
}
