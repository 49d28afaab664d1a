//! The wire protocol shared by both transports, the tests and the docs
//! (`docs/PROTOCOL.md`): server messages, WebSocket client operations,
//! cursors and close codes.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::hub::{Change, ChangeKind, TopicDoc};

/// WebSocket close codes kube-pulse uses.
pub mod close {
    /// The client or server ended the session normally.
    pub const NORMAL: u16 = 1000;
    /// The gateway is shutting down, or the socket was idle too long.
    pub const GOING_AWAY: u16 = 1001;
    /// The session's input was not acceptable (e.g. non-UTF-8 text).
    pub const INVALID_PAYLOAD: u16 = 1007;
    /// A limit or policy was violated (origin, subscribe rate, connections).
    pub const POLICY: u16 = 1008;
    /// A client message exceeded the size limit.
    pub const TOO_BIG: u16 = 1009;
    /// The session's credential expired or was revoked, or no `auth`
    /// operation arrived in time on a socket opened without one.
    pub const UNAUTHORIZED: u16 = 4001;
    /// The credential's grants changed: reconnect to get the new view.
    pub const PERMISSIONS_CHANGED: u16 = 4003;
    /// The client did not read its messages for longer than the write timeout.
    pub const SLOW_CONSUMER: u16 = 4008;
}

/// A resume position: `{epoch}-{seq}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub epoch: String,
    pub seq: u64,
}

impl Cursor {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let (epoch, seq) = raw
            .rsplit_once('-')
            .ok_or_else(|| format!("cursor {raw:?} must look like EPOCH-SEQ"))?;
        let seq = seq
            .parse::<u64>()
            .map_err(|_| format!("cursor {raw:?}: {seq:?} is not a sequence number"))?;
        if epoch.is_empty() || epoch.len() > 64 || !epoch.chars().all(|c| c.is_ascii_alphanumeric())
        {
            return Err(format!("cursor {raw:?}: bad epoch"));
        }
        Ok(Self {
            epoch: epoch.into(),
            seq,
        })
    }
}

/// Operations a WebSocket client sends.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum ClientOp {
    Subscribe {
        id: String,
        topics: Vec<String>,
        #[serde(default)]
        since: Option<String>,
    },
    Unsubscribe {
        id: String,
    },
    Ping {
        #[serde(default)]
        id: Option<String>,
    },
    /// Authenticates a socket opened without a token, or renews the token
    /// of a live one (same subject and grants).
    Auth {
        token: String,
        #[serde(default)]
        id: Option<String>,
    },
}

/// The `synced` message: initial state delivered, and how.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Synced {
    pub cursor: String,
    /// True when the subscription resumed from a cursor with only the missed changes.
    pub resumed: bool,
    /// Why a resume fell back to fresh snapshots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Topics in the initial snapshot (or replayed changes when resumed).
    pub count: usize,
}

/// The JSON message for a hub change, encoded once and cached on the change.
pub fn change_json(change: &Change) -> Bytes {
    change
        .encoded
        .json
        .get_or_init(|| {
            let value = match change.kind {
                ChangeKind::Snapshot => json!({
                    "type": "snapshot", "topic": change.topic, "rev": change.rev,
                    "cursor": change.cursor, "doc": change.doc,
                }),
                ChangeKind::Patch => json!({
                    "type": "patch", "topic": change.topic, "rev": change.rev,
                    "cursor": change.cursor, "patch": change.patch,
                }),
                ChangeKind::Removed => json!({
                    "type": "removed", "topic": change.topic, "rev": change.rev, "cursor": change.cursor,
                }),
            };
            Bytes::from(serde_json::to_vec(&value).expect("JSON values encode"))
        })
        .clone()
}

/// The type name of a change message.
pub fn change_type(change: &Change) -> &'static str {
    match change.kind {
        ChangeKind::Snapshot => "snapshot",
        ChangeKind::Patch => "patch",
        ChangeKind::Removed => "removed",
    }
}

/// A snapshot message for a topic's current document.
pub fn snapshot_json(doc: &TopicDoc, cursor: &str) -> Bytes {
    let value = json!({"type": "snapshot", "topic": doc.topic, "rev": doc.rev, "cursor": cursor, "doc": doc.doc});
    Bytes::from(serde_json::to_vec(&value).expect("JSON values encode"))
}

/// A `removed` message for a topic that disappeared while a client lagged.
pub fn removed_json(topic: &str, cursor: &str) -> Bytes {
    Bytes::from(
        serde_json::to_vec(&json!({"type": "removed", "topic": topic, "cursor": cursor}))
            .expect("encodes"),
    )
}

pub fn synced_json(synced: &Synced) -> Bytes {
    let mut value = serde_json::to_value(synced).expect("encodes");
    value["type"] = json!("synced");
    Bytes::from(serde_json::to_vec(&value).expect("encodes"))
}

/// An `error` message: a machine-readable code and a sentence.
pub fn error_json(code: &str, message: &str, id: Option<&str>) -> Bytes {
    let mut value = json!({"type": "error", "code": code, "message": message});
    if let Some(id) = id {
        value["id"] = json!(id);
    }
    Bytes::from(serde_json::to_vec(&value).expect("encodes"))
}

/// Adds `"sub": id` to an encoded message object without re-encoding it.
pub fn with_subscription(id_json: &[u8], message: &[u8]) -> Bytes {
    debug_assert!(message.first() == Some(&b'{'));
    let mut out = Vec::with_capacity(message.len() + id_json.len() + 8);
    out.extend_from_slice(br#"{"sub":"#);
    out.extend_from_slice(id_json);
    out.push(b',');
    out.extend_from_slice(&message[1..]);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors() {
        assert_eq!(
            Cursor::parse("18f3a-42").unwrap(),
            Cursor {
                epoch: "18f3a".into(),
                seq: 42
            }
        );
        for bad in ["", "42", "abc-", "-3", "a b-1", "e-x", "e--1"] {
            assert!(Cursor::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn client_ops() {
        let op: ClientOp = serde_json::from_str(
            r#"{"op":"subscribe","id":"s1","topics":["clusters/*"],"since":"e-1"}"#,
        )
        .unwrap();
        assert_eq!(
            op,
            ClientOp::Subscribe {
                id: "s1".into(),
                topics: vec!["clusters/*".into()],
                since: Some("e-1".into())
            }
        );
        assert!(serde_json::from_str::<ClientOp>(r#"{"op":"dance"}"#).is_err());
        assert!(serde_json::from_str::<ClientOp>(r#"{"op":"subscribe","id":"s1"}"#).is_err());
        assert!(
            serde_json::from_str::<ClientOp>(r#"{"op":"unsubscribe","id":"s1","extra":1}"#)
                .is_err()
        );
        assert_eq!(
            serde_json::from_str::<ClientOp>(r#"{"op":"ping"}"#).unwrap(),
            ClientOp::Ping { id: None }
        );
    }

    #[test]
    fn subscription_ids_are_spliced_in() {
        let msg = br#"{"type":"patch","rev":2}"#;
        let out = with_subscription(br#""s1""#, msg);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v, json!({"sub": "s1", "type": "patch", "rev": 2}));
    }
}
