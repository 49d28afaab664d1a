//! kube-pulse's status written back onto Karpor's objects, end to end: a
//! gateway reading a simulated Karpor apiserver over loopback, members
//! served by the simulator, and what kubectl then shows of Karpor's
//! Cluster and SyncRegistry objects.

use std::time::Duration;

use kube_pulse_sim::Faults;
use kube_pulse_sim::karpor::{self, KarporOptions, MemberAccess};
use pulse_testkit::binary::terminate;
use pulse_testkit::gateway::start_gateway;
use pulse_testkit::http::{get_json, http};
use pulse_testkit::kubectl::{kubectl, ok};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{karpor_settings, sim};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Generous on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);

/// `kubectl get KIND NAME -o json` against Karpor: the object's status.
async fn status_of(server: &str, kind: &str, name: &str) -> Value {
    let out = ok(&kubectl(server, &["get", kind, name, "-o", "json"]).await);
    let object: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    object["status"].clone()
}

fn condition(status: &Value, kind: &str) -> Option<(String, String)> {
    let c = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?;
    Some((c["status"].as_str()?.into(), c["reason"].as_str()?.into()))
}

fn pair(status: &str, reason: &str) -> Option<(String, String)> {
    Some((status.into(), reason.into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karpor_objects_show_health_conditions_and_sync_state_as_members_break_and_heal() {
    let (east, west) = (sim().await, sim().await);
    let karpor = karpor::start(KarporOptions {
        conditions: true,
        default_registry: true,
        push_mode: false,
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let settings = karpor_settings(dir.path(), &karpor.url(), true);
    let (url, _gateway) = start_gateway(&[], |c| c.karpor = Some(settings), &shutdown).await;
    for (name, member) in [("east", &east), ("west", &west)] {
        let path = dir.path().join(format!("{name}.json"));
        let manifest = karpor::cluster_manifest(name, &MemberAccess::to_sim(member));
        std::fs::write(&path, manifest.to_string()).unwrap();
        ok(&kubectl(&karpor.url(), &["apply", "-f", path.to_str().unwrap()]).await);
    }
    let server = karpor.url();
    // Reachable (Ready=True) and synced: the default registry's
    // policy/v1beta1, which no member serves, is a warning, not a failure.
    for name in ["east", "west"] {
        eventually(
            WAIT,
            &format!("{name} healthy and Ready on Karpor"),
            || async {
                let status = status_of(&server, "clusters", name).await;
                (status["healthy"] == true
                    && condition(&status, "Ready") == pair("True", "Ready")
                    && condition(&status, "Synced") == pair("True", "AllSynced"))
                .then_some(())
            },
        )
        .await;
    }
    // The default registry names policy/v1beta1, which no member serves.
    let registry = eventually(WAIT, "the default registry's status", || async {
        let status = status_of(&server, "syncclusterresources", karpor::DEFAULT_REGISTRY).await;
        let clusters = status["clusters"].as_array()?;
        let not_served = clusters.iter().all(|c| {
            c["resources"].as_array().is_some_and(|r| {
                r.iter().any(|r| {
                    r["apiVersion"] == "policy/v1beta1"
                        && r["kind"] == "PodDisruptionBudget"
                        && r["status"] == "NotServed"
                        && r["reason"] == "NotServed"
                })
            })
        });
        (clusters.len() == 2 && not_served).then_some(status)
    })
    .await;
    let east_entry = &registry["clusters"][0];
    assert_eq!(east_entry["cluster"], "east");
    assert_eq!(
        east_entry["status"], "NotServed",
        "the worst of its resources"
    );
    let deployments = east_entry["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["apiVersion"] == "apps/v1" && r["kind"] == "Deployment")
        .expect("deployments reported with their kind");
    assert_eq!(deployments["status"], "Syncing");
    assert!(registry["lastTransitionTime"].is_string());

    // west refuses connections: Karpor's object turns unhealthy, with why.
    west.set_faults(Faults {
        refuse: true,
        ..Faults::default()
    });
    eventually(WAIT, "west Ready=False (Disconnected)", || async {
        let status = status_of(&server, "clusters", "west").await;
        // Go's `omitempty` leaves a false `healthy` out.
        (status.get("healthy").is_none_or(|h| h == false)
            && condition(&status, "Ready") == pair("False", "Disconnected"))
        .then_some(())
    })
    .await;
    west.heal();
    eventually(WAIT, "west healthy again", || async {
        let status = status_of(&server, "clusters", "west").await;
        (status["healthy"] == true && condition(&status, "Ready") == pair("True", "Ready"))
            .then_some(())
    })
    .await;
    // The writes show in /metrics, and the readiness check passes.
    let metrics = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let written = metrics
        .lines()
        .find(|l| {
            l.starts_with("kube_pulse_karpor_status_writes_total{")
                && l.contains("kind=\"Cluster\"")
                && l.contains("result=\"written\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .expect("Cluster writes counted");
    assert!(written >= 4.0, "{written} Cluster writes");
    let ready = reqwest::get(format!("{url}/readyz/KarporStatus"))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    shutdown.cancel();
}

/// `kube-pulse demo --karpor` as the README runs it: the printed Karpor URL
/// answers kubectl, and `get clusters -o yaml` shows the written status
/// change when a simulated cluster is disconnected (through the demo's own
/// simulator control API, as the page's button does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_karpor_shows_the_written_status_in_kubectl() {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kube-pulse"))
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--clusters",
            "2",
            "--karpor",
            "--karpor-conditions",
        ])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let url_in = |line: &str| {
        let at = line.find("http://")?;
        Some(
            line[at..]
                .split_whitespace()
                .next()?
                .trim_end_matches('/')
                .to_string(),
        )
    };
    let gateway =
        url_in(&rx.recv_timeout(Duration::from_secs(60)).unwrap()).expect("the gateway's URL");
    let karpor_line = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        karpor_line.contains("simulated Karpor apiserver"),
        "{karpor_line}"
    );
    let karpor = url_in(&karpor_line).expect("Karpor's URL");
    let yaml = || async { ok(&kubectl(&karpor, &["get", "clusters", "dev", "-o", "yaml"]).await) };
    eventually(WAIT, "dev healthy in kubectl's YAML", || async {
        let out = yaml().await;
        (out.contains("healthy: true") && out.contains("type: Ready")).then_some(())
    })
    .await;
    let fault = http()
        .put(format!("{gateway}/_sim/clusters/dev/faults"))
        .json(&serde_json::json!({"refuse": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(fault.status(), 200);
    eventually(WAIT, "dev disconnected in kubectl's YAML", || async {
        let out = yaml().await;
        (!out.contains("healthy: true") && out.contains("reason: Disconnected")).then_some(())
    })
    .await;
    // The page's view of Karpor's objects.
    let view = get_json(&format!("{gateway}/_sim/karpor")).await;
    assert_eq!(view["server"], karpor.as_str());
    assert_eq!(view["clusters"].as_array().map(Vec::len), Some(2));
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");
}

/// Status writes onto Karpor per minute with 100 members: the demo (its
/// scenario playing) behind a simulated Karpor, counted by the Karpor
/// simulator; then every member disconnected and healed every 10 s, the
/// worst the coalescing has to bound. Figures for docs/BENCHMARKS.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test: about five minutes"]
async fn measure_karpor_status_writes_for_100_members() {
    for conditions in [false, true] {
        eprintln!(
            "figures: the Cluster schema {} conditions",
            if conditions {
                "with"
            } else {
                "without (Karpor 0.6)"
            }
        );
        // Boxed: three gateways' starts make a large future.
        Box::pin(measure_writes(conditions)).await;
    }
}

async fn measure_writes(conditions: bool) {
    use kube_pulse::demo::{Demo, DemoOptions};
    const MEMBERS: usize = 100;
    let shutdown = CancellationToken::new();
    let options = DemoOptions {
        clusters: MEMBERS,
        karpor: Some(KarporOptions {
            conditions,
            default_registry: true,
            push_mode: false,
        }),
        ..DemoOptions::default()
    };
    let demo = Box::pin(Demo::start(options, &shutdown)).await.unwrap();
    let karpor = demo.karpor_url().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = format!("http://{}", listener.local_addr().unwrap());
    let served = tokio::spawn(demo.serve(listener));
    let client = http();
    let writes = || async {
        let stats = get_json(&format!("{karpor}/_sim/stats")).await;
        // Status writes are merge patches (updates before them).
        let count = |resource: &str| {
            ["update", "patch"]
                .iter()
                .map(|verb| stats["requests"][resource][*verb].as_u64().unwrap_or(0))
                .sum::<u64>()
        };
        (
            count("cluster.karpor.io/clusters"),
            count("search.karpor.io/syncclusterresources"),
        )
    };
    let started = std::time::Instant::now();
    eventually(
        Duration::from_secs(240),
        "every Cluster written",
        || async {
            let out = ok(&kubectl(&karpor, &["get", "clusters", "-o", "json"]).await);
            let list: Value = serde_json::from_str(&out).unwrap();
            let written = list["items"]
                .as_array()?
                .iter()
                .filter(|c| c["status"]["healthy"] == true)
                .count();
            (written == MEMBERS).then_some(())
        },
    )
    .await;
    let (c0, r0) = writes().await;
    eprintln!(
        "figures: all {MEMBERS} Clusters written {:?} after the start ({c0} Cluster and {r0} SyncRegistry writes so far)",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (c1, r1) = writes().await;
    eprintln!(
        "figures: demo scenario, one minute: {} Cluster writes, {} SyncRegistry writes",
        c1 - c0,
        r1 - r0
    );
    // Worst case: every member disconnected, then healed, every 10 s.
    let names: Vec<String> = get_json(&format!("{gateway}/_sim/clusters")).await["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    let flap_start = std::time::Instant::now();
    let mut refuse = true;
    while flap_start.elapsed() < Duration::from_secs(60) {
        for name in &names {
            let request = client.request(
                if refuse {
                    reqwest::Method::PUT
                } else {
                    reqwest::Method::DELETE
                },
                format!("{gateway}/_sim/clusters/{name}/faults"),
            );
            let request = if refuse {
                request.json(&serde_json::json!({"refuse": true}))
            } else {
                request.header("Content-Type", "application/json")
            };
            request.send().await.unwrap();
        }
        refuse = !refuse;
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    let (c2, r2) = writes().await;
    eprintln!(
        "figures: every member flapping every 10 s, one minute: {} Cluster writes, {} SyncRegistry writes",
        c2 - c1,
        r2 - r1
    );
    shutdown.cancel();
    let _ = served.await;
}
