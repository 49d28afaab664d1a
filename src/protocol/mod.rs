//! The wire: every byte a client sees or sends, in one place that reads
//! side by side with `docs/PROTOCOL.md` and `web-demo/client/kube-pulse.js`
//! (`hub → transports → [protocol] → clients`). Server messages and the
//! HTTP error body ([`messages`]), merge patches ([`patch`]), REST bodies
//! ([`rest`]), query strings ([`query_string`]), SSE framing ([`sse`]), compressed frames ([`deflate`]), topic names ([`topic`]); here: WebSocket client operations, cursors and close codes. Depends on nothing else in
//! the crate, so the hub, the transports, auth and the tests can all use it.

pub mod deflate;
mod messages;
pub mod options;
pub mod patch;
pub mod query_string;
pub mod rest;
pub mod sse;
pub mod strict_json;
pub mod topic;

use serde::Deserialize;

pub use messages::{
    ErrorBody, QueryRow, ServerMessage, Synced, error_response, snapshot_doc_at,
    subscription_prefix, with_subscription,
};
pub use options::SubscribeOptions;
pub use topic::{Topic, TopicKind};

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
    /// A per-client limit holds, like HTTP 429: the subject's session limit
    /// when `auth` names it, or its address failed authentication too often;
    /// retry later (the reason says which).
    pub const TOO_MANY: u16 = 4029;
}

/// A resume position: `{epoch}-{seq}`, and with a shared stream of changes
/// `{epoch}-{seq}.{stream}-{position}` (docs/PROTOCOL.md, docs/SCALE-OUT.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// Names the gateway process that issued the cursor (hex of its start time).
    pub epoch: String,
    /// The hub-wide sequence number of the last change the client has.
    pub seq: u64,
    /// Where the client is in the stream of changes replicas share, which
    /// every replica of it can resume from.
    pub stream: Option<StreamCursor>,
}

/// The part of a cursor that means the same on every replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCursor {
    /// Names the stream (hex of its creation time).
    pub id: String,
    /// The client has every change of the stream up to this sequence number.
    pub position: u64,
}

/// Reads `{name}-{number}`, with `what` naming the parts in errors.
fn named_number<'a>(raw: &'a str, whole: &str, what: &str) -> Result<(&'a str, u64), String> {
    let (name, number) = raw
        .rsplit_once('-')
        .ok_or_else(|| format!("cursor {whole:?} must look like EPOCH-SEQ"))?;
    let number = number
        .parse::<u64>()
        .map_err(|_| format!("cursor {whole:?}: {number:?} is not a sequence number"))?;
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(format!("cursor {whole:?}: bad {what}"));
    }
    Ok((name, number))
}

impl Cursor {
    /// Reads `{epoch}-{seq}` or `{epoch}-{seq}.{stream}-{position}` from
    /// `since=`, `Last-Event-ID` or a `subscribe` operation.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let (local, stream) = match raw.split_once('.') {
            Some((local, stream)) => (local, Some(stream)),
            None => (raw, None),
        };
        let (epoch, seq) = named_number(local, raw, "epoch")?;
        let stream = match stream {
            Some(stream) => {
                let (id, position) = named_number(stream, raw, "stream")?;
                Some(StreamCursor {
                    id: id.into(),
                    position,
                })
            }
            None => None,
        };
        Ok(Self {
            epoch: epoch.into(),
            seq,
            stream,
        })
    }
}

/// Operations a WebSocket client sends.
// Parsed once per frame and taken apart at once: a boxed variant would
// save nothing that lives.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum ClientOp {
    /// Subscribes to topics or patterns: snapshots, `synced`, then changes.
    Subscribe {
        /// Names the subscription: 1–128 bytes of UTF-8, unique on the socket; every message it gets carries it as `sub`.
        id: String,
        /// Exact topics or patterns (`*` one segment, `**` the rest); at most 50.
        topics: Vec<String>,
        /// A cursor to resume from; absent: fresh snapshots.
        #[serde(default)]
        since: Option<String>,
        /// At most one message per topic per this many ms (50–60 000); read
        /// by [`SubscribeOptions::parse`], so a bad value is `bad_option`.
        #[serde(default, rename = "debounceMs")]
        debounce_ms: Option<serde_json::Value>,
        /// JSON pointers to project documents onto (1–32); see [`options`].
        #[serde(default)]
        fields: Option<serde_json::Value>,
        /// A live query's filter (docs/PROTOCOL.md, "Live queries"); any
        /// of these members makes the subscription a live query.
        #[serde(default)]
        filter: Option<serde_json::Value>,
        /// A live query's sort: pointers, `-` first for descending.
        #[serde(default)]
        sort: Option<serde_json::Value>,
        /// A live query's window size (0–500).
        #[serde(default)]
        limit: Option<serde_json::Value>,
        /// Rows a live query's window skips (0–10 000).
        #[serde(default)]
        offset: Option<serde_json::Value>,
        /// A live query's window starts after this key (a `next`).
        #[serde(default)]
        after: Option<serde_json::Value>,
        /// A live query counts matching documents by this pointer.
        #[serde(default, rename = "groupBy")]
        group_by: Option<serde_json::Value>,
    },
    /// Ends a subscription.
    Unsubscribe {
        /// The subscription's id.
        id: String,
    },
    /// Asks for a `heartbeat` (with the current cursor).
    Ping {
        /// Echoed in the `heartbeat`; absent: none.
        #[serde(default)]
        id: Option<String>,
    },
    /// Authenticates a socket opened without a token, or renews the token
    /// of a live one (same subject and grants).
    Auth {
        /// The bearer token.
        token: String,
        /// Echoed in the `authenticated` answer or the `error`; absent: none.
        #[serde(default)]
        id: Option<String>,
    },
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
                seq: 42,
                stream: None,
            }
        );
        assert_eq!(
            Cursor::parse("18f3a-42.19a0b-7").unwrap(),
            Cursor {
                epoch: "18f3a".into(),
                seq: 42,
                stream: Some(StreamCursor {
                    id: "19a0b".into(),
                    position: 7
                }),
            }
        );
        for bad in [
            "",
            "42",
            "abc-",
            "-3",
            "a b-1",
            "e-x",
            "e--1",
            "e-1.",
            "e-1.s",
            "e-1.s-",
            "e-1.-2",
            "e-1.s-2.t-3",
            "e-1.s-x",
        ] {
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
                since: Some("e-1".into()),
                debounce_ms: None,
                fields: None,
                filter: None,
                sort: None,
                limit: None,
                offset: None,
                after: None,
                group_by: None,
            }
        );
        let query: ClientOp = serde_json::from_str(
            r#"{"op":"subscribe","id":"q","topics":["apps/**"],"sort":["-/ready"],"limit":5,"groupBy":"/phase"}"#,
        )
        .unwrap();
        let ClientOp::Subscribe {
            sort,
            limit,
            group_by,
            ..
        } = query
        else {
            panic!("{query:?}");
        };
        assert_eq!(
            (sort, limit, group_by),
            (
                Some(serde_json::json!(["-/ready"])),
                Some(5.into()),
                Some("/phase".into())
            )
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
}
