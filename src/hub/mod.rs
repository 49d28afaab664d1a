//! The hub: in-memory state keyed by topic (`sources → engine → [hub] →
//! transports`). It assigns per-topic revisions and a hub-wide sequence
//! within a process epoch, keeps a bounded replay log, computes each change's
//! JSON merge patch and its JSON message once, and fans changes out to
//! subscriptions through a pattern index. A topic's name is parsed into a [`Topic`] once, when the
//! hub first holds it; changes, resyncs and snapshots carry that form. A slow subscription never blocks it: its queue is bounded
//! and, when full, the topics it missed are resent as fresh snapshots.
//!
//! Its parts: the hub's state and publishing (`state`), changes from other
//! replicas (`remote`, `position`), a change and its encoding (`change`),
//! how current each member's documents are (`freshness`), what clients'
//! subscriptions look at (`demand`),
//! the replay log (`log`), subscriptions (`subscription`) and their queues
//! (`queue`), the pattern index (`pattern`), settings and counters.

mod change;
mod demand;
mod freshness;
mod log;
mod pattern;
mod position;
mod queue;
mod remote;
#[cfg(test)]
mod resume_tests;
mod settings;
mod state;
mod stats;
mod subscription;
#[cfg(test)]
mod tests;

pub use crate::protocol::topic::Topic;
pub use change::{Change, ChangeKind, EncodeCache};
pub use demand::{Demand, DemandGuard, MAX_REPORTING};
pub use freshness::Freshness;
pub use pattern::Pattern;
pub use settings::{DEFAULT_LOG_AGE, DEFAULT_LOG_BYTES, HubConfig};
pub use state::{Hub, TopicDoc};
pub use stats::HubStats;
pub use subscription::{Delivery, Replayed, Subscription};
