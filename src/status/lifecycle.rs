//! What every status document carries: `phase`, `reason`, `message`, `since`
//! (time of the last phase change) and a bounded `history` of transitions.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// How many transitions a document keeps.
pub const HISTORY_LIMIT: usize = 20;

/// One change of phase or reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transition {
    pub from: String,
    pub to: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// Phase, reason, message, since and history of one status machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle<P> {
    pub phase: P,
    pub reason: String,
    pub message: String,
    pub since: DateTime<Utc>,
    pub history: VecDeque<Transition>,
}

impl<P: Copy + PartialEq + std::fmt::Display> Lifecycle<P> {
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
            self.history.push_back(Transition {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq)]
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
    }
}
