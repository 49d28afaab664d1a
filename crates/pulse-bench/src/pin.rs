//! `--pin`: the server under test on a core of its own, the benchmark (its
//! load generator, and kube-pulse's simulated member) on the others, so
//! that a latency figure is the server's and not the two sharing a core.
//! Done with util-linux's `taskset`: servers are started under it, and this
//! process's threads are moved off the server's core when pinning starts.

use std::ffi::OsStr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// The core servers run on once pinning is on.
const SERVER_CPU: usize = 0;

static PINNED: AtomicBool = AtomicBool::new(false);

/// The cores left to the benchmark on a machine of `cpus` cores.
fn bench_cpus(cpus: usize) -> String {
    (0..cpus)
        .filter(|&c| c != SERVER_CPU)
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Pins every server started from now on to core 0 and this process to the
/// rest. Needs two cores or more and `taskset`.
pub(crate) fn start() -> anyhow::Result<()> {
    let cpus = std::thread::available_parallelism()?.get();
    anyhow::ensure!(
        cpus >= 2,
        "--pin needs two cores or more, this machine has {cpus}"
    );
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", &bench_cpus(cpus)])
        .arg(std::process::id().to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| anyhow::anyhow!("--pin needs taskset (util-linux): {e}"))?;
    anyhow::ensure!(
        status.success(),
        "taskset could not pin the benchmark: {status}"
    );
    PINNED.store(true, Ordering::Relaxed);
    Ok(())
}

/// Whether servers are pinned.
pub(crate) fn pinned() -> bool {
    PINNED.load(Ordering::Relaxed)
}

/// A command for a server process: run under `taskset` on the server's core
/// when pinning is on.
pub(crate) fn server(program: impl AsRef<OsStr>) -> Command {
    if pinned() {
        let mut command = Command::new("taskset");
        command.args(["-c", &SERVER_CPU.to_string()]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_benchmark_keeps_every_core_but_the_servers() {
        assert_eq!(bench_cpus(2), "1");
        assert_eq!(bench_cpus(4), "1,2,3");
    }

    #[test]
    fn an_unpinned_server_runs_as_itself() {
        let command = server("nginx");
        assert_eq!(command.get_program(), "nginx");
    }
}
