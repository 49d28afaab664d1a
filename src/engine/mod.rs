//! The engine: the single task between sources and the hub
//! (`sources ──Observation──▶ [engine: status machines] ──▶ hub`). It keeps
//! per-cluster models (workloads, namespaces, sync states), runs the status
//! machines, and puts the resulting documents into the hub, which publishes
//! only real changes — so a relist that changes nothing publishes nothing.
//!
//! A member's machines start from the documents the hub already holds for
//! it, when it holds any: with a stream of changes, those another replica
//! published while it ran the member, so a new owner continues them (phase,
//! `since`, history). Without one the hub holds none of a member the
//! engine starts: a removed member's topics go with it.
//!
//! Its parts: the engine's state and `apply` (`state`), a member's model
//! (`model`) and its pods (`pod_index`), both found by label (`by_label`), cluster and sync documents (`cluster`), app documents
//! (`apps`), app retention (`retention`), the task loop (`task`), the
//! summary topics (`summaries`) and transition logging (`transitions`).

mod apps;
mod by_label;
mod capacity;
mod cluster;
mod model;
mod observation;
mod pod_index;
mod pushed;
mod pushed_model;
mod retention;
mod state;
mod summaries;
mod task;
#[cfg(test)]
mod tests;
mod transitions;

pub use observation::{Observation, PushedInput};
pub(crate) use state::{DEFAULT_APP_RETENTION, Engine};
pub(crate) use task::run;
