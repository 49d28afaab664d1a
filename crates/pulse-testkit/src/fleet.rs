//! Three simulated members (`a`, `b`, `c`) on loopback and the real
//! `kube-pulse serve` binary over them, started from a configuration file
//! as an operator would; REST reads of every document, for comparison with
//! what clients rebuilt from the wire.

use std::collections::BTreeMap;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use kube_pulse_sim::{SimCluster, WorkloadSeed};
use serde_json::{Value, json};

/// The members' names.
pub const MEMBERS: [&str; 3] = ["a", "b", "c"];

/// The members, the gateway process and its configuration.
#[derive(Debug)]
pub struct Fleet {
    /// The simulated members.
    pub sims: Vec<SimCluster>,
    /// The gateway's base URL.
    pub url: String,
    apps: usize,
    /// `--listen`: port 0 at first, then the port of the first process, so
    /// a restarted gateway is where its clients reconnect.
    listen: String,
    args: Vec<String>,
    /// YAML appended to the members' list.
    config: String,
    dir: tempfile::TempDir,
    gateway: Option<Child>,
}

/// Name of the `i`-th Deployment of every member (namespace `shop`).
pub fn app(i: usize) -> String {
    format!("w{i:02}")
}

impl Fleet {
    /// `apps` Deployments (1 replica) per member; `config` is appended to
    /// the gateway's YAML; `args` are extra `serve` flags.
    pub async fn start(apps: usize, config: &str, args: &[&str]) -> Self {
        let fleet = Self::start_with(&MEMBERS, &MEMBERS, apps, config, args, |_, _| {}).await;
        fleet.until_running().await;
        fleet
    }

    /// Simulated members `names` (`tweak` adjusts each one's settings), of
    /// which `configured` are in the gateway's configuration; does not wait
    /// for their apps.
    pub async fn start_with(
        names: &[&str],
        configured: &[&str],
        apps: usize,
        config: &str,
        args: &[&str],
        tweak: impl Fn(&str, &mut kube_pulse_sim::SimConfig),
    ) -> Self {
        let mut sims = Vec::new();
        for name in names {
            let sim = crate::sim::sim_with(|c| {
                c.name = name.to_string();
                c.workloads = (0..apps)
                    .map(|i| WorkloadSeed {
                        image: "registry.example/app:1".into(),
                        ..crate::sim::deployment("shop", &app(i), 1)
                    })
                    .collect();
                tweak(name, c);
            })
            .await;
            sims.push(sim);
        }
        let dir = tempfile::tempdir().unwrap();
        let mut fleet = Self {
            sims,
            url: String::new(),
            apps,
            listen: "127.0.0.1:0".into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            dir,
            config: config.to_string(),
            gateway: None,
        };
        fleet.configure(configured);
        fleet.spawn();
        fleet
    }

    /// Writes the gateway's configuration with the members named (it
    /// takes effect when the gateway starts, or reloads).
    pub fn configure(&self, members: &[&str]) {
        let members =
            crate::sim::clusters_yaml(self.sims.iter().filter(|s| members.contains(&s.name())));
        self.write_config(&format!("clusters:\n{members}"));
    }

    /// Writes `text` (the `clusters:` list, or anything), then the probe
    /// settings and the fleet's extra YAML, as the gateway's configuration.
    pub fn write_config(&self, text: &str) {
        std::fs::write(
            self.dir.path().join("config.yaml"),
            format!(
                "{text}probe: {{intervalSeconds: 1, timeoutSeconds: 1}}\n{}",
                self.config
            ),
        )
        .unwrap();
    }

    /// Sends the gateway SIGHUP (it re-reads its configuration).
    pub fn hup(&self) {
        let pid = self.pid().to_string();
        assert!(
            Command::new("kill")
                .args(["-HUP", &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// Whether the gateway process still runs.
    pub fn alive(&mut self) -> bool {
        let child = self.gateway.as_mut().expect("the gateway was started");
        child.try_wait().unwrap().is_none()
    }

    /// Starts `kube-pulse serve` on 127.0.0.1:0 (its log goes to a file in
    /// the fleet's directory, so a chatty fault cannot fill a pipe).
    fn spawn(&mut self) {
        let config = self.dir.path().join("config.yaml");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("gateway.log"))
            .unwrap();
        let mut child = Command::new(crate::binary::path())
            .args(["serve", "--listen", &self.listen, "--config"])
            .arg(&config)
            .args(&self.args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("the binary starts");
        self.url = crate::binary::wait_for_url(&mut child);
        self.listen = self.url.trim_start_matches("http://").to_string();
        self.gateway = Some(child);
    }

    /// Waits until every member's apps are Running (bounded).
    pub async fn until_running(&self) {
        let configured = std::fs::read_to_string(self.dir.path().join("config.yaml")).unwrap();
        let members = self
            .sims
            .iter()
            .filter(|s| configured.contains(&format!("name: {},", s.name())))
            .count();
        let want = self.apps * members;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let docs = self.rest().await;
            let running = docs
                .iter()
                .filter(|(t, d)| t.starts_with("apps/") && d["phase"] == "Running")
                .count();
            if running == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{running} of {want} apps Running after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERMs the gateway and waits (bounded) for it to exit.
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.gateway.take().expect("the gateway runs");
        crate::binary::terminate(&mut child)
    }

    /// Stops the gateway and starts a new process on the same port.
    pub fn restart(&mut self) -> ExitStatus {
        let status = self.stop();
        self.spawn();
        status
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.gateway.as_ref().expect("the gateway runs").id()
    }

    /// The member named `name`.
    pub fn sim(&self, name: &str) -> &SimCluster {
        self.sims.iter().find(|s| s.name() == name).unwrap()
    }

    /// Sets `replicas` of Deployment `shop/{name}` on `member` through the API.
    pub async fn scale(&self, member: &str, name: &str, replicas: i32) {
        let api: Api<Deployment> = Api::namespaced(self.sim(member).client(), "shop");
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap_or_else(|e| panic!("scale {member}/shop/{name}: {e}"));
    }

    /// Sets `replicas` of every Deployment of every member (8 requests in
    /// flight): each then makes about two status changes per replica as
    /// the simulator's controller adds or removes pods.
    pub async fn scale_all(&self, replicas: i32) {
        use futures::StreamExt;
        let all: Vec<(&str, String)> = MEMBERS
            .iter()
            .flat_map(|m| (0..self.apps).map(move |i| (*m, app(i))))
            .collect();
        futures::stream::iter(all)
            .for_each_concurrent(8, |(member, name)| async move {
                self.scale(member, &name, replicas).await;
            })
            .await;
    }

    /// Scales Deployments round robin, up to 8 requests in flight, at
    /// about `per_second` for `duration` (bounded: `per_second × duration`
    /// requests at most). Returns how many were made.
    pub async fn churn(&self, per_second: u32, duration: Duration) -> usize {
        use futures::StreamExt;
        let most = (f64::from(per_second) * duration.as_secs_f64()) as usize;
        let end = tokio::time::Instant::now() + duration;
        let pace = Duration::from_secs(1) / per_second;
        let start = tokio::time::Instant::now();
        let made = std::sync::atomic::AtomicUsize::new(0);
        futures::stream::iter(0..most)
            .take_while(|_| std::future::ready(tokio::time::Instant::now() < end))
            .for_each_concurrent(8, |n| {
                let made = &made;
                async move {
                    tokio::time::sleep_until(start + pace * n as u32).await;
                    let member = MEMBERS[n % MEMBERS.len()];
                    let i = (n / MEMBERS.len()) % self.apps;
                    // 1 → 10 → 1 …: each scale makes about 20 status changes
                    // as the simulator's controller adds or removes pods.
                    let replicas = if (n / (MEMBERS.len() * self.apps)).is_multiple_of(2) {
                        10
                    } else {
                        1
                    };
                    self.scale(member, &app(i), replicas).await;
                    made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
            .await;
        made.into_inner()
    }

    /// Every document the gateway holds, by topic, from its REST API.
    pub async fn rest(&self) -> BTreeMap<String, Value> {
        crate::http::rest_docs(&self.url).await
    }

    /// The gateway's `/metrics` text.
    pub async fn metrics(&self) -> String {
        crate::http::get_text(&format!("{}/metrics", self.url)).await
    }

    /// The sum of a metric's samples in `/metrics` (0 when absent).
    pub async fn metric(&self, name: &str) -> f64 {
        crate::http::metric(&self.url, name).await
    }

    /// Polls `/metrics` on a thread of its own until `name` reaches `at_least`
    /// (or `within` passes: then None). Blocking requests on their own thread
    /// see the gateway's count without waiting for the test's runtime, which
    /// also runs the simulators and the churn: on a starved machine its tasks
    /// waited seconds for their turn, and a poll from there took up to 6 s.
    pub fn watch_metric(
        &self,
        name: &'static str,
        at_least: f64,
        within: Duration,
    ) -> tokio::sync::oneshot::Receiver<Option<Reached>> {
        let authority = self.url.trim_start_matches("http://").to_string();
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut below_since = start;
            let reached = loop {
                let asked = Instant::now();
                if metric_blocking(&authority, name) >= at_least {
                    break Some(Reached {
                        at: Instant::now(),
                        below_at: below_since,
                    });
                }
                below_since = asked;
                if start.elapsed() > within {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let _ = tx.send(reached);
        });
        rx
    }

    /// The gateway's resident memory (`VmRSS`), in bytes.
    pub fn rss(&self) -> u64 {
        crate::binary::rss_kib(self.pid()) * 1024
    }

    /// The gateway's log so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gateway.log")).unwrap_or_default()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some(mut child) = self.gateway.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// When a watched metric reached its value ([`Fleet::watch_metric`]).
#[derive(Debug)]
pub struct Reached {
    /// When a poll saw it there.
    pub at: Instant,
    /// When the last poll that saw it below started: it got there after this.
    pub below_at: Instant,
}

/// The sum of a metric's samples in `/metrics`, by a blocking request (0
/// when absent or unanswered).
fn metric_blocking(authority: &str, name: &str) -> f64 {
    use std::io::{Read, Write};
    let Ok(mut socket) = std::net::TcpStream::connect(authority) else {
        return 0.0;
    };
    let _ = socket.set_read_timeout(Some(Duration::from_secs(20)));
    let request =
        format!("GET /metrics HTTP/1.1\r\nhost: {authority}\r\nconnection: close\r\n\r\n");
    let mut response = String::new();
    if socket.write_all(request.as_bytes()).is_err()
        || socket.read_to_string(&mut response).is_err()
    {
        return 0.0;
    }
    crate::http::metric_in(&response, name)
}
