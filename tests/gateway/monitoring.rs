//! The operations kit (deploy/monitoring/, docs/RUNBOOK.md) against the
//! real binary: every metric the alert rules, their tests and the Grafana
//! dashboard name is one a running `kube-pulse demo` exports (the lease
//! families: `demo --leases`; the stream families: `demo --leases --nats`
//! with a real nats-server); every alert
//! has a firing and a quiet promtool case and a runbook section, and the
//! runbook explains every reason docs/STATUS.md lists; the PrometheusRule
//! carries the rules file; the kustomize component renders with the base. And the logs: no escape codes in a file, one JSON object
//! per line with `--log-format json`, a line per state transition.
//!
//! `promtool check rules` / `promtool test rules` themselves run in
//! scripts/check-monitoring.sh.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pulse_testkit::binary::{spawn_binary, terminate, wait_for_url};
use pulse_testkit::http::{get_text, http};
use pulse_testkit::kubectl::{kustomize, overlay};
use pulse_testkit::nats::nats;
use pulse_testkit::poll::eventually;
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn monitoring(file: &str) -> PathBuf {
    Path::new(ROOT).join("deploy/monitoring").join(file)
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// Every `kube_pulse_…` name in any string of `value` (expressions, and
/// the queries of annotation templates and dashboard variables).
fn metric_names(value: &Value, into: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(at) = rest.find("kube_pulse_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                into.insert(name);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| metric_names(v, into)),
        Value::Object(map) => map.values().for_each(|v| metric_names(v, into)),
        _ => {}
    }
}

/// The names in the dashboard's queries: panel targets (`expr`) and
/// template variables (`query`, `definition`); descriptions may name a
/// metric family in prose.
fn dashboard_queries(value: &Value, into: &mut BTreeSet<String>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| dashboard_queries(v, into)),
        Value::Object(map) => {
            for (key, value) in map {
                if ["expr", "query", "definition"].contains(&key.as_str()) {
                    metric_names(value, into);
                } else {
                    dashboard_queries(value, into);
                }
            }
        }
        _ => {}
    }
}

/// The sample names a scrape holds: every sample's own name, and from each
/// family's `# TYPE` line a gauge's name, a counter's `_total`, a
/// histogram's `_bucket`, `_sum` and `_count`. (prometheus-client leaves
/// families without samples out entirely, TYPE line included.)
fn exported_names(scrape: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// Names used in `used` that `exported` lacks, each with where it is used.
fn unknown(used: &[(&str, BTreeSet<String>)], exported: &BTreeSet<String>) -> Vec<String> {
    used.iter()
        .flat_map(|(file, names)| {
            names
                .iter()
                .filter(|n| !exported.contains(*n))
                .map(move |n| format!("{n} (in {file})"))
        })
        .collect()
}

#[tokio::test]
async fn rules_tests_and_dashboard_name_only_metrics_the_demo_exports() {
    let mut used = Vec::new();
    for file in [
        "kube-pulse.rules.yaml",
        "kube-pulse.rules.test.yaml",
        "prometheusrule.yaml",
    ] {
        let mut names = BTreeSet::new();
        metric_names(&yaml(&monitoring(file)), &mut names);
        used.push((file, names));
    }
    let mut names = BTreeSet::new();
    dashboard_queries(&json(&monitoring("grafana-dashboard.json")), &mut names);
    used.push(("grafana-dashboard.json", names));
    for (file, names) in &used {
        assert!(names.len() >= 5, "{file} names only {names:?}");
    }

    // With --karpor: the Karpor source and status writer export their
    // families too.
    let mut child = spawn_binary(&[
        "demo",
        "--listen",
        "127.0.0.1:0",
        "--clusters",
        "2",
        "--karpor",
    ]);
    let url = wait_for_url(&mut child);
    // With --leases: ownership through Leases (held in its first simulated
    // cluster) exports the lease families; without, they have no samples.
    let mut leases_child = spawn_binary(&[
        "demo",
        "--listen",
        "127.0.0.1:0",
        "--clusters",
        "2",
        "--no-scenario",
        "--leases",
    ]);
    let leases_url = wait_for_url(&mut leases_child);
    // With --nats: the stream of changes over a nats-server on loopback
    // exports the stream families, and a push member (its agent in the
    // demo's process) the agents' families. Without the binary they are
    // left out of the check (the test says so; with CI set it fails).
    let nats = nats().await;
    let mut nats_child = nats.as_ref().map(|nats| {
        spawn_binary(&[
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--clusters",
            "2",
            "--no-scenario",
            "--leases",
            "--nats",
            &nats.url,
            "--push-member",
            "staging",
        ])
    });
    let nats_url = nats_child.as_mut().map(wait_for_url);
    if nats.is_none() {
        for (_, names) in &mut used {
            names.retain(|n| {
                !n.starts_with("kube_pulse_stream_") && !n.starts_with("kube_pulse_agent_")
            });
        }
    }
    // Families without samples are left out of a scrape, so give every one
    // a sample: a finished task, watch errors (dev refuses connections for
    // a moment), HTTP requests (the scrapes themselves).
    let client = http();
    // The app is known once staging's first lists are in: retry until then.
    eventually(Duration::from_secs(30), "a Stop task accepted", || {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let task = client
                .post(format!("{url}/api/v1/tasks"))
                .json(&serde_json::json!({"type": "Stop", "cluster": "staging", "namespace": "shop", "app": "cart"}))
                .send()
                .await
                .ok()?;
            (task.status() == 201).then_some(())
        }
    })
    .await;
    let fault = client
        .put(format!("{url}/_sim/clusters/dev/faults"))
        .json(&serde_json::json!({"refuse": true, "healAfterMs": 1500}))
        .send()
        .await
        .unwrap();
    assert_eq!(fault.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(60);
    let scrape_of = |url: String| async move { get_text(&format!("{url}/metrics")).await };
    // Once the --leases demo has listed the Leases and taken both members.
    let settled_leases = [
        "kube_pulse_lease_store_up{namespace=\"default\"} 1",
        "kube_pulse_lease_changes_total{change=\"lost\"} 0",
        "kube_pulse_lease_owned_members 2",
    ];
    let settled = |scrape: &str| {
        settled_leases
            .iter()
            .all(|line| scrape.lines().any(|l| l == *line))
    };
    // Once the --nats demo is connected and has published its members.
    let stream_settled = |scrape: &str| {
        scrape
            .lines()
            .any(|l| l == r#"kube_pulse_stream_connected{stream="KUBE_PULSE"} 1"#)
            && scrape.lines().any(|l| {
                l.strip_prefix(r#"kube_pulse_stream_published_total{stream="KUBE_PULSE"} "#)
                    .is_some_and(|n| n != "0")
            })
    };
    let (scrape, leases_scrape, nats_scrape, exported, missing) = loop {
        let scrape = scrape_of(url.clone()).await;
        let leases_scrape = scrape_of(leases_url.clone()).await;
        let nats_scrape = match &nats_url {
            Some(nats_url) => scrape_of(nats_url.clone()).await,
            None => String::new(),
        };
        let mut exported = exported_names(&scrape);
        exported.extend(exported_names(&leases_scrape));
        exported.extend(exported_names(&nats_scrape));
        let missing = unknown(&used, &exported);
        let nats_settled = nats_url.is_none() || stream_settled(&nats_scrape);
        if (missing.is_empty() && settled(&leases_scrape) && nats_settled)
            || Instant::now() > deadline
        {
            break (scrape, leases_scrape, nats_scrape, exported, missing);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let status = tokio::task::spawn_blocking(move || {
        let nats = nats_child.as_mut().map(terminate);
        (terminate(&mut child), terminate(&mut leases_child), nats)
    })
    .await
    .unwrap();
    assert!(
        status.0.success() && status.1.success() && status.2.is_none_or(|s| s.success()),
        "{status:?}"
    );
    drop(nats);
    assert!(
        missing.is_empty(),
        "not exported by kube-pulse within 60 s: {missing:#?}\nscrape:\n{scrape}\nwith --leases:\n{leases_scrape}\nwith --nats:\n{nats_scrape}"
    );
    // The stream alerts' series come from a gateway that runs with --nats;
    // without it they have none, so those alerts are quiet.
    if nats_url.is_some() {
        assert!(
            stream_settled(&nats_scrape),
            "not connected and published within 60 s:\n{nats_scrape}"
        );
        let with_nats = exported_names(&nats_scrape);
        for name in [
            "kube_pulse_stream_connected",
            "kube_pulse_stream_consumer_lag_messages",
            "kube_pulse_stream_published_total",
            "kube_pulse_stream_publish_errors_total",
            "kube_pulse_stream_consumed_total",
        ] {
            assert!(with_nats.contains(name), "{name} not in\n{nats_scrape}");
        }
    }
    for scrape in [&scrape, &leases_scrape] {
        assert!(
            !exported_names(scrape).contains("kube_pulse_stream_connected"),
            "{scrape}"
        );
    }
    // The lease alerts' series come from a gateway that runs with Leases;
    // without Leases the store gauge has no series, so its alert is quiet.
    let with_leases = exported_names(&leases_scrape);
    for name in [
        "kube_pulse_lease_store_up",
        "kube_pulse_lease_changes_total",
        "kube_pulse_lease_owned_members",
    ] {
        assert!(with_leases.contains(name), "{name} not in\n{leases_scrape}");
    }
    assert!(
        !exported_names(&scrape).contains("kube_pulse_lease_store_up"),
        "{scrape}"
    );
    assert!(
        settled(&leases_scrape),
        "not all of {settled_leases:?} within 60 s:\n{leases_scrape}"
    );
    for name in [
        "kube_pulse_cluster_reason",
        "kube_pulse_delivery_lag_seconds_bucket",
        "kube_pulse_tasks_finished_total",
        "kube_pulse_watch_errors_total",
    ] {
        assert!(exported.contains(name), "{name} not in\n{scrape}");
    }
}

#[test]
fn the_name_check_catches_a_misspelt_metric() {
    let scrape = "# TYPE kube_pulse_collapses counter\n\
                  # TYPE kube_pulse_delivery_lag_seconds histogram\n\
                  kube_pulse_delivery_lag_seconds_count 3\n\
                  # TYPE kube_pulse_sync_phase gauge\n";
    let exported = exported_names(scrape);
    let mut names = BTreeSet::new();
    metric_names(
        &Value::String(
            "rate(kube_pulse_collapses_total[5m]) + kube_pulse_sync_phase + \
             histogram_quantile(0.9, rate(kube_pulse_delivery_lag_seconds_bucket[5m])) + \
             kube_pulse_delivery_lag_seconds_sum + kube_pulse_colapses_total + kube_pulse_collapses"
                .into(),
        ),
        &mut names,
    );
    // A misspelt name, and a counter without `_total` (Prometheus stores
    // only the `_total` series, so a query of the bare name finds nothing).
    assert_eq!(
        unknown(&[("expr", names)], &exported),
        [
            "kube_pulse_colapses_total (in expr)",
            "kube_pulse_collapses (in expr)"
        ]
    );
}

/// The rules of the rules file, as (group, rule) values.
fn alerts() -> Vec<Value> {
    let rules = yaml(&monitoring("kube-pulse.rules.yaml"));
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect()
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to dashes,
/// punctuation other than `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_alert_is_tested_both_ways_and_has_a_runbook_section() {
    let tests = yaml(&monitoring("kube-pulse.rules.test.yaml"));
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .collect();
    let runbook = std::fs::read_to_string(Path::new(ROOT).join("docs/RUNBOOK.md")).unwrap();
    let anchors: BTreeSet<String> = runbook
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect();
    let alerts = alerts();
    assert!(alerts.len() >= 10, "{alerts:?}");
    for alert in &alerts {
        let name = alert["alert"].as_str().expect("alerting rules only");
        let of_alert = || cases.iter().filter(|c| c["alertname"] == name);
        let empty = |c: &&&Value| c["exp_alerts"].as_array().is_none_or(|a| a.is_empty());
        assert!(
            of_alert().any(|c| empty(&c)),
            "{name}: no case where it must not fire"
        );
        assert!(
            of_alert().any(|c| !empty(&c)),
            "{name}: no case where it must fire"
        );
        let annotations = &alert["annotations"];
        for key in ["summary", "description", "runbook_url"] {
            assert!(annotations[key].is_string(), "{name}: no {key}");
        }
        let url = annotations["runbook_url"].as_str().unwrap();
        let (page, fragment) = url.split_once('#').unwrap();
        assert!(page.ends_with("/docs/RUNBOOK.md"), "{name}: {url}");
        assert_eq!(fragment, name.to_lowercase(), "{name}: {url}");
        assert!(
            anchors.contains(fragment),
            "{name}: no heading #{fragment} in docs/RUNBOOK.md"
        );
        assert!(
            ["warning", "critical"].contains(&alert["labels"]["severity"].as_str().unwrap_or("")),
            "{name}: severity"
        );
    }
}

#[test]
fn the_prometheus_rule_carries_the_rules_file_unchanged() {
    let rule = yaml(&monitoring("prometheusrule.yaml"));
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(
        rule["spec"],
        yaml(&monitoring("kube-pulse.rules.yaml")),
        "deploy/monitoring/prometheusrule.yaml's spec differs from kube-pulse.rules.yaml"
    );
}

#[test]
fn the_monitoring_component_renders_with_the_base() {
    // An overlay outside deploy/ (kustomize refuses one inside the base's
    // directory): the base plus the component, as docs/RUNBOOK.md shows.
    let at = Path::new(env!("CARGO_TARGET_TMPDIR")).join("with-monitoring");
    let deploy = Path::new(ROOT).join("deploy");
    let (text, docs) = kustomize(&overlay(&at, &deploy, &["monitoring"]));
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in\n{text}"))
    };
    let (service, monitor, rule) = (
        find("Service"),
        find("ServiceMonitor"),
        find("PrometheusRule"),
    );
    for doc in [monitor, rule] {
        assert_eq!(doc["metadata"]["namespace"], "kube-pulse", "{doc}");
        assert_eq!(
            doc["metadata"]["labels"]["app.kubernetes.io/part-of"], "kube-pulse",
            "{doc}"
        );
    }
    // The ServiceMonitor finds the Service and scrapes its named port.
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    for (key, value) in selector {
        assert_eq!(&service["metadata"]["labels"][key], value, "{key}");
    }
    let port = &monitor["spec"]["endpoints"][0]["port"];
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| &p["name"] == port),
        "{port} is not a port of {service}"
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    // The rules' KubePulseDown watches the job the ServiceMonitor makes (the Service's name).
    let down = alerts()
        .into_iter()
        .find(|a| a["alert"] == "KubePulseDown")
        .unwrap();
    let job = format!("job=\"{}\"", service["metadata"]["name"].as_str().unwrap());
    assert!(down["expr"].as_str().unwrap().contains(&job), "{down}");
    // The base alone stays as it was: the component is optional.
    let base_only = Command::new("kubectl")
        .arg("kustomize")
        .arg(&deploy)
        .output()
        .unwrap();
    let base_text = String::from_utf8(base_only.stdout).unwrap();
    assert!(!base_text.contains("PrometheusRule"), "{base_text}");
}

// ---------------------------------------------------------------- logs

/// `kube-pulse demo` with stdout and stderr to files; returns the child and
/// the two paths once stdout names the listening address.
fn demo_to_files(name: &str, extra: &[&str]) -> (Child, PathBuf, PathBuf, String) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("logs-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let child = Command::new(env!("CARGO_BIN_EXE_kube-pulse"))
        .args(extra)
        .args(["demo", "--listen", "127.0.0.1:0", "--clusters", "2"])
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .env_remove("KUBE_PULSE_LOG_FORMAT")
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let url = loop {
        let text = std::fs::read_to_string(&out).unwrap();
        if let Some(at) = text.find("http://") {
            break text[at..].lines().next().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no address on stdout: {text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    (child, out, err, url)
}

/// Waits (bounded) until `path` has a line for which `found` holds.
fn wait_for_line(path: &Path, what: &str, found: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
        if text.lines().any(&found) {
            return;
        }
        assert!(Instant::now() < deadline, "no {what} in 30 s:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn demo_logs_to_files_carry_no_escape_codes_and_one_line_per_transition() {
    let (mut child, out, err, _) = demo_to_files("pretty", &[]);
    wait_for_line(&err, "cluster transition", |l| {
        l.contains("cluster dev ") && l.contains(" → ")
    });
    wait_for_line(&err, "sync transition", |l| l.contains("sync dev apps/v1/"));
    assert!(terminate(&mut child).success());
    for path in [&out, &err] {
        let bytes = std::fs::read(path).unwrap();
        assert!(!bytes.is_empty(), "{path:?} is empty");
        if let Some(at) = bytes.iter().position(|b| *b == 0x1b) {
            let from = at.saturating_sub(80);
            panic!(
                "escape code at byte {at} of {path:?}: {:?}",
                String::from_utf8_lossy(&bytes[from..(at + 40).min(bytes.len())])
            );
        }
    }
}

#[test]
fn json_logs_are_one_object_per_line_with_the_documented_fields() {
    let (mut child, _, err, _) = demo_to_files("json", &["--log-format", "json"]);
    let has = |l: &str, kind: &str| {
        serde_json::from_str::<Value>(l).is_ok_and(|v| v["kind"] == kind && v["cluster"] == "dev")
    };
    // The transition asserted on below, then a sync one: the first probe
    // may answer after the syncs started.
    wait_for_line(&err, "dev turning Healthy", |l| {
        has(l, "cluster") && serde_json::from_str::<Value>(l).is_ok_and(|v| v["to"] == "Healthy")
    });
    wait_for_line(&err, "sync transition", |l| has(l, "sync"));
    assert!(terminate(&mut child).success());
    let text = std::fs::read_to_string(&err).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("line {}: {e}: {l:?}", i + 1))
        })
        .collect();
    assert!(lines.len() > 3, "{text}");
    for line in &lines {
        for key in ["timestamp", "level", "target"] {
            assert!(line[key].is_string(), "{key} in {line}");
        }
    }
    let cluster = lines
        .iter()
        .find(|l| l["kind"] == "cluster" && l["cluster"] == "dev" && l["to"] == "Healthy")
        .unwrap_or_else(|| panic!("no transition of dev to Healthy in\n{text}"));
    assert_eq!(cluster["level"], "INFO");
    assert_eq!(cluster["topic"], "clusters/dev");
    assert_eq!(cluster["reason"], "Ready");
    let from = cluster["from"].as_str().unwrap();
    assert_eq!(
        cluster["message"],
        format!("cluster dev {from} → Healthy (Ready)")
    );
    let sync = lines
        .iter()
        .find(|l| l["kind"] == "sync" && l["cluster"] == "dev")
        .unwrap();
    let resource = sync["resource"].as_str().unwrap();
    assert!(resource.contains("/v1/"), "{sync}");
    assert_eq!(sync["topic"], format!("clusters/dev/sync/{resource}"));
    // Registration names its cluster with the same field.
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "member cluster registered" && l["cluster"] == "dev"),
        "{text}"
    );
}

#[test]
fn the_runbook_explains_every_reason_docs_status_lists() {
    let status = std::fs::read_to_string(Path::new(ROOT).join("docs/STATUS.md")).unwrap();
    let runbook = std::fs::read_to_string(Path::new(ROOT).join("docs/RUNBOOK.md")).unwrap();
    let mut reasons = BTreeSet::new();
    // The phase tables: | `Phase` | `Reason`, `Reason` | When |
    for row in status.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if cells.len() != 5 {
            continue;
        }
        for reason in cells[2].split('`').skip(1).step_by(2) {
            reasons.insert(reason.to_string());
        }
    }
    assert!(reasons.len() > 25, "{reasons:?}");
    let missing: Vec<&String> = reasons
        .iter()
        .filter(|r| !runbook.contains(&format!("({r})")))
        .collect();
    assert!(missing.is_empty(), "docs/RUNBOOK.md lacks {missing:?}");
}
