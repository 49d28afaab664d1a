//! What replicas say to each other on the stream of changes
//! (`owner's hub ──[Envelope on a subject]──▶ JetStream ──▶ every replica's
//! hub`): the subject of a topic and the message of one change. Pure: no
//! client, no clock.
//!
//! A topic's `/`-separated segments become the subject's `.`-separated
//! tokens after the prefix `kube-pulse.topics.`, so NATS wildcards match as
//! ours do (`*` one segment, `>` like a trailing `**`). Characters NATS
//! forbids or gives a meaning inside a token (`.`, `*`, `>`, whitespace) and
//! `%` itself are written `%XX` (hex of the UTF-8 byte, upper case); so are
//! all bytes outside ASCII letters, digits, `-` and `_`, which keeps
//! subjects plain ASCII. An empty segment is written `%`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The prefix of every topic's subject.
pub const PREFIX: &str = "kube-pulse.topics";

/// The subject of `topic` (see the module's header).
pub fn of_topic(topic: &str) -> String {
    let mut out = String::with_capacity(PREFIX.len() + topic.len() + 8);
    out.push_str(PREFIX);
    for segment in topic.split('/') {
        out.push('.');
        if segment.is_empty() {
            out.push('%');
            continue;
        }
        for byte in segment.bytes() {
            match byte {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => out.push(byte as char),
                _ => out.push_str(&format!("%{byte:02X}")),
            }
        }
    }
    out
}

/// One change of a topic as its owner's hub made it: the whole document
/// (None: removed) at the owner's revision. A whole document, not a patch,
/// so that the last message of a topic alone rebuilds it exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// The topic, as the hub names it.
    pub topic: String,
    /// The topic's revision in the owner's hub.
    pub rev: u64,
    /// The replica that published it (`--replica-id`): its own messages are
    /// skipped when they come back.
    pub replica: String,
    /// The document after the change; None when the topic was removed.
    pub doc: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn topics_map_to_subjects_token_for_token() {
        for (topic, subject) in [
            ("clusters/prod", "kube-pulse.topics.clusters.prod"),
            (
                "clusters/eu.west-1/sync/apps/v1/deployments",
                "kube-pulse.topics.clusters.eu%2Ewest-1.sync.apps.v1.deployments",
            ),
            ("apps/a/shop/web_1", "kube-pulse.topics.apps.a.shop.web_1"),
            ("apps/a*b/>/x y", "kube-pulse.topics.apps.a%2Ab.%3E.x%20y"),
            ("apps/100%/é/\t", "kube-pulse.topics.apps.100%25.%C3%A9.%09"),
            ("clusters//x", "kube-pulse.topics.clusters.%.x"),
        ] {
            assert_eq!(of_topic(topic), subject, "{topic}");
            // Every token is a valid, literal NATS token.
            for token in subject.split('.') {
                assert!(!token.is_empty(), "{subject}");
                assert!(
                    token
                        .bytes()
                        .all(|b| b.is_ascii_graphic() && b != b'*' && b != b'>'),
                    "{subject}"
                );
            }
        }
    }

    #[test]
    fn different_topics_get_different_subjects() {
        let topics = [
            "clusters/a.b",
            "clusters/a/b",
            "clusters/a%2Eb",
            "clusters/a%2eb",
            "clusters/",
            "clusters/%",
        ];
        let subjects: std::collections::BTreeSet<String> =
            topics.iter().map(|t| of_topic(t)).collect();
        assert_eq!(subjects.len(), topics.len(), "{subjects:?}");
    }

    #[test]
    fn an_envelope_round_trips_and_a_removal_has_no_document() {
        let put = Envelope {
            topic: "clusters/a".into(),
            rev: 3,
            replica: "r1".into(),
            doc: Some(json!({"phase": "Healthy"})),
        };
        let bytes = serde_json::to_vec(&put).unwrap();
        assert_eq!(serde_json::from_slice::<Envelope>(&bytes).unwrap(), put);
        let removed: Envelope =
            serde_json::from_str(r#"{"topic":"clusters/a","rev":4,"replica":"r1","doc":null}"#)
                .unwrap();
        assert_eq!(removed.doc, None);
    }
}
