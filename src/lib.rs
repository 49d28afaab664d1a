//! kube-pulse: a real-time push gateway for Kubernetes status.
//!
//! Data flow: member clusters ──watch──▶ sources ──▶ hub ──▶ transports ──▶
//! browsers; health beside. [`sim`] is the Kubernetes API simulator that
//! stands in for member clusters in tests, benchmarks and the demo.

pub mod auth;
pub mod cli;
pub mod config;
pub mod demo;
pub mod engine;
pub mod error;
pub mod gateway;
pub mod health;
pub mod http_server;
pub mod hub;
pub mod metrics;
pub mod pipeline;
pub mod protocol;
pub mod rest;
pub mod scenario;
pub mod serve;
pub mod shutdown;
pub mod sim;
pub mod sources;
pub mod status;
pub mod tasks;
pub mod telemetry;
pub mod transports;
pub mod web;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod testing;

pub use error::{Error, Result};
