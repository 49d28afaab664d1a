//! Members that come and go while `kube-pulse serve` runs: the real binary
//! over simulated members (pulse_testkit::fleet), its `--config` file
//! rewritten and re-read on SIGHUP or when it changes; WebSocket and SSE
//! clients rebuild every document from the wire (pulse_testkit::mirror)
//! and must end equal to REST. docs/RELIABILITY.md lists what each shows.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use pulse_testkit::fleet::{Fleet, MEMBERS};
use pulse_testkit::mirror::{Reader, synced_readers};
use serde_json::Value;

/// Bound of every wait here.
const WAIT: Duration = Duration::from_secs(30);

/// The topics of member `m` in `docs`.
fn topics_of(m: &str, docs: &BTreeMap<String, Value>) -> BTreeSet<String> {
    let (cluster, sync, apps) = (
        format!("clusters/{m}"),
        format!("clusters/{m}/"),
        format!("apps/{m}/"),
    );
    docs.keys()
        .filter(|t| **t == cluster || t.starts_with(&sync) || t.starts_with(&apps))
        .cloned()
        .collect()
}

/// The value of the sample whose line starts with `series` (0 when absent).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Polls `check` until it holds (bounded by [`WAIT`]); panics with `what`
/// and the gateway's log otherwise.
async fn until<F, Fut>(fleet: &Fleet, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !check().await {
        if Instant::now() > deadline {
            let log = fleet.log();
            panic!(
                "{what}: not within {WAIT:?}\ngateway log (end):\n{}",
                &log[log.len().saturating_sub(4000)..]
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every reader equals REST, without a revision gap.
async fn agree(fleet: &Fleet, readers: &[Reader]) {
    let deadline = Instant::now() + WAIT;
    loop {
        let truth = fleet.rest().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut wrong = Vec::new();
        for (i, reader) in readers.iter().enumerate() {
            let mirror = reader.mirror.lock();
            assert!(mirror.gaps.is_empty(), "reader {i}: gaps {:?}", mirror.gaps);
            let differences = mirror.differences(&truth);
            if !differences.is_empty() {
                wrong.push((i, differences));
            }
        }
        if wrong.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "readers disagree with REST after {WAIT:?}: {wrong:?}"
        );
    }
}

/// Every app of the members `running` is Running, and no topic of `gone` is left.
async fn settled(fleet: &Fleet, running: &[&str], gone: &[&str], apps: usize) -> bool {
    let docs = fleet.rest().await;
    let members_running = running.iter().all(|m| {
        docs.iter()
            .filter(|(t, d)| t.starts_with(&format!("apps/{m}/")) && d["phase"] == "Running")
            .count()
            == apps
    });
    members_running && gone.iter().all(|m| topics_of(m, &docs).is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_removes_and_adds_members_live_and_refuses_an_invalid_file() {
    let apps = 2;
    // Only SIGHUP reloads here (the file is not polled).
    let args = ["--config-reload-interval", "0"];
    let mut fleet = Fleet::start_with(
        &["a", "b", "c", "d"],
        &["a", "b", "c"],
        apps,
        "",
        &args,
        |_, _| {},
    )
    .await;
    until(&fleet, "a, b, c running", || {
        settled(&fleet, &["a", "b", "c"], &["d"], apps)
    })
    .await;
    let readers = synced_readers(&fleet.url, 2, WAIT).await;
    agree(&fleet, &readers).await;
    let before = fleet.rest().await;
    let of_c = topics_of("c", &before);
    // The cluster, its six watched resources (deployments, statefulsets,
    // namespaces, nodes, pods, warning events) and its apps.
    assert_eq!(of_c.len(), 1 + 6 + apps, "{of_c:?}");
    assert!(fleet.metrics().await.contains("cluster=\"c\""));

    // c out, d in.
    fleet.configure(&["a", "b", "d"]);
    let hup = Instant::now();
    fleet.hup();
    until(&fleet, "c removed", || async {
        topics_of("c", &fleet.rest().await).is_empty()
    })
    .await;
    let removed_after = hup.elapsed();
    until(&fleet, "c removed and d running", || {
        settled(&fleet, &["a", "b", "d"], &["c"], apps)
    })
    .await;
    eprintln!(
        "figures: c's topics removed {removed_after:?} and d's apps running {:?} after SIGHUP",
        hup.elapsed()
    );
    agree(&fleet, &readers).await;
    for (i, reader) in readers.iter().enumerate() {
        let mirror = reader.mirror.lock();
        let missing: Vec<&String> = of_c.difference(&mirror.removed).collect();
        assert!(
            missing.is_empty(),
            "reader {i} got no `removed` for {missing:?}"
        );
        assert_eq!(
            topics_of(
                "d",
                &mirror
                    .docs
                    .iter()
                    .map(|(t, (_, d))| (t.clone(), d.clone()))
                    .collect()
            )
            .len(),
            1 + 6 + apps
        );
    }
    let text = fleet.metrics().await;
    assert!(!text.contains("cluster=\"c\""), "series of c left:\n{text}");
    assert!(text.contains("cluster=\"d\""));
    assert_eq!(
        sample(&text, "kube_pulse_config_reloads_total{result=\"applied\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "kube_pulse_config_last_reload_successful"),
        1.0
    );

    // Invalid files are refused, whole: nothing changes.
    let running = fleet.rest().await.keys().cloned().collect::<BTreeSet<_>>();
    let server = |m: &str| fleet.sim(m).url();
    let invalid = [
        "clusters: [\n".to_string(),
        // Valid YAML, but e's CA file is missing: b and d do not change
        // either, and a is not removed.
        format!(
            "clusters:\n  - {{name: b, server: \"{}\"}}\n  - {{name: d, server: \"{}\"}}\n  - {{name: e, server: \"{}\", caFile: /nonexistent/ca.pem}}\n",
            server("b"),
            server("d"),
            server("c")
        ),
        // A health rule that does not compile: refused with its name and
        // the CEL error; the running rules stay.
        format!(
            "clusters:\n  - {{name: b, server: \"{}\"}}\n  - {{name: d, server: \"{}\"}}\nhealthRules:\n  - {{name: widget, group: example.com, version: v1, resource: widgets, kind: Widget, ready: 'object.status.readyReplicas +'}}\n",
            server("b"),
            server("d")
        ),
    ];
    for (i, text) in invalid.iter().enumerate() {
        fleet.write_config(text);
        fleet.hup();
        let refused = (i + 1) as f64;
        until(&fleet, "the reload refused", || async {
            sample(
                &fleet.metrics().await,
                "kube_pulse_config_reloads_total{result=\"refused\"}",
            ) == refused
        })
        .await;
        assert!(fleet.alive(), "the gateway survives an invalid file");
        let text = fleet.metrics().await;
        assert_eq!(
            sample(&text, "kube_pulse_config_last_reload_successful"),
            0.0
        );
        assert_eq!(
            sample(&text, "kube_pulse_config_reloads_total{result=\"applied\"}"),
            1.0
        );
        let now = fleet.rest().await.keys().cloned().collect::<BTreeSet<_>>();
        assert_eq!(now, running, "file {i} changed the members");
    }
    let log = fleet.log();
    assert!(
        log.contains("configuration reload refused")
            && log.contains("/nonexistent/ca.pem cannot be read")
            && log.contains("widget")
            && log.contains("`ready`: ERROR"),
        "{log}"
    );
    // A valid file again: applied, nothing to change.
    fleet.configure(&["a", "b", "d"]);
    fleet.hup();
    until(&fleet, "the reload applied", || async {
        sample(
            &fleet.metrics().await,
            "kube_pulse_config_last_reload_successful",
        ) == 1.0
    })
    .await;
    agree(&fleet, &readers).await;
    assert_eq!(
        fleet.rest().await.keys().cloned().collect::<BTreeSet<_>>(),
        running
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_token_in_the_file_restarts_the_member_and_it_recovers() {
    let apps = 2;
    // The file is checked every second; no SIGHUP in this test.
    let args = ["--config-reload-interval", "1"];
    let tweak = |name: &str, c: &mut kube_pulse_sim::SimConfig| {
        if name == "c" {
            c.token = Some("s3cret".into());
        }
    };
    // c needs a token the configuration does not give yet: its public
    // /readyz answers, its lists are refused with 401.
    let fleet = Fleet::start_with(&MEMBERS, &MEMBERS, apps, "", &args, tweak).await;
    until(
        &fleet,
        "c's lists Unauthorized, a and b running",
        || async {
            let docs = fleet.rest().await;
            let deployments = "clusters/c/sync/apps/v1/deployments";
            docs.get(deployments)
                .is_some_and(|s| s["reason"] == "Unauthorized")
                && docs
                    .get("clusters/c")
                    .is_some_and(|c| c["phase"] != "Healthy")
                && settled(&fleet, &["a", "b"], &[], apps).await
        },
    )
    .await;
    let readers = synced_readers(&fleet.url, 2, WAIT).await;
    let c = fleet.sim("c").url();
    let (a, b) = (fleet.sim("a").url(), fleet.sim("b").url());
    fleet.write_config(&format!(
        "clusters:\n  - {{name: a, server: \"{a}\"}}\n  - {{name: b, server: \"{b}\"}}\n  - {{name: c, server: \"{c}\", token: s3cret}}\n"
    ));
    let written = Instant::now();
    until(&fleet, "c healthy with its apps running", || async {
        let docs = fleet.rest().await;
        docs.get("clusters/c")
            .is_some_and(|c| c["phase"] == "Healthy")
            && settled(&fleet, &["a", "b", "c"], &[], apps).await
    })
    .await;
    eprintln!(
        "figures: c healthy with its apps running {:?} after the file was written",
        written.elapsed()
    );
    agree(&fleet, &readers).await;
    for reader in &readers {
        // A restart keeps the member's documents: nothing was removed.
        assert!(reader.mirror.lock().removed.is_empty());
    }
    let text = fleet.metrics().await;
    assert_eq!(
        sample(&text, "kube_pulse_config_reloads_total{result=\"applied\"}"),
        1.0
    );
    // a and b were not restarted: one initial list per watched resource.
    assert_eq!(
        sample(
            &text,
            "kube_pulse_watch_lists_total{cluster=\"a\",resource=\"apps/v1/deployments\"}"
        ),
        1.0
    );
}
