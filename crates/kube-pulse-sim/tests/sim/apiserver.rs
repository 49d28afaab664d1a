//! What a real apiserver fills in and answers, checked over a socket with
//! kube-rs and kubectl: the defaults of created pods, services and secrets,
//! the objects deletes return, discovery, tables and validation.

use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{Api, PostParams};
use pulse_testkit::kubectl::{kubectl, ok};
use pulse_testkit::sim::sim;
use serde_json::json;

fn object<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).unwrap()
}

#[tokio::test]
async fn created_pods_services_and_secrets_carry_the_apiservers_defaults() {
    let sim = sim().await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "shop");
    let pod = pods
        .create(
            &PostParams::default(),
            &object(json!({
                "metadata": {"name": "sized"},
                "spec": {"containers": [
                    {"name": "a", "image": "nginx", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                    {"name": "b", "image": "registry.example/b:2"}]}
            })),
        )
        .await
        .unwrap();
    let spec = pod.spec.unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    let pulls: Vec<_> = spec
        .containers
        .iter()
        .map(|c| c.image_pull_policy.clone().unwrap_or_default())
        .collect();
    assert_eq!(pulls, ["Always", "IfNotPresent"]);
    assert_eq!(
        spec.containers[0].termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    let status = pod.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    // One container without limits: Burstable, not Guaranteed.
    assert_eq!(status.qos_class.as_deref(), Some("Burstable"));

    let services: Api<Service> = Api::namespaced(sim.client(), "shop");
    let svc = services
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})),
        )
        .await
        .unwrap();
    let spec = svc.spec.unwrap();
    let ip = spec.cluster_ip.clone().unwrap();
    assert!(ip.starts_with("10.96."), "{ip}");
    assert_eq!(spec.cluster_ips, Some(vec![ip.clone()]));
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.session_affinity.as_deref(), Some("None"));
    let port = &spec.ports.unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80))
    );
    let out = ok(&kubectl(&sim.url(), &["get", "services", "-n", "shop"]).await);
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ],
        "{out}"
    );
    assert_eq!(lines[1][..5], ["web", "ClusterIP", &ip, "<none>", "80/TCP"]);

    let secrets: Api<Secret> = Api::namespaced(sim.client(), "shop");
    let secret = secrets
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "s"}, "stringData": {"user": "admin"}})),
        )
        .await
        .unwrap();
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    assert!(secret.string_data.is_none());
    let data = secret.data.unwrap();
    assert_eq!(data["user"].0, b"admin");
    sim.shutdown().await;
}

/// Whether a delete of `plural` named `name` answers with the object (Left)
/// or a `Status` (Right), through kube-rs's dynamic API.
async fn deletes_to_object(
    sim: &kube_pulse_sim::SimCluster,
    (group, version, kind, plural): (&str, &str, &str, &str),
    namespace: Option<&str>,
    body: serde_json::Value,
) -> bool {
    use kube::api::{ApiResource, DynamicObject};
    use kube::core::GroupVersionKind;
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(sim.client(), ns, &resource),
        None => Api::all_with(sim.client(), &resource),
    };
    let mut obj: DynamicObject = object(body);
    obj.types = Some(kube::core::TypeMeta {
        api_version: resource.api_version.clone(),
        kind: kind.into(),
    });
    let name = obj.metadata.name.clone().unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    let answer = api.delete(&name, &Default::default()).await.unwrap();
    if let Some(status) = answer.clone().right() {
        assert_eq!(
            status.status,
            Some(kube::core::response::StatusSummary::Success)
        );
    }
    let deleted = answer.left();
    if let Some(deleted) = &deleted {
        assert_eq!(deleted.metadata.name.as_deref(), Some(name.as_str()));
    }
    deleted.is_some()
}

#[tokio::test]
async fn deletes_answer_with_the_object_where_the_apiserver_does() {
    let sim = pulse_testkit::sim::sim_with(|c| {
        c.extra_resources = vec![kube_pulse_sim::resources::ResourceDef::custom(
            "example.com",
            "v1",
            "widgets",
            "Widget",
        )]
    })
    .await;
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let named = |name: &str| json!({"metadata": {"name": name}});
    let pvc = json!({"metadata": {"name": "claim"}, "spec": {"accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}}});
    let cases = [
        (("", "v1", "Pod", "pods"), Some("shop"), pod, true),
        (
            ("", "v1", "Service", "services"),
            Some("shop"),
            named("svc"),
            true,
        ),
        (
            ("", "v1", "ServiceAccount", "serviceaccounts"),
            Some("shop"),
            named("bot"),
            true,
        ),
        (
            ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
            Some("shop"),
            pvc,
            true,
        ),
        (
            ("", "v1", "PersistentVolume", "persistentvolumes"),
            None,
            named("vol"),
            true,
        ),
        (
            ("example.com", "v1", "Widget", "widgets"),
            Some("shop"),
            named("w"),
            true,
        ),
        (
            ("", "v1", "ConfigMap", "configmaps"),
            Some("shop"),
            named("cm"),
            false,
        ),
        (
            ("", "v1", "Secret", "secrets"),
            Some("shop"),
            named("sec"),
            false,
        ),
    ];
    for (resource, namespace, body, want) in cases {
        assert_eq!(
            deletes_to_object(&sim, resource, namespace, body).await,
            want,
            "{resource:?}"
        );
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn discovery_answers_with_and_without_a_trailing_slash_and_serves_groups() {
    let member = sim().await;
    let karpor = kube_pulse_sim::karpor::start(Default::default())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let cases = [
        (&member, "/version/", "gitVersion", None),
        (&member, "/api/", "kind", Some("APIVersions")),
        (&member, "/apis/", "kind", Some("APIGroupList")),
        (&member, "/apis/apps", "kind", Some("APIGroup")),
        (&member, "/apis/apps/", "kind", Some("APIGroup")),
        (&member, "/apis/apps/v1/", "kind", Some("APIResourceList")),
        (&karpor, "/version/", "gitVersion", None),
        (&karpor, "/apis/", "kind", Some("APIGroupList")),
        (&karpor, "/apis/cluster.karpor.io", "kind", Some("APIGroup")),
        (&karpor, "/apis/search.karpor.io/", "kind", Some("APIGroup")),
    ];
    for (cluster, path, key, want) in cases {
        let answer = http
            .get(format!("{}{path}", cluster.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        let body: serde_json::Value = answer.json().await.unwrap();
        assert!(body.get(key).is_some(), "{path}: {body}");
        if let Some(want) = want {
            assert_eq!(body[key], want, "{path}: {body}");
        }
    }
    let apps: serde_json::Value = http
        .get(format!("{}/apis/apps", member.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(apps["name"], "apps");
    assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
    // Groups the cluster does not serve stay 404, as on an apiserver.
    for path in ["/apis/nothing.example.com", "/apis/apps/v9/"] {
        let answer = http
            .get(format!("{}{path}", member.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 404, "{path}");
    }
    karpor.shutdown().await;
    member.shutdown().await;
}

#[tokio::test]
async fn objects_missing_required_fields_are_invalid() {
    let sim = sim().await;
    let http = reqwest::Client::new();
    let template = json!({"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let cases = [
        (
            "/apis/apps/v1/namespaces/shop/deployments",
            json!({"metadata": {"name": "nosel"}, "spec": {"template": template}}),
            vec!["spec.selector"],
        ),
        (
            "/apis/apps/v1/namespaces/shop/statefulsets",
            json!({"metadata": {"name": "other"}, "spec": {
                "selector": {"matchLabels": {"app": "db"}}, "template": template}}),
            vec!["spec.template.metadata.labels"],
        ),
        (
            "/apis/apps/v1/namespaces/shop/deployments",
            json!({"metadata": {"name": "notemplate"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}}),
            vec![
                "spec.template.metadata.labels",
                "spec.template.spec.containers",
            ],
        ),
        (
            "/api/v1/namespaces/shop/pods",
            json!({"metadata": {"name": "nocontainers"}, "spec": {}}),
            vec!["spec.containers"],
        ),
        (
            "/api/v1/namespaces/shop/events",
            json!({"metadata": {"name": "noinvolved"}, "reason": "X"}),
            vec!["involvedObject.namespace", "involvedObject"],
        ),
    ];
    for (path, body, fields) in cases {
        let answer = http
            .post(format!("{}{path}", sim.url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 422, "{path}");
        let status: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(status["reason"], "Invalid", "{status}");
        let causes: Vec<&str> = status["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect();
        assert_eq!(causes, fields, "{status}");
    }
    // Nothing was stored: typed lists still decode every item.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(sim.client(), "shop");
    assert!(
        deployments
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let pods: Api<Pod> = Api::namespaced(sim.client(), "shop");
    assert!(
        pods.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    sim.shutdown().await;
}
