//! Content negotiation of answers: which representation an `Accept` header
//! asks for, chosen the way the apiserver chooses it.
//!
//! The clauses of the header are tried by decreasing quality (`q`, in the
//! header's order among equals) and the first acceptable one wins. A clause is
//! acceptable when its media type is one the simulator writes (JSON, or the
//! wildcards `*/*` and `application/*`), every parameter is known, and an
//! `as=` conversion names a kind of `meta.k8s.io/v1` the apiserver converts
//! to: `Table` (kubectl), `PartialObjectMetadata` (a metadata watch or get)
//! or `PartialObjectMetadataList` (a metadata list). No acceptable clause is
//! 406 `NotAcceptable`; no header at all is plain JSON.

use serde_json::{Value, json};

use super::status::{ApiError, ApiResult};

/// The representation of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// The objects themselves (a `<Kind>List` for lists).
    Object,
    /// A `meta.k8s.io/v1 Table` (one row per object).
    Table,
    /// `PartialObjectMetadata`: apiVersion, kind and metadata of one object
    /// (a get, or each object of a watch).
    Metadata,
    /// `PartialObjectMetadataList`: a list of `PartialObjectMetadata`.
    MetadataList,
}

/// The media types the simulator writes, as a 406 lists them.
const ACCEPTED: &str = "application/json, application/json;as=Table;v=v1;g=meta.k8s.io, \
     application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io, \
     application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";

/// The group and version of the conversions.
const META_GROUP: &str = "meta.k8s.io";
const META_VERSION: &str = "v1";

/// One clause of an `Accept` header: its quality and the output it asks for
/// (`None` when the simulator cannot write it).
fn clause(range: &str) -> (f32, Option<Output>) {
    let mut parts = range.split(';').map(str::trim);
    let media = parts.next().unwrap_or("").to_ascii_lowercase();
    let (mut quality, mut kind, mut group, mut version) = (1.0_f32, None, None, None);
    let mut known = true;
    for param in parts.filter(|p| !p.is_empty()) {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        let value = value.trim().trim_matches('"');
        match key.trim() {
            "q" => quality = value.parse().unwrap_or(0.0),
            "as" => kind = Some(value),
            "g" => group = Some(value),
            "v" => version = Some(value),
            // Harmless options the apiserver also takes.
            "pretty" | "stream" | "includeObject" => {}
            _ => known = false,
        }
    }
    let writable = matches!(media.as_str(), "application/json" | "application/*" | "*/*");
    let output = match (kind, group, version) {
        _ if !writable || !known => None,
        (None, None, None) => Some(Output::Object),
        (Some(kind), Some(META_GROUP), Some(META_VERSION)) => match kind {
            "Table" => Some(Output::Table),
            "PartialObjectMetadata" => Some(Output::Metadata),
            "PartialObjectMetadataList" => Some(Output::MetadataList),
            _ => None,
        },
        _ => None,
    };
    (quality, output)
}

/// The output an `Accept` header asks for, or 406 when the simulator writes
/// none of its media types.
pub fn negotiate(accept: Option<&str>) -> ApiResult<Output> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Output::Object);
    };
    let mut clauses: Vec<(f32, Option<Output>)> = accept
        .split(',')
        .filter(|range| !range.trim().is_empty())
        .map(clause)
        .collect();
    // Stable: among equal qualities the header's order stands.
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0));
    clauses
        .into_iter()
        .filter(|(quality, _)| *quality > 0.0)
        .find_map(|(_, output)| output)
        .ok_or_else(|| {
            ApiError::new(
                406,
                "NotAcceptable",
                format!("only the following media types are accepted: {ACCEPTED}"),
            )
        })
}

/// 406 for a conversion that does not fit the answer (a `PartialObjectMetadata`
/// asked of a list, or a `PartialObjectMetadataList` of an object or a watch),
/// worded as the apiserver words it.
pub fn mismatch(asked: Output, list: bool) -> ApiError {
    let message = match (asked, list) {
        (Output::Metadata, true) => {
            "you requested PartialObjectMetadata, but the requested object is a list"
        }
        _ => "you requested PartialObjectMetadataList, but the requested object is not a list",
    };
    ApiError::new(406, "NotAcceptable", message)
}

/// An object's `PartialObjectMetadata`: only apiVersion, kind and metadata.
pub fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// A `PartialObjectMetadataList` of `items`; `list_meta` is the list's
/// metadata (resourceVersion, continue, remainingItemCount).
pub fn partial_list(items: &[&Value], list_meta: Value) -> Value {
    let items: Vec<Value> = items.iter().map(|o| partial(o)).collect();
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kube-rs sends for `list_metadata` and `watch_metadata`.
    const KUBE_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    const KUBE_WATCH: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    /// What kubectl get sends.
    const KUBECTL_GET: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    /// What client-go's metadata client sends for a list.
    const CLIENT_GO_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

    #[test]
    fn the_first_acceptable_clause_wins() {
        let cases: &[(Option<&str>, Output)] = &[
            (None, Output::Object),
            (Some(""), Output::Object),
            (Some("application/json"), Output::Object),
            (Some("*/*"), Output::Object),
            (Some("application/*"), Output::Object),
            (Some("application/json;stream=watch"), Output::Object),
            (Some(KUBE_LIST), Output::MetadataList),
            (Some(KUBE_WATCH), Output::Metadata),
            (Some(KUBECTL_GET), Output::Table),
            // Protobuf is skipped; the JSON metadata list is next.
            (Some(CLIENT_GO_LIST), Output::MetadataList),
            (
                Some("application/vnd.kubernetes.protobuf,application/json"),
                Output::Object,
            ),
            // Parameters in any order, with spaces and quotes.
            (
                Some("application/json; v=v1; g=meta.k8s.io; as=\"PartialObjectMetadata\""),
                Output::Metadata,
            ),
            // Only v1 is served: the v1beta1 clause is skipped.
            (
                Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"),
                Output::Object,
            ),
            // Unknown conversions, groups and parameters are skipped.
            (
                Some("application/json;as=Widget;g=meta.k8s.io;v=v1,application/json"),
                Output::Object,
            ),
            (
                Some("application/json;as=Table;g=apps;v=v1,application/json"),
                Output::Object,
            ),
            (Some("application/json;as=Table,*/*"), Output::Object),
            (
                Some(
                    "application/json;charset=latin1,application/json;as=Table;g=meta.k8s.io;v=v1",
                ),
                Output::Table,
            ),
            // Quality orders the clauses; equals keep the header's order.
            (
                Some(&format!("application/json;q=0.5,{KUBE_WATCH}")),
                Output::Metadata,
            ),
            (
                Some(&format!("{KUBE_LIST};q=0.9,{KUBE_WATCH};q=0.9")),
                Output::MetadataList,
            ),
            (
                Some(&format!("{KUBE_LIST};q=0,application/json")),
                Output::Object,
            ),
            (Some("text/html,*/*;q=0.8"), Output::Object),
            (
                Some("application/vnd.kubernetes.protobuf, */*"),
                Output::Object,
            ),
        ];
        for (accept, want) in cases {
            assert_eq!(negotiate(*accept).ok(), Some(*want), "{accept:?}");
        }
    }

    #[test]
    fn nothing_acceptable_is_406() {
        for accept in [
            "application/vnd.kubernetes.protobuf",
            "application/vnd.kubernetes.protobuf;stream=watch",
            "application/yaml",
            "text/html",
            "application/json;as=Table;g=meta.k8s.io;v=v1;q=0",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io",
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        ] {
            let err = negotiate(Some(accept)).expect_err(accept);
            assert_eq!(err.code, 406, "{accept}");
            assert!(
                err.message.contains("PartialObjectMetadataList"),
                "{accept}"
            );
        }
    }

    #[test]
    fn partial_objects_keep_only_their_metadata() {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7", "labels": {"app": "x"}},
            "data": {"big": "x".repeat(1024)}
        });
        let one = partial(&cm);
        assert_eq!(
            one,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                   "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7", "labels": {"app": "x"}}})
        );
        let list = partial_list(
            &[&cm, &cm],
            json!({"resourceVersion": "9", "continue": "c"}),
        );
        assert_eq!(list["kind"], "PartialObjectMetadataList");
        assert_eq!(list["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(list["metadata"]["continue"], "c");
        assert_eq!(list["items"], json!([one.clone(), one]));
        assert_eq!(partial(&json!({}))["metadata"], json!({}));
    }

    #[test]
    fn mismatches_are_worded_like_the_apiserver() {
        let err = mismatch(Output::Metadata, true);
        assert_eq!((err.code, err.reason), (406, "NotAcceptable"));
        assert!(err.message.contains("is a list"));
        assert!(
            mismatch(Output::MetadataList, false)
                .message
                .contains("is not a list")
        );
    }
}
