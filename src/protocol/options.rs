//! Per-subscription options (`clients → [options] → transports`): what a
//! WebSocket `subscribe` operation or an SSE query may ask besides its
//! topics — coalescing (`debounceMs`) and field projection (`fields`, JSON
//! pointers) — parsed, bounded and normalized here, and the projection of a
//! document onto those fields. Pure: values in, values out.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

/// Shortest coalescing interval a subscription may ask for, in ms.
pub const MIN_DEBOUNCE_MS: u64 = 50;
/// Longest coalescing interval a subscription may ask for, in ms.
pub const MAX_DEBOUNCE_MS: u64 = 60_000;
/// Most JSON pointers in one `fields` list.
pub const MAX_FIELDS: usize = 32;
/// Longest JSON pointer in a `fields` list, in bytes.
pub const MAX_FIELD_LEN: usize = 256;

/// What a subscription asked for besides its topics, normalized.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscribeOptions {
    /// At most one message per topic per this many ms (None: every change).
    pub debounce_ms: Option<u64>,
    /// The JSON pointers a document is projected onto, sorted and without
    /// duplicates (None: whole documents).
    pub fields: Option<Fields>,
}

impl SubscribeOptions {
    /// Reads the options from their JSON values (a WebSocket `subscribe`'s
    /// `debounceMs` and `fields`); the error is a sentence for the client.
    pub fn parse(debounce_ms: Option<&Value>, fields: Option<&Value>) -> Result<Self, String> {
        let debounce_ms = match debounce_ms {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .ok_or_else(|| debounce_error(&v.to_string()))
                    .and_then(check_debounce)?,
            ),
        };
        let fields = match fields {
            None => None,
            Some(Value::Array(items)) => {
                let mut raw = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Value::String(s) => raw.push(s.clone()),
                        other => {
                            return Err(format!("fields are JSON pointer strings, not {other}"));
                        }
                    }
                }
                Some(Fields::parse(&raw)?)
            }
            Some(other) => {
                return Err(format!(
                    "fields is a list of JSON pointers, e.g. [\"/phase\"], not {other}"
                ));
            }
        };
        Ok(Self {
            debounce_ms,
            fields,
        })
    }

    /// Reads the options from SSE query parameters: `debounceMs=1000` and
    /// `field=/phase` (repeatable).
    pub fn from_query(debounce_ms: Option<&str>, fields: &[String]) -> Result<Self, String> {
        let debounce_ms = match debounce_ms {
            None => None,
            Some(raw) => Some(
                raw.parse::<u64>()
                    .map_err(|_| debounce_error(raw))
                    .and_then(check_debounce)?,
            ),
        };
        let fields = if fields.is_empty() {
            None
        } else {
            Some(Fields::parse(fields)?)
        };
        Ok(Self {
            debounce_ms,
            fields,
        })
    }

    /// True when the subscription gets every change of whole documents.
    pub fn is_plain(&self) -> bool {
        self.debounce_ms.is_none() && self.fields.is_none()
    }

    /// The coalescing interval.
    pub fn debounce(&self) -> Option<Duration> {
        self.debounce_ms.map(Duration::from_millis)
    }

    /// The document as this subscription sees it.
    pub fn project(&self, doc: &Value) -> Value {
        match &self.fields {
            Some(fields) => fields.project(doc),
            None => doc.clone(),
        }
    }
}

fn debounce_error(raw: &str) -> String {
    format!(
        "debounceMs must be a whole number of ms from {MIN_DEBOUNCE_MS} to {MAX_DEBOUNCE_MS}, not {raw}"
    )
}

fn check_debounce(ms: u64) -> Result<u64, String> {
    if (MIN_DEBOUNCE_MS..=MAX_DEBOUNCE_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(debounce_error(&ms.to_string()))
    }
}

/// A set of JSON pointers (RFC 6901) into documents' objects: a projection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields {
    /// The pointers as given, sorted and deduplicated (what `subscribed` echoes).
    pointers: Vec<String>,
    /// The pointers as a tree of member names.
    tree: Tree,
}

/// A member that is kept whole (`Whole`) or only in part (`Part`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Whole,
    Part(Tree),
}

type Tree = BTreeMap<String, Node>;

impl Fields {
    /// Parses 1 to [`MAX_FIELDS`] pointers, each `/`-separated member names
    /// (`~0` is `~`, `~1` is `/`), at most [`MAX_FIELD_LEN`] bytes.
    pub fn parse(raw: &[String]) -> Result<Self, String> {
        if raw.is_empty() {
            return Err("fields needs at least one JSON pointer, e.g. \"/phase\"".into());
        }
        if raw.len() > MAX_FIELDS {
            return Err(format!("at most {MAX_FIELDS} fields, got {}", raw.len()));
        }
        let mut pointers: Vec<String> = raw.to_vec();
        pointers.sort();
        pointers.dedup();
        let mut tree = Tree::new();
        for pointer in &pointers {
            insert(&mut tree, &segments(pointer)?);
        }
        Ok(Self { pointers, tree })
    }

    /// The pointers, sorted and deduplicated.
    pub fn pointers(&self) -> &[String] {
        &self.pointers
    }

    /// The members of `doc` the pointers reach, at their places; a pointer
    /// that reaches nothing (a missing member, or through a non-object)
    /// adds nothing, and objects left empty are left out.
    pub fn project(&self, doc: &Value) -> Value {
        Value::Object(project(doc, &self.tree))
    }
}

/// A pointer's member names, unescaped.
fn segments(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.len() > MAX_FIELD_LEN {
        return Err(format!(
            "a field is at most {MAX_FIELD_LEN} bytes, got {}",
            pointer.len()
        ));
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!(
            "field {pointer:?} is not a JSON pointer: it starts with \"/\", e.g. \"/phase\""
        ));
    };
    rest.split('/')
        .map(|raw| {
            let mut out = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                match c {
                    '~' => match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => {
                            return Err(format!(
                                "field {pointer:?}: \"~\" must be followed by 0 or 1"
                            ));
                        }
                    },
                    c => out.push(c),
                }
            }
            if out.is_empty() {
                return Err(format!("field {pointer:?} has an empty member name"));
            }
            Ok(out)
        })
        .collect()
}

fn insert(tree: &mut Tree, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        tree.insert(first.clone(), Node::Whole);
        return;
    }
    let node = tree
        .entry(first.clone())
        .or_insert_with(|| Node::Part(Tree::new()));
    if let Node::Part(children) = node {
        insert(children, rest);
    }
}

fn project(doc: &Value, tree: &Tree) -> Map<String, Value> {
    let mut out = Map::new();
    let Value::Object(members) = doc else {
        return out;
    };
    for (name, node) in tree {
        let Some(value) = members.get(name) else {
            continue;
        };
        match node {
            Node::Whole => {
                out.insert(name.clone(), value.clone());
            }
            Node::Part(children) => {
                let inner = project(value, children);
                if !inner.is_empty() {
                    out.insert(name.clone(), Value::Object(inner));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(raw: &[&str]) -> Fields {
        Fields::parse(&raw.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn projections() {
        let doc = json!({
            "phase": "Running",
            "reason": "AllReady",
            "history": [1, 2],
            "workloads": {"Deployment/web": {"ready": 3, "images": ["a"]}, "x": 1},
            "a~b": 1,
        });
        let cases: [(&[&str], Value); 7] = [
            (&["/phase"], json!({"phase": "Running"})),
            (
                &["/phase", "/reason", "/message"],
                json!({"phase": "Running", "reason": "AllReady"}),
            ),
            (
                &["/workloads/Deployment~1web/ready"],
                json!({"workloads": {"Deployment/web": {"ready": 3}}}),
            ),
            (
                &["/workloads", "/workloads/x"],
                json!({"workloads": doc["workloads"].clone()}),
            ),
            // Through an array or a scalar, or to nothing: nothing.
            (&["/history/0", "/phase/x", "/missing/y"], json!({})),
            (&["/a~0b"], json!({"a~b": 1})),
            (&["/phase", "/phase"], json!({"phase": "Running"})),
        ];
        for (raw, want) in cases {
            assert_eq!(fields(raw).project(&doc), want, "{raw:?}");
        }
        assert_eq!(fields(&["/b", "/a", "/b"]).pointers(), ["/a", "/b"]);
    }

    #[test]
    fn options_are_bounded_and_named() {
        let ok = SubscribeOptions::parse(Some(&json!(1000)), Some(&json!(["/phase"]))).unwrap();
        assert_eq!(ok.debounce_ms, Some(1000));
        assert_eq!(ok.fields.unwrap().pointers(), ["/phase"]);
        assert!(SubscribeOptions::parse(None, None).unwrap().is_plain());
        let long = format!("/{}", "a".repeat(MAX_FIELD_LEN));
        let many: Vec<Value> = (0..=MAX_FIELDS).map(|i| json!(format!("/f{i}"))).collect();
        let bad: [(Option<Value>, Option<Value>, &str); 11] = [
            (Some(json!(49)), None, "debounceMs"),
            (Some(json!(60_001)), None, "debounceMs"),
            (Some(json!(-1)), None, "debounceMs"),
            (Some(json!(1.5)), None, "debounceMs"),
            (Some(json!("1000")), None, "debounceMs"),
            (None, Some(json!([])), "at least one"),
            (None, Some(json!("/phase")), "list of JSON pointers"),
            (None, Some(json!(["phase"])), "starts with"),
            (None, Some(json!(["/a//b"])), "empty member"),
            (None, Some(json!([long])), "at most 256 bytes"),
            (None, Some(Value::Array(many)), "at most 32 fields"),
        ];
        for (debounce, fields, want) in bad {
            let err = SubscribeOptions::parse(debounce.as_ref(), fields.as_ref()).unwrap_err();
            assert!(err.contains(want), "{debounce:?} {fields:?}: {err}");
        }
        assert!(SubscribeOptions::parse(None, Some(&json!(["/a~2"]))).is_err());
        assert!(SubscribeOptions::parse(None, Some(&json!([1]))).is_err());
        let q = SubscribeOptions::from_query(Some("50"), &["/phase".into()]).unwrap();
        assert_eq!(q.debounce_ms, Some(50));
        assert!(SubscribeOptions::from_query(Some("x"), &[]).is_err());
        assert!(SubscribeOptions::from_query(None, &[]).unwrap().is_plain());
    }
}
