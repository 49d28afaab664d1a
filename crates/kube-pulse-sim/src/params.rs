//! Query parameters of a simulated API request (`?watch=true&limit=…`),
//! parsed strictly into typed values. Below the request handlers: api.rs
//! (list, get, write) and watch.rs (watch options) both read them.

use std::collections::HashMap;

use super::selector::{FieldSelector, LabelSelector, Selection};
use super::status::{ApiError, ApiResult};
use super::table::IncludeObject;

/// Query parameters, parsed strictly into typed values.
pub(crate) struct Params(HashMap<String, String>);

impl Params {
    pub(crate) fn parse(raw: Option<&str>) -> ApiResult<Self> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("malformed query string: {e}")))?;
        Ok(Self(pairs.into_iter().collect()))
    }

    pub(crate) fn str(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// What a table's rows carry of their objects (`includeObject`).
    pub(crate) fn include_object(&self) -> ApiResult<IncludeObject> {
        IncludeObject::parse(self.str("includeObject"))
    }

    pub(crate) fn bool(&self, key: &str) -> ApiResult<bool> {
        match self.0.get(key).map(String::as_str) {
            None | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") | Some("") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid value for {key}: {other:?} (want true or false)"
            ))),
        }
    }

    pub(crate) fn u64(&self, key: &str) -> ApiResult<Option<u64>> {
        self.str(key)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "invalid value for {key}: {v:?} (want a non-negative integer)"
                    ))
                })
            })
            .transpose()
    }

    /// The label and field selectors of a list or watch of `kind`.
    pub(crate) fn selection(&self, kind: &str) -> ApiResult<Selection> {
        Ok(Selection {
            labels: LabelSelector::parse(self.str("labelSelector").unwrap_or(""))
                .map_err(ApiError::bad_request)?,
            fields: FieldSelector::parse_for(kind, self.str("fieldSelector").unwrap_or(""))
                .map_err(ApiError::bad_request)?,
        })
    }

    /// `resourceVersion` as a number ("" and absent are None).
    pub(crate) fn resource_version(&self) -> ApiResult<Option<u64>> {
        self.str("resourceVersion")
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {v:?}")))
            })
            .transpose()
    }

    pub(crate) fn dry_run(&self) -> ApiResult<bool> {
        match self.str("dryRun") {
            None => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: {other:?}: supported values: \"All\""
            ))),
        }
    }

    pub(crate) fn check_field_validation(&self) -> ApiResult<()> {
        match self.str("fieldValidation") {
            None | Some("Strict" | "Warn" | "Ignore") => Ok(()),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(q: &str) -> Params {
        Params::parse(Some(q)).unwrap()
    }

    #[test]
    fn typed_values_and_strict_errors() {
        let p = parse("watch=true&limit=5&resourceVersion=42&continue=&dryRun=All");
        assert!(p.bool("watch").unwrap());
        assert!(!p.bool("absent").unwrap());
        assert_eq!(p.u64("limit").unwrap(), Some(5));
        assert_eq!(p.resource_version().unwrap(), Some(42));
        assert_eq!(p.str("continue"), None, "empty is absent");
        assert!(p.dry_run().unwrap());
        assert!(parse("watch").bool("watch").unwrap(), "a bare flag is true");
        assert!(!parse("watch=0").bool("watch").unwrap());
        assert_eq!(parse("resourceVersion=").resource_version().unwrap(), None);

        let errors = [
            parse("watch=yes").bool("watch").err(),
            parse("limit=-1").u64("limit").err(),
            parse("resourceVersion=abc").resource_version().err(),
            parse("dryRun=Some").dry_run().err(),
            parse("fieldValidation=Loose")
                .check_field_validation()
                .err(),
            parse("labelSelector=a%20in%20(").selection("").err(),
        ];
        for (i, err) in errors.iter().enumerate() {
            assert!(err.is_some(), "case {i} must be refused");
        }
        assert!(
            parse("fieldValidation=Warn")
                .check_field_validation()
                .is_ok()
        );
        let s = parse("labelSelector=app%3Dshop").selection("").unwrap();
        let shop = serde_json::json!({"metadata": {"labels": {"app": "shop"}}});
        let cart = serde_json::json!({"metadata": {"labels": {"app": "cart"}}});
        assert!(s.matches(&shop));
        assert!(!s.matches(&cart));
    }
}
