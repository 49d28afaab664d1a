//! Prometheus metrics (`engine, transports, HTTP layer, sources, Karpor,
//! scale-out ──events──▶ [metrics] ◀──scrape── /metrics`; `hub ──state at
//! scrape──▶ [metrics]`), registered in one place (`registry.rs`) and
//! served at `/metrics` (text format). Instruments that count events are
//! updated where the events happen (engine, transports, HTTP layer), and so
//! are open sessions; gauges of the hub's state (phases, sizes) are
//! refreshed from it at scrape time, so nothing is counted twice. The
//! families are grouped by the stage they measure: `http.rs` (requests,
//! sessions, TCP connections, delivery lag), `hub_state.rs` (the hub and
//! its replay log), `members.rs` (reloads, sources, cluster and sync
//! phases), `tasks.rs`, `karpor.rs` and `scale.rs` (Leases, the stream of
//! changes). Nothing here imports more of the crate than the hub.

mod http;
mod hub_state;
mod karpor;
mod members;
mod registry;
mod scale;
mod tasks;

pub(crate) use http::HttpLabels;
pub(crate) use members::{ClusterLabels, ResourceLabels, WatchLabels};
pub use registry::Metrics;
