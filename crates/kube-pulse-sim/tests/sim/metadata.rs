//! Metadata-only answers (`PartialObjectMetadata`) against real clients:
//! kube-rs's metadata watcher (paged lists, watch events, a relist after an
//! in-stream 410), its metadata get and list, client-go's Accept header with
//! protobuf first, and kubectl's Table requests beside them.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PartialObjectMeta, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use pulse_testkit::http::http;
use pulse_testkit::kubectl::{kubectl, kubectl_lines, ok};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{sim, until_open_watches};
use pulse_testkit::watch::{Events, next_within, spawn_watcher};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);
/// The Accept header of client-go's metadata client for lists.
const CLIENT_GO_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

/// A ConfigMap of about 1 KiB.
fn configmap(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "data": {"v": value, "filler": "x".repeat(1024)},
    }))
    .unwrap()
}

async fn create(api: &Api<ConfigMap>, names: &[&str]) {
    for name in names {
        api.create(&PostParams::default(), &configmap(name, "1"))
            .await
            .unwrap();
    }
}

type MetaEvent = Event<PartialObjectMeta<ConfigMap>>;

fn describe(event: &MetaEvent) -> String {
    let meta = |o: &PartialObjectMeta<ConfigMap>| {
        let types = o.types.clone().unwrap_or_default();
        assert_eq!(
            (types.api_version.as_str(), types.kind.as_str()),
            ("meta.k8s.io/v1", "PartialObjectMetadata"),
            "{o:?}"
        );
        assert!(o.meta().resource_version.is_some(), "{o:?}");
        o.name_any()
    };
    match event {
        Event::Init => "Init".into(),
        Event::InitApply(o) => format!("InitApply({})", meta(o)),
        Event::InitDone => "InitDone".into(),
        Event::Apply(o) => format!("Apply({})", meta(o)),
        Event::Delete(o) => format!("Delete({})", meta(o)),
    }
}

async fn take(rx: &mut Events<PartialObjectMeta<ConfigMap>>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        out.push(describe(
            &next_within(rx, WAIT).await.expect("no watcher error"),
        ));
    }
    out
}

#[tokio::test]
async fn the_metadata_watcher_lists_in_pages_watches_and_relists_after_410() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    create(&api, &["a", "b", "c"]).await;
    let meta: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(sim.client(), "shop");
    // Pages of two: the continue token survives the metadata conversion.
    let mut rx = spawn_watcher(meta, watcher::Config::default().page_size(2));
    assert_eq!(
        take(&mut rx, 5).await,
        [
            "Init",
            "InitApply(a)",
            "InitApply(b)",
            "InitApply(c)",
            "InitDone"
        ]
    );
    assert_eq!(sim.stats().count("core/configmaps", "list"), 2);
    until_open_watches(&sim, 1).await;
    create(&api, &["d"]).await;
    api.replace("a", &PostParams::default(), &{
        let mut cm = configmap("a", "2");
        cm.metadata.resource_version = api.get("a").await.unwrap().resource_version();
        cm
    })
    .await
    .unwrap();
    api.delete("b", &Default::default()).await.unwrap();
    assert_eq!(
        take(&mut rx, 3).await,
        ["Apply(d)", "Apply(a)", "Delete(b)"]
    );

    sim.expire_watches();
    let err = next_within(&mut rx, WAIT).await.unwrap_err();
    assert!(
        matches!(&err, watcher::Error::WatchError(s) if s.code == 410),
        "{err:?}"
    );
    assert_eq!(
        take(&mut rx, 5).await,
        [
            "Init",
            "InitApply(a)",
            "InitApply(c)",
            "InitApply(d)",
            "InitDone"
        ]
    );
    until_open_watches(&sim, 1).await;
    create(&api, &["e"]).await;
    assert_eq!(take(&mut rx, 1).await, ["Apply(e)"]);
    sim.shutdown().await;
}

#[tokio::test]
async fn metadata_gets_and_lists_carry_no_bodies() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    create(&api, &["a", "b"]).await;

    let one = api.get_metadata("a").await.unwrap();
    assert_eq!(one.name_any(), "a");
    assert_eq!(one.labels()["app"], "web");
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    let names: Vec<String> = list.items.iter().map(|o| o.name_any()).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(list.metadata.resource_version.is_some());

    // On the wire: no data, and a fraction of the full list's bytes.
    let url = format!("{}/api/v1/namespaces/shop/configmaps", sim.url());
    let full = http().get(&url).send().await.unwrap().text().await.unwrap();
    let raw = http()
        .get(&url)
        .header("Accept", CLIENT_GO_LIST)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
    let partial = raw.text().await.unwrap();
    let body: Value = serde_json::from_str(&partial).unwrap();
    assert_eq!(body["kind"], "PartialObjectMetadataList");
    assert_eq!(body["apiVersion"], "meta.k8s.io/v1");
    let item = &body["items"][0];
    assert_eq!(item["kind"], "PartialObjectMetadata");
    assert_eq!(item["metadata"]["name"], "a");
    assert!(item.get("data").is_none(), "{item}");
    assert!(
        partial.len() * 3 < full.len(),
        "{} bytes of metadata for {} bytes of objects",
        partial.len(),
        full.len()
    );

    // Asking a list for one object's metadata, or nothing the simulator
    // writes, is 406, as the apiserver answers.
    for accept in [
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        "application/vnd.kubernetes.protobuf",
        "application/yaml",
    ] {
        let answer = http()
            .get(&url)
            .header("Accept", accept)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 406, "{accept}");
        let status: Value = answer.json().await.unwrap();
        assert_eq!(status["reason"], "NotAcceptable", "{accept}");
    }
    let answer = http()
        .get(format!("{url}/a"))
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 406);
    sim.shutdown().await;
}

#[tokio::test]
async fn kubectl_tables_keep_working_beside_metadata_answers() {
    let sim = sim().await;
    let server = sim.url();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    create(&api, &["a"]).await;
    let out = ok(&kubectl(&server, &["get", "configmaps", "-n", "shop"]).await);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "DATA", "AGE"], "{out}");
    assert!(out.lines().any(|l| l.starts_with("a ")), "{out}");
    let out = ok(&kubectl(&server, &["get", "configmaps", "-n", "shop", "-o", "name"]).await);
    assert_eq!(out.trim(), "configmap/a");
    sim.shutdown().await;
}

// Multi-threaded: the test blocks on kubectl's output while the simulator serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watch_events_show_each_change() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "shop");
    create(&api, &["a"]).await;
    let url = sim.url();
    let (mut child, rx) = kubectl_lines(
        &url,
        &[
            "get",
            "configmaps",
            "-n",
            "shop",
            "-w",
            "--output-watch-events",
            "--request-timeout=30s",
        ],
    );
    let words = |line: &str| -> Vec<String> {
        line.split_whitespace()
            .take(3)
            .map(str::to_string)
            .collect()
    };
    let header = rx.recv_timeout(WAIT).expect("a header");
    assert_eq!(words(&header), ["EVENT", "NAME", "DATA"], "{header}");
    let first = rx.recv_timeout(WAIT).expect("the listed row");
    assert_eq!(words(&first), ["ADDED", "a", "2"], "{first}");
    eventually(WAIT, "kubectl watching", || async {
        (sim.stats().count("core/configmaps", "watch") >= 1).then_some(())
    })
    .await;
    create(&api, &["b"]).await;
    api.delete("a", &Default::default()).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let line = rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("kubectl printed only {seen:?}"));
        seen.push(words(&line)[..2].join(" "));
    }
    assert_eq!(seen, ["ADDED b", "DELETED a"]);
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.trim().is_empty(), "kubectl wrote errors: {stderr}");
    sim.shutdown().await;
}
