//! Pod-level reasons and warning events in app documents, end to end:
//! simulated members whose pods crash, cannot pull, are OOM-killed, fail
//! readiness or cannot be scheduled, watched through kube-rs by the real
//! pipeline; the app document names the cause and the latest warning.

use std::time::Duration;

use kube_pulse::sources::PodWatch;
use kube_pulse_sim::SimCluster;
use kube_pulse_sim::pods::ImageFault;
use pulse_testkit::binary::{spawn_binary, terminate, wait_for_url};
use pulse_testkit::gateway::{doc_where, members, pipeline, quick_pipeline};
use pulse_testkit::http::{get_json, http};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{deployment_manifest, sim, sim_with};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

/// Deployment `shop/{name}` with `replicas` pods of `image`; a progress
/// deadline of `deadline` seconds when given.
fn deploy(sim: &SimCluster, name: &str, replicas: u32, image: &str, deadline: Option<u32>) {
    let mut manifest = deployment_manifest(name, replicas, image);
    if let Some(seconds) = deadline {
        manifest["spec"]["progressDeadlineSeconds"] = seconds.into();
    }
    sim.apply(&manifest).unwrap();
}

fn text(doc: &Value, pointer: &str) -> String {
    doc.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn each_pod_level_cause_names_its_app_with_the_latest_warning() {
    let shutdown = CancellationToken::new();
    let a = sim().await;
    a.set_image_faults([
        ("registry.example/crash:1", ImageFault::Crash),
        ("registry.example/pull:404", ImageFault::PullError),
        ("registry.example/oom:1", ImageFault::OomKilled),
        ("registry.example/probe:1", ImageFault::NotReady),
    ]);
    // The crash loop's deadline passes: Panic, with the pod reason.
    deploy(&a, "crash", 1, "registry.example/crash:1", Some(1));
    deploy(&a, "pull", 1, "registry.example/pull:404", None);
    deploy(&a, "oom", 2, "registry.example/oom:1", None);
    deploy(&a, "probe", 1, "registry.example/probe:1", None);
    deploy(&a, "web", 2, "registry.example/web:1", None);
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let hub = p.hub().clone();

    let crash = doc_where(&hub, "apps/test/shop/crash", WAIT, |d| {
        d["phase"] == "Panic"
            && d["reason"] == "CrashLoopBackOff"
            && d["lastWarning"]["reason"] == "BackOff"
    })
    .await;
    let message = text(&crash, "/message");
    assert!(
        message.starts_with("0/1 ready: 1 pod CrashLoopBackOff (container crash exited 1, "),
        "{message}"
    );
    assert!(message.contains("; Deployment crash: "), "{message}");
    let problem = &crash["pods"]["problems"][0];
    assert_eq!(problem["container"], "crash");
    assert_eq!(problem["exitCode"], 1);
    assert!(problem["pod"].as_str().unwrap().starts_with("crash-"));
    assert_eq!(
        (
            crash["pods"]["total"].clone(),
            crash["pods"]["ready"].clone()
        ),
        (1.into(), 0.into())
    );
    assert!(text(&crash, "/lastWarning/object").starts_with("Pod/crash-"));
    assert!(
        text(&crash, "/lastWarning/message")
            .starts_with("Back-off restarting failed container crash")
    );
    assert!(crash["lastWarning"]["count"].as_u64().unwrap() >= 1);
    assert!(crash["lastWarning"]["lastSeen"].is_string());

    let pull = doc_where(&hub, "apps/test/shop/pull", WAIT, |d| {
        d["reason"] == "ImagePullBackOff" && d["lastWarning"]["reason"] == "Failed"
    })
    .await;
    assert_eq!(pull["phase"], "Degraded");
    assert_eq!(
        text(&pull, "/message"),
        "0/1 ready: 1 pod ImagePullBackOff (container pull: Back-off pulling image \"registry.example/pull:404\")"
    );
    assert_eq!(
        text(&pull, "/lastWarning/message"),
        "Error: ImagePullBackOff"
    );

    let oom = doc_where(&hub, "apps/test/shop/oom", WAIT, |d| {
        d["reason"] == "OOMKilled"
            && d["pods"]["total"] == 2
            && d["pods"]["problems"]
                .as_array()
                .is_some_and(|p| p.len() == 2)
    })
    .await;
    assert!(
        text(&oom, "/message")
            .starts_with("0/2 ready: 2 pods OOMKilled (container oom OOMKilled, "),
        "{oom}"
    );
    assert_eq!(oom["pods"]["problems"][0]["exitCode"], 137);
    assert_eq!(oom["pods"]["more"], 0);

    let probe = doc_where(&hub, "apps/test/shop/probe", WAIT, |d| {
        d["reason"] == "NotReady" && d["lastWarning"]["reason"] == "Unhealthy"
    })
    .await;
    assert_eq!(
        text(&probe, "/message"),
        "0/1 ready: 1 pod NotReady (container probe running, not ready)"
    );
    assert_eq!(
        probe["pods"]["problems"][0]["message"],
        "readiness probe failing"
    );

    // A healthy app beside them: every pod ready, no problem, no warning.
    let web = doc_where(&hub, "apps/test/shop/web", WAIT, |d| {
        d["phase"] == "Running" && d["pods"]["ready"] == 2
    })
    .await;
    assert_eq!(web["pods"]["problems"], serde_json::json!([]));
    assert_eq!(web.get("lastWarning"), None);
    p.stop().await;
    a.shutdown().await;
}

#[tokio::test]
async fn an_unschedulable_scale_up_names_the_schedulers_message() {
    let shutdown = CancellationToken::new();
    let a = sim().await;
    deploy(&a, "web", 2, "registry.example/web:1", None);
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let hub = p.hub().clone();
    doc_where(&hub, "apps/test/shop/web", WAIT, |d| {
        d["reason"] == "AllReady"
    })
    .await;
    a.set_pod_capacity(Some(2));
    deploy(&a, "web", 3, "registry.example/web:1", None);
    let web = doc_where(&hub, "apps/test/shop/web", WAIT, |d| {
        d["reason"] == "Unschedulable" && d["lastWarning"]["reason"] == "FailedScheduling"
    })
    .await;
    assert_eq!(web["phase"], "Degraded");
    let message = text(&web, "/message");
    assert!(
        message.starts_with("2/3 ready: 1 pod Unschedulable (0/3 nodes are available: "),
        "{message}"
    );
    let problem = &web["pods"]["problems"][0];
    assert_eq!(problem["reason"], "Unschedulable");
    assert_eq!(problem.get("container"), None);
    assert_eq!(
        (web["pods"]["total"].clone(), web["pods"]["ready"].clone()),
        (3.into(), 2.into())
    );
    // Room again: the pod is scheduled, the cause goes.
    a.set_pod_capacity(None);
    let web = doc_where(&hub, "apps/test/shop/web", WAIT, |d| {
        d["reason"] == "AllReady"
    })
    .await;
    assert_eq!(web["pods"]["problems"], serde_json::json!([]));
    p.stop().await;
    a.shutdown().await;
}

#[tokio::test]
async fn the_pod_watch_can_be_turned_off_or_narrowed() {
    let shutdown = CancellationToken::new();
    let a = sim().await;
    a.set_image_faults([("registry.example/crash:1", ImageFault::Crash)]);
    deploy(&a, "crash", 1, "registry.example/crash:1", None);
    for (watch, pods) in [
        (
            PodWatch {
                enabled: false,
                ..PodWatch::default()
            },
            None,
        ),
        (
            PodWatch {
                enabled: true,
                label_selector: Some("app.kubernetes.io/name=other".into()),
                ..PodWatch::default()
            },
            Some(0),
        ),
    ] {
        let mut config = quick_pipeline(vec![]);
        config.source.pod_watch = watch.clone();
        let p = kube_pulse::pipeline::Pipeline::start(members(&[&a]), config, &shutdown)
            .await
            .unwrap();
        let doc = doc_where(p.hub(), "apps/test/shop/crash", WAIT, |d| {
            d["reason"] == "ReplicasNotReady" && d["pods"]["total"].as_u64() == pods
        })
        .await;
        assert_eq!(doc.get("lastWarning"), None, "{watch:?}");
        // Pods and Warning events are two watches more, or none.
        let total = if watch.enabled { 6 } else { 4 };
        doc_where(p.hub(), "clusters/test", WAIT, |d| {
            d["resources"]["total"] == total && d["resources"]["synced"] == total
        })
        .await;
        // (The initial state is streamed inside the watch: count watches.)
        let pod_reads =
            a.stats().count("core/pods", "list") + a.stats().count("core/pods", "watch");
        assert_eq!(pod_reads > 0, watch.enabled, "{watch:?}");
        p.stop().await;
    }
    a.shutdown().await;
}

/// CPU seconds (user + system) and peak resident memory (KiB) of a process, from /proc.
fn cpu_and_peak(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (ticks / 100.0, hwm)
}

/// The figure in docs/BENCHMARKS.md: the `kube-pulse serve` binary over 10
/// simulated members of 200 pods each (20 Deployments × 10 replicas; 2 of
/// the 20 crash-loop, so pods keep changing), with the pod watch on and
/// off. Bounded: 20 s to settle, then 30 s measured, per run. Run with
/// `cargo test --release -p kube-pulse --test gateway pods::measure -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test: about two minutes"]
async fn measure_the_pod_watch_over_10_members_of_200_pods() {
    const MEMBERS: usize = 10;
    const DEPLOYMENTS: usize = 20;
    const REPLICAS: u32 = 10;
    let mut sims = Vec::new();
    for m in 0..MEMBERS {
        let sim = sim_with(|c| {
            c.name = format!("m{m}");
            c.converge.pods_per_tick = 50;
        })
        .await;
        sim.set_image_faults([("registry.example/crash:1", ImageFault::Crash)]);
        for d in 0..DEPLOYMENTS {
            let image = if d < 2 {
                "registry.example/crash:1"
            } else {
                "registry.example/app:1"
            };
            deploy(&sim, &format!("d{d}"), REPLICAS, image, None);
        }
        sims.push(sim);
    }
    let dir = std::env::temp_dir().join(format!("kube-pulse-podbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for enabled in [true, false] {
        let clusters: String = sims
            .iter()
            .map(|s| format!("- {{name: {}, server: '{}'}}\n", s.name(), s.url()))
            .collect();
        let config = format!("clusters:\n{clusters}podWatch: {{enabled: {enabled}}}\n");
        let path = dir.join(format!("config-{enabled}.yaml"));
        std::fs::write(&path, config).unwrap();
        let mut child = spawn_binary(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            path.to_str().unwrap(),
        ]);
        let url = wait_for_url(&mut child);
        let pid = child.id();
        // Settle: every member listed (its apps' pods counted when the watch is on).
        let http = http();
        eventually(Duration::from_secs(60), "every app seen", || async {
            let apps: Value = http
                .get(format!("{url}/api/v1/apps"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let items = apps["items"].as_array().map_or(0, Vec::len);
            (items >= MEMBERS * DEPLOYMENTS).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(20)).await;
        let (cpu_before, _) = cpu_and_peak(pid);
        let window = Duration::from_secs(30);
        tokio::time::sleep(window).await;
        let (cpu_after, peak_kib) = cpu_and_peak(pid);
        let apps: Value = get_json(&format!("{url}/api/v1/apps")).await;
        let pods: u64 = apps["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| {
                a["doc"]["pods"]["total"]
                    .as_u64()
                    .or(a["pods"]["total"].as_u64())
            })
            .sum();
        eprintln!(
            "pod watch {}: {} members, {pods} pods in app documents, CPU {:.1} % of one core over {window:?}, peak RSS {:.1} MiB",
            if enabled { "on" } else { "off" },
            MEMBERS,
            (cpu_after - cpu_before) / window.as_secs_f64() * 100.0,
            peak_kib as f64 / 1024.0
        );
        if enabled {
            assert_eq!(pods, (MEMBERS * DEPLOYMENTS) as u64 * u64::from(REPLICAS));
        }
        terminate(&mut child);
    }
    let _ = std::fs::remove_dir_all(&dir);
    for sim in sims {
        sim.shutdown().await;
    }
}
