//! What kube-pulse reports on Karpor's own objects: pure functions from
//! status documents to the `status` of a Karpor `Cluster` and a Karpor
//! `SyncRegistry` (`hub ──documents──▶ [report] ──status──▶ writer`).
//!
//! A `Cluster` gets `healthy` (true while the member is reachable),
//! `apiserver`, `version` and `metav1.Condition`s merged by type into the
//! ones it has (`conditions.rs`): `Ready` (reachability, with kube-pulse's
//! reason), `Synced` (its watched resources), Karpor's `ClusterHealthy` and
//! `Validated`, and the warnings `CredentialsValid` and `ClockSynced`. A `SyncRegistry` gets Karpor's
//! `clusters[].resources[]` with each resource's sync phase. Times are
//! `metav1.Time` (RFC 3339, seconds), and a condition keeps its
//! `lastTransitionTime` while its status stays the same, as Kubernetes
//! conventions ask.

use std::collections::HashMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use super::conditions::{self, Condition};
use crate::status::sync::well_known_kind;

/// `metav1.Time`: RFC 3339 in UTC, whole seconds.
pub(crate) fn meta_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A document time (milliseconds) as `metav1.Time`; None when unreadable.
fn doc_time(raw: &Value) -> Option<String> {
    let parsed = DateTime::parse_from_rfc3339(raw.as_str()?).ok()?;
    Some(meta_time(parsed.with_timezone(&Utc)))
}

fn text<'a>(doc: &'a Value, field: &str) -> &'a str {
    doc.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// Phases in which the member answered its last probes.
fn reachable(phase: &str) -> bool {
    matches!(phase, "Healthy" | "Degraded")
}

/// Whether a member's document says nothing yet that is worth writing over
/// a status kube-pulse wrote before: the member is not judged yet
/// (`Pending`, `Initializing`: a gateway just started, before its first
/// probe) and the object already has kube-pulse's `Ready` condition. The
/// last judgment then stays until the new one, instead of every condition
/// going `Unknown` for the seconds a restart takes.
pub(crate) fn keeps_previous(doc: &Value, previous: &Value) -> bool {
    matches!(text(doc, "phase"), "Pending" | "Initializing")
        && previous["conditions"].as_array().is_some_and(|list| {
            list.iter()
                .any(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        })
}

/// The `status` fields of a Karpor `Cluster` kube-pulse writes; every other
/// field is left as it is.
pub(crate) const CLUSTER_FIELDS: &[&str] = &["healthy", "apiserver", "version", "conditions"];

/// The `status` of a Karpor `Cluster` from its `clusters/{name}` document,
/// merged into `previous` (the object's current status): `healthy`,
/// `apiserver` (the Cluster's endpoint), `version` (the member's, once
/// probed) and kube-pulse's conditions set by type
/// ([`conditions::set_condition`]); every other field and condition type of
/// `previous` is kept as it is.
pub(crate) fn cluster_status(
    doc: &Value,
    previous: &Value,
    endpoint: Option<&str>,
    generation: Option<i64>,
    now: DateTime<Utc>,
) -> Value {
    let now = meta_time(now);
    let (phase, reason, message) = (
        text(doc, "phase"),
        text(doc, "reason"),
        text(doc, "message"),
    );
    let summary = if message.is_empty() {
        format!("{phase} ({reason})")
    } else {
        format!("{phase} ({reason}): {message}")
    };
    let mut status = match previous {
        Value::Object(fields) => fields.clone(),
        _ => Map::new(),
    };
    let mut list: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ready = Condition::new(
        "Ready",
        match phase {
            p if reachable(p) => "True",
            "Unhealthy" => "False",
            _ => "Unknown",
        },
        reason,
        summary.clone(),
    );
    let karpor = [
        Some(ready),
        Some(synced_condition(doc, phase)),
        conditions::cluster_healthy(phase, reason, &summary),
        conditions::validated(phase, reason, message, &list),
        conditions::credentials_valid(doc),
        conditions::clock_synced(doc, phase),
    ];
    for condition in karpor.iter().flatten() {
        conditions::set_condition(&mut list, condition, generation, &now);
    }
    // Before kube-pulse has judged the member (`Pending`, `Initializing`),
    // what the object says (Karpor's `healthy: true` on create) stays.
    let judged = reachable(phase) || phase == "Unhealthy";
    if judged || !status.contains_key("healthy") {
        status.insert("healthy".into(), json!(reachable(phase)));
    }
    if let Some(endpoint) = endpoint.filter(|e| !e.is_empty()) {
        status.insert("apiserver".into(), json!(endpoint));
    }
    let version = text(&doc["probe"], "serverVersion");
    if !version.is_empty() {
        status.insert("version".into(), json!(version));
    }
    status.insert("conditions".into(), Value::Array(list));
    Value::Object(status)
}

/// `Synced`: whether every resource the member syncs is caught up.
fn synced_condition(doc: &Value, phase: &str) -> Condition {
    let count = |field: &str| doc["resources"][field].as_u64().unwrap_or(0);
    let (synced, failing, not_served) = (count("synced"), count("failing"), count("notServed"));
    // Resources the member does not serve are no part of its sync.
    let total = count("total").saturating_sub(not_served);
    let (status, reason, message) = if !reachable(phase) {
        (
            "Unknown",
            "ClusterNotReady",
            format!("the cluster is {phase}: its resources are not watched now"),
        )
    } else if failing > 0 {
        (
            "False",
            "ResourcesFailing",
            format!("{failing} of {total} resources failing, {synced} syncing"),
        )
    } else if synced < total {
        (
            "False",
            "Listing",
            format!("{synced} of {total} resources syncing"),
        )
    } else if not_served > 0 {
        (
            "True",
            "AllSynced",
            format!("{total} resources syncing, {not_served} not served by the member"),
        )
    } else {
        ("True", "AllSynced", format!("{total} resources syncing"))
    };
    Condition::new("Synced", status, reason, message)
}

/// One resource of a registry on one cluster, and its sync document (None
/// while the member has not started watching it).
pub(crate) struct ResourceReport<'a> {
    /// Karpor's `apiVersion` of the resource (`v1`, `apps/v1`).
    pub(crate) api_version: String,
    /// The plural: its well-known kind stands in for a kind discovery has
    /// not told, else the message names it.
    pub(crate) resource: String,
    pub(crate) doc: Option<&'a Value>,
}

/// One cluster a registry applies to.
pub(crate) struct ClusterReport<'a> {
    pub(crate) cluster: String,
    pub(crate) resources: Vec<ResourceReport<'a>>,
    /// What its resources without a document are: see [`Unwatched::of`].
    pub(crate) unwatched: Unwatched,
}

/// The status, reason and message of a resource a member does not watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unwatched {
    pub(crate) status: &'static str,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

impl Unwatched {
    /// Why a cluster's resources have no sync document, from the cluster's
    /// name and its `clusters/{name}` document (None: kube-pulse has no
    /// member of that name): a name that cannot be a member is left out for
    /// good, a member that is down watches nothing, and otherwise its
    /// watches have not reported yet.
    pub(crate) fn of(cluster: &str, doc: Option<&Value>) -> Self {
        let (status, reason, message) = match doc.map(|d| text(d, "phase")) {
            None if !crate::names::valid_name(cluster) => (
                "Stopped",
                "InvalidClusterName",
                "kube-pulse does not follow this cluster: its name is not a DNS label".to_string(),
            ),
            None => (
                "Pending",
                "ClusterNotFound",
                "kube-pulse has no member of this name (no Cluster object, or not read yet)"
                    .to_string(),
            ),
            // The member's reason is left out: it may change often while
            // the member is down, and each change would be a write.
            Some(phase @ ("Unhealthy" | "Unknown")) => (
                "Stopped",
                "ClusterUnhealthy",
                format!("the cluster is {phase}: its resources are not watched"),
            ),
            Some(_) => (
                "Pending",
                "NotWatched",
                "the member does not watch this resource yet".to_string(),
            ),
        };
        Self {
            status,
            reason,
            message,
        }
    }
}

/// Sync phases from the best to the worst: a cluster's status in a registry
/// is the worst of its resources'. `NotServed` is no failure: a cluster
/// whose other resources sync shows it.
const PHASE_ORDER: &[&str] = &[
    "Syncing",
    "NotServed",
    "Listing",
    "Pending",
    "Stopped",
    "Error",
];

/// A sync phase as Karpor shows it: `Backoff` (waiting to retry after an
/// error) is `Error` there, as both mean the resource is not synced; the
/// reason and the message are the error's (the retry time is left out, so
/// that a retry does not change what is written).
fn karpor_phase(phase: &str) -> &str {
    match phase {
        "Backoff" => "Error",
        other => other,
    }
}

fn rank(phase: &str) -> usize {
    PHASE_ORDER
        .iter()
        .position(|p| *p == phase)
        .unwrap_or(PHASE_ORDER.len())
}

/// The most bytes of `clusters` written into a SyncRegistry's status: an
/// object Karpor stores whole (etcd keeps at most 1.5 MiB of one object,
/// an apiserver takes at most 3 MiB of one request), whatever the number
/// of clusters the registry applies to.
pub(crate) const MAX_REGISTRY_STATUS_BYTES: usize = 1 << 20;

/// `clusters` cut to `budget` bytes of JSON: past it, clusters whose every
/// resource is `Syncing` are left out first, from the last name back, then
/// others the same way, so that what needs attention stays listed. Each
/// kept entry keeps its place (name order).
fn within_budget(clusters: Vec<Value>, budget: usize) -> Vec<Value> {
    let sizes: Vec<usize> = clusters
        .iter()
        .map(|c| serde_json::to_vec(c).map_or(0, |b| b.len() + 1))
        .collect();
    let mut total: usize = sizes.iter().sum();
    if total <= budget {
        return clusters;
    }
    let mut keep = vec![true; clusters.len()];
    for quiet_first in [true, false] {
        for i in (0..clusters.len()).rev() {
            if total <= budget {
                break;
            }
            let quiet = clusters[i]["status"] == "Syncing";
            if keep[i] && (quiet || !quiet_first) {
                keep[i] = false;
                total -= sizes[i];
            }
        }
    }
    clusters
        .into_iter()
        .zip(keep)
        .filter_map(|(c, kept)| kept.then_some(c))
        .collect()
}

/// The `status` of a Karpor `SyncRegistry`: per cluster it applies to, each
/// resource's sync phase, reason, message and when the phase last changed.
/// `lastTransitionTime` is the latest of those (the previous one, or `now`,
/// when no resource has a document yet).
pub(crate) fn registry_status(
    clusters: &[ClusterReport<'_>],
    previous: &Value,
    now: DateTime<Utc>,
) -> Value {
    let now = meta_time(now);
    let mut latest: Option<String> = None;
    let before = previous_transitions(previous);
    let clusters: Vec<Value> = clusters
        .iter()
        .map(|c| {
            let mut worst = "Syncing";
            let resources: Vec<Value> = c
                .resources
                .iter()
                .map(|r| {
                    let (status, reason, message, since) = match r.doc {
                        Some(doc) => (
                            karpor_phase(text(doc, "phase")),
                            text(doc, "reason"),
                            match text(doc, "phase") {
                                "Backoff" => text(doc, "lastError"),
                                _ => text(doc, "message"),
                            },
                            doc_time(&doc["since"]),
                        ),
                        None => (
                            c.unwatched.status,
                            c.unwatched.reason,
                            c.unwatched.message.as_str(),
                            None,
                        ),
                    };
                    if rank(status) > rank(worst) {
                        worst = status;
                    }
                    let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
                    let kind = r
                        .doc
                        .and_then(|d| d.get("kind"))
                        .and_then(Value::as_str)
                        .filter(|k| !k.is_empty())
                        .or_else(|| well_known_kind(group, &r.resource));
                    // The time the written status and reason last changed:
                    // kept while they stay (a retry moves the document's
                    // phase between Error and Backoff, another replica's or
                    // a restarted gateway's documents have their own times,
                    // and none of that is a transition here).
                    let key = (
                        c.cluster.to_string(),
                        r.api_version.to_string(),
                        kind.unwrap_or(&r.resource).to_string(),
                    );
                    let since = match before.get(&key) {
                        Some((s, why, at)) if s == status && why == reason && !at.is_empty() => {
                            Some(at.clone())
                        }
                        _ => since,
                    };
                    if let Some(since) = &since
                        && latest.as_ref().is_none_or(|l| since > l)
                    {
                        latest = Some(since.clone());
                    }
                    let mut entry = Map::new();
                    entry.insert("apiVersion".into(), json!(r.api_version));
                    if let Some(kind) = kind {
                        entry.insert("kind".into(), json!(kind));
                    }
                    entry.insert("status".into(), json!(status));
                    if !reason.is_empty() {
                        entry.insert("reason".into(), json!(reason));
                    }
                    // No kind to show: the message names the resource.
                    let message = match kind {
                        Some(_) => message.to_string(),
                        None if message.is_empty() => format!("resource {}", r.resource),
                        None => format!("resource {}: {message}", r.resource),
                    };
                    if !message.is_empty() {
                        entry.insert("message".into(), json!(message));
                    }
                    entry.insert(
                        "lastTransitionTime".into(),
                        json!(since.unwrap_or_else(|| now.clone())),
                    );
                    Value::Object(entry)
                })
                .collect();
            json!({"cluster": c.cluster, "status": worst, "resources": resources})
        })
        .collect();
    let clusters = within_budget(clusters, MAX_REGISTRY_STATUS_BYTES);
    let last = latest
        .or_else(|| previous["lastTransitionTime"].as_str().map(str::to_string))
        .unwrap_or(now);
    json!({"clusters": clusters, "lastTransitionTime": last})
}

/// Each resource's written `(status, reason, lastTransitionTime)` in a
/// registry's previous status, by cluster, apiVersion and kind (or, with
/// no kind, the resource the message names).
fn previous_transitions(
    previous: &Value,
) -> HashMap<(String, String, String), (String, String, String)> {
    let mut out = HashMap::new();
    for cluster in previous["clusters"].as_array().into_iter().flatten() {
        let name = text(cluster, "cluster");
        for r in cluster["resources"].as_array().into_iter().flatten() {
            let which = match text(r, "kind") {
                "" => text(r, "message")
                    .strip_prefix("resource ")
                    .map(|m| m.split(':').next().unwrap_or(m))
                    .unwrap_or_default(),
                kind => kind,
            };
            out.insert(
                (
                    name.to_string(),
                    text(r, "apiVersion").to_string(),
                    which.to_string(),
                ),
                (
                    text(r, "status").to_string(),
                    text(r, "reason").to_string(),
                    text(r, "lastTransitionTime").to_string(),
                ),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member up and watching: what it does not watch yet is `Pending`.
    fn watching() -> Unwatched {
        Unwatched::of("a", Some(&json!({"phase": "Healthy"})))
    }

    #[test]
    fn a_resource_without_a_document_says_why_from_its_cluster() {
        let doc = |phase: &str| json!({"phase": phase, "reason": "Timeout"});
        // (cluster, its document, status, reason)
        let cases = [
            ("Bad_Name", None, "Stopped", "InvalidClusterName"),
            ("ghost", None, "Pending", "ClusterNotFound"),
            ("a", Some(doc("Unhealthy")), "Stopped", "ClusterUnhealthy"),
            ("a", Some(doc("Unknown")), "Stopped", "ClusterUnhealthy"),
            ("a", Some(doc("Pending")), "Pending", "NotWatched"),
            ("a", Some(doc("Healthy")), "Pending", "NotWatched"),
        ];
        for (cluster, doc, status, reason) in cases {
            let got = Unwatched::of(cluster, doc.as_ref());
            assert_eq!(
                (got.status, got.reason),
                (status, reason),
                "{cluster} {doc:?}"
            );
        }
        let down = Unwatched::of("a", Some(&doc("Unhealthy")));
        assert_eq!(
            down.message,
            "the cluster is Unhealthy: its resources are not watched"
        );
    }

    #[test]
    fn a_status_past_its_budget_leaves_out_syncing_clusters_first() {
        let entry =
            |name: &str, status: &str| json!({"cluster": name, "status": status, "resources": []});
        let size = serde_json::to_vec(&entry("c0", "Syncing")).unwrap().len() + 1;
        // (statuses, budget in entries, names kept)
        let cases: &[(&[&str], usize, &[&str])] = &[
            (&["Syncing", "Error", "Syncing"], 3, &["c0", "c1", "c2"]),
            (&["Syncing", "Error", "Syncing"], 2, &["c0", "c1"]),
            (&["Syncing", "Error", "Syncing"], 1, &["c1"]),
            (&["Error", "Syncing", "Pending"], 2, &["c0", "c2"]),
            (&["Error", "Error", "Error"], 2, &["c0", "c1"]),
            (&["Error", "Error", "Error"], 0, &[]),
        ];
        for (statuses, entries, kept) in cases {
            let clusters: Vec<Value> = statuses
                .iter()
                .enumerate()
                .map(|(i, s)| entry(&format!("c{i}"), s))
                .collect();
            let out = within_budget(clusters, entries * size);
            let names: Vec<&str> = out.iter().map(|c| c["cluster"].as_str().unwrap()).collect();
            assert_eq!(&names, kept, "{statuses:?} within {entries}");
        }
    }

    #[test]
    fn ten_thousand_clusters_stay_under_the_limit_with_the_failing_ones_listed() {
        let docs: Vec<Value> = (0..10_000)
            .map(|i| {
                let phase = if i % 1000 == 7 { "Error" } else { "Syncing" };
                json!({"phase": phase, "reason": "Watching", "message": "watching 1200 objects",
                       "since": "2026-12-04T10:00:00.000Z", "kind": "ConfigMap"})
            })
            .collect();
        let reports: Vec<ClusterReport<'_>> = docs
            .iter()
            .enumerate()
            .map(|(i, doc)| ClusterReport {
                cluster: format!("member-{i:05}"),
                unwatched: watching(),
                resources: vec![ResourceReport {
                    api_version: "v1".into(),
                    resource: "configmaps".into(),
                    doc: Some(doc),
                }],
            })
            .collect();
        let status = registry_status(&reports, &Value::Null, t(0));
        let bytes = serde_json::to_vec(&status).unwrap().len();
        assert!(bytes <= MAX_REGISTRY_STATUS_BYTES + 100, "{bytes} bytes");
        let listed = status["clusters"].as_array().unwrap();
        assert!(
            listed.len() > 1000 && listed.len() < 10_000,
            "{}",
            listed.len()
        );
        let failing = listed.iter().filter(|c| c["status"] == "Error").count();
        assert_eq!(failing, 10, "every failing cluster stays listed");
    }

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + s, 0).unwrap()
    }

    fn cluster_doc(phase: &str, reason: &str, resources: (u64, u64, u64)) -> Value {
        json!({
            "phase": phase, "reason": reason, "message": "probe says so",
            "resources": {"total": resources.0, "synced": resources.1, "failing": resources.2},
        })
    }

    fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap()
    }

    #[test]
    fn an_unjudged_member_keeps_what_was_written_before() {
        let written = json!({"healthy": true, "conditions": [{"type": "Ready", "status": "True"}]});
        let karpors_own =
            json!({"healthy": true, "conditions": [{"type": "Other", "status": "True"}]});
        // (phase, the object's status, kept)
        let cases = [
            ("Pending", &written, true),
            ("Initializing", &written, true),
            ("Pending", &karpors_own, false),
            ("Pending", &Value::Null, false),
            ("Healthy", &written, false),
            ("Unhealthy", &written, false),
            ("Unknown", &written, false),
        ];
        for (phase, previous, kept) in cases {
            let doc = json!({"phase": phase, "reason": "r"});
            assert_eq!(
                keeps_previous(&doc, previous),
                kept,
                "{phase} over {previous}"
            );
        }
    }

    #[test]
    fn cluster_phases_map_to_healthy_and_conditions() {
        // (phase, reason, resources (total, synced, failing)) → (healthy, Ready, Synced (status, reason))
        let cases = [
            (
                "Healthy",
                "Ready",
                (5, 5, 0),
                true,
                "True",
                ("True", "AllSynced"),
            ),
            (
                "Healthy",
                "Ready",
                (5, 3, 0),
                true,
                "True",
                ("False", "Listing"),
            ),
            (
                "Degraded",
                "ResourcesFailing",
                (5, 4, 1),
                true,
                "True",
                ("False", "ResourcesFailing"),
            ),
            (
                "Unhealthy",
                "Disconnected",
                (5, 5, 0),
                false,
                "False",
                ("Unknown", "ClusterNotReady"),
            ),
            (
                "Unhealthy",
                "CredentialsUnsupported",
                (0, 0, 0),
                false,
                "False",
                ("Unknown", "ClusterNotReady"),
            ),
            (
                "Pending",
                "Registered",
                (0, 0, 0),
                false,
                "Unknown",
                ("Unknown", "ClusterNotReady"),
            ),
            (
                "Initializing",
                "Probing",
                (5, 0, 0),
                false,
                "Unknown",
                ("Unknown", "ClusterNotReady"),
            ),
        ];
        for (phase, reason, resources, healthy, ready, synced) in cases {
            let status = cluster_status(
                &cluster_doc(phase, reason, resources),
                &Value::Null,
                None,
                Some(3),
                t(0),
            );
            assert_eq!(status["healthy"], healthy, "{phase}");
            let r = condition(&status, "Ready");
            assert_eq!(
                (r["status"].as_str(), r["reason"].as_str()),
                (Some(ready), Some(reason)),
                "{phase}"
            );
            assert_eq!(r["message"], format!("{phase} ({reason}): probe says so"));
            assert_eq!(r["observedGeneration"], 3);
            let s = condition(&status, "Synced");
            assert_eq!(
                (s["status"].as_str().unwrap(), s["reason"].as_str().unwrap()),
                synced,
                "{phase}"
            );
        }
    }

    #[test]
    fn resources_the_member_does_not_serve_leave_it_synced() {
        let mut doc = cluster_doc("Healthy", "Ready", (10, 9, 0));
        doc["resources"]["notServed"] = json!(1);
        let status = cluster_status(&doc, &Value::Null, None, None, t(0));
        let s = condition(&status, "Synced");
        assert_eq!(
            (s["status"].as_str(), s["reason"].as_str()),
            (Some("True"), Some("AllSynced"))
        );
        assert_eq!(
            s["message"],
            "9 resources syncing, 1 not served by the member"
        );
    }

    #[test]
    fn what_kube_pulse_does_not_own_is_kept() {
        let previous = json!({
            "healthy": true, "apiserver": "https://10.0.0.1:6443", "custom": {"a": 1},
            "conditions": [
                {"type": "Validated", "status": "True", "reason": "Validated", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "BackupsReady", "status": "False", "reason": "Late", "message": "x", "lastTransitionTime": "2026-01-02T00:00:00Z"},
            ],
        });
        let mut doc = cluster_doc("Unhealthy", "Timeout", (1, 1, 0));
        doc["probe"] = json!({"serverVersion": "v1.31.2"});
        let status = cluster_status(&doc, &previous, Some("https://10.0.0.1:6443"), None, t(0));
        assert_eq!(status["custom"], previous["custom"]);
        assert_eq!(status["apiserver"], previous["apiserver"]);
        assert_eq!(status["version"], "v1.31.2");
        assert_eq!(
            status["conditions"][0], previous["conditions"][0],
            "Validated stays"
        );
        assert_eq!(
            status["conditions"][1], previous["conditions"][1],
            "another type stays"
        );
        let h = condition(&status, "ClusterHealthy");
        assert_eq!(
            (h["status"].as_str(), h["reason"].as_str()),
            (Some("False"), Some("NotReachable"))
        );
        assert_eq!(status["healthy"], false);
        // Not judged yet: Karpor's `healthy` and `ClusterHealthy` stay.
        let starting = cluster_status(
            &cluster_doc("Initializing", "Probing", (0, 0, 0)),
            &previous,
            None,
            None,
            t(0),
        );
        assert_eq!(starting["healthy"], true);
        assert!(
            starting["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["type"] != "ClusterHealthy")
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let up = cluster_status(
            &cluster_doc("Healthy", "Ready", (2, 2, 0)),
            &Value::Null,
            None,
            None,
            t(0),
        );
        assert_eq!(
            condition(&up, "Ready")["lastTransitionTime"],
            meta_time(t(0))
        );
        assert!(condition(&up, "Ready").get("observedGeneration").is_none());
        // Still reachable, resources failing now: Ready keeps t(0), Synced moves.
        let degraded = cluster_status(
            &cluster_doc("Degraded", "ResourcesFailing", (2, 1, 1)),
            &up,
            None,
            None,
            t(10),
        );
        assert_eq!(
            condition(&degraded, "Ready")["lastTransitionTime"],
            meta_time(t(0))
        );
        assert_eq!(
            condition(&degraded, "Synced")["lastTransitionTime"],
            meta_time(t(10))
        );
        let down = cluster_status(
            &cluster_doc("Unhealthy", "Disconnected", (2, 1, 1)),
            &degraded,
            None,
            None,
            t(20),
        );
        assert_eq!(
            condition(&down, "Ready")["lastTransitionTime"],
            meta_time(t(20))
        );
    }

    #[test]
    fn registries_report_each_resource_and_the_worst_per_cluster() {
        let syncing = json!({"phase": "Syncing", "reason": "Watching", "message": "4 objects", "since": "2026-09-21T10:00:00.250Z", "kind": "Deployment"});
        let not_served = json!({"phase": "NotServed", "reason": "NotServed", "message": "policy/v1beta1/poddisruptionbudgets is not served by this cluster", "since": "2026-09-21T10:00:05.000Z"});
        let forbidden = json!({"phase": "Backoff", "reason": "Forbidden", "message": "widgets is forbidden; retrying at 15:32:15",
                               "lastError": "widgets is forbidden", "since": "2026-09-21T10:00:03.000Z"});
        let reports = [
            ClusterReport {
                cluster: "a".into(),
                unwatched: watching(),
                resources: vec![
                    ResourceReport {
                        api_version: "apps/v1".into(),
                        resource: "deployments".into(),
                        doc: Some(&syncing),
                    },
                    ResourceReport {
                        api_version: "policy/v1beta1".into(),
                        resource: "poddisruptionbudgets".into(),
                        doc: Some(&not_served),
                    },
                ],
            },
            ClusterReport {
                cluster: "c".into(),
                unwatched: watching(),
                resources: vec![
                    ResourceReport {
                        api_version: "policy/v1beta1".into(),
                        resource: "poddisruptionbudgets".into(),
                        doc: Some(&not_served),
                    },
                    ResourceReport {
                        api_version: "example.com/v1".into(),
                        resource: "widgets".into(),
                        doc: Some(&forbidden),
                    },
                ],
            },
            ClusterReport {
                cluster: "b".into(),
                unwatched: watching(),
                resources: vec![ResourceReport {
                    api_version: "v1".into(),
                    resource: "services".into(),
                    doc: None,
                }],
            },
        ];
        let status = registry_status(&reports, &Value::Null, t(0));
        let a = &status["clusters"][0];
        assert_eq!(
            (a["cluster"].as_str(), a["status"].as_str()),
            (Some("a"), Some("NotServed")),
            "not served is no failure: the worst phase of a's resources"
        );
        assert_eq!(
            a["resources"][0],
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "status": "Syncing", "reason": "Watching", "message": "4 objects", "lastTransitionTime": "2026-09-21T10:00:00Z"})
        );
        // Discovery could not tell the kind: the well-known table does.
        assert_eq!(
            a["resources"][1],
            json!({"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "status": "NotServed",
                   "reason": "NotServed", "message": "policy/v1beta1/poddisruptionbudgets is not served by this cluster",
                   "lastTransitionTime": "2026-09-21T10:00:05Z"})
        );
        let c = &status["clusters"][1];
        assert_eq!(c["status"], "Error", "Backoff is an Error to Karpor");
        // Neither discovery nor the table knows: no kind, the plural in the
        // message, and no retry time.
        assert_eq!(
            c["resources"][1],
            json!({"apiVersion": "example.com/v1", "status": "Error", "reason": "Forbidden",
                   "message": "resource widgets: widgets is forbidden", "lastTransitionTime": "2026-09-21T10:00:03Z"})
        );
        let b = &status["clusters"][2];
        assert_eq!(
            (b["status"].as_str(), b["resources"][0]["reason"].as_str()),
            (Some("Pending"), Some("NotWatched"))
        );
        assert_eq!(status["lastTransitionTime"], "2026-09-21T10:00:05Z");
    }

    /// A retry moves the document between Error and Backoff (a new
    /// `since` each time); written, both are `Error` with the same reason,
    /// so the time written stays, and the status is the same bytes (a
    /// second replica's or a restarted gateway's times do not flip it).
    #[test]
    fn a_resource_keeps_its_time_while_its_written_status_stays() {
        // The status of secrets in cluster `a` from `doc`, after `previous`.
        let status = |doc: &Value, previous: &Value, at| {
            registry_status(
                &[ClusterReport {
                    cluster: "a".into(),
                    unwatched: watching(),
                    resources: vec![ResourceReport {
                        api_version: "v1".into(),
                        resource: "secrets".into(),
                        doc: Some(doc),
                    }],
                }],
                previous,
                t(at),
            )
        };
        let first = json!({"phase": "Error", "reason": "Forbidden", "message": "secrets is forbidden",
                           "since": "2026-12-04T10:00:00.000Z", "kind": "Secret"});
        let previous = status(&first, &Value::Null, 0);
        let retried = json!({"phase": "Backoff", "reason": "Forbidden", "lastError": "secrets is forbidden",
                             "since": "2026-12-04T10:00:08.000Z", "kind": "Secret"});
        let next = |doc: &Value, previous: &Value| status(doc, previous, 9);
        assert_eq!(next(&retried, &previous), previous, "nothing to write");
        // Another reason is a transition.
        let other = json!({"phase": "Error", "reason": "Unauthorized", "message": "token expired",
                           "since": "2026-12-04T10:00:20.000Z", "kind": "Secret"});
        let moved = next(&other, &previous);
        assert_eq!(
            moved["clusters"][0]["resources"][0]["lastTransitionTime"],
            "2026-12-04T10:00:20Z"
        );
    }

    #[test]
    fn a_registry_without_documents_keeps_its_previous_time() {
        let previous = json!({"lastTransitionTime": "2026-01-01T00:00:00Z"});
        assert_eq!(
            registry_status(&[], &previous, t(0))["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            registry_status(&[], &Value::Null, t(0))["lastTransitionTime"],
            meta_time(t(0))
        );
        assert_eq!(
            registry_status(&[], &Value::Null, t(0))["clusters"],
            json!([])
        );
    }
}
