//! The order of JSON values a live query sorts by (`doc ──▶ [order] ──▶
//! sort key`): one total order over every value and over a member that is
//! missing, so that any documents sort the same way every time. Ranks
//! first: missing < `null` < booleans < numbers < strings < arrays <
//! objects; then within a rank: `false` < `true`, numbers by value (`1`
//! equals `1.0`), strings by their UTF-8 bytes, arrays and objects by their
//! JSON text.

use std::cmp::Ordering;

use serde_json::Value;

fn rank(value: Option<&Value>) -> u8 {
    match value {
        None => 0,
        Some(Value::Null) => 1,
        Some(Value::Bool(_)) => 2,
        Some(Value::Number(_)) => 3,
        Some(Value::String(_)) => 4,
        Some(Value::Array(_)) => 5,
        Some(Value::Object(_)) => 6,
    }
}

/// Compares two values (None: the member is missing) in the order above.
pub fn compare(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    rank(a).cmp(&rank(b)).then_with(|| match (a, b) {
        (Some(Value::Bool(a)), Some(Value::Bool(b))) => a.cmp(b),
        (Some(Value::Number(a)), Some(Value::Number(b))) => number(a).total_cmp(&number(b)),
        (Some(Value::String(a)), Some(Value::String(b))) => a.cmp(b),
        (Some(a @ (Value::Array(_) | Value::Object(_))), Some(b)) => {
            a.to_string().cmp(&b.to_string())
        }
        _ => Ordering::Equal,
    })
}

fn number(n: &serde_json::Number) -> f64 {
    n.as_f64().unwrap_or(0.0)
}

/// One field of a sort key: the document's value there (None: missing),
/// ascending or descending.
#[derive(Debug, Clone)]
pub struct SortValue {
    pub(super) value: Option<Value>,
    pub(super) desc: bool,
}

impl Ord for SortValue {
    fn cmp(&self, other: &Self) -> Ordering {
        let ordering = compare(self.value.as_ref(), other.value.as_ref());
        if self.desc {
            ordering.reverse()
        } else {
            ordering
        }
    }
}

impl PartialOrd for SortValue {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for SortValue {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for SortValue {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_of_value_has_its_place() {
        // Each row sorts strictly before the next.
        let ascending = [
            None,
            Some(json!(null)),
            Some(json!(false)),
            Some(json!(true)),
            Some(json!(-3)),
            Some(json!(0.5)),
            Some(json!(2)),
            Some(json!("")),
            Some(json!("Degraded")),
            Some(json!("Running")),
            Some(json!("running")),
            Some(json!([1])),
            Some(json!({"a": 1})),
        ];
        for pair in ascending.windows(2) {
            assert_eq!(
                compare(pair[0].as_ref(), pair[1].as_ref()),
                Ordering::Less,
                "{:?} < {:?}",
                pair[0],
                pair[1]
            );
            assert_eq!(
                compare(pair[1].as_ref(), pair[0].as_ref()),
                Ordering::Greater
            );
        }
        assert_eq!(compare(Some(&json!(1)), Some(&json!(1.0))), Ordering::Equal);
    }

    #[test]
    fn descending_fields_reverse_the_order() {
        let up = |v| SortValue {
            value: Some(v),
            desc: false,
        };
        let down = |v| SortValue {
            value: Some(v),
            desc: true,
        };
        assert!(up(json!(1)) < up(json!(2)));
        assert!(down(json!(1)) > down(json!(2)));
        assert_eq!(up(json!(2)), up(json!(2.0)));
    }
}
