//! From flags to configuration (`flags, config file ──▶ [settings] ──▶
//! GatewayConfig, DemoOptions ──▶ gateway, demo`): `serve` reads its config
//! file (or a kubeconfig, or Karpor) and lays the flags over it (flags
//! win): members, connections, Karpor, Leases, the stream of changes;
//! `demo` lays its flags over the demo's defaults. Both share the flags
//! that describe transports, tasks, authentication, TLS and the replay log.

use std::net::SocketAddr;
use std::path::PathBuf;

#[cfg(feature = "demo")]
use super::args::DemoArgs;
use super::args::ServeArgs;
use super::shared::{ConnectionArgs, PushArgs, SecurityArgs, TaskArgs};
use crate::config;
use crate::error::{Error, Result};
use crate::gateway::GatewayConfig;

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

impl ServeArgs {
    /// Where the members come from, to re-read on SIGHUP and file changes.
    pub fn member_source(&self) -> Option<crate::pipeline::MemberSource> {
        match (&self.config, self.member_kubeconfig()) {
            (Some(path), _) => Some(crate::pipeline::MemberSource::File {
                path: path.clone(),
                beside_karpor: self.karpor_kubeconfig.is_some(),
            }),
            (None, Some(path)) => Some(crate::pipeline::MemberSource::Kubeconfig {
                path,
                contexts: self.contexts.clone(),
            }),
            (None, None) => None,
        }
    }

    /// The kubeconfig whose contexts are the members: `--kubeconfig`, else
    /// (without `--config`) the file `KUBECONFIG` names. A `KUBECONFIG` set
    /// for kubectl is no reason to refuse `--config`: the file wins.
    fn member_kubeconfig(&self) -> Option<PathBuf> {
        self.kubeconfig.clone().or_else(|| {
            self.config
                .is_none()
                .then(|| std::env::var_os("KUBECONFIG"))
                .flatten()
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
    }

    /// `--config` and `--kubeconfig` name the members two ways: one of them.
    fn check_member_flags(&self) -> Result<()> {
        if self.config.is_some() && self.kubeconfig.is_some() {
            return Err(Error::Settings(
                "give --config FILE or --kubeconfig PATH, not both (the file names its members under `clusters:`)".into(),
            ));
        }
        if !self.contexts.is_empty() && self.member_kubeconfig().is_none() {
            return Err(Error::Settings(if self.config.is_some() {
                "--context picks contexts of --kubeconfig; with --config the file names the members"
                    .into()
            } else {
                "--context needs --kubeconfig PATH (or KUBECONFIG)".into()
            }));
        }
        Ok(())
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
            let endpoints =
                !self.karpor_allow_endpoints.is_empty() || !self.karpor_deny_endpoints.is_empty();
            if self.karpor_context.is_some()
                || self.karpor_allow_exec
                || self.karpor_read_only
                || endpoints
            {
                return Err(Error::Settings(
                    "--karpor-context, --karpor-allow-exec, --karpor-read-only, --karpor-allow-endpoint and --karpor-deny-endpoint need --karpor-kubeconfig (or karpor.kubeconfig in the config file)".into(),
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
            endpoints: crate::karpor::EndpointPolicy {
                allow: blocks(&self.karpor_allow_endpoints, &file.allow_endpoints),
                deny: blocks(&self.karpor_deny_endpoints, &file.deny_endpoints),
            },
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
}

/// Address blocks from a flag, else from the file (validated by
/// `config::load_file`).
fn blocks(flag: &[crate::http_settings::Cidr], file: &[String]) -> Vec<crate::http_settings::Cidr> {
    if flag.is_empty() {
        file.iter().filter_map(|c| c.parse().ok()).collect()
    } else {
        flag.to_vec()
    }
}

impl ServeArgs {
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
    /// (the flag wins over `url`), its credentials and TLS files read and
    /// checked, the secrets of the process's environment taken; None
    /// without a URL.
    pub fn nats(
        &self,
        file: Option<&crate::config::NatsFile>,
    ) -> Result<Option<crate::scale::NatsSettings>> {
        self.nats_with_env(file, &process_env)
    }

    /// As [`ServeArgs::nats`], with the environment's variables from `env`.
    pub fn nats_with_env(
        &self,
        file: Option<&crate::config::NatsFile>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<crate::scale::NatsSettings>> {
        let file = file.cloned().unwrap_or_default();
        let replicas = self.nats_stream_replicas.or(file.stream_replicas);
        let auth = self.nats_auth.sources(&file, env);
        let Some(url) = self.nats.clone().map(|url| url.0).or(file.url) else {
            if file.stream.is_some() || file.history_per_topic.is_some() || replicas.is_some() {
                return Err(Error::Settings(
                    "nats: stream, historyPerTopic and streamReplicas (--nats-stream-replicas) need a url (or --nats)".into(),
                ));
            }
            return no_nats_without_url(&auth);
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
        settings.auth = auth.resolve()?;
        let key_file =
            (self.nats_auth.nats_signing_key_file.as_ref()).or(file.signing_key_file.as_ref());
        if let Some(path) = key_file {
            settings.signing = Some(crate::scale::SigningKey::from_file(path)?);
        }
        settings.insecure_unsigned = self.nats_auth.nats_insecure_unsigned
            || (key_file.is_none() && file.insecure_unsigned == Some(true));
        if let Some(grace) = self.agent_grace.or(file.agent_grace_seconds) {
            if !(1..=3600).contains(&grace) {
                return Err(Error::Settings(format!(
                    "nats: agentGraceSeconds must be 1 to 3600, not {grace}"
                )));
            }
            settings.agent_grace = std::time::Duration::from_secs(grace);
        }
        // Neither: refused by the gateway's start (`check_integrity`).
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
        self.check_member_flags()?;
        let (clusters, file_listen, pipeline, health, connections) = match (
            &self.config,
            self.member_kubeconfig(),
        ) {
            (Some(path), _) => {
                let file = config::load_file_beside(path, self.karpor_kubeconfig.is_some())?;
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
                config::from_kubeconfig(&path, &self.contexts)?,
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
        gateway.pushed = crate::pipeline::pushed(&clusters);
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

/// A variable of the process's environment, None when unset or not UTF-8.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Without a NATS URL there is no client: credentials or TLS settings for
/// it are a mistake, said rather than ignored.
fn no_nats_without_url(
    auth: &crate::scale::NatsAuthSources,
) -> Result<Option<crate::scale::NatsSettings>> {
    if auth.is_empty() {
        return Ok(None);
    }
    Err(Error::Settings(format!(
        "nats: credentials and TLS settings (--nats-credentials, --nats-nkey-seed, --nats-user, --nats-password-file, --nats-token-file, --nats-ca, --nats-cert, --nats-key, their nats: keys, {} and {}) need a NATS URL (--nats, or url in the nats: block)",
        crate::scale::NATS_PASSWORD_ENV,
        crate::scale::NATS_TOKEN_ENV
    )))
}

impl super::shared::NatsAuthArgs {
    /// Where the NATS client's credentials and TLS files are: these flags
    /// over `file`'s keys (each flag wins over its key), with the password
    /// and token of the environment (`env`; an empty variable counts as
    /// set, and is refused). Nothing is read yet.
    pub fn sources(
        &self,
        file: &config::NatsFile,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> crate::scale::NatsAuthSources {
        let secret = |name: &str| env(name).map(crate::scale::Secret::new);
        crate::scale::NatsAuthSources {
            credentials: self.nats_credentials.clone().or(file.credentials.clone()),
            nkey_seed: self.nats_nkey_seed.clone().or(file.nkey_seed.clone()),
            user: self.nats_user.clone().or(file.user.clone()),
            password_file: self
                .nats_password_file
                .clone()
                .or(file.password_file.clone()),
            password: secret(crate::scale::NATS_PASSWORD_ENV),
            token_file: self.nats_token_file.clone().or(file.token_file.clone()),
            token: secret(crate::scale::NATS_TOKEN_ENV),
            ca: self.nats_ca.clone().or(file.ca.clone()),
            cert: self.nats_cert.clone().or(file.cert.clone()),
            key: self.nats_key.clone().or(file.key.clone()),
        }
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
    if let Some(seconds) = push.replay_log_age {
        base.pipeline.hub.log_age = std::time::Duration::from_secs(seconds);
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
                    push_mode: self.karpor_push_mode,
                }),
            leases: self.leases,
            nats: self.nats_settings(&process_env)?,
            push_member: self.push_member.clone(),
        };
        Ok((self.listen, options))
    }

    /// The stream of changes of `--nats`, with its credentials and TLS
    /// files read and checked and the secrets of `env`; None without it.
    fn nats_settings(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<crate::scale::NatsSettings>> {
        let auth = self.nats_auth.sources(&Default::default(), env);
        let Some(url) = &self.nats else {
            return no_nats_without_url(&auth);
        };
        let mut settings = crate::scale::NatsSettings::new(url.0.as_str());
        settings.validate()?;
        settings.auth = auth.resolve()?;
        // One process: without a key file, a key of its own.
        settings.insecure_unsigned = self.nats_auth.nats_insecure_unsigned;
        if !settings.insecure_unsigned {
            settings.signing = Some(match &self.nats_auth.nats_signing_key_file {
                Some(path) => crate::scale::SigningKey::from_file(path)?,
                None => crate::scale::SigningKey::generate(),
            });
        }
        Ok(Some(settings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

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
            ..Default::default()
        };
        let settings = serve(&[]).nats(Some(&file)).unwrap().unwrap();
        assert_eq!(settings.agent_grace, crate::scale::DEFAULT_AGENT_GRACE);
        let graced = crate::config::NatsFile {
            agent_grace_seconds: Some(90),
            ..file.clone()
        };
        let grace =
            |args: &[&str], file| serve(args).nats(Some(file)).unwrap().unwrap().agent_grace;
        assert_eq!(grace(&[], &graced), std::time::Duration::from_secs(90));
        assert_eq!(
            grace(&["--agent-grace", "7"], &graced),
            std::time::Duration::from_secs(7)
        );
        let zero = crate::config::NatsFile {
            agent_grace_seconds: Some(0),
            ..file.clone()
        };
        let err = serve(&[]).nats(Some(&zero)).unwrap_err().to_string();
        assert!(err.contains("agentGraceSeconds must be 1 to 3600"), "{err}");
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
        // The signing key: from the flag over the file's key; without
        // either, refused at start unless insecure.
        assert!(defaults.signing.is_none() && defaults.check_integrity().is_err());
        let (a, b) = (dir.path().join("a.key"), dir.path().join("b.key"));
        std::fs::write(&a, "a".repeat(64)).unwrap();
        std::fs::write(&b, "b".repeat(64)).unwrap();
        let keyed = crate::config::NatsFile {
            signing_key_file: Some(a.clone()),
            ..file.clone()
        };
        let from_file = serve(&[]).nats(Some(&keyed)).unwrap().unwrap();
        let key_a = crate::scale::SigningKey::from_file(&a).unwrap();
        assert_eq!(from_file.signing.as_ref(), Some(&key_a));
        assert!(from_file.check_integrity().is_ok());
        let from_flag = serve(&["--nats-signing-key-file", b.to_str().unwrap()])
            .nats(Some(&keyed))
            .unwrap()
            .unwrap();
        assert_ne!(from_flag.signing.as_ref(), Some(&key_a));
        let insecure = serve(&["--nats", "nats://h:1", "--nats-insecure-unsigned"])
            .nats(None)
            .unwrap()
            .unwrap();
        assert!(insecure.insecure_unsigned && insecure.check_integrity().is_ok());
        std::fs::write(&a, "short").unwrap();
        let err = serve(&[]).nats(Some(&keyed)).unwrap_err().to_string();
        assert!(
            err.contains("signing key file") && err.contains("at least 32"),
            "{err}"
        );
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

    #[test]
    fn nats_credentials_come_from_flags_keys_and_the_environment() {
        use crate::scale::{NatsCredentials, Secret};
        let dir = tempfile::tempdir().unwrap();
        let password = dir.path().join("password");
        std::fs::write(&password, "s3cret-pw\n").unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cret-token").unwrap();
        let (password, token) = (password.to_str().unwrap(), token.to_str().unwrap());
        let serve = |extra: &[&str]| {
            let mut args = vec!["kube-pulse", "serve", "--kubeconfig", "kc"];
            args.extend_from_slice(extra);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Serve(args) => args,
                _ => panic!("serve expected"),
            }
        };
        let no_env = |_: &str| -> Option<String> { None };
        let url = ["--nats", "nats://h:4222"];
        let user_password = |user: &str, password: &str| {
            Some(NatsCredentials::UserPassword {
                user: user.into(),
                password: Secret::new(password),
            })
        };
        // Flags.
        let args = serve(
            &[
                &url[..],
                &["--nats-user", "kp", "--nats-password-file", password],
            ]
            .concat(),
        );
        let settings = args.nats_with_env(None, &no_env).unwrap().unwrap();
        assert_eq!(settings.auth.credentials, user_password("kp", "s3cret-pw"));
        for shown in [format!("{settings:?}"), format!("{args:?}")] {
            assert!(!shown.contains("s3cret"), "{shown}");
        }
        // The password from the environment.
        let env = |name: &str| (name == "KUBE_PULSE_NATS_PASSWORD").then(|| "env-pw".to_string());
        let settings = serve(&[&url[..], &["--nats-user", "kp"]].concat())
            .nats_with_env(None, &env)
            .unwrap()
            .unwrap();
        assert_eq!(settings.auth.credentials, user_password("kp", "env-pw"));
        // The file's keys, a flag winning over its key.
        let file = crate::config::NatsFile {
            url: Some("nats://file:4222".into()),
            user: Some("from-file".into()),
            password_file: Some(password.into()),
            ..Default::default()
        };
        let settings = serve(&[])
            .nats_with_env(Some(&file), &no_env)
            .unwrap()
            .unwrap();
        assert_eq!(
            settings.auth.credentials,
            user_password("from-file", "s3cret-pw")
        );
        let settings = serve(&["--nats-user", "flag"])
            .nats_with_env(Some(&file), &no_env)
            .unwrap()
            .unwrap();
        assert_eq!(
            settings.auth.credentials,
            user_password("flag", "s3cret-pw")
        );
        // Two ways at once, across flags and keys.
        let err = serve(&["--nats-token-file", token])
            .nats_with_env(Some(&file), &no_env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("give one way to log in, not two"), "{err}");
        // A certificate without its key; settings without a URL.
        let err = serve(&[&url[..], &["--nats-cert", "c.pem"]].concat())
            .nats_with_env(None, &no_env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs its private key"), "{err}");
        let err = serve(&["--nats-ca", "ca.pem"])
            .nats_with_env(None, &no_env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("need a NATS URL"), "{err}");
        let err = serve(&[])
            .nats_with_env(None, &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("need a NATS URL"), "{err}");
        // A file that cannot be read is named.
        let err = serve(
            &[
                &url[..],
                &[
                    "--nats-user",
                    "kp",
                    "--nats-password-file",
                    "/nonexistent/pw",
                ],
            ]
            .concat(),
        )
        .nats_with_env(None, &no_env)
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("cannot read the password file /nonexistent/pw"),
            "{err}"
        );
        // Credentials in the URL: refused, and shown nowhere.
        let args = serve(&["--nats", "nats://kp:s3cret-url@h:4222"]);
        assert!(!format!("{args:?}").contains("s3cret"));
        let err = args.nats_with_env(None, &no_env).unwrap_err().to_string();
        assert!(err.contains("carries credentials"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
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
        // Credentials and TLS, as serve takes them.
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "t0ken\n").unwrap();
        let args = demo(&[
            "--leases",
            "--nats",
            url,
            "--nats-token-file",
            token.to_str().unwrap(),
        ])
        .unwrap();
        let nats = args.nats_settings(&|_| None).unwrap().unwrap();
        assert_eq!(
            nats.auth.credentials,
            Some(crate::scale::NatsCredentials::Token(
                crate::scale::Secret::new("t0ken")
            ))
        );
        let err = demo(&["--nats-user", "kp"])
            .unwrap()
            .nats_settings(&|_| None)
            .unwrap_err();
        assert!(err.to_string().contains("need a NATS URL"), "{err}");
        let err = demo(&["--leases", "--nats", "nats://kp:s3cret@h:1"])
            .unwrap()
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("carries credentials") && !err.contains("s3cret"),
            "{err}"
        );
        // A push member needs --nats (so --leases), and not --karpor.
        let push = ["--push-member", "prod"];
        let (_, options) = demo(&[&["--leases", "--nats", url][..], &push].concat())
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(options.push_member.as_deref(), Some("prod"));
        assert!(options.nats.is_some());
        for refused in [
            &push[..],
            &["--leases", "--push-member", "prod"],
            &[
                "--leases",
                "--karpor",
                "--nats",
                url,
                "--push-member",
                "prod",
            ],
        ] {
            assert!(demo(refused).is_err(), "{refused:?}");
        }
        let (_, options) = demo(&["--leases", "--nats", url])
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(options.push_member, None);
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
