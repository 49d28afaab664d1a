//! The conditions kube-pulse writes on a Karpor `Cluster`, and how they are
//! merged into the ones already there (`report ──conditions──▶ [merge] ──▶
//! writer`). Pure: values in, values out.
//!
//! Merging follows apimachinery's `meta.SetStatusCondition`: a condition is
//! found by `type`; a new one is appended; an existing one takes the new
//! `status`, `reason`, `message` and `observedGeneration`, and its
//! `lastTransitionTime` moves only when `status` changes. Conditions of
//! other types (Karpor's own, another controller's) are left as they are,
//! in their place. Karpor #831's vocabulary (`ClusterHealthy`, `Validated`)
//! is computed beside kube-pulse's (`Ready`, `Synced`) and the warnings
//! (`CredentialsValid`, `ClockSynced`); docs/KARPOR.md has the table.

use serde_json::{Value, json};

/// One condition kube-pulse sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Condition {
    pub(crate) kind: &'static str,
    pub(crate) status: &'static str,
    pub(crate) reason: String,
    pub(crate) message: String,
}

impl Condition {
    pub(crate) fn new(
        kind: &'static str,
        status: &'static str,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            status,
            // metav1.Condition requires a reason: CamelCase, not empty.
            reason: if reason.is_empty() {
                "Unknown".into()
            } else {
                reason.into()
            },
            message: message.into(),
        }
    }
}

/// `meta.SetStatusCondition` over JSON: `conditions` is the list as stored
/// (an absent or malformed one counts as empty); `now` is the transition
/// time of a new condition or a changed status.
pub(crate) fn set_condition(
    conditions: &mut Vec<Value>,
    new: &Condition,
    generation: Option<i64>,
    now: &str,
) {
    let existing = conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(new.kind));
    let Some(existing) = existing else {
        let mut condition = json!({
            "type": new.kind,
            "status": new.status,
            "lastTransitionTime": now,
            "reason": new.reason,
            "message": new.message,
        });
        if let Some(generation) = generation {
            condition["observedGeneration"] = json!(generation);
        }
        conditions.push(condition);
        return;
    };
    let Some(fields) = existing.as_object_mut() else {
        return;
    };
    if fields.get("status").and_then(Value::as_str) != Some(new.status) {
        fields.insert("status".into(), json!(new.status));
        fields.insert("lastTransitionTime".into(), json!(now));
    } else if fields
        .get("lastTransitionTime")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        fields.insert("lastTransitionTime".into(), json!(now));
    }
    fields.insert("reason".into(), json!(new.reason));
    fields.insert("message".into(), json!(new.message));
    match generation {
        Some(generation) => fields.insert("observedGeneration".into(), json!(generation)),
        None => fields.remove("observedGeneration"),
    };
}

/// Probe failures that mean the apiserver was not reached at all: Karpor's
/// `NotReachable`.
const NOT_REACHED: &[&str] = &["Disconnected", "Timeout", "TLSError"];

/// Reasons of a Cluster kube-pulse keeps without connecting because its
/// configuration cannot give a client: Karpor's `Validated=False
/// (InvalidConfig)`.
const INVALID_CONFIG: &[&str] = &["CredentialsUnsupported", "InvalidAccess"];

/// `ClusterHealthy` (Karpor #831: reasons `Healthy`, `Unhealthy`,
/// `NotReachable`) from the cluster's phase and reason; None while kube-pulse
/// has not judged the member yet (`Pending`, `Initializing`), which leaves
/// what Karpor set on create.
pub(crate) fn cluster_healthy(phase: &str, reason: &str, summary: &str) -> Option<Condition> {
    let (status, karpor_reason) = match phase {
        "Healthy" | "Degraded" => ("True", "Healthy"),
        "Unhealthy" if NOT_REACHED.contains(&reason) => ("False", "NotReachable"),
        "Unhealthy" => ("False", "Unhealthy"),
        // A push member whose agent is not heard from: not known either way.
        "Unknown" => ("Unknown", "NotReachable"),
        _ => return None,
    };
    Some(Condition::new(
        "ClusterHealthy",
        status,
        karpor_reason,
        summary,
    ))
}

/// `Validated` (Karpor #831: reasons `Validated`, `InvalidConfig`): `False
/// (InvalidConfig)` when the Cluster's endpoint, CA or credential cannot
/// give a client; `True (Validated)` once the member answered with it, only
/// when `Validated` is absent or not `True` (a `True` one, Karpor's, stays
/// as it is); None otherwise.
pub(crate) fn validated(
    phase: &str,
    reason: &str,
    message: &str,
    current: &[Value],
) -> Option<Condition> {
    if phase == "Unhealthy" && INVALID_CONFIG.contains(&reason) {
        return Some(Condition::new(
            "Validated",
            "False",
            "InvalidConfig",
            format!("{reason}: {message}"),
        ));
    }
    let already = current
        .iter()
        .any(|c| c["type"] == "Validated" && c["status"] == "True");
    (matches!(phase, "Healthy" | "Degraded") && !already).then(|| {
        Condition::new(
            "Validated",
            "True",
            "Validated",
            "kube-pulse reached the cluster with this configuration",
        )
    })
}

/// `CredentialsValid` from the document's `credentials` and warnings: `True
/// (CredentialsValid)` with the expiry date, `True (CredentialsExpiring)`
/// within the warning's days, `False (CredentialsExpired)`; None when the
/// credentials carry no date kube-pulse can read.
pub(crate) fn credentials_valid(doc: &Value) -> Option<Condition> {
    let credentials = doc.get("credentials")?;
    let what = match credentials["kind"].as_str()? {
        "ClientCertificate" => "the client certificate",
        _ => "the bearer token",
    };
    let expires = chrono::DateTime::parse_from_rfc3339(credentials["expires"].as_str()?).ok()?;
    let at = expires
        .with_timezone(&chrono::Utc)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let warned = |reason: &str| warning(doc, reason).is_some();
    Some(if warned("CredentialsExpired") {
        Condition::new(
            "CredentialsValid",
            "False",
            "CredentialsExpired",
            format!("{what} expired at {at}"),
        )
    } else if warned("CredentialsExpiring") {
        Condition::new(
            "CredentialsValid",
            "True",
            "CredentialsExpiring",
            format!(
                "{what} expires at {at}, within {} days",
                crate::status::cluster::CREDENTIAL_WARNING_DAYS
            ),
        )
    } else {
        Condition::new(
            "CredentialsValid",
            "True",
            "CredentialsValid",
            format!("{what} expires at {at}"),
        )
    })
}

/// `ClockSynced`: `False (ClockSkew)` with the measured skew while the
/// document warns of it, `True (ClockSynced)` while the member answers
/// without; None while it does not answer (the last judgement stays).
pub(crate) fn clock_synced(doc: &Value, phase: &str) -> Option<Condition> {
    if let Some(message) = warning(doc, "ClockSkew") {
        return Some(Condition::new("ClockSynced", "False", "ClockSkew", message));
    }
    matches!(phase, "Healthy" | "Degraded").then(|| {
        Condition::new(
            "ClockSynced",
            "True",
            "ClockSynced",
            format!(
                "the apiserver's clock is within {} s of the gateway's",
                crate::status::cluster::CLOCK_SKEW_WARNING_SECONDS
            ),
        )
    })
}

/// The message of the document's warning with `reason`, if any.
fn warning<'a>(doc: &'a Value, reason: &str) -> Option<&'a str> {
    doc.get("warnings")?
        .as_array()?
        .iter()
        .find(|w| w["reason"] == reason)
        .and_then(|w| w["message"].as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2026-12-01T00:00:00Z";
    const T1: &str = "2026-12-02T00:00:00Z";

    #[test]
    fn set_condition_follows_apimachinery() {
        let theirs = json!({"type": "Reconciled", "status": "True", "lastTransitionTime": T0,
                            "reason": "Done", "message": "", "observedGeneration": 7});
        let karpor = json!({"type": "ClusterHealthy", "status": "True", "lastTransitionTime": T0,
                            "reason": "Healthy", "message": ""});
        const LATER: &str = "2026-12-05T00:00:00Z";
        // (step, condition, now, expected (status, reason, lastTransitionTime))
        let mut conditions = vec![theirs.clone(), karpor];
        let cases = [
            (
                "same status: the time stays",
                Condition::new("ClusterHealthy", "True", "Healthy", "Healthy (Ready): m"),
                LATER,
                ("True", "Healthy", T0),
            ),
            (
                "new status: the time moves",
                Condition::new("ClusterHealthy", "False", "NotReachable", "down"),
                T1,
                ("False", "NotReachable", T1),
            ),
            (
                "new reason only: the time stays",
                Condition::new("ClusterHealthy", "False", "Unhealthy", "401"),
                LATER,
                ("False", "Unhealthy", T1),
            ),
        ];
        for (step, condition, now, (status, reason, time)) in cases {
            set_condition(&mut conditions, &condition, Some(3), now);
            let c = &conditions[1];
            assert_eq!(
                (
                    c["status"].as_str().unwrap(),
                    c["reason"].as_str().unwrap(),
                    c["lastTransitionTime"].as_str().unwrap()
                ),
                (status, reason, time),
                "{step}"
            );
            assert_eq!(c["observedGeneration"], 3, "{step}");
            assert_eq!(conditions[0], theirs, "{step}: another type is untouched");
        }
        // A new type is appended, in its place after the others.
        set_condition(
            &mut conditions,
            &Condition::new("Ready", "True", "Ready", "m"),
            None,
            T1,
        );
        assert_eq!(conditions.len(), 3);
        assert_eq!(conditions[2]["type"], "Ready");
        assert_eq!(conditions[2]["lastTransitionTime"], T1);
        assert!(conditions[2].get("observedGeneration").is_none());
    }

    #[test]
    fn karpor_vocabulary_from_phases_and_reasons() {
        // (phase, reason) → ClusterHealthy (status, reason), Validated (status, reason) with none present
        let cases = [
            (
                "Healthy",
                "Ready",
                Some(("True", "Healthy")),
                Some(("True", "Validated")),
            ),
            (
                "Degraded",
                "ResourcesFailing",
                Some(("True", "Healthy")),
                Some(("True", "Validated")),
            ),
            (
                "Unhealthy",
                "Disconnected",
                Some(("False", "NotReachable")),
                None,
            ),
            (
                "Unhealthy",
                "Timeout",
                Some(("False", "NotReachable")),
                None,
            ),
            (
                "Unhealthy",
                "TLSError",
                Some(("False", "NotReachable")),
                None,
            ),
            (
                "Unhealthy",
                "Unauthorized",
                Some(("False", "Unhealthy")),
                None,
            ),
            (
                "Unhealthy",
                "ApiServerNotReady",
                Some(("False", "Unhealthy")),
                None,
            ),
            (
                "Unhealthy",
                "EndpointNotAllowed",
                Some(("False", "Unhealthy")),
                None,
            ),
            (
                "Unhealthy",
                "CredentialsUnsupported",
                Some(("False", "Unhealthy")),
                Some(("False", "InvalidConfig")),
            ),
            (
                "Unhealthy",
                "InvalidAccess",
                Some(("False", "Unhealthy")),
                Some(("False", "InvalidConfig")),
            ),
            ("Pending", "Registered", None, None),
            ("Initializing", "Probing", None, None),
            ("Pending", "AwaitingAgent", None, None),
            (
                "Unknown",
                "AgentLost",
                Some(("Unknown", "NotReachable")),
                None,
            ),
        ];
        let pair = |c: Option<Condition>| c.map(|c| (c.status, c.reason));
        let owned = |p: Option<(&'static str, &str)>| p.map(|(s, r)| (s, r.to_string()));
        for (phase, reason, healthy, valid) in cases {
            assert_eq!(
                pair(cluster_healthy(phase, reason, "s")),
                owned(healthy),
                "{phase} {reason}"
            );
            assert_eq!(
                pair(validated(phase, reason, "m", &[])),
                owned(valid),
                "{phase} {reason}"
            );
        }
        // Karpor's own Validated=True is left as it is.
        let karpor = [json!({"type": "Validated", "status": "True", "reason": "Validated"})];
        assert_eq!(validated("Healthy", "Ready", "m", &karpor), None);
        // A False one (kube-pulse's, after a fix) is set True again.
        let invalid = [json!({"type": "Validated", "status": "False", "reason": "InvalidConfig"})];
        assert_eq!(
            pair(validated("Healthy", "Ready", "m", &invalid)),
            owned(Some(("True", "Validated")))
        );
    }

    #[test]
    fn warnings_become_conditions_with_the_date_or_the_skew() {
        let credentials =
            json!({"kind": "ClientCertificate", "expires": "2026-12-08T10:00:00.000Z"});
        let skew = json!({"reason": "ClockSkew", "message": "the apiserver's clock is about 120 s ahead of the gateway's (tokens and certificates may be judged wrongly)"});
        // (document, CredentialsValid, ClockSynced) as (status, reason, message)
        type Expected = Option<(&'static str, &'static str, &'static str)>;
        let cases: [(Value, Expected, Expected); 4] = [
            (
                json!({"phase": "Healthy", "credentials": credentials}),
                Some((
                    "True",
                    "CredentialsValid",
                    "the client certificate expires at 2026-12-08T10:00:00Z",
                )),
                Some((
                    "True",
                    "ClockSynced",
                    "the apiserver's clock is within 30 s of the gateway's",
                )),
            ),
            (
                json!({"phase": "Healthy", "credentials": credentials, "warnings": [
                    {"reason": "CredentialsExpiring", "message": "… (within 4 days)"}, skew]}),
                Some((
                    "True",
                    "CredentialsExpiring",
                    "the client certificate expires at 2026-12-08T10:00:00Z, within 7 days",
                )),
                Some((
                    "False",
                    "ClockSkew",
                    "the apiserver's clock is about 120 s ahead of the gateway's (tokens and certificates may be judged wrongly)",
                )),
            ),
            (
                json!({"phase": "Unhealthy", "credentials": {"kind": "Token", "expires": "2026-12-08T10:00:00Z"},
                       "warnings": [{"reason": "CredentialsExpired", "message": "…"}]}),
                Some((
                    "False",
                    "CredentialsExpired",
                    "the bearer token expired at 2026-12-08T10:00:00Z",
                )),
                None,
            ),
            (json!({"phase": "Initializing"}), None, None),
        ];
        let triple = |c: Option<Condition>| c.map(|c| (c.status, c.reason, c.message));
        let owned = |e: Expected| e.map(|(s, r, m)| (s, r.to_string(), m.to_string()));
        for (doc, credentials, clock) in cases {
            let phase = doc["phase"].as_str().unwrap();
            assert_eq!(triple(credentials_valid(&doc)), owned(credentials), "{doc}");
            assert_eq!(triple(clock_synced(&doc, phase)), owned(clock), "{doc}");
        }
    }
}
