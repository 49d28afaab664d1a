//! The fixtures of kube-pulse's integration tests, shared by the gateway's
//! test binary (`tests/gateway`) and the simulator's (`crates/kube-pulse-sim/tests/sim`).
//!
//! Each module is named for what it provides: simulated clusters ([`sim`]),
//! polling ([`poll`]), kubectl and kustomize ([`kubectl`]), rendered
//! manifests ([`manifests`]), Helm's engine ([`helm`]), plain HTTP
//! ([`http`]), the `kube-pulse` binary ([`binary`]), gateways in this process
//! ([`gateway`]), clients of each transport ([`ws`], [`sse`], [`docs`],
//! [`mirror`]), the real binary over three members ([`fleet`]), NATS
//! ([`nats`]), replicas that share members ([`scale`]), watchers of the
//! simulator ([`watch`]) and the turns heavy tests take ([`load`]).

#![warn(missing_docs)]

pub mod binary;
pub mod docs;
pub mod fleet;
pub mod gateway;
pub mod helm;
pub mod http;
pub mod kubectl;
pub mod load;
pub mod manifests;
pub mod mirror;
pub mod nats;
pub mod poll;
pub mod scale;
pub mod sim;
pub mod sse;
pub mod watch;
pub mod ws;

/// A tool a test needs is missing (`what` says which, and how to get it):
/// with `CI` set the test fails, since scripts/test.sh installs every tool;
/// elsewhere the caller skips the test, and this says so.
pub fn missing(what: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(!ci, "{what}");
    eprintln!("SKIPPED: {what}");
}
