//! Shared fixtures for the simulator's integration tests.
#![allow(dead_code)]

#[allow(unused_imports)]
pub(crate) use kube_pulse_sim::testing::{eventually, kubectl, ok, sim, sim_with};

/// A plain HTTP client for raw requests.
pub(crate) fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .unwrap()
}
