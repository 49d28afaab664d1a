//! Property-based fuzzing of everything that parses client input: WebSocket
//! operations, topic patterns, topic names, cursors, scopes and bearer
//! subprotocols.
//! Arbitrary and near-valid inputs must give a value or an error, never a
//! panic; what parses must round-trip. Bounded (`CASES` per target) so that
//! it runs in CI with the rest of the unit tests.

use proptest::prelude::*;

use crate::auth::Scope;
use crate::hub::Pattern;
use crate::protocol::{ClientOp, Cursor, Topic};

const CASES: u32 = 2000;

/// Strings built from the characters the parsers care about.
fn near_valid() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r#"[a-z0-9*/{}":,\[\] .\-_\\]{0,80}"#).expect("valid regex")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn websocket_operations_never_panic(text in prop_oneof![any::<String>(), near_valid()]) {
        let _ = crate::transports::ws::parse_op(&text);
    }

    #[test]
    fn websocket_operations_with_valid_shape(
        op in prop_oneof![Just("subscribe"), Just("unsubscribe"), Just("ping"), Just("auth"), Just("other")],
        id in any::<String>(),
        topics in proptest::collection::vec(near_valid(), 0..4),
        since in proptest::option::of(near_valid()),
    ) {
        let text = serde_json::json!({"op": op, "id": id, "topics": topics, "since": since, "token": id}).to_string();
        let _ = crate::transports::ws::parse_op(&text);
    }

    #[test]
    fn patterns_never_panic_and_match_what_they_parse(raw in prop_oneof![any::<String>(), near_valid()]) {
        if let Ok(pattern) = Pattern::parse(&raw) {
            // An exact pattern matches its own text as a topic.
            if pattern.is_exact() {
                prop_assert!(pattern.matches(&Topic::new(&raw)));
            }
        }
    }

    #[test]
    fn topics_never_panic_and_keep_their_text(raw in prop_oneof![any::<String>(), near_valid()]) {
        let topic = Topic::new(&raw);
        prop_assert_eq!(topic.as_str(), raw.as_str());
        let segments: Vec<&str> = (0..topic.depth()).filter_map(|i| topic.segment(i)).collect();
        prop_assert_eq!(segments.join("/"), raw.clone());
        match Topic::parse(&raw) {
            Ok(parsed) => prop_assert_eq!(parsed.kind(), topic.kind()),
            Err(_) => prop_assert_eq!(topic.kind(), None),
        }
    }

    #[test]
    fn cursors_round_trip(epoch in "[a-z0-9]{1,20}", seq in any::<u64>(), junk in any::<String>()) {
        let cursor = Cursor::parse(&format!("{epoch}-{seq}")).expect("well-formed cursors parse");
        prop_assert_eq!((cursor.epoch.as_str(), cursor.seq), (epoch.as_str(), seq));
        let _ = Cursor::parse(&junk);
    }

    #[test]
    fn scopes_never_panic(raw in prop_oneof![any::<String>(), near_valid()]) {
        let _ = Scope::parse(&raw);
    }

    #[test]
    fn bearer_subprotocols_never_panic(raw in any::<String>()) {
        let mut headers = axum::http::HeaderMap::new();
        if let Ok(value) = axum::http::HeaderValue::from_str(&format!("{}{raw}", crate::auth::WS_TOKEN_PROTOCOL)) {
            headers.insert(axum::http::header::SEC_WEBSOCKET_PROTOCOL, value);
            let _ = crate::auth::ws_protocol_token(&headers);
        }
    }
}

#[test]
fn a_near_valid_operation_parses() {
    let op = crate::transports::ws::parse_op(r#"{"op":"subscribe","id":"s","topics":["apps/**"]}"#);
    assert!(matches!(op, Ok(ClientOp::Subscribe { .. })));
}
