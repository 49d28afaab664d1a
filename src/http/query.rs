//! Query strings of the REST endpoints (`GET /api/v1/…?a=b`): parsed
//! strictly, so a misspelt parameter is an error instead of being ignored.
//! Beside the data flow, below the HTTP read side (rest.rs) and the tasks
//! API (tasks/api.rs), which both take their parameters through it.

use std::collections::HashMap;

use crate::error::{Error, Result};

/// Parses a query string, refusing parameters the endpoint does not take
/// and parameters given twice (each takes one value).
pub(crate) fn query(raw: Option<String>, allowed: &[&str]) -> Result<HashMap<String, String>> {
    let pairs = crate::protocol::query_string::pairs_once(raw.as_deref().unwrap_or(""), &[])
        .map_err(Error::BadRequest)?;
    let mut out = HashMap::new();
    for (key, value) in pairs {
        if !allowed.contains(&key.as_str()) {
            return Err(Error::BadRequest(format!(
                "unknown query parameter {key:?}; this endpoint takes: {}",
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            )));
        }
        out.insert(key, value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_parameters_pass_and_unknown_ones_are_named() {
        let q = query(
            Some("cluster=prod&namespace=shop".into()),
            &["cluster", "namespace"],
        )
        .unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(q["cluster"], "prod");
        assert_eq!(q["namespace"], "shop");
        assert!(query(None, &[]).unwrap().is_empty());
        assert!(query(Some(String::new()), &["topic"]).unwrap().is_empty());
        let q = query(Some("topic=clusters%2Fprod".into()), &["topic"]).unwrap();
        assert_eq!(q["topic"], "clusters/prod");

        let cases: [(&str, &[&str], &str); 4] = [
            (
                "cluster=dev&cluster=prod",
                &["cluster"],
                "query parameter \"cluster\" is given twice",
            ),
            ("cluster=%ff", &["cluster"], "malformed query string"),
            (
                "colour=blue",
                &["cluster", "namespace"],
                "unknown query parameter \"colour\"; this endpoint takes: cluster, namespace",
            ),
            (
                "x=1",
                &[],
                "unknown query parameter \"x\"; this endpoint takes: none",
            ),
        ];
        for (raw, allowed, want) in cases {
            match query(Some(raw.into()), allowed) {
                Err(Error::BadRequest(text)) => assert!(text.contains(want), "{raw}: {text}"),
                other => panic!("{raw}: {other:?}"),
            }
        }
    }
}
