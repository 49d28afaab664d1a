//! A real `nats-server` for the tests that need one (the stream of changes,
//! the NATS deployment, the stream metrics). Without the binary those tests
//! say so and pass, unless `CI` is set: then they fail.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::eventually;

/// Generous bound for a server to accept connections on a loaded machine.
const WITHIN: Duration = Duration::from_secs(120);

/// A `nats-server` with JetStream on a free loopback port, killed on drop.
pub(crate) struct Nats {
    binary: PathBuf,
    child: Option<Child>,
    port: u16,
    /// `nats://127.0.0.1:PORT`.
    pub(crate) url: String,
    dir: tempfile::TempDir,
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Nats {
    /// Starts the server (again: same port, same store) and waits until
    /// it accepts connections.
    pub(crate) async fn start(&mut self) {
        let child = Command::new(&self.binary)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        self.child = Some(child);
        let port = self.port;
        eventually(WITHIN, "nats-server accepts connections", || async {
            TcpStream::connect(("127.0.0.1", port)).ok().map(drop)
        })
        .await;
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `nats-server` binary: on PATH, or where Debian installs it.
pub(crate) fn nats_server() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("nats-server"))
        .find(|p| p.is_file())
}

/// Starts NATS, or None (with a message) when the binary is missing
/// outside CI; with `CI` set a missing binary fails the test.
pub(crate) async fn nats() -> Option<Nats> {
    let binary = nats_server_or_skip()?;
    let port = free_port();
    let mut nats = Nats {
        binary,
        child: None,
        port,
        url: format!("nats://127.0.0.1:{port}"),
        dir: tempfile::tempdir().unwrap(),
    };
    nats.start().await;
    Some(nats)
}

/// The binary, or None (with a message) when it is missing outside CI;
/// with `CI` set a missing binary fails the test.
pub(crate) fn nats_server_or_skip() -> Option<PathBuf> {
    let binary = nats_server();
    if binary.is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
        assert!(
            !ci,
            "nats-server is not installed (scripts/test.sh installs it: apt-get install nats-server)"
        );
        eprintln!(
            "SKIPPED: nats-server is not installed; `apt-get install nats-server` (or scripts/test.sh) to run the tests that need it"
        );
    }
    binary
}

/// A loopback port free a moment ago.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
