//! What every status document carries: `phase`, `reason`, `message`, `since`
//! (time of the last phase change) and a bounded `history` of transitions.
//!
//! `history` is a JSON object keyed by each transition's number (`"1"`,
//! `"2"`, …), not an array: RFC 7386 merge patches replace arrays whole, so
//! an array would resend every kept transition on each change, where an
//! object patch carries the new entry and a `null` for the one that fell out.
//!
//! [`Lifecycle::restore`] reads these fields back from a published document,
//! so that a machine started elsewhere (a member's new owner) continues it.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Value, json};

use super::time::serialize_millis;

/// How many transitions a document keeps.
pub const HISTORY_LIMIT: usize = 20;

/// One change of phase or reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transition {
    /// Counts the document's transitions from 1; the key in `history`.
    #[serde(skip)]
    pub number: u64,
    /// The phase before the transition.
    pub from: String,
    /// The phase after the transition (the same as `from` when only the reason changed).
    pub to: String,
    /// The new reason, one CamelCase word.
    pub reason: String,
    /// When the transition happened (RFC 3339, UTC, milliseconds).
    #[serde(serialize_with = "serialize_millis")]
    pub at: DateTime<Utc>,
}

/// Phase, reason, message, since and history of one status machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle<P> {
    /// The state the machine is in.
    pub phase: P,
    /// Why it is in that state, one CamelCase word (`Disconnected`, `Forbidden`, …).
    pub reason: String,
    /// A sentence for people (`2/3 ready (Deployment web: 2/3 ready)`).
    pub message: String,
    /// When the phase last changed; a new reason or message keeps it.
    #[serde(serialize_with = "serialize_millis")]
    pub since: DateTime<Utc>,
    /// The last [`HISTORY_LIMIT`] transitions, oldest first; serialized as an object keyed by number.
    #[serde(serialize_with = "history_by_number")]
    pub history: VecDeque<Transition>,
}

impl<P: Copy + PartialEq + std::fmt::Display> Lifecycle<P> {
    /// Starts a machine in `phase` at `now`, with an empty history.
    pub fn new(phase: P, reason: &str, message: impl Into<String>, now: DateTime<Utc>) -> Self {
        Self {
            phase,
            reason: reason.into(),
            message: message.into(),
            since: now,
            history: VecDeque::new(),
        }
    }

    /// Moves to `phase` with `reason`. A new phase or reason is recorded in
    /// the history; `since` moves only when the phase changes.
    pub fn set(&mut self, phase: P, reason: &str, message: impl Into<String>, now: DateTime<Utc>) {
        if phase != self.phase || reason != self.reason {
            let number = self.history.back().map_or(1, |t| t.number + 1);
            self.history.push_back(Transition {
                number,
                from: self.phase.to_string(),
                to: phase.to_string(),
                reason: reason.to_string(),
                at: now,
            });
            while self.history.len() > HISTORY_LIMIT {
                self.history.pop_front();
            }
        }
        if phase != self.phase {
            self.since = now;
        }
        self.phase = phase;
        self.reason = reason.to_string();
        self.message = message.into();
    }

    /// `Unhealthy (Disconnected)`, or just the phase when there is no reason to show.
    pub fn label(&self, show_reason: bool) -> String {
        if show_reason && !self.reason.is_empty() {
            format!("{} ({})", self.phase, self.reason)
        } else {
            self.phase.to_string()
        }
    }
}

/// The lifecycle fields of a published document, as read back.
#[derive(Debug, Deserialize)]
struct Published<P> {
    phase: P,
    reason: String,
    message: String,
    since: DateTime<Utc>,
    /// Keyed by transition number (decimal keys in the document).
    history: BTreeMap<u64, PublishedTransition>,
}

#[derive(Debug, Deserialize)]
struct PublishedTransition {
    from: String,
    to: String,
    reason: String,
    at: DateTime<Utc>,
}

impl<P: DeserializeOwned> Lifecycle<P> {
    /// The lifecycle a published document carries (`phase`, `reason`,
    /// `message`, `since`, `history`), for a machine that continues the
    /// document: its next transition is numbered after the last one kept.
    /// None when any of them is missing or malformed (a phase `P` does not
    /// have, a time that is not RFC 3339, a transition numbered 0).
    pub(crate) fn restore(doc: &Value) -> Option<Self> {
        let published = Published::<P>::deserialize(doc).ok()?;
        if published.history.contains_key(&0) {
            return None;
        }
        let skip = published.history.len().saturating_sub(HISTORY_LIMIT);
        let history = published
            .history
            .into_iter()
            .skip(skip)
            .map(|(number, t)| Transition {
                number,
                from: t.from,
                to: t.to,
                reason: t.reason,
                at: t.at,
            })
            .collect();
        Some(Self {
            phase: published.phase,
            reason: published.reason,
            message: published.message,
            since: published.since,
            history,
        })
    }
}

/// `{"7": {from, to, reason, at}, "8": …}`: numbers as decimal keys
/// (JavaScript iterates such keys in ascending numeric order).
fn history_by_number<S: Serializer>(
    history: &VecDeque<Transition>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(history.iter().map(|t| (t.number.to_string(), t)))
}

/// A document's `history` object (`{"7": {…}, "8": {…}}`) as an array,
/// oldest first, each entry with its `number`.
pub fn transitions(doc: &Value) -> Vec<Value> {
    let Some(history) = doc.get("history").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut entries: Vec<(u64, Value)> = history
        .iter()
        .filter_map(|(key, entry)| {
            let number = key.parse().ok()?;
            let mut entry = entry.clone();
            entry
                .as_object_mut()?
                .insert("number".into(), json!(number));
            Some((number, entry))
        })
        .collect();
    entries.sort_by_key(|(number, _)| *number);
    entries.into_iter().map(|(_, entry)| entry).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
    enum P {
        A,
        B,
    }

    impl std::fmt::Display for P {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn records_phase_and_reason_changes_only() {
        let mut l = Lifecycle::new(P::A, "Start", "m", t(0));
        l.set(P::A, "Start", "new message", t(1));
        assert!(l.history.is_empty());
        assert_eq!(l.message, "new message");
        l.set(P::A, "Other", "m", t(2));
        assert_eq!(l.history.len(), 1);
        assert_eq!(l.since, t(0), "a reason change keeps since");
        l.set(P::B, "X", "m", t(3));
        assert_eq!(l.since, t(3));
        assert_eq!(l.history.back().unwrap().from, "A");
        assert_eq!(l.label(true), "B (X)");
        for i in 0..50 {
            l.set(if i % 2 == 0 { P::A } else { P::B }, "Flip", "m", t(10 + i));
        }
        assert_eq!(l.history.len(), HISTORY_LIMIT);
        assert_eq!(l.history.back().unwrap().number, 52);
    }

    #[test]
    fn transitions_reads_history_oldest_first() {
        let doc = json!({"history": {"10": {"to": "B"}, "9": {"to": "A"}, "x": {"to": "?"}}});
        assert_eq!(
            transitions(&doc),
            [
                json!({"to": "A", "number": 9}),
                json!({"to": "B", "number": 10})
            ]
        );
        assert!(transitions(&json!({"phase": "A"})).is_empty());
    }

    #[test]
    fn history_is_keyed_by_number_so_patches_carry_only_what_changed() {
        let mut l = Lifecycle::new(P::A, "Start", "m", t(0));
        for i in 0..HISTORY_LIMIT as i64 {
            l.set(if i % 2 == 0 { P::B } else { P::A }, "Flip", "m", t(1 + i));
        }
        let before = serde_json::to_value(&l).unwrap();
        assert_eq!(before["history"].as_object().unwrap().len(), HISTORY_LIMIT);
        assert_eq!(
            before["history"]["1"],
            serde_json::json!({"from": "A", "to": "B", "reason": "Flip",
                "at": "2023-11-14T22:13:21.000Z"})
        );
        l.set(P::B, "Again", "m", t(100));
        let after = serde_json::to_value(&l).unwrap();
        let patch = crate::protocol::patch::merge_diff(&before, &after);
        assert_eq!(
            patch["history"],
            serde_json::json!({"1": null, "21": {"from": "A", "to": "B", "reason": "Again",
                "at": "2023-11-14T22:15:00.000Z"}})
        );
    }

    #[test]
    fn restore_reads_back_what_a_lifecycle_publishes() {
        let mut l = Lifecycle::new(P::A, "Start", "m", t(0));
        for i in 0..(HISTORY_LIMIT as i64 + 5) {
            l.set(if i % 2 == 0 { P::B } else { P::A }, "Flip", "m", t(1 + i));
        }
        l.set(P::A, "Other", "same phase, new reason", t(40));
        let doc = serde_json::to_value(&l).unwrap();
        let back = Lifecycle::<P>::restore(&doc).unwrap();
        assert_eq!(back, l);
        // The next transition continues the numbering.
        let (mut a, mut b) = (l, back);
        a.set(P::B, "Next", "m", t(50));
        b.set(P::B, "Next", "m", t(50));
        assert_eq!(a, b);
        assert_eq!(b.history.back().unwrap().number, HISTORY_LIMIT as u64 + 7);
        // A fresh lifecycle has no history to continue.
        let fresh = Lifecycle::new(P::B, "Start", "m", t(0));
        let doc = serde_json::to_value(&fresh).unwrap();
        assert_eq!(Lifecycle::<P>::restore(&doc), Some(fresh));
    }

    #[test]
    fn restore_ignores_malformed_documents() {
        let good = json!({"phase": "B", "reason": "X", "message": "m",
            "since": "2023-11-14T22:13:20.000Z",
            "history": {"1": {"from": "A", "to": "B", "reason": "X", "at": "2023-11-14T22:13:20.000Z"}}});
        assert!(Lifecycle::<P>::restore(&good).is_some());
        let with = |pointer: &str, value: Value| {
            let mut doc = good.clone();
            *doc.pointer_mut(pointer).unwrap() = value;
            doc
        };
        let without = |field: &str| {
            let mut doc = good.clone();
            doc.as_object_mut().unwrap().remove(field);
            doc
        };
        let cases = [
            (
                "a phase the machine does not have",
                with("/phase", json!("C")),
            ),
            ("a phase that is not a string", with("/phase", json!(1))),
            ("no reason", without("reason")),
            ("no message", without("message")),
            ("no since", without("since")),
            (
                "a since that is not a time",
                with("/since", json!("yesterday")),
            ),
            ("no history", without("history")),
            ("a history array", with("/history", json!([]))),
            (
                "a transition keyed by something else than a number",
                with("/history", json!({"x": good["history"]["1"].clone()})),
            ),
            (
                "a transition numbered 0",
                with("/history", json!({"0": good["history"]["1"].clone()})),
            ),
            (
                "a transition without its time",
                with("/history/1", json!({"from": "A", "to": "B", "reason": "X"})),
            ),
            ("not an object", json!("B")),
            ("null", Value::Null),
        ];
        for (name, doc) in cases {
            assert_eq!(Lifecycle::<P>::restore(&doc), None, "{name}: {doc}");
        }
    }
}
