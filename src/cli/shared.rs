//! The flag groups `demo` and `serve` share (`argv, env ──▶ [shared]
//! ──▶ settings ──▶ gateway`): push transport limits and the base path,
//! accepted-connection limits and trusted proxies, authentication and TLS,
//! tasks, the NATS client's credentials and TLS; and the configuration each group describes on its own. Laying
//! them over `serve`'s config file is settings.rs.

use std::path::PathBuf;

use clap::Args;

/// Settings of the push transports shared by `demo` and `serve`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// Browser origin allowed to open WebSockets and read REST/SSE cross-origin
    /// (repeatable; `*` for any). Same-origin and loopback origins may always open
    /// WebSockets and act (tasks); reading REST/SSE from another origin, loopback
    /// included, needs that origin listed here (CORS).
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
    /// as a slow consumer and is closed (WebSocket 4008); long enough that a
    /// reader pausing gets catch-up snapshots rather than a close.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = seconds())]
    pub write_timeout: u64,
    /// Seconds between a subscription's heartbeats (an SSE `heartbeat`
    /// event, a WebSocket `heartbeat` message and ping), which carry how
    /// current each member is (`asOf`, docs/PROTOCOL.md).
    #[arg(long, value_name = "SECONDS", default_value_t = 15, value_parser = seconds())]
    pub heartbeat_seconds: u64,
    /// Streams compressed for the clients that ask (docs/PROTOCOL.md
    /// "Compression"): `websocket` (permessage-deflate), `sse` (gzip per
    /// Accept-Encoding), both, or `none`.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_values_t = [Compressed::Websocket, Compressed::Sse]
    )]
    pub compression: Vec<Compressed>,
    /// zlib level of compressed streams: 1 (fastest) to 9 (smallest).
    #[arg(long, value_name = "LEVEL", default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=9))]
    pub compression_level: u32,
    /// Serve everything (API, streams, health, UI) under this path, e.g.
    /// `/pulse` behind another app's origin.
    #[arg(long, env = "KUBE_PULSE_BASE_PATH", default_value = "/", value_parser = parse_base_path)]
    pub base_path: String,
    /// Bytes of changes kept for resume besides their count (default 64 MiB;
    /// `serve` takes `replayLogBytes` from its config file otherwise).
    #[arg(long, value_name = "BYTES")]
    pub replay_log_bytes: Option<usize>,
    /// Seconds of changes kept for resume however many they are, within
    /// the bytes (default 120; `serve` takes `replayLogAgeSeconds` from its
    /// config file otherwise).
    #[arg(long, value_name = "SECONDS")]
    pub replay_log_age: Option<u64>,
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
            heartbeat: std::time::Duration::from_secs(self.heartbeat_seconds),
            compression: self.compression(),
            ..Default::default()
        }
    }

    /// What `--compression` and `--compression-level` say (`none` wins).
    fn compression(&self) -> crate::transports::Compression {
        let on = |kind| {
            !self.compression.contains(&Compressed::None) && self.compression.contains(&kind)
        };
        crate::transports::Compression {
            websocket: on(Compressed::Websocket),
            sse: on(Compressed::Sse),
            level: self.compression_level,
        }
    }
}

/// A stream `--compression` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compressed {
    /// WebSocket messages, with permessage-deflate.
    Websocket,
    /// SSE responses, with gzip.
    Sse,
    /// Nothing compressed.
    None,
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

/// The value of `--nats`: one URL or several separated by commas. Its
/// `Debug` does not show a URL that carries credentials (which the
/// settings refuse).
#[derive(Clone, PartialEq, Eq)]
pub struct NatsUrl(pub String);

impl From<String> for NatsUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl std::fmt::Debug for NatsUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.contains('@') {
            f.write_str("NatsUrl(a URL with credentials, not shown)")
        } else {
            f.debug_tuple("NatsUrl").field(&self.0).finish()
        }
    }
}

/// How the NATS client of `--nats` logs in and checks the server, shared
/// by `demo` and `serve` (docs/SCALE-OUT.md, "Locking NATS"). Each flag
/// wins over its key in the config file's `nats:` block. Passwords and
/// tokens come from files or the environment, never from a flag's value.
#[derive(Debug, Args)]
pub struct NatsAuthArgs {
    /// NATS credentials file (`.creds`: a user JWT and its nkey seed), as
    /// `nsc` writes for an operator/account setup.
    #[arg(long, value_name = "FILE", env = "KUBE_PULSE_NATS_CREDENTIALS")]
    pub nats_credentials: Option<PathBuf>,
    /// File holding a NATS user's nkey seed (`SU…`; the server's config
    /// names its public key).
    #[arg(long, value_name = "FILE", env = "KUBE_PULSE_NATS_NKEY_SEED")]
    pub nats_nkey_seed: Option<PathBuf>,
    /// NATS user; its password from --nats-password-file or the environment
    /// variable KUBE_PULSE_NATS_PASSWORD.
    #[arg(long, value_name = "NAME", env = "KUBE_PULSE_NATS_USER")]
    pub nats_user: Option<String>,
    /// File holding the password of --nats-user (one line).
    #[arg(long, value_name = "FILE", env = "KUBE_PULSE_NATS_PASSWORD_FILE")]
    pub nats_password_file: Option<PathBuf>,
    /// File holding a NATS token (one line); or the environment variable
    /// KUBE_PULSE_NATS_TOKEN.
    #[arg(long, value_name = "FILE", env = "KUBE_PULSE_NATS_TOKEN_FILE")]
    pub nats_token_file: Option<PathBuf>,
    /// PEM certificates of the CA that signed the NATS servers'
    /// certificates, trusted instead of the system's; TLS is then required.
    #[arg(long, value_name = "FILE", env = "KUBE_PULSE_NATS_CA")]
    pub nats_ca: Option<PathBuf>,
    /// PEM client certificate for NATS servers that verify clients (mutual
    /// TLS), with --nats-key; TLS is then required.
    #[arg(long, value_name = "FILE", env = "KUBE_PULSE_NATS_CERT")]
    pub nats_cert: Option<PathBuf>,
    /// PEM private key of --nats-cert.
    #[arg(long, value_name = "FILE", env = "KUBE_PULSE_NATS_KEY")]
    pub nats_key: Option<PathBuf>,
    /// File holding the key (at least 32 bytes, the same on every replica)
    /// that signs the changes and task entries replicas write to NATS:
    /// what no replica signed is neither served nor run. `serve --nats`
    /// needs it or --nats-insecure-unsigned; `demo` makes one up without.
    #[arg(long, value_name = "FILE", env = "KUBE_PULSE_NATS_SIGNING_KEY_FILE")]
    pub nats_signing_key_file: Option<PathBuf>,
    /// Accept changes and task entries that no replica signed: anyone who
    /// may publish on the stream or write the task bucket is believed.
    #[arg(long, conflicts_with = "nats_signing_key_file")]
    pub nats_insecure_unsigned: bool,
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
