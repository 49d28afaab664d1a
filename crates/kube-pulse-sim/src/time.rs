//! Times as the apiserver writes them (`metav1.Time`): the one format every
//! object, status, event and Go type here prints.

/// A timestamp as Kubernetes writes it (RFC 3339, seconds, `Z`).
pub fn timestamp(now: chrono::DateTime<chrono::Utc>) -> String {
    now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
