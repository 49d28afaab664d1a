//! Status machines, the product: pure functions `(state, input, now) → state`
//! for member clusters, sync registries and applications
//! (`sources ──Observation──▶ [status machines] ──▶ hub`).
//!
//! No sockets, clocks or locks here: the engine feeds inputs and the time.

pub mod app;
pub mod capacity;
pub mod cluster;
pub mod labels;
pub mod lifecycle;
pub(crate) mod objects;
pub mod pods;
pub mod rules;
pub mod summary;
pub mod sync;
pub mod time;

pub use lifecycle::{Lifecycle, Transition};
