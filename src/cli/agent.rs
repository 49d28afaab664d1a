//! The flags of `kube-pulse agent` (one member's status pushed to the hub
//! over NATS), and of `kube-pulse agent-key` and `kube-pulse hub-key`, the
//! two keys an agent's trust is made of (docs/AGENT.md).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::shared::{NatsAuthArgs, NatsUrl};
use crate::agent::{AgentSettings, DEFAULT_HEARTBEAT};
use crate::error::{Error, Result};

/// Flags of `agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The member's name on the hub (`clusters/{member}`): the hub's
    /// configuration names it with `mode: push` and this agent's public key.
    #[arg(long, value_name = "NAME", env = "KUBE_PULSE_AGENT_MEMBER")]
    pub member: String,
    /// The hub's NATS server(s), `nats://HOST:PORT` (or several, separated
    /// by commas): the agent dials out to it, and to nothing else.
    #[arg(long, value_name = "URL", env = "KUBE_PULSE_NATS")]
    pub nats: NatsUrl,
    /// How the agent logs in to NATS and checks the server.
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
    /// File holding the agent's nkey seed (`SU…`) that signs what it
    /// publishes; default: the seed it logs in with (--nats-nkey-seed, or
    /// the one in --nats-credentials).
    #[arg(long, value_name = "FILE", env = "KUBE_PULSE_AGENT_IDENTITY_SEED")]
    pub identity_seed: Option<PathBuf>,
    /// The replicas' public key (`N…`, from `kube-pulse hub-key` or a
    /// replica's start log): task requests signed with it are run; without
    /// it the agent refuses tasks.
    #[arg(long, value_name = "KEY", env = "KUBE_PULSE_AGENT_HUB_KEY")]
    pub hub_key: Option<String>,
    /// Kubeconfig of the member cluster; default: the pod's service account
    /// (in-cluster).
    #[arg(long, value_name = "PATH", env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Context of --kubeconfig; its current context when omitted.
    #[arg(long, value_name = "NAME", requires = "kubeconfig")]
    pub context: Option<String>,
    /// The gateway's config file format; the agent reads its
    /// `syncRegistries`, `appLabel`, `podWatch`, `probe` and `health`.
    #[arg(long, value_name = "FILE", env = "KUBE_PULSE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address of `/livez`, `/readyz` and `/metrics` (all the agent serves).
    #[arg(long, env = "KUBE_PULSE_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Seconds between heartbeats (the hub's grace, 40 s by default, should
    /// be several of them).
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_HEARTBEAT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=300))]
    pub heartbeat: u64,
    /// Namespace of the Lease `kube-pulse-agent-{member}` in the member
    /// cluster, by which one agent of the member runs and a second stands
    /// by; default the pod's (or the kubeconfig context's).
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Seconds of the Lease (3 to 600); a standing-by agent takes over this
    /// long after the holder's last renewal.
    #[arg(long, value_name = "SECONDS", default_value_t = crate::agent::DEFAULT_LEASE_DURATION.as_secs(),
          value_parser = clap::value_parser!(u64).range(3..=600))]
    pub lease_duration: u64,
    /// This agent's name in the Lease; default the pod's name, else the
    /// host's name and the process id.
    #[arg(long, value_name = "ID", env = "POD_NAME")]
    pub agent_id: Option<String>,
    /// Run without the Lease (a second agent of the member would publish too).
    #[arg(long)]
    pub no_lease: bool,
    /// The name of the hub's stream of changes (its `nats: stream`); the
    /// agents' stream is this name followed by `_AGENTS`.
    #[arg(long, value_name = "NAME", default_value = crate::scale::DEFAULT_STREAM)]
    pub stream: String,
}

impl AgentArgs {
    /// The agent's settings: every file read and checked, nothing started.
    pub async fn resolve(&self) -> Result<(SocketAddr, AgentSettings)> {
        let not_for_agent = [
            (
                "--nats-signing-key-file",
                self.nats_auth.nats_signing_key_file.is_some(),
            ),
            (
                "--nats-insecure-unsigned",
                self.nats_auth.nats_insecure_unsigned,
            ),
        ];
        if let Some((flag, _)) = not_for_agent.iter().find(|(_, set)| *set) {
            return Err(Error::Settings(format!(
                "{flag} is the replicas' (the agent signs with its own nkey, --identity-seed)"
            )));
        }
        let file = match &self.config {
            Some(path) => Some(crate::config::load_agent_file(path)?),
            None => None,
        };
        let pipeline = file
            .as_ref()
            .map(crate::pipeline::PipelineConfig::from_file)
            .unwrap_or_default();
        if pipeline.source.pod_watch.on_demand && self.hub_key.is_none() {
            return Err(Error::Settings(
                "podWatch.onDemand on an agent needs --hub-key: the agent watches its member's pods while the hub says a client looks at its apps, and believes only what the hub key signed (docs/AGENT.md)".into(),
            ));
        }
        let health = file.map(|f| f.health).unwrap_or_default();
        let client = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig =
                    kube::config::Kubeconfig::read_from(path).map_err(Error::Kubeconfig)?;
                let options = kube::config::KubeConfigOptions {
                    context: self.context.clone(),
                    ..Default::default()
                };
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(Error::Kubeconfig)?
            }
            None => kube::Config::incluster().map_err(|e| {
                Error::Settings(format!(
                    "no --kubeconfig and not in a pod whose service account is mounted: {e}"
                ))
            })?,
        };
        let mut nats = crate::scale::NatsSettings::new(self.nats.0.clone());
        nats.stream = self.stream.clone();
        nats.validate()?;
        let auth = self
            .nats_auth
            .sources(&crate::config::NatsFile::default(), &|name| {
                std::env::var(name).ok()
            });
        nats.auth = auth.resolve()?;
        let identity = match &self.identity_seed {
            Some(path) => read_seed(path)?,
            None => nats.auth.user_key().ok_or_else(|| {
                Error::Settings(
                    "the agent signs with a user nkey: give --identity-seed FILE, or log in with --nats-nkey-seed or --nats-credentials".into(),
                )
            })?,
        };
        let hub_key = match &self.hub_key {
            Some(key) => Some(
                crate::scale::agents::wire::hub_public_key(key)
                    .map_err(|e| Error::Settings(format!("--hub-key: {e}")))?,
            ),
            None => None,
        };
        let lease = (!self.no_lease).then(|| crate::agent::AgentLease {
            namespace: self
                .lease_namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace.clone()),
            holder: self.agent_id.clone().unwrap_or_else(|| {
                let host = std::fs::read_to_string("/etc/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_else(|_| "agent".into());
                format!("{host}-{}", std::process::id())
            }),
            duration: std::time::Duration::from_secs(self.lease_duration),
        });
        let settings = AgentSettings {
            member: self.member.clone(),
            client,
            pipeline,
            nats,
            identity,
            hub_key,
            heartbeat: std::time::Duration::from_secs(self.heartbeat),
            health,
            lease,
        };
        Ok((self.listen, settings))
    }
}

/// A user nkey seed (`SU…`) from a file.
fn read_seed(path: &std::path::Path) -> Result<nkeys::KeyPair> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let seed = text.trim();
    let pair = nkeys::KeyPair::from_seed(seed)
        .map_err(|e| Error::Settings(format!("{}: not an nkey seed: {e}", path.display())))?;
    if pair.key_pair_type() != nkeys::KeyPairType::User {
        return Err(Error::Settings(format!(
            "{}: not a user's seed (SU…)",
            path.display()
        )));
    }
    Ok(pair)
}

/// Flags of `agent-key`: a new identity for an agent.
#[derive(Debug, Args)]
pub struct AgentKeyArgs {
    /// The member the agent pushes.
    #[arg(long, value_name = "NAME")]
    pub member: String,
    /// Where to write the new seed (`SU…`, mode 0600); it must not exist.
    #[arg(long, value_name = "FILE")]
    pub seed_out: PathBuf,
}

impl AgentKeyArgs {
    /// Makes the key, writes the seed, and returns what to print: the
    /// public key, the hub's config entry and the NATS user entry.
    pub fn run(&self) -> Result<String> {
        if !crate::names::valid_name(&self.member) {
            return Err(Error::Settings(format!(
                "--member {:?} must be a DNS label",
                self.member
            )));
        }
        let pair = nkeys::KeyPair::new_user();
        let seed = pair
            .seed()
            .map_err(|e| Error::Settings(format!("a new key has no seed: {e}")))?;
        write_new(&self.seed_out, &format!("{seed}\n"))?;
        Ok(crate::scale::agents::issue_text(
            &self.member,
            &pair.public_key(),
        ))
    }
}

/// Writes `text` to a file that must not exist yet, readable by its owner only.
fn write_new(path: &std::path::Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    file.write_all(text.as_bytes())
        .map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })
}

/// Flags of `hub-key`: the replicas' public key, for agents' `--hub-key`.
#[derive(Debug, Args)]
pub struct HubKeyArgs {
    /// The replicas' signing key file (`--nats-signing-key-file`).
    #[arg(long, value_name = "FILE", env = "KUBE_PULSE_NATS_SIGNING_KEY_FILE")]
    pub signing_key_file: PathBuf,
}

impl HubKeyArgs {
    /// The hub key's public part.
    pub fn run(&self) -> Result<String> {
        let key = crate::scale::SigningKey::from_file(&self.signing_key_file)?;
        Ok(key.hub_key().public_key())
    }
}
