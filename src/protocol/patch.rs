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
/// becomes `null`. Equal objects give the empty patch `{}`.
pub fn merge_diff(old: &Value, new: &Value) -> Value {
    diff(old, new).unwrap_or_else(|| match new {
        Value::Object(_) => Value::Object(Map::new()),
        other => other.clone(),
    })
}

/// [`merge_diff`] in one walk that also tells whether anything changed:
/// `None` when `old == new`, so a caller needs no separate comparison of
/// the two documents first.
pub fn diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = Map::new();
            for (key, old_value) in a {
                match b.get(key) {
                    None => {
                        out.insert(key.clone(), Value::Null);
                    }
                    Some(new_value) => {
                        if let Some(d) = diff(old_value, new_value) {
                            out.insert(key.clone(), d);
                        }
                    }
                }
            }
            for (key, new_value) in b {
                if !a.contains_key(key) {
                    out.insert(key.clone(), new_value.clone());
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        _ => (old != new).then(|| new.clone()),
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

    /// Why coalescing sends the diff of two states rather than composing
    /// the patches between them: a member deleted and then created again
    /// as an object (`{"c": null}` then `{"c": {}}`) has no base-free
    /// composition. Merged into the base, `{"c": {}}` keeps the old members
    /// of `c`; only a patch made against the base (`{"c": {"b": null}}`)
    /// removes them.
    #[test]
    fn patches_do_not_compose_without_their_base() {
        let base = json!({"c": {"b": false}});
        let (first, second) = (json!({"c": null}), json!({"c": {}}));
        let mut in_turn = base.clone();
        json_patch::merge(&mut in_turn, &first);
        json_patch::merge(&mut in_turn, &second);
        assert_eq!(in_turn, json!({"c": {}}));
        let mut naive = base.clone();
        json_patch::merge(&mut naive, &second);
        assert_ne!(naive, in_turn, "the later patch alone keeps c's members");
        assert_eq!(merge_diff(&base, &in_turn), json!({"c": {"b": null}}));
    }

    mod properties {
        use super::super::*;
        use crate::protocol::options::Fields;
        use proptest::prelude::*;
        use serde_json::Map;

        fn json_value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                any::<bool>().prop_map(Value::Bool),
                (-3i64..3).prop_map(Value::from),
                "[a-b]{0,1}".prop_map(Value::String),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..2).prop_map(Value::Array),
                    prop::collection::btree_map("[a-c]", inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn document() -> impl Strategy<Value = Value> {
            prop::collection::btree_map("[a-d]", json_value(), 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect()))
        }

        /// What a merge patch can reproduce: the document without nulls.
        fn strip(mut v: Value) -> Value {
            strip_nulls(&mut v);
            v
        }

        fn pointers() -> impl Strategy<Value = Vec<String>> {
            prop::collection::vec("(/[a-d]){1,3}", 1..4)
        }

        proptest! {
            /// A coalesced patch (the diff from the first state to the
            /// last) does what the patches in between do one by one.
            #[test]
            fn a_coalesced_patch_equals_the_patches_in_turn(docs in prop::collection::vec(document(), 2..6)) {
                let mut in_turn = docs[0].clone();
                for pair in docs.windows(2) {
                    json_patch::merge(&mut in_turn, &merge_diff(&pair[0], &pair[1]));
                }
                let mut coalesced = docs[0].clone();
                json_patch::merge(&mut coalesced, &merge_diff(&docs[0], docs.last().unwrap()));
                prop_assert_eq!(&in_turn, docs.last().unwrap());
                prop_assert_eq!(&coalesced, &in_turn);
            }

            /// A projected copy patched with the diff of two projections is
            /// the projection of the newer document, and an unchanged
            /// projection gives an empty patch (nothing to send).
            #[test]
            fn projected_diffs_keep_a_projected_copy(old in document(), new in document(), raw in pointers()) {
                let fields = Fields::parse(&raw).unwrap();
                let (a, b) = (fields.project(&old), fields.project(&new));
                let patch = merge_diff(&a, &b);
                let mut copy = a.clone();
                json_patch::merge(&mut copy, &patch);
                prop_assert_eq!(&copy, &b);
                prop_assert_eq!(patch == Value::Object(Map::new()), a == b);
                prop_assert_eq!(fields.project(&b), b);
            }

            /// The one-walk diff is `None` exactly when the documents are
            /// equal, and otherwise the merge patch between them.
            #[test]
            fn diff_is_none_exactly_when_equal(old in json_value(), new in json_value()) {
                let d = diff(&old, &new);
                prop_assert_eq!(d.is_none(), old == new);
                if let Some(patch) = d {
                    prop_assert_eq!(&patch, &merge_diff(&old, &new));
                    let mut applied = old.clone();
                    json_patch::merge(&mut applied, &patch);
                    if new.is_object() {
                        prop_assert_eq!(&applied, &strip(new.clone()));
                    }
                }
                prop_assert!(diff(&new, &new).is_none());
            }
        }
    }
}
