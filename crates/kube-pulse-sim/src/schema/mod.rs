//! Go types as JSON shapes: what `encoding/json` keeps when a typed Go
//! apiserver decodes a request body into its struct and encodes the struct
//! again. Unknown fields are dropped; missing fields come back as Go's zero
//! values (`""`, `false`, `0`, `null` for nil slices, maps and pointers, `{}`
//! for structs) unless the field is `omitempty`, which drops empty strings,
//! `false`, `0`, nil or empty slices and maps, and nil pointers (never a
//! struct); `metav1.Time` prints as RFC 3339 in UTC, its zero value as
//! `null`; `[]byte` is base64. A value of the wrong JSON type fails as Go's
//! decoder fails.
//!
//! Pure functions; [`TypedKind`] names the Go type of a typed resource and
//! its schema (`kinds.rs`; Karpor's types are in `karpor.rs`), and `typed.rs`
//! calls [`normalize`] with it.

use base64::Engine;
use serde_json::{Map, Value};

use super::time::timestamp;

pub(crate) mod karpor;
mod kinds;

pub use kinds::TypedKind;

/// The JSON shape of a Go type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `string`.
    Str,
    Bool,
    /// Any Go integer type.
    Int,
    /// `[]byte`: a base64 string.
    Bytes,
    /// `metav1.Time`.
    Time,
    /// `map[string]string`.
    StrMap,
    /// A slice of the element shape.
    List(&'static Shape),
    /// A pointer to the shape (nil is `null`).
    Ptr(&'static Shape),
    /// A struct with these fields, in declaration order.
    Struct(&'static [Field]),
}

/// One field of a Go struct: its JSON name, shape and `omitempty`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub shape: Shape,
    pub omitempty: bool,
}

/// A field without `omitempty`.
pub const fn field(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        shape,
        omitempty: false,
    }
}

/// A field with `omitempty`.
pub const fn optional(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        shape,
        omitempty: true,
    }
}

/// Why a value does not decode into the Go type, in `encoding/json`'s words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn go_type(shape: Shape) -> String {
    match shape {
        Shape::Str => "string".into(),
        Shape::Bool => "bool".into(),
        Shape::Int => "int".into(),
        Shape::Bytes => "[]uint8".into(),
        Shape::Time => "v1.Time".into(),
        Shape::StrMap => "map[string]string".into(),
        Shape::List(inner) => format!("[]{}", go_type(*inner)),
        Shape::Ptr(inner) => format!("*{}", go_type(*inner)),
        Shape::Struct(_) => "struct".into(),
    }
}

fn mismatch(value: &Value, shape: Shape, path: &str) -> DecodeError {
    DecodeError(format!(
        "json: cannot unmarshal {} into Go struct field {path} of type {}",
        json_type(value),
        go_type(shape)
    ))
}

/// The Go zero value of a shape, as encoded.
fn zero(shape: Shape) -> Value {
    match shape {
        Shape::Str => Value::String(String::new()),
        Shape::Bool => Value::Bool(false),
        Shape::Int => Value::from(0),
        Shape::Bytes | Shape::Time | Shape::StrMap | Shape::List(_) | Shape::Ptr(_) => Value::Null,
        Shape::Struct(fields) => Value::Object(
            encode_struct(fields, &Map::new(), "")
                .expect("an empty object decodes into any struct"),
        ),
    }
}

/// Whether `omitempty` drops an encoded value of this shape.
fn is_empty(shape: Shape, value: &Value) -> bool {
    match (shape, value) {
        (Shape::Struct(_) | Shape::Time, _) => false,
        // A non-nil pointer is not empty, whatever it points to.
        (Shape::Ptr(_), v) => v.is_null(),
        (_, Value::Null) => true,
        (_, Value::String(s)) => s.is_empty(),
        (_, Value::Bool(b)) => !b,
        (_, Value::Number(n)) => n.as_f64() == Some(0.0),
        (_, Value::Array(a)) => a.is_empty(),
        (_, Value::Object(o)) => o.is_empty(),
    }
}

fn encode_struct(
    fields: &[Field],
    object: &Map<String, Value>,
    path: &str,
) -> Result<Map<String, Value>, DecodeError> {
    let mut out = Map::new();
    for f in fields {
        let child = if path.is_empty() {
            f.name.to_string()
        } else {
            format!("{path}.{}", f.name)
        };
        let encoded = match object.get(f.name) {
            Some(value) => encode(f.shape, value, &child)?,
            None => zero(f.shape),
        };
        if !(f.omitempty && is_empty(f.shape, &encoded)) {
            out.insert(f.name.to_string(), encoded);
        }
    }
    Ok(out)
}

/// Parses an RFC 3339 time and prints it as `metav1.Time` does (UTC, seconds).
fn encode_time(text: &str) -> Option<String> {
    let at = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    Some(timestamp(at.with_timezone(&chrono::Utc)))
}

/// `value` decoded into `shape` and encoded again; `path` names the field in errors.
fn encode(shape: Shape, value: &Value, path: &str) -> Result<Value, DecodeError> {
    let fail = || mismatch(value, shape, path);
    match (shape, value) {
        // `null` leaves a Go value at its zero.
        (_, Value::Null) => Ok(zero(shape)),
        (Shape::Str, Value::String(_)) | (Shape::Bool, Value::Bool(_)) => Ok(value.clone()),
        (Shape::Int, Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(value.clone()),
        (Shape::Bytes, Value::String(s)) => {
            let engine = base64::engine::general_purpose::STANDARD;
            let bytes = engine.decode(s).map_err(|e| {
                DecodeError(format!("illegal base64 data in field {path}: {e}"))
            })?;
            Ok(Value::String(engine.encode(bytes)))
        }
        (Shape::Time, Value::String(s)) => encode_time(s).map(Value::String).ok_or_else(|| {
            DecodeError(format!(
                "parsing time {s:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse it as RFC 3339 (field {path})"
            ))
        }),
        (Shape::StrMap, Value::Object(map)) => {
            for v in map.values() {
                if !v.is_string() && !v.is_null() {
                    return Err(mismatch(v, Shape::Str, path));
                }
            }
            Ok(value.clone())
        }
        (Shape::List(inner), Value::Array(items)) => items
            .iter()
            .map(|item| encode(*inner, item, path))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        (Shape::Ptr(inner), _) => encode(*inner, value, path),
        (Shape::Struct(fields), Value::Object(object)) => {
            encode_struct(fields, object, path).map(Value::Object)
        }
        _ => Err(fail()),
    }
}

/// The top-level fields of an object (but `apiVersion`, `kind` and
/// `metadata`, which the caller keeps) as the Go struct `fields` keeps them.
pub fn normalize(fields: &[Field], object: &Value) -> Result<Map<String, Value>, DecodeError> {
    let empty = Map::new();
    encode_struct(fields, object.as_object().unwrap_or(&empty), "")
}

/// The fields of `value` that `shape` does not declare, as the apiserver's
/// strict decoding names them (`spec.region`, `spec.items[0].other`).
/// Values of the wrong type are left to [`normalize`].
fn collect_unknown(shape: Shape, value: &Value, path: &str, unknown: &mut Vec<String>) {
    match (shape, value) {
        (Shape::Ptr(inner), _) => collect_unknown(*inner, value, path, unknown),
        (Shape::List(inner), Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                collect_unknown(*inner, item, &format!("{path}[{i}]"), unknown);
            }
        }
        (Shape::Struct(fields), Value::Object(object)) => {
            for (key, child) in object {
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match fields.iter().find(|f| f.name == key) {
                    Some(f) => collect_unknown(f.shape, child, &child_path, unknown),
                    None => unknown.push(child_path),
                }
            }
        }
        _ => {}
    }
}

/// The fields of an object (but `apiVersion`, `kind` and `metadata`) that
/// the Go struct `fields` does not declare.
pub fn unknown_fields(fields: &'static [Field], object: &Value) -> Vec<String> {
    let mut unknown = Vec::new();
    let mut rest = object.clone();
    if let Some(root) = rest.as_object_mut() {
        for key in ["apiVersion", "kind", "metadata"] {
            root.remove(key);
        }
    }
    collect_unknown(Shape::Struct(fields), &rest, "", &mut unknown);
    unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const INNER: &[Field] = &[field("name", Shape::Str), optional("value", Shape::Str)];
    const SPEC: &[Field] = &[
        field("text", Shape::Str),
        optional("flag", Shape::Bool),
        field("count", Shape::Int),
        optional("bytes", Shape::Bytes),
        optional("labels", Shape::StrMap),
        field("items", Shape::List(&Shape::Struct(INNER))),
        optional("ptr", Shape::Ptr(&Shape::Struct(INNER))),
        optional("maybe", Shape::Ptr(&Shape::Bool)),
        optional("nested", Shape::Struct(INNER)),
        field("at", Shape::Time),
    ];
    const TOP: &[Field] = &[field("spec", Shape::Struct(SPEC))];

    #[test]
    fn go_encoding_of_decoded_values() {
        let cases = [
            // Missing fields come back as zero values; omitempty drops them.
            (
                json!({}),
                json!({"spec": {"text": "", "count": 0, "items": null, "nested": {"name": ""}, "at": null}}),
            ),
            // Unknown fields go, at every level.
            (
                json!({"extra": 1, "spec": {"text": "a", "unknown": true, "items": [{"name": "x", "other": 2}],
                       "ptr": {"name": "p", "drop": 1}}}),
                json!({"spec": {"text": "a", "count": 0, "items": [{"name": "x"}], "ptr": {"name": "p"},
                       "nested": {"name": ""}, "at": null}}),
            ),
            // omitempty drops false, empty strings, empty lists and maps; keeps set values.
            (
                json!({"spec": {"flag": false, "bytes": "", "labels": {}, "items": [], "ptr": null,
                       "nested": {"value": ""}}}),
                json!({"spec": {"text": "", "count": 0, "items": [], "nested": {"name": ""}, "at": null}}),
            ),
            // A pointer to false is not empty.
            (
                json!({"spec": {"maybe": false}}),
                json!({"spec": {"text": "", "count": 0, "items": null, "maybe": false, "nested": {"name": ""}, "at": null}}),
            ),
            (
                json!({"spec": {"flag": true, "bytes": "QUI=", "labels": {"a": "b"}, "count": 3,
                       "at": "2026-01-02T05:04:05+02:00"}}),
                json!({"spec": {"text": "", "flag": true, "count": 3, "bytes": "QUI=", "labels": {"a": "b"},
                       "items": null, "nested": {"name": ""}, "at": "2026-01-02T03:04:05Z"}}),
            ),
        ];
        for (input, want) in cases {
            let got = Value::Object(normalize(TOP, &input).unwrap());
            assert_eq!(got, want, "{input}");
        }
    }

    #[test]
    fn unknown_fields_are_named_by_path() {
        let cases = [
            (
                json!({"apiVersion": "v1", "kind": "X", "metadata": {"odd": 1}, "spec": {"text": "a"}}),
                vec![],
            ),
            (
                json!({"extra": 1, "spec": {"region": "eu", "items": [{"name": "a"}, {"name": "b", "other": 2}],
                       "ptr": {"drop": 1}, "labels": {"any": "key"}}}),
                vec![
                    "extra",
                    "spec.items[1].other",
                    "spec.ptr.drop",
                    "spec.region",
                ],
            ),
            // Wrong types are the decoder's business, not unknown fields.
            (json!({"spec": {"items": "x", "nested": 3}}), vec![]),
        ];
        for (input, want) in cases {
            let mut got = unknown_fields(TOP, &input);
            got.sort();
            assert_eq!(got, want, "{input}");
        }
    }

    #[test]
    fn wrong_types_fail_as_gos_decoder_does() {
        let cases = [
            (
                json!({"spec": {"flag": "yes"}}),
                "cannot unmarshal string into Go struct field spec.flag of type bool",
            ),
            (
                json!({"spec": {"count": 1.5}}),
                "cannot unmarshal number into Go struct field spec.count of type int",
            ),
            (
                json!({"spec": {"items": {}}}),
                "cannot unmarshal object into Go struct field spec.items of type []struct",
            ),
            (
                json!({"spec": {"labels": {"a": 1}}}),
                "cannot unmarshal number into Go struct field spec.labels of type string",
            ),
            (
                json!({"spec": {"bytes": "%%%"}}),
                "illegal base64 data in field spec.bytes",
            ),
            (
                json!({"spec": {"at": "yesterday"}}),
                "cannot parse it as RFC 3339",
            ),
            (
                json!({"spec": []}),
                "cannot unmarshal array into Go struct field spec of type struct",
            ),
        ];
        for (input, want) in cases {
            let err = normalize(TOP, &input).unwrap_err();
            assert!(err.0.contains(want), "{input}: {}", err.0);
        }
    }
}
