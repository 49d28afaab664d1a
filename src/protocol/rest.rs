//! REST answer bodies (`hub → rest → [these bodies] → clients`): the list
//! envelope every collection endpoint answers with, and the transition
//! history of one topic. Errors use [`super::ErrorBody`].

use serde::Serialize;
use serde_json::Value;

use super::Topic;

/// A collection: `{"items": [...]}`, each item a whole document.
#[derive(Debug, Serialize)]
pub struct ItemList<T> {
    /// The documents the caller may see, in topic order.
    pub items: Vec<T>,
}

/// `GET /api/v1/history?topic=…`: a topic's phase and its transitions,
/// oldest first.
#[derive(Debug, Serialize)]
pub struct History<'a> {
    /// The topic asked for.
    pub topic: &'a Topic,
    /// The document's revision the history was read from.
    pub rev: u64,
    /// The current phase (`null` for documents without one, e.g. tasks).
    pub phase: Option<&'a Value>,
    /// When the current phase began (RFC 3339), `null` without a phase.
    pub since: Option<&'a Value>,
    /// Transitions `{number, from, to, reason, at}`, oldest first.
    pub history: Vec<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn bodies_have_the_documented_fields() {
        let list = ItemList {
            items: vec![Arc::new(json!({"name": "a"}))],
        };
        assert_eq!(
            serde_json::to_string(&list).unwrap(),
            r#"{"items":[{"name":"a"}]}"#
        );
        let topic = Topic::parse("clusters/a").unwrap();
        let phase = json!("Healthy");
        let history = History {
            topic: &topic,
            rev: 3,
            phase: Some(&phase),
            since: None,
            history: vec![json!({"to": "Healthy"})],
        };
        assert_eq!(
            serde_json::to_string(&history).unwrap(),
            r#"{"topic":"clusters/a","rev":3,"phase":"Healthy","since":null,"history":[{"to":"Healthy"}]}"#
        );
    }
}
