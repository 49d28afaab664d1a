//! A live query's filter (`doc ──▶ [filter] ──▶ in or out`): parsed and
//! checked once, up front, from its JSON form, with an error that names
//! the part that is wrong; then evaluated on whole documents.
//!
//! ```json
//! {"and": [{"eq": ["/cluster", "prod"]}, {"not": {"eq": ["/state", "Running"]}}]}
//! ```
//!
//! Each node is an object with exactly one member: `and` / `or` (a list of
//! 1–32 nodes), `not` (a node), `eq` / `ne` / `lt` / `lte` / `gt` / `gte`
//! (`[pointer, value]`), `in` (`[pointer, [value, …]]`, 1–100 values),
//! `exists` (a pointer). Pointers are RFC 6901 JSON pointers into the
//! document. `eq` compares JSON values (numbers by value); `ne` is its
//! negation, true where the member is missing; `lt`…`gte` hold only between
//! two numbers or two strings; `in` is `eq` to any of its values.

use serde_json::Value;

use super::limits::{Limits, pointer};
use super::order;

/// A comparison of a member with a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // named as on the wire: eq, ne, lt, lte, gt, gte
pub enum Compare {
    Eq,
    Ne,
    Lt,
    Lte,
    Gt,
    Gte,
}

impl Compare {
    fn named(name: &str) -> Option<Self> {
        Some(match name {
            "eq" => Self::Eq,
            "ne" => Self::Ne,
            "lt" => Self::Lt,
            "lte" => Self::Lte,
            "gt" => Self::Gt,
            "gte" => Self::Gte,
            _ => return None,
        })
    }
}

/// A parsed filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// `and`: every one passes.
    All(Vec<Filter>),
    /// `or`: one passes at least.
    Any(Vec<Filter>),
    /// `not`.
    Not(Box<Filter>),
    /// `eq`, `ne`, `lt`, `lte`, `gt`, `gte`: the member at `field` with `value`.
    Compare {
        /// A JSON pointer.
        field: String,
        /// How.
        op: Compare,
        /// With what.
        value: Value,
    },
    /// `in`: the member at `field` equals one of `values`.
    In {
        /// A JSON pointer.
        field: String,
        /// 1 to 100 values.
        values: Vec<Value>,
    },
    /// `exists`: the document has a member at `field`.
    Exists {
        /// A JSON pointer.
        field: String,
    },
}

/// The operators, for error messages.
const OPERATORS: &str = "and, or, not, eq, ne, lt, lte, gt, gte, in, exists";

impl Filter {
    /// Reads a filter from its JSON form within `limits`; the error names
    /// the bad part by its path (`filter.and[1].eq`).
    pub fn parse(raw: &Value, limits: &Limits) -> Result<Self, String> {
        let mut nodes = 0;
        parse_node(raw, "filter", 1, &mut nodes, limits)
    }

    /// Whether `doc` passes.
    pub fn matches(&self, doc: &Value) -> bool {
        match self {
            Filter::All(all) => all.iter().all(|f| f.matches(doc)),
            Filter::Any(any) => any.iter().any(|f| f.matches(doc)),
            Filter::Not(inner) => !inner.matches(doc),
            Filter::Exists { field } => doc.pointer(field).is_some(),
            Filter::In { field, values } => doc
                .pointer(field)
                .is_some_and(|held| values.iter().any(|v| equal(held, v))),
            Filter::Compare { field, op, value } => {
                let held = doc.pointer(field);
                match op {
                    Compare::Eq => held.is_some_and(|h| equal(h, value)),
                    Compare::Ne => !held.is_some_and(|h| equal(h, value)),
                    Compare::Lt | Compare::Lte | Compare::Gt | Compare::Gte => {
                        let Some(held) = held.filter(|h| comparable(h, value)) else {
                            return false;
                        };
                        let ordering = order::compare(Some(held), Some(value));
                        match op {
                            Compare::Lt => ordering.is_lt(),
                            Compare::Lte => ordering.is_le(),
                            Compare::Gt => ordering.is_gt(),
                            _ => ordering.is_ge(),
                        }
                    }
                }
            }
        }
    }
}

/// JSON equality, numbers by value.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => order::compare(Some(a), Some(b)).is_eq(),
        _ => a == b,
    }
}

/// Two numbers, or two strings: what `lt`…`gte` compare.
fn comparable(a: &Value, b: &Value) -> bool {
    matches!(
        (a, b),
        (Value::Number(_), Value::Number(_)) | (Value::String(_), Value::String(_))
    )
}

fn parse_node(
    raw: &Value,
    path: &str,
    depth: usize,
    nodes: &mut usize,
    limits: &Limits,
) -> Result<Filter, String> {
    *nodes += 1;
    if *nodes > limits.filter_nodes {
        return Err(format!(
            "{path}: the filter has more than {} nodes",
            limits.filter_nodes
        ));
    }
    if depth > limits.filter_depth {
        return Err(format!(
            "{path}: the filter nests deeper than {} levels",
            limits.filter_depth
        ));
    }
    let Some(object) = raw.as_object().filter(|o| o.len() == 1) else {
        return Err(format!(
            "{path}: a filter node is an object with exactly one member, one of {OPERATORS}; got {}",
            short(raw)
        ));
    };
    let (name, arg) = object.iter().next().expect("one member");
    let here = format!("{path}.{name}");
    match name.as_str() {
        "and" | "or" => {
            let Some(items) = arg.as_array().filter(|a| (1..=32).contains(&a.len())) else {
                return Err(format!("{here}: a list of 1 to 32 filter nodes"));
            };
            let parsed = items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    parse_node(item, &format!("{here}[{i}]"), depth + 1, nodes, limits)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(if name == "and" {
                Filter::All(parsed)
            } else {
                Filter::Any(parsed)
            })
        }
        "not" => Ok(Filter::Not(Box::new(parse_node(
            arg,
            &here,
            depth + 1,
            nodes,
            limits,
        )?))),
        "exists" => Ok(Filter::Exists {
            field: field(arg, &here)?,
        }),
        "in" => {
            let (field, values) = pair(arg, &here)?;
            let Some(values) = values.as_array().filter(|v| (1..=100).contains(&v.len())) else {
                return Err(format!(
                    "{here}: [pointer, [value, …]] with 1 to 100 values"
                ));
            };
            Ok(Filter::In {
                field,
                values: values.clone(),
            })
        }
        other => {
            let Some(op) = Compare::named(other) else {
                return Err(format!(
                    "{path}: unknown operator {other:?}; one of {OPERATORS}"
                ));
            };
            let (field, value) = pair(arg, &here)?;
            if matches!(op, Compare::Lt | Compare::Lte | Compare::Gt | Compare::Gte)
                && !matches!(value, Value::Number(_) | Value::String(_))
            {
                return Err(format!(
                    "{here}: compares with a number or a string, not {}",
                    short(value)
                ));
            }
            Ok(Filter::Compare {
                field,
                op,
                value: value.clone(),
            })
        }
    }
}

/// `[pointer, value]`.
fn pair<'a>(arg: &'a Value, here: &str) -> Result<(String, &'a Value), String> {
    match arg.as_array().map(Vec::as_slice) {
        Some([f, value]) => Ok((field(f, here)?, value)),
        _ => Err(format!("{here}: [pointer, value], got {}", short(arg))),
    }
}

fn field(raw: &Value, here: &str) -> Result<String, String> {
    match raw {
        Value::String(s) => pointer(s).map_err(|e| format!("{here}: {e}")),
        other => Err(format!(
            "{here}: a JSON pointer string, not {}",
            short(other)
        )),
    }
}

/// A value as an error message shows it: at most 60 characters.
fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(raw: Value) -> Result<Filter, String> {
        Filter::parse(&raw, &Limits::default())
    }

    #[test]
    fn filters_match_as_the_table_says() {
        let doc = json!({"phase": "Running", "ready": 3, "cluster": "prod", "lastWarning": {"reason": "BackOff"}});
        let table = [
            (json!({"eq": ["/phase", "Running"]}), true),
            (json!({"eq": ["/ready", 3.0]}), true),
            (json!({"eq": ["/missing", null]}), false),
            (json!({"ne": ["/phase", "Running"]}), false),
            (json!({"ne": ["/missing", "x"]}), true),
            (json!({"lt": ["/ready", 4]}), true),
            (json!({"lte": ["/ready", 3]}), true),
            (json!({"gt": ["/ready", 3]}), false),
            (json!({"gte": ["/phase", "Degraded"]}), true),
            (json!({"gt": ["/phase", 1]}), false),
            (json!({"lt": ["/missing", 1]}), false),
            (json!({"in": ["/cluster", ["dev", "prod"]]}), true),
            (json!({"in": ["/cluster", ["dev"]]}), false),
            (json!({"exists": "/lastWarning/reason"}), true),
            (json!({"exists": "/lastWarning/message"}), false),
            (
                json!({"and": [{"eq": ["/cluster", "prod"]}, {"gt": ["/ready", 1]}]}),
                true,
            ),
            (
                json!({"and": [{"eq": ["/cluster", "prod"]}, {"gt": ["/ready", 5]}]}),
                false,
            ),
            (
                json!({"or": [{"eq": ["/cluster", "dev"]}, {"gt": ["/ready", 1]}]}),
                true,
            ),
            (json!({"not": {"eq": ["/phase", "Running"]}}), false),
        ];
        for (raw, want) in table {
            let filter = parse(raw.clone()).unwrap_or_else(|e| panic!("{raw}: {e}"));
            assert_eq!(filter.matches(&doc), want, "{raw}");
        }
    }

    #[test]
    fn bad_filters_are_named_by_their_path() {
        let table = [
            (json!("phase=Running"), "filter: a filter node is an object"),
            (
                json!({"eq": ["/a", 1], "ne": ["/a", 2]}),
                "filter: a filter node is an object",
            ),
            (
                json!({"like": ["/a", "x"]}),
                "filter: unknown operator \"like\"",
            ),
            (json!({"and": []}), "filter.and: a list of 1 to 32"),
            (
                json!({"and": [{"eq": ["/a", 1]}, {"eq": ["a", 1]}]}),
                "filter.and[1].eq: ",
            ),
            (json!({"eq": ["/a"]}), "filter.eq: [pointer, value]"),
            (
                json!({"lt": ["/a", true]}),
                "filter.lt: compares with a number or a string",
            ),
            (
                json!({"in": ["/a", []]}),
                "filter.in: [pointer, [value, …]]",
            ),
            (json!({"exists": 3}), "filter.exists: a JSON pointer string"),
            (
                json!({"not": {"not": {"not": {"not": {"not": {"not": {"not": {"not": {"eq": ["/a", 1]}}}}}}}}}),
                "nests deeper than 8",
            ),
        ];
        for (raw, want) in table {
            let error = parse(raw.clone()).expect_err(&raw.to_string());
            assert!(error.contains(want), "{raw}: {error:?} lacks {want:?}");
        }
        let wide = json!({"or": (0..32).map(|i| json!({"and": [{"eq": ["/a", i]}, {"eq": ["/b", i]}]})).collect::<Vec<_>>()});
        assert!(parse(wide).unwrap_err().contains("more than 64 nodes"));
    }
}
