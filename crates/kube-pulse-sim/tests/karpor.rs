//! A simulated Karpor apiserver against real clients on loopback: kube-rs
//! finds the SyncRegistry through discovery's plural, creates a Cluster,
//! writes its status through `/status` and watches it; Karpor's strategies
//! (status reset on create, each endpoint keeps the other half, updates
//! need a fresh resourceVersion); kubectl reads both resources.

mod common;

use std::time::Duration;

use common::{kubectl, ok, sim};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use kube::runtime::{WatchStreamExt, watcher};
use kube_pulse_sim::karpor::{self, Credential, KarporOptions, MemberAccess};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

/// The API resource of `kind` in `group`, as discovery describes it.
async fn discover(client: &kube::Client, group: &str, kind: &str) -> (ApiResource, Scope) {
    let discovery = Discovery::new(client.clone())
        .filter(&[group])
        .run()
        .await
        .expect("discovery");
    let group = discovery.get(group).expect("group is served");
    let (resource, caps) = group
        .recommended_resources()
        .into_iter()
        .find(|(r, _)| r.kind == kind)
        .expect("kind is served");
    (resource, caps.scope)
}

fn object(body: &Value) -> DynamicObject {
    serde_json::from_value(body.clone()).unwrap()
}

fn body(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_status_written_through_status_reaches_a_watcher() {
    let member = sim().await;
    let karpor = karpor::start(KarporOptions::default()).await.unwrap();
    let client = karpor.client();

    // The registry is found through discovery, under Karpor's plural.
    let (registries, scope) = discover(&client, karpor::SEARCH_GROUP, "SyncRegistry").await;
    assert_eq!(registries.plural, "syncclusterresources");
    assert_eq!(registries.api_version, "search.karpor.io/v1beta1");
    assert_eq!(scope, Scope::Cluster);
    let registries: Api<DynamicObject> = Api::all_with(client.clone(), &registries);
    let default = registries.get(karpor::DEFAULT_REGISTRY).await.unwrap();
    let spec = &body(&default)["spec"];
    assert_eq!(spec["clusters"], json!(["*"]));
    assert!(
        spec["syncResources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["apiVersion"] == "policy/v1beta1" && r["resource"] == "poddisruptionbudgets"),
        "{spec}"
    );

    let (clusters, _) = discover(&client, karpor::CLUSTER_GROUP, "Cluster").await;
    assert_eq!(clusters.plural, "clusters");
    let clusters: Api<DynamicObject> = Api::all_with(client.clone(), &clusters);
    let mut events = watcher(clusters.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();

    // Created with a status: Karpor resets it.
    let mut manifest = karpor::cluster_manifest("prod", &MemberAccess::to_sim(&member));
    manifest["status"] = json!({"healthy": true});
    let created = clusters
        .create(&PostParams::default(), &object(&manifest))
        .await
        .unwrap();
    let created = body(&created);
    assert!(
        created["status"].get("healthy").is_none(),
        "status is reset on create: {created}"
    );
    assert_eq!(created["spec"]["access"]["endpoint"], member.url());

    // A status write with the current resourceVersion goes through /status
    // and leaves the spec alone.
    let mut status = created.clone();
    status["status"] = json!({"healthy": true});
    status["spec"]["displayName"] = json!("changed through status");
    let written = clusters
        .replace_status("prod", &PostParams::default(), &object(&status))
        .await
        .unwrap();
    let written = body(&written);
    assert_eq!(written["status"]["healthy"], true);
    assert_eq!(
        written["spec"]["displayName"], "prod",
        "status keeps the spec"
    );

    let seen = tokio::time::timeout(WAIT, async {
        loop {
            let object = body(&events.next().await.expect("the watch goes on").unwrap());
            if object["status"]["healthy"] == true {
                break object;
            }
        }
    })
    .await
    .expect("the watcher sees healthy: true");
    assert_eq!(
        seen["metadata"]["resourceVersion"],
        written["metadata"]["resourceVersion"]
    );

    // The main endpoint keeps the status.
    let mut relabel = written.clone();
    relabel["metadata"]["labels"] = json!({"env": "prod"});
    relabel["status"] = json!({"healthy": false});
    let relabelled = body(
        &clusters
            .replace("prod", &PostParams::default(), &object(&relabel))
            .await
            .unwrap(),
    );
    assert_eq!(relabelled["metadata"]["labels"]["env"], "prod");
    assert_eq!(
        relabelled["status"]["healthy"], true,
        "updates keep the status"
    );

    // A stale resourceVersion is a conflict; none at all is invalid.
    let stale = clusters
        .replace_status("prod", &PostParams::default(), &object(&status))
        .await
        .unwrap_err();
    let kube::Error::Api(stale) = stale else {
        panic!("an API error: {stale:?}")
    };
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    let mut unconditional = status.clone();
    unconditional["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let invalid = clusters
        .replace_status("prod", &PostParams::default(), &object(&unconditional))
        .await
        .unwrap_err();
    let kube::Error::Api(invalid) = invalid else {
        panic!("an API error: {invalid:?}")
    };
    assert_eq!((invalid.code, invalid.reason.as_str()), (422, "Invalid"));
    assert!(
        invalid.message.contains("metadata.resourceVersion"),
        "{}",
        invalid.message
    );
    // A merge patch carries no resourceVersion and needs none.
    let patched = clusters
        .patch_status(
            "prod",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"healthy": false}})),
        )
        .await
        .unwrap();
    assert_ne!(body(&patched)["status"]["healthy"], true);

    // A cluster that does not exist is 404 before any precondition.
    let missing = clusters
        .replace_status("gone", &PostParams::default(), &object(&unconditional))
        .await
        .unwrap_err();
    assert!(matches!(missing, kube::Error::Api(e) if e.code == 404));
    karpor.shutdown().await;
    member.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_clusters_and_sync_registries() {
    let karpor = karpor::start(KarporOptions::default()).await.unwrap();
    let server = karpor.url();
    let access = MemberAccess {
        endpoint: "https://10.0.0.7:6443".into(),
        ca_bundle: Some(b"-----BEGIN CERTIFICATE-----\n".to_vec()),
        insecure: false,
        credential: Credential::ServiceAccountToken("secret-token".into()),
    };
    karpor
        .apply(&karpor::cluster_manifest("edge", &access))
        .unwrap();

    let out = ok(&kubectl(&server, &["get", "clusters"]).await);
    assert!(out.lines().any(|l| l.starts_with("edge ")), "{out}");
    let out = ok(&kubectl(
        &server,
        &[
            "get",
            "cl",
            "edge",
            "-o",
            "jsonpath={.spec.access.endpoint}",
        ],
    )
    .await);
    assert_eq!(out, "https://10.0.0.7:6443");
    let out = ok(&kubectl(&server, &["get", "syncclusterresources", "-o", "name"]).await);
    assert_eq!(
        out.trim(),
        "syncregistry.search.karpor.io/default-sync-rule"
    );
    let out = ok(&kubectl(&server, &["get", "scr"]).await);
    assert!(out.contains(karpor::DEFAULT_REGISTRY), "{out}");
    let out = ok(&kubectl(
        &server,
        &["api-resources", "--api-group", karpor::SEARCH_GROUP],
    )
    .await);
    assert!(
        out.lines()
            .any(|l| l.starts_with("syncclusterresources") && l.contains("SyncRegistry")),
        "{out}"
    );
    assert!(!out.contains("syncregistries"), "{out}");
    // Karpor serves no workloads of its own.
    let out = kubectl(&server, &["get", "deployments"]).await;
    assert!(!out.status.success());
    karpor.shutdown().await;
}

#[tokio::test]
async fn unconditional_replace_of_a_registry_is_refused_in_karpors_words() {
    let karpor = karpor::start(KarporOptions::default()).await.unwrap();
    let url = format!(
        "{}/apis/search.karpor.io/v1beta1/syncclusterresources/{}",
        karpor.url(),
        karpor::DEFAULT_REGISTRY
    );
    let response = common::http()
        .put(&url)
        .json(&karpor::default_sync_registry())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let status: Value = response.json().await.unwrap();
    assert_eq!(
        status["message"],
        "syncregistries.search.karpor.io \"default-sync-rule\" is invalid: \
         metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    assert_eq!(status["details"]["kind"], "syncregistries");
    karpor.shutdown().await;
}
