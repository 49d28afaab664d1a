//! Scale-out, part 1: which replica owns which member cluster
//! (`union ──every name──▶ [ownership] ──owned names──▶ union ──▶ pipeline`,
//! Leases in a host cluster beside). Each member has a Lease
//! `kube-pulse-member-{cluster}`; each replica renews its own
//! `kube-pulse-replica-{id}` Lease to say it is alive. A replica takes a
//! free or expired member Lease when rendezvous hashing over the live
//! replicas names it ([`rendezvous`]), renews the ones it holds, hands over
//! those another live replica should own (stopping the member before
//! releasing the Lease), and stops a member whose Lease it could not renew
//! before others may take it ([`table`]). Only the owner runs a member's
//! probes, watches and status machines. Part 2, with `--nats`: the relay
//! ([`Relay`]), one JetStream stream of changes over NATS, carries every
//! owner's documents to every replica, and the task bucket ([`TaskBucket`])
//! holds the tasks every replica sees, both on one client whose credentials
//! and TLS are [`NatsAuth`]. `docs/SCALE-OUT.md` has the design.

pub mod agents;
mod leases;
mod nats_auth;
mod ownership;
mod relay;
mod rendezvous;
mod signing;
mod subject;
mod table;
mod task_bucket;

use std::time::Duration;

pub use agents::AgentLinks;
pub use nats_auth::{
    ClientCertificate, NatsAuth, NatsAuthError, NatsAuthSources, NatsCredentials, NatsTls,
    PASSWORD_ENV as NATS_PASSWORD_ENV, Secret, TOKEN_ENV as NATS_TOKEN_ENV,
};
pub use ownership::{LeaseCheck, Ownership, OwnershipHealth};
pub use relay::{
    DEFAULT_AGENT_GRACE, DEFAULT_HISTORY, DEFAULT_REPLICAS, DEFAULT_STREAM, Hubs, MAX_REPLICAS,
    NatsCheck, NatsSettings, Relay, START_PATIENCE,
};
pub(crate) use signing::RejectionLog;
pub use signing::{
    HEADER as SIGNATURE_HEADER, MIN_KEY_BYTES as MIN_SIGNING_KEY_BYTES, Rejection, SigningKey,
};
pub use subject::{Envelope, PREFIX as SUBJECT_PREFIX, of_topic as subject_of_topic};
pub use task_bucket::{TaskBucket, bucket_of as task_bucket_of};

/// The broker's time of a stream message (when JetStream received it), as
/// a UTC time; None out of chrono's range.
pub(crate) fn broker_time(
    info: &async_nats::jetstream::message::Info<'_>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let nanos = i64::try_from(info.published.unix_timestamp_nanos()).ok()?;
    Some(chrono::DateTime::from_timestamp_nanos(nanos))
}

/// The replica of `replicas` that should own `member` once ownership has
/// settled (rendezvous hashing); None without replicas.
pub fn preferred_owner<'a>(
    member: &str,
    replicas: impl IntoIterator<Item = &'a String>,
) -> Option<&'a String> {
    rendezvous::preferred(member, replicas)
}

/// Where the Leases are and who this replica is.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// Client configuration of the host cluster that holds the Leases.
    pub client: kube::Config,
    /// Namespace of the Leases.
    pub namespace: String,
    /// This replica's identity (`holderIdentity`); unique among replicas.
    pub replica: String,
    /// `leaseDurationSeconds`: how long a Lease not renewed stays held.
    /// Renewals run every third of it; a replica stops a member after two
    /// thirds without a renewal.
    pub duration: Duration,
}

/// Default Lease duration (as Kubernetes' own leader election).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(15);

/// Where the host cluster that holds the Leases is reached from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseHost {
    /// A kubeconfig file (its current context).
    Kubeconfig(std::path::PathBuf),
    /// The cluster this pod runs in, through the pod's service account.
    InCluster,
}

/// The client configuration of the cluster this pod runs in (its service
/// account's token, CA and namespace), with an error that says what is
/// missing when this process does not run in a pod.
pub fn in_cluster_config() -> crate::Result<kube::Config> {
    use kube::config::InClusterError;
    kube::Config::incluster().map_err(|e| {
        crate::Error::Settings(match e {
            InClusterError::ReadEnvironmentVariable(_) => "lease host cluster in-cluster: not running in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set); outside a cluster give --lease-kubeconfig".to_string(),
            other => format!(
                "lease host cluster in-cluster: the pod's service account is not mounted at /var/run/secrets/kubernetes.io/serviceaccount ({other}); is automountServiceAccountToken off?"
            ),
        })
    })
}

impl LeaseSettings {
    /// Refuses settings the Leases cannot work with.
    pub fn validate(&self) -> crate::Result<()> {
        let id = &self.replica;
        let valid_id = !id.is_empty()
            && id.len() <= 63
            && id.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && id.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !valid_id {
            return Err(crate::Error::Settings(format!(
                "replica id {id:?}: with Leases it names a Lease, so it must be lowercase letters, digits, '-' and '.' (at most 63, starting and ending alphanumeric)"
            )));
        }
        if self.duration < Duration::from_secs(3) || self.duration > Duration::from_secs(600) {
            return Err(crate::Error::Settings(format!(
                "lease duration {:?}: must be 3 to 600 seconds",
                self.duration
            )));
        }
        if !crate::names::valid_name(&self.namespace) {
            return Err(crate::Error::Settings(format!(
                "lease namespace {:?} is not a namespace name",
                self.namespace
            )));
        }
        Ok(())
    }

    /// How often Leases are listed and renewed.
    pub(crate) fn period(&self) -> Duration {
        self.duration / 3
    }

    /// How long after a renewal was sent a member may run without another.
    pub(crate) fn stop_after(&self) -> Duration {
        self.duration * 2 / 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        let base = LeaseSettings {
            client: kube::Config::new("http://127.0.0.1:1".parse().unwrap()),
            namespace: "kube-pulse".into(),
            replica: "kube-pulse-7d9f-abcde".into(),
            duration: DEFAULT_DURATION,
        };
        assert!(base.validate().is_ok());
        assert_eq!(base.period(), Duration::from_secs(5));
        assert_eq!(base.stop_after(), Duration::from_secs(10));
        // (replica, namespace, duration seconds, error names)
        let cases: &[(&str, &str, u64, &str)] = &[
            ("Pod_1", "ns", 15, "replica id"),
            ("", "ns", 15, "replica id"),
            ("-a", "ns", 15, "replica id"),
            ("a", "NS", 15, "namespace"),
            ("a", "ns", 2, "duration"),
            ("a", "ns", 601, "duration"),
        ];
        for (replica, namespace, seconds, want) in cases {
            let settings = LeaseSettings {
                replica: replica.to_string(),
                namespace: namespace.to_string(),
                duration: Duration::from_secs(*seconds),
                ..base.clone()
            };
            let err = settings.validate().unwrap_err().to_string();
            assert!(err.contains(want), "{replica} {namespace} {seconds}: {err}");
        }
    }
}
