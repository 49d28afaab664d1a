//! A simulated Karpor apiserver against real clients on loopback: kube-rs
//! finds the SyncRegistry through discovery's plural, creates a Cluster,
//! writes its status through `/status` and watches it; Karpor's strategies
//! (status reset on create, each endpoint keeps the other half, updates
//! need a fresh resourceVersion); kubectl reads both resources.

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use kube::runtime::{WatchStreamExt, watcher};
use kube_pulse_sim::karpor::{self, Credential, KarporOptions, MemberAccess};
use pulse_testkit::http::http;
use pulse_testkit::kubectl::{kubectl, ok};
use pulse_testkit::sim::sim;
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
    karpor::register_members(&karpor, &[&member]).unwrap();
    let store = karpor.store();
    let cluster_def = store
        .catalog()
        .find(karpor::CLUSTER_GROUP, karpor::VERSION, "clusters")
        .unwrap()
        .clone();
    let registered = store.get(&cluster_def, None, member.name()).unwrap();
    assert_eq!(registered["spec"]["access"]["endpoint"], member.url());

    // The registry is found through discovery, under Karpor's plural.
    let (registries, scope) = discover(&client, karpor::SEARCH_GROUP, "SyncRegistry").await;
    assert_eq!(registries.plural, "syncclusterresources");
    assert_eq!(registries.api_version, "search.karpor.io/v1beta1");
    assert_eq!(scope, Scope::Cluster);
    let registries: Api<DynamicObject> = Api::all_with(client.clone(), &registries);
    let default = registries.get(karpor::DEFAULT_REGISTRY).await.unwrap();
    // Go's nil slice and zero time, as Karpor prints a registry never written to.
    assert_eq!(
        body(&default)["status"],
        json!({"clusters": null, "lastTransitionTime": null})
    );
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
    // healthy: false is Go's zero value, which Karpor's omitempty drops.
    assert_eq!(body(&patched)["status"], json!({}));

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
    let response = http()
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

const CLUSTER_YAML: &str = r#"apiVersion: cluster.karpor.io/v1beta1
kind: Cluster
metadata:
  name: edge
  labels: {site: lab}
spec:
  provider: kubernetes
  displayName: Edge
  region: eu-west # not a field of Karpor's Cluster
  access:
    endpoint: https://10.0.0.9:6443
    insecure: true
    credential:
      type: ServiceAccountToken
      serviceAccountToken: abc
status:
  healthy: true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_a_cluster_that_karpor_prunes() {
    let karpor = karpor::start(KarporOptions::default()).await.unwrap();
    let server = karpor.url();
    let dir = tempfile_dir(&karpor);
    let file = dir.join("cluster.yaml");
    std::fs::write(&file, CLUSTER_YAML).unwrap();
    let file = file.to_str().unwrap();

    // kubectl validates strictly by default: Karpor refuses the unknown field.
    let refused = kubectl(&server, &["apply", "-f", file]).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(
            "Cluster in version \"v1beta1\" cannot be handled as a Cluster: \
             strict decoding error: unknown field \"spec.region\""
        ),
        "{stderr}"
    );
    // Warned about, then dropped.
    let warned = kubectl(&server, &["apply", "--validate=warn", "-f", file]).await;
    assert!(warned.status.success());
    assert_eq!(
        String::from_utf8_lossy(&warned.stdout).trim(),
        "cluster.cluster.karpor.io/edge created"
    );
    let stderr = String::from_utf8_lossy(&warned.stderr);
    assert!(stderr.contains("unknown field \"spec.region\""), "{stderr}");
    let out = ok(&kubectl(&server, &["get", "clusters", "-o", "yaml"]).await);
    let list: Value = serde_yaml_ng::from_str(&out).unwrap();
    let cluster = &list["items"][0];
    assert_eq!(
        cluster["spec"]["access"]["endpoint"],
        "https://10.0.0.9:6443"
    );
    assert_eq!(cluster["spec"]["access"]["insecure"], true);
    assert_eq!(cluster["spec"]["displayName"], "Edge");
    assert!(cluster["spec"].get("region").is_none(), "{out}");
    assert_eq!(
        cluster["status"],
        json!({}),
        "status is reset on create: {out}"
    );
    assert_eq!(cluster["metadata"]["labels"]["site"], "lab");

    // A second apply patches the object (no resourceVersion needed).
    std::fs::write(
        file,
        CLUSTER_YAML.replace("displayName: Edge", "displayName: Edge 2"),
    )
    .unwrap();
    // Without validation, silently dropped.
    let out = ok(&kubectl(&server, &["apply", "--validate=false", "-f", file]).await);
    assert_eq!(out.trim(), "cluster.cluster.karpor.io/edge configured");
    let out = ok(&kubectl(
        &server,
        &[
            "get",
            "cluster",
            "edge",
            "-o",
            "jsonpath={.spec.displayName}",
        ],
    )
    .await);
    assert_eq!(out, "Edge 2");

    let out = ok(&kubectl(&server, &["get", "syncclusterresources"]).await);
    let mut lines = out.lines();
    assert!(lines.next().unwrap().starts_with("NAME"), "{out}");
    assert!(
        lines.next().unwrap().starts_with("default-sync-rule "),
        "{out}"
    );
    karpor.shutdown().await;
}

fn tempfile_dir(sim: &kube_pulse_sim::SimCluster) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kube-pulse-karpor-{}", sim.addr().port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `status` to Cluster `name` through `/status` as `manager`.
async fn write_status(
    clusters: &Api<DynamicObject>,
    name: &str,
    manager: &str,
    status: Value,
) -> Value {
    let mut object = body(&clusters.get(name).await.unwrap());
    object["status"] = status;
    let params = PostParams {
        field_manager: Some(manager.into()),
        ..PostParams::default()
    };
    body(
        &clusters
            .replace_status(name, &params, &self::object(&object))
            .await
            .unwrap(),
    )
}

#[tokio::test]
async fn status_writes_keep_what_the_schema_has_and_record_their_writer() {
    let member = sim().await;
    let written = json!({
        "healthy": true,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Healthy", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "phase": "Healthy",
    });
    let cases = [
        (false, json!({"healthy": true})),
        (
            true,
            json!({"healthy": true, "conditions": [{"type": "Ready", "status": "True",
                   "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Healthy", "message": ""}]}),
        ),
    ];
    for (conditions, want) in cases {
        let karpor = karpor::start(KarporOptions {
            conditions,
            ..KarporOptions::default()
        })
        .await
        .unwrap();
        karpor
            .apply(&karpor::cluster_manifest(
                "prod",
                &MemberAccess::to_sim(&member),
            ))
            .unwrap();
        let (resource, _) = discover(&karpor.client(), karpor::CLUSTER_GROUP, "Cluster").await;
        let clusters: Api<DynamicObject> = Api::all_with(karpor.client(), &resource);
        let stored = write_status(&clusters, "prod", "kube-pulse", written.clone()).await;
        assert_eq!(stored["status"], want, "conditions: {conditions}");

        let entries = stored["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .clone();
        // Under #831 Karpor wrote status on create, as `karpor`.
        let managers: Vec<&str> = entries
            .iter()
            .filter_map(|e| e["manager"].as_str())
            .collect();
        let expected: &[&str] = if conditions {
            &["karpor", "kube-pulse"]
        } else {
            &["kube-pulse"]
        };
        assert_eq!(managers, expected, "{entries:?}");
        let entry = entries.last().unwrap();
        assert_eq!(entry["manager"], "kube-pulse");
        assert_eq!(entry["operation"], "Update");
        assert_eq!(entry["subresource"], "status");
        assert_eq!(entry["apiVersion"], "cluster.karpor.io/v1beta1");
        assert_eq!(entry["fieldsType"], "FieldsV1");
        assert_eq!(entry["fieldsV1"], json!({"f:status": {}}));
        let first = entry["time"].as_str().unwrap().to_string();
        assert!(first.ends_with('Z'), "{first}");
        if !conditions {
            // Another writer shows as a second entry; a later write refreshes the time
            // (managedFields times have whole seconds).
            tokio::time::sleep(Duration::from_millis(1100)).await;
            // A second writer (through the store, as Karpor's own controller would).
            let stored = karpor::write_status(
                &karpor,
                "clusters",
                "prod",
                json!({"healthy": false}),
                "karpor-controller",
            )
            .unwrap();
            assert_eq!(stored["status"], json!({}), "pruned like any status write");
            let entries = stored["metadata"]["managedFields"].as_array().unwrap();
            let managers: Vec<&str> = entries
                .iter()
                .map(|e| e["manager"].as_str().unwrap())
                .collect();
            assert_eq!(managers, ["kube-pulse", "karpor-controller"]);
            let stored =
                write_status(&clusters, "prod", "kube-pulse", json!({"healthy": true})).await;
            let again = stored["metadata"]["managedFields"][0]["time"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(again > first, "{first} then {again}");
            // The main endpoint keeps the entries.
            let relabelled = clusters
                .patch(
                    "prod",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
                )
                .await
                .unwrap();
            let entries = body(&relabelled)["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .len();
            assert!(entries >= 2, "{relabelled:?}");
        }
        karpor.shutdown().await;
    }
    member.shutdown().await;
}

#[tokio::test]
async fn a_kubeconfig_reaches_a_karpor_apiserver_that_needs_a_token() {
    let karpor = kube_pulse_sim::SimCluster::start(kube_pulse_sim::SimConfig {
        token: Some("karpor-t0k".into()),
        ..karpor::config(KarporOptions::default())
    })
    .await
    .unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&karpor.kubeconfig("karpor")).unwrap();
    assert_eq!(kubeconfig.current_context.as_deref(), Some("karpor"));
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let (registries, _) = discover(&client, karpor::SEARCH_GROUP, "SyncRegistry").await;
    let registries: Api<DynamicObject> = Api::all_with(client, &registries);
    let names: Vec<String> = registries
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|r| r.metadata.name)
        .collect();
    assert_eq!(names, [karpor::DEFAULT_REGISTRY]);
    // Without the token, the same request is refused.
    let anonymous = http()
        .get(format!(
            "{}/apis/cluster.karpor.io/v1beta1/clusters",
            karpor.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    karpor.shutdown().await;
}

/// Under #831's schema Karpor sets `Validated`, `ClusterHealthy`,
/// `apiserver` and `healthy` when a Cluster is created, and keeps
/// `version`; a JSON merge patch of `/status` changes only what it names
/// (the conditions list whole), and one carrying a stale resourceVersion is
/// refused with 409.
#[tokio::test]
async fn under_831_a_created_cluster_has_karpors_status_and_merge_patches_keep_the_rest() {
    let member = sim().await;
    let karpor = karpor::start(KarporOptions {
        conditions: true,
        default_registry: false,
        push_mode: false,
    })
    .await
    .unwrap();
    let access = MemberAccess::to_sim(&member);
    let (resource, _) = discover(&karpor.client(), karpor::CLUSTER_GROUP, "Cluster").await;
    let clusters: Api<DynamicObject> = Api::all_with(karpor.client(), &resource);
    let created = clusters
        .create(
            &PostParams::default(),
            &object(&karpor::cluster_manifest("prod", &access)),
        )
        .await
        .unwrap();
    let status = body(&created)["status"].clone();
    assert_eq!(status["healthy"], true);
    assert_eq!(status["apiserver"], access.endpoint.as_str());
    let types: Vec<(&str, &str, &str)> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["type"].as_str().unwrap(),
                c["status"].as_str().unwrap(),
                c["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        types,
        [
            ("Validated", "True", "Validated"),
            ("ClusterHealthy", "True", "Healthy")
        ]
    );
    let params = PatchParams {
        field_manager: Some("kube-pulse".into()),
        ..PatchParams::default()
    };
    let patch = json!({
        "metadata": {"resourceVersion": created.metadata.resource_version},
        "status": {"version": "v1.32.0", "healthy": false},
    });
    let patched = body(
        &clusters
            .patch_status("prod", &params, &Patch::Merge(&patch))
            .await
            .unwrap(),
    );
    assert_eq!(patched["status"]["version"], "v1.32.0");
    assert_eq!(patched["status"]["conditions"], status["conditions"]);
    assert_eq!(patched["status"]["apiserver"], status["apiserver"]);
    assert!(patched["status"].get("healthy").is_none(), "omitempty");
    // The same resourceVersion again is stale now.
    let stale = clusters
        .patch_status("prod", &params, &Patch::Merge(&patch))
        .await
        .unwrap_err();
    assert!(
        matches!(&stale, kube::Error::Api(e) if e.code == 409),
        "{stale:?}"
    );
    karpor.shutdown().await;
}
