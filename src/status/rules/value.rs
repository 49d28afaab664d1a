//! Between JSON and CEL values: an object becomes the `object` a rule
//! reads (integers as CEL `int`, as Kubernetes' CEL reads JSON; the
//! `managedFields` left out; lists longer than [`MAX_LIST`] refused), and
//! what an expression yields becomes the field it fills, or a clear error.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cel::Value;
use cel::objects::{Key, Map};
use serde_json::Value as Json;

use super::cost::MAX_LIST;

/// `json` as a CEL value; an error names the first list longer than
/// [`MAX_LIST`] by its path.
pub(super) fn from_json(json: &Json, path: &mut String) -> Result<Value, String> {
    Ok(match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(Arc::new(s.clone())),
        Json::Array(items) => {
            if items.len() as u64 > MAX_LIST {
                return Err(format!(
                    "{} holds {} items, more than the {MAX_LIST} a rule may range over",
                    if path.is_empty() {
                        "object"
                    } else {
                        path.as_str()
                    },
                    items.len()
                ));
            }
            let mut list = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                list.push(from_json(item, path)?);
                path.truncate(len);
            }
            Value::List(Arc::new(list))
        }
        Json::Object(fields) => {
            let mut map = HashMap::with_capacity(fields.len());
            for (k, v) in fields {
                if path == "object.metadata" && k == "managedFields" {
                    continue;
                }
                let len = path.len();
                path.push('.');
                path.push_str(k);
                map.insert(Key::String(Arc::new(k.clone())), from_json(v, path)?);
                path.truncate(len);
            }
            Value::Map(Map { map: Arc::new(map) })
        }
    })
}

/// The CEL type of a value, for messages.
fn type_of(value: &Value) -> String {
    value.type_of().to_string()
}

/// An int (a whole float, or a string of digits such as Argo Rollouts'
/// `observedGeneration`, count too); None for null.
pub(super) fn to_int(value: &Value) -> Result<Option<i64>, String> {
    match value {
        Value::Null => Ok(None),
        Value::Int(i) => Ok(Some(*i)),
        Value::UInt(u) => i64::try_from(*u).map(Some).map_err(|e| e.to_string()),
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Some(*f as i64)),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => s
            .parse::<i64>()
            .map(Some)
            .map_err(|_| format!("wants an int, got the string {s:?}")),
        other => Err(format!("wants an int, got {}", type_of(other))),
    }
}

/// A bool; null is false.
pub(super) fn to_bool(value: &Value) -> Result<bool, String> {
    match value {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(*b),
        other => Err(format!("wants a bool, got {}", type_of(other))),
    }
}

/// A non-empty string, or None for null and "".
pub(super) fn to_text(value: &Value) -> Result<Option<String>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => Ok(Some(s.to_string())),
        other => Err(format!("wants a string, got {}", type_of(other))),
    }
}

/// A map of strings to strings; null is empty.
pub(super) fn to_labels(value: &Value) -> Result<BTreeMap<String, String>, String> {
    match value {
        Value::Null => Ok(BTreeMap::new()),
        Value::Map(map) => map
            .map
            .iter()
            .map(|(k, v)| match (k, v) {
                (Key::String(k), Value::String(v)) => Ok((k.to_string(), v.to_string())),
                _ => Err(format!(
                    "wants a map of strings, got an entry of {}",
                    type_of(v)
                )),
            })
            .collect(),
        other => Err(format!("wants a map of strings, got {}", type_of(other))),
    }
}

/// A list of strings; null is empty.
pub(super) fn to_strings(value: &Value) -> Result<Vec<String>, String> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::List(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.to_string()),
                other => Err(format!(
                    "wants a list of strings, got an item of {}",
                    type_of(other)
                )),
            })
            .collect(),
        other => Err(format!("wants a list of strings, got {}", type_of(other))),
    }
}

/// A reason and a message: a map with `reason` and `message` (strings), or
/// a string (the message, with `default_reason`); None for null and "".
pub(super) fn to_failure(
    value: &Value,
    default_reason: &str,
) -> Result<Option<(String, String)>, String> {
    match value {
        Value::Map(map) => {
            let field = |name: &str| -> Result<Option<String>, String> {
                match map.map.get(&Key::String(Arc::new(name.to_string()))) {
                    None => Ok(None),
                    Some(v) => to_text(v).map_err(|e| format!("`{name}` {e}")),
                }
            };
            let reason = field("reason")?;
            let message = field("message")?;
            if reason.is_none() && message.is_none() {
                return Ok(None);
            }
            let reason = reason.unwrap_or_else(|| default_reason.to_string());
            let message = message.unwrap_or_else(|| reason.clone());
            Ok(Some((reason, message)))
        }
        other => Ok(to_text(other)
            .map_err(|_| {
                format!(
                    "wants a string or a map with reason and message, got {}",
                    type_of(other)
                )
            })?
            .map(|message| (default_reason.to_string(), message))),
    }
}
