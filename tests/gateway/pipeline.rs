//! Sources + engine + hub against simulated clusters through real kube-rs:
//! every fault leads to the expected phase and reason and recovery leads
//! back; thresholds hold; a 410 relist changes no app; registry changes
//! start and stop watches; one watch per resource per cluster.

use std::time::Duration;

use kube_pulse::hub::Pattern;
use kube_pulse::sources::{SyncRegistry, SyncResource};
use kube_pulse::status::lifecycle::transitions;
use kube_pulse_sim::{Faults, SimCluster, workload_manifest};
use pulse_testkit::gateway::{
    doc_where, label, members, pipeline, quick_pipeline, serve, start_gateway,
};
use pulse_testkit::http::{get_json, http};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{deployment, sim_with};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

async fn member(name: &str) -> SimCluster {
    sim_with(|c| {
        c.name = name.into();
        c.workloads = vec![deployment("shop", "web", 2)];
    })
    .await
}

fn is(phase: &'static str, reason: &'static str) -> impl Fn(&Value) -> bool {
    move |d| d["phase"] == phase && d["reason"] == reason
}

#[tokio::test]
async fn healthy_clusters_sync_and_apps_run_with_one_watch_per_resource() {
    let shutdown = CancellationToken::new();
    let (a, b) = (member("a").await, member("b").await);
    let p = pipeline(&[&a, &b], vec![], &shutdown).await;
    let hub = p.hub().clone();
    for c in ["a", "b"] {
        let doc = doc_where(&hub, &format!("clusters/{c}"), WAIT, is("Healthy", "Ready")).await;
        assert_eq!(doc["probe"]["serverVersion"], "v1.32.0-kube-pulse-sim");
        assert!(doc["probe"]["latencyMs"].is_u64());
        doc_where(&hub, &format!("clusters/{c}"), WAIT, |d| {
            d["resources"]["synced"] == 6
        })
        .await;
        for r in [
            "apps/v1/deployments",
            "apps/v1/statefulsets",
            "core/v1/namespaces",
            "core/v1/pods",
            "core/v1/events",
        ] {
            doc_where(
                &hub,
                &format!("clusters/{c}/sync/{r}"),
                WAIT,
                is("Syncing", "Watching"),
            )
            .await;
        }
        let app = doc_where(
            &hub,
            &format!("apps/{c}/shop/web"),
            WAIT,
            is("Running", "AllReady"),
        )
        .await;
        assert_eq!(app["state"], "Running");
        assert_eq!(app["message"], "2/2 ready");
    }
    // However many subscribers there are, each cluster serves one watch per resource.
    let subscribers: Vec<_> = (0..200)
        .map(|i| {
            hub.subscribe(vec![
                Pattern::parse(if i % 2 == 0 {
                    "clusters/**"
                } else {
                    "apps/*/shop/*"
                })
                .unwrap(),
            ])
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for sim in [&a, &b] {
        let stats = sim.stats();
        for r in [
            "apps/deployments",
            "apps/statefulsets",
            "core/namespaces",
            "core/pods",
            "core/events",
        ] {
            // The initial state streamed inside the one watch: no LIST.
            assert_eq!(stats.count(r, "watch"), 1, "{} {r}: {stats:?}", sim.name());
            assert_eq!(stats.count(r, "list"), 0, "{} {r}", sim.name());
        }
        assert_eq!(stats.open_watches, 6);
    }
    // And the engine's own: the summary topics' observer.
    assert_eq!(hub.stats().subscriptions, 201);
    drop(subscribers);
    p.stop().await;
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn every_fault_shows_up_with_its_reason_and_recovery_follows() {
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let hub = p.hub().clone();
    doc_where(&hub, "clusters/a", WAIT, is("Healthy", "Ready")).await;
    let cases: Vec<(&str, Faults, &'static str)> = vec![
        (
            "refused connections",
            Faults {
                refuse: true,
                ..Faults::default()
            },
            "Disconnected",
        ),
        (
            "bad credentials",
            Faults {
                status: Some(401),
                ..Faults::default()
            },
            "Unauthorized",
        ),
        (
            "readyz failing",
            Faults {
                not_ready: true,
                ..Faults::default()
            },
            "ApiServerNotReady",
        ),
        (
            "server errors",
            Faults {
                status: Some(500),
                ..Faults::default()
            },
            "ApiServerNotReady",
        ),
        (
            "stalled server",
            Faults {
                stall: true,
                ..Faults::default()
            },
            "Timeout",
        ),
    ];
    for (name, faults, reason) in cases {
        a.set_faults(faults);
        let doc = doc_where(&hub, "clusters/a", WAIT, is("Unhealthy", reason)).await;
        assert!(doc["probe"]["lastError"].is_string(), "{name}: {doc}");
        // While unreachable, its syncs are stopped rather than flapping.
        if reason == "Disconnected" {
            doc_where(
                &hub,
                "clusters/a/sync/apps/v1/deployments",
                WAIT,
                is("Stopped", "ClusterUnhealthy"),
            )
            .await;
        }
        a.heal();
        doc_where(&hub, "clusters/a", WAIT, |d| {
            d["phase"] == "Healthy" && d["resources"]["synced"] == 6
        })
        .await;
        doc_where(
            &hub,
            "clusters/a/sync/apps/v1/deployments",
            WAIT,
            is("Syncing", "Watching"),
        )
        .await;
    }
    let history = transitions(&hub.get("clusters/a").unwrap().doc);
    let reasons: Vec<&str> = history
        .iter()
        .filter(|h| h["to"] == "Unhealthy")
        .map(|h| h["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        [
            "Disconnected",
            "Unauthorized",
            "ApiServerNotReady",
            "ApiServerNotReady",
            "Timeout"
        ]
    );
    p.stop().await;
    a.shutdown().await;
}

#[tokio::test]
async fn a_denied_resource_fails_its_sync_and_degrades_the_cluster() {
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    a.set_deny(["apps/deployments"]);
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let hub = p.hub().clone();
    let sync = doc_where(&hub, "clusters/a/sync/apps/v1/deployments", WAIT, |d| {
        d["reason"] == "Forbidden" && (d["phase"] == "Error" || d["phase"] == "Backoff")
    })
    .await;
    assert!(
        sync["lastError"].as_str().unwrap().contains("forbidden"),
        "{sync}"
    );
    let cluster = doc_where(&hub, "clusters/a", WAIT, is("Degraded", "ResourcesFailing")).await;
    assert_eq!(cluster["resources"]["failing"], 1);
    assert_eq!(cluster["message"], "1 of 6 synced resources failing");
    doc_where(&hub, "clusters/a/sync/apps/v1/deployments", WAIT, |d| {
        d["phase"] == "Backoff" && d["retryAt"].is_string()
    })
    .await;
    a.set_deny(Vec::<String>::new());
    doc_where(
        &hub,
        "clusters/a/sync/apps/v1/deployments",
        Duration::from_secs(40),
        is("Syncing", "Watching"),
    )
    .await;
    doc_where(&hub, "clusters/a", WAIT, is("Healthy", "Ready")).await;
    doc_where(&hub, "apps/a/shop/web", WAIT, is("Running", "AllReady")).await;
    p.stop().await;
    a.shutdown().await;
}

#[tokio::test]
async fn a_single_lost_probe_does_not_flap_the_cluster() {
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let hub = p.hub().clone();
    doc_where(&hub, "clusters/a", WAIT, is("Healthy", "Ready")).await;
    // Fail only /readyz, for exactly one probe.
    a.set_faults(Faults {
        status: Some(500),
        status_path_prefix: Some("/readyz".into()),
        ..Faults::default()
    });
    let doc = doc_where(&hub, "clusters/a", WAIT, |d| {
        d["probe"]["consecutiveFailures"] == 1
    })
    .await;
    a.heal();
    assert_eq!(label(&doc), "Healthy (Ready)");
    assert!(
        doc["message"]
            .as_str()
            .unwrap()
            .starts_with("probe failed (1/3)"),
        "{doc}"
    );
    doc_where(&hub, "clusters/a", WAIT, |d| {
        d["probe"]["consecutiveSuccesses"] == 1
    })
    .await;
    // Several more probes (every 200 ms) pass without a transition.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let doc = hub.get("clusters/a").unwrap().doc.as_ref().clone();
    assert_eq!(label(&doc), "Healthy (Ready)");
    let history = transitions(&doc);
    assert!(
        history.iter().all(|h| h["to"] != "Unhealthy"),
        "{history:?}"
    );
    p.stop().await;
    a.shutdown().await;
}

#[tokio::test]
async fn a_forced_relist_changes_no_app() {
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let hub = p.hub().clone();
    doc_where(&hub, "apps/a/shop/web", WAIT, is("Running", "AllReady")).await;
    doc_where(
        &hub,
        "clusters/a/sync/apps/v1/deployments",
        WAIT,
        is("Syncing", "Watching"),
    )
    .await;
    let mut apps = hub.subscribe(vec![Pattern::parse("apps/**").unwrap()]);
    let history_before = hub.get("apps/a/shop/web").unwrap().doc["history"].clone();
    let lists_before = a.stats().count("apps/deployments", "watch");
    a.expire_watches();
    // The deployments watch relists (a new streamed initial state): Error
    // (Expired), Listing, Syncing again.
    doc_where(&hub, "clusters/a/sync/apps/v1/deployments", WAIT, |d| {
        d["phase"] == "Syncing" && transitions(d).iter().any(|h| h["reason"] == "Expired")
    })
    .await;
    eventually(WAIT, "a relist", || async {
        (a.stats().count("apps/deployments", "watch") > lists_before).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let delivered = tokio::time::timeout(Duration::from_millis(200), apps.next()).await;
    assert!(
        delivered.is_err(),
        "an unchanged app was republished: {delivered:?}"
    );
    assert_eq!(
        hub.get("apps/a/shop/web").unwrap().doc["history"],
        history_before
    );
    p.stop().await;
    a.shutdown().await;
}

#[tokio::test]
async fn registry_changes_start_and_stop_watches() {
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let hub = p.hub().clone();
    doc_where(&hub, "clusters/a", WAIT, |d| {
        d["resources"]["total"] == 6 && d["resources"]["synced"] == 6
    })
    .await;
    assert_eq!(a.stats().count("core/configmaps", "watch"), 0);
    let registry = SyncRegistry {
        name: Some("cm".into()),
        clusters: vec!["a".into()],
        resources: vec![
            SyncResource::all("", "v1", "configmaps"),
            SyncResource::all("example.com", "v1", "widgets"),
        ],
    };
    p.set_registries(vec![registry.clone()]).await;
    doc_where(
        &hub,
        "clusters/a/sync/core/v1/configmaps",
        WAIT,
        is("Syncing", "Watching"),
    )
    .await;
    // A resource the cluster does not serve is reported, not silently skipped.
    doc_where(&hub, "clusters/a/sync/example.com/v1/widgets", WAIT, |d| {
        d["reason"] == "NotServed"
    })
    .await;
    doc_where(&hub, "clusters/a", WAIT, |d| d["resources"]["total"] == 8).await;
    eventually(WAIT, "a configmaps watch", || async {
        (a.stats().count("core/configmaps", "watch") == 1).then_some(())
    })
    .await;
    p.set_registries(vec![]).await;
    doc_where(
        &hub,
        "clusters/a/sync/core/v1/configmaps",
        WAIT,
        is("Stopped", "RemovedFromRegistry"),
    )
    .await;
    doc_where(&hub, "clusters/a", WAIT, |d| {
        d["resources"]["total"] == 6 && d["phase"] == "Healthy"
    })
    .await;
    eventually(WAIT, "the configmaps watch closed", || async {
        (a.stats().open_watches == 6).then_some(())
    })
    .await;
    // Back in the registry: a new watch, and the document follows it again.
    p.set_registries(vec![registry]).await;
    doc_where(
        &hub,
        "clusters/a/sync/core/v1/configmaps",
        WAIT,
        is("Syncing", "Watching"),
    )
    .await;
    doc_where(&hub, "clusters/a", WAIT, |d| d["resources"]["total"] == 8).await;
    eventually(WAIT, "a second configmaps watch", || async {
        (a.stats().count("core/configmaps", "watch") == 2).then_some(())
    })
    .await;
    p.stop().await;
    a.shutdown().await;
}

#[tokio::test]
async fn registry_resources_are_counted_through_metadata_watches() {
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    let def = a
        .store()
        .catalog()
        .find("", "v1", "configmaps")
        .unwrap()
        .clone();
    // 1 200 ConfigMaps of about 1 KiB: three pages of the watcher's list.
    for i in 0..1200 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i}"), "namespace": "shop"},
            "data": {"filler": "x".repeat(1024)}});
        a.store().create(&def, Some("shop"), cm, false).unwrap();
    }
    let listed = a.store().snapshot(&def).len() as u64;
    assert!(listed >= 1200);
    let registry = SyncRegistry {
        name: Some("cm".into()),
        clusters: vec!["a".into()],
        resources: vec![SyncResource::all("", "v1", "configmaps")],
    };
    let p = pipeline(&[&a], vec![registry], &shutdown).await;
    let hub = p.hub().clone();
    let topic = "clusters/a/sync/core/v1/configmaps";
    doc_where(&hub, topic, WAIT, |d| {
        is("Syncing", "Watching")(d) && d["objects"] == listed
    })
    .await;

    // Events: one created, two deleted, one changed (counted once).
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(a.client(), "shop");
    eventually(WAIT, "the configmaps watch", || async {
        (a.stats().count("core/configmaps", "watch") >= 1).then_some(())
    })
    .await;
    let extra = serde_json::from_value(json!({"metadata": {"name": "extra"}})).unwrap();
    let params = kube::api::PostParams::default();
    api.create(&params, &extra).await.unwrap();
    for name in ["cm-0", "cm-1"] {
        api.delete(name, &Default::default()).await.unwrap();
    }
    let patch = json!({"data": {"changed": "yes"}});
    api.patch(
        "cm-2",
        &Default::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    let rv = api.get("cm-2").await.unwrap().metadata.resource_version;
    doc_where(&hub, topic, WAIT, |d| {
        d["objects"] == listed - 1 && d["resourceVersion"] == json!(rv)
    })
    .await;

    // An in-stream 410: a relist through a new streamed initial state of
    // metadata, same count.
    let watches_before = a.stats().count("core/configmaps", "watch");
    a.expire_watches();
    doc_where(&hub, topic, WAIT, |d| {
        is("Syncing", "Watching")(d)
            && d["objects"] == listed - 1
            && d["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("too old"))
    })
    .await;
    assert!(a.stats().count("core/configmaps", "watch") > watches_before);
    // Every request of the registry resource asked for metadata only.
    let stats = a.stats();
    let (lists, watches) = (
        stats.count("core/configmaps", "list"),
        stats.count("core/configmaps", "watch"),
    );
    assert!(
        lists == 0 && watches >= 2,
        "{lists} lists, {watches} watches"
    );
    assert_eq!(stats.count("core/configmaps", "metadata"), lists + watches);
    assert_eq!(stats.count("apps/deployments", "metadata"), 0);
    p.stop().await;
    a.shutdown().await;
}

#[tokio::test]
async fn apps_follow_their_workloads_through_every_stable_state() {
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let hub = p.hub().clone();
    let topic = "apps/a/shop/web";
    doc_where(&hub, topic, WAIT, is("Running", "AllReady")).await;

    let mut scaled = workload_manifest(&deployment("shop", "web", 4));
    a.apply(&scaled).unwrap();
    doc_where(&hub, topic, WAIT, |d| d["phase"] == "Degraded").await;
    doc_where(&hub, topic, WAIT, |d| {
        d["phase"] == "Running" && d["expected"] == 4 && d["ready"] == 4
    })
    .await;

    scaled["spec"]["replicas"] = json!(0);
    a.apply(&scaled).unwrap();
    doc_where(&hub, topic, WAIT, |d| {
        d["phase"] == "Stopped" && d["message"] == "scaled to 0"
    })
    .await;

    // A broken image scaled up: nothing gets ready and the rollout times
    // out; the pods' readiness failing is the cause the reason names.
    a.set_failing_images(["registry.example/web:broken"]);
    let mut broken = workload_manifest(&deployment("shop", "web", 2));
    broken["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("registry.example/web:broken");
    broken["spec"]["progressDeadlineSeconds"] = json!(1);
    a.apply(&broken).unwrap();
    let panic = doc_where(&hub, topic, WAIT, is("Panic", "NotReady")).await;
    let message = panic["message"].as_str().unwrap();
    assert!(message.starts_with("0/2 ready: 2 pods NotReady"), "{panic}");
    assert!(message.contains("timed out progressing"), "{panic}");

    let ns = a.store().catalog().namespaces().clone();
    a.store()
        .delete(&ns, None, "shop", &Default::default(), false)
        .unwrap();
    doc_where(&hub, topic, WAIT, is("NotExisted", "NamespaceNotFound")).await;
    a.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}))
        .unwrap();
    doc_where(&hub, topic, WAIT, is("Stopped", "NoWorkloads")).await;

    let history: Vec<String> = transitions(&hub.get(topic).unwrap().doc)
        .iter()
        .map(|h| h["to"].as_str().unwrap().to_string())
        .collect();
    for phase in ["Running", "Degraded", "Stopped", "Panic", "NotExisted"] {
        assert!(
            history.iter().any(|h| h == phase),
            "{phase} missing from {history:?}"
        );
    }
    p.stop().await;
    a.shutdown().await;
}

#[tokio::test]
async fn readiness_needs_an_answer_from_every_member_but_not_a_healthy_one() {
    use kube_pulse::gateway;
    use kube_pulse::http::router::GatewayState;
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    // Unreachable from the start: no answer yet, then "Unhealthy" is an answer.
    a.set_faults(Faults {
        stall: true,
        ..Faults::default()
    });
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let health = gateway::health_for(&p, None, Default::default());
    let state = GatewayState::new(
        p.hub().clone(),
        Default::default(),
        health,
        shutdown.clone(),
    );
    let (url, server) = serve(state, &shutdown).await;
    let client = http();
    let readyz = |path: &'static str| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let r = client.get(format!("{url}{path}")).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // The first probe is still waiting on the stalled server (500 ms timeout).
    let (status, body) = readyz("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body,
        "[+] Ping ok\n[+] Server ok\n[-] Syncer fail\n[+] Storage ok\nhealth check failed\n"
    );
    let (_, reason) = readyz("/readyz/syncer").await;
    assert_eq!(
        reason,
        "internal server error: cluster a has not answered yet\n"
    );
    doc_where(p.hub(), "clusters/a", WAIT, is("Unhealthy", "Timeout")).await;
    let (status, body) = readyz("/readyz").await;
    assert_eq!(
        (status, body.as_str()),
        (
            200,
            "[+] Ping ok\n[+] Server ok\n[+] Syncer ok\n[+] Storage ok\nhealth check passed\n"
        )
    );
    assert_eq!(readyz("/livez").await, (200, "OK".to_string()));
    assert_eq!(readyz("/healthz").await, (200, "ok".to_string()));
    a.heal();
    shutdown.cancel();
    server.await.unwrap();
    p.stop().await;
    a.shutdown().await;
}

const SYNCS: [&str; 3] = [
    "clusters/a/sync/apps/v1/deployments",
    "clusters/a/sync/apps/v1/statefulsets",
    "clusters/a/sync/core/v1/namespaces",
];

/// How long until a sync document's `retryAt` (zero when it has none or it passed).
fn retry_in(doc: &Value) -> Duration {
    doc["retryAt"]
        .as_str()
        .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
        .and_then(|at| (at.to_utc() - chrono::Utc::now()).to_std().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn documents_are_fresh_within_moments_of_a_member_answering_again() {
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let hub = p.hub().clone();
    doc_where(&hub, "apps/a/shop/web", WAIT, is("Running", "AllReady")).await;
    a.set_faults(Faults {
        refuse: true,
        ..Faults::default()
    });
    // Refused long enough for every watch to back off well beyond the bound
    // below (0.8 s doubling: the fourth retry waits 6.4 s or more).
    for topic in SYNCS {
        doc_where(&hub, topic, Duration::from_secs(25), |d| {
            retry_in(d) > Duration::from_secs(4)
        })
        .await;
    }
    for topic in SYNCS {
        let doc = hub.get(topic).unwrap().doc.as_ref().clone();
        assert_eq!(label(&doc), "Stopped (ClusterUnhealthy)", "{topic}");
    }
    // The member changes while it is unreachable.
    a.apply(&workload_manifest(&deployment("shop", "web", 3)))
        .unwrap();
    let healed = std::time::Instant::now();
    a.heal();
    let bound = Duration::from_millis(2500);
    doc_where(&hub, "apps/a/shop/web", bound, |d| d["expected"] == 3).await;
    let app_fresh = healed.elapsed();
    for topic in SYNCS {
        // Syncing again, and by a completed relist, not by resuming a dead watch.
        let doc = doc_where(&hub, topic, bound.saturating_sub(healed.elapsed()), |d| {
            d["phase"] == "Syncing"
        })
        .await;
        let history = transitions(&doc);
        let last_listing = history.iter().rev().find(|h| h["to"] == "Listing");
        assert_eq!(
            last_listing.map(|h| h["reason"].clone()),
            Some(json!("Relist")),
            "{topic}: {history:?}"
        );
        assert_eq!(
            history.last().map(|h| h["from"].clone()),
            Some(json!("Listing")),
            "{topic}: {history:?}"
        );
    }
    let all_fresh = healed.elapsed();
    assert!(all_fresh < bound, "fresh {all_fresh:?} after healing");
    // A sync is Syncing once its list is done; its watch request reaches the
    // member a moment later.
    eventually(bound, "the six watches open again", || async {
        (a.stats().open_watches == 6).then_some(())
    })
    .await;
    eprintln!("app fresh {app_fresh:?}, every sync {all_fresh:?} after healing");
    p.stop().await;
    a.shutdown().await;
}

#[tokio::test]
async fn a_resource_failing_on_every_retry_keeps_the_cluster_degraded() {
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    a.set_deny(["apps/deployments"]);
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let hub = p.hub().clone();
    doc_where(&hub, "clusters/a", WAIT, is("Degraded", "ResourcesFailing")).await;
    // Retries after 0.8 s, 1.6 s, 3.2 s (or later, with jitter): several in 6 s.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let sync = hub.get(SYNCS[0]).unwrap().doc.as_ref().clone();
    let lists = transitions(&sync)
        .iter()
        .filter(|h| h["to"] == "Listing")
        .count();
    assert!(lists >= 3, "a first list and two retries: {sync:#}");
    let cluster = hub.get("clusters/a").unwrap().doc.as_ref().clone();
    assert_eq!(label(&cluster), "Degraded (ResourcesFailing)");
    let to: Vec<String> = transitions(&cluster)
        .iter()
        .map(|h| h["to"].as_str().unwrap().to_string())
        .collect();
    let degraded = to.iter().position(|p| p == "Degraded").unwrap();
    assert_eq!(
        to[degraded..],
        ["Degraded"],
        "no transition after the first failure: {to:?}"
    );
    assert_eq!(cluster["resources"]["failing"], 1);
    p.stop().await;
    a.shutdown().await;
}

#[tokio::test]
async fn an_app_whose_deployment_is_deleted_is_removed_after_the_retention() {
    use k8s_openapi::api::apps::v1::Deployment;
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    let mut config = quick_pipeline(vec![]);
    config.app_retention = Duration::from_secs(1);
    let p = kube_pulse::pipeline::Pipeline::start(members(&[&a]), config, &shutdown)
        .await
        .expect("pipeline starts");
    let hub = p.hub().clone();
    let topic = "apps/a/shop/web";
    doc_where(&hub, topic, WAIT, is("Running", "AllReady")).await;

    let deployments: kube::Api<Deployment> =
        kube::Api::namespaced(p.clients()["a"].clone(), "shop");
    deployments
        .delete("web", &Default::default())
        .await
        .expect("the simulator deletes the Deployment");
    let deleted = std::time::Instant::now();
    // The app is Stopped (NoWorkloads) for the retention, then its topic goes.
    let within = Duration::from_secs(1 + 4);
    loop {
        if hub.get(topic).is_none() {
            break;
        }
        assert!(
            deleted.elapsed() < within,
            "apps/a/shop/web still there {within:?} after its Deployment was deleted: {:?}",
            hub.get(topic).map(|d| label(&d.doc))
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        deleted.elapsed() >= Duration::from_millis(900),
        "removed before the retention: {:?}",
        deleted.elapsed()
    );
    // The cluster itself is still there.
    assert!(hub.get("clusters/a").is_some());
    p.stop().await;
    a.shutdown().await;
}

/// A member whose token (a JWT) expires in three days and whose clock is
/// two minutes ahead gets both warnings on its cluster document, while it
/// stays Healthy; the warnings go when the clock is right again.
#[tokio::test]
async fn expiring_credentials_and_clock_skew_are_warned_of() {
    use base64::Engine;
    let enc = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let exp = chrono::Utc::now().timestamp() + 3 * 86_400 + 3_600;
    let token = format!(
        "{}.{}.c2ln",
        enc(json!({"alg": "RS256", "kid": "sim"})),
        enc(json!({"sub": "system:serviceaccount:kube-pulse:gateway", "exp": exp}))
    );
    let sim = sim_with(|c| {
        c.name = "a".into();
        c.token = Some(token.clone());
    })
    .await;
    sim.set_faults(Faults {
        clock_skew_seconds: 120,
        ..Faults::default()
    });
    let shutdown = CancellationToken::new();
    let p = pipeline(&[&sim], vec![], &shutdown).await;
    let doc = doc_where(p.hub(), "clusters/a", WAIT, |d| {
        d["phase"] == "Healthy" && d["warnings"].as_array().is_some_and(|w| w.len() == 2)
    })
    .await;
    assert_eq!(doc["credentials"]["kind"], "Token");
    assert_eq!(
        doc["credentials"]["expires"],
        chrono::DateTime::from_timestamp(exp, 0)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    assert_eq!(doc["warnings"][0]["reason"], "CredentialsExpiring");
    assert!(
        doc["warnings"][0]["message"]
            .as_str()
            .unwrap()
            .ends_with("(within 4 days)"),
        "{doc}"
    );
    assert_eq!(doc["warnings"][1]["reason"], "ClockSkew");
    assert!(
        doc["warnings"][1]["message"]
            .as_str()
            .unwrap()
            .contains("about 120 s ahead of"),
        "{doc}"
    );
    sim.heal();
    let doc = doc_where(p.hub(), "clusters/a", WAIT, |d| {
        d["warnings"].as_array().is_some_and(|w| w.len() == 1)
    })
    .await;
    assert_eq!(doc["warnings"][0]["reason"], "CredentialsExpiring");
    p.stop().await;
    shutdown.cancel();
    sim.shutdown().await;
}

/// Objects of a REST sync listing, summed.
fn objects_in(syncs: &Value) -> u64 {
    syncs["items"].as_array().map_or(0, |items| {
        items.iter().filter_map(|d| d["objects"].as_u64()).sum()
    })
}

/// The `objects` of one resource in a REST sync listing.
fn objects_of(syncs: &Value, resource: &str) -> Option<u64> {
    syncs["items"]
        .as_array()?
        .iter()
        .find(|d| d["resource"]["resource"] == resource)?["objects"]
        .as_u64()
}

fn last_list_at(doc: &Value) -> chrono::DateTime<chrono::Utc> {
    doc["cache"]["lastListAt"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no cache.lastListAt in {doc}"))
}

/// The cluster document over REST shows what the gateway holds of its
/// member (the sum of its sync documents' counts) and when the last list
/// completed. A change within a tenth between lists leaves the count shown;
/// a larger one shows; a relist moves `lastListAt` and shows the exact count.
#[tokio::test]
async fn cache_info_shows_the_objects_held_and_follows_a_relist() {
    let started = chrono::Utc::now();
    let a = sim_with(|c| {
        c.name = "a".into();
        c.workloads = (0..20)
            .map(|i| deployment("shop", &format!("w{i}"), 1))
            .collect();
    })
    .await;
    // Every pod exists before the gateway lists: the first count is exact.
    let pods = a.store().catalog().find("", "v1", "pods").unwrap().clone();
    eventually(WAIT, "20 pods", || async {
        (a.store().snapshot(&pods).len() == 20).then_some(())
    })
    .await;
    let shutdown = CancellationToken::new();
    let (url, _gateway) = start_gateway(&[&a], |_| {}, &shutdown).await;
    let (cluster, sync) = (
        format!("{url}/api/v1/clusters/a"),
        format!("{url}/api/v1/clusters/a/sync"),
    );
    // The sync documents first: the engine puts the cluster document right
    // after the sync document an event changed, so the cluster document
    // read next is as recent as the listing (but for that one put, which
    // the waits below do not depend on).
    let read = || async {
        let syncs = get_json(&sync).await;
        (get_json(&cluster).await, syncs)
    };
    let (doc, syncs) = eventually(WAIT, "every watch listed", || async {
        let (doc, syncs) = read().await;
        let listed = doc["resources"]["synced"] == 6
            && objects_of(&syncs, "pods") == Some(20)
            && doc["cache"]["objects"].as_u64() == Some(objects_in(&syncs));
        listed.then_some((doc, syncs))
    })
    .await;
    // 20 Deployments, their 20 pods, 4 namespaces (default, kube-system,
    // kube-public, shop), 3 nodes.
    assert_eq!(doc["cache"]["objects"], 47, "{syncs}");
    let listed_at = last_list_at(&doc);
    assert!(
        listed_at >= started && listed_at <= chrono::Utc::now(),
        "{doc}"
    );
    assert!(doc["probe"]["serverVersion"].is_string(), "{doc}");

    // One namespace more (48, within a tenth of 47): the count shown stays.
    let namespace =
        |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    a.apply(&namespace("extra0")).unwrap();
    let (doc, _) = eventually(WAIT, "the namespace watched", || async {
        let (doc, syncs) = read().await;
        (objects_of(&syncs, "namespaces") == Some(5)).then_some((doc, syncs))
    })
    .await;
    assert_eq!(doc["cache"]["objects"], 47, "{doc}");
    assert_eq!(last_list_at(&doc), listed_at);

    // Five more (53): the count shown moves to within a tenth of it.
    for i in 1..=5 {
        a.apply(&namespace(&format!("extra{i}"))).unwrap();
    }
    let (doc, syncs) = eventually(WAIT, "the namespaces watched", || async {
        let (doc, syncs) = read().await;
        (objects_of(&syncs, "namespaces") == Some(10)).then_some((doc, syncs))
    })
    .await;
    let (shown, exact) = (
        doc["cache"]["objects"].as_u64().unwrap(),
        objects_in(&syncs),
    );
    assert_eq!(exact, 53, "{syncs}");
    assert!(
        shown > 47 && exact - shown <= shown / 10,
        "{shown} of {exact}"
    );
    assert_eq!(last_list_at(&doc), listed_at);

    // Every watch expires and relists: a later list time, the exact count.
    a.apply(&namespace("extra6")).unwrap();
    a.expire_watches();
    let doc = eventually(WAIT, "a relist", || async {
        let (doc, syncs) = read().await;
        (last_list_at(&doc) > listed_at
            && objects_of(&syncs, "namespaces") == Some(11)
            && doc["cache"]["objects"].as_u64() == Some(objects_in(&syncs)))
        .then_some(doc)
    })
    .await;
    assert_eq!(doc["cache"]["objects"], 54, "{doc}");
    shutdown.cancel();
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_come_and_go_live_and_a_removed_one_stays_removed() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube_pulse::pipeline::Member;
    let shutdown = CancellationToken::new();
    let a = member("a").await;
    let b = sim_with(|c| {
        c.name = "b".into();
        c.workloads = (0..10)
            .map(|i| deployment("shop", &format!("w{i}"), 1))
            .collect();
    })
    .await;
    let as_member = |sim: &SimCluster| Member {
        name: sim.name().into(),
        config: sim.kube_config(),
    };
    let p = pipeline(&[&a], vec![], &shutdown).await;
    let hub = p.hub().clone();
    doc_where(&hub, "clusters/a", WAIT, is("Healthy", "Ready")).await;

    p.add_member(as_member(&b)).await.expect("b is added");
    let err = p.add_member(as_member(&b)).await.unwrap_err();
    assert!(err.to_string().contains("already runs"), "{err}");
    doc_where(&hub, "apps/b/shop/w9", WAIT, |d| d["phase"] == "Running").await;
    assert_eq!(p.members().names(), ["a", "b"]);

    // b keeps changing while it is removed and added again: its watches
    // send observations right up to the moment its source stops.
    let churning = CancellationToken::new();
    let churn = {
        let (client, churning) = (b.client(), churning.clone());
        tokio::spawn(async move {
            let api: kube::Api<Deployment> = kube::Api::namespaced(client, "shop");
            for n in 0..2_000 {
                if churning.is_cancelled() {
                    return;
                }
                let patch = json!({"spec": {"replicas": 1 + n % 3}});
                let params = kube::api::PatchParams::default();
                let _ = api
                    .patch(
                        &format!("w{}", n % 10),
                        &params,
                        &kube::api::Patch::Merge(&patch),
                    )
                    .await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    for _ in 0..3 {
        assert!(p.remove_member("b").await);
        p.add_member(as_member(&b)).await.expect("b is added again");
        doc_where(&hub, "apps/b/shop/w9", WAIT, |d| d["phase"].is_string()).await;
    }
    // The last removal races a registry change and a health check.
    let configmaps = SyncRegistry {
        name: None,
        clusters: vec!["*".into()],
        resources: vec![SyncResource::all("", "v1", "configmaps")],
    };
    let (_, removed, _) = tokio::join!(
        p.set_registries(vec![configmaps]),
        p.remove_member("b"),
        p.syncer_problems()
    );
    assert!(removed);
    assert!(!p.remove_member("b").await);
    assert_eq!(p.members().names(), ["a"]);
    doc_where(&hub, "clusters/a/sync/core/v1/configmaps", WAIT, |d| {
        d["phase"] == "Syncing"
    })
    .await;
    let of_b = || {
        let patterns =
            ["clusters/b", "clusters/b/**", "apps/b/**"].map(|p| Pattern::parse(p).unwrap());
        hub.list(&patterns)
            .into_iter()
            .map(|d| d.topic.to_string())
            .collect::<Vec<_>>()
    };
    eventually(WAIT, "b's topics removed", || async {
        of_b().is_empty().then_some(())
    })
    .await;
    // Nothing of b comes back while it keeps changing.
    let patterns = ["clusters/b", "clusters/b/**", "apps/b/**"].map(|p| Pattern::parse(p).unwrap());
    let mut late = hub.subscribe(patterns.to_vec());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        late.try_next().is_none(),
        "a topic of b came back: {:?}",
        of_b()
    );
    churning.cancel();
    churn.await.unwrap();

    // The same settings change nothing; new ones restart a's sources and
    // keep its documents (no removal).
    let mut a_topics = hub.subscribe(vec![Pattern::parse("clusters/a").unwrap()]);
    assert!(!p.update_member(as_member(&a)).await.unwrap());
    let mut changed = as_member(&a);
    changed.config.auth_info.token = Some("rotated".to_string().into());
    assert!(p.update_member(changed).await.unwrap());
    doc_where(&hub, "clusters/a", WAIT, is("Healthy", "Ready")).await;
    doc_where(&hub, "apps/a/shop/web", WAIT, |d| d["phase"] == "Running").await;
    while let Some(delivery) = a_topics.try_next() {
        if let kube_pulse::hub::Delivery::Change(c) = delivery {
            assert_ne!(c.kind, kube_pulse::hub::ChangeKind::Removed);
        }
    }
    let err = p.update_member(as_member(&b)).await.unwrap_err();
    assert!(err.to_string().contains("does not run"), "{err}");
    p.stop().await;
    a.shutdown().await;
    b.shutdown().await;
}
