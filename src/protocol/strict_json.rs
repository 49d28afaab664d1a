//! JSON a client sends, parsed strictly: an object that names a key twice
//! is refused (`client text ──[strict_json]──▶ Value`). A JSON parser
//! otherwise keeps one of the two (serde_json the last, others the first),
//! so that two readers of the same message, a proxy and the gateway, could
//! each act on a different operation.

use std::collections::HashSet;
use std::fmt;

use serde::Deserializer as _;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// `text` as a JSON value, or why not (serde_json's message, or the key
/// an object names twice).
pub fn parse(text: &str) -> Result<Value, String> {
    let mut checker = serde_json::Deserializer::from_str(text);
    checker
        .deserialize_any(UniqueKeys)
        .and_then(|()| checker.end())
        .map_err(|e| e.to_string())?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// Walks a value, refusing an object that names a key twice.
struct UniqueKeys;

impl<'de> DeserializeSeed<'de> for UniqueKeys {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(UniqueKeys)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                // The rest is not read: the message is refused.
                map.next_value::<IgnoredAny>()?;
                return Err(de::Error::custom(format_args!(
                    "the key {key:?} is given twice in one object"
                )));
            }
            map.next_value_seed(UniqueKeys)?;
            seen.insert(key);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_named_twice_is_refused_at_any_depth() {
        // (text, the error's words; None: accepted)
        let cases = [
            (r#"{"op":"ping"}"#, None),
            (r#"{"a":{"b":1},"b":{"a":2}}"#, None),
            (r#"[{"a":1},{"a":2}]"#, None),
            (r#""text""#, None),
            (
                r#"{"op":"subscribe","op":"ping"}"#,
                Some("\"op\" is given twice"),
            ),
            (r#"{"f":{"eq":1,"eq":2}}"#, Some("\"eq\" is given twice")),
            (r#"[1,{"x":[{"y":1,"y":1}]}]"#, Some("\"y\" is given twice")),
            // Escapes name the same key.
            (r#"{"op":1,"\u006fp":2}"#, Some("\"op\" is given twice")),
            (r#"{"op":"ping"} x"#, Some("trailing characters")),
            (r#"{"op":"#, Some("EOF")),
        ];
        for (text, want) in cases {
            match (parse(text), want) {
                (Ok(value), None) => {
                    assert_eq!(value, serde_json::from_str::<Value>(text).unwrap())
                }
                (Err(e), Some(want)) => assert!(e.contains(want), "{text}: {e}"),
                (got, want) => panic!("{text}: {got:?}, expected {want:?}"),
            }
        }
    }
}
