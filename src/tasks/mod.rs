//! Tasks: user actions on an app and the transitional states they show
//! (`Starting`, `Stopping`, `Deleting`, `Updating`) with live progress.
//!
//! ```text
//! API ──▶ [Tasks] ──▶ board ──▶ store     (one active task per app)
//!            │          ▲ │ ├──▶ hub: tasks/{id}
//!            │          │ │ └──Observation::Task──▶ engine ──▶ hub: apps/… (state, task)
//!            └──▶ executor ──kube-rs──▶ member cluster
//!                    ▲ hub: apps/… (what the watches report → progress)
//! ```
//!
//! The HTTP API over it is src/http/tasks.rs. Every write goes through the board (`board.rs`), which stores, then
//! publishes the task and the app's transitional slot, one write at a time.

mod board;
mod executor;
pub mod model;
mod progress;
mod reach;
mod service;
pub mod store;

pub use executor::act_for_hub;
pub use model::{Executor, StatusReport, Target, Task, TaskRequest, TaskStatus, TaskType};
pub use service::{TaskFilter, TaskSettings, Tasks};
pub use store::{Created, MemoryStore, StoreError, TaskChange, TaskStore};
