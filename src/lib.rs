//! kube-pulse: a real-time push gateway for Kubernetes status.
//!
//! Data flow: member clusters ──watch──▶ sources ──▶ hub ──▶ transports ──▶
//! browsers; health beside. This crate also carries [`sim`], the Kubernetes
//! API simulator that stands in for member clusters in tests and the demo.

pub mod sim;
