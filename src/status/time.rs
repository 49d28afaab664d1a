//! Timestamps in documents: RFC 3339, UTC, millisecond precision
//! (`2026-12-02T21:29:12.274Z`). Finer digits mean nothing to a reader and
//! cost six bytes in every patch that carries a time.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serializer;

/// A time as RFC 3339 UTC with milliseconds, as documents and messages
/// write every time (`2026-12-02T21:29:12.274Z`).
pub(crate) fn millis(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Serializes a time as RFC 3339 UTC with milliseconds (`serialize_with`).
pub(crate) fn serialize_millis<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&millis(t))
}

/// Like [`serialize_millis`], for an optional time (`null` when absent).
pub(crate) fn serialize_millis_opt<S: Serializer>(
    t: &Option<DateTime<Utc>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => serialize_millis(t, s),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Doc {
        #[serde(serialize_with = "serialize_millis")]
        at: DateTime<Utc>,
        #[serde(serialize_with = "serialize_millis_opt")]
        maybe: Option<DateTime<Utc>>,
        #[serde(serialize_with = "serialize_millis_opt")]
        none: Option<DateTime<Utc>>,
    }

    #[test]
    fn milliseconds_in_utc() {
        let t = DateTime::from_timestamp(1_764_710_952, 274_825_337).unwrap();
        let whole = DateTime::from_timestamp(1_764_710_952, 0).unwrap();
        let doc = serde_json::to_value(Doc {
            at: t,
            maybe: Some(whole),
            none: None,
        })
        .unwrap();
        assert_eq!(
            doc,
            serde_json::json!({"at": "2025-12-02T21:29:12.274Z",
                "maybe": "2025-12-02T21:29:12.000Z", "none": null})
        );
        let back: DateTime<Utc> = doc["at"].as_str().unwrap().parse().unwrap();
        assert_eq!(back.timestamp_millis(), t.timestamp_millis());
    }
}
