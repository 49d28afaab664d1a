//! The real binary: help texts, `sim`, `demo` and `serve` start, answer and
//! stop cleanly on SIGTERM; bad configuration fails with a clear message.

use pulse_testkit::binary::{spawn_binary, terminate, wait_for_url};
use pulse_testkit::http::{get_json, get_text, http};
use pulse_testkit::poll::eventually;
use std::process::Command;

#[test]
fn every_command_has_help() {
    for args in [
        vec!["--help"],
        vec!["sim", "--help"],
        vec!["demo", "--help"],
        vec!["serve", "--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kube-pulse"))
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage:"), "{args:?}: {text}");
    }
}

#[tokio::test]
async fn sim_serves_kubernetes_and_stops_on_sigterm() {
    let control_port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let control_addr = format!("127.0.0.1:{control_port}");
    let mut child = spawn_binary(&[
        "sim",
        "--listen",
        "127.0.0.1:0",
        "--app",
        "shop/web:2",
        "--token",
        "t0k",
        "--control-listen",
        &control_addr,
    ]);
    let url = wait_for_url(&mut child);
    let client = http();
    let version = get_json(&format!("{url}/version")).await;
    assert_eq!(version["major"], "1");
    let denied = client
        .get(format!("{url}/apis/apps/v1/deployments"))
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 401);
    let list: serde_json::Value = client
        .get(format!("{url}/apis/apps/v1/deployments"))
        .bearer_auth("t0k")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], "web");
    // The control port serves the documented /_sim/ paths, with the token.
    let faults_url = format!("http://{control_addr}/_sim/faults");
    let denied = client.get(&faults_url).send().await.unwrap();
    assert_eq!(denied.status(), 401);
    let faults: serde_json::Value = client
        .get(&faults_url)
        .bearer_auth("t0k")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(faults["refuse"], false, "{faults}");
    let status = tokio::task::spawn_blocking(move || terminate(&mut child))
        .await
        .unwrap();
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn sim_karpor_serves_karpors_api() {
    let dir = std::env::temp_dir().join(format!("kube-pulse-cli-karpor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("karpor.kubeconfig");
    let mut child = spawn_binary(&[
        "sim",
        "--karpor",
        "--karpor-conditions",
        "--listen",
        "127.0.0.1:0",
        "--name",
        "karpor",
        "--write-kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    let url = wait_for_url(&mut child);
    // The kubeconfig is written before the address is printed.
    let written: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    assert_eq!(written["current-context"].as_str(), Some("karpor"));
    assert_eq!(
        written["clusters"][0]["cluster"]["server"].as_str(),
        Some(url.as_str())
    );
    let client = http();
    let search = get_json(&format!("{url}/apis/search.karpor.io/v1beta1")).await;
    let names: Vec<&str> = search["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"syncclusterresources") && names.contains(&"syncclusterresources/status"),
        "{search}"
    );
    let registry = get_json(&format!(
        "{url}/apis/search.karpor.io/v1beta1/syncclusterresources/default-sync-rule"
    ))
    .await;
    assert_eq!(registry["kind"], "SyncRegistry");
    // Karpor serves no workloads.
    let apps = client
        .get(format!("{url}/apis/apps/v1"))
        .send()
        .await
        .unwrap();
    assert_eq!(apps.status(), 404);
    // With --karpor-conditions, a Cluster status keeps its conditions.
    let clusters = format!("{url}/apis/cluster.karpor.io/v1beta1/clusters");
    let created: serde_json::Value = client
        .post(&clusters)
        .json(&serde_json::json!({"metadata": {"name": "prod"},
            "spec": {"access": {"endpoint": "https://10.0.0.1:6443"}}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut status = created.clone();
    status["status"] = serde_json::json!({"healthy": true, "conditions": [{"type": "Ready",
        "status": "True", "reason": "Healthy", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    let written = client
        .put(format!("{clusters}/prod/status"))
        .json(&status)
        .send()
        .await
        .unwrap();
    assert_eq!(written.status(), 200);
    let written: serde_json::Value = written.json().await.unwrap();
    assert_eq!(
        written["status"]["conditions"][0]["reason"], "Healthy",
        "{written}"
    );
    let status = tokio::task::spawn_blocking(move || terminate(&mut child))
        .await
        .unwrap();
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn demo_starts_clusters_and_stops_on_sigterm() {
    let mut child = spawn_binary(&["demo", "--listen", "127.0.0.1:0", "--clusters", "3"]);
    let url = wait_for_url(&mut child);
    let client = http();
    let livez = client.get(format!("{url}/livez")).send().await.unwrap();
    assert_eq!(livez.status(), 200);
    assert_eq!(livez.text().await.unwrap(), "OK");
    let index = get_text(&format!("{url}/")).await;
    assert!(index.contains("ui/app.js"), "the web UI: {index}");
    let sims = get_json(&format!("{url}/_sim/clusters")).await;
    assert_eq!(sims["items"].as_array().unwrap().len(), 3);
    let clusters = get_json(&format!("{url}/api/v1/clusters")).await;
    let clusters = clusters["items"].as_array().unwrap().clone();
    let names: Vec<&str> = clusters
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["dev", "prod", "staging"]);
    for cluster in &clusters {
        let server = cluster["server"].as_str().unwrap().trim_end_matches('/');
        let list = get_json(&format!(
            "{server}/apis/apps/v1/namespaces/shop/deployments"
        ))
        .await;
        assert_eq!(
            list["items"].as_array().unwrap().len(),
            2,
            "{server}: web and cart"
        );
    }
    // Tasks act on the simulated clusters through the gateway.
    let created = client
        .post(format!("{url}/api/v1/tasks"))
        .json(&serde_json::json!({"type": "Stop", "cluster": "prod", "namespace": "shop", "app": "cart"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let task: serde_json::Value = created.json().await.unwrap();
    let task_url = format!("{url}/api/v1/tasks/{}", task["id"].as_str().unwrap());
    eventually(std::time::Duration::from_secs(30), "Stop succeeds", || {
        let task_url = task_url.clone();
        async move { (get_json(&task_url).await["status"] == "Succeeded").then_some(()) }
    })
    .await;
    let cart_url = format!("{url}/api/v1/apps/prod/shop/cart");
    eventually(std::time::Duration::from_secs(10), "cart Stopped", || {
        let cart_url = cart_url.clone();
        async move {
            let cart = get_json(&cart_url).await;
            (cart["state"] == "Stopped" && cart["task"].is_null()).then_some(())
        }
    })
    .await;
    // Each cluster's control API is mounted on the gateway.
    let faults = client
        .put(format!("{url}/_sim/clusters/dev/faults"))
        .json(&serde_json::json!({"notReady": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(faults.status(), 200);
    let dev = clusters[0]["server"]
        .as_str()
        .unwrap()
        .trim_end_matches('/');
    assert_eq!(
        client
            .get(format!("{dev}/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        500
    );
    // Metrics are there and move.
    let value = |text: &str, series: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no series {series}"))
    };
    let first = get_text(&format!("{url}/metrics")).await;
    for series in [
        "kube_pulse_cluster_phase{cluster=\"dev\",phase=\"Healthy\"}",
        "kube_pulse_sync_phase{cluster=\"prod\",resource=\"apps/v1/deployments\",phase=\"Syncing\"}",
        "kube_pulse_http_requests_total{method=\"GET\",route=\"/livez\",status=\"200\"}",
        "kube_pulse_sessions{transport=\"sse\"}",
        "kube_pulse_probe_latency_seconds_count{cluster=\"dev\"}",
        "kube_pulse_watch_lists_total{cluster=\"dev\",resource=\"apps/v1/deployments\"}",
    ] {
        value(&first, series);
    }
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let second = get_text(&format!("{url}/metrics")).await;
    let probes = "kube_pulse_probe_latency_seconds_count{cluster=\"dev\"}";
    assert!(
        value(&second, probes) > value(&first, probes),
        "probes keep being measured"
    );
    assert!(
        value(&second, "kube_pulse_hub_changes_total")
            >= value(&first, "kube_pulse_hub_changes_total")
    );
    // The gateway sees the fault through its probes, as it would on a real cluster.
    eventually(std::time::Duration::from_secs(30), "dev unhealthy", || {
        let client = client.clone();
        let url = url.clone();
        async move {
            let dev: serde_json::Value = client
                .get(format!("{url}/api/v1/clusters/dev"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (dev["phase"] == "Unhealthy" && dev["reason"] == "ApiServerNotReady").then_some(())
        }
    })
    .await;
    let missing = client.get(format!("{url}/nope")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    let body: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(body["code"], "not_found");
    let status = tokio::task::spawn_blocking(move || terminate(&mut child))
        .await
        .unwrap();
    assert!(status.success(), "exit status {status:?}");
}

#[tokio::test]
async fn serve_registers_kubeconfig_contexts() {
    let dir = std::env::temp_dir().join(format!("kube-pulse-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:9'}\nusers:\n- name: u\n  user: {token: x}\ncontexts:\n- name: east\n  context: {cluster: c, user: u}\n- name: west\n  context: {cluster: c, user: u}\ncurrent-context: east\n",
    )
    .unwrap();
    let path = kubeconfig.to_str().unwrap();
    let mut child = spawn_binary(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--kubeconfig",
        path,
        "--context",
        "west",
    ]);
    let url = wait_for_url(&mut child);
    let clusters = get_json(&format!("{url}/api/v1/clusters")).await;
    assert_eq!(clusters["items"][0]["name"], "west");
    assert_eq!(clusters["items"].as_array().unwrap().len(), 1);
    let status = tokio::task::spawn_blocking(move || terminate(&mut child))
        .await
        .unwrap();
    assert!(status.success());
}

/// A `KUBECONFIG` set for kubectl does not stand in the way of `--config`,
/// and with `--karpor-kubeconfig` the file may list no cluster.
#[tokio::test]
async fn serve_takes_a_config_file_beside_kubeconfig_and_karpor() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("members.yaml");
    std::fs::write(
        &config,
        "clusters:\n- {name: a, server: 'http://127.0.0.1:9'}\n",
    )
    .unwrap();
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "clusters: []\n").unwrap();
    let karpor = dir.path().join("karpor.kubeconfig");
    std::fs::write(
        &karpor,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster: {server: 'http://127.0.0.1:9'}\nusers:\n- name: u\n  user: {token: x}\ncontexts:\n- name: k\n  context: {cluster: k, user: u}\ncurrent-context: k\n",
    )
    .unwrap();
    let start = |args: &[&str]| {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        std::process::Command::new(env!("CARGO_BIN_EXE_kube-pulse"))
            .args(&all)
            .env("KUBECONFIG", dir.path().join("no-such-kubeconfig"))
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut child = start(&["--config", config.to_str().unwrap()]);
    let url = wait_for_url(&mut child);
    let clusters = get_json(&format!("{url}/api/v1/clusters")).await;
    let names: Vec<&str> = clusters["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["a"], "the file's members, not KUBECONFIG's");
    assert!(
        tokio::task::spawn_blocking(move || terminate(&mut child))
            .await
            .unwrap()
            .success()
    );

    let mut child = start(&[
        "--config",
        empty.to_str().unwrap(),
        "--karpor-kubeconfig",
        karpor.to_str().unwrap(),
    ]);
    let url = wait_for_url(&mut child);
    let live = http().get(format!("{url}/livez")).send().await.unwrap();
    assert_eq!(live.status(), 200);
    assert!(
        tokio::task::spawn_blocking(move || terminate(&mut child))
            .await
            .unwrap()
            .success()
    );
}

#[test]
fn serve_rejects_bad_configuration_clearly() {
    let dir = std::env::temp_dir().join(format!("kube-pulse-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "clusters:\n- name: a\n").unwrap();
    // Each is refused before anything listens (nothing on stdout).
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        vec![
            "serve".to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--config".into(),
            path.display().to_string(),
        ]
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            file(
                "ca.yaml",
                "clusters:\n- {name: a, server: 'https://x', caFile: /nonexistent/ca.pem}\n",
            ),
            "cluster \"a\": caFile /nonexistent/ca.pem cannot be read",
        ),
        (
            file(
                "token.yaml",
                "clusters:\n- {name: a, server: 'https://x', tokenFile: /nonexistent/t}\n",
            ),
            "cluster \"a\": tokenFile /nonexistent/t cannot be read",
        ),
        (
            file("url.yaml", "clusters:\n- {name: a, server: 'http://'}\n"),
            "must be an http(s) URL with a host",
        ),
        (
            file(
                "probe.yaml",
                "clusters:\n- {name: a, server: 'https://x'}\nprobe: {timeoutSeconds: 0}\n",
            ),
            "probe.timeoutSeconds must be at least 1",
        ),
        (
            file(
                "registry.yaml",
                "clusters:\n- {name: a, server: 'https://x'}\nsyncRegistries:\n- {name: r, clusters: [b], resources: []}\n",
            ),
            "sync registry \"r\" names cluster \"b\"",
        ),
        (
            file(
                "rule.yaml",
                "clusters:\n- {name: a, server: 'https://x'}\nhealthRules:\n- {name: widget, group: example.com, version: v1, resource: widgets, kind: Widget, ready: 'object.status.readyReplicas +'}\n",
            ),
            "healthRules: health rule \"widget\": `ready`: ERROR: <input>:1:30: Syntax error",
        ),
        (
            file(
                "rule-name.yaml",
                "clusters:\n- {name: a, server: 'https://x'}\nhealthRules:\n- {name: widget, group: example.com, version: v1, resource: widgets, kind: Widget, paused: 'spec.paused'}\n",
            ),
            "health rule \"widget\": `paused`: unknown name spec: an expression may read only `object`",
        ),
        (
            vec!["serve".into()],
            "serve needs --config FILE, --kubeconfig PATH (or KUBECONFIG) or --karpor-kubeconfig PATH",
        ),
        (
            [
                file("both.yaml", "clusters:\n- {name: a, server: 'https://x'}\n"),
                vec!["--kubeconfig".into(), "/nonexistent/kubeconfig".into()],
            ]
            .concat(),
            "give --config FILE or --kubeconfig PATH, not both",
        ),
        (
            [
                file(
                    "context.yaml",
                    "clusters:\n- {name: a, server: 'https://x'}\n",
                ),
                vec!["--context".into(), "west".into()],
            ]
            .concat(),
            "--context picks contexts of --kubeconfig; with --config the file names the members",
        ),
        (
            vec!["serve".into(), "--context".into(), "west".into()],
            "--context needs --kubeconfig PATH (or KUBECONFIG)",
        ),
        (
            file("empty.yaml", "clusters: []\n"),
            "no clusters: list at least one under `clusters:`",
        ),
        (
            vec![
                "serve".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--karpor-kubeconfig".into(),
                "/nonexistent/karpor".into(),
            ],
            "cannot read /nonexistent/karpor",
        ),
        (
            [
                file(
                    "karpor.yaml",
                    "clusters:\n- {name: a, server: 'https://x'}\n",
                ),
                vec!["--karpor-allow-exec".into()],
            ]
            .concat(),
            "--karpor-context, --karpor-allow-exec, --karpor-read-only, --karpor-allow-endpoint and --karpor-deny-endpoint need --karpor-kubeconfig",
        ),
        (
            [file(
                "karpor-endpoints.yaml",
                "karpor: {kubeconfig: /etc/karpor/config, allowEndpoints: [127.0.0.0/8, nope]}\n",
            )]
            .concat(),
            "karpor.allowEndpoints[1]: \"nope\" is not an address block",
        ),
        (
            [
                file(
                    "lease.yaml",
                    "clusters:\n- {name: a, server: 'https://x'}\n",
                ),
                vec!["--lease-in-cluster".into()],
            ]
            .concat(),
            "lease host cluster in-cluster: not running in a pod",
        ),
        (
            file(
                "lease-both.yaml",
                "clusters:\n- {name: a, server: 'https://x'}\nleases: {inCluster: true, kubeconfig: /x}\n",
            ),
            "leases: give kubeconfig or inCluster: true, not both",
        ),
        (
            vec!["serve".into(), "--config".into(), bad.display().to_string()],
            "needs kubeconfig (+ context) or server",
        ),
        (
            vec![
                "serve".into(),
                "--config".into(),
                "/nonexistent/kube-pulse.yaml".into(),
            ],
            "cannot read /nonexistent/kube-pulse.yaml",
        ),
        (
            vec!["sim".into(), "--app".into(), "nonsense".into()],
            "must look like NAMESPACE/NAME[:REPLICAS]",
        ),
        (
            vec!["demo".into(), "--listen".into(), "0.0.0.0:0".into()],
            "refusing to serve 0.0.0.0:0 without authentication",
        ),
        (
            vec![
                "demo".into(),
                "--auth".into(),
                "tokens".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
            ],
            "--auth tokens needs --tokens-file",
        ),
        (
            vec!["demo".into(), "--auth".into(), "magic".into()],
            "invalid value 'magic' for '--auth <AUTH>'",
        ),
        (
            {
                let mut args = file("on-demand.yaml", "podWatch: {onDemand: true}\n");
                args.splice(0..1, ["agent".into(), "--member".into(), "a".into()]);
                args.extend(["--nats".into(), "nats://127.0.0.1:1".into()]);
                args
            },
            "podWatch.onDemand on an agent needs --hub-key",
        ),
    ];
    for (args, want) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_kube-pulse"))
            .args(&args)
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env("RUST_LOG", "off")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("listening"),
            "{args:?} failed only after listening"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}
