//! Fixtures for tests that drive the simulator: clusters on ephemeral
//! loopback ports with a fast controller, kubectl runs, and polling.

use std::future::Future;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::{ConvergeConfig, SimCluster, SimConfig};

/// A simulated cluster with a fast controller and frequent bookmarks.
pub async fn sim() -> SimCluster {
    sim_with(|_| {}).await
}

/// A simulated cluster with a configuration adjusted by `tweak`.
pub async fn sim_with(tweak: impl FnOnce(&mut SimConfig)) -> SimCluster {
    let mut config = SimConfig {
        converge: ConvergeConfig {
            tick: Duration::from_millis(50),
            pods_per_tick: 1,
        },
        bookmark_interval: Duration::from_millis(200),
        namespaces: vec!["shop".into()],
        ..SimConfig::named("test")
    };
    tweak(&mut config);
    SimCluster::start(config)
        .await
        .expect("simulated cluster starts")
}

/// Polls `check` every 20 ms until it returns Some, or panics after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs kubectl against `server` and returns its output (blocking call on a worker thread).
pub async fn kubectl(server: &str, args: &[&str]) -> Output {
    let mut full = vec![
        "--server".to_string(),
        server.to_string(),
        "--request-timeout=20s".into(),
    ];
    full.extend(args.iter().map(|s| s.to_string()));
    tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .args(&full)
            .env("KUBECONFIG", "/dev/null")
            .env("HOME", std::env::temp_dir())
            .output()
            .expect("kubectl is installed (scripts/test.sh installs it)")
    })
    .await
    .unwrap()
}

/// Asserts kubectl succeeded without anything on stderr and returns stdout.
pub fn ok(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(
        output.status.success(),
        "kubectl failed: {stderr}\n{stdout}"
    );
    assert!(
        stderr.trim().is_empty(),
        "kubectl wrote to stderr: {stderr}"
    );
    stdout
}
