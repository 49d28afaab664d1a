//! JSON a client sends, parsed strictly: an object that names a key twice
//! is refused (`client text ──[strict_json]──▶ Value`). A JSON parser
//! otherwise keeps one of the two (serde_json the last, others the first),
//! so that two readers of the same message, a proxy and the gateway, could
//! each act on a different operation.

use std::fmt;

use serde::Deserializer as _;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// `text` as a JSON value, or why not (serde_json's message, or the key
/// an object names twice). One pass: the value is built as it is checked.
pub fn parse(text: &str) -> Result<Value, String> {
    let mut parser = serde_json::Deserializer::from_str(text);
    let value = parser
        .deserialize_any(UniqueKeys)
        .map_err(|e| e.to_string())?;
    parser.end().map_err(|e| e.to_string())?;
    Ok(value)
}

/// Builds a value, refusing an object that names a key twice.
struct UniqueKeys;

impl<'de> DeserializeSeed<'de> for UniqueKeys {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(UniqueKeys)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if fields.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "the key {key:?} is given twice in one object"
                )));
            }
            let value = map.next_value_seed(UniqueKeys)?;
            fields.insert(key, value);
        }
        Ok(Value::Object(fields))
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
