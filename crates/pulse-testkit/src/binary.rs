//! The `kube-pulse` binary as a child process: started, its address read
//! from stdout, stopped with SIGTERM, its memory read.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `kube-pulse demo` with one member and no scenario on 127.0.0.1:0.
const DEMO: [&str; 6] = [
    "demo",
    "--listen",
    "127.0.0.1:0",
    "--clusters",
    "1",
    "--no-scenario",
];

/// `kube-pulse demo` with one member and no scenario on 127.0.0.1:0, then `extra`.
pub fn demo<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    [&DEMO[..], extra].concat()
}

/// The `kube-pulse` executable Cargo built beside the running test binary.
pub fn path() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut dir = exe.parent().expect("a directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let binary = dir.join(format!("kube-pulse{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "{} is built for the gateway's integration tests",
        binary.display()
    );
    binary
}

/// The kube-pulse binary, started with `args`, stdout piped.
pub fn spawn_binary(args: &[&str]) -> Child {
    Command::new(path())
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts")
}

/// Reads stdout lines of `child` until one contains `http://`, returning the URL.
pub fn wait_for_url(child: &mut Child) -> String {
    use std::io::{BufRead, BufReader};
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find("http://") {
                let _ = tx.send(line[at..].trim_end_matches('/').to_string());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the binary prints the address it listens on")
}

/// Sends SIGTERM and waits (bounded) for the process to exit; returns its status.
pub fn terminate(child: &mut Child) -> ExitStatus {
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process did not stop within 20 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The resident set size (`VmRSS`) of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// A running `kube-pulse` process and its base URL, killed when dropped
/// (a failed assertion leaves nothing behind).
#[derive(Debug)]
pub struct Binary {
    /// The process.
    pub child: Child,
    /// Its base URL, `http://IP:PORT`.
    pub url: String,
}

impl Binary {
    /// Starts the binary with `args` and waits until it prints its address.
    pub fn start(args: &[&str]) -> Self {
        let mut child = spawn_binary(args);
        let url = wait_for_url(&mut child);
        Self { child, url }
    }

    /// The process's resident set size, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id())
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
