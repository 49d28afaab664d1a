//! The simulator's integration tests, one module per area, in one test
//! binary (the shared fixtures are the `pulse-testkit` crate).

mod apiserver;
mod karpor;
mod kubectl;
mod members;
mod metadata;
mod pods;
mod sim_kube;
mod tables;
mod tls;
