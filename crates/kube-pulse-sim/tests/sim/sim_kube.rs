//! The simulator against real kube-rs clients on loopback: watchers, paging,
//! bookmarks, streaming lists, 410 relists, stalls, conflicts, auth, RBAC,
//! faults, the workload controllers, protobuf bodies and CRDs.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher::{self, Event};
use kube::{Error, ResourceExt};
use kube_pulse_sim::{Faults, SimCluster, WorkloadSeed, workload_manifest};
use pulse_testkit::http::{get_json, get_text, http};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{sim, sim_with, until_open_watches};
use pulse_testkit::watch::{next_within, spawn_watcher};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(15);

fn configmap(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"v": "1"}}),
    )
    .unwrap()
}

async fn create_cms(api: &Api<ConfigMap>, names: &[&str]) {
    for name in names {
        api.create(
            &PostParams::default(),
            &configmap(name, json!({"app": "web"})),
        )
        .await
        .unwrap();
    }
}

fn describe(event: &Event<ConfigMap>) -> String {
    match event {
        Event::Init => "Init".into(),
        Event::InitApply(o) => format!("InitApply({})", o.name_any()),
        Event::InitDone => "InitDone".into(),
        Event::Apply(o) => format!(
            "Apply({}={})",
            o.name_any(),
            o.data
                .as_ref()
                .and_then(|d| d.get("v"))
                .cloned()
                .unwrap_or_default()
        ),
        Event::Delete(o) => format!("Delete({})", o.name_any()),
    }
}

/// Collects `n` successful watcher events, skipping errors (which a relist produces).
async fn take_events<S>(stream: &mut S, n: usize) -> Vec<String>
where
    S: futures::Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Unpin,
{
    let mut out = Vec::new();
    while out.len() < n {
        if let Ok(event) = next_within(stream, WAIT).await {
            out.push(describe(&event));
        }
    }
    out
}

#[tokio::test]
async fn watcher_lists_in_pages_then_sees_every_change_in_order() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    create_cms(&api, &["a", "b", "c", "d", "e"]).await;
    let mut stream = spawn_watcher(api.clone(), watcher::Config::default().page_size(2));
    let initial = take_events(&mut stream, 7).await;
    assert_eq!(
        initial,
        [
            "Init",
            "InitApply(a)",
            "InitApply(b)",
            "InitApply(c)",
            "InitApply(d)",
            "InitApply(e)",
            "InitDone"
        ]
    );
    assert_eq!(
        sim.stats().count("core/configmaps", "list"),
        3,
        "5 objects in pages of 2"
    );

    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    create_cms(&api, &["f"]).await;
    api.delete("b", &DeleteParams::default()).await.unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "3"}})),
    )
    .await
    .unwrap();
    let changes = take_events(&mut stream, 4).await;
    assert_eq!(
        changes,
        ["Apply(a=2)", "Apply(f=1)", "Delete(b)", "Apply(a=3)"]
    );
    assert_eq!(sim.stats().count("core/configmaps", "watch"), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn paged_lists_are_consistent_and_report_remaining_items() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    let names: Vec<String> = (0..7).map(|i| format!("cm-{i}")).collect();
    create_cms(&api, &names.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let first = api.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(first.items.len(), 3);
    assert_eq!(first.metadata.remaining_item_count, Some(4));
    // A change between pages does not leak into the snapshot being paged.
    api.delete("cm-6", &DeleteParams::default()).await.unwrap();
    let mut seen: Vec<String> = first.items.iter().map(|o| o.name_any()).collect();
    let mut token = first.metadata.continue_;
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = api
            .list(&ListParams::default().limit(3).continue_token(&t))
            .await
            .unwrap();
        assert_eq!(
            page.metadata.resource_version,
            first.metadata.resource_version
        );
        seen.extend(page.items.iter().map(|o| o.name_any()));
        token = page.metadata.continue_;
    }
    assert_eq!(seen, names);
    let now = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(now.items.len(), 6);
    let selected = api
        .list(
            &ListParams::default()
                .labels("app=web")
                .fields("metadata.name=cm-1"),
        )
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn watches_carry_bookmarks() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    create_cms(&api, &["x"]).await;
    let mut saw_added = false;
    let bookmark_rv = loop {
        match next_within(&mut stream, WAIT).await.unwrap() {
            WatchEvent::Added(o) => {
                assert_eq!(o.name_any(), "x");
                saw_added = true;
            }
            WatchEvent::Bookmark(b) => break b.metadata.resource_version,
            other => panic!("unexpected event {other:?}"),
        }
    };
    assert!(
        saw_added,
        "the change arrives before the bookmark that follows it"
    );
    assert!(bookmark_rv.parse::<u64>().unwrap() > rv.parse::<u64>().unwrap());
    sim.shutdown().await;
}

#[tokio::test]
async fn streaming_lists_need_no_list_request() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    create_cms(&api, &["a", "b"]).await;
    let mut stream = spawn_watcher(api.clone(), watcher::Config::default().streaming_lists());
    let initial = take_events(&mut stream, 4).await;
    assert_eq!(
        initial,
        ["Init", "InitApply(a)", "InitApply(b)", "InitDone"]
    );
    create_cms(&api, &["c"]).await;
    assert_eq!(take_events(&mut stream, 1).await, ["Apply(c=1)"]);
    let stats = sim.stats();
    assert_eq!(stats.count("core/configmaps", "list"), 0);
    assert_eq!(stats.count("core/configmaps", "watch"), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn expired_watch_makes_the_watcher_relist_and_converge() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    create_cms(&api, &["a"]).await;
    let mut stream = spawn_watcher(api.clone(), watcher::Config::default());
    assert_eq!(
        take_events(&mut stream, 3).await,
        ["Init", "InitApply(a)", "InitDone"]
    );
    until_open_watches(&sim, 1).await;
    sim.expire_watches();
    // The in-stream 410 surfaces as an error, then the watcher lists again.
    let err = next_within(&mut stream, WAIT).await.unwrap_err();
    assert!(
        matches!(&err, watcher::Error::WatchError(s) if s.code == 410),
        "{err:?}"
    );
    let relisted = take_events(&mut stream, 3).await;
    assert_eq!(relisted, ["Init", "InitApply(a)", "InitDone"]);
    create_cms(&api, &["b"]).await;
    assert_eq!(take_events(&mut stream, 1).await, ["Apply(b=1)"]);
    assert_eq!(sim.stats().count("core/configmaps", "list"), 2);
    // A watch from a version older than the window gets the in-stream 410 too.
    let raw = http()
        .get(format!(
            "{}/api/v1/namespaces/shop/configmaps?watch=true&resourceVersion=1",
            sim.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
    let line = raw.text().await.unwrap();
    let event: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
    sim.shutdown().await;
}

#[tokio::test]
async fn a_stalled_server_trips_the_watcher_idle_timeout() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    // timeoutSeconds=1: the watcher gives up on a silent stream after 1 + 5 s.
    let config = watcher::Config::default().timeout(1);
    let mut stream = spawn_watcher(api.clone(), config);
    assert_eq!(take_events(&mut stream, 2).await, ["Init", "InitDone"]);
    let watches_before = sim.stats().count("core/configmaps", "watch");
    sim.set_faults(Faults {
        stall: true,
        ..Faults::default()
    });
    sim.store()
        .create(
            sim.store().catalog().find("", "v1", "configmaps").unwrap(),
            Some("shop"),
            json!({"metadata": {"name": "during-stall"}, "data": {"v": "1"}}),
            false,
        )
        .unwrap();
    // Nothing arrives while stalled.
    assert!(
        tokio::time::timeout(Duration::from_secs(2), stream.next())
            .await
            .is_err()
    );
    // Past the idle timeout the watcher has dropped the silent stream and is
    // waiting on a new watch; healing lets that one through.
    tokio::time::sleep(Duration::from_secs(6)).await;
    sim.heal();
    assert_eq!(take_events(&mut stream, 1).await, ["Apply(during-stall=1)"]);
    let watches = sim.stats().count("core/configmaps", "watch");
    assert!(
        watches > watches_before,
        "the watcher re-watched ({watches_before} → {watches})"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn replace_with_a_stale_resource_version_conflicts() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    create_cms(&api, &["a"]).await;
    let stale = api.get("a").await.unwrap();
    let mut fresh = stale.clone();
    fresh.data = Some([("v".to_string(), "2".to_string())].into());
    api.replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap();
    let err = api
        .replace("a", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    match err {
        Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert_eq!(status.reason, "Conflict");
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    let err = api
        .create(&PostParams::default(), &configmap("a", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Api(s) if s.reason == "AlreadyExists"));
    sim.shutdown().await;
}

#[tokio::test]
async fn label_selected_watches_see_objects_leave_the_selection() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    create_cms(&api, &["a"]).await;
    let config = watcher::Config::default().labels("app=web");
    let mut stream = spawn_watcher(api.clone(), config);
    assert_eq!(
        take_events(&mut stream, 3).await,
        ["Init", "InitApply(a)", "InitDone"]
    );
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    assert_eq!(take_events(&mut stream, 1).await, ["Delete(a)"]);
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap();
    assert_eq!(take_events(&mut stream, 1).await, ["Apply(a=1)"]);
    sim.shutdown().await;
}

#[tokio::test]
async fn deployments_converge_and_failing_images_exceed_their_deadline() {
    let sim = sim().await;
    let api: Api<Deployment> = Api::namespaced(sim.client(), "shop");
    let seed = WorkloadSeed {
        kind: "Deployment".into(),
        namespace: "shop".into(),
        name: "web".into(),
        replicas: 2,
        image: "web:1".into(),
    };
    let mut manifest = workload_manifest(&seed);
    manifest["spec"]["progressDeadlineSeconds"] = json!(1);
    let deployment: Deployment = serde_json::from_value(manifest).unwrap();
    api.create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let reason = |d: &Deployment| {
        d.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_.as_deref() == Some("Progressing"))
            })
            .and_then(|c| c.reason.clone())
            .unwrap_or_default()
    };
    let ready = |d: &Deployment| {
        d.status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0)
    };
    eventually(WAIT, "2 ready replicas", || async {
        let d = api.get("web").await.unwrap();
        (ready(&d) == 2 && reason(&d) == "NewReplicaSetAvailable").then_some(())
    })
    .await;

    sim.set_failing_images(["web:broken"]);
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "web:broken"}]}}}})),
    )
    .await
    .unwrap();
    let stuck = eventually(WAIT, "ProgressDeadlineExceeded", || async {
        let d = api.get("web").await.unwrap();
        (reason(&d) == "ProgressDeadlineExceeded").then_some(d)
    })
    .await;
    assert_eq!(stuck.metadata.generation, Some(2));
    let status = stuck.status.unwrap();
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(status.ready_replicas, Some(2), "old pods keep serving");
    assert_eq!(status.updated_replicas, Some(2));

    let scale = api.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(2));
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 0}})),
    )
    .await
    .unwrap();
    eventually(WAIT, "scaled to zero", || async {
        let d = api.get("web").await.unwrap();
        (d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0) == 0).then_some(())
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_objects() {
    let sim = sim().await;
    let client = sim.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    create_cms(&cms, &["a", "b"]).await;
    let namespaces: Api<Namespace> = Api::all(client);
    let deleted = namespaces
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = deleted
        .left()
        .expect("a namespace terminates before it goes");
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    eventually(WAIT, "namespace gone", || async {
        matches!(namespaces.get("shop").await, Err(Error::Api(s)) if s.code == 404).then_some(())
    })
    .await;
    let all: Api<ConfigMap> = Api::all(sim.client());
    assert!(
        all.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn bearer_tokens_and_rbac_denials() {
    let sim = sim_with(|c| {
        c.token = Some("s3cret".into());
        c.deny = vec!["apps/deployments".into(), "core/configmaps:watch".into()];
    })
    .await;
    let anonymous = http()
        .get(format!("{}/api/v1/namespaces", sim.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let body: serde_json::Value = anonymous.json().await.unwrap();
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "Unauthorized");
    // Health and version stay public, as on a real apiserver.
    let readyz = http()
        .get(format!("{}/readyz", sim.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(readyz.status(), 200);

    let client = sim.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(
        namespaces
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len()
            >= 4
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    match deployments.list(&ListParams::default()).await.unwrap_err() {
        Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
            assert!(
                s.message
                    .contains("cannot list resource \"deployments\" in API group \"apps\""),
                "{}",
                s.message
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    let cms: Api<ConfigMap> = Api::namespaced(client, "shop");
    assert!(
        cms.list(&ListParams::default()).await.is_ok(),
        "only watch is denied"
    );
    let err = cms.watch(&WatchParams::default(), "0").await.err().unwrap();
    assert!(matches!(err, Error::Api(s) if s.code == 403));
    sim.shutdown().await;
}

#[tokio::test]
async fn refused_connections_then_the_same_port_again() {
    let sim = sim().await;
    let api: Api<Namespace> = Api::all(sim.client());
    api.list(&ListParams::default()).await.unwrap();
    sim.set_faults(Faults {
        refuse: true,
        ..Faults::default()
    });
    eventually(WAIT, "connection refused", || async {
        let result = tokio::net::TcpStream::connect(sim.addr()).await;
        result.is_err().then_some(())
    })
    .await;
    assert!(api.list(&ListParams::default()).await.is_err());
    sim.heal();
    eventually(WAIT, "accepting again", || async {
        api.list(&ListParams::default()).await.ok()
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test]
async fn injected_status_latency_and_readiness_faults() {
    let sim = sim().await;
    // kube-rs retries 429/503/504 up to 15 times by default; see the raw answer.
    let mut config = sim.kube_config();
    config.default_retry = false;
    let api: Api<Namespace> = Api::all(kube::Client::try_from(config).unwrap());
    for code in [401u16, 403, 429, 500, 503] {
        sim.set_faults(Faults {
            status: Some(code),
            ..Faults::default()
        });
        match api.list(&ListParams::default()).await {
            Err(Error::Api(s)) => assert_eq!(s.code, code),
            other => panic!("{code}: expected an API error, got {other:?}"),
        }
    }
    sim.set_faults(Faults {
        status: Some(500),
        status_path_prefix: Some("/apis/apps".into()),
        ..Faults::default()
    });
    assert!(
        api.list(&ListParams::default()).await.is_ok(),
        "prefix limits the fault"
    );

    sim.set_faults(Faults {
        latency_ms: 300,
        ..Faults::default()
    });
    let started = std::time::Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));

    sim.set_faults(Faults {
        not_ready: true,
        ..Faults::default()
    });
    let readyz = http()
        .get(format!("{}/readyz", sim.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(readyz.status(), 500);
    assert!(
        readyz
            .text()
            .await
            .unwrap()
            .ends_with("readyz check failed\n")
    );
    assert!(
        api.list(&ListParams::default()).await.is_ok(),
        "the API still answers"
    );
    sim.heal();
    let readyz = http()
        .get(format!("{}/readyz", sim.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(readyz.text().await.unwrap(), "ok");
    sim.shutdown().await;
}

#[tokio::test]
async fn closed_watches_are_resumed_without_a_relist() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    let mut stream = spawn_watcher(api.clone(), watcher::Config::default());
    assert_eq!(take_events(&mut stream, 2).await, ["Init", "InitDone"]);
    until_open_watches(&sim, 1).await;
    sim.close_watches();
    create_cms(&api, &["after-close"]).await;
    assert_eq!(take_events(&mut stream, 1).await, ["Apply(after-close=1)"]);
    let stats = sim.stats();
    assert_eq!(stats.count("core/configmaps", "list"), 1);
    assert_eq!(stats.count("core/configmaps", "watch"), 2);
    sim.shutdown().await;
}

/// Every verb answers bad input with the right `Status`, never a panic.
#[tokio::test]
async fn bad_input_gets_a_status_for_every_verb() {
    let sim: SimCluster = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    create_cms(&api, &["a"]).await;
    let deployments: Api<Deployment> = Api::namespaced(sim.client(), "shop");
    let web = WorkloadSeed {
        kind: "Deployment".into(),
        namespace: "shop".into(),
        name: "web".into(),
        replicas: 1,
        image: "x".into(),
    };
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(workload_manifest(&web)).unwrap(),
        )
        .await
        .unwrap();
    let cm = "/api/v1/namespaces/shop/configmaps";
    let json_ct = "application/json";
    let merge = "application/merge-patch+json";
    let cases: Vec<(&str, String, &str, &str, u16, &str)> = vec![
        (
            "GET",
            format!("{cm}?limit=abc"),
            "",
            json_ct,
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{cm}?labelSelector=app+in+web"),
            "",
            json_ct,
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{cm}?fieldSelector=spec.x%3D1"),
            "",
            json_ct,
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{cm}?continue=garbage"),
            "",
            json_ct,
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{cm}?resourceVersionMatch=Sometimes"),
            "",
            json_ct,
            422,
            "Invalid",
        ),
        (
            "GET",
            format!("{cm}?watch=true&resourceVersionMatch=Exact"),
            "",
            json_ct,
            422,
            "Invalid",
        ),
        (
            "GET",
            format!("{cm}?watch=maybe"),
            "",
            json_ct,
            400,
            "BadRequest",
        ),
        ("GET", format!("{cm}/missing"), "", json_ct, 404, "NotFound"),
        (
            "GET",
            "/apis/apps/v1/widgets".into(),
            "",
            json_ct,
            404,
            "NotFound",
        ),
        (
            "GET",
            "/apis/nope.example.com/v1".into(),
            "",
            json_ct,
            404,
            "NotFound",
        ),
        (
            "GET",
            format!("{cm}/a/status"),
            "",
            json_ct,
            404,
            "NotFound",
        ),
        ("POST", cm.into(), "{nope", json_ct, 400, "BadRequest"),
        ("POST", cm.into(), "[1]", json_ct, 400, "BadRequest"),
        (
            "POST",
            cm.into(),
            r#"{"metadata":{"name":"Bad_Name"}}"#,
            json_ct,
            422,
            "Invalid",
        ),
        (
            "POST",
            cm.into(),
            r#"{"metadata":{"name":"a"}}"#,
            json_ct,
            409,
            "AlreadyExists",
        ),
        (
            "POST",
            cm.into(),
            r#"{"kind":"Pod","metadata":{"name":"z"}}"#,
            json_ct,
            400,
            "BadRequest",
        ),
        (
            "POST",
            cm.into(),
            "\u{0}",
            "application/vnd.kubernetes.protobuf",
            400,
            "BadRequest",
        ),
        (
            "POST",
            cm.into(),
            "k8s\u{0}\u{ff}\u{1}",
            "application/vnd.kubernetes.protobuf",
            400,
            "BadRequest",
        ),
        (
            "POST",
            cm.into(),
            "\u{a0}",
            "application/cbor",
            415,
            "UnsupportedMediaType",
        ),
        (
            "POST",
            "/api/v1/namespaces/ghost/configmaps".into(),
            r#"{"metadata":{"name":"z"}}"#,
            json_ct,
            404,
            "NotFound",
        ),
        (
            "POST",
            "/apis/apps/v1/deployments".into(),
            "{}",
            json_ct,
            405,
            "MethodNotAllowed",
        ),
        (
            "POST",
            format!("{cm}?dryRun=Some"),
            r#"{"metadata":{"name":"z"}}"#,
            json_ct,
            400,
            "BadRequest",
        ),
        (
            "POST",
            format!("{cm}?fieldValidation=Loose"),
            r#"{"metadata":{"name":"z"}}"#,
            json_ct,
            400,
            "BadRequest",
        ),
        ("PUT", cm.into(), "{}", json_ct, 405, "MethodNotAllowed"),
        (
            "PUT",
            format!("{cm}/a"),
            r#"{"metadata":{"name":"b"}}"#,
            json_ct,
            400,
            "BadRequest",
        ),
        (
            "PUT",
            format!("{cm}/a"),
            r#"{"metadata":{"name":"a","resourceVersion":"1"}}"#,
            json_ct,
            409,
            "Conflict",
        ),
        (
            "PUT",
            format!("{cm}/missing"),
            r#"{"metadata":{"name":"missing"}}"#,
            json_ct,
            404,
            "NotFound",
        ),
        (
            "PATCH",
            format!("{cm}/a"),
            "{}",
            "text/plain",
            415,
            "UnsupportedMediaType",
        ),
        (
            "PATCH",
            format!("{cm}/a"),
            "{nope",
            merge,
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            format!("{cm}/a"),
            r#"{"metadata":{"resourceVersion":"1"}}"#,
            merge,
            409,
            "Conflict",
        ),
        (
            "PATCH",
            format!("{cm}/a"),
            r#"[{"op":"test","path":"/data/v","value":"9"}]"#,
            "application/json-patch+json",
            422,
            "Invalid",
        ),
        (
            "PATCH",
            format!("{cm}/missing"),
            "{}",
            merge,
            404,
            "NotFound",
        ),
        (
            "PATCH",
            format!("{cm}/a"),
            "data: {}",
            "application/apply-patch+yaml",
            422,
            "Invalid",
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/shop/deployments/web/scale".into(),
            r#"{"spec":{"replicas":-1}}"#,
            merge,
            422,
            "Invalid",
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/shop/deployments/web".into(),
            r#"{"spec":{"replicas":"many"}}"#,
            merge,
            422,
            "Invalid",
        ),
        (
            "DELETE",
            format!("{cm}?labelSelector=a+in+b"),
            "",
            json_ct,
            400,
            "BadRequest",
        ),
        (
            "DELETE",
            "/apis/apps/v1/namespaces/shop/deployments/web/status".into(),
            "",
            json_ct,
            405,
            "MethodNotAllowed",
        ),
        (
            "DELETE",
            format!("{cm}/missing"),
            "",
            json_ct,
            404,
            "NotFound",
        ),
        (
            "DELETE",
            format!("{cm}/a"),
            r#"{"preconditions":{"uid":"nope"}}"#,
            json_ct,
            409,
            "Conflict",
        ),
        (
            "DELETE",
            format!("{cm}/a"),
            r#"{"propagationPolicy":"Sometimes"}"#,
            json_ct,
            400,
            "BadRequest",
        ),
        (
            "DELETE",
            format!("{cm}/a"),
            "{nope",
            json_ct,
            400,
            "BadRequest",
        ),
        (
            "POST",
            format!("{cm}/a"),
            "{}",
            json_ct,
            405,
            "MethodNotAllowed",
        ),
    ];
    let client = http();
    for (method, path, body, content_type, code, reason) in cases {
        let response = client
            .request(method.parse().unwrap(), format!("{}{path}", sim.url()))
            .header("Content-Type", content_type)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: not JSON: {text}"));
        assert_eq!(status, code, "{method} {path}: {text}");
        assert_eq!(parsed["kind"], "Status", "{method} {path}");
        assert_eq!(parsed["code"], code, "{method} {path}");
        assert_eq!(parsed["reason"], reason, "{method} {path}: {text}");
    }
    // Nothing above changed the objects.
    assert_eq!(api.get("a").await.unwrap().data.unwrap()["v"], "1");
    sim.shutdown().await;
}

#[tokio::test]
async fn control_api_over_http() {
    let sim = sim().await;
    let client = http();
    let base = format!("{}/_sim", sim.url());
    let bad = client
        .put(format!("{base}/faults"))
        .header("Content-Type", "application/json")
        .body(r#"{"stal":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: serde_json::Value = bad.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("stal"), "{body}");
    let bad = client
        .put(format!("{base}/faults"))
        .json(&json!({"status": 200}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let ok = client
        .put(format!("{base}/faults"))
        .json(&json!({"status": 503, "healAfterMs": 200}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(sim.faults().status, Some(503));
    let status = client
        .get(format!("{}/api/v1/namespaces", sim.url()))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 503);
    eventually(WAIT, "auto-heal", || async {
        (sim.faults() == Faults::default()).then_some(())
    })
    .await;
    let status = client
        .get(format!("{}/api/v1/namespaces", sim.url()))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    let stats: serde_json::Value = get_json(&format!("{base}/stats")).await;
    assert_eq!(stats["requests"]["core/namespaces"]["list"], 1);
    let deny = client
        .put(format!("{base}/deny"))
        .json(&json!({"rules": ["core/namespaces"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(deny.status(), 200);
    let status = client
        .get(format!("{}/api/v1/namespaces", sim.url()))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 403);
    let bad = client
        .put(format!("{base}/deny"))
        .json(&json!({"rules": ["namespaces"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let expired = client
        .post(format!("{base}/actions/expire-watches"))
        .send()
        .await
        .unwrap();
    assert_eq!(expired.status(), 200);
    sim.shutdown().await;
}

#[tokio::test]
async fn the_status_subresource_writes_status_only() {
    let sim = sim_with(|c| c.converge.tick = Duration::from_secs(3600)).await;
    let api: Api<Deployment> = Api::namespaced(sim.client(), "shop");
    let web = WorkloadSeed {
        kind: "Deployment".into(),
        namespace: "shop".into(),
        name: "web".into(),
        replicas: 1,
        image: "x".into(),
    };
    api.create(
        &PostParams::default(),
        &serde_json::from_value(workload_manifest(&web)).unwrap(),
    )
    .await
    .unwrap();
    let patched = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 9}, "status": {"readyReplicas": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.status.unwrap().ready_replicas, Some(7));
    assert_eq!(patched.spec.replicas, Some(1), "spec is ignored on /status");
    assert_eq!(patched.metadata.generation, Some(1));
    let fetched = api.get_status("web").await.unwrap();
    assert_eq!(fetched.status.unwrap().ready_replicas, Some(7));
    sim.shutdown().await;
}

#[tokio::test]
async fn delete_collection_removes_the_selected_objects() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    create_cms(&api, &["a", "b"]).await;
    api.create(
        &PostParams::default(),
        &configmap("keep", json!({"app": "db"})),
    )
    .await
    .unwrap();
    let deleted = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=web"),
        )
        .await
        .unwrap();
    let names: Vec<String> = deleted
        .left()
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let left: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    assert_eq!(left, ["keep"]);
    sim.shutdown().await;
}

/// A Kubernetes protobuf body as a Go client sends it: `k8s\0`, then a
/// `runtime.Unknown` holding the typed message.
fn protobuf_body(api_version: &str, kind: &str, message: &impl prost::Message) -> Vec<u8> {
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(message.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = b"k8s\0".to_vec();
    body.extend(prost::Message::encode_to_vec(&unknown));
    body
}

#[tokio::test]
async fn protobuf_bodies_create_built_in_objects() {
    use k8s_pb::api::apps::v1 as apps;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;

    let sim = sim().await;
    let labels: std::collections::BTreeMap<String, String> =
        [("app".to_string(), "api".to_string())].into();
    let metadata = |name: &str| {
        Some(meta::ObjectMeta {
            name: Some(name.into()),
            labels: labels.clone(),
            ..Default::default()
        })
    };
    let deployment = apps::Deployment {
        metadata: metadata("api"),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(2),
            selector: Some(meta::LabelSelector {
                match_labels: labels.clone(),
                ..Default::default()
            }),
            template: Some(core::PodTemplateSpec {
                metadata: metadata(""),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: Some("api".into()),
                        image: Some("registry.example/api:1".into()),
                        env: vec![core::EnvVar {
                            name: Some("MODE".into()),
                            value: Some("fast".into()),
                            value_from: None,
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
        status: None,
    };
    let config_map = core::ConfigMap {
        metadata: metadata("settings"),
        immutable: None,
        data: [("color".to_string(), "blue".to_string())].into(),
        binary_data: Default::default(),
    };
    let namespace = core::Namespace {
        metadata: metadata("team"),
        ..Default::default()
    };
    let protobuf = "application/vnd.kubernetes.protobuf";
    let posts = [
        (
            "/apis/apps/v1/namespaces/shop/deployments",
            protobuf_body("apps/v1", "Deployment", &deployment),
        ),
        (
            "/api/v1/namespaces/shop/configmaps",
            protobuf_body("v1", "ConfigMap", &config_map),
        ),
        (
            "/api/v1/namespaces",
            protobuf_body("v1", "Namespace", &namespace),
        ),
    ];
    let client = http();
    for (path, body) in posts {
        let response = client
            .post(format!("{}{path}", sim.url()))
            .header("Content-Type", protobuf)
            // What client-go's typed clients accept; JSON is the answer.
            .header("Accept", "application/vnd.kubernetes.protobuf, */*")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 201, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{path}"
        );
        let created: serde_json::Value = response.json().await.unwrap();
        assert!(created["metadata"]["uid"].is_string(), "{path}: {created}");
    }

    // kube-rs reads them back as if they had been created from JSON.
    let deployments: Api<Deployment> = Api::namespaced(sim.client(), "shop");
    let api = deployments.get("api").await.unwrap();
    let spec = api.spec;
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(
        spec.progress_deadline_seconds,
        Some(600),
        "defaults applied"
    );
    let container = &spec.template.spec.unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some("registry.example/api:1"));
    assert_eq!(
        container.env.as_ref().unwrap()[0].value.as_deref(),
        Some("fast")
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    assert_eq!(
        config_maps.get("settings").await.unwrap().data.unwrap()["color"],
        "blue"
    );
    let namespaces: Api<Namespace> = Api::all(sim.client());
    let team = namespaces.get("team").await.unwrap();
    assert_eq!(team.labels()["app"], "api");
    // The controller converges the protobuf-created Deployment.
    eventually(WAIT, "api ready", || async {
        let status = deployments.get("api").await.ok()?.status?;
        (status.ready_replicas == Some(2)).then_some(())
    })
    .await;

    // A client that takes protobuf answers only is told so (the simulator answers JSON).
    let response = client
        .post(format!("{}/api/v1/namespaces/shop/configmaps", sim.url()))
        .header("Content-Type", protobuf)
        .header("Accept", protobuf)
        .body(protobuf_body(
            "v1",
            "ConfigMap",
            &core::ConfigMap {
                metadata: metadata("other"),
                ..Default::default()
            },
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 406);
    assert!(config_maps.get("other").await.is_err());
    // A body of another kind than the path's is refused like a JSON one.
    let response = client
        .post(format!("{}/api/v1/namespaces/shop/configmaps", sim.url()))
        .header("Content-Type", protobuf)
        .body(protobuf_body("v1", "Namespace", &namespace))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    // Truncated protobuf is 400 with a Status, and the server keeps serving.
    let mut truncated = protobuf_body("apps/v1", "Deployment", &deployment);
    truncated.truncate(truncated.len() - 5);
    let response = client
        .post(format!(
            "{}/apis/apps/v1/namespaces/shop/deployments",
            sim.url()
        ))
        .header("Content-Type", protobuf)
        .body(truncated)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let status: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str()),
        (Some("Status"), Some("BadRequest"))
    );
    assert!(config_maps.get("settings").await.is_ok());
    sim.shutdown().await;
}

#[tokio::test]
async fn crds_serve_their_resources_until_deleted() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{DynamicObject, GroupVersionKind};
    use kube::discovery;

    let sim = sim().await;
    let client = sim.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.pulse.example.com"},
        "spec": {
            "group": "pulse.example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "shortNames": ["gd"]},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    }))
    .unwrap();
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    let status = created.status.unwrap();
    let conditions: Vec<(String, String)> = status
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert!(conditions.contains(&("Established".into(), "True".into())));
    assert!(conditions.contains(&("NamesAccepted".into(), "True".into())));
    let accepted = status.accepted_names.unwrap();
    assert_eq!(accepted.kind, "Gadget");
    assert_eq!(accepted.short_names, Some(vec!["gd".into()]));

    // Discovery now lists the resource with its scope and status subresource.
    let gvk = GroupVersionKind::gvk("pulse.example.com", "v1", "Gadget");
    let (resource, capabilities) = discovery::pinned_kind(&client, &gvk).await.unwrap();
    assert_eq!(resource.plural, "gadgets");
    assert_eq!(capabilities.scope, discovery::Scope::Namespaced);
    let subresources: Vec<&str> = capabilities
        .subresources
        .iter()
        .map(|(s, _)| s.plural.as_str())
        .collect();
    assert_eq!(subresources, ["status"]);

    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "shop", &resource);
    let mut watch = gadgets
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();
    until_open_watches(&sim, 1).await;
    let mut gear = DynamicObject::new("gear", &resource);
    gear.data = json!({"spec": {"size": 3}});
    gadgets.create(&PostParams::default(), &gear).await.unwrap();
    gadgets
        .patch(
            "gear",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 4}})),
        )
        .await
        .unwrap();
    gadgets
        .patch_status(
            "gear",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    let listed = gadgets.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].data["spec"]["size"], 4);
    assert_eq!(listed.items[0].data["status"]["ready"], true);
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match next_within(&mut watch, WAIT).await.unwrap() {
            WatchEvent::Added(o) => seen.push(format!("Added({})", o.data["spec"]["size"])),
            WatchEvent::Modified(o) => seen.push(format!("Modified({})", o.data["spec"]["size"])),
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["Added(3)", "Modified(4)", "Modified(4)"]);

    // Deleting the CRD deletes its objects (the watch sees them go, then
    // ends) and stops serving the resource.
    crds.delete("gadgets.pulse.example.com", &DeleteParams::default())
        .await
        .unwrap();
    loop {
        match next_within(&mut watch, WAIT).await.unwrap() {
            WatchEvent::Deleted(o) => {
                assert_eq!(o.metadata.name.as_deref(), Some("gear"));
                break;
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let ended = tokio::time::timeout(WAIT, watch.next()).await;
    assert!(
        matches!(ended, Ok(None)),
        "the watch ends with its resource"
    );
    let err = gadgets.list(&ListParams::default()).await.unwrap_err();
    assert!(matches!(err, Error::Api(ref s) if s.code == 404), "{err:?}");
    assert!(discovery::pinned_kind(&client, &gvk).await.is_err());
    let groups = get_text(&format!("{}/apis", sim.url())).await;
    assert!(!groups.contains("pulse.example.com"), "{groups}");
    let err = crds.get("gadgets.pulse.example.com").await.unwrap_err();
    assert!(matches!(err, Error::Api(ref s) if s.code == 404), "{err:?}");
    sim.shutdown().await;
}
