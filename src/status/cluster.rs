//! The cluster status machine: `Pending` → `Initializing` → `Healthy`;
//! `Unhealthy` with a reason; `Degraded` when reachable but some synced
//! resources fail; `Removed`. Success and failure thresholds keep a single
//! lost probe from flapping the phase. [`ClusterStatus::restore`] reads a
//! published document back, for an owner that takes the member over.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Lifecycle;
use super::capacity::{NodeSummary, PodFigures, shown_pods};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ClusterPhase {
    Pending,
    Initializing,
    Healthy,
    Degraded,
    Unhealthy,
    /// How the member is cannot be known: its agent is not heard from.
    Unknown,
    Removed,
}

impl std::fmt::Display for ClusterPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

/// Why a probe failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ProbeFailure {
    /// The apiserver refused or reset the connection.
    Disconnected,
    /// The apiserver answered 401 or 403: the credentials are not accepted.
    Unauthorized,
    /// The apiserver answered another HTTP error (its `/readyz` fails).
    ApiServerNotReady,
    /// The TLS handshake failed (certificate or protocol error).
    TLSError,
    /// No answer within the probe timeout, or HTTP 504.
    Timeout,
}

impl ProbeFailure {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ProbeFailure::Disconnected => "Disconnected",
            ProbeFailure::Unauthorized => "Unauthorized",
            ProbeFailure::ApiServerNotReady => "ApiServerNotReady",
            ProbeFailure::TLSError => "TLSError",
            ProbeFailure::Timeout => "Timeout",
        }
    }
}

/// Consecutive probe results needed to change between up and down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Good probes in a row that bring an `Unhealthy` cluster back up (`successThreshold`).
    pub success: u32,
    /// Failed probes in a row that take a reachable cluster to `Unhealthy` (`failureThreshold`).
    pub failure: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            success: 1,
            failure: 2,
        }
    }
}

/// The latest probe, as shown in the document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProbeInfo {
    pub(crate) latency_ms: Option<u64>,
    /// Kept out of the document: it would publish a change on every probe.
    #[serde(skip)]
    pub(crate) last_probe_at: Option<DateTime<Utc>>,
    pub(crate) last_error: Option<String>,
    pub(crate) server_version: Option<String>,
    /// Counted up to the success threshold (then it stops changing).
    pub(crate) consecutive_successes: u32,
    /// Counted up to the failure threshold.
    pub(crate) consecutive_failures: u32,
}

/// Sync states of the cluster's resources, summed up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceCounts {
    /// Resources the cluster syncs (built-in ones and registry ones).
    pub total: u32,
    /// Resources in `Syncing`.
    pub synced: u32,
    /// Resources failing with an API error (`Forbidden`, `Throttled`, …); connectivity errors are the probe's to judge.
    pub failing: u32,
    /// Resources the member does not serve (a warning, not a failure); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_served: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What the gateway holds of a member (`cache` in the document): enough to
/// see that its view is complete and recent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheInfo {
    /// Objects in the caches of the member's watched resources. In the
    /// document it is coarsened by [`shown_objects`]; the engine feeds the exact sum.
    pub objects: u64,
    /// When the latest list of any of its watched resources completed (null before the first).
    #[serde(serialize_with = "super::time::serialize_millis_opt")]
    pub last_list_at: Option<DateTime<Utc>>,
}

/// The object count a document shows: exact whenever a list completed
/// (`lastListAt` moved), else the one already shown until the exact count
/// differs from it by more than a tenth (so the count is never off by more
/// than 10 %). Pod churn — creates and deletes that mostly cancel out —
/// then does not republish the cluster on every event; a scale-up or a
/// namespace deletion does, and so does every relist.
pub(crate) fn shown_objects(shown: CacheInfo, exact: CacheInfo) -> u64 {
    let listed = exact.last_list_at != shown.last_list_at;
    if listed || exact.objects.abs_diff(shown.objects) > shown.objects / 10 {
        exact.objects
    } else {
        shown.objects
    }
}

/// What a member authenticates with, when it expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CredentialKind {
    /// An X.509 client certificate (its `notAfter`).
    ClientCertificate,
    /// A bearer token that is a JWT (its `exp`).
    Token,
}

/// The expiry of a member's credentials (`credentials` in the document).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialInfo {
    /// What expires.
    pub kind: CredentialKind,
    /// When.
    pub expires: DateTime<Utc>,
}

/// Something to act on before it fails (`warnings` in the document).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Warning {
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

/// Credentials expiring within this many days get a warning.
pub(crate) const CREDENTIAL_WARNING_DAYS: i64 = 7;

/// A member clock further than this from the gateway's gets a warning.
pub(crate) const CLOCK_SKEW_WARNING_SECONDS: i64 = 30;

/// The warnings of a cluster at `now`: credentials that expire within
/// [`CREDENTIAL_WARNING_DAYS`] (or have expired: its probes then fail with
/// `Unauthorized`), and a clock skew beyond [`CLOCK_SKEW_WARNING_SECONDS`]
/// (shown in steps of 5 s, so jitter does not republish the document).
pub(crate) fn warnings(
    credentials: Option<&CredentialInfo>,
    clock_skew: Option<i64>,
    now: DateTime<Utc>,
) -> Vec<Warning> {
    let mut out = Vec::new();
    if let Some(c) = credentials {
        let what = match c.kind {
            CredentialKind::ClientCertificate => "the client certificate",
            CredentialKind::Token => "the bearer token",
        };
        let at = c.expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let left = c.expires - now;
        if left <= chrono::Duration::zero() {
            out.push(Warning {
                reason: "CredentialsExpired",
                message: format!("{what} expired at {at}"),
            });
        } else if left <= chrono::Duration::days(CREDENTIAL_WARNING_DAYS) {
            // Days started, not days whole: 2 days and 23 hours is "within 3 days".
            let days = (left.num_seconds() + 86_399) / 86_400;
            let when = match days {
                ..=1 => "within a day".to_string(),
                n => format!("within {n} days"),
            };
            out.push(Warning {
                reason: "CredentialsExpiring",
                message: format!("{what} expires at {at} ({when})"),
            });
        }
    }
    if let Some(skew) = clock_skew.filter(|s| s.abs() > CLOCK_SKEW_WARNING_SECONDS) {
        let shown = (skew.abs() + 2) / 5 * 5;
        let side = if skew > 0 { "ahead of" } else { "behind" };
        out.push(Warning {
            reason: "ClockSkew",
            message: format!(
                "{CLOCK_SKEW_PREFIX}{shown} s {side} the gateway's (tokens and certificates may be judged wrongly)"
            ),
        });
    }
    out
}

const CLOCK_SKEW_PREFIX: &str = "the apiserver's clock is about ";

/// A skew that [`warnings`] shows as this `ClockSkew` warning does
/// (`about 95 s behind` → −95; `about 30 s`, shown for 31 and 32 s, → 31).
/// None for any other message.
fn shown_clock_skew(message: &str) -> Option<i64> {
    let (seconds, side) = message.strip_prefix(CLOCK_SKEW_PREFIX)?.split_once(" s ")?;
    let seconds = seconds
        .parse::<i64>()
        .ok()?
        .max(CLOCK_SKEW_WARNING_SECONDS + 1);
    if side.starts_with("ahead of ") {
        Some(seconds)
    } else if side.starts_with("behind ") {
        Some(-seconds)
    } else {
        None
    }
}

/// The warning of a resource a sync registry names and the member does not serve.
fn not_served_warning(resource: &str) -> Warning {
    Warning {
        reason: "ResourceNotServed",
        message: format!("{resource}{NOT_SERVED_SUFFIX}"),
    }
}

const NOT_SERVED_SUFFIX: &str = " is named by a sync registry but not served by this cluster (looked up again every few minutes)";

/// The warnings of a published document whose reasons this machine makes
/// (others are left out: the next step computes the warnings anew).
fn restored_warnings(published: Vec<PublishedWarning>) -> Vec<Warning> {
    const REASONS: [&str; 4] = [
        "CredentialsExpiring",
        "CredentialsExpired",
        "ClockSkew",
        "ResourceNotServed",
    ];
    published
        .into_iter()
        .filter_map(|w| {
            let reason = REASONS.into_iter().find(|r| *r == w.reason)?;
            Some(Warning {
                reason,
                message: w.message,
            })
        })
        .collect()
}

/// What [`ClusterStatus::restore`] reads of a document besides its lifecycle.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PublishedCluster {
    name: String,
    server: String,
    probe: ProbeInfo,
    resources: ResourceCounts,
    cache: CacheInfo,
    #[serde(default)]
    nodes: Option<NodeSummary>,
    #[serde(default)]
    pods: Option<PodFigures>,
    #[serde(default)]
    credentials: Option<CredentialInfo>,
    #[serde(default)]
    warnings: Vec<PublishedWarning>,
}

#[derive(Debug, Deserialize)]
struct PublishedWarning {
    reason: String,
    message: String,
}

/// The `clusters/{name}` document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterStatus {
    pub(crate) name: String,
    pub(crate) server: String,
    #[serde(flatten)]
    pub(crate) lifecycle: Lifecycle<ClusterPhase>,
    pub(crate) probe: ProbeInfo,
    pub(crate) resources: ResourceCounts,
    pub(crate) cache: CacheInfo,
    /// The member's nodes and their capacity (absent until the node watch
    /// listed them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) nodes: Option<NodeSummary>,
    /// Its pods and their requests (absent without the pod watch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pods: Option<PodFigures>,
    /// When the member's credentials expire, when that can be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) credentials: Option<CredentialInfo>,
    /// What to act on before it fails (absent when nothing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) warnings: Vec<Warning>,
    /// The member's clock minus ours at the last probe, in seconds.
    #[serde(skip)]
    pub(crate) clock_skew: Option<i64>,
    /// The resources (`group/version/plural`) the member does not serve.
    #[serde(skip)]
    pub(crate) not_served: Vec<String>,
}

/// What the engine tells the cluster machine.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterInput {
    /// The source started; the first probe is on its way.
    Started,
    /// A probe succeeded.
    ProbeSucceeded {
        /// Round trip of the probe, in milliseconds.
        latency_ms: u64,
        /// The apiserver's `gitVersion`, when this probe asked for it (absent once known).
        version: Option<String>,
        /// The member's clock (its `Date` header) minus ours, in seconds.
        clock_skew_seconds: Option<i64>,
    },
    /// A probe failed.
    ProbeFailed {
        /// Why, mapped from the error (see docs/STATUS.md).
        failure: ProbeFailure,
        /// The error text, shown in `message` and `probe.lastError`.
        message: String,
        /// Round trip until the failure, in milliseconds; absent when the probe timed out.
        latency_ms: Option<u64>,
    },
    /// The sync states changed: the cluster's resource counts, summed up by the engine.
    Resources(ResourceCounts),
    /// The resources (`group/version/plural`) the member does not serve changed.
    NotServed(Vec<String>),
    /// The caches changed: the exact object count and latest completed list, summed up by the engine.
    Cache(CacheInfo),
    /// The nodes or pods changed: their sums, as the engine keeps them.
    Capacity {
        /// The nodes' sums (None: no node list yet).
        nodes: Option<NodeSummary>,
        /// The pods' figures, exact (None: no pod list yet).
        pods: Option<PodFigures>,
        /// Show the pod figures exactly (a list completed), not coarsened.
        exact: bool,
    },
    /// The cluster was taken out of the configuration (`Removed`, final).
    Removed,
    /// When the member's credentials expire (read when its sources start).
    Credentials(Option<CredentialInfo>),
    /// The member is kept without sources (`Unhealthy` with this reason,
    /// e.g. `CredentialsUnsupported`).
    Held {
        /// CamelCase reason.
        reason: String,
        /// What is wrong.
        message: String,
    },
}

impl ClusterStatus {
    pub(crate) fn new(name: &str, server: &str, now: DateTime<Utc>) -> Self {
        Self {
            name: name.into(),
            server: server.into(),
            lifecycle: Lifecycle::new(
                ClusterPhase::Pending,
                "Registered",
                "not contacted yet",
                now,
            ),
            probe: ProbeInfo::default(),
            resources: ResourceCounts::default(),
            cache: CacheInfo::default(),
            nodes: None,
            pods: None,
            credentials: None,
            warnings: Vec::new(),
            clock_skew: None,
            not_served: Vec::new(),
        }
    }

    /// The machine as it was when it published `doc`, so that a new owner
    /// of member `name` continues the document (its phase, `since`, history
    /// and transition numbers, probe counters, counts, cache, credentials
    /// and warnings) instead of starting over at `Pending`. Not kept in the
    /// document, so not restored: the time of the last probe, and the clock
    /// skew beyond what a `ClockSkew` warning shows. None for a document
    /// that is malformed, of another member, or `Removed` (that member is
    /// gone: a new one of the same name starts afresh).
    pub(crate) fn restore(doc: &Value, name: &str) -> Option<Self> {
        let lifecycle = Lifecycle::<ClusterPhase>::restore(doc)?;
        let published = PublishedCluster::deserialize(doc).ok()?;
        if lifecycle.phase == ClusterPhase::Removed || published.name != name {
            return None;
        }
        let warnings = restored_warnings(published.warnings);
        let clock_skew = warnings
            .iter()
            .find(|w| w.reason == "ClockSkew")
            .and_then(|w| shown_clock_skew(&w.message));
        let not_served = warnings
            .iter()
            .filter(|w| w.reason == "ResourceNotServed")
            .filter_map(|w| w.message.strip_suffix(NOT_SERVED_SUFFIX))
            .map(str::to_string)
            .collect();
        Some(Self {
            name: published.name,
            server: published.server,
            lifecycle,
            probe: published.probe,
            resources: published.resources,
            cache: published.cache,
            nodes: published.nodes,
            pods: published.pods,
            credentials: published.credentials,
            warnings,
            clock_skew,
            not_served,
        })
    }

    pub(crate) fn phase(&self) -> ClusterPhase {
        self.lifecycle.phase
    }

    fn is_up(&self) -> bool {
        matches!(self.phase(), ClusterPhase::Healthy | ClusterPhase::Degraded)
    }

    /// Healthy or Degraded, from the resource counts.
    fn set_up(&mut self, now: DateTime<Utc>) {
        let r = self.resources;
        if r.failing > 0 {
            self.lifecycle.set(
                ClusterPhase::Degraded,
                "ResourcesFailing",
                format!("{} of {} synced resources failing", r.failing, r.total),
                now,
            );
        } else if r.not_served > 0 {
            self.lifecycle.set(
                ClusterPhase::Healthy,
                "Ready",
                format!(
                    "apiserver ready, {}/{} resources syncing, {} not served",
                    r.synced,
                    r.total - r.not_served,
                    r.not_served
                ),
                now,
            );
        } else {
            self.lifecycle.set(
                ClusterPhase::Healthy,
                "Ready",
                format!(
                    "apiserver ready, {}/{} resources syncing",
                    r.synced, r.total
                ),
                now,
            );
        }
    }

    /// The machine: the next state for one input.
    pub(crate) fn step(
        mut self,
        input: ClusterInput,
        thresholds: Thresholds,
        now: DateTime<Utc>,
    ) -> Self {
        if self.phase() == ClusterPhase::Removed {
            return self;
        }
        self.apply(input, thresholds, now);
        self.warnings = warnings(self.credentials.as_ref(), self.clock_skew, now);
        self.warnings
            .extend(self.not_served.iter().map(|r| not_served_warning(r)));
        self
    }

    fn apply(&mut self, input: ClusterInput, thresholds: Thresholds, now: DateTime<Utc>) {
        match input {
            ClusterInput::Started => {
                if self.phase() == ClusterPhase::Pending {
                    self.lifecycle.set(
                        ClusterPhase::Initializing,
                        "Probing",
                        "first probe running",
                        now,
                    );
                }
            }
            ClusterInput::ProbeSucceeded {
                latency_ms,
                version,
                clock_skew_seconds,
            } => {
                if clock_skew_seconds.is_some() {
                    self.clock_skew = clock_skew_seconds;
                }
                let p = &mut self.probe;
                p.consecutive_successes =
                    (p.consecutive_successes + 1).min(thresholds.success.max(1));
                p.consecutive_failures = 0;
                p.latency_ms = Some(shown_latency(p.latency_ms, latency_ms));
                p.last_probe_at = Some(now);
                if version.is_some() {
                    p.server_version = version;
                }
                let recovering = self.phase() == ClusterPhase::Unhealthy
                    && self.probe.consecutive_successes < thresholds.success.max(1);
                if recovering {
                    let message = format!(
                        "recovering: {}/{} probes succeeded",
                        self.probe.consecutive_successes, thresholds.success
                    );
                    let reason = self.lifecycle.reason.clone();
                    self.lifecycle
                        .set(ClusterPhase::Unhealthy, &reason, message, now);
                } else {
                    self.set_up(now);
                }
            }
            ClusterInput::ProbeFailed {
                failure,
                message,
                latency_ms,
            } => {
                let p = &mut self.probe;
                p.consecutive_failures =
                    (p.consecutive_failures + 1).min(thresholds.failure.max(1));
                p.consecutive_successes = 0;
                p.latency_ms = latency_ms.map(|ms| shown_latency(p.latency_ms, ms));
                p.last_probe_at = Some(now);
                p.last_error = Some(message.clone());
                let failures = p.consecutive_failures;
                if self.is_up() && failures < thresholds.failure.max(1) {
                    // Below the threshold: keep the phase, say what happened.
                    let (phase, reason) = (self.phase(), self.lifecycle.reason.clone());
                    let text = format!(
                        "probe failed ({failures}/{}): {message}",
                        thresholds.failure
                    );
                    self.lifecycle.set(phase, &reason, text, now);
                } else {
                    self.lifecycle
                        .set(ClusterPhase::Unhealthy, failure.as_str(), message, now);
                }
            }
            ClusterInput::Resources(counts) => {
                self.resources = counts;
                if self.is_up() {
                    self.set_up(now);
                }
            }
            ClusterInput::NotServed(resources) => self.not_served = resources,
            ClusterInput::Cache(exact) => {
                self.cache = CacheInfo {
                    objects: shown_objects(self.cache, exact),
                    last_list_at: exact.last_list_at,
                };
            }
            ClusterInput::Capacity { nodes, pods, exact } => {
                // A node change shows the pods exactly too: one document.
                let exact = exact || nodes != self.nodes;
                self.nodes = nodes;
                self.pods = pods.map(|p| shown_pods(self.pods, p, exact));
            }
            ClusterInput::Removed => {
                self.lifecycle.set(
                    ClusterPhase::Removed,
                    "Unregistered",
                    "removed from the configuration",
                    now,
                );
            }
            ClusterInput::Credentials(info) => self.credentials = info,
            ClusterInput::Held { reason, message } => {
                self.probe = ProbeInfo::default();
                self.resources = ResourceCounts::default();
                self.credentials = None;
                self.clock_skew = None;
                self.lifecycle
                    .set(ClusterPhase::Unhealthy, &reason, message, now);
            }
        }
    }
}

/// The probe latency a document shows: the measured one when it moved
/// noticeably (by more than 5 ms and by more than a quarter), else the one
/// already shown — so that jitter does not republish the cluster on every
/// probe. Every probe's latency goes to the `kube_pulse_probe_latency_seconds` metric.
fn shown_latency(shown: Option<u64>, measured: u64) -> u64 {
    match shown {
        Some(shown) if measured.abs_diff(shown) <= 5.max(shown / 4) => shown,
        _ => measured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn probe_latency_moves_only_noticeably() {
        // (shown, measured, shown after)
        let cases = [
            (None, 0, 0),
            (Some(0), 1, 0),
            (Some(3), 8, 3),
            (Some(3), 9, 9),
            (Some(100), 125, 100),
            (Some(100), 126, 126),
            (Some(100), 74, 74),
            (Some(40), 36, 40),
        ];
        for (shown, measured, want) in cases {
            assert_eq!(
                shown_latency(shown, measured),
                want,
                "{shown:?} → {measured}"
            );
        }
    }

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn the_object_count_moves_by_more_than_a_tenth_or_on_a_list() {
        let cache = |objects, listed: Option<i64>| CacheInfo {
            objects,
            last_list_at: listed.map(t),
        };
        // (shown, exact, shown after)
        let cases = [
            (cache(0, None), cache(0, None), 0),
            (cache(0, None), cache(1, None), 1),
            (cache(0, None), cache(12, Some(1)), 12),
            // Below 10 objects every change shows.
            (cache(9, Some(1)), cache(10, Some(1)), 10),
            (cache(9, Some(1)), cache(8, Some(1)), 8),
            // Within a tenth: the count shown stays.
            (cache(10, Some(1)), cache(11, Some(1)), 10),
            (cache(10, Some(1)), cache(12, Some(1)), 12),
            (cache(1000, Some(1)), cache(1100, Some(1)), 1000),
            (cache(1000, Some(1)), cache(900, Some(1)), 1000),
            (cache(1000, Some(1)), cache(1101, Some(1)), 1101),
            (cache(1000, Some(1)), cache(899, Some(1)), 899),
            (cache(1000, Some(1)), cache(0, Some(1)), 0),
            // A completed list shows the exact count, however close.
            (cache(1000, Some(1)), cache(1001, Some(2)), 1001),
            (cache(1000, Some(1)), cache(1000, Some(2)), 1000),
        ];
        for (shown, exact, want) in cases {
            assert_eq!(shown_objects(shown, exact), want, "{shown:?} → {exact:?}");
        }
    }

    #[test]
    fn churn_within_a_tenth_leaves_the_document_as_it_was() {
        let th = Thresholds::default();
        let exact = |objects, listed| {
            ClusterInput::Cache(CacheInfo {
                objects,
                last_list_at: Some(t(listed)),
            })
        };
        let listed = ClusterStatus::new("c", "http://c", t(0))
            .step(ok(), th, t(1))
            .step(exact(500, 2), th, t(2));
        let doc = serde_json::to_value(&listed).unwrap();
        assert_eq!(doc["cache"]["objects"], 500);
        assert_eq!(doc["cache"]["lastListAt"], "2023-11-14T22:13:22.000Z");
        // Pods come and go (net +30, then −20): the same document.
        let mut churned = listed.clone();
        for objects in [510, 530, 520, 480, 510] {
            churned = churned.step(exact(objects, 2), th, t(3));
        }
        assert_eq!(churned, listed);
        // A relist shows the exact count and its time.
        let relisted = churned.step(exact(510, 9), th, t(9));
        assert_eq!(relisted.cache.objects, 510);
        assert_eq!(relisted.cache.last_list_at, Some(t(9)));
    }

    fn ok() -> ClusterInput {
        ClusterInput::ProbeSucceeded {
            latency_ms: 3,
            version: Some("v1.32.0".into()),
            clock_skew_seconds: Some(0),
        }
    }

    #[test]
    fn warnings_table() {
        let cert = |days: i64| CredentialInfo {
            kind: CredentialKind::ClientCertificate,
            expires: t(0) + chrono::Duration::days(days) + chrono::Duration::hours(1),
        };
        let token = CredentialInfo {
            kind: CredentialKind::Token,
            expires: t(-60),
        };
        // (credentials, skew, reasons, a message fragment)
        let cases = [
            (None, None, vec![], ""),
            (Some(cert(30)), Some(0), vec![], ""),
            (
                Some(cert(6)),
                None,
                vec!["CredentialsExpiring"],
                "(within 7 days)",
            ),
            (Some(cert(8)), None, vec![], ""),
            (
                Some(cert(1)),
                None,
                vec!["CredentialsExpiring"],
                "(within 2 days)",
            ),
            (
                Some(CredentialInfo {
                    kind: CredentialKind::ClientCertificate,
                    expires: t(0) + chrono::Duration::days(3) - chrono::Duration::minutes(10),
                }),
                None,
                vec!["CredentialsExpiring"],
                "(within 3 days)",
            ),
            (
                Some(CredentialInfo {
                    kind: CredentialKind::ClientCertificate,
                    expires: t(0) + chrono::Duration::days(1),
                }),
                None,
                vec!["CredentialsExpiring"],
                "(within a day)",
            ),
            (
                Some(cert(0)),
                None,
                vec!["CredentialsExpiring"],
                "(within a day)",
            ),
            (
                Some(token),
                None,
                vec!["CredentialsExpired"],
                "the bearer token expired at",
            ),
            (None, Some(30), vec![], ""),
            (None, Some(31), vec!["ClockSkew"], "about 30 s ahead of"),
            (None, Some(-94), vec!["ClockSkew"], "about 95 s behind"),
            (
                Some(cert(2)),
                Some(200),
                vec!["CredentialsExpiring", "ClockSkew"],
                "about 200 s",
            ),
        ];
        for (credentials, skew, reasons, fragment) in cases {
            let w = warnings(credentials.as_ref(), skew, t(0));
            assert_eq!(
                w.iter().map(|w| w.reason).collect::<Vec<_>>(),
                reasons,
                "{credentials:?} {skew:?}"
            );
            assert!(
                w.iter().any(|w| w.message.contains(fragment)) || fragment.is_empty(),
                "{w:?}"
            );
        }
        // Jitter in the skew does not change the document.
        assert_eq!(
            warnings(None, Some(93), t(0)),
            warnings(None, Some(96), t(0))
        );
    }

    #[test]
    fn the_document_carries_credentials_and_warnings() {
        let mut s = ClusterStatus::new("a", "https://a", t(0));
        assert!(serde_json::to_value(&s).unwrap().get("warnings").is_none());
        s = s.step(
            ClusterInput::Credentials(Some(CredentialInfo {
                kind: CredentialKind::Token,
                expires: t(3 * 86_400),
            })),
            Thresholds::default(),
            t(0),
        );
        s = s.step(
            ClusterInput::ProbeSucceeded {
                latency_ms: 1,
                version: None,
                clock_skew_seconds: Some(120),
            },
            Thresholds::default(),
            t(1),
        );
        let doc = serde_json::to_value(&s).unwrap();
        assert_eq!(doc["credentials"]["kind"], "Token");
        assert_eq!(doc["warnings"][0]["reason"], "CredentialsExpiring");
        assert_eq!(doc["warnings"][1]["reason"], "ClockSkew");
        // A probe without a Date header keeps the last skew known.
        s = s.step(
            ClusterInput::ProbeSucceeded {
                latency_ms: 1,
                version: None,
                clock_skew_seconds: None,
            },
            Thresholds::default(),
            t(2),
        );
        assert_eq!(s.warnings.len(), 2);
    }

    fn fail(failure: ProbeFailure) -> ClusterInput {
        ClusterInput::ProbeFailed {
            failure,
            message: "boom".into(),
            latency_ms: None,
        }
    }

    fn counts(total: u32, failing: u32) -> ClusterInput {
        ClusterInput::Resources(ResourceCounts {
            total,
            synced: total - failing,
            failing,
            not_served: 0,
        })
    }

    #[test]
    fn a_resource_not_served_is_a_warning_and_the_cluster_stays_healthy() {
        let pdb = "policy/v1beta1/poddisruptionbudgets".to_string();
        let served = |synced: u32, not_served: u32| {
            ClusterInput::Resources(ResourceCounts {
                total: 10,
                synced,
                failing: 0,
                not_served,
            })
        };
        // (inputs after a good probe, phase (reason), message, warnings)
        let cases = [
            (
                vec![served(9, 1), ClusterInput::NotServed(vec![pdb.clone()])],
                "Healthy (Ready)",
                "apiserver ready, 9/9 resources syncing, 1 not served",
                vec!["ResourceNotServed"],
            ),
            (
                vec![
                    served(9, 1),
                    ClusterInput::NotServed(vec![pdb.clone()]),
                    served(10, 0),
                    ClusterInput::NotServed(vec![]),
                ],
                "Healthy (Ready)",
                "apiserver ready, 10/10 resources syncing",
                vec![],
            ),
        ];
        for (inputs, phase, message, warned) in cases {
            let mut s = ClusterStatus::new("c", "http://c", t(0))
                .step(ClusterInput::Started, Thresholds::default(), t(0))
                .step(ok(), Thresholds::default(), t(1));
            for input in inputs {
                s = s.step(input, Thresholds::default(), t(2));
            }
            assert_eq!(s.lifecycle.label(true), phase);
            assert_eq!(s.lifecycle.message, message);
            let reasons: Vec<&str> = s.warnings.iter().map(|w| w.reason).collect();
            assert_eq!(reasons, warned);
            let doc = serde_json::to_value(&s).unwrap();
            if warned.is_empty() {
                assert!(doc["resources"].get("notServed").is_none(), "{doc}");
            } else {
                assert_eq!(doc["resources"]["notServed"], 1);
                assert!(
                    doc["warnings"][0]["message"].as_str().unwrap().starts_with(
                        "policy/v1beta1/poddisruptionbudgets is named by a sync registry"
                    ),
                    "{doc}"
                );
                // A new owner continues the warning.
                let restored = ClusterStatus::restore(&doc, "c").unwrap();
                assert_eq!(restored.not_served, vec![pdb.clone()]);
                assert_eq!(restored.warnings, s.warnings);
            }
        }
    }

    /// Runs inputs from a fresh cluster and returns "Phase (Reason)" after each.
    fn run(inputs: Vec<ClusterInput>, thresholds: Thresholds) -> Vec<String> {
        let mut state = ClusterStatus::new("c", "http://c", t(0));
        inputs
            .into_iter()
            .enumerate()
            .map(|(i, input)| {
                state = state.clone().step(input, thresholds, t(i as i64 + 1));
                state.lifecycle.label(true)
            })
            .collect()
    }

    #[test]
    fn phases_and_reasons() {
        let th = Thresholds {
            success: 2,
            failure: 3,
        };
        use ProbeFailure::*;
        let cases: Vec<(&str, Vec<ClusterInput>, Vec<&str>)> = vec![
            (
                "first contact",
                vec![ClusterInput::Started, ok()],
                vec!["Initializing (Probing)", "Healthy (Ready)"],
            ),
            (
                "unreachable from the start",
                vec![ClusterInput::Started, fail(Disconnected)],
                vec!["Initializing (Probing)", "Unhealthy (Disconnected)"],
            ),
            (
                "held: credentials kube-pulse will not use",
                vec![
                    ClusterInput::Held {
                        reason: "CredentialsUnsupported".into(),
                        message: "credential type \"OIDC\"".into(),
                    },
                    ClusterInput::Started,
                ],
                vec![
                    "Unhealthy (CredentialsUnsupported)",
                    "Unhealthy (CredentialsUnsupported)",
                ],
            ),
            (
                "one lost probe does not flap",
                vec![ok(), fail(Timeout), fail(Timeout), ok()],
                vec![
                    "Healthy (Ready)",
                    "Healthy (Ready)",
                    "Healthy (Ready)",
                    "Healthy (Ready)",
                ],
            ),
            (
                "failure threshold",
                vec![
                    ok(),
                    fail(Disconnected),
                    fail(Disconnected),
                    fail(Disconnected),
                ],
                vec![
                    "Healthy (Ready)",
                    "Healthy (Ready)",
                    "Healthy (Ready)",
                    "Unhealthy (Disconnected)",
                ],
            ),
            (
                "success threshold on recovery",
                vec![fail(Unauthorized), ok(), ok()],
                vec![
                    "Unhealthy (Unauthorized)",
                    "Unhealthy (Unauthorized)",
                    "Healthy (Ready)",
                ],
            ),
            (
                "reason follows the latest failure",
                vec![fail(Disconnected), fail(TLSError), fail(ApiServerNotReady)],
                vec![
                    "Unhealthy (Disconnected)",
                    "Unhealthy (TLSError)",
                    "Unhealthy (ApiServerNotReady)",
                ],
            ),
            (
                "degraded while resources fail",
                vec![ok(), counts(4, 1), counts(4, 0)],
                vec![
                    "Healthy (Ready)",
                    "Degraded (ResourcesFailing)",
                    "Healthy (Ready)",
                ],
            ),
            (
                "resource counts alone do not make an unreachable cluster degraded",
                vec![fail(Timeout), counts(4, 4)],
                vec!["Unhealthy (Timeout)", "Unhealthy (Timeout)"],
            ),
            (
                "removed is final",
                vec![ok(), ClusterInput::Removed, ok()],
                vec![
                    "Healthy (Ready)",
                    "Removed (Unregistered)",
                    "Removed (Unregistered)",
                ],
            ),
        ];
        for (name, inputs, want) in cases {
            assert_eq!(run(inputs, th), want, "{name}");
        }
    }

    #[test]
    fn probe_details_and_history() {
        let th = Thresholds::default();
        let s = ClusterStatus::new("c", "http://c", t(0))
            .step(ok(), th, t(1))
            .step(fail(ProbeFailure::Disconnected), th, t(2))
            .step(fail(ProbeFailure::Disconnected), th, t(3));
        assert_eq!(s.probe.last_error.as_deref(), Some("boom"));
        assert_eq!(s.probe.server_version.as_deref(), Some("v1.32.0"));
        assert_eq!(s.probe.consecutive_failures, 2);
        assert_eq!(s.lifecycle.since, t(3));
        let history: Vec<(&str, &str)> = s
            .lifecycle
            .history
            .iter()
            .map(|h| (h.to.as_str(), h.reason.as_str()))
            .collect();
        assert_eq!(
            history,
            [("Healthy", "Ready"), ("Unhealthy", "Disconnected")]
        );
        let doc = serde_json::to_value(&s).unwrap();
        assert_eq!(doc["phase"], "Unhealthy");
        assert_eq!(doc["reason"], "Disconnected");
        assert_eq!(doc["probe"]["lastError"], "boom");
    }

    fn doc(s: &ClusterStatus) -> Value {
        serde_json::to_value(s).unwrap()
    }

    #[test]
    fn a_restored_machine_continues_its_document() {
        let th = Thresholds {
            success: 2,
            failure: 2,
        };
        let expiring = ClusterInput::Credentials(Some(CredentialInfo {
            kind: CredentialKind::ClientCertificate,
            expires: t(3 * 86_400),
        }));
        let skewed = |seconds| ClusterInput::ProbeSucceeded {
            latency_ms: 40,
            version: None,
            clock_skew_seconds: seconds,
        };
        let cache = |objects, listed| {
            ClusterInput::Cache(CacheInfo {
                objects,
                last_list_at: Some(t(listed)),
            })
        };
        let mut flapping = Vec::new();
        for _ in 0..15 {
            flapping.extend([fail(ProbeFailure::Timeout), fail(ProbeFailure::Timeout)]);
            flapping.extend([ok(), ok()]);
        }
        use ProbeFailure::*;
        // (name, inputs before the document is published, inputs after)
        let cases: Vec<(&str, Vec<ClusterInput>, Vec<ClusterInput>)> = vec![
            ("fresh", vec![], vec![ClusterInput::Started, ok()]),
            (
                "healthy through a lost probe and the threshold",
                vec![ClusterInput::Started, ok(), ok()],
                vec![
                    ClusterInput::Started,
                    fail(Disconnected),
                    ok(),
                    fail(Disconnected),
                    fail(Disconnected),
                ],
            ),
            (
                "one failure below the threshold",
                vec![ok(), ok(), fail(Timeout)],
                vec![fail(Timeout), ok()],
            ),
            (
                "recovering: one of two good probes",
                vec![fail(Unauthorized), fail(Unauthorized), ok()],
                vec![ok(), ok()],
            ),
            (
                "degraded, then not",
                vec![ok(), ok(), counts(4, 1)],
                vec![ClusterInput::Started, counts(4, 1), ok(), counts(4, 0)],
            ),
            (
                "the cache's shown count",
                vec![ok(), cache(1000, 2), cache(1050, 2)],
                vec![cache(1080, 2), cache(1101, 2), cache(1101, 9)],
            ),
            (
                "credentials and clock skew warnings",
                vec![expiring.clone(), skewed(Some(93))],
                vec![
                    ClusterInput::Started,
                    skewed(None),
                    skewed(Some(-31)),
                    skewed(Some(5)),
                ],
            ),
            (
                "held",
                vec![ClusterInput::Held {
                    reason: "CredentialsUnsupported".into(),
                    message: "credential type \"OIDC\"".into(),
                }],
                vec![
                    ClusterInput::Started,
                    ClusterInput::Held {
                        reason: "InvalidAccess".into(),
                        message: "not PEM".into(),
                    },
                ],
            ),
            (
                "a full history keeps numbering",
                flapping,
                vec![fail(TLSError), fail(TLSError), ok(), ok()],
            ),
        ];
        for (name, before, after) in cases {
            let mut kept = ClusterStatus::new("c", "https://c", t(0));
            for (i, input) in before.into_iter().enumerate() {
                kept = kept.step(input, th, t(1 + i as i64));
            }
            let published = doc(&kept);
            let mut restored = ClusterStatus::restore(&published, "c")
                .unwrap_or_else(|| panic!("{name}: not restored from {published}"));
            // The hub holds documents without their null members.
            let mut held = published.clone();
            crate::protocol::patch::strip_nulls(&mut held);
            assert_eq!(
                ClusterStatus::restore(&held, "c"),
                Some(restored.clone()),
                "{name}: held"
            );
            assert_eq!(doc(&restored), published, "{name}: restored");
            assert_eq!(restored.lifecycle, kept.lifecycle, "{name}");
            for (i, input) in after.into_iter().enumerate() {
                let what = format!("{name}, after step {i} ({input:?})");
                let at = t(1000 + i as i64);
                kept = kept.step(input.clone(), th, at);
                restored = restored.step(input, th, at);
                assert_eq!(doc(&restored), doc(&kept), "{what}");
            }
        }
    }

    #[test]
    fn the_clock_skew_a_warning_shows_reads_back() {
        for skew in [31, 32, 33, 35, 93, 120, 4000, -31, -32, -94, -600] {
            let shown = warnings(None, Some(skew), t(0));
            let back = shown_clock_skew(&shown[0].message).unwrap();
            assert_eq!(warnings(None, Some(back), t(0)), shown, "{skew}");
        }
        for message in [
            "the bearer token expired at 2026-01-01T00:00:00Z",
            "the apiserver's clock is about x s behind the gateway's",
            "the apiserver's clock is about 35 s beside the gateway's",
            "",
        ] {
            assert_eq!(shown_clock_skew(message), None, "{message}");
        }
    }

    #[test]
    fn restore_ignores_removed_foreign_and_malformed_documents() {
        let th = Thresholds::default();
        let healthy = ClusterStatus::new("c", "https://c", t(0)).step(ok(), th, t(1));
        let good = doc(&healthy);
        assert!(ClusterStatus::restore(&good, "c").is_some());
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
        let adding = |field: &str, value: Value| {
            let mut doc = good.clone();
            doc[field] = value;
            doc
        };
        let removed = doc(&healthy.clone().step(ClusterInput::Removed, th, t(2)));
        // (why, document, the member restoring it)
        let cases = [
            ("removed", removed, "c"),
            ("another member's", good.clone(), "d"),
            (
                "a phase clusters do not have",
                with("/phase", json!("Syncing")),
                "c",
            ),
            ("no probe", without("probe"), "c"),
            ("no resources", without("resources"), "c"),
            ("no cache", without("cache"), "c"),
            ("no name", without("name"), "c"),
            (
                "a negative counter",
                with("/probe/consecutiveSuccesses", json!(-1)),
                "c",
            ),
            ("a count as text", with("/resources/total", json!("3")), "c"),
            (
                "credentials of an unknown kind",
                adding(
                    "credentials",
                    json!({"kind": "Password", "expires": "2026-01-01T00:00:00Z"}),
                ),
                "c",
            ),
            (
                "credentials without a time",
                adding("credentials", json!({"kind": "Token"})),
                "c",
            ),
            (
                "an app's document",
                json!({"cluster": "c", "phase": "Running"}),
                "c",
            ),
            ("not an object", json!([1, 2]), "c"),
        ];
        for (why, published, member) in cases {
            assert_eq!(
                ClusterStatus::restore(&published, member),
                None,
                "{why}: {published}"
            );
        }
        // A warning this version does not make is left to the next step.
        let mut foreign = good.clone();
        foreign["warnings"] = json!([{"reason": "SomethingNew", "message": "?"}]);
        let restored = ClusterStatus::restore(&foreign, "c").unwrap();
        assert!(restored.warnings.is_empty());
        assert_eq!(restored.lifecycle, healthy.lifecycle);
    }
}
