//! The member resources Karpor's default sync registry names, on every
//! simulated cluster: ReplicaSets kept by the deployment controller (owning
//! the pods, scaled across a rollout, deleted with their Deployment), Ready
//! nodes, and the plain resources (services, secrets, volumes, ingresses,
//! policy/v1 PodDisruptionBudgets — not policy/v1beta1 —, leases) through
//! discovery, kube-rs and kubectl.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::discovery::Discovery;
use pulse_testkit::http::http;
use pulse_testkit::kubectl::{kubectl, ok};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{deployment, sim_with};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

/// The ReplicaSets of `shop` as (name, spec replicas, ready replicas).
async fn replica_sets(api: &Api<ReplicaSet>) -> Vec<(String, i32, i32)> {
    let mut sets: Vec<(String, i32, i32)> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|rs| {
            (
                rs.metadata.name.unwrap_or_default(),
                rs.spec.replicas.unwrap_or(-1),
                rs.status.and_then(|s| s.ready_replicas).unwrap_or(0),
            )
        })
        .collect();
    sets.sort();
    sets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_sets_own_the_pods_and_follow_rollouts() {
    let sim = sim_with(|c| c.workloads = vec![deployment("shop", "web", 2)]).await;
    let client = sim.client();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "shop");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "shop");

    let first = eventually(WAIT, "one ReplicaSet with 2 ready", || async {
        let found = replica_sets(&sets).await;
        (found.len() == 1 && found[0].1 == 2 && found[0].2 == 2).then(|| found[0].0.clone())
    })
    .await;
    let rs = sets.get(&first).await.unwrap();
    let deployment = deployments.get("web").await.unwrap();
    let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.kind, "Deployment");
    assert_eq!(Some(&owner.uid), deployment.metadata.uid.as_ref());
    let hash = rs.metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    assert_eq!(first, format!("web-{hash}"));
    // Its pods are named after it and owned by it.
    let listed = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 2);
    for pod in &listed {
        let name = pod.metadata.name.as_deref().unwrap();
        assert!(name.starts_with(&format!("{first}-")), "{name}");
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("ReplicaSet", first.as_str())
        );
        assert_eq!(Some(&owner.uid), rs.metadata.uid.as_ref());
    }

    // A new template gets a new ReplicaSet; the old one ends at 0.
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "registry.example/web:2"}]}}}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Strategic(image))
        .await
        .unwrap();
    let after = eventually(WAIT, "the rollout moves to a second ReplicaSet", || async {
        let found = replica_sets(&sets).await;
        let done = found.len() == 2
            && found
                .iter()
                .any(|(n, r, ready)| *n == first && *r == 0 && *ready == 0)
            && found
                .iter()
                .any(|(n, r, ready)| *n != first && *r == 2 && *ready == 2);
        done.then_some(found)
    })
    .await;
    let second = after.iter().find(|(n, ..)| *n != first).unwrap().0.clone();
    let out = ok(&kubectl(&sim.url(), &["get", "rs", "-n", "shop"]).await);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with(&second) && l.contains(" 2 ")),
        "{out}"
    );

    // Deleting the Deployment deletes its ReplicaSets.
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually(WAIT, "the ReplicaSets are collected", || async {
        replica_sets(&sets).await.is_empty().then_some(())
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_resources_are_served_and_nodes_are_ready() {
    let sim = sim_with(|_| {}).await;
    let client = sim.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = nodes.list(&ListParams::default()).await.unwrap().items;
    let names: Vec<&str> = listed
        .iter()
        .map(|n| n.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(names, ["sim-node-1", "sim-node-2", "sim-node-3"]);
    for node in &listed {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone());
        assert_eq!(ready.as_deref(), Some("True"));
    }
    let out = ok(&kubectl(&sim.url(), &["get", "nodes"]).await);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{out}"
    );
    assert_eq!(out.matches(" Ready ").count(), 3, "{out}");

    // Karpor's default resources, through discovery: policy/v1 only.
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let served = |group: &str, version: &str, plural: &str| {
        discovery.groups().any(|g| {
            g.name() == group
                && g.versions().any(|v| v == version)
                && g.versioned_resources(version)
                    .iter()
                    .any(|(r, _)| r.plural == plural)
        })
    };
    for (group, version, plural) in [
        ("", "v1", "nodes"),
        ("", "v1", "services"),
        ("", "v1", "secrets"),
        ("", "v1", "serviceaccounts"),
        ("", "v1", "persistentvolumes"),
        ("", "v1", "persistentvolumeclaims"),
        ("apps", "v1", "replicasets"),
        ("networking.k8s.io", "v1", "ingresses"),
        ("policy", "v1", "poddisruptionbudgets"),
        ("coordination.k8s.io", "v1", "leases"),
    ] {
        assert!(served(group, version, plural), "{group}/{version} {plural}");
    }
    assert!(!served("policy", "v1beta1", "poddisruptionbudgets"));
    let gone = http()
        .get(format!(
            "{}/apis/policy/v1beta1/poddisruptionbudgets",
            sim.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);

    // kubectl creates and lists them.
    let dir = std::env::temp_dir().join(format!("kube-pulse-members-{}", sim.addr().port()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("members.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: shop}
stringData: {password: p}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: shop}
spec: {minAvailable: 1, selector: {matchLabels: {app: web}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: shop}
spec: {rules: [{host: web.example}]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: shop}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: leader, namespace: shop}
spec: {holderIdentity: gateway-0}
"#,
    )
    .unwrap();
    let out = ok(&kubectl(&sim.url(), &["apply", "-f", file.to_str().unwrap()]).await);
    for created in [
        "service/web created",
        "secret/creds created",
        "poddisruptionbudget.policy/web created",
        "ingress.networking.k8s.io/web created",
        "persistentvolumeclaim/data created",
        "lease.coordination.k8s.io/leader created",
    ] {
        assert!(out.contains(created), "{created} in {out}");
    }
    let out = ok(&kubectl(
        &sim.url(),
        &[
            "get",
            "svc,secrets,pdb,ingresses,pvc,leases",
            "-n",
            "shop",
            "-o",
            "name",
        ],
    )
    .await);
    for name in [
        "service/web",
        "secret/creds",
        "poddisruptionbudget.policy/web",
        "ingress.networking.k8s.io/web",
        "persistentvolumeclaim/data",
        "lease.coordination.k8s.io/leader",
    ] {
        assert!(out.lines().any(|l| l == name), "{name} in {out}");
    }
    sim.shutdown().await;
}
