//! Deployments, StatefulSets and Pods as the status machines read them,
//! decoded straight from the member's list or watch into only the fields
//! they use: the metadata the gateway keys, labels and versions by; a
//! workload's replicas, selector, images, counters and conditions; a pod's
//! phase, conditions, container states and requests. Everything else (a
//! pod spec past what is named here, `managedFields`, annotations) the
//! decoder skips without building it.
//!
//! k8s-openapi's `Deployment` is 3 KiB before its strings, with the whole
//! pod spec; decoding it, then moving it by value through the watch's
//! stream and dropping it, was a fifth of what the gateway did for a
//! Deployment's change (docs/benchmarks/34-slim-decode.md). These types
//! are a few hundred bytes. An [`Object`] implements k8s-openapi's
//! `Resource` and `Metadata` as the kind it stands for, so `kube::Api`
//! lists and watches it at that kind's URLs.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};

/// The metadata read: name and namespace (keys), resource version (the
/// watch's resume point), labels (the app label), generation and
/// deletion (the kstatus reading).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Meta {
    name: Option<String>,
    generate_name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    deletion_timestamp: Option<Time>,
}

/// `metadata` decoded as [`Meta`], as the `ObjectMeta` kube's traits read.
fn metadata<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Option::<Meta>::deserialize(d)?.unwrap_or_default();
    Ok(ObjectMeta {
        name: m.name,
        generate_name: m.generate_name,
        namespace: m.namespace,
        resource_version: m.resource_version,
        generation: m.generation,
        labels: m.labels,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

/// The spec fields a Deployment and a StatefulSet share and the app
/// machine reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct WorkloadSpec {
    /// `spec.replicas` (absent: Kubernetes defaults it to 1).
    pub(crate) replicas: Option<i32>,
    pub(crate) selector: Option<Selector>,
    pub(crate) template: Option<Template>,
}

impl WorkloadSpec {
    /// `spec.selector.matchLabels`.
    pub(crate) fn match_labels(&self) -> Option<&BTreeMap<String, String>> {
        self.selector.as_ref()?.match_labels.as_ref()
    }

    /// The pod template's container images, in order.
    pub(crate) fn images(&self) -> Vec<String> {
        let containers = self
            .template
            .as_ref()
            .and_then(|t| t.spec.as_ref())
            .and_then(|s| s.containers.as_deref())
            .unwrap_or_default();
        containers.iter().filter_map(|c| c.image.clone()).collect()
    }
}

/// `spec.selector`: only `matchLabels` is read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Selector {
    pub(crate) match_labels: Option<BTreeMap<String, String>>,
}

/// `spec.template`: only its containers' images are read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Template {
    pub(crate) spec: Option<PodSpec>,
}

/// The status counters both workload kinds report, and a Deployment's
/// conditions.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct WorkloadStatus {
    pub(crate) observed_generation: Option<i64>,
    pub(crate) replicas: Option<i32>,
    pub(crate) updated_replicas: Option<i32>,
    pub(crate) ready_replicas: Option<i32>,
    pub(crate) available_replicas: Option<i32>,
    pub(crate) conditions: Option<Vec<Condition>>,
}

/// One of `status.conditions` (a workload's or a pod's).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Condition {
    #[serde(rename = "type")]
    pub(crate) type_: Option<String>,
    pub(crate) status: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) message: Option<String>,
}

/// An object of kind `K` as read: its metadata, and its spec and status
/// as `Spec` and `Status` read them.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Object<K, Spec, Status> {
    #[serde(deserialize_with = "metadata")]
    pub(crate) metadata: ObjectMeta,
    pub(crate) spec: Option<Spec>,
    pub(crate) status: Option<Status>,
    #[serde(skip)]
    kind: std::marker::PhantomData<fn() -> K>,
}

/// A Deployment or a StatefulSet, as read.
pub(crate) type WorkloadObject<K> = Object<K, WorkloadSpec, WorkloadStatus>;
/// An `apps/v1` Deployment, as read.
pub(crate) type DeploymentObject = WorkloadObject<k8s_openapi::api::apps::v1::Deployment>;
/// An `apps/v1` StatefulSet, as read.
pub(crate) type StatefulSetObject = WorkloadObject<k8s_openapi::api::apps::v1::StatefulSet>;
/// A `v1` Pod, as read.
pub(crate) type PodObject = Object<k8s_openapi::api::core::v1::Pod, PodSpec, PodStatus>;

impl<K: k8s_openapi::Resource, Spec, Status> k8s_openapi::Resource for Object<K, Spec, Status> {
    const API_VERSION: &'static str = K::API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = K::KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = K::Scope;
}

impl<K: k8s_openapi::Resource, Spec, Status> k8s_openapi::Metadata for Object<K, Spec, Status> {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A pod's `spec`, or a workload's pod template's: only its containers.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PodSpec {
    pub(crate) containers: Option<Vec<Container>>,
}

/// One of a pod spec's `containers`: its image (a workload's template's
/// are shown) and its requests (a pod's are summed).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Container {
    pub(crate) image: Option<String>,
    pub(crate) resources: Option<ContainerResources>,
}

/// A container's `resources`: only `requests` are read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ContainerResources {
    pub(crate) requests: Option<BTreeMap<String, Quantity>>,
}

/// `status` of a Pod.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct PodStatus {
    pub(crate) phase: Option<String>,
    pub(crate) conditions: Option<Vec<Condition>>,
    pub(crate) init_container_statuses: Option<Vec<ContainerStatus>>,
    pub(crate) container_statuses: Option<Vec<ContainerStatus>>,
}

/// One of a pod's container statuses.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ContainerStatus {
    pub(crate) name: String,
    pub(crate) ready: bool,
    pub(crate) restart_count: i32,
    pub(crate) state: Option<ContainerState>,
    pub(crate) last_state: Option<ContainerState>,
}

/// A container's `state` or `lastState`: which of the three it is in, and
/// the reason, message and exit code where it has them.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ContainerState {
    pub(crate) waiting: Option<Waiting>,
    /// Present while it runs; nothing of it is read.
    pub(crate) running: Option<IgnoredAny>,
    pub(crate) terminated: Option<Terminated>,
}

/// `state.waiting`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Waiting {
    pub(crate) reason: Option<String>,
    pub(crate) message: Option<String>,
}

/// `state.terminated`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Terminated {
    pub(crate) reason: Option<String>,
    pub(crate) exit_code: i32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::json;

    /// A Deployment as an apiserver sends it, with what is skipped.
    fn full() -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "42",
                "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app.kubernetes.io/name": "shop-web"},
                "annotations": {"deployment.kubernetes.io/revision": "3"},
                "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "apps/v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
            },
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}, "matchExpressions": []},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [
                            {"name": "web", "image": "web:1", "ports": [{"containerPort": 80}],
                             "resources": {"requests": {"cpu": "100m"}}, "env": [{"name": "A", "value": "b"}]},
                            {"name": "sidecar"},
                            {"name": "log", "image": "log:2"},
                        ],
                        "volumes": [{"name": "v", "emptyDir": {}}],
                    },
                },
            },
            "status": {
                "observedGeneration": 3, "replicas": 3, "updatedReplicas": 2, "readyReplicas": 3,
                "availableReplicas": 3, "unavailableReplicas": 0,
                "conditions": [
                    {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                     "lastUpdateTime": "2026-01-01T00:00:00Z"},
                    {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                     "message": "timed out"},
                ],
            },
        })
    }

    #[test]
    fn reads_only_what_the_app_machine_uses() {
        let d: DeploymentObject = serde_json::from_value(full()).unwrap();
        let m = &d.metadata;
        assert_eq!(m.name.as_deref(), Some("web"));
        assert_eq!(m.namespace.as_deref(), Some("shop"));
        assert_eq!(m.resource_version.as_deref(), Some("42"));
        assert_eq!(m.generation, Some(3));
        assert_eq!(
            m.labels.as_ref().unwrap()["app.kubernetes.io/name"],
            "shop-web"
        );
        // Skipped, not built.
        assert!(m.annotations.is_none() && m.managed_fields.is_none() && m.uid.is_none());
        let spec = d.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.match_labels().unwrap()["app"], "web");
        assert_eq!(spec.images(), ["web:1", "log:2"]);
        let status = d.status.as_ref().unwrap();
        assert_eq!(
            (
                status.observed_generation,
                status.updated_replicas,
                status.ready_replicas
            ),
            (Some(3), Some(2), Some(3))
        );
        let conditions = status.conditions.as_ref().unwrap();
        assert_eq!(conditions[1].type_.as_deref(), Some("Progressing"));
        assert_eq!(conditions[1].message.as_deref(), Some("timed out"));
    }

    #[test]
    fn reads_a_deployment_as_k8s_openapi_does() {
        use k8s_openapi::api::apps::v1::Deployment;
        let typed: Deployment = serde_json::from_value(full()).unwrap();
        let slim: DeploymentObject = serde_json::from_value(full()).unwrap();
        let (spec, status) = (slim.spec.unwrap(), slim.status.unwrap());
        let want = typed.spec;
        assert_eq!(spec.replicas, want.replicas);
        assert_eq!(spec.match_labels(), want.selector.match_labels.as_ref());
        let images: Vec<String> = (want.template.spec.unwrap().containers.into_iter())
            .filter_map(|c| c.image)
            .collect();
        assert_eq!(spec.images(), images);
        let want = typed.status.unwrap();
        assert_eq!(status.observed_generation, want.observed_generation);
        assert_eq!(
            [
                status.replicas,
                status.updated_replicas,
                status.ready_replicas,
                status.available_replicas
            ],
            [
                want.replicas,
                want.updated_replicas,
                want.ready_replicas,
                want.available_replicas
            ]
        );
        let conditions = |c: &Condition| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
            )
        };
        let read: Vec<_> = status.conditions.unwrap().iter().map(conditions).collect();
        let want: Vec<_> = (want.conditions.unwrap().into_iter())
            .map(|c| (c.type_, c.status, c.reason, c.message))
            .collect();
        assert_eq!(read, want);
        let (m, w) = (&slim.metadata, &typed.metadata);
        assert_eq!(
            (
                &m.name,
                &m.namespace,
                &m.resource_version,
                m.generation,
                &m.labels
            ),
            (
                &w.name,
                &w.namespace,
                &w.resource_version,
                w.generation,
                &w.labels
            )
        );
    }

    /// A crash-looping pod as a kubelet reports it, with what is skipped.
    fn pod() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "resourceVersion": "7",
                "labels": {"app": "web"}, "deletionTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-x", "uid": "r"}]},
            "spec": {"nodeName": "n1", "containers": [
                {"name": "app", "image": "web:1", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"},
                    "limits": {"cpu": "1"}}, "volumeMounts": [{"name": "v", "mountPath": "/v"}]},
                {"name": "side", "image": "side:1"},
            ]},
            "status": {
                "phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": null},
                    {"type": "PodScheduled", "status": "True"}],
                "initContainerStatuses": [{"name": "init", "image": "i", "imageID": "", "ready": true,
                    "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                "containerStatuses": [
                    {"name": "app", "image": "web:1", "imageID": "x", "ready": false, "restartCount": 5,
                     "started": false, "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                     "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": null}}},
                    {"name": "side", "image": "side:1", "imageID": "", "ready": true, "restartCount": 0,
                     "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
                ],
            },
        })
    }

    #[test]
    fn reads_a_pod_as_k8s_openapi_does() {
        use k8s_openapi::api::core::v1::Pod;
        let typed: Pod = serde_json::from_value(pod()).unwrap();
        let slim: PodObject = serde_json::from_value(pod()).unwrap();
        let (m, w) = (&slim.metadata, &typed.metadata);
        assert_eq!(
            (&m.name, &m.namespace, &m.labels, &m.deletion_timestamp),
            (&w.name, &w.namespace, &w.labels, &w.deletion_timestamp)
        );
        assert!(m.owner_references.is_none(), "skipped");
        let requests: Vec<_> = (slim.spec.unwrap().containers.unwrap().into_iter())
            .map(|c| c.resources.and_then(|r| r.requests))
            .collect();
        let want: Vec<_> = (typed.spec.unwrap().containers.into_iter())
            .map(|c| c.resources.and_then(|r| r.requests))
            .collect();
        assert_eq!(requests, want);
        let (status, want) = (slim.status.unwrap(), typed.status.unwrap());
        assert_eq!(status.phase, want.phase);
        let read: Vec<_> = (status.conditions.unwrap().into_iter())
            .map(|c| (c.type_, c.status))
            .collect();
        let wanted: Vec<_> = (want.conditions.unwrap().into_iter())
            .map(|c| (Some(c.type_), Some(c.status)))
            .collect();
        assert_eq!(read, wanted);
        // What is read of a container status, off either type: their
        // fields have the same names.
        macro_rules! state {
            ($state:expr) => {
                $state.as_ref().map(|s| {
                    let waiting =
                        (s.waiting.as_ref()).map(|w| (w.reason.clone(), w.message.clone()));
                    let ended = (s.terminated.as_ref()).map(|t| (t.reason.clone(), t.exit_code));
                    (waiting, s.running.is_some(), ended)
                })
            };
        }
        macro_rules! statuses {
            ($statuses:expr) => {
                ($statuses.unwrap().iter())
                    .map(|c| {
                        let states = (state!(c.state), state!(c.last_state));
                        (c.name.clone(), c.ready, c.restart_count, states)
                    })
                    .collect::<Vec<_>>()
            };
        }
        assert_eq!(
            statuses!(status.container_statuses),
            statuses!(want.container_statuses)
        );
        assert_eq!(
            statuses!(status.init_container_statuses),
            statuses!(want.init_container_statuses)
        );
    }

    #[test]
    fn null_and_missing_fields_read_as_absent() {
        for object in [
            json!({"metadata": {"name": "x"}}),
            json!({"metadata": {"name": "x", "labels": null}, "spec": null, "status": null}),
            json!({"metadata": {"name": "x"}, "spec": {"selector": null, "template": {"spec": null}}}),
            json!({"metadata": {"name": "x"}, "spec": {"template": {"spec": {"containers": null}}}}),
        ] {
            let d: DeploymentObject = serde_json::from_value(object.clone()).unwrap();
            assert_eq!(d.metadata.name.as_deref(), Some("x"), "{object}");
            let spec = d.spec.unwrap_or_default();
            assert_eq!(spec.replicas, None, "{object}");
            assert!(spec.match_labels().is_none(), "{object}");
            assert!(spec.images().is_empty(), "{object}");
        }
        let bare: DeploymentObject = serde_json::from_value(json!({"metadata": null})).unwrap();
        assert_eq!(bare.metadata, ObjectMeta::default());
    }

    #[test]
    fn a_wrong_type_is_an_error_not_a_default() {
        let wrong = json!({"metadata": {"name": "x"}, "spec": {"replicas": "three"}});
        assert!(serde_json::from_value::<DeploymentObject>(wrong).is_err());
    }

    #[test]
    fn lists_and_watches_at_the_objects_own_urls() {
        assert_eq!(
            DeploymentObject::url_path(&(), Some("shop")),
            "/apis/apps/v1/namespaces/shop/deployments"
        );
        assert_eq!(
            StatefulSetObject::url_path(&(), None),
            "/apis/apps/v1/statefulsets"
        );
        assert_eq!(DeploymentObject::kind(&()), "Deployment");
    }
}
