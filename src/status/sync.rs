//! The sync status machine, one per cluster × resource (the seed's "pending,
//! syncing"): `Pending` → `Listing` → `Syncing`; `Error` with a reason →
//! `Backoff` until the next retry; `NotServed` while the member's discovery
//! does not list the resource (a fact about the registry, not a failure:
//! looked up again, never retried); `Stopped` while the cluster is unhealthy
//! or once the resource leaves the registry. [`SyncStatus::restore`] reads a
//! published document back, for an owner that takes the member over.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Lifecycle;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum SyncPhase {
    Pending,
    Listing,
    Syncing,
    Error,
    Backoff,
    /// The member does not serve the resource (its discovery does not list
    /// it): not a failure, not retried with a backoff.
    NotServed,
    Stopped,
}

impl std::fmt::Display for SyncPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

/// The reason of a watch that went silent (no event and no bookmark for
/// the bound), and of the list that restarts it.
pub(crate) const SILENT: &str = "Silent";
/// A resource, as topics name it (`core` for the core group).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
pub struct Gvr {
    /// API group; empty for the core group (written `core` in topics).
    #[serde(default)]
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Plural resource name, e.g. `deployments`.
    pub resource: String,
}

impl Gvr {
    /// A resource from its group (empty for core), version and plural name.
    pub fn new(group: &str, version: &str, resource: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
        }
    }

    /// `apps/v1/deployments`, `core/v1/namespaces`.
    pub fn path(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("{group}/{}/{}", self.version, self.resource)
    }
}

/// The `clusters/{c}/sync/{g}/{v}/{r}` document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SyncStatus {
    pub(crate) cluster: String,
    pub(crate) resource: Gvr,
    /// The resource's kind (`Deployment`), once known from discovery; absent before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    #[serde(flatten)]
    pub(crate) lifecycle: Lifecycle<SyncPhase>,
    /// Objects in the cache (while listing: listed so far; after a failed
    /// list: the cache's count again, as the cache still holds them).
    pub(crate) objects: u64,
    pub(crate) resource_version: Option<String>,
    #[serde(serialize_with = "super::time::serialize_millis_opt")]
    pub(crate) last_event_at: Option<DateTime<Utc>>,
    #[serde(serialize_with = "super::time::serialize_millis_opt")]
    pub(crate) retry_at: Option<DateTime<Utc>>,
    pub(crate) last_error: Option<String>,
    /// Set when the cluster went down while this resource was syncing and
    /// its watch has reported no failure since: it resumes when the cluster does.
    #[serde(skip)]
    resume_syncing: bool,
    /// Objects in the cache after the last completed list and its events;
    /// `objects` falls back to it when a list fails or stops part way.
    #[serde(skip)]
    cached: u64,
    /// A list has completed once: later lists are relists.
    #[serde(skip)]
    listed: bool,
    /// When the last list completed (the cluster document's `cache.lastListAt`).
    #[serde(skip)]
    last_list_at: Option<DateTime<Utc>>,
    /// The last failure was an API error (`Forbidden`, …) and no list has
    /// completed since: the retry's list still counts as failing.
    #[serde(skip)]
    retrying_failure: bool,
}

/// What the source and the engine tell the sync machine.
#[derive(Debug, Clone, PartialEq)]
pub enum SyncInput {
    /// A list (initial or relist) started: `Listing`.
    ListStarted,
    /// A page of the list arrived.
    Listed {
        /// Objects listed so far in this list.
        count: u64,
    },
    /// The list completed: `Syncing`.
    ListDone {
        /// Objects in the cache.
        count: u64,
        /// `resourceVersion` of the list; absent when the server gave none.
        resource_version: Option<String>,
    },
    /// A watch event (added, modified, deleted) arrived while syncing.
    Event {
        /// Objects in the cache after the event.
        count: u64,
        /// `resourceVersion` of the event; absent when the server gave none.
        resource_version: Option<String>,
    },
    /// The list or watch failed: `Error`.
    Failed {
        /// CamelCase reason (`Forbidden`, `NotServed`, `Expired`, `Throttled`, `Timeout`, …).
        reason: String,
        /// The error text, kept in `lastError`.
        message: String,
    },
    /// A retry is scheduled: `Backoff` (from `Error`).
    BackingOff {
        /// When the retry starts (`retryAt`).
        until: DateTime<Utc>,
    },
    /// A failure and the backoff before the retry, observed together: both
    /// transitions (Error, then Backoff) in one step, so subscribers get one
    /// change instead of two in the same instant.
    FailedRetrying {
        /// CamelCase reason, as for `Failed`.
        reason: String,
        /// The error text, kept in `lastError`.
        message: String,
        /// When the retry starts (`retryAt`).
        until: DateTime<Utc>,
    },
    /// The cluster became unhealthy: `Stopped (ClusterUnhealthy)`.
    ClusterDown,
    /// The cluster is up again: `Syncing` when the watch never failed meanwhile, else `Pending (ClusterRecovered)`.
    ClusterUp,
    /// No registry names the resource any more: `Stopped (RemovedFromRegistry)`, final.
    Removed,
    /// A watch run on demand (`podWatch.onDemand`) stopped because no client
    /// looks at what it serves: `Stopped (NoViewers)`, final like `Removed`
    /// (a watch started again starts over at `Pending`).
    NoViewers,
    /// The resource's kind, learnt from discovery (or known for built-ins); no phase change.
    Kind(String),
    /// Discovery says the member does not serve the resource: `NotServed`.
    /// Looking again and finding it still not served changes nothing.
    NotServed {
        /// What discovery said (`policy/v1beta1/poddisruptionbudgets is not served by this cluster`).
        message: String,
    },
}

/// The kinds of well-known resources by group and plural, for a resource
/// whose kind discovery cannot tell (the member does not serve it): a
/// Karpor SyncRegistry names resources by `apiVersion` and `kind`, and a
/// plural is not a kind.
pub(crate) fn well_known_kind(group: &str, plural: &str) -> Option<&'static str> {
    const KINDS: &[(&str, &str, &str)] = &[
        ("", "pods", "Pod"),
        ("", "services", "Service"),
        ("", "nodes", "Node"),
        ("", "namespaces", "Namespace"),
        ("", "configmaps", "ConfigMap"),
        ("", "secrets", "Secret"),
        ("", "serviceaccounts", "ServiceAccount"),
        ("", "persistentvolumes", "PersistentVolume"),
        ("", "persistentvolumeclaims", "PersistentVolumeClaim"),
        ("", "endpoints", "Endpoints"),
        ("", "events", "Event"),
        ("", "replicationcontrollers", "ReplicationController"),
        ("", "resourcequotas", "ResourceQuota"),
        ("", "limitranges", "LimitRange"),
        ("apps", "deployments", "Deployment"),
        ("apps", "statefulsets", "StatefulSet"),
        ("apps", "daemonsets", "DaemonSet"),
        ("apps", "replicasets", "ReplicaSet"),
        ("apps", "controllerrevisions", "ControllerRevision"),
        ("batch", "jobs", "Job"),
        ("batch", "cronjobs", "CronJob"),
        ("policy", "poddisruptionbudgets", "PodDisruptionBudget"),
        ("policy", "podsecuritypolicies", "PodSecurityPolicy"),
        (
            "autoscaling",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
        ),
        ("networking.k8s.io", "ingresses", "Ingress"),
        ("networking.k8s.io", "ingressclasses", "IngressClass"),
        ("networking.k8s.io", "networkpolicies", "NetworkPolicy"),
        ("extensions", "ingresses", "Ingress"),
        ("extensions", "deployments", "Deployment"),
        ("extensions", "daemonsets", "DaemonSet"),
        ("extensions", "replicasets", "ReplicaSet"),
        ("discovery.k8s.io", "endpointslices", "EndpointSlice"),
        ("rbac.authorization.k8s.io", "roles", "Role"),
        ("rbac.authorization.k8s.io", "rolebindings", "RoleBinding"),
        ("rbac.authorization.k8s.io", "clusterroles", "ClusterRole"),
        (
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
        ),
        ("storage.k8s.io", "storageclasses", "StorageClass"),
        ("storage.k8s.io", "csidrivers", "CSIDriver"),
        ("storage.k8s.io", "volumeattachments", "VolumeAttachment"),
        ("scheduling.k8s.io", "priorityclasses", "PriorityClass"),
        ("coordination.k8s.io", "leases", "Lease"),
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
        ),
    ];
    KINDS
        .iter()
        .find(|(g, p, _)| *g == group && *p == plural)
        .map(|(_, _, kind)| *kind)
}

/// What [`SyncStatus::restore`] reads of a document besides its lifecycle.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PublishedSync {
    cluster: String,
    resource: Gvr,
    #[serde(default)]
    kind: Option<String>,
    objects: u64,
    resource_version: Option<String>,
    last_event_at: Option<DateTime<Utc>>,
    retry_at: Option<DateTime<Utc>>,
    last_error: Option<String>,
}

/// Whether a list has completed, as far as a document tells: it reached
/// `Syncing` (within the kept history), lists again as a `Relist`, or
/// carries a `resourceVersion` or an event time, which only lists and
/// watch events set.
fn listed_in(lifecycle: &Lifecycle<SyncPhase>, published: &PublishedSync) -> bool {
    lifecycle.phase == SyncPhase::Syncing
        || lifecycle.reason == "Relist"
        || lifecycle.history.iter().any(|t| t.to == "Syncing")
        || published.resource_version.is_some()
        || published.last_event_at.is_some()
}

/// Whether the last failure was an API error with no list completed since,
/// as far as a document tells: the latest transition into `Error`,
/// `Backoff` or `Syncing` says (the reason of `Error` and `Backoff` is the
/// failure's). Failures while the cluster was down leave no transition, so
/// they are not seen.
fn retrying_failure_in(lifecycle: &Lifecycle<SyncPhase>) -> bool {
    match lifecycle.phase {
        SyncPhase::Error | SyncPhase::Backoff => is_api_error(&lifecycle.reason),
        SyncPhase::Syncing | SyncPhase::NotServed => false,
        SyncPhase::Pending | SyncPhase::Listing | SyncPhase::Stopped => lifecycle
            .history
            .iter()
            .rev()
            .find_map(|t| match t.to.as_str() {
                "Syncing" => Some(false),
                "Error" | "Backoff" => Some(is_api_error(&t.reason)),
                _ => None,
            })
            .unwrap_or(false),
    }
}

/// An API-level failure reason (as opposed to connectivity, which the probe
/// judges, and `Expired` or `StreamEnded`, which a relist answers).
fn is_api_error(reason: &str) -> bool {
    !matches!(
        reason,
        "Disconnected" | "Timeout" | "TLSError" | "Expired" | "StreamEnded"
    )
}

impl SyncStatus {
    pub(crate) fn new(cluster: &str, resource: Gvr, now: DateTime<Utc>) -> Self {
        Self {
            cluster: cluster.into(),
            resource,
            lifecycle: Lifecycle::new(
                SyncPhase::Pending,
                "Waiting",
                "waiting for the first list",
                now,
            ),
            objects: 0,
            resource_version: None,
            last_event_at: None,
            retry_at: None,
            last_error: None,
            resume_syncing: false,
            kind: None,
            cached: 0,
            listed: false,
            last_list_at: None,
            retrying_failure: false,
        }
    }

    /// The machine as it was when it published `doc`, so that a new owner
    /// of the member continues the document (phase, `since`, history and
    /// transition numbers, counts and times) instead of starting over at
    /// `Pending`. What the document does not carry is inferred from it
    /// (whether a list completed, whether an API error is still being
    /// retried) or left out: the new owner's watch is a new one, so a
    /// resource stopped with its cluster waits for a list when the cluster
    /// is back (`Pending (ClusterRecovered)`), and the cache's count is the
    /// document's `objects` (0 while listing) with no list time until the
    /// new owner's list completes. None for a document that is malformed,
    /// of another cluster or resource, or of a resource no registry names
    /// any more (`Stopped (RemovedFromRegistry)`: put back in a registry, a
    /// resource starts over).
    pub(crate) fn restore(doc: &Value, cluster: &str, resource: &Gvr) -> Option<Self> {
        let lifecycle = Lifecycle::<SyncPhase>::restore(doc)?;
        let published = PublishedSync::deserialize(doc).ok()?;
        if published.cluster != cluster || published.resource != *resource {
            return None;
        }
        let listed = listed_in(&lifecycle, &published);
        let retrying_failure = retrying_failure_in(&lifecycle);
        let cached = match lifecycle.phase {
            SyncPhase::Listing => 0,
            _ => published.objects,
        };
        let restored = Self {
            cluster: published.cluster,
            resource: published.resource,
            kind: published.kind,
            lifecycle,
            objects: published.objects,
            resource_version: published.resource_version,
            last_event_at: published.last_event_at,
            retry_at: published.retry_at,
            last_error: published.last_error,
            resume_syncing: false,
            cached,
            listed,
            last_list_at: None,
            retrying_failure,
        };
        (!restored.is_removed()).then_some(restored)
    }

    pub(crate) fn phase(&self) -> SyncPhase {
        self.lifecycle.phase
    }

    /// Counted as failing by the cluster machine: API-level errors only.
    /// Connectivity (`Disconnected`, `Timeout`, `TLSError`) is the probe's to
    /// judge, and `Expired` is a relist in progress. A resource retrying after
    /// an API error keeps failing until a list completes, so the cluster does
    /// not turn `Healthy` for the instant of every retry.
    pub(crate) fn is_failing(&self) -> bool {
        match self.phase() {
            SyncPhase::Error | SyncPhase::Backoff => is_api_error(&self.lifecycle.reason),
            SyncPhase::Listing | SyncPhase::Pending => self.retrying_failure,
            SyncPhase::Syncing | SyncPhase::Stopped | SyncPhase::NotServed => false,
        }
    }

    /// The member does not serve the resource: a warning of the cluster, not a failure.
    pub(crate) fn is_not_served(&self) -> bool {
        self.phase() == SyncPhase::NotServed
    }

    /// Objects in the cache: what the last completed list and the events
    /// since left there. Unlike `objects`, it does not restart from 0 while
    /// a relist runs (the cache keeps its objects until the list completes).
    pub(crate) fn cached_objects(&self) -> u64 {
        self.cached
    }

    /// When the last list completed, None before the first.
    pub(crate) fn last_list_at(&self) -> Option<DateTime<Utc>> {
        self.last_list_at
    }

    /// No registry names the resource any more, or its on-demand watch
    /// stopped (final): the cluster counts it no more.
    pub(crate) fn is_removed(&self) -> bool {
        self.phase() == SyncPhase::Stopped
            && matches!(
                self.lifecycle.reason.as_str(),
                "RemovedFromRegistry" | "NoViewers"
            )
    }

    /// A status first taken up in this run of the member (new, or restored
    /// from a held document) while the member is down: stopped for the
    /// cluster like the others, and, as its watch has not listed in this
    /// run, not resumed as `Syncing` when the member comes back.
    pub(crate) fn stopped_at_start(self, now: DateTime<Utc>) -> Self {
        let mut stopped = self.step(SyncInput::ClusterDown, now);
        stopped.resume_syncing = false;
        stopped
    }

    fn stopped_for_cluster(&self) -> bool {
        self.phase() == SyncPhase::Stopped && self.lifecycle.reason == "ClusterUnhealthy"
    }

    pub(crate) fn step(mut self, input: SyncInput, now: DateTime<Utc>) -> Self {
        if self.is_removed() {
            return self;
        }
        if matches!(input, SyncInput::ListDone { .. }) {
            self.last_list_at = Some(now);
        }
        match input {
            // While the cluster is down, retries do not leave `Stopped` until one succeeds.
            SyncInput::ListStarted | SyncInput::Listed { .. } if self.stopped_for_cluster() => {}
            SyncInput::ListStarted => {
                // Not `resource_version`: an empty list has none, and its relists are relists too.
                let silent = self.phase() == SyncPhase::Error && self.lifecycle.reason == SILENT;
                let (reason, message) = if silent {
                    // Until the list completes, the sync says why it lists.
                    (SILENT, "listing again: the watch went silent")
                } else if self.listed {
                    ("Relist", "listing")
                } else {
                    ("InitialList", "listing")
                };
                self.objects = 0;
                self.retry_at = None;
                self.lifecycle.set(SyncPhase::Listing, reason, message, now);
            }
            SyncInput::Listed { count } => {
                self.objects = count;
                if self.phase() == SyncPhase::Listing {
                    let reason = self.lifecycle.reason.clone();
                    self.lifecycle.set(
                        SyncPhase::Listing,
                        &reason,
                        format!("{count} objects listed so far"),
                        now,
                    );
                }
            }
            SyncInput::ListDone {
                count,
                resource_version,
            }
            | SyncInput::Event {
                count,
                resource_version,
            } => {
                let listed = self.phase() == SyncPhase::Listing;
                self.objects = count;
                self.cached = count;
                self.listed = true;
                self.retrying_failure = false;
                if resource_version.is_some() {
                    self.resource_version = resource_version;
                }
                if !listed {
                    self.last_event_at = Some(now);
                }
                self.retry_at = None;
                self.lifecycle.set(
                    SyncPhase::Syncing,
                    "Watching",
                    format!("{count} objects, watching for changes"),
                    now,
                );
            }
            SyncInput::FailedRetrying {
                reason,
                message,
                until,
            } => {
                return self
                    .step(SyncInput::Failed { reason, message }, now)
                    .step(SyncInput::BackingOff { until }, now);
            }
            SyncInput::Failed { reason, message } => {
                self.last_error = Some(message.clone());
                self.resume_syncing = false;
                // While the cluster is down its failures are the member's.
                self.retrying_failure = is_api_error(&reason) && !self.stopped_for_cluster();
                // A failed list leaves the cache as it was.
                self.objects = self.cached;
                if !self.stopped_for_cluster() {
                    self.lifecycle.set(SyncPhase::Error, &reason, message, now);
                }
            }
            SyncInput::BackingOff { until } => {
                self.retry_at = Some(until);
                if self.phase() == SyncPhase::Error {
                    let reason = self.lifecycle.reason.clone();
                    let message = format!(
                        "{}; retrying at {}",
                        self.lifecycle.message,
                        until.format("%H:%M:%S")
                    );
                    self.lifecycle
                        .set(SyncPhase::Backoff, &reason, message, now);
                }
            }
            // What the member serves does not change with its reachability.
            SyncInput::ClusterDown | SyncInput::ClusterUp if self.is_not_served() => {}
            SyncInput::ClusterDown => {
                if self.phase() == SyncPhase::Listing {
                    self.objects = self.cached;
                }
                if self.phase() != SyncPhase::Stopped {
                    self.resume_syncing = self.phase() == SyncPhase::Syncing;
                    self.lifecycle.set(
                        SyncPhase::Stopped,
                        "ClusterUnhealthy",
                        "the cluster is unreachable",
                        now,
                    );
                }
            }
            SyncInput::ClusterUp => {
                if self.stopped_for_cluster() && self.resume_syncing {
                    // The watch stayed open through the outage and never failed.
                    let message = format!("{} objects, watching for changes", self.objects);
                    self.lifecycle
                        .set(SyncPhase::Syncing, "Watching", message, now);
                } else if self.stopped_for_cluster() {
                    self.lifecycle.set(
                        SyncPhase::Pending,
                        "ClusterRecovered",
                        "waiting for the watch to resume",
                        now,
                    );
                }
            }
            SyncInput::Kind(kind) => self.kind = Some(kind),
            SyncInput::NotServed { message } => {
                self.retry_at = None;
                self.retrying_failure = false;
                self.resume_syncing = false;
                self.objects = 0;
                self.cached = 0;
                self.lifecycle
                    .set(SyncPhase::NotServed, "NotServed", message, now);
            }
            SyncInput::Removed => {
                self.lifecycle.set(
                    SyncPhase::Stopped,
                    "RemovedFromRegistry",
                    "no sync registry names this resource any more",
                    now,
                );
            }
            SyncInput::NoViewers => {
                self.lifecycle.set(
                    SyncPhase::Stopped,
                    "NoViewers",
                    "watched on demand (podWatch.onDemand): no client looks at this member's apps",
                    now,
                );
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    fn failed(reason: &str) -> SyncInput {
        SyncInput::Failed {
            reason: reason.into(),
            message: format!("{reason} happened"),
        }
    }

    fn done(count: u64) -> SyncInput {
        SyncInput::ListDone {
            count,
            resource_version: Some("7".into()),
        }
    }

    fn run(inputs: Vec<SyncInput>) -> Vec<String> {
        let mut s = SyncStatus::new("c", Gvr::new("apps", "v1", "deployments"), t(0));
        inputs
            .into_iter()
            .enumerate()
            .map(|(i, input)| {
                s = s.clone().step(input, t(i as i64 + 1));
                format!("{} ({}) {}", s.phase(), s.lifecycle.reason, s.objects)
            })
            .collect()
    }

    #[test]
    fn phases_and_reasons() {
        let backoff = SyncInput::BackingOff { until: t(30) };
        let cases: Vec<(&str, Vec<SyncInput>, Vec<&str>)> = vec![
            (
                "initial list then watch",
                vec![
                    SyncInput::ListStarted,
                    SyncInput::Listed { count: 500 },
                    done(800),
                    SyncInput::Event {
                        count: 801,
                        resource_version: None,
                    },
                ],
                vec![
                    "Listing (InitialList) 0",
                    "Listing (InitialList) 500",
                    "Syncing (Watching) 800",
                    "Syncing (Watching) 801",
                ],
            ),
            (
                "forbidden then backoff",
                vec![SyncInput::ListStarted, failed("Forbidden"), backoff.clone()],
                vec![
                    "Listing (InitialList) 0",
                    "Error (Forbidden) 0",
                    "Backoff (Forbidden) 0",
                ],
            ),
            (
                "a failure with its backoff is one step",
                vec![
                    SyncInput::ListStarted,
                    done(3),
                    SyncInput::FailedRetrying {
                        reason: "Disconnected".into(),
                        message: "connection refused".into(),
                        until: t(30),
                    },
                ],
                vec![
                    "Listing (InitialList) 0",
                    "Syncing (Watching) 3",
                    "Backoff (Disconnected) 3",
                ],
            ),
            (
                "expired relists",
                vec![
                    SyncInput::ListStarted,
                    done(3),
                    failed("Expired"),
                    SyncInput::ListStarted,
                    done(3),
                ],
                vec![
                    "Listing (InitialList) 0",
                    "Syncing (Watching) 3",
                    "Error (Expired) 3",
                    "Listing (Relist) 0",
                    "Syncing (Watching) 3",
                ],
            ),
            (
                "a silent watch relists saying why until the list completes",
                vec![
                    SyncInput::ListStarted,
                    done(3),
                    failed(SILENT),
                    SyncInput::ListStarted,
                    SyncInput::Listed { count: 2 },
                    done(3),
                ],
                vec![
                    "Listing (InitialList) 0",
                    "Syncing (Watching) 3",
                    "Error (Silent) 3",
                    "Listing (Silent) 0",
                    "Listing (Silent) 2",
                    "Syncing (Watching) 3",
                ],
            ),
            (
                "cluster down stops, errors meanwhile keep it stopped, recovery waits for the watch",
                vec![
                    done(2),
                    SyncInput::ClusterDown,
                    failed("Disconnected"),
                    backoff.clone(),
                    SyncInput::ClusterUp,
                    SyncInput::ListStarted,
                ],
                vec![
                    "Syncing (Watching) 2",
                    "Stopped (ClusterUnhealthy) 2",
                    "Stopped (ClusterUnhealthy) 2",
                    "Stopped (ClusterUnhealthy) 2",
                    "Pending (ClusterRecovered) 2",
                    "Listing (Relist) 0",
                ],
            ),
            (
                "a relist after an empty list (no resourceVersion) is a relist",
                vec![
                    SyncInput::ListStarted,
                    SyncInput::ListDone {
                        count: 0,
                        resource_version: None,
                    },
                    failed("Expired"),
                    SyncInput::ListStarted,
                ],
                vec![
                    "Listing (InitialList) 0",
                    "Syncing (Watching) 0",
                    "Error (Expired) 0",
                    "Listing (Relist) 0",
                ],
            ),
            (
                "a failed relist keeps the count of the cache",
                vec![
                    SyncInput::ListStarted,
                    done(800),
                    SyncInput::ListStarted,
                    SyncInput::Listed { count: 500 },
                    SyncInput::FailedRetrying {
                        reason: "Forbidden".into(),
                        message: "forbidden".into(),
                        until: t(30),
                    },
                    SyncInput::ListStarted,
                    SyncInput::ClusterDown,
                ],
                vec![
                    "Listing (InitialList) 0",
                    "Syncing (Watching) 800",
                    "Listing (Relist) 0",
                    "Listing (Relist) 500",
                    "Backoff (Forbidden) 800",
                    "Listing (Relist) 0",
                    "Stopped (ClusterUnhealthy) 800",
                ],
            ),
            (
                "removed from the registry is final",
                vec![done(1), SyncInput::Removed, SyncInput::ListStarted],
                vec![
                    "Syncing (Watching) 1",
                    "Stopped (RemovedFromRegistry) 1",
                    "Stopped (RemovedFromRegistry) 1",
                ],
            ),
            (
                "an on-demand watch stopped for want of viewers is final too",
                vec![done(1), SyncInput::NoViewers, SyncInput::ListStarted],
                vec![
                    "Syncing (Watching) 1",
                    "Stopped (NoViewers) 1",
                    "Stopped (NoViewers) 1",
                ],
            ),
            (
                "other reasons",
                vec![failed("NotServed"), failed("Throttled"), failed("Timeout")],
                vec![
                    "Error (NotServed) 0",
                    "Error (Throttled) 0",
                    "Error (Timeout) 0",
                ],
            ),
        ];
        for (name, inputs, want) in cases {
            assert_eq!(run(inputs), want, "{name}");
        }
    }

    #[test]
    fn a_retry_after_an_api_error_fails_until_a_list_completes() {
        let retrying = |reason: &str| SyncInput::FailedRetrying {
            reason: reason.into(),
            message: format!("{reason} happened"),
            until: t(30),
        };
        // (input, failing after it)
        let cases: Vec<(&str, Vec<(SyncInput, bool)>)> = vec![
            (
                "forbidden, retried, still forbidden, then allowed",
                vec![
                    (SyncInput::ListStarted, false),
                    (retrying("Forbidden"), true),
                    (SyncInput::ListStarted, true),
                    (SyncInput::Listed { count: 500 }, true),
                    (retrying("Forbidden"), true),
                    (SyncInput::ListStarted, true),
                    (done(3), false),
                    (SyncInput::ListStarted, false),
                ],
            ),
            (
                "connectivity and expiry never count",
                vec![
                    (SyncInput::ListStarted, false),
                    (done(3), false),
                    (retrying("Disconnected"), false),
                    (SyncInput::ListStarted, false),
                    (done(3), false),
                    (failed("Expired"), false),
                    (SyncInput::ListStarted, false),
                ],
            ),
            (
                "an API error, then a connectivity error: the probe judges",
                vec![
                    (retrying("Throttled"), true),
                    (SyncInput::ListStarted, true),
                    (retrying("Timeout"), false),
                    (SyncInput::ListStarted, false),
                ],
            ),
            (
                "the cluster's outage does not count, a failure still pending after it does",
                vec![
                    (retrying("Forbidden"), true),
                    (SyncInput::ClusterDown, false),
                    (SyncInput::ClusterUp, true),
                    (SyncInput::ListStarted, true),
                    (done(1), false),
                ],
            ),
        ];
        for (name, steps) in cases {
            let mut s = SyncStatus::new("c", Gvr::new("apps", "v1", "deployments"), t(0));
            for (i, (input, want)) in steps.into_iter().enumerate() {
                s = s.step(input, t(i as i64 + 1));
                assert_eq!(
                    s.is_failing(),
                    want,
                    "{name}, step {i}: {} ({})",
                    s.phase(),
                    s.lifecycle.reason
                );
            }
        }
    }

    fn not_served() -> SyncInput {
        SyncInput::NotServed {
            message: "policy/v1beta1/poddisruptionbudgets is not served by this cluster".into(),
        }
    }

    #[test]
    fn a_resource_the_member_does_not_serve_is_not_served_not_failing() {
        // (inputs, expected states after each, failing at the end)
        let cases: Vec<(&str, Vec<SyncInput>, Vec<&str>, bool)> = vec![
            (
                "looked up again and again: one transition",
                vec![not_served(), not_served(), not_served()],
                vec!["NotServed (NotServed) 0"; 3],
                false,
            ),
            (
                "the cluster going down and up leaves it",
                vec![not_served(), SyncInput::ClusterDown, SyncInput::ClusterUp],
                vec!["NotServed (NotServed) 0"; 3],
                false,
            ),
            (
                "served later (a CRD installed, an upgrade): it lists",
                vec![not_served(), SyncInput::ListStarted, done(4)],
                vec![
                    "NotServed (NotServed) 0",
                    "Listing (InitialList) 0",
                    "Syncing (Watching) 4",
                ],
                false,
            ),
            (
                "served, then no longer (a CRD deleted)",
                vec![SyncInput::ListStarted, done(2), not_served()],
                vec![
                    "Listing (InitialList) 0",
                    "Syncing (Watching) 2",
                    "NotServed (NotServed) 0",
                ],
                false,
            ),
            (
                "an API failure before does not linger",
                vec![failed("Forbidden"), not_served()],
                vec!["Error (Forbidden) 0", "NotServed (NotServed) 0"],
                false,
            ),
        ];
        for (case, inputs, expected, failing) in cases {
            let mut s = SyncStatus::new(
                "c",
                Gvr::new("policy", "v1beta1", "poddisruptionbudgets"),
                t(0),
            );
            let mut got = Vec::new();
            for (i, input) in inputs.into_iter().enumerate() {
                s = s.step(input, t(i as i64 + 1));
                got.push(format!(
                    "{} ({}) {}",
                    s.phase(),
                    s.lifecycle.reason,
                    s.objects
                ));
            }
            assert_eq!(got, expected, "{case}");
            assert_eq!(s.is_failing(), failing, "{case}");
            assert!(s.retry_at.is_none(), "{case}: never a retry time");
        }
        // Looked up again: no history entry, no change of the document.
        let once = SyncStatus::new(
            "c",
            Gvr::new("policy", "v1beta1", "poddisruptionbudgets"),
            t(0),
        )
        .step(not_served(), t(1));
        let again = once.clone().step(not_served(), t(300));
        assert_eq!(again, once);
        assert_eq!(once.lifecycle.history.len(), 1);
        let doc = serde_json::to_value(&once).unwrap();
        assert_eq!(doc["phase"], "NotServed");
        assert!(doc["retryAt"].is_null());
        let restored = SyncStatus::restore(
            &doc,
            "c",
            &Gvr::new("policy", "v1beta1", "poddisruptionbudgets"),
        )
        .unwrap();
        assert!(restored.is_not_served() && !restored.is_failing());
    }

    #[test]
    fn well_known_kinds() {
        let cases = [
            (
                "policy",
                "poddisruptionbudgets",
                Some("PodDisruptionBudget"),
            ),
            ("", "persistentvolumeclaims", Some("PersistentVolumeClaim")),
            ("apps", "replicasets", Some("ReplicaSet")),
            ("extensions", "ingresses", Some("Ingress")),
            ("example.com", "widgets", None),
            ("", "poddisruptionbudgets", None),
        ];
        for (group, plural, kind) in cases {
            assert_eq!(well_known_kind(group, plural), kind, "{group}/{plural}");
        }
    }

    #[test]
    fn document_fields() {
        let s = SyncStatus::new("c", Gvr::new("", "v1", "namespaces"), t(0))
            .step(SyncInput::ListStarted, t(1))
            .step(done(4), t(2))
            .step(
                SyncInput::Event {
                    count: 5,
                    resource_version: Some("9".into()),
                },
                t(3),
            );
        assert_eq!(s.resource.path(), "core/v1/namespaces");
        assert_eq!(s.last_event_at, Some(t(3)));
        assert_eq!(s.resource_version.as_deref(), Some("9"));
        assert!(!s.is_failing());
        let doc = serde_json::to_value(&s).unwrap();
        assert_eq!(doc["phase"], "Syncing");
        assert_eq!(doc["objects"], 5);
        assert!(doc.get("kind").is_none(), "no kind before discovery: {doc}");
        // The kind, once known, changes nothing else.
        let known = s.clone().step(SyncInput::Kind("Namespace".into()), t(4));
        let doc = serde_json::to_value(&known).unwrap();
        assert_eq!(doc["kind"], "Namespace");
        assert_eq!(known.lifecycle, s.lifecycle);
    }

    #[test]
    fn the_cache_keeps_its_count_through_a_relist_and_dates_each_completed_list() {
        let event = |count| SyncInput::Event {
            count,
            resource_version: None,
        };
        // (input, cached objects after, last list completed at)
        let cases = [
            (SyncInput::ListStarted, 0, None),
            (SyncInput::Listed { count: 40 }, 0, None),
            (done(50), 50, Some(3)),
            (event(51), 51, Some(3)),
            (failed("Expired"), 51, Some(3)),
            (SyncInput::ListStarted, 51, Some(3)),
            (SyncInput::Listed { count: 10 }, 51, Some(3)),
            (failed("Disconnected"), 51, Some(3)),
            (SyncInput::ListStarted, 51, Some(3)),
            (done(49), 49, Some(10)),
        ];
        let mut s = SyncStatus::new("c", Gvr::new("", "v1", "pods"), t(0));
        for (i, (input, cached, listed)) in cases.into_iter().enumerate() {
            s = s.step(input.clone(), t(i as i64 + 1));
            assert_eq!(
                (s.cached_objects(), s.last_list_at()),
                (cached, listed.map(t)),
                "after {input:?}"
            );
        }
    }

    fn doc(s: &SyncStatus) -> Value {
        serde_json::to_value(s).unwrap()
    }

    fn deployments() -> Gvr {
        Gvr::new("apps", "v1", "deployments")
    }

    #[test]
    fn a_restored_machine_continues_its_document() {
        let retrying = |reason: &str| SyncInput::FailedRetrying {
            reason: reason.into(),
            message: format!("{reason} happened"),
            until: t(30),
        };
        let event = |count| SyncInput::Event {
            count,
            resource_version: Some(format!("{count}")),
        };
        let mut expiring = vec![SyncInput::ListStarted, done(1)];
        for _ in 0..12 {
            expiring.extend([failed("Expired"), SyncInput::ListStarted, done(1)]);
        }
        // (name, inputs before the document is published, inputs after)
        let cases: Vec<(&str, Vec<SyncInput>, Vec<SyncInput>)> = vec![
            (
                "fresh",
                vec![],
                vec![
                    SyncInput::ListStarted,
                    SyncInput::Listed { count: 5 },
                    done(8),
                ],
            ),
            (
                "syncing: the next list is a relist",
                vec![SyncInput::ListStarted, done(3), event(4)],
                vec![failed("Expired"), SyncInput::ListStarted, done(4), event(5)],
            ),
            (
                "an empty list without a resourceVersion was a list",
                vec![
                    SyncInput::ListStarted,
                    SyncInput::ListDone {
                        count: 0,
                        resource_version: None,
                    },
                ],
                vec![failed("Expired"), SyncInput::ListStarted],
            ),
            (
                "backing off after an API error",
                vec![SyncInput::ListStarted, retrying("Forbidden")],
                vec![
                    SyncInput::ListStarted,
                    SyncInput::Listed { count: 2 },
                    retrying("Forbidden"),
                    SyncInput::ListStarted,
                    done(2),
                ],
            ),
            (
                "listing again after an API error still fails",
                vec![
                    SyncInput::ListStarted,
                    done(800),
                    retrying("Throttled"),
                    SyncInput::ListStarted,
                ],
                vec![SyncInput::Listed { count: 10 }, done(12)],
            ),
            (
                "listing again after a connectivity error does not",
                vec![SyncInput::ListStarted, done(8), retrying("Timeout")],
                vec![SyncInput::ListStarted, done(9)],
            ),
            (
                "stopped with the cluster after a failure",
                vec![retrying("Forbidden"), SyncInput::ClusterDown],
                vec![
                    failed("Disconnected"),
                    SyncInput::ClusterUp,
                    SyncInput::ListStarted,
                    done(1),
                ],
            ),
            (
                "waiting for the watch after the cluster recovered",
                vec![
                    done(2),
                    SyncInput::ClusterDown,
                    failed("Disconnected"),
                    SyncInput::ClusterUp,
                ],
                vec![SyncInput::ListStarted, done(2)],
            ),
            (
                "the kind, once known",
                vec![
                    SyncInput::Kind("Deployment".into()),
                    SyncInput::ListStarted,
                    done(1),
                ],
                vec![event(2), SyncInput::Removed, SyncInput::ListStarted],
            ),
            (
                "a full history keeps numbering",
                expiring,
                vec![failed("Expired"), SyncInput::ListStarted, done(1)],
            ),
        ];
        for (name, before, after) in cases {
            let mut kept = SyncStatus::new("c", deployments(), t(0));
            for (i, input) in before.into_iter().enumerate() {
                kept = kept.step(input, t(1 + i as i64));
            }
            let published = doc(&kept);
            let mut restored = SyncStatus::restore(&published, "c", &deployments())
                .unwrap_or_else(|| panic!("{name}: not restored from {published}"));
            // The hub holds documents without their null members.
            let mut held = published.clone();
            crate::protocol::patch::strip_nulls(&mut held);
            assert_eq!(
                SyncStatus::restore(&held, "c", &deployments()),
                Some(restored.clone()),
                "{name}: held"
            );
            assert_eq!(doc(&restored), published, "{name}: restored");
            assert_eq!(restored.is_failing(), kept.is_failing(), "{name}: restored");
            for (i, input) in after.into_iter().enumerate() {
                let what = format!("{name}, after step {i} ({input:?})");
                let at = t(1000 + i as i64);
                kept = kept.step(input.clone(), at);
                restored = restored.step(input, at);
                assert_eq!(doc(&restored), doc(&kept), "{what}");
                assert_eq!(restored.is_failing(), kept.is_failing(), "{what}");
                // While a list runs, the document does not tell the cache's count.
                if kept.phase() != SyncPhase::Listing {
                    let cached = (restored.cached_objects(), kept.cached_objects());
                    assert_eq!(cached.0, cached.1, "{what}");
                }
            }
        }
    }

    #[test]
    fn a_restored_machine_has_a_new_watch() {
        // The old owner's watch stayed open through the outage; the new
        // owner's is another one, which proves itself with a list.
        let kept = SyncStatus::new("c", deployments(), t(0))
            .step(SyncInput::ListStarted, t(1))
            .step(done(2), t(2))
            .step(SyncInput::ClusterDown, t(3));
        let restored = SyncStatus::restore(&doc(&kept), "c", &deployments()).unwrap();
        assert_eq!(kept.last_list_at(), Some(t(2)));
        assert_eq!(restored.last_list_at(), None);
        let label = |s: SyncStatus| {
            let s = s.step(SyncInput::ClusterUp, t(4));
            format!("{} ({})", s.phase(), s.lifecycle.reason)
        };
        assert_eq!(label(kept), "Syncing (Watching)");
        assert_eq!(label(restored), "Pending (ClusterRecovered)");
        // Restored while the member is down (its predecessor's document
        // `Syncing`): stopped, and still a new watch to prove itself.
        let syncing = SyncStatus::new("c", deployments(), t(0)).step(done(2), t(2));
        let restored = SyncStatus::restore(&doc(&syncing), "c", &deployments()).unwrap();
        let stopped = restored.stopped_at_start(t(3));
        assert_eq!(
            format!("{} ({})", stopped.phase(), stopped.lifecycle.reason),
            "Stopped (ClusterUnhealthy)"
        );
        assert_eq!(label(stopped), "Pending (ClusterRecovered)");
    }

    #[test]
    fn restore_ignores_removed_foreign_and_malformed_documents() {
        let syncing = SyncStatus::new("c", deployments(), t(0)).step(done(3), t(1));
        let good = doc(&syncing);
        assert!(SyncStatus::restore(&good, "c", &deployments()).is_some());
        let with = |pointer: &str, value: Value| {
            let mut doc = good.clone();
            *doc.pointer_mut(pointer).unwrap() = value;
            doc
        };
        let without = |field: &str| {
            let mut doc = good.clone();
            doc.as_object_mut().unwrap().remove(field);
            doc
        };
        let removed = doc(&syncing.clone().step(SyncInput::Removed, t(2)));
        let statefulsets = Gvr::new("apps", "v1", "statefulsets");
        // (why, document, cluster, resource restoring it)
        let cases = [
            ("removed from the registry", removed, "c", deployments()),
            ("another cluster's", good.clone(), "d", deployments()),
            ("another resource's", good.clone(), "c", statefulsets),
            (
                "a phase syncs do not have",
                with("/phase", json!("Healthy")),
                "c",
                deployments(),
            ),
            ("no objects", without("objects"), "c", deployments()),
            (
                "negative objects",
                with("/objects", json!(-1)),
                "c",
                deployments(),
            ),
            ("no resource", without("resource"), "c", deployments()),
            (
                "a retry time that is not one",
                with("/retryAt", json!(5)),
                "c",
                deployments(),
            ),
            (
                "a cluster's document",
                json!({"name": "c", "phase": "Healthy"}),
                "c",
                deployments(),
            ),
            ("null", Value::Null, "c", deployments()),
        ];
        for (why, published, cluster, resource) in cases {
            assert_eq!(
                SyncStatus::restore(&published, cluster, &resource),
                None,
                "{why}: {published}"
            );
        }
    }
}
