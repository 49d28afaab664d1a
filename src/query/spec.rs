//! What a live query asks for (`subscribe members / SSE parameters ──▶
//! [spec] ──▶ live query`): its filter, sort, window and grouping, read and
//! checked up front against [`Limits`], with errors that name the part and
//! the bound. `docs/PROTOCOL.md` ("Live queries") is the reference.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::filter::Filter;
pub use super::limits::{
    DEFAULT_LIMIT, Limits, MAX_GROUP_BYTES, OTHER_GROUP, member_pointer, pointer,
};
use super::order::SortValue;
use crate::protocol::Topic;

/// One field of a sort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortField {
    /// The JSON pointer sorted by.
    pub pointer: String,
    /// Descending (written `-/pointer`).
    pub desc: bool,
}

/// A query, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct QuerySpec {
    /// Which documents are rows (None: all).
    pub filter: Option<Filter>,
    /// The filter as given (echoed in `subscribed`).
    filter_raw: Option<Value>,
    /// The order of the rows, then by topic, always: rows never tie.
    pub sort: Vec<SortField>,
    /// Rows in the window (0: counts only).
    pub limit: usize,
    /// Rows skipped before the window.
    pub offset: usize,
    /// Rows strictly after this key (the `next` of an earlier `rows`).
    pub after: Option<(Vec<Option<Value>>, String)>,
    after_raw: Option<String>,
    /// Count matching documents by the value at this pointer.
    pub group_by: Option<String>,
}

/// The members of a query as the client sent them (a WebSocket
/// `subscribe`'s, or SSE parameters turned into JSON values).
#[derive(Debug, Clone, Default)]
#[allow(missing_docs)] // the members of docs/PROTOCOL.md's "Live queries"
pub struct QueryMembers {
    pub filter: Option<Value>,
    pub sort: Option<Value>,
    pub limit: Option<Value>,
    pub offset: Option<Value>,
    pub after: Option<Value>,
    pub group_by: Option<Value>,
}

impl QueryMembers {
    /// Whether any member is there: the subscription is a live query.
    pub fn any(&self) -> bool {
        self.filter.is_some()
            || self.sort.is_some()
            || self.limit.is_some()
            || self.offset.is_some()
            || self.after.is_some()
            || self.group_by.is_some()
    }
}

fn whole(raw: &Value, what: &str, max: usize) -> Result<usize, String> {
    raw.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n <= max)
        .ok_or_else(|| format!("{what}: a whole number from 0 to {max}, got {raw}"))
}

impl QuerySpec {
    /// Reads a query; the error is a sentence naming the bad member.
    pub fn parse(members: &QueryMembers, limits: &Limits) -> Result<Self, String> {
        let filter = match &members.filter {
            None | Some(Value::Null) => None,
            Some(raw) => {
                let bytes = raw.to_string().len();
                if bytes > limits.filter_bytes {
                    return Err(format!(
                        "filter: {bytes} bytes, at most {}",
                        limits.filter_bytes
                    ));
                }
                Some(Filter::parse(raw, limits)?)
            }
        };
        let sort = match &members.sort {
            None => Vec::new(),
            Some(Value::Array(items)) if items.len() <= limits.sort_fields => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => {
                        let (desc, p) = match s.strip_prefix('-') {
                            Some(rest) => (true, rest),
                            None => (false, s.as_str()),
                        };
                        member_pointer(p)
                            .map(|pointer| SortField { pointer, desc })
                            .map_err(|e| format!("sort: {e}"))
                    }
                    other => Err(format!(
                        "sort: each field is a pointer string (\"-/ready\" for descending), not {other}"
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(format!(
                    "sort: a list of at most {} pointers, like [\"/state\", \"-/ready\"]",
                    limits.sort_fields
                ));
            }
        };
        let group_by = match &members.group_by {
            None => None,
            Some(Value::String(s)) => Some(member_pointer(s).map_err(|e| format!("groupBy: {e}"))?),
            Some(other) => return Err(format!("groupBy: a pointer string, not {other}")),
        };
        let default_limit = if group_by.is_some() { 0 } else { DEFAULT_LIMIT };
        let limit = match &members.limit {
            None => default_limit,
            Some(raw) => whole(raw, "limit", limits.max_limit)?,
        };
        let offset = match &members.offset {
            None => 0,
            Some(raw) => whole(raw, "offset", limits.max_offset)?,
        };
        let (after, after_raw) = match &members.after {
            None => (None, None),
            Some(Value::String(token)) => {
                let key = decode_after(token, sort.len())
                    .map_err(|e| format!("after: {e}; use the `next` of a `rows` message of a query with the same sort"))?;
                (Some(key), Some(token.clone()))
            }
            Some(other) => return Err(format!("after: a token string, not {other}")),
        };
        Ok(Self {
            filter,
            filter_raw: members.filter.clone().filter(|f| !f.is_null()),
            sort,
            limit,
            offset,
            after,
            after_raw,
            group_by,
        })
    }

    /// The sort key of `doc` (without its topic).
    pub fn key_of(&self, doc: &Value) -> Box<[SortValue]> {
        self.sort
            .iter()
            .map(|f| SortValue {
                value: doc.pointer(&f.pointer).cloned(),
                desc: f.desc,
            })
            .collect()
    }

    /// The anchor of `after`, as a sort key.
    pub(super) fn after_key(&self) -> Option<(Box<[SortValue]>, Topic)> {
        let (values, topic) = self.after.as_ref()?;
        let key = values
            .iter()
            .zip(&self.sort)
            .map(|(value, f)| SortValue {
                value: value.clone(),
                desc: f.desc,
            })
            .collect();
        Some((key, Topic::new(topic)))
    }

    /// The query as the server understood it (what `subscribed` echoes).
    pub fn normalized(&self) -> Value {
        let mut out = serde_json::Map::new();
        if let Some(filter) = &self.filter_raw {
            out.insert("filter".into(), filter.clone());
        }
        if !self.sort.is_empty() {
            let sort: Vec<String> = self
                .sort
                .iter()
                .map(|f| format!("{}{}", if f.desc { "-" } else { "" }, f.pointer))
                .collect();
            out.insert("sort".into(), json!(sort));
        }
        out.insert("limit".into(), json!(self.limit));
        if self.offset > 0 {
            out.insert("offset".into(), json!(self.offset));
        }
        if let Some(after) = &self.after_raw {
            out.insert("after".into(), json!(after));
        }
        if let Some(group_by) = &self.group_by {
            out.insert("groupBy".into(), json!(group_by));
        }
        Value::Object(out)
    }
}

/// The `after` token of a row: its sort values and topic.
pub fn encode_after(key: &[SortValue], topic: &Topic) -> String {
    let values: Vec<Value> = key
        .iter()
        .map(|v| match &v.value {
            Some(value) => json!([value]),
            None => json!([]),
        })
        .collect();
    URL_SAFE_NO_PAD.encode(json!([values, topic.as_str()]).to_string())
}

fn decode_after(token: &str, fields: usize) -> Result<(Vec<Option<Value>>, String), String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| "not a token this gateway made".to_string())?;
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|_| "not a token this gateway made".to_string())?;
    let (Some(values), Some(topic)) = (
        value.get(0).and_then(Value::as_array),
        value.get(1).and_then(Value::as_str),
    ) else {
        return Err("not a token this gateway made".into());
    };
    if values.len() != fields {
        return Err(format!(
            "the token is of a sort by {} fields, this query sorts by {fields}",
            values.len()
        ));
    }
    let values = values
        .iter()
        .map(|v| match v.as_array().map(Vec::as_slice) {
            Some([]) => Ok(None),
            Some([value]) => Ok(Some(value.clone())),
            _ => Err("not a token this gateway made".to_string()),
        })
        .collect::<Result<_, _>>()?;
    Ok((values, topic.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(members: QueryMembers) -> Result<QuerySpec, String> {
        QuerySpec::parse(&members, &Limits::default())
    }

    #[test]
    fn defaults_and_normal_form() {
        let spec = parse(QueryMembers {
            sort: Some(json!(["/state", "-/ready"])),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(spec.limit, DEFAULT_LIMIT);
        assert_eq!(
            spec.normalized(),
            json!({"sort": ["/state", "-/ready"], "limit": 50})
        );
        let counted = parse(QueryMembers {
            group_by: Some(json!("/phase")),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(counted.limit, 0, "a group-by alone sends no rows");
    }

    #[test]
    fn bad_members_are_named() {
        let table = [
            (
                QueryMembers {
                    limit: Some(json!(501)),
                    ..Default::default()
                },
                "limit: a whole number from 0 to 500",
            ),
            (
                QueryMembers {
                    limit: Some(json!(-1)),
                    ..Default::default()
                },
                "limit:",
            ),
            (
                QueryMembers {
                    offset: Some(json!("3")),
                    ..Default::default()
                },
                "offset:",
            ),
            (
                QueryMembers {
                    sort: Some(json!("/state")),
                    ..Default::default()
                },
                "sort: a list",
            ),
            (
                QueryMembers {
                    sort: Some(json!(["state"])),
                    ..Default::default()
                },
                "sort: \"state\" is not a JSON pointer",
            ),
            (
                QueryMembers {
                    sort: Some(json!(["/a", "/b", "/c", "/d", "/e"])),
                    ..Default::default()
                },
                "sort: a list of at most 4",
            ),
            (
                QueryMembers {
                    group_by: Some(json!(["/a"])),
                    ..Default::default()
                },
                "groupBy: a pointer string",
            ),
            (
                QueryMembers {
                    group_by: Some(json!("")),
                    ..Default::default()
                },
                "groupBy: \"\" is the whole document",
            ),
            (
                QueryMembers {
                    sort: Some(json!(["-"])),
                    ..Default::default()
                },
                "sort: \"\" is the whole document",
            ),
            (
                QueryMembers {
                    after: Some(json!("!!")),
                    ..Default::default()
                },
                "after: not a token",
            ),
            (
                QueryMembers {
                    filter: Some(json!({"eq": ["/a", "x".repeat(5000)]})),
                    ..Default::default()
                },
                "filter: 50",
            ),
            (
                QueryMembers {
                    sort: Some(json!(["/a~2"])),
                    ..Default::default()
                },
                "~ is written ~0",
            ),
        ];
        for (members, want) in table {
            let error = parse(members.clone()).expect_err(want);
            assert!(error.contains(want), "{error:?} lacks {want:?}");
        }
    }

    #[test]
    fn an_after_token_reads_back_for_the_same_sort_only() {
        let spec = parse(QueryMembers {
            sort: Some(json!(["-/ready", "/missing"])),
            ..Default::default()
        })
        .unwrap();
        let key = spec.key_of(&json!({"ready": 2}));
        let token = encode_after(&key, &Topic::new("apps/a/shop/web"));
        let again = parse(QueryMembers {
            sort: Some(json!(["-/ready", "/missing"])),
            after: Some(json!(token)),
            ..Default::default()
        })
        .unwrap();
        let (anchor, topic) = again.after_key().unwrap();
        assert_eq!(&*anchor, &*key);
        assert_eq!(topic.as_str(), "apps/a/shop/web");
        let other = parse(QueryMembers {
            sort: Some(json!(["/ready"])),
            after: Some(json!(token)),
            ..Default::default()
        });
        assert!(other.unwrap_err().contains("a sort by 2 fields"));
    }
}
