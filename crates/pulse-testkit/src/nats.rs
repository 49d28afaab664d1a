//! A real `nats-server` for the tests that need one (the stream of changes,
//! the NATS deployment, the stream metrics), one with a configuration of
//! its own (authorization, TLS) and the certificates such tests make, or
//! three of them in one JetStream cluster on loopback. Without the binary those tests say so and
//! pass, unless `CI` is set: then they fail.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::http::{http, metric, readiness};
use crate::poll::eventually;

/// Generous bound for a server to accept connections on a loaded machine.
const WITHIN: Duration = Duration::from_secs(120);

/// A `nats-server` with JetStream on a free loopback port, killed on drop.
#[derive(Debug)]
pub struct Nats {
    binary: PathBuf,
    child: Option<Child>,
    port: u16,
    /// `nats://127.0.0.1:PORT`.
    pub url: String,
    dir: tempfile::TempDir,
    /// Its configuration file, when it has one.
    config: Option<PathBuf>,
    /// Variables of its environment (what the configuration's `$NAME`s read).
    env: Vec<(String, String)>,
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Nats {
    /// Starts the server (again: same port, same store) and waits until
    /// it says it is ready; panics with its last words if it exits first.
    pub async fn start(&mut self) {
        if let Err(words) = self.try_start().await {
            panic!("nats-server on port {} exited: {words}", self.port);
        }
    }

    /// Starts the server and waits until it logs that it is ready (which
    /// it does once it listens: a port that answers could be another
    /// process's); Err with its last log lines when it exits first (the
    /// port was taken, the configuration refused).
    async fn try_start(&mut self) -> Result<(), String> {
        let mut command = Command::new(&self.binary);
        if let Some(config) = &self.config {
            command.arg("-c").arg(config);
        }
        let mut child = command
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.dir.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nats-server starts");
        let started = started(child.stderr.take().expect("stderr piped"));
        self.child = Some(child);
        let deadline = std::time::Instant::now() + WITHIN;
        loop {
            match started.try_recv() {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(words)) => {
                    self.kill();
                    return Err(words);
                }
                Err(_) => {}
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out after {WITHIN:?} waiting for nats-server to be ready"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until the replica at `url` is connected to NATS again: its
/// `/readyz/Nats` passes and `kube_pulse_stream_connected` is 1.
pub async fn stream_connected_again(url: &str) {
    eventually(WITHIN, "/readyz/Nats passes again", || async {
        (readiness(url, "Nats").await.0 == 200).then_some(())
    })
    .await;
    let connected = r#"kube_pulse_stream_connected{stream="KUBE_PULSE"}"#;
    eventually(WITHIN, "kube_pulse_stream_connected 1 again", || async {
        (metric(url, connected).await == 1.0).then_some(())
    })
    .await;
}

/// The `nats-server` binary: on PATH, or where Debian installs it.
fn nats_server() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("nats-server"))
        .find(|p| p.is_file())
}

/// The key the replicas of a test sign their changes and task entries
/// with (`--nats-signing-key-file`): the same for every replica.
pub const SIGNING_KEY: &str = "kube-pulse test signing key: 32 bytes or more of it";

/// [`SIGNING_KEY`] as the gateway's library takes it.
pub fn signing_key() -> kube_pulse::scale::SigningKey {
    kube_pulse::scale::SigningKey::from_bytes(SIGNING_KEY.as_bytes()).expect("a long enough key")
}

/// Writes [`SIGNING_KEY`] into `dir/signing.key`, for the binary's
/// `--nats-signing-key-file`.
pub fn signing_key_file(dir: &std::path::Path) -> PathBuf {
    let path = dir.join("signing.key");
    std::fs::write(&path, format!("{SIGNING_KEY}\n")).unwrap();
    path
}

/// Starts NATS, or None (with a message) when the binary is missing
/// outside CI; with `CI` set a missing binary fails the test.
pub async fn nats() -> Option<Nats> {
    nats_with_config(None, &[]).await
}

/// Starts NATS with the configuration `conf` (nats.conf's format: its
/// authorization, accounts, TLS; the port, the address and the store are
/// given as flags, which win over the file) and `env` in its environment;
/// None (with a message) when the binary is missing outside CI.
pub async fn nats_with_config(conf: Option<&str>, env: &[(&str, &str)]) -> Option<Nats> {
    let binary = nats_server_or_skip()?;
    let mut words = String::new();
    for attempt in 1..=3 {
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let config = conf.map(|text| {
            let path = dir.path().join("nats.conf");
            std::fs::write(&path, text).unwrap();
            path
        });
        let mut nats = Nats {
            binary: binary.clone(),
            child: None,
            port,
            url: format!("nats://127.0.0.1:{port}"),
            dir,
            config,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        match nats.try_start().await {
            Ok(()) => return Some(nats),
            Err(said) => {
                eprintln!(
                    "nats-server exited as it started on port {port} (attempt {attempt}): {said}"
                );
                words = said;
            }
        }
    }
    panic!(
        "nats-server did not start in three attempts, each on a port free a moment before: {words}"
    );
}

/// Reads a starting server's log: Ok once it says it is ready, Err with
/// its last lines if it ends first. The log is read to its end either
/// way, so that the server never blocks on a full pipe.
fn started(stderr: std::process::ChildStderr) -> std::sync::mpsc::Receiver<Result<(), String>> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut last = std::collections::VecDeque::new();
        let mut ready = false;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !ready && line.contains("Server is ready") {
                ready = true;
                let _ = tx.send(Ok(()));
            }
            if !ready {
                if last.len() == 5 {
                    last.pop_front();
                }
                last.push_back(line);
            }
        }
        if !ready {
            let _ = tx.send(Err(Vec::from(last).join(" | ")));
        }
    });
    rx
}

/// Certificates for TLS with NATS, made now: a private CA, a server
/// certificate it signed for `localhost` and 127.0.0.1, and a client
/// certificate it signed; each as a PEM file in `dir`.
#[derive(Debug)]
pub struct TestPki {
    /// The CA's certificate.
    pub ca: PathBuf,
    /// The server's certificate and key.
    pub server_cert: PathBuf,
    /// The server's key.
    pub server_key: PathBuf,
    /// The client's certificate.
    pub client_cert: PathBuf,
    /// The client's key.
    pub client_key: PathBuf,
    /// A CA nobody else trusts, for a server certificate the client refuses.
    pub other_ca: PathBuf,
    /// Where the files are (removed on drop).
    pub dir: tempfile::TempDir,
}

/// Makes a [`TestPki`].
pub fn test_pki() -> TestPki {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, pem: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    let ca = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), Issuer::new(params, key))
    };
    let (ca_pem, issuer) = ca("kube-pulse test CA");
    let (other_pem, _) = ca("another CA");
    let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(
        vec!["localhost".into(), "127.0.0.1".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_cert, client_key) = leaf(
        vec!["kube-pulse".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    TestPki {
        ca: write("ca.pem", ca_pem),
        server_cert: write("server.pem", server_cert),
        server_key: write("server-key.pem", server_key),
        client_cert: write("client.pem", client_cert),
        client_key: write("client-key.pem", client_key),
        other_ca: write("other-ca.pem", other_pem),
        dir,
    }
}

/// The binary, or None (with a message) when it is missing outside CI;
/// with `CI` set a missing binary fails the test.
pub fn nats_server_or_skip() -> Option<PathBuf> {
    let binary = nats_server();
    if binary.is_none() {
        crate::missing(
            "nats-server is not installed; `apt-get install nats-server` (or scripts/test.sh) to run the tests that need it",
        );
    }
    binary
}

/// Where a stream is in a [`NatsCluster`].
#[derive(Debug)]
pub struct Placement {
    /// The server leading it.
    pub leader: String,
    /// Every server with a copy, by name.
    pub servers: Vec<String>,
    /// Every copy is current with the leader.
    pub current: bool,
}

/// One server of a [`NatsCluster`].
#[derive(Debug)]
struct Node {
    /// `server_name`: `n1`, `n2`, `n3`.
    name: String,
    client: u16,
    route: u16,
    monitor: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// Three `nats-server -js` in one JetStream cluster (`kp`) on loopback,
/// each with its own store, routes to all three, and a monitoring port;
/// killed on drop.
#[derive(Debug)]
pub struct NatsCluster {
    binary: PathBuf,
    nodes: Vec<Node>,
    /// Every server's `nats://127.0.0.1:PORT`, separated by commas.
    pub url: String,
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}

/// Starts a three-server JetStream cluster and waits until every server
/// is healthy and JetStream has a meta leader; None (with a message) when
/// the binary is missing outside CI. Its nine loopback ports are picked
/// free a moment before the servers bind them, so another test may take
/// one first: a server that exits while the cluster forms (it cannot
/// listen) makes the cluster start again on other ports, up to three times.
pub async fn nats_cluster() -> Option<NatsCluster> {
    let binary = nats_server_or_skip()?;
    for attempt in 1..=3 {
        let nodes: Vec<Node> = (1..=3)
            .map(|n| Node {
                name: format!("n{n}"),
                client: free_port(),
                route: free_port(),
                monitor: free_port(),
                dir: tempfile::tempdir().unwrap(),
                child: None,
            })
            .collect();
        let url = nodes
            .iter()
            .map(|n| format!("nats://127.0.0.1:{}", n.client))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = NatsCluster {
            binary: binary.clone(),
            nodes,
            url,
        };
        for i in 0..3 {
            cluster.spawn(i);
        }
        if let Some(exited) = cluster.first_healthy().await {
            eprintln!(
                "nats-server {exited} exited while the cluster formed (attempt {attempt}): starting it again on other ports"
            );
            continue;
        }
        cluster.wait_formed().await;
        return Some(cluster);
    }
    panic!("a three-server NATS cluster did not start in three attempts");
}

impl NatsCluster {
    /// The servers' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// The position of the server named `name`.
    pub fn index_of(&self, name: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .unwrap_or_else(|| panic!("no server {name}"))
    }

    fn spawn(&mut self, i: usize) {
        let routes = self
            .nodes
            .iter()
            .map(|n| format!("nats://127.0.0.1:{}", n.route))
            .collect::<Vec<_>>()
            .join(",");
        let node = &mut self.nodes[i];
        let child = Command::new(&self.binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &node.client.to_string()])
            .args(["-m", &node.monitor.to_string()])
            .args(["--cluster", &format!("nats://127.0.0.1:{}", node.route)])
            .args(["--routes", &routes, "--cluster_name", "kp"])
            .args(["--server_name", &node.name, "-sd"])
            .arg(node.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        node.child = Some(child);
    }

    /// Starts server `i` again (same ports, same store) and waits until it
    /// is healthy in the cluster.
    pub async fn start(&mut self, i: usize) {
        self.spawn(i);
        self.wait_healthy(i).await;
    }

    /// Kills server `i` with SIGKILL: nothing is written or handed over.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `GET /path` on server `i`'s monitoring port, as JSON.
    pub async fn monitor(&self, i: usize, path: &str) -> Option<serde_json::Value> {
        let url = format!("http://127.0.0.1:{}{path}", self.nodes[i].monitor);
        let response = http().get(url).send().await.ok()?;
        response.json().await.ok()
    }

    /// Waits until every server is healthy ([`Self::wait_healthy`]), or
    /// until one exits: then its name.
    async fn first_healthy(&mut self) -> Option<String> {
        let deadline = std::time::Instant::now() + WITHIN;
        loop {
            for node in &mut self.nodes {
                if let Some(Ok(Some(_))) = node.child.as_mut().map(|c| c.try_wait()) {
                    return Some(node.name.clone());
                }
            }
            let mut all = true;
            for i in 0..self.nodes.len() {
                all &= self.healthy(i).await.is_some();
            }
            if all {
                return None;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out after {WITHIN:?} waiting for every nats-server healthy with a JetStream meta leader"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until server `i` answers `/healthz` with 200 (JetStream on,
    /// the meta group current) and names a meta leader in `/jsz`.
    async fn wait_healthy(&self, i: usize) {
        let what = format!(
            "{} healthy with a JetStream meta leader",
            self.nodes[i].name
        );
        eventually(WITHIN, &what, || self.healthy(i)).await;
    }

    /// Whether server `i` answers `/healthz` with 200 and names a meta leader.
    async fn healthy(&self, i: usize) -> Option<()> {
        let url = format!("http://127.0.0.1:{}/healthz", self.nodes[i].monitor);
        let healthy = http().get(&url).send().await.ok()?.status() == 200;
        let jsz = self.monitor(i, "/jsz").await?;
        let leader = jsz["meta_cluster"]["leader"].as_str().unwrap_or_default();
        (healthy && !leader.is_empty()).then_some(())
    }

    /// Until the JetStream meta leader counts every other server as a
    /// current peer: before that, a stream with a copy on each server may
    /// not be placed within the client's request timeout.
    async fn wait_formed(&self) {
        let others = self.nodes.len() - 1;
        eventually(WITHIN, "every server a current JetStream peer", || async {
            for i in 0..self.nodes.len() {
                let jsz = self.monitor(i, "/jsz").await?;
                let meta = &jsz["meta_cluster"];
                if meta["leader"].as_str() != Some(self.nodes[i].name.as_str()) {
                    continue;
                }
                let peers = meta["replicas"].as_array()?;
                let current = peers.iter().filter(|p| p["current"] == true).count();
                return (current == others).then_some(());
            }
            None
        })
        .await;
        self.wait_placeable().await;
    }

    /// Waits until the cluster places a stream of three copies: a meta
    /// leader that counts its peers current may still time out the first
    /// stream's creation while the peers catch up. A probe stream is made
    /// and deleted again.
    async fn wait_placeable(&self) {
        let servers: Vec<&str> = self.url.split(',').collect();
        let client = async_nats::connect(servers)
            .await
            .expect("a client connects to the cluster");
        let js = async_nats::jetstream::new(client);
        eventually(WITHIN, "a stream of three copies is placed", || {
            let js = js.clone();
            async move {
                let config = async_nats::jetstream::stream::Config {
                    name: "KUBE_PULSE_TESTKIT_READY".into(),
                    subjects: vec!["kube-pulse-testkit.ready".into()],
                    num_replicas: 3,
                    ..Default::default()
                };
                js.get_or_create_stream(config).await.ok()?;
                js.delete_stream("KUBE_PULSE_TESTKIT_READY").await.ok()?;
                Some(())
            }
        })
        .await;
    }

    /// Where `stream` is, as server `i` reports it (`/jsz?streams=true`
    /// lists the streams a server has a copy of, and the other servers
    /// with one); None if it has no copy, or it has others and no leader.
    pub async fn placement(&self, i: usize, stream: &str) -> Option<Placement> {
        let jsz = self.monitor(i, "/jsz?streams=true").await?;
        let accounts = jsz["account_details"].as_array()?;
        let detail = accounts
            .iter()
            .flat_map(|a| a["stream_detail"].as_array().cloned().unwrap_or_default())
            .find(|s| s["name"] == stream)?;
        let cluster = &detail["cluster"];
        let peers = cluster["replicas"].as_array().cloned().unwrap_or_default();
        let here = self.nodes[i].name.clone();
        let leader = match cluster["leader"].as_str().filter(|l| !l.is_empty()) {
            Some(leader) => leader.to_string(),
            None if peers.is_empty() => here.clone(),
            None => return None,
        };
        let mut servers = vec![here];
        let mut current = true;
        for peer in &peers {
            servers.push(peer["name"].as_str()?.to_string());
            current &= peer["current"] == true;
        }
        servers.sort();
        servers.dedup();
        Some(Placement {
            leader,
            servers,
            current,
        })
    }

    /// The names of the client connections of server `i` (`/connz`).
    pub async fn clients(&self, i: usize) -> Vec<String> {
        let Some(connz) = self.monitor(i, "/connz").await else {
            return Vec::new();
        };
        connz["connections"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c["name"].as_str().map(String::from))
            .collect()
    }
}

/// A loopback port free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The task bucket's stream as src/scale/task_bucket.rs makes it, for
/// tests that make it as another user would.
pub fn task_bucket_stream() -> async_nats::jetstream::stream::Config {
    async_nats::jetstream::stream::Config {
        name: "KV_KUBE_PULSE_TASKS".into(),
        subjects: vec!["$KV.KUBE_PULSE_TASKS.>".into()],
        max_messages_per_subject: 1,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: async_nats::jetstream::stream::DiscardPolicy::New,
        ..Default::default()
    }
}

/// `nats-server -t` on the nats.conf `text` (its `store_dir` moved to a
/// temporary directory, `env` in the server's environment for the
/// `$NAME`s it reads): Ok, or the server's complaint; None (with a
/// message) when the binary is missing outside CI.
pub fn check_config(text: &str, env: &[(&str, &str)]) -> Option<Result<(), String>> {
    let binary = nats_server_or_skip()?;
    let dir = tempfile::tempdir().unwrap();
    let local: String = text
        .lines()
        .map(|line| match line.split_once("store_dir:") {
            Some((indent, _)) if indent.trim().is_empty() => {
                format!("{indent}store_dir: {}\n", dir.path().display())
            }
            _ => format!("{line}\n"),
        })
        .collect();
    let conf = dir.path().join("nats.conf");
    std::fs::write(&conf, local).unwrap();
    let out = Command::new(binary)
        .arg("-c")
        .arg(&conf)
        .arg("-t")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    Some(if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port that answers is not enough: a server whose port another
    /// process holds exits, and the start says so with its words.
    #[tokio::test]
    async fn a_taken_port_is_an_exit_with_the_servers_words_not_a_start() {
        // The check lane runs before scripts/test.sh installs nats-server.
        let Some(binary) = nats_server() else {
            eprintln!("skipped: no nats-server (scripts/test.sh installs it)");
            return;
        };
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = holder.local_addr().unwrap().port();
        let mut nats = Nats {
            binary,
            child: None,
            port,
            url: format!("nats://127.0.0.1:{port}"),
            dir: tempfile::tempdir().unwrap(),
            config: None,
            env: Vec::new(),
        };
        let words = nats.try_start().await.expect_err("the port is taken");
        assert!(words.contains("address already in use"), "{words}");
        assert!(nats.child.is_none());
        drop(holder);
        nats.try_start().await.expect("the port is free again");
        nats.kill();
        nats.start().await;
    }
}
