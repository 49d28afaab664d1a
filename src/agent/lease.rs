//! One agent per member (`agent ──[Lease kube-pulse-agent-{member}]──▶
//! member cluster`): an agent runs only while it holds the Lease in the
//! member cluster; a second agent of the same member (a rolling update, two
//! replicas) stands by, without watching anything, until the Lease is
//! released or expires. Expiry is judged as the gateway's member Leases
//! are (docs/SCALE-OUT.md): by this process's monotonic clock, from when a
//! version of the Lease was first seen, never from another host's
//! `renewTime`. The holder renews every third of the duration and stops
//! when no renewal succeeded for two thirds of it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The default Lease duration (as Kubernetes' leader election).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(15);

/// Where the agents of a member meet.
#[derive(Debug, Clone)]
pub struct AgentLease {
    /// The member cluster's namespace of the Lease (the agent's own).
    pub namespace: String,
    /// This agent's name (`holderIdentity`): its pod's name, by default.
    pub holder: String,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
}

/// The Lease's name for `member`.
pub fn lease_name(member: &str) -> String {
    format!("kube-pulse-agent-{member}")
}

/// What a look at the Lease says to do. Pure.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// No Lease: create it.
    Create,
    /// Ours, free, or expired: write it at this version.
    Take(String),
    /// Another agent's and alive: wait.
    Wait,
}

/// Decides from the Lease's holder and version, this agent's name, and
/// since when this version has been seen (its duration passed: expired).
fn step(lease: Option<(&str, &str)>, me: &str, seen_for: Duration, duration: Duration) -> Step {
    match lease {
        None => Step::Create,
        Some((holder, version)) if holder.is_empty() || holder == me || seen_for >= duration => {
            Step::Take(version.to_string())
        }
        Some(_) => Step::Wait,
    }
}

/// The Lease's holder and version.
fn holder_of(lease: &Lease) -> (String, String) {
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    let version = lease.metadata.resource_version.clone().unwrap_or_default();
    (holder, version)
}

fn spec(holder: &str, duration: Duration, acquired: Option<MicroTime>) -> LeaseSpec {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    LeaseSpec {
        holder_identity: Some(holder.to_string()),
        lease_duration_seconds: Some(i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)),
        acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
        renew_time: Some(now),
        ..Default::default()
    }
}

/// The Lease of one member's agents in the member cluster.
pub(super) struct Holder {
    api: Api<Lease>,
    name: String,
    settings: AgentLease,
    /// The Lease as last written by us.
    held: Option<Lease>,
}

impl Holder {
    pub(super) fn new(client: kube::Client, member: &str, settings: AgentLease) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            name: lease_name(member),
            settings,
            held: None,
        }
    }

    /// Waits until this agent holds the Lease (or `stop`): false when stopped.
    pub(super) async fn acquire(&mut self, stop: &CancellationToken) -> bool {
        let period = self.settings.duration / 3;
        let mut seen: Option<(String, Instant)> = None;
        let mut waiting_logged = false;
        loop {
            match self.try_take(&mut seen).await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, holder = %self.settings.holder, "agent Lease held: this agent publishes the member");
                    return true;
                }
                Ok(false) if !waiting_logged => {
                    tracing::info!(lease = %self.name, "another agent of this member holds the Lease: standing by");
                    waiting_logged = true;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(lease = %self.name, cause = %e, "the agent Lease cannot be read or written; trying again")
                }
            }
            tokio::select! {
                () = stop.cancelled() => return false,
                () = tokio::time::sleep(period) => {}
            }
        }
    }

    /// One look at the Lease, and a write when it is ours to take.
    async fn try_take(&mut self, seen: &mut Option<(String, Instant)>) -> Result<bool, String> {
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| e.to_string())?;
        let (holder, version) = current.as_ref().map(holder_of).unwrap_or_default();
        let since = match seen {
            Some((v, at)) if *v == version => *at,
            _ => {
                *seen = Some((version.clone(), Instant::now()));
                Instant::now()
            }
        };
        let me = &self.settings.holder;
        let looked = current
            .as_ref()
            .map(|_| (holder.as_str(), version.as_str()));
        let written = match step(looked, me, since.elapsed(), self.settings.duration) {
            Step::Wait => return Ok(false),
            Step::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        labels: Some(
                            [("kube-pulse.io/lease".to_string(), "agent".to_string())].into(),
                        ),
                        ..Default::default()
                    },
                    spec: Some(spec(me, self.settings.duration, None)),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Step::Take(_) => {
                let mut lease = current.expect("a Lease to take");
                let acquired = (holder == *me)
                    .then(|| lease.spec.as_ref().and_then(|s| s.acquire_time.clone()))
                    .flatten();
                lease.spec = Some(spec(me, self.settings.duration, acquired));
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                self.held = Some(lease);
                Ok(true)
            }
            // Another agent wrote first.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Renews the Lease every third of its duration until `stop`; returns
    /// (cancelling `lost`) when no renewal succeeded for two thirds of it,
    /// or another agent took it.
    pub(super) async fn keep(&mut self, stop: &CancellationToken) -> Result<(), String> {
        let period = self.settings.duration / 3;
        let mut renewed = Instant::now();
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                () = tokio::time::sleep(period) => {}
            }
            let Some(mut lease) = self.held.clone() else {
                return Err("no Lease held".into());
            };
            let acquired = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
            lease.spec = Some(spec(
                &self.settings.holder,
                self.settings.duration,
                acquired,
            ));
            let params = PostParams::default();
            let write = self.api.replace(&self.name, &params, &lease);
            match tokio::time::timeout(period, write).await {
                Ok(Ok(written)) => {
                    self.held = Some(written);
                    renewed = Instant::now();
                }
                Ok(Err(kube::Error::Api(s))) if s.code == 409 => {
                    return Err("another agent took the Lease".into());
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.name, cause = %e, "the agent Lease was not renewed")
                }
                Err(_) => {
                    tracing::warn!(lease = %self.name, "the agent Lease's renewal got no answer")
                }
            }
            if renewed.elapsed() >= self.settings.duration * 2 / 3 {
                return Err(format!(
                    "the agent Lease was not renewed for {:?}",
                    renewed.elapsed()
                ));
            }
        }
    }

    /// Releases the Lease (no holder), so a standing-by agent takes it at once.
    pub(super) async fn release(&mut self) {
        let Some(mut lease) = self.held.take() else {
            return;
        };
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.acquire_time = None;
            spec.renew_time = None;
        }
        let params = PostParams::default();
        let write = self.api.replace(&self.name, &params, &lease);
        match tokio::time::timeout(Duration::from_secs(5), write).await {
            Ok(Ok(_)) => tracing::info!(lease = %self.name, "agent Lease released"),
            _ => {
                tracing::warn!(lease = %self.name, "the agent Lease could not be released; it expires")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_takes_a_lease_that_is_absent_free_its_own_or_expired() {
        let d = Duration::from_secs(15);
        let s = Duration::from_secs;
        let cases = [
            (None, s(0), Step::Create),
            (Some(("", "7")), s(0), Step::Take("7".into())),
            (Some(("me", "7")), s(0), Step::Take("7".into())),
            (Some(("other", "7")), s(14), Step::Wait),
            (Some(("other", "7")), s(15), Step::Take("7".into())),
        ];
        for (lease, seen_for, expected) in cases {
            assert_eq!(
                step(lease, "me", seen_for, d),
                expected,
                "{lease:?} {seen_for:?}"
            );
        }
    }
}
