//! What the server sends (`hub → transports → [these bytes] → clients`):
//! the push messages of both transports as typed values, and the one JSON
//! body of every HTTP error. Field names, field order and the omission of
//! absent optional fields are the table in `docs/PROTOCOL.md` ("Messages"),
//! which `web-demo/client/kube-pulse.js` reads.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::Topic;

/// One row of a live query's `rows` message.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QueryRow<'a> {
    /// The row's topic.
    pub topic: &'a Topic,
    /// Its revision.
    pub rev: u64,
    /// Its (projected) document.
    pub doc: &'a Value,
}

/// One server message. Borrowed: a message is encoded once (see
/// [`ServerMessage::encode`]) and the bytes are shared, so it never owns
/// the document it carries.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ServerMessage<'a> {
    /// The whole document at revision `rev`.
    Snapshot {
        /// The topic the document belongs to.
        topic: &'a Topic,
        /// The document's revision, counted per topic within a gateway process.
        rev: u64,
        /// `{epoch}-{seq}` of the change; where a client resumes from.
        cursor: &'a str,
        /// The whole document.
        doc: &'a Value,
    },
    /// An RFC 7386 merge patch from revision `rev - 1` to `rev`.
    Patch {
        /// The topic that changed.
        topic: &'a Topic,
        /// The revision the patch leads to; apply it only on revision `rev - 1`.
        rev: u64,
        /// `{epoch}-{seq}` of the change; where a client resumes from.
        cursor: &'a str,
        /// The RFC 7386 merge patch (`null` members delete, arrays are replaced whole).
        patch: &'a Value,
        /// The revision the patch applies to, when it is not `rev - 1`: on
        /// subscriptions with `debounceMs` or `fields`, the revision the
        /// subscription last sent for the topic (apply only on exactly it).
        #[serde(skip_serializing_if = "Option::is_none")]
        base: Option<u64>,
    },
    /// The topic is gone (`rev` absent when a lagging subscriber learns it
    /// from a resync rather than from the change itself).
    Removed {
        /// The topic that is gone.
        topic: &'a Topic,
        /// The revision of the removal; absent when learned from a resync.
        #[serde(skip_serializing_if = "Option::is_none")]
        rev: Option<u64>,
        /// `{epoch}-{seq}`; where a client resumes from.
        cursor: &'a str,
    },
    /// The initial snapshots (or replayed changes) are all sent.
    Synced {
        /// `{epoch}-{seq}` the subscription has seen up to.
        cursor: &'a str,
        /// True when only the changes missed since the client's cursor were replayed.
        resumed: bool,
        /// Snapshots sent, or changes replayed when `resumed`.
        count: usize,
        /// Why a resume fell back to fresh snapshots; absent otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'a str>,
        /// The gateway's clock when it was sent, as in a heartbeat.
        #[serde(skip_serializing_if = "Option::is_none")]
        at: Option<&'a str>,
        /// Per member the subscription reaches, when the member's source was
        /// last known current, as in a heartbeat.
        #[serde(rename = "asOf", skip_serializing_if = "Option::is_none")]
        as_of: Option<&'a BTreeMap<String, String>>,
    },
    /// A WebSocket `subscribe` was accepted: its normalized options.
    Subscribed {
        /// The topic patterns, as given.
        topics: &'a [String],
        /// The coalescing interval; absent: every change.
        #[serde(rename = "debounceMs", skip_serializing_if = "Option::is_none")]
        debounce_ms: Option<u64>,
        /// The projection, sorted and deduplicated; absent: whole documents.
        #[serde(skip_serializing_if = "Option::is_none")]
        fields: Option<&'a [String]>,
        /// A live query, as the gateway understood it; absent: a plain
        /// subscription.
        #[serde(skip_serializing_if = "Option::is_none")]
        query: Option<&'a Value>,
    },
    /// A live query's window, count and groups: its first message (then
    /// `synced`), and again whenever it starts over.
    Rows {
        /// Where a client resumes from (a query starts over with fresh rows).
        cursor: &'a str,
        /// How many documents match the filter (and the caller may see).
        total: usize,
        /// The window, in order.
        rows: &'a [QueryRow<'a>],
        /// Matching documents per value of `groupBy`; absent without it.
        #[serde(skip_serializing_if = "Option::is_none")]
        groups: Option<&'a BTreeMap<String, usize>>,
        /// The `after` token of the window's last row, when rows follow it.
        #[serde(skip_serializing_if = "Option::is_none")]
        next: Option<&'a str>,
    },
    /// A row entered a live query's window at `index`.
    Enter {
        /// The row's topic.
        topic: &'a Topic,
        /// Its revision.
        rev: u64,
        /// Its place in the window (0 is the first row), after it entered.
        index: usize,
        /// Where a client resumes from.
        cursor: &'a str,
        /// Its (projected) document.
        doc: &'a Value,
    },
    /// The row at `index` left a live query's window.
    Leave {
        /// The row's topic.
        topic: &'a Topic,
        /// Its place in the window before it left.
        index: usize,
        /// Where a client resumes from.
        cursor: &'a str,
    },
    /// The row at `from` of a live query's window is now at `to`.
    Move {
        /// The row's topic.
        topic: &'a Topic,
        /// Its place before.
        from: usize,
        /// Its place after (counted once it was taken out).
        to: usize,
        /// Where a client resumes from.
        cursor: &'a str,
    },
    /// How many documents match a live query's filter now.
    Total {
        /// The count.
        total: usize,
        /// Where a client resumes from.
        cursor: &'a str,
    },
    /// A live query's counts per value of `groupBy` now (whole).
    Groups {
        /// Matching documents per value (`""`: the member is missing).
        groups: &'a BTreeMap<String, usize>,
        /// Where a client resumes from.
        cursor: &'a str,
    },
    /// A subscription ended; no more messages carry its id.
    Stopped {
        /// `unsubscribed`, `permissions_changed`, `token_expired`, `shutdown`.
        reason: &'a str,
    },
    /// The answer to a WebSocket `ping` operation (with `id`), or a
    /// subscription's periodic heartbeat (with `at` and `asOf`).
    Heartbeat {
        /// The hub's current `{epoch}-{seq}`.
        cursor: &'a str,
        /// The `id` of the `ping` operation; absent when it had none.
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        /// A subscription's heartbeat: the gateway's clock when it was sent
        /// (RFC 3339, UTC, milliseconds).
        #[serde(skip_serializing_if = "Option::is_none")]
        at: Option<&'a str>,
        /// A subscription's heartbeat: per member it reaches, when the
        /// member's source was last known current (docs/PROTOCOL.md).
        #[serde(rename = "asOf", skip_serializing_if = "Option::is_none")]
        as_of: Option<&'a BTreeMap<String, String>>,
    },
    /// A request was not acceptable; the session goes on (or, for
    /// `token_expired` / `permissions_changed` on SSE, ends after it).
    Error {
        /// Machine-readable code (`invalid_json`, `bad_pattern`, …; see docs/PROTOCOL.md).
        code: &'a str,
        /// A sentence for people.
        message: &'a str,
        /// The `id` of the operation that was refused; absent when it had none.
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
    },
    /// The answer to a WebSocket `auth` operation.
    Authenticated {
        /// The authenticated subject (user or service account).
        subject: &'a str,
        /// When the credential expires; absent when it does not.
        #[serde(skip_serializing_if = "Option::is_none")]
        expires: Option<DateTime<Utc>>,
        /// The `id` of the `auth` operation; absent when it had none.
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
    },
}

impl ServerMessage<'_> {
    /// The `type` field, also the SSE `event:` name.
    pub fn kind(&self) -> &'static str {
        match self {
            ServerMessage::Snapshot { .. } => "snapshot",
            ServerMessage::Patch { .. } => "patch",
            ServerMessage::Removed { .. } => "removed",
            ServerMessage::Synced { .. } => "synced",
            ServerMessage::Rows { .. } => "rows",
            ServerMessage::Enter { .. } => "enter",
            ServerMessage::Leave { .. } => "leave",
            ServerMessage::Move { .. } => "move",
            ServerMessage::Total { .. } => "total",
            ServerMessage::Groups { .. } => "groups",
            ServerMessage::Subscribed { .. } => "subscribed",
            ServerMessage::Stopped { .. } => "stopped",
            ServerMessage::Heartbeat { .. } => "heartbeat",
            ServerMessage::Error { .. } => "error",
            ServerMessage::Authenticated { .. } => "authenticated",
        }
    }

    /// The message as one line of JSON, written straight from the borrowed
    /// values (no intermediate `serde_json::Value`).
    pub fn encode(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("server messages encode"))
    }
}

/// The `synced` message's content, kept by a session until it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synced {
    /// `{epoch}-{seq}` the subscription has seen up to.
    pub cursor: String,
    /// True when the subscription resumed from a cursor with only the missed changes.
    pub resumed: bool,
    /// Topics in the initial snapshot (or replayed changes when resumed).
    pub count: usize,
    /// Why a resume fell back to fresh snapshots.
    pub reason: Option<String>,
    /// The gateway's clock, and when each member reached was last known
    /// current (`at`, `asOf`); set by the transports.
    pub as_of: Option<(String, BTreeMap<String, String>)>,
}

impl Synced {
    /// The `synced` message to send, borrowing this content.
    pub fn message(&self) -> ServerMessage<'_> {
        ServerMessage::Synced {
            cursor: &self.cursor,
            resumed: self.resumed,
            count: self.count,
            reason: self.reason.as_deref(),
            at: self.as_of.as_ref().map(|(at, _)| at.as_str()),
            as_of: self.as_of.as_ref().map(|(_, members)| members),
        }
    }
}

/// Adds `"sub": id` to an encoded message object without re-encoding it:
/// `prefix` is the subscription's [`subscription_prefix`].
pub fn with_subscription(prefix: &[u8], message: &[u8]) -> Bytes {
    debug_assert!(message.first() == Some(&b'{'));
    let mut out = Vec::with_capacity(prefix.len() + message.len() - 1);
    out.extend_from_slice(prefix);
    out.extend_from_slice(&message[1..]);
    Bytes::from(out)
}

/// Where the `"doc":` member of an encoded snapshot message starts (its
/// last member: `{"type":"snapshot","topic":…,"rev":…,"cursor":…,"doc":…}`);
/// None for any other message.
pub fn snapshot_doc_at(message: &[u8]) -> Option<usize> {
    const HEAD: &[u8] = br#"{"type":"snapshot","#;
    const DOC: &[u8] = br#","doc":"#;
    if !message.starts_with(HEAD) {
        return None;
    }
    // The first: the topic and cursor before it hold no quote.
    let at = message.windows(DOC.len()).position(|w| w == DOC)?;
    Some(at + 1)
}

/// What [`with_subscription`] writes before a message's own fields (which
/// follow its opening brace): `{"sub":ID,`, made once per subscription.
pub fn subscription_prefix(id: &str) -> Box<[u8]> {
    let mut out = br#"{"sub":"#.to_vec();
    serde_json::to_writer(&mut out, id).expect("strings encode");
    out.push(b',');
    out.into()
}

/// The JSON body of every HTTP error answer: `{"code": …, "message": …}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ErrorBody<'a> {
    /// Machine-readable, e.g. `bad_request`, `too_many_connections`.
    pub code: &'a str,
    /// A sentence for people.
    pub message: &'a str,
}

/// An HTTP error answer: `status` with an [`ErrorBody`]. Every error
/// response of the gateway is made here (callers add headers such as
/// `Retry-After` to the result).
pub fn error_response(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(ErrorBody { code, message })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(message: ServerMessage<'_>) -> String {
        String::from_utf8(message.encode().to_vec()).unwrap()
    }

    #[test]
    fn a_snapshot_splits_before_its_document() {
        let topic = Topic::new("apps/prod/shop/web");
        let doc = json!({"x": {"doc": 1}, "note": ",\"doc\":"});
        let message = ServerMessage::Snapshot {
            topic: &topic,
            rev: 3,
            cursor: "e-9",
            doc: &doc,
        }
        .encode();
        let at = snapshot_doc_at(&message).unwrap();
        assert_eq!(
            &message[..at],
            br#"{"type":"snapshot","topic":"apps/prod/shop/web","rev":3,"cursor":"e-9","#
        );
        let rest: serde_json::Value =
            serde_json::from_slice(&[b"{", &message[at..]].concat()).unwrap();
        assert_eq!(rest["doc"], doc);
        let patch = ServerMessage::Removed {
            topic: &topic,
            rev: None,
            cursor: "e-9",
        }
        .encode();
        assert_eq!(snapshot_doc_at(&patch), None);
    }

    /// The exact bytes of every message type, so that a renamed or
    /// reordered field, or an absent optional field written as `null`,
    /// fails here before it reaches a client.
    #[test]
    fn every_message_has_the_documented_bytes() {
        let topic = Topic::new("apps/prod/shop/web");
        let doc = json!({"phase": "Running", "ready": 3});
        let patch = json!({"ready": 2});
        let topics = ["apps/**".to_string()];
        let fields = ["/phase".to_string()];
        let as_of = BTreeMap::from([("dev".to_string(), "2026-12-05T10:31:00.001Z".to_string())]);
        let query = serde_json::json!({"limit": 5, "sort": ["/state"]});
        let groups: BTreeMap<String, usize> = [("Running".to_string(), 7)].into();
        let expires = DateTime::parse_from_rfc3339("2026-12-02T18:03:13Z")
            .unwrap()
            .with_timezone(&Utc);
        let cases = [
            (
                ServerMessage::Snapshot {
                    topic: &topic,
                    rev: 4,
                    cursor: "e1-101",
                    doc: &doc,
                },
                r#"{"type":"snapshot","topic":"apps/prod/shop/web","rev":4,"cursor":"e1-101","doc":{"phase":"Running","ready":3}}"#,
            ),
            (
                ServerMessage::Patch {
                    topic: &topic,
                    rev: 5,
                    cursor: "e1-102",
                    patch: &patch,
                    base: None,
                },
                r#"{"type":"patch","topic":"apps/prod/shop/web","rev":5,"cursor":"e1-102","patch":{"ready":2}}"#,
            ),
            (
                ServerMessage::Patch {
                    topic: &topic,
                    rev: 9,
                    cursor: "e1-110",
                    patch: &patch,
                    base: Some(5),
                },
                r#"{"type":"patch","topic":"apps/prod/shop/web","rev":9,"cursor":"e1-110","patch":{"ready":2},"base":5}"#,
            ),
            (
                ServerMessage::Subscribed {
                    topics: &topics,
                    debounce_ms: Some(1000),
                    fields: Some(&fields),
                    query: None,
                },
                r#"{"type":"subscribed","topics":["apps/**"],"debounceMs":1000,"fields":["/phase"]}"#,
            ),
            (
                ServerMessage::Subscribed {
                    topics: &topics,
                    debounce_ms: None,
                    fields: None,
                    query: None,
                },
                r#"{"type":"subscribed","topics":["apps/**"]}"#,
            ),
            (
                ServerMessage::Subscribed {
                    topics: &topics,
                    debounce_ms: None,
                    fields: None,
                    query: Some(&query),
                },
                r#"{"type":"subscribed","topics":["apps/**"],"query":{"limit":5,"sort":["/state"]}}"#,
            ),
            (
                ServerMessage::Rows {
                    cursor: "e1-110",
                    total: 7,
                    rows: &[QueryRow {
                        topic: &topic,
                        rev: 4,
                        doc: &patch,
                    }],
                    groups: Some(&groups),
                    next: Some("tok"),
                },
                r#"{"type":"rows","cursor":"e1-110","total":7,"rows":[{"topic":"apps/prod/shop/web","rev":4,"doc":{"ready":2}}],"groups":{"Running":7},"next":"tok"}"#,
            ),
            (
                ServerMessage::Enter {
                    topic: &topic,
                    rev: 4,
                    index: 0,
                    cursor: "e1-110",
                    doc: &patch,
                },
                r#"{"type":"enter","topic":"apps/prod/shop/web","rev":4,"index":0,"cursor":"e1-110","doc":{"ready":2}}"#,
            ),
            (
                ServerMessage::Leave {
                    topic: &topic,
                    index: 3,
                    cursor: "e1-110",
                },
                r#"{"type":"leave","topic":"apps/prod/shop/web","index":3,"cursor":"e1-110"}"#,
            ),
            (
                ServerMessage::Move {
                    topic: &topic,
                    from: 3,
                    to: 0,
                    cursor: "e1-110",
                },
                r#"{"type":"move","topic":"apps/prod/shop/web","from":3,"to":0,"cursor":"e1-110"}"#,
            ),
            (
                ServerMessage::Total {
                    total: 8,
                    cursor: "e1-110",
                },
                r#"{"type":"total","total":8,"cursor":"e1-110"}"#,
            ),
            (
                ServerMessage::Groups {
                    groups: &groups,
                    cursor: "e1-110",
                },
                r#"{"type":"groups","groups":{"Running":7},"cursor":"e1-110"}"#,
            ),
            (
                ServerMessage::Stopped {
                    reason: "unsubscribed",
                },
                r#"{"type":"stopped","reason":"unsubscribed"}"#,
            ),
            (
                ServerMessage::Removed {
                    topic: &topic,
                    rev: Some(6),
                    cursor: "e1-103",
                },
                r#"{"type":"removed","topic":"apps/prod/shop/web","rev":6,"cursor":"e1-103"}"#,
            ),
            (
                ServerMessage::Removed {
                    topic: &topic,
                    rev: None,
                    cursor: "e1-103",
                },
                r#"{"type":"removed","topic":"apps/prod/shop/web","cursor":"e1-103"}"#,
            ),
            (
                ServerMessage::Synced {
                    cursor: "e1-101",
                    resumed: false,
                    count: 1,
                    reason: None,
                    at: None,
                    as_of: None,
                },
                r#"{"type":"synced","cursor":"e1-101","resumed":false,"count":1}"#,
            ),
            (
                ServerMessage::Synced {
                    cursor: "e1-101",
                    resumed: false,
                    count: 0,
                    reason: Some("too old"),
                    at: None,
                    as_of: None,
                },
                r#"{"type":"synced","cursor":"e1-101","resumed":false,"count":0,"reason":"too old"}"#,
            ),
            (
                ServerMessage::Synced {
                    cursor: "e1-101",
                    resumed: false,
                    count: 0,
                    reason: None,
                    at: Some("2026-12-05T10:31:02.123Z"),
                    as_of: Some(&as_of),
                },
                r#"{"type":"synced","cursor":"e1-101","resumed":false,"count":0,"at":"2026-12-05T10:31:02.123Z","asOf":{"dev":"2026-12-05T10:31:00.001Z"}}"#,
            ),
            (
                ServerMessage::Heartbeat {
                    cursor: "e1-57",
                    id: Some("p1"),
                    at: None,
                    as_of: None,
                },
                r#"{"type":"heartbeat","cursor":"e1-57","id":"p1"}"#,
            ),
            (
                ServerMessage::Heartbeat {
                    cursor: "e1-57",
                    id: None,
                    at: None,
                    as_of: None,
                },
                r#"{"type":"heartbeat","cursor":"e1-57"}"#,
            ),
            (
                ServerMessage::Heartbeat {
                    cursor: "e1-57",
                    id: None,
                    at: Some("2026-12-05T10:31:02.123Z"),
                    as_of: Some(&as_of),
                },
                r#"{"type":"heartbeat","cursor":"e1-57","at":"2026-12-05T10:31:02.123Z","asOf":{"dev":"2026-12-05T10:31:00.001Z"}}"#,
            ),
            (
                ServerMessage::Error {
                    code: "bad_pattern",
                    message: "no \"*x\"",
                    id: Some("s1"),
                },
                r#"{"type":"error","code":"bad_pattern","message":"no \"*x\"","id":"s1"}"#,
            ),
            (
                ServerMessage::Error {
                    code: "invalid_json",
                    message: "not JSON",
                    id: None,
                },
                r#"{"type":"error","code":"invalid_json","message":"not JSON"}"#,
            ),
            (
                ServerMessage::Authenticated {
                    subject: "alice",
                    expires: Some(expires),
                    id: Some("a1"),
                },
                r#"{"type":"authenticated","subject":"alice","expires":"2026-12-02T18:03:13Z","id":"a1"}"#,
            ),
            (
                ServerMessage::Authenticated {
                    subject: "alice",
                    expires: None,
                    id: None,
                },
                r#"{"type":"authenticated","subject":"alice"}"#,
            ),
        ];
        for (message, want) in cases {
            assert_eq!(text(message), want);
            let parsed: Value = serde_json::from_str(want).unwrap();
            assert_eq!(parsed["type"], message.kind(), "{want}");
        }
    }

    #[test]
    fn synced_state_becomes_its_message() {
        let synced = Synced {
            cursor: "e1-7".into(),
            resumed: true,
            count: 2,
            reason: None,
            as_of: None,
        };
        assert_eq!(
            text(synced.message()),
            r#"{"type":"synced","cursor":"e1-7","resumed":true,"count":2}"#
        );
        let members = BTreeMap::from([("b".to_string(), "2026-12-05T10:00:00.000Z".to_string())]);
        let synced = Synced {
            as_of: Some(("2026-12-05T10:00:01.000Z".into(), members)),
            ..synced
        };
        assert_eq!(
            text(synced.message()),
            r#"{"type":"synced","cursor":"e1-7","resumed":true,"count":2,"at":"2026-12-05T10:00:01.000Z","asOf":{"b":"2026-12-05T10:00:00.000Z"}}"#
        );
    }

    #[test]
    fn subscription_ids_are_spliced_in() {
        let msg = br#"{"type":"patch","rev":2}"#;
        let out = with_subscription(&subscription_prefix("s1"), msg);
        assert_eq!(&out[..], br#"{"sub":"s1","type":"patch","rev":2}"#);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v, json!({"sub": "s1", "type": "patch", "rev": 2}));
    }

    #[tokio::test]
    async fn error_answers_have_one_body() {
        let response = error_response(StatusCode::TOO_MANY_REQUESTS, "rate_limited", "slow down");
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["content-type"], "application/json");
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(
            &body[..],
            br#"{"code":"rate_limited","message":"slow down"}"#
        );
    }
}
