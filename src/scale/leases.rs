//! The Leases in the host cluster (`coordination.k8s.io/v1`): list them,
//! create one, and change one only at the `resourceVersion` last seen (the
//! apiserver answers 409 to a stale one). That compare-and-swap is the only
//! coordination between replicas.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

/// Label on every kube-pulse Lease: `member` or `replica`.
pub(crate) const ROLE_LABEL: &str = "kube-pulse.io/lease";
/// Annotation naming the member cluster of a member Lease.
pub(crate) const MEMBER_ANNOTATION: &str = "kube-pulse.io/member";
const MEMBER_PREFIX: &str = "kube-pulse-member-";
const REPLICA_PREFIX: &str = "kube-pulse-replica-";

/// The Lease of a member cluster (cluster names are DNS labels).
pub(crate) fn member_lease(member: &str) -> String {
    format!("{MEMBER_PREFIX}{member}")
}

/// The Lease that says a replica is alive.
pub(crate) fn replica_lease(replica: &str) -> String {
    format!("{REPLICA_PREFIX}{replica}")
}

/// Why a Lease write did not happen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    /// Someone changed (or created) it first: 409.
    #[error("conflict: the Lease changed since it was read")]
    Conflict,
    /// Anything else (unreachable, forbidden, timed out).
    #[error("{0}")]
    Failed(String),
}

/// A Lease as read: its version and holder, and what a write needs.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub(crate) lease: Lease,
}

impl Listed {
    pub(crate) fn version(&self) -> String {
        self.lease
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default()
    }
    pub(crate) fn holder(&self) -> Option<String> {
        let spec = self.lease.spec.as_ref()?;
        spec.holder_identity.clone().filter(|h| !h.is_empty())
    }
    pub(crate) fn duration(&self) -> Option<Duration> {
        let seconds = self.lease.spec.as_ref()?.lease_duration_seconds?;
        u64::try_from(seconds)
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs)
    }
}

/// Member and replica Leases, by member name and replica id.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub(crate) members: BTreeMap<String, Listed>,
    pub(crate) replicas: BTreeMap<String, Listed>,
}

/// The Leases of one namespace, written with one timeout.
#[derive(Clone)]
pub(crate) struct LeaseStore {
    api: Api<Lease>,
    timeout: Duration,
}

impl std::fmt::Debug for LeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseStore").finish_non_exhaustive()
    }
}

fn failed(e: kube::Error) -> WriteError {
    match e {
        kube::Error::Api(status) if status.code == 409 => WriteError::Conflict,
        other => WriteError::Failed(other.to_string()),
    }
}

impl LeaseStore {
    pub(crate) fn new(client: kube::Client, namespace: &str, timeout: Duration) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            timeout,
        }
    }

    async fn timed<T>(
        &self,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, WriteError> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result.map_err(failed),
            Err(_) => Err(WriteError::Failed(format!(
                "no answer within {:?}",
                self.timeout
            ))),
        }
    }

    /// Every kube-pulse Lease of the namespace.
    pub(crate) async fn list(&self) -> Result<Listing, WriteError> {
        let list = self
            .timed(self.api.list(&ListParams::default().labels(ROLE_LABEL)))
            .await?;
        let mut listing = Listing::default();
        for lease in list.items {
            let name = lease.metadata.name.clone().unwrap_or_default();
            let role = lease
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ROLE_LABEL))
                .cloned();
            let member = lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(MEMBER_ANNOTATION))
                .cloned();
            match (role.as_deref(), member, name.strip_prefix(REPLICA_PREFIX)) {
                (Some("member"), Some(member), _) => {
                    listing.members.insert(member, Listed { lease });
                }
                (Some("replica"), _, Some(id)) => {
                    listing.replicas.insert(id.to_string(), Listed { lease });
                }
                _ => {}
            }
        }
        Ok(listing)
    }

    /// Takes or renews `name` for `holder` for `duration`: creates it when
    /// `current` is None, else replaces it at `current`'s version.
    /// Returns the Lease as written.
    pub(crate) async fn hold(
        &self,
        name: &str,
        member: Option<&str>,
        current: Option<&Listed>,
        holder: &str,
        duration: Duration,
    ) -> Result<Listed, WriteError> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let seconds = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX);
        let spec = |old: Option<&LeaseSpec>| {
            let renewing = old.and_then(|s| s.holder_identity.as_deref()) == Some(holder);
            let transitions = old.and_then(|s| s.lease_transitions).unwrap_or(0);
            LeaseSpec {
                holder_identity: Some(holder.to_string()),
                lease_duration_seconds: Some(seconds),
                acquire_time: if renewing {
                    old.and_then(|s| s.acquire_time.clone())
                } else {
                    Some(now.clone())
                },
                renew_time: Some(now.clone()),
                lease_transitions: Some(if renewing || old.is_none() {
                    transitions
                } else {
                    transitions + 1
                }),
                ..Default::default()
            }
        };
        let written = match current {
            Some(current) => {
                let mut lease = current.lease.clone();
                lease.spec = Some(spec(current.lease.spec.as_ref()));
                self.timed(self.api.replace(name, &PostParams::default(), &lease))
                    .await?
            }
            None => {
                let role = if member.is_some() {
                    "member"
                } else {
                    "replica"
                };
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        labels: Some([(ROLE_LABEL.to_string(), role.to_string())].into()),
                        annotations: member
                            .map(|m| [(MEMBER_ANNOTATION.to_string(), m.to_string())].into()),
                        ..Default::default()
                    },
                    spec: Some(spec(None)),
                };
                self.timed(self.api.create(&PostParams::default(), &lease))
                    .await?
            }
        };
        Ok(Listed { lease: written })
    }

    /// Releases `current` (this replica's): no holder, at its version, so
    /// others may take it at once.
    pub(crate) async fn release(&self, name: &str, current: &Listed) -> Result<(), WriteError> {
        let mut lease = current.lease.clone();
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = None;
        spec.acquire_time = None;
        spec.renew_time = None;
        self.timed(self.api.replace(name, &PostParams::default(), &lease))
            .await
            .map(|_| ())
    }
}
