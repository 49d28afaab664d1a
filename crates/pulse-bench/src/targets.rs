//! The servers under test, each started fresh on loopback: kube-pulse (its
//! release binary over a simulated member), Pushpin and Nginx + Nchan (from
//! Debian's packages, with the configs in `crates/pulse-bench/peers/`), and the raw
//! baseline (this binary's `raw-server`). Each can publish a change carrying
//! a timestamp and name the processes whose memory and CPU count.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube_pulse_sim::{ConvergeConfig, SimCluster, SimConfig, WorkloadSeed};

use crate::load::Via;

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub(crate) enum Kind {
    #[serde(rename = "kube-pulse")]
    KubePulse,
    #[serde(rename = "Pushpin")]
    Pushpin,
    #[serde(rename = "Nchan")]
    Nchan,
    #[serde(rename = "raw baseline")]
    Raw,
    /// A second raw baseline, for an A/A control: what a comparison gives
    /// between two identical servers (only when `--servers` names it).
    #[serde(rename = "copy of the raw baseline")]
    RawCopy,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::KubePulse => "kube-pulse",
            Kind::Pushpin => "Pushpin",
            Kind::Nchan => "Nchan",
            Kind::Raw => "raw baseline",
            Kind::RawCopy => "copy of the raw baseline",
        }
    }
}

/// A running server.
pub(crate) struct Target {
    pub(crate) kind: Kind,
    children: Vec<Child>,
    /// Where subscribers connect: one listener, or one per replica.
    addrs: Vec<SocketAddr>,
    publish: Publish,
    _dir: tempfile::TempDir,
    /// The simulated member (kube-pulse only).
    pub(crate) sim: Option<SimCluster>,
    /// The simulated host cluster holding the Leases (kube-pulse replicas
    /// only), kept alive with the target.
    _host: Option<SimCluster>,
    /// Apps in the simulated member (kube-pulse's narrow scenario).
    pub(crate) apps: usize,
    /// One client for every publish: its pool keeps the connection open.
    http: Client<HttpConnector, Full<Bytes>>,
}

enum Publish {
    /// Change the benchmark Deployment(s) in the simulator.
    Sim,
    /// POST to a URL with this body shape.
    Http { url: String, pushpin: bool },
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn fill(template: &str, fields: &[(&str, String)]) -> String {
    let mut out = template.to_string();
    for (k, v) in fields {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    out
}

pub(crate) async fn wait_for_port(addr: SocketAddr, what: &str) -> anyhow::Result<()> {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("{what} did not listen on {addr}")
}

/// The plain HTTP/1 client the scenarios poll and publish with.
pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub(crate) fn http_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// The image of the benchmark Deployment(s) for a change at `ts`.
fn image(ts: u64) -> String {
    format!("registry.example/bench:ts{ts}x")
}

/// What the peers publish for change number `n` made at `ts`: the message
/// kube-pulse's WebSocket subscriber gets for the same change of the
/// benchmark Deployment (subscription id, type, topic, revision, cursor,
/// then the merge patch: the new image and generation, and the messages
/// naming the generation the member's controller has yet to observe), so
/// that every server delivers the same number of bytes per delivery.
pub(crate) fn peer_message(ts: u64, n: usize) -> String {
    let generation = n + 2;
    let waiting = format!("waiting for the controller to observe generation {generation}");
    format!(
        r#"{{"sub":"b","type":"patch","topic":"apps/bench/bench/app0","rev":{rev},"cursor":"661ea8f035088-{cursor}","patch":{{"message":"0/1 ready (Deployment app0: {waiting})","workloads":{{"Deployment/app0":{{"generation":{generation},"images":["{image}"],"message":"{waiting}"}}}}}}}}"#,
        rev = n + 3,
        cursor = n + 45,
        image = image(ts),
    )
}

impl Target {
    /// kube-pulse `serve` (release binary `bin`) over a simulated member with `apps` Deployments.
    pub(crate) async fn kube_pulse(bin: &Path, apps: usize) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let sim = bench_member(apps).await?;
        let port = free_port();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{port}\nclusters:\n- name: bench\n  server: {}\n",
                sim.url()
            ),
        )?;
        let child = serve(bin, &config).spawn()?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let target = Self {
            kind: Kind::KubePulse,
            children: vec![child],
            addrs: vec![addr],
            publish: Publish::Sim,
            _dir: dir,
            sim: Some(sim),
            _host: None,
            apps,
            http: http_client(),
        };
        target.published().await?;
        Ok(target)
    }

    /// `replicas` kube-pulse `serve` processes sharing the simulated member
    /// through Leases on a simulated host cluster and one stream of
    /// changes on a `nats-server` of their own (docs/SCALE-OUT.md): the
    /// member's owner publishes, every replica serves what the stream
    /// brings. Subscribers are spread over the replicas.
    pub(crate) async fn kube_pulse_replicas(bin: &Path, replicas: usize) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let sim = bench_member(1).await?;
        let host = SimCluster::start(SimConfig::named("host")).await?;
        let kubeconfig = dir.path().join("host.kubeconfig");
        std::fs::write(&kubeconfig, host.kubeconfig("host"))?;
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!("clusters:\n- name: bench\n  server: {}\n", sim.url()),
        )?;
        let nats_port = free_port();
        // The replicas sign what they write to NATS with one key.
        let signing_key = dir.path().join("signing.key");
        std::fs::write(
            &signing_key,
            "kube-pulse bench signing key, 32 bytes or more\n",
        )?;
        let store = dir.path().join("nats");
        let nats = Command::new(nats_server()?)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &nats_port.to_string(),
                "-sd",
            ])
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        wait_for_port(([127, 0, 0, 1], nats_port).into(), "nats-server").await?;
        let mut addrs = Vec::with_capacity(replicas);
        let mut children = Vec::with_capacity(replicas + 1);
        for i in 0..replicas {
            let port = free_port();
            let child = serve(bin, &config)
                .args(["--listen", &format!("127.0.0.1:{port}")])
                .arg("--lease-kubeconfig")
                .arg(&kubeconfig)
                .args(["--lease-namespace", "default"])
                .args(["--lease-duration", &LEASE.as_secs().to_string()])
                .args(["--replica-id", &format!("r{i}")])
                .args(["--nats", &format!("nats://127.0.0.1:{nats_port}")])
                .arg("--nats-signing-key-file")
                .arg(&signing_key)
                .spawn()?;
            children.push(child);
            addrs.push(SocketAddr::from(([127, 0, 0, 1], port)));
        }
        // Stopped last: the replicas leave the stream first.
        children.push(nats);
        let target = Self {
            kind: Kind::KubePulse,
            children,
            addrs,
            publish: Publish::Sim,
            _dir: dir,
            sim: Some(sim),
            _host: Some(host),
            apps: 1,
            http: http_client(),
        };
        target.published().await?;
        target.settled(replicas).await?;
        Ok(target)
    }

    /// Waits until ownership has settled: every replica's Lease is on the
    /// host and the member's Lease has kept its holder for two lease
    /// durations. A replica that joins late takes the member over from the
    /// first one (its changes during that handover reach nobody: the new
    /// owner lists the member and publishes its state then), which must not
    /// fall into a measured step.
    async fn settled(&self, replicas: usize) -> anyhow::Result<()> {
        let host = self._host.as_ref().expect("replicas have a host cluster");
        let def = host
            .store()
            .catalog()
            .find("coordination.k8s.io", "v1", "leases")
            .expect("the simulator serves Leases")
            .clone();
        let mut stable: Option<(String, std::time::Instant)> = None;
        for _ in 0..600 {
            let leases = host.store().snapshot(&def);
            let annotated = |key: &str| {
                leases
                    .iter()
                    .filter(|l| l["metadata"]["annotations"][key].is_string())
                    .count()
            };
            let holder = leases
                .iter()
                .find(|l| l["metadata"]["annotations"]["kube-pulse.io/member"] == "bench")
                .and_then(|l| l["spec"]["holderIdentity"].as_str())
                .map(str::to_string);
            stable = match (holder, stable) {
                (Some(h), Some((was, since))) if h == was => Some((was, since)),
                (Some(h), _) => Some((h, std::time::Instant::now())),
                (None, _) => None,
            };
            if annotated("kube-pulse.io/member") == 1
                && leases.len() > replicas
                && stable
                    .as_ref()
                    .is_some_and(|(_, since)| since.elapsed() >= LEASE * 2)
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("the member's Lease did not keep one holder")
    }

    /// Waits until every kube-pulse listener serves the member's apps.
    async fn published(&self) -> anyhow::Result<()> {
        for &addr in &self.addrs {
            wait_for_port(addr, "kube-pulse").await?;
            let url = format!("http://{addr}/api/v1/apps?cluster=bench");
            let mut served = false;
            for _ in 0..1200 {
                if let Ok(body) = get(&self.http, &url).await
                    && body.matches("\"app\":").count() >= self.apps
                {
                    served = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            anyhow::ensure!(
                served,
                "kube-pulse on {addr} did not publish the benchmark apps"
            );
        }
        Ok(())
    }

    /// Nginx with Nchan.
    pub(crate) async fn nchan() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let port = free_port();
        let template = std::fs::read_to_string(peer_config("nginx-nchan.conf"))?;
        let config = dir.path().join("nginx.conf");
        std::fs::write(
            &config,
            fill(
                &template,
                &[
                    ("dir", dir.path().display().to_string()),
                    ("port", port.to_string()),
                ],
            ),
        )?;
        let child = crate::pin::server("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let addr = ([127, 0, 0, 1], port).into();
        wait_for_port(addr, "nginx").await?;
        Ok(Self {
            kind: Kind::Nchan,
            children: vec![child],
            addrs: vec![addr],
            publish: Publish::Http {
                url: format!("http://{addr}/pub"),
                pushpin: false,
            },
            _dir: dir,
            sim: None,
            _host: None,
            apps: 1,
            http: http_client(),
        })
    }

    /// Pushpin, with this process answering as its origin (GRIP stream hold).
    pub(crate) async fn pushpin() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let origin = grip_origin().await?;
        let (port, publish_port) = (free_port(), free_port());
        let template = std::fs::read_to_string(peer_config("pushpin.conf"))?;
        let config = dir.path().join("pushpin.conf");
        let fields = [
            ("dir", dir.path().display().to_string()),
            ("port", port.to_string()),
            ("publish_port", publish_port.to_string()),
            ("port_offset", "0".to_string()),
            ("push_in", free_port().to_string()),
            ("push_in_sub", free_port().to_string()),
            ("command", free_port().to_string()),
        ];
        std::fs::write(&config, fill(&template, &fields))?;
        std::fs::write(
            dir.path().join("routes"),
            format!("* 127.0.0.1:{}\n", origin.port()),
        )?;
        std::fs::create_dir_all(dir.path().join("run"))?;
        std::fs::create_dir_all(dir.path().join("log"))?;
        let child = crate::pin::server("pushpin")
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let addr = ([127, 0, 0, 1], port).into();
        wait_for_port(addr, "pushpin").await?;
        wait_for_port(([127, 0, 0, 1], publish_port).into(), "pushpin publish").await?;
        Ok(Self {
            kind: Kind::Pushpin,
            children: vec![child],
            addrs: vec![addr],
            publish: Publish::Http {
                url: format!("http://127.0.0.1:{publish_port}/publish/"),
                pushpin: true,
            },
            _dir: dir,
            sim: None,
            _host: None,
            apps: 1,
            http: http_client(),
        })
    }

    /// This binary's `raw-server`, as `kind` (the baseline or its copy).
    pub(crate) async fn raw(kind: Kind) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let (port, control) = (free_port(), free_port());
        let child = crate::pin::server(std::env::current_exe()?)
            .args([
                "raw-server",
                "--port",
                &port.to_string(),
                "--control-port",
                &control.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let addr = ([127, 0, 0, 1], port).into();
        wait_for_port(addr, "raw-server").await?;
        Ok(Self {
            kind,
            children: vec![child],
            addrs: vec![addr],
            publish: Publish::Http {
                url: format!("http://127.0.0.1:{control}/publish"),
                pushpin: false,
            },
            _dir: dir,
            sim: None,
            _host: None,
            apps: 1,
            http: http_client(),
        })
    }

    /// How subscriber `i` connects over SSE (narrow: each on its own app).
    pub(crate) fn sse(&self, i: usize, narrow: bool) -> Via {
        let path = match self.kind {
            Kind::KubePulse => {
                let app = if narrow { i % self.apps } else { 0 };
                format!("/api/v1/events?topic=apps/bench/bench/app{app}")
            }
            Kind::Pushpin => "/stream".into(),
            Kind::Nchan => "/sub".into(),
            Kind::Raw | Kind::RawCopy => "/".into(),
        };
        Via::Sse {
            addr: self.addrs[i % self.addrs.len()],
            path,
        }
    }

    /// How subscriber `i` connects over WebSocket, if the server can.
    pub(crate) fn ws(&self) -> Option<Via> {
        let base = format!("ws://{}", self.addrs[0]);
        match self.kind {
            Kind::KubePulse => Some(Via::Ws {
                url: format!("{base}/api/v1/ws"),
                hello: Some(
                    r#"{"op":"subscribe","id":"b","topics":["apps/bench/bench/app0"]}"#.into(),
                ),
            }),
            Kind::Nchan => Some(Via::Ws {
                url: format!("{base}/sub"),
                hello: None,
            }),
            Kind::Raw | Kind::RawCopy => Some(Via::Ws {
                url: format!("{base}/ws"),
                hello: None,
            }),
            // Pushpin carries WebSockets as WebSocket-over-HTTP to an origin
            // that speaks GRIP's WS protocol; the benchmark has no such origin.
            Kind::Pushpin => None,
        }
    }

    /// Publishes one change at `ts` (to app `app` in kube-pulse).
    pub(crate) async fn publish(&self, ts: u64, app: usize) -> anyhow::Result<()> {
        match &self.publish {
            Publish::Sim => {
                let sim = self.sim.as_ref().expect("kube-pulse has its simulator");
                let def = sim
                    .store()
                    .catalog()
                    .find("apps", "v1", "deployments")
                    .expect("deployments are served")
                    .clone();
                let name = format!("app{}", app % self.apps.max(1));
                sim.store()
                    .mutate(
                        &def,
                        Some("bench"),
                        &name,
                        kube_pulse_sim::object::UpdateScope::Main,
                        false,
                        |current| {
                            let mut next = current.clone();
                            next["spec"]["template"]["spec"]["containers"][0]["image"] =
                                serde_json::json!(image(ts));
                            Ok(next)
                        },
                    )
                    .map_err(|e| anyhow::anyhow!("simulator: {e:?}"))?;
                Ok(())
            }
            Publish::Http { url, pushpin } => {
                let message = peer_message(ts, app);
                let body = if *pushpin {
                    serde_json::json!({"items": [{"channel": "bench", "formats": {
                        "http-stream": {"content": format!("event: patch\ndata: {message}\n\n")}
                    }}]})
                    .to_string()
                } else {
                    message
                };
                let request = http::Request::post(url)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body)))?;
                let response = self.http.request(request).await?;
                anyhow::ensure!(
                    response.status().is_success(),
                    "publish to {url}: {}",
                    response.status()
                );
                Ok(())
            }
        }
    }

    /// Every process of the server (children of children too).
    pub(crate) fn pids(&self) -> Vec<u32> {
        let roots: Vec<u32> = self.children.iter().map(Child::id).collect();
        crate::proc::tree(&roots)
    }

    pub(crate) fn stop(mut self) {
        for child in &mut self.children {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for child in &mut self.children {
            for _ in 0..100 {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The Leases of the replicas (short, so that ownership settles quickly).
const LEASE: Duration = Duration::from_secs(3);

/// The simulated member of the kube-pulse targets: `apps` Deployments in
/// `bench`, one controller pass at start and none after (changes are the
/// benchmark's own).
async fn bench_member(apps: usize) -> anyhow::Result<SimCluster> {
    let workloads = (0..apps)
        .map(|i| WorkloadSeed {
            kind: "Deployment".into(),
            namespace: "bench".into(),
            name: format!("app{i}"),
            replicas: 1,
            image: image(0),
        })
        .collect();
    SimCluster::start(SimConfig {
        workloads,
        converge: ConvergeConfig {
            tick: Duration::from_secs(3600),
            pods_per_tick: 1,
        },
        window: 100_000,
        ..SimConfig::named("bench")
    })
    .await
    .map_err(Into::into)
}

/// `kube-pulse serve --config config` with limits no benchmark reaches.
fn serve(bin: &Path, config: &Path) -> Command {
    let mut command = crate::pin::server(bin);
    command
        .args(["serve", "--config"])
        .arg(config)
        .args([
            "--max-connections",
            "200000",
            "--max-connections-per-ip",
            "200000",
            "--max-subscribes-per-client",
            "1000000",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// The `nats-server` binary: on PATH, or where Debian installs it.
pub(crate) fn nats_server() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("nats-server"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow::anyhow!("nats-server is not installed (apt-get install nats-server)")
        })
}

fn peer_config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("peers")
        .join(name)
}

pub(crate) async fn get(client: &HttpClient, url: &str) -> anyhow::Result<String> {
    use http_body_util::BodyExt;
    let request = http::Request::get(url).body(Full::new(Bytes::new()))?;
    let response = client.request(request).await?;
    let body = response.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&body).into())
}

/// A minimal origin for Pushpin: every request is held as a GRIP stream on
/// the channel `bench`.
async fn grip_origin() -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let reply = Arc::new(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nGrip-Hold: stream\r\nGrip-Channel: bench\r\nContent-Length: 0\r\n\r\n",
    );
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut socket, _)) = listener.accept().await {
            let reply = reply.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut head = Vec::new();
                // Keep-alive: answer every request on the connection.
                while let Ok(n) = socket.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    head.extend_from_slice(&buf[..n]);
                    while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        head.drain(..end + 4);
                        if socket.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peers_message_is_kube_pulses_patch_with_the_timestamp() {
        let ts = 1_796_509_914_880_656_376;
        let message = peer_message(ts, 42);
        let value: serde_json::Value = serde_json::from_str(&message).expect("JSON");
        assert_eq!(value["type"], "patch");
        assert_eq!(value["rev"], 45);
        assert_eq!(
            value["patch"]["workloads"]["Deployment/app0"]["images"][0],
            image(ts)
        );
        // The length of the message kube-pulse sent for change 42 of a run
        // (generation 44, revision 45): 371 bytes.
        assert_eq!(message.len(), 371);
        let seen = crate::load::Seen::default();
        seen.scan(&mut Vec::new(), message.as_bytes());
        assert_eq!(
            seen.deliveries.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }
}
