//! What the Karpor integration runs with (`flags + config file ──▶
//! [settings] ──▶ source, writer`): plain data, so the command line can
//! name it without depending on the source or the writer.

use std::path::PathBuf;
use std::time::Duration;

/// Where Karpor is and what its clusters may make kube-pulse do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KarporSettings {
    /// `--karpor-kubeconfig`.
    pub kubeconfig: PathBuf,
    /// `--karpor-context`.
    pub context: Option<String>,
    /// `--karpor-allow-exec`: run exec plugins (else such clusters are held).
    pub allow_exec: bool,
    /// Which addresses the Clusters' endpoints may reach (else such
    /// clusters are held).
    pub endpoints: super::endpoints::EndpointPolicy,
    /// How status is written back onto Karpor's objects; None with
    /// `--karpor-read-only`.
    pub status: Option<WriterSettings>,
}

/// How the writer writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterSettings {
    /// This replica's name, in the field manager `kube-pulse/{replica}`.
    pub replica: String,
    /// The least time between two writes of one object.
    pub min_interval: Duration,
    /// Whether replicas share the members, and what this replica's hub holds.
    pub sharing: Sharing,
}

/// How the members are shared among replicas, as the status writer sees it:
/// which objects it writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sharing {
    /// This replica runs every member: it writes every Cluster and every
    /// SyncRegistry, and stands by while another kube-pulse writer whose
    /// name sorts first writes too.
    #[default]
    Alone,
    /// Replicas share the members through Leases (src/scale/) and each hub
    /// holds only its own members' documents: the writer writes the
    /// Clusters this replica owns and no SyncRegistry (each spans clusters
    /// of several owners).
    Leases,
    /// Leases, and the stream of changes (`--nats`) gives every hub every
    /// member's documents: the writer writes the Clusters this replica
    /// owns and the SyncRegistries whose first cluster it owns.
    LeasesAndStream,
}

impl Default for WriterSettings {
    fn default() -> Self {
        Self {
            replica: default_replica(),
            min_interval: Duration::from_secs(1),
            sharing: Sharing::Alone,
        }
    }
}

/// `POD_NAME`, else the host name, else `kube-pulse`.
pub fn default_replica() -> String {
    std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kube-pulse".into())
}
