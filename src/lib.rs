//! kube-pulse: a real-time push gateway for Kubernetes status.
//!
//! ```text
//! member clusters ──watch──▶ sources ──Observation──▶ engine ──documents──▶ hub ──Change──▶ transports ──▶ browsers
//!                            (probe, watchers)         (status machines)    (revisions,       (SSE, WebSocket;
//!                                                                            replay, patterns)  REST reads the hub)
//! member sources (file, kubeconfig, Karpor) ──▶ pipeline ──▶ sources      tasks ──Observation──▶ engine
//! health, metrics, auth beside every stage; http/ serves it all; gateway/ starts it all
//! ```
//!
//! The Kubernetes API simulator that stands in for member clusters in
//! tests, benchmarks and the demo is the crate `kube-pulse-sim`, reached
//! only through the `demo` feature. `docs/ARCHITECTURE.md` lists every
//! module bottom-up, with the rules no import may break.

#![warn(missing_docs)]

pub mod agent;
pub mod auth;
mod classify;
pub mod cli;
pub mod config;
#[cfg(feature = "demo")]
pub mod demo;
pub mod engine;
pub mod error;
pub mod gateway;
pub mod health;
pub mod http;
pub mod http_settings;
pub mod hub;
pub mod karpor;
pub mod metrics;
mod names;
pub mod pipeline;
pub mod protocol;
pub mod query;
mod relist;
pub mod scale;
pub mod shutdown;
pub mod sources;
pub mod status;
pub mod tasks;
pub mod telemetry;
pub mod transports;
mod write_through;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod testing;

pub use error::{Error, Result};
