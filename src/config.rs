//! Which member clusters to watch: from a kubeconfig (one member per
//! context) or from a YAML file (`deploy/config.example.yaml` documents it).
//! Feeds the sources; nothing here talks to a cluster.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use kube::config::Kubeconfig;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::names::{cluster_name_for_context, valid_name};

/// The `--config` file.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileConfig {
    /// Listen address; the `--listen` flag wins when both are given.
    pub listen: Option<SocketAddr>,
    /// The member clusters to watch; names unique; at least one unless
    /// `karpor` gives them.
    #[serde(default)]
    pub clusters: Vec<ClusterSpec>,
    /// Members and sync registries also from Karpor's apiserver
    /// (`--karpor-kubeconfig`, `--karpor-context`, `--karpor-allow-exec` win).
    pub karpor: Option<KarporFile>,
    /// Several replicas: the host cluster whose Leases decide which replica
    /// runs which member (`--lease-kubeconfig`, `--lease-namespace`,
    /// `--lease-duration` win).
    pub leases: Option<LeasesFile>,
    /// With `leases`: one stream of changes over NATS JetStream, so every
    /// replica serves every member (`--nats` wins over `url`).
    pub nats: Option<NatsFile>,
    /// Resources to sync besides the built-ins (Deployments, StatefulSets, Namespaces).
    #[serde(default)]
    pub sync_registries: Vec<crate::sources::SyncRegistry>,
    /// Label whose value groups workloads into apps.
    pub app_label: Option<String>,
    /// Health rules for custom workloads (docs/STATUS.md "Health rules"):
    /// each replaces the built-in rule of its name or joins them.
    #[serde(default)]
    pub health_rules: Vec<crate::status::rules::RuleSpec>,
    /// The rules in force, compiled from the built-in ones and
    /// `healthRules` by [`load_file`] (the built-in ones alone until then).
    #[serde(skip)]
    pub rules: std::sync::Arc<crate::status::rules::HealthRules>,
    /// `podWatch: {enabled, labelSelector}`: Pods and Warning events for
    /// the apps' pod-level reasons (default on, every pod).
    #[serde(default)]
    pub pod_watch: crate::sources::PodWatch,
    /// `initialLists: streaming` (default: streamed where the member
    /// supports it, paged where it refuses) or `paged`.
    #[serde(default)]
    pub initial_lists: crate::sources::InitialLists,
    /// Seconds a watch whose member sends bookmarks may stay without an
    /// event or a bookmark before it counts as stalled and is restarted,
    /// its sync `Error (Silent)` meanwhile (default 150; at least 10).
    pub watch_silence_seconds: Option<u64>,
    /// How member apiservers are probed; defaults as in [`ProbeSettings`].
    #[serde(default)]
    pub probe: ProbeSettings,
    /// Output format and external stores of the health endpoints.
    #[serde(default)]
    pub health: HealthSettings,
    /// Bytes the replay log may hold (default 64 MiB); the
    /// `--replay-log-bytes` flag wins when both are given.
    pub replay_log_bytes: Option<usize>,
    /// Seconds of changes the replay log keeps, however many, within its
    /// bytes (default 120); the `--replay-log-age` flag wins.
    pub replay_log_age_seconds: Option<u64>,
    /// Seconds an app whose workloads or namespace are gone stays
    /// `Stopped`/`NotExisted` before its topic is removed (default 600, at least 1).
    pub app_retention_seconds: Option<u64>,
    /// Member connections (probes and watches) started per second, after
    /// a burst of as many (default 500, at least 1): a fleet of thousands
    /// starts over seconds instead of in one instant.
    pub member_start_rate: Option<u32>,
    /// Host names the gateway answers for besides IP literals and
    /// `localhost` (`*.example.com`, `*`); `--allowed-host` wins.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Failed-authentication throttle per client address; the
    /// `--max-auth-failures-per-ip` / `--auth-failure-window` flags win.
    #[serde(default)]
    pub auth_failures: AuthFailureSettings,
    /// Timeouts and limits of accepted connections; flags win.
    #[serde(default)]
    pub connections: ConnectionsFile,
    /// Address blocks of reverse proxies whose forwarding header names the
    /// client (`--trusted-proxy` wins when given).
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// `x-forwarded-for` (default) or `forwarded` (`--forwarded-header` wins).
    pub forwarded_header: Option<crate::http_settings::ForwardedHeader>,
}

/// The `karpor:` block of the file (docs/KARPOR.md; flags win).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KarporFile {
    /// Kubeconfig of Karpor's apiserver (ConfigMap `karpor-kubeconfig`, key `config`).
    pub kubeconfig: Option<PathBuf>,
    /// Context of that kubeconfig; its current context when absent.
    pub context: Option<String>,
    /// Run exec credential plugins named by Karpor's Cluster objects.
    #[serde(default)]
    pub allow_exec: bool,
    /// Only read Karpor: write no status onto its objects.
    #[serde(default)]
    pub read_only: bool,
    /// Address blocks the Clusters' endpoints may reach even if denied
    /// (`--karpor-allow-endpoint` wins when given).
    #[serde(default)]
    pub allow_endpoints: Vec<String>,
    /// Address blocks the Clusters' endpoints may not reach, besides
    /// loopback, link-local and unspecified (`--karpor-deny-endpoint` wins).
    #[serde(default)]
    pub deny_endpoints: Vec<String>,
}

/// The `leases:` block of the file (docs/SCALE-OUT.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeasesFile {
    /// Kubeconfig of the host cluster that holds the Leases.
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The host cluster is the one this pod runs in, reached through the
    /// pod's service account (instead of `kubeconfig`).
    #[serde(default)]
    pub in_cluster: bool,
    /// Namespace of the Leases; the kubeconfig context's, or in-cluster the
    /// pod's, when absent.
    pub namespace: Option<String>,
    /// `leaseDurationSeconds` (3 to 600; default 15).
    pub duration_seconds: Option<u64>,
}

/// The `nats:` block of the file (docs/SCALE-OUT.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NatsFile {
    /// `nats://HOST:PORT` of a NATS server with JetStream, or several of
    /// one cluster separated by commas.
    pub url: Option<String>,
    /// The JetStream stream's name (default `KUBE_PULSE`).
    pub stream: Option<String>,
    /// Messages the stream keeps per topic (default 16, 1 to 1000).
    pub history_per_topic: Option<i64>,
    /// Copies of the stream and the task bucket in a JetStream cluster
    /// (default 1, 1 to 5).
    pub stream_replicas: Option<usize>,
    /// A NATS credentials file (`.creds`: a user JWT and its nkey seed);
    /// `--nats-credentials` wins. Each way to log in (this, `nkeySeed`,
    /// `user` with a password, a token) excludes the others.
    pub credentials: Option<PathBuf>,
    /// A file holding a user's nkey seed (`SU…`); `--nats-nkey-seed` wins.
    pub nkey_seed: Option<PathBuf>,
    /// The NATS user, whose password is in `passwordFile` (or the
    /// environment variable `KUBE_PULSE_NATS_PASSWORD`); `--nats-user` wins.
    pub user: Option<String>,
    /// A file holding the user's password; `--nats-password-file` wins.
    pub password_file: Option<PathBuf>,
    /// A file holding a token (or `KUBE_PULSE_NATS_TOKEN`); `--nats-token-file` wins.
    pub token_file: Option<PathBuf>,
    /// PEM certificates of the CA that signed the servers' certificates:
    /// TLS is required; `--nats-ca` wins.
    pub ca: Option<PathBuf>,
    /// PEM client certificate for servers that verify clients (mutual
    /// TLS), with `key`; `--nats-cert` wins.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`; `--nats-key` wins.
    pub key: Option<PathBuf>,
    /// The file of the key that signs what replicas write to NATS;
    /// `--nats-signing-key-file` wins.
    pub signing_key_file: Option<PathBuf>,
    /// Accept changes and tasks no replica signed (default false);
    /// `--nats-insecure-unsigned` also sets it.
    pub insecure_unsigned: Option<bool>,
    /// Seconds a push member's agent may be silent before the member is
    /// `Unknown (AgentLost)` (default 40); `--agent-grace` wins.
    pub agent_grace_seconds: Option<u64>,
}

/// `authFailures`: rejected tokens one address may send per window before
/// it is refused (docs/SECURITY.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthFailureSettings {
    /// Rejected tokens per address and window (default 20, at least 1).
    pub max_per_ip: Option<u32>,
    /// The window in seconds (default 60, 1 to 86400).
    pub window_seconds: Option<u64>,
}

impl AuthFailureSettings {
    fn validate(&self) -> std::result::Result<(), String> {
        if self.max_per_ip == Some(0) {
            return Err("authFailures.maxPerIp must be at least 1, not 0".into());
        }
        match self.window_seconds {
            Some(s) if !(1..=86_400).contains(&s) => Err(format!(
                "authFailures.windowSeconds must be 1 to 86400, not {s}"
            )),
            _ => Ok(()),
        }
    }
}

/// The `connections:` block of the file (docs/SECURITY.md, "Connections"),
/// with the file's trusted proxies once validated.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ConnectionsFile {
    /// Seconds for a request's headers to arrive (1 to 3600; default 10).
    pub header_read_timeout_seconds: Option<u64>,
    /// Seconds for a TLS handshake (1 to 3600; default 10).
    pub tls_handshake_timeout_seconds: Option<u64>,
    /// Seconds a connection with no request in flight stays open (1 to 3600; default 60).
    pub idle_timeout_seconds: Option<u64>,
    /// Open TCP connections per peer IP (default: sessions per IP + 100).
    pub max_sockets_per_ip: Option<usize>,
    /// Open TCP connections in all (default: from the open-files limit).
    pub max_sockets: Option<usize>,
    /// Filled from the top-level `trustedProxies` by [`FileConfig::connections_file`].
    #[serde(skip)]
    pub trusted_proxies: Vec<crate::http_settings::Cidr>,
    /// Filled from the top-level `forwardedHeader`.
    #[serde(skip)]
    pub forwarded_header: Option<crate::http_settings::ForwardedHeader>,
}

impl ConnectionsFile {
    fn validate(&self) -> std::result::Result<(), String> {
        let timeouts = [
            ("headerReadTimeoutSeconds", self.header_read_timeout_seconds),
            (
                "tlsHandshakeTimeoutSeconds",
                self.tls_handshake_timeout_seconds,
            ),
            ("idleTimeoutSeconds", self.idle_timeout_seconds),
        ];
        for (key, value) in timeouts {
            if let Some(v) = value.filter(|v| !(1..=3600).contains(v)) {
                return Err(format!("connections.{key} must be from 1 to 3600, not {v}"));
            }
        }
        for (key, value) in [
            ("maxSocketsPerIp", self.max_sockets_per_ip),
            ("maxSockets", self.max_sockets),
        ] {
            if value == Some(0) {
                return Err(format!("connections.{key} must be at least 1, not 0"));
            }
        }
        Ok(())
    }
}

/// The gateway's own health endpoints.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct HealthSettings {
    /// `karpor` (default; `seed` is its deprecated alias) or `kubernetes`
    /// output on `/livez` and `/readyz`.
    pub format: crate::health::Format,
    /// External stores the `Storage` check calls.
    pub storage: Vec<crate::health::checks::StorageEndpoint>,
}

/// How member apiservers are probed.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ProbeSettings {
    /// Seconds between two probes of a member (default 5; 0 counts as 1).
    pub interval_seconds: u64,
    /// Seconds a probe may take before it counts as failed (default 3; 0 counts as 1).
    pub timeout_seconds: u64,
    /// Consecutive successes before an unhealthy cluster counts as healthy again.
    pub success_threshold: u32,
    /// Consecutive failures before a healthy cluster counts as unhealthy.
    pub failure_threshold: u32,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            interval_seconds: 5,
            timeout_seconds: 3,
            success_threshold: 1,
            failure_threshold: 2,
        }
    }
}

impl ProbeSettings {
    /// Zero would probe in a busy loop, time out at once or never change
    /// phase: each value must be at least 1.
    fn validate(&self) -> std::result::Result<(), String> {
        let values = [
            ("intervalSeconds", self.interval_seconds),
            ("timeoutSeconds", self.timeout_seconds),
            ("successThreshold", u64::from(self.success_threshold)),
            ("failureThreshold", u64::from(self.failure_threshold)),
        ];
        match values.iter().find(|(_, v)| *v == 0) {
            Some((key, _)) => Err(format!("probe.{key} must be at least 1, not 0")),
            None => Ok(()),
        }
    }
}

impl FileConfig {
    /// The `connections:` block with the trusted proxies (validated by [`load_file`]).
    pub fn connections_file(&self) -> ConnectionsFile {
        ConnectionsFile {
            trusted_proxies: self
                .trusted_proxies
                .iter()
                .filter_map(|c| c.parse().ok())
                .collect(),
            forwarded_header: self.forwarded_header,
            ..self.connections.clone()
        }
    }
}

/// One member cluster.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// Name used in topics (`clusters/{name}`): a DNS label.
    pub name: String,
    /// Kubeconfig file; with `context`, the cluster comes from there.
    pub kubeconfig: Option<PathBuf>,
    /// Context of `kubeconfig` to use; its current context when absent.
    pub context: Option<String>,
    /// Or: the apiserver URL, with a bearer token and CA file.
    pub server: Option<String>,
    /// Bearer token for `server`, inline (a secret; prefer `token_file`).
    pub token: Option<String>,
    /// File holding the bearer token for `server` (e.g. a mounted service account token).
    pub token_file: Option<PathBuf>,
    /// PEM CA bundle that verifies `server`'s certificate; the system roots when absent.
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate from `server` (default false; for test clusters only).
    #[serde(
        default,
        rename = "insecureSkipTLSVerify",
        alias = "insecureSkipTlsVerify"
    )]
    pub insecure_skip_tls_verify: bool,
    /// `pull` (default: kube-pulse probes and watches the member) or `push`
    /// (the member's agent publishes its status over NATS; docs/AGENT.md).
    #[serde(default)]
    pub mode: MemberMode,
    /// With `mode: push`: the public nkey (`U…`) of the member's agent.
    pub agent: Option<String>,
}

/// How a member's status reaches the gateway.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberMode {
    /// The gateway probes and watches the member's apiserver.
    #[default]
    Pull,
    /// The member's agent pushes its status (the gateway never reaches it).
    Push,
}

impl ClusterSpec {
    /// A push member's agent key (`U…`); None for a pulled member.
    pub fn pushed_by(&self) -> Option<&str> {
        (self.mode == MemberMode::Push)
            .then_some(self.agent.as_deref())
            .flatten()
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if !valid_name(&self.name) {
            return Err(format!(
                "cluster name {:?} must be a DNS label (lower-case letters, digits and '-', at most 63)",
                self.name
            ));
        }
        if self.mode == MemberMode::Push {
            return self.validate_push();
        }
        if self.agent.is_some() {
            return Err(format!(
                "cluster {:?}: agent is for push members (mode: push)",
                self.name
            ));
        }
        match (&self.kubeconfig, &self.server) {
            (Some(_), Some(_)) => Err(format!(
                "cluster {:?}: give either kubeconfig (+ context) or server, not both",
                self.name
            )),
            (None, None) => Err(format!(
                "cluster {:?}: needs kubeconfig (+ context) or server",
                self.name
            )),
            (None, Some(server)) if !is_http_url(server) => Err(format!(
                "cluster {:?}: server {server:?} must be an http(s) URL with a host (a port from 1 to 65535, no user or password in it), e.g. https://10.0.0.1:6443",
                self.name
            )),
            (None, Some(_)) if self.token.is_some() && self.token_file.is_some() => Err(format!(
                "cluster {:?}: give token or tokenFile, not both",
                self.name
            )),
            _ => Ok(()),
        }
    }

    /// A push member names its agent and nothing to reach it by.
    fn validate_push(&self) -> std::result::Result<(), String> {
        let name = &self.name;
        let reaching = [
            ("kubeconfig", self.kubeconfig.is_some()),
            ("context", self.context.is_some()),
            ("server", self.server.is_some()),
            ("token", self.token.is_some()),
            ("tokenFile", self.token_file.is_some()),
            ("caFile", self.ca_file.is_some()),
            ("insecureSkipTLSVerify", self.insecure_skip_tls_verify),
        ];
        if let Some((key, _)) = reaching.iter().find(|(_, set)| *set) {
            return Err(format!(
                "cluster {name:?}: a push member is reached by its agent only; {key} is not for it"
            ));
        }
        let Some(agent) = &self.agent else {
            return Err(format!(
                "cluster {name:?}: mode: push needs agent: the public nkey (U…) of its agent (`kube-pulse agent-key`)"
            ));
        };
        crate::names::agent_public_key(agent)
            .map(drop)
            .map_err(|e| format!("cluster {name:?}: agent: {e}"))
    }

    /// Every file the member names exists and can be read now, rather than
    /// when its client first needs it (after the gateway listens).
    pub(crate) fn check_files(&self) -> std::result::Result<(), String> {
        let files = [
            ("kubeconfig", &self.kubeconfig),
            ("caFile", &self.ca_file),
            ("tokenFile", &self.token_file),
        ];
        for (key, path) in files {
            if let Some(path) = path
                && let Err(e) = std::fs::File::open(path)
            {
                return Err(format!(
                    "cluster {:?}: {key} {} cannot be read: {e}",
                    self.name,
                    path.display()
                ));
            }
        }
        Ok(())
    }
}

/// `http://HOST[:PORT][/…]` or `https://…` with a non-empty host, a port
/// that is one (1–65535) and no user or password (`user:pass@`), which
/// would be shown wherever the URL is and never sent.
pub(crate) fn is_http_url(raw: &str) -> bool {
    raw.parse::<http::Uri>().is_ok_and(|uri| {
        let authority = uri.authority().map_or("", |a| a.as_str());
        let userinfo = authority.contains('@');
        // After an IPv6 address's bracket, or the host: `:PORT`, if any.
        let after_host = authority
            .rsplit_once(']')
            .map_or(authority, |(_, rest)| rest);
        let port_ok = after_host
            .rsplit_once(':')
            .is_none_or(|(_, port)| port.parse::<u16>().is_ok_and(|p| p > 0));
        matches!(uri.scheme_str(), Some("http" | "https"))
            && uri.host().is_some_and(|h| !h.is_empty())
            && !userinfo
            && port_ok
    })
}

/// Everything but the inline token, which logs must never show.
impl std::fmt::Debug for ClusterSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSpec")
            .field("name", &self.name)
            .field("kubeconfig", &self.kubeconfig)
            .field("context", &self.context)
            .field("server", &self.server)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_file", &self.token_file)
            .field("ca_file", &self.ca_file)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("mode", &self.mode)
            .field("agent", &self.agent)
            .finish()
    }
}

fn check_unique(clusters: &[ClusterSpec], path: &Path) -> Result<()> {
    let mut seen = HashSet::new();
    for cluster in clusters {
        cluster.validate().map_err(|message| Error::Config {
            path: path.to_path_buf(),
            message,
        })?;
        if !seen.insert(cluster.name.as_str()) {
            return Err(Error::Config {
                path: path.to_path_buf(),
                message: format!("cluster name {:?} appears twice", cluster.name),
            });
        }
    }
    Ok(())
}

/// Reads and parses a file of the config format, unchecked.
fn parse_file(path: &Path) -> Result<FileConfig> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_yaml_ng::from_str(&text).map_err(|e| Error::Config {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Reads the `--config` file of `kube-pulse agent`: the gateway's format,
/// of which the agent reads `syncRegistries`, `appLabel`, `podWatch`,
/// `initialLists`, `probe` and `health` (its `clusters` and every other block are the
/// hub's, and ignored here).
pub fn load_agent_file(path: &Path) -> Result<FileConfig> {
    let config = parse_file(path)?;
    config.probe.validate().map_err(|message| Error::Config {
        path: path.to_path_buf(),
        message,
    })?;
    Ok(config)
}

/// Reads and validates a `--config` file.
pub fn load_file(path: &Path) -> Result<FileConfig> {
    load_file_beside(path, false)
}

/// [`load_file`] for a gateway that may also take its members from Karpor
/// (`karpor_by_flag`: `--karpor-kubeconfig` was given): the file may then
/// list no cluster, as it may when its own `karpor:` names a kubeconfig.
pub fn load_file_beside(path: &Path, karpor_by_flag: bool) -> Result<FileConfig> {
    let mut config = parse_file(path)?;
    let karpor = karpor_by_flag
        || config
            .karpor
            .as_ref()
            .is_some_and(|k| k.kubeconfig.is_some());
    if config.clusters.is_empty() && !karpor {
        return Err(Error::Config {
            path: path.to_path_buf(),
            message: "no clusters: list at least one under `clusters:` (or take them from Karpor with `karpor: {kubeconfig: PATH}` or --karpor-kubeconfig PATH)".into(),
        });
    }
    check_unique(&config.clusters, path)?;
    let invalid = |message: String| Error::Config {
        path: path.to_path_buf(),
        message,
    };
    config.probe.validate().map_err(invalid)?;
    config.auth_failures.validate().map_err(invalid)?;
    let rules = crate::status::rules::HealthRules::compile(&config.health_rules)
        .map_err(|why| invalid(format!("healthRules: {why}")))?;
    config.rules = std::sync::Arc::new(rules);
    if config.member_start_rate == Some(0) {
        return Err(invalid(
            "memberStartRate must be at least 1 connection a second, not 0".into(),
        ));
    }
    if config.watch_silence_seconds.is_some_and(|s| s < 10) {
        // Shorter than a few bookmark periods: quiet watches would restart.
        return Err(invalid(
            "watchSilenceSeconds must be at least 10 (apiservers send a bookmark about once a minute)".into(),
        ));
    }
    if config.app_retention_seconds == Some(0) {
        // Zero would drop an app the moment its last workload goes.
        return Err(invalid(
            "appRetentionSeconds must be at least 1, not 0".into(),
        ));
    }
    for registry in &config.sync_registries {
        for cluster in &registry.clusters {
            // With Karpor, a registry may name a cluster only Karpor knows.
            let known = karpor || config.clusters.iter().any(|c| &c.name == cluster);
            if cluster != "*" && !known {
                let name = registry.name.as_deref().unwrap_or("(unnamed)");
                return Err(invalid(format!(
                    "sync registry {name:?} names cluster {cluster:?}, which is not under `clusters:` (known: {})",
                    config
                        .clusters
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }
    for host in &config.allowed_hosts {
        crate::http_settings::validate_allowed_host(host)
            .map_err(|message| invalid(format!("allowedHosts: {message}")))?;
    }
    config.connections.validate().map_err(invalid)?;
    for (i, cidr) in config.trusted_proxies.iter().enumerate() {
        cidr.parse::<crate::http_settings::Cidr>()
            .map_err(|e| invalid(format!("trustedProxies[{i}]: {e}")))?;
    }
    if let Some(karpor) = &config.karpor {
        let blocks = [
            ("allowEndpoints", &karpor.allow_endpoints),
            ("denyEndpoints", &karpor.deny_endpoints),
        ];
        for (key, list) in blocks {
            for (i, cidr) in list.iter().enumerate() {
                cidr.parse::<crate::http_settings::Cidr>()
                    .map_err(|e| invalid(format!("karpor.{key}[{i}]: {e}")))?;
            }
        }
    }
    for endpoint in &config.health.storage {
        endpoint.validate().map_err(|message| Error::Config {
            path: path.to_path_buf(),
            message,
        })?;
    }
    Ok(config)
}

/// One member per context of a kubeconfig (all contexts when none are named).
pub fn from_kubeconfig(path: &Path, contexts: &[String]) -> Result<Vec<ClusterSpec>> {
    std::fs::File::open(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| Error::Config {
        path: path.to_path_buf(),
        message: format!("not a usable kubeconfig: {e}"),
    })?;
    let available: Vec<&str> = kubeconfig
        .contexts
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let chosen: Vec<String> = if contexts.is_empty() {
        available.iter().map(|s| s.to_string()).collect()
    } else {
        contexts.to_vec()
    };
    if chosen.is_empty() {
        return Err(Error::Config {
            path: path.to_path_buf(),
            message: "the kubeconfig has no contexts".into(),
        });
    }
    let mut clusters = Vec::new();
    for context in chosen {
        if !available.contains(&context.as_str()) {
            return Err(Error::Config {
                path: path.to_path_buf(),
                message: format!(
                    "context {context:?} not found; available: {}",
                    available.join(", ")
                ),
            });
        }
        clusters.push(ClusterSpec {
            name: cluster_name_for_context(&context),
            kubeconfig: Some(path.to_path_buf()),
            context: Some(context),
            server: None,
            token: None,
            token_file: None,
            ca_file: None,
            insecure_skip_tls_verify: false,
            mode: MemberMode::Pull,
            agent: None,
        });
    }
    check_unique(&clusters, path)?;
    Ok(clusters)
}

/// Files for the tests of the file format and of those who read it.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::path::{Path, PathBuf};

    /// Writes `text` to `dir/name`.
    pub(crate) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A new directory under the system's temporary directory.
    pub(crate) fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kube-pulse-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A kubeconfig with contexts `Prod_EU` and `dev` (current) on one cluster.
    pub(crate) const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c1\n  cluster: {server: 'http://127.0.0.1:1'}\nusers:\n- name: u1\n  user: {token: abc}\ncontexts:\n- name: Prod_EU\n  context: {cluster: c1, user: u1}\n- name: dev\n  context: {cluster: c1, user: u1}\ncurrent-context: dev\n";
}

#[cfg(test)]
mod tests {
    use super::fixtures::{KUBECONFIG, tempdir, write};
    use super::*;

    #[test]
    fn with_karpor_the_file_may_have_no_clusters_and_name_karpors() {
        let dir = tempdir();
        let text = "karpor: {kubeconfig: /etc/karpor/config, context: k, allowExec: true}\nsyncRegistries:\n- {clusters: [only-in-karpor], resources: []}\n";
        let config = load_file(&write(&dir, "karpor.yaml", text)).unwrap();
        assert!(config.clusters.is_empty());
        let karpor = config.karpor.unwrap();
        assert_eq!(karpor.context.as_deref(), Some("k"));
        assert!(karpor.allow_exec);
        let typo = "karpor: {kubeconfig: /k, allowExecs: true}\n";
        let err = load_file(&write(&dir, "typo.yaml", typo))
            .unwrap_err()
            .to_string();
        assert!(err.contains("allowExecs"), "{err}");
    }

    #[test]
    fn a_push_member_names_its_agent_and_nothing_to_reach_it_by() {
        let dir = tempdir();
        let agent = nkeys::KeyPair::new_user().public_key();
        let server = nkeys::KeyPair::new_server().public_key();
        let good = format!("clusters:\n- {{name: edge, mode: push, agent: {agent}}}\n");
        let config = load_file(&write(&dir, "push.yaml", &good)).unwrap();
        assert_eq!(config.clusters[0].pushed_by(), Some(agent.as_str()));
        let cases = [
            (
                "clusters:\n- {name: edge, mode: push}\n".to_string(),
                "mode: push needs agent",
            ),
            (
                format!(
                    "clusters:\n- {{name: edge, mode: push, agent: {agent}, server: 'https://x'}}\n"
                ),
                "server is not for it",
            ),
            (
                format!(
                    "clusters:\n- {{name: edge, mode: push, agent: {agent}, kubeconfig: /k}}\n"
                ),
                "kubeconfig is not for it",
            ),
            (
                format!("clusters:\n- {{name: edge, mode: push, agent: {server}}}\n"),
                "not a user's public key",
            ),
            (
                "clusters:\n- {name: edge, mode: push, agent: hello}\n".to_string(),
                "not an nkey public key",
            ),
            (
                format!("clusters:\n- {{name: edge, server: 'https://x', agent: {agent}}}\n"),
                "agent is for push members",
            ),
            (
                "clusters:\n- {name: edge, mode: pushed, server: 'https://x'}\n".to_string(),
                "unknown variant `pushed`",
            ),
        ];
        for (text, expected) in cases {
            let err = load_file(&write(&dir, "bad.yaml", &text))
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn config_file_errors_name_the_problem() {
        let dir = tempdir();
        let cases = [
            ("clusters: []\n", "no clusters"),
            (
                "clusters:\n- name: Bad Name\n  server: https://x\n",
                "DNS label",
            ),
            ("clusters:\n- name: a\n", "needs kubeconfig"),
            ("clusters:\n- name: a\n  server: ftp://x\n", "http(s) URL"),
            (
                "clusters:\n- name: a\n  server: 'https://user:secret@10.0.0.1'\n",
                "no user or password in it",
            ),
            (
                "clusters:\n- name: a\n  server: 'https://10.0.0.1:99999'\n",
                "a port from 1 to 65535",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\n- {name: a, server: 'https://y'}\n",
                "appears twice",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x', colour: blue}\n",
                "unknown field",
            ),
            ("clusters: [\n", "invalid configuration"),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nhealth:\n  storage:\n  - {name: es, url: 'ftp://es:9200'}\n",
                "must be an http:// or https:// URL",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nhealth:\n  format: pretty\n",
                "unknown variant",
            ),
            ("clusters:\n- {name: a, server: 'http://'}\n", "with a host"),
            (
                "clusters:\n- {name: a, server: 'https://x'}\ninitialLists: sometimes\n",
                "unknown variant `sometimes`, expected `streaming` or `paged`",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nprobe: {intervalSeconds: 0}\n",
                "probe.intervalSeconds must be at least 1",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nprobe: {failureThreshold: 0}\n",
                "probe.failureThreshold must be at least 1",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nallowedHosts: ['https://pulse.example.com']\n",
                "allowedHosts: allowed host \"https://pulse.example.com\" must be a host name",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nappRetentionSeconds: 0\n",
                "appRetentionSeconds must be at least 1",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nauthFailures: {maxPerIp: 0}\n",
                "authFailures.maxPerIp must be at least 1",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nauthFailures: {windowSeconds: 0}\n",
                "authFailures.windowSeconds must be 1 to 86400",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nconnections: {idleTimeoutSeconds: 0}\n",
                "connections.idleTimeoutSeconds must be from 1 to 3600, not 0",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nconnections: {maxSocketsPerIp: 0}\n",
                "connections.maxSocketsPerIp must be at least 1",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\ntrustedProxies: [10.0.0.0/8, 10.0.0.0/99]\n",
                "trustedProxies[1]: \"10.0.0.0/99\" is not an address block",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nforwardedHeader: x-real-ip\n",
                "unknown variant",
            ),
            (
                "clusters:\n- {name: a, server: 'https://x'}\nsyncRegistries:\n- {name: r, clusters: [zz], resources: []}\n",
                "sync registry \"r\" names cluster \"zz\", which is not under `clusters:` (known: a)",
            ),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let path = write(&dir, &format!("c{i}.yaml"), text);
            let err = load_file(&path).unwrap_err().to_string();
            assert!(err.contains(want), "case {i}: {err}");
        }
        let err = load_file(&dir.join("missing.yaml")).unwrap_err();
        assert_eq!(err.code(), "read_failed");
        let ok = write(
            &dir,
            "ok.yaml",
            "listen: 127.0.0.1:9000\nclusters:\n- {name: a, server: 'https://x', token: t}\n",
        );
        let config = load_file(&ok).unwrap();
        assert_eq!(config.clusters[0].name, "a");
        assert_eq!(config.listen.unwrap().port(), 9000);
    }

    #[test]
    fn the_nats_block_parses_and_refuses_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let ok = write(
            dir,
            "nats.yaml",
            "clusters:\n- {name: a, server: 'https://x', token: t}\nnats:\n  url: nats://n1:4222,nats://n2:4222\n  stream: S\n  historyPerTopic: 3\n  streamReplicas: 3\n  user: kube-pulse\n  passwordFile: /run/pw\n  ca: /run/ca.pem\n  cert: /run/tls.crt\n  key: /run/tls.key\n",
        );
        let nats = load_file(&ok).unwrap().nats.unwrap();
        assert_eq!(
            (
                nats.user.as_deref(),
                nats.password_file.as_deref(),
                nats.ca.as_deref(),
                nats.cert.as_deref(),
                nats.key.as_deref()
            ),
            (
                Some("kube-pulse"),
                Some(Path::new("/run/pw")),
                Some(Path::new("/run/ca.pem")),
                Some(Path::new("/run/tls.crt")),
                Some(Path::new("/run/tls.key"))
            )
        );
        // A password is a file's, never the config file's.
        let inline = write(
            dir,
            "inline.yaml",
            "clusters:\n- {name: a, server: 'https://x', token: t}\nnats: {url: 'nats://h:1', user: u, password: p}\n",
        );
        let err = load_file(&inline).unwrap_err().to_string();
        assert!(err.contains("password"), "{err}");
        assert_eq!(
            (
                nats.url.as_deref(),
                nats.stream.as_deref(),
                nats.history_per_topic,
                nats.stream_replicas
            ),
            (
                Some("nats://n1:4222,nats://n2:4222"),
                Some("S"),
                Some(3),
                Some(3)
            )
        );
        let bad = write(
            dir,
            "bad.yaml",
            "clusters:\n- {name: a, server: 'https://x', token: t}\nnats: {address: x}\n",
        );
        let err = load_file(&bad).unwrap_err().to_string();
        assert!(err.contains("address"), "{err}");
    }

    #[test]
    fn the_documented_example_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config.example.yaml");
        let config = load_file(&path).unwrap();
        assert_eq!(config.clusters.len(), 3);
        assert_eq!(config.sync_registries.len(), 2);
        assert_eq!(config.allowed_hosts.len(), 2);
    }

    #[test]
    fn kubeconfig_contexts_become_clusters() {
        let dir = tempdir();
        let path = write(&dir, "kubeconfig", KUBECONFIG);
        let all = from_kubeconfig(&path, &[]).unwrap();
        let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["prod-eu", "dev"]);
        let one = from_kubeconfig(&path, &["dev".into()]).unwrap();
        assert_eq!(one.len(), 1);
        let err = from_kubeconfig(&path, &["nope".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("available: Prod_EU, dev"), "{err}");
    }

    #[test]
    fn debug_output_hides_the_token() {
        let spec = ClusterSpec {
            name: "edge".into(),
            kubeconfig: None,
            context: None,
            server: Some("https://edge:6443".into()),
            token: Some("s3cret-token".into()),
            token_file: None,
            ca_file: None,
            insecure_skip_tls_verify: false,
            mode: MemberMode::Pull,
            agent: None,
        };
        let shown = format!("{spec:?}");
        assert!(!shown.contains("s3cret-token"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("edge:6443"),
            "{shown}"
        );
    }
}
