//! RFC 7386 JSON merge patches, computed from two documents: what a
//! `patch` message carries (`hub → [patch] → transports → clients`, which
//! apply it to their copy).

use serde_json::{Map, Value};

/// Removes object members whose value is `null`, recursively (arrays keep
/// their elements). Merge patches use `null` for "delete", so documents
/// without null members are exactly what patches can reproduce.
pub fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// The merge patch that turns `old` into `new`. Objects are diffed key by
/// key; anything else (arrays included) is replaced whole; a removed key
/// becomes `null`.
pub fn merge_diff(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = Map::new();
            for (key, old_value) in a {
                match b.get(key) {
                    None => {
                        out.insert(key.clone(), Value::Null);
                    }
                    Some(new_value) if new_value != old_value => {
                        out.insert(key.clone(), merge_diff(old_value, new_value));
                    }
                    Some(_) => {}
                }
            }
            for (key, new_value) in b {
                if !a.contains_key(key) {
                    out.insert(key.clone(), new_value.clone());
                }
            }
            Value::Object(out)
        }
        _ => new.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diffs_round_trip_through_json_patch_merge() {
        let cases = [
            (
                json!({"a": 1, "b": {"c": 2, "d": 3}}),
                json!({"a": 1, "b": {"c": 5, "d": 3}}),
            ),
            (json!({"a": 1, "gone": true}), json!({"a": 1})),
            (
                json!({"list": [1, 2]}),
                json!({"list": [1, 2, 3], "new": {"x": 1}}),
            ),
            (json!({"a": {"b": {"c": 1}}}), json!({"a": "flat"})),
            (json!({"a": 1}), json!({"a": 1})),
        ];
        for (old, new) in cases {
            let patch = merge_diff(&old, &new);
            let mut applied = old.clone();
            json_patch::merge(&mut applied, &patch);
            assert_eq!(applied, new, "patch {patch}");
        }
        assert_eq!(
            merge_diff(&json!({"a": 1, "b": 2}), &json!({"a": 1, "b": 3})),
            json!({"b": 3})
        );
    }
}
