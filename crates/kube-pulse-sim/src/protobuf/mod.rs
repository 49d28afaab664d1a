//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as Go
//! clients send them: kubectl's typed generators (`create namespace`,
//! `create deployment`, `create configmap`, `run`, `create secret`,
//! `create service`, `create serviceaccount`, `create ingress`, `create
//! poddisruptionbudget`) and client-go controllers.
//!
//! The wire format is the 4-byte magic `k8s\0`, then a `runtime.Unknown`
//! whose `typeMeta` names the kind and whose `raw` holds the typed message.
//! The message is decoded with `k8s-pb`'s prost types and converted to the
//! JSON object the store keeps, for the built-in kinds the simulator serves
//! (Namespace, Pod, ConfigMap, Deployment, StatefulSet here; Secret,
//! Service, ServiceAccount, Ingress, PodDisruptionBudget in `services.rs`),
//! without the zero values Go writes for unset fields. The conversion
//! carries the fields clients write (metadata, spec; not status): the
//! documented subset in `docs/SIMULATOR.md`. Answers stay JSON, which the
//! clients that send protobuf also accept (kubectl's typed clients send
//! `Accept: application/vnd.kubernetes.protobuf,application/json`); a
//! protobuf-only `Accept` is 406 (see `media`).

use std::collections::BTreeMap;

use base64::Engine;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::{Map, Value, json};

use super::status::{ApiError, ApiResult};

/// The media type of Kubernetes protobuf bodies.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The prefix of every Kubernetes protobuf document.
const MAGIC: &[u8] = b"k8s\0";

/// Decodes a protobuf request body to the object's JSON form (with
/// `apiVersion` and `kind` from the envelope).
pub(crate) fn decode(body: &[u8]) -> ApiResult<Value> {
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request("provided protobuf data does not begin with the k8s\\0 prefix")
    })?;
    let unknown = Unknown::decode(envelope)
        .map_err(|e| ApiError::bad_request(format!("invalid protobuf envelope: {e}")))?;
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(ApiError::bad_request(
            "protobuf bodies with a contentEncoding are not supported",
        ));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    if api_version.is_empty() || kind.is_empty() {
        return Err(ApiError::bad_request(
            "couldn't get version/kind; the protobuf envelope has no apiVersion or kind",
        ));
    }
    let raw = unknown.raw.unwrap_or_default();
    let raw = raw.as_slice();
    let bad = |e: prost::DecodeError| {
        ApiError::bad_request(format!("invalid protobuf body of kind {kind}: {e}"))
    };
    let object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => core::Namespace::decode(raw).map_err(bad)?.json(),
        ("v1", "Pod") => core::Pod::decode(raw).map_err(bad)?.json(),
        ("v1", "ConfigMap") => core::ConfigMap::decode(raw).map_err(bad)?.json(),
        ("apps/v1", "Deployment") => apps::Deployment::decode(raw).map_err(bad)?.json(),
        ("apps/v1", "StatefulSet") => apps::StatefulSet::decode(raw).map_err(bad)?.json(),
        ("v1", "Secret") => core::Secret::decode(raw).map_err(bad)?.json(),
        ("v1", "Service") => core::Service::decode(raw).map_err(bad)?.json(),
        ("v1", "ServiceAccount") => core::ServiceAccount::decode(raw).map_err(bad)?.json(),
        ("networking.k8s.io/v1", "Ingress") => k8s_pb::api::networking::v1::Ingress::decode(raw)
            .map_err(bad)?
            .json(),
        ("policy/v1", "PodDisruptionBudget") => {
            k8s_pb::api::policy::v1::PodDisruptionBudget::decode(raw)
                .map_err(bad)?
                .json()
        }
        _ => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the simulator decodes protobuf bodies of Namespace, Pod, ConfigMap, Secret, Service, ServiceAccount, Deployment, StatefulSet, Ingress and PodDisruptionBudget only, not {api_version} {kind}; send application/json"
                ),
            ));
        }
    };
    let mut object = object.unwrap_or_else(|| json!({}));
    drop_zero_values(&mut object, false);
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

/// Keys whose values are maps of user data, where an empty string is a value.
const MAPS: [&str; 9] = [
    "labels",
    "annotations",
    "data",
    "stringData",
    "binaryData",
    "nodeSelector",
    "matchLabels",
    "limits",
    "requests",
];

/// Integer fields Go leaves out of JSON when 0 (`omitempty`, not pointers).
const OMITTED_ZEROS: [&str; 9] = [
    "generation",
    "nodePort",
    "healthCheckNodePort",
    "hostPort",
    "initialDelaySeconds",
    "timeoutSeconds",
    "periodSeconds",
    "successThreshold",
    "failureThreshold",
];

/// Boolean fields Go leaves out of JSON when false.
const OMITTED_FALSE: [&str; 5] = ["stdin", "stdinOnce", "tty", "hostNetwork", "readOnly"];

/// Leaves out what Go writes into protobuf for fields it has no value for
/// and leaves out of JSON (`omitempty`): empty strings, a zero
/// `creationTimestamp` (1970), the zeros and falses above. A Service's `selector` is a
/// map (`in_map`), a workload's a LabelSelector.
fn drop_zero_values(value: &mut Value, in_map: bool) {
    match value {
        Value::Object(map) if !in_map => {
            map.retain(|key, v| match (key.as_str(), &*v) {
                (_, Value::String(s)) if s.is_empty() => false,
                ("creationTimestamp", Value::String(s)) => s != "1970-01-01T00:00:00Z",
                (key, Value::Number(n)) if OMITTED_ZEROS.contains(&key) => n.as_i64() != Some(0),
                (key, Value::Bool(b)) if OMITTED_FALSE.contains(&key) => *b,
                _ => true,
            });
            for (key, v) in map.iter_mut() {
                let map_like = MAPS.contains(&key.as_str())
                    || (key == "selector"
                        && v.get("matchLabels").is_none()
                        && v.get("matchExpressions").is_none());
                drop_zero_values(v, map_like);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| drop_zero_values(v, false)),
        _ => {}
    }
}

/// A protobuf value in its JSON form; None when absent (or an empty list or map),
/// so that absent fields stay absent as they would in JSON.
trait Json {
    fn json(&self) -> Option<Value>;
}

/// A JSON object of the given fields, leaving out the absent ones.
macro_rules! object {
    ($($key:literal: $value:expr),* $(,)?) => {{
        let mut map = Map::new();
        $(
            if let Some(v) = Json::json(&$value) {
                map.insert($key.to_string(), v);
            }
        )*
        Some(Value::Object(map))
    }};
}

mod services;

impl<T: Json> Json for Option<T> {
    fn json(&self) -> Option<Value> {
        self.as_ref().and_then(Json::json)
    }
}

impl<T: Json> Json for Vec<T> {
    fn json(&self) -> Option<Value> {
        (!self.is_empty()).then(|| {
            Value::Array(
                self.iter()
                    .map(|v| v.json().unwrap_or_else(|| json!({})))
                    .collect(),
            )
        })
    }
}

impl<T: Json> Json for BTreeMap<String, T> {
    fn json(&self) -> Option<Value> {
        (!self.is_empty()).then(|| {
            Value::Object(
                self.iter()
                    .map(|(k, v)| (k.clone(), v.json().unwrap_or(Value::Null)))
                    .collect(),
            )
        })
    }
}

impl Json for String {
    fn json(&self) -> Option<Value> {
        Some(json!(self))
    }
}

impl Json for bool {
    fn json(&self) -> Option<Value> {
        Some(json!(self))
    }
}

impl Json for i32 {
    fn json(&self) -> Option<Value> {
        Some(json!(self))
    }
}

impl Json for i64 {
    fn json(&self) -> Option<Value> {
        Some(json!(self))
    }
}

/// `bytes` fields (ConfigMap `binaryData`) are base64 strings in JSON.
impl Json for Vec<u8> {
    fn json(&self) -> Option<Value> {
        Some(json!(
            base64::engine::general_purpose::STANDARD.encode(self)
        ))
    }
}

impl Json for Quantity {
    fn json(&self) -> Option<Value> {
        self.string.json()
    }
}

/// `type` 0 is an integer, 1 a string.
impl Json for IntOrString {
    fn json(&self) -> Option<Value> {
        match self.r#type {
            Some(1) => self.str_val.json(),
            _ => self.int_val.json(),
        }
    }
}

impl Json for meta::Time {
    fn json(&self) -> Option<Value> {
        let at = chrono::DateTime::from_timestamp(self.seconds.unwrap_or(0), 0)?;
        Some(json!(super::object::timestamp(at)))
    }
}

impl Json for meta::ObjectMeta {
    fn json(&self) -> Option<Value> {
        object! {
            "name": self.name,
            "generateName": self.generate_name,
            "namespace": self.namespace,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
            "generation": self.generation,
            "creationTimestamp": self.creation_timestamp,
            "labels": self.labels,
            "annotations": self.annotations,
            "ownerReferences": self.owner_references,
            "finalizers": self.finalizers,
        }
    }
}

impl Json for meta::OwnerReference {
    fn json(&self) -> Option<Value> {
        object! {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": self.controller,
            "blockOwnerDeletion": self.block_owner_deletion,
        }
    }
}

impl Json for meta::LabelSelector {
    fn json(&self) -> Option<Value> {
        object! {"matchLabels": self.match_labels, "matchExpressions": self.match_expressions}
    }
}

impl Json for meta::LabelSelectorRequirement {
    fn json(&self) -> Option<Value> {
        object! {"key": self.key, "operator": self.operator, "values": self.values}
    }
}

impl Json for core::Namespace {
    fn json(&self) -> Option<Value> {
        object! {"metadata": self.metadata, "spec": self.spec}
    }
}

impl Json for core::NamespaceSpec {
    fn json(&self) -> Option<Value> {
        object! {"finalizers": self.finalizers}
    }
}

impl Json for core::ConfigMap {
    fn json(&self) -> Option<Value> {
        object! {
            "metadata": self.metadata,
            "immutable": self.immutable,
            "data": self.data,
            "binaryData": self.binary_data,
        }
    }
}

impl Json for core::Pod {
    fn json(&self) -> Option<Value> {
        object! {"metadata": self.metadata, "spec": self.spec}
    }
}

impl Json for core::PodTemplateSpec {
    fn json(&self) -> Option<Value> {
        object! {"metadata": self.metadata, "spec": self.spec}
    }
}

impl Json for core::PodSpec {
    fn json(&self) -> Option<Value> {
        object! {
            "volumes": self.volumes,
            "initContainers": self.init_containers,
            "containers": self.containers,
            "restartPolicy": self.restart_policy,
            "terminationGracePeriodSeconds": self.termination_grace_period_seconds,
            "activeDeadlineSeconds": self.active_deadline_seconds,
            "dnsPolicy": self.dns_policy,
            "nodeSelector": self.node_selector,
            "serviceAccountName": self.service_account_name,
            "serviceAccount": self.service_account,
            "automountServiceAccountToken": self.automount_service_account_token,
            "nodeName": self.node_name,
            "hostNetwork": self.host_network,
            "imagePullSecrets": self.image_pull_secrets,
            "hostname": self.hostname,
            "subdomain": self.subdomain,
            "schedulerName": self.scheduler_name,
            "priorityClassName": self.priority_class_name,
            "priority": self.priority,
            "enableServiceLinks": self.enable_service_links,
        }
    }
}

impl Json for core::Container {
    fn json(&self) -> Option<Value> {
        object! {
            "name": self.name,
            "image": self.image,
            "command": self.command,
            "args": self.args,
            "workingDir": self.working_dir,
            "ports": self.ports,
            "envFrom": self.env_from,
            "env": self.env,
            "resources": self.resources,
            "volumeMounts": self.volume_mounts,
            "livenessProbe": self.liveness_probe,
            "readinessProbe": self.readiness_probe,
            "startupProbe": self.startup_probe,
            "terminationMessagePath": self.termination_message_path,
            "terminationMessagePolicy": self.termination_message_policy,
            "imagePullPolicy": self.image_pull_policy,
            "stdin": self.stdin,
            "stdinOnce": self.stdin_once,
            "tty": self.tty,
        }
    }
}

impl Json for core::ContainerPort {
    fn json(&self) -> Option<Value> {
        object! {
            "name": self.name,
            "hostPort": self.host_port,
            "containerPort": self.container_port,
            "protocol": self.protocol,
            "hostIP": self.host_ip,
        }
    }
}

impl Json for core::EnvVar {
    fn json(&self) -> Option<Value> {
        object! {"name": self.name, "value": self.value, "valueFrom": self.value_from}
    }
}

impl Json for core::EnvVarSource {
    fn json(&self) -> Option<Value> {
        object! {
            "fieldRef": self.field_ref,
            "configMapKeyRef": self.config_map_key_ref,
            "secretKeyRef": self.secret_key_ref,
        }
    }
}

impl Json for core::ObjectFieldSelector {
    fn json(&self) -> Option<Value> {
        object! {"apiVersion": self.api_version, "fieldPath": self.field_path}
    }
}

impl Json for core::ConfigMapKeySelector {
    fn json(&self) -> Option<Value> {
        let name = self.local_object_reference.as_ref().map(|r| &r.name);
        object! {"name": name.cloned().flatten(), "key": self.key, "optional": self.optional}
    }
}

impl Json for core::SecretKeySelector {
    fn json(&self) -> Option<Value> {
        let name = self.local_object_reference.as_ref().map(|r| &r.name);
        object! {"name": name.cloned().flatten(), "key": self.key, "optional": self.optional}
    }
}

impl Json for core::EnvFromSource {
    fn json(&self) -> Option<Value> {
        let reference = |r: Option<&core::LocalObjectReference>, optional: Option<bool>| {
            object! {"name": r.and_then(|r| r.name.clone()), "optional": optional}
        };
        let config_map = self
            .config_map_ref
            .as_ref()
            .and_then(|s| reference(s.local_object_reference.as_ref(), s.optional));
        let secret = self
            .secret_ref
            .as_ref()
            .and_then(|s| reference(s.local_object_reference.as_ref(), s.optional));
        object! {"prefix": self.prefix, "configMapRef": config_map, "secretRef": secret}
    }
}

impl Json for Value {
    fn json(&self) -> Option<Value> {
        Some(self.clone())
    }
}

impl Json for core::LocalObjectReference {
    fn json(&self) -> Option<Value> {
        object! {"name": self.name}
    }
}

impl Json for core::ResourceRequirements {
    fn json(&self) -> Option<Value> {
        object! {"limits": self.limits, "requests": self.requests}
    }
}

impl Json for core::VolumeMount {
    fn json(&self) -> Option<Value> {
        object! {
            "name": self.name,
            "readOnly": self.read_only,
            "mountPath": self.mount_path,
            "subPath": self.sub_path,
        }
    }
}

/// The volume source is inlined into the volume in JSON.
impl Json for core::Volume {
    fn json(&self) -> Option<Value> {
        let source = self.volume_source.as_ref();
        let config_map = source.and_then(|s| s.config_map.as_ref()).and_then(|c| {
            let name = c.local_object_reference.as_ref().and_then(|r| r.name.clone());
            object! {"name": name, "items": c.items, "defaultMode": c.default_mode, "optional": c.optional}
        });
        let secret = source.and_then(|s| s.secret.as_ref()).and_then(|s| {
            object! {"secretName": s.secret_name, "items": s.items, "defaultMode": s.default_mode, "optional": s.optional}
        });
        let empty_dir = source.and_then(|s| s.empty_dir.as_ref()).and_then(|e| {
            object! {"medium": e.medium, "sizeLimit": e.size_limit}
        });
        let claim = source
            .and_then(|s| s.persistent_volume_claim.as_ref())
            .and_then(|c| object! {"claimName": c.claim_name, "readOnly": c.read_only});
        object! {
            "name": self.name,
            "configMap": config_map,
            "secret": secret,
            "emptyDir": empty_dir,
            "persistentVolumeClaim": claim,
        }
    }
}

impl Json for core::KeyToPath {
    fn json(&self) -> Option<Value> {
        object! {"key": self.key, "path": self.path, "mode": self.mode}
    }
}

/// The probe handler is inlined into the probe in JSON.
impl Json for core::Probe {
    fn json(&self) -> Option<Value> {
        let handler = self.handler.as_ref();
        let exec = handler
            .and_then(|h| h.exec.as_ref())
            .and_then(|e| object! {"command": e.command});
        let http_get = handler.and_then(|h| h.http_get.as_ref()).and_then(|g| {
            object! {"path": g.path, "port": g.port, "host": g.host, "scheme": g.scheme}
        });
        let tcp_socket = handler
            .and_then(|h| h.tcp_socket.as_ref())
            .and_then(|t| object! {"port": t.port, "host": t.host});
        object! {
            "exec": exec,
            "httpGet": http_get,
            "tcpSocket": tcp_socket,
            "initialDelaySeconds": self.initial_delay_seconds,
            "timeoutSeconds": self.timeout_seconds,
            "periodSeconds": self.period_seconds,
            "successThreshold": self.success_threshold,
            "failureThreshold": self.failure_threshold,
        }
    }
}

impl Json for apps::Deployment {
    fn json(&self) -> Option<Value> {
        object! {"metadata": self.metadata, "spec": self.spec}
    }
}

impl Json for apps::DeploymentSpec {
    fn json(&self) -> Option<Value> {
        object! {
            "replicas": self.replicas,
            "selector": self.selector,
            "template": self.template,
            "strategy": self.strategy,
            "minReadySeconds": self.min_ready_seconds,
            "revisionHistoryLimit": self.revision_history_limit,
            "paused": self.paused,
            "progressDeadlineSeconds": self.progress_deadline_seconds,
        }
    }
}

impl Json for apps::DeploymentStrategy {
    fn json(&self) -> Option<Value> {
        let rolling = self
            .rolling_update
            .as_ref()
            .and_then(|r| object! {"maxUnavailable": r.max_unavailable, "maxSurge": r.max_surge});
        object! {"type": self.r#type, "rollingUpdate": rolling}
    }
}

impl Json for apps::StatefulSet {
    fn json(&self) -> Option<Value> {
        object! {"metadata": self.metadata, "spec": self.spec}
    }
}

impl Json for apps::StatefulSetSpec {
    fn json(&self) -> Option<Value> {
        let strategy = self.update_strategy.as_ref().and_then(|s| {
            let rolling = s.rolling_update.as_ref().and_then(
                |r| object! {"partition": r.partition, "maxUnavailable": r.max_unavailable},
            );
            object! {"type": s.r#type, "rollingUpdate": rolling}
        });
        object! {
            "replicas": self.replicas,
            "selector": self.selector,
            "template": self.template,
            "serviceName": self.service_name,
            "podManagementPolicy": self.pod_management_policy,
            "updateStrategy": strategy,
            "revisionHistoryLimit": self.revision_history_limit,
            "minReadySeconds": self.min_ready_seconds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodes a typed message as a Kubernetes protobuf body (what a Go client sends).
    fn encode(api_version: &str, kind: &str, message: &impl Message) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(message.encode_to_vec()),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut body = MAGIC.to_vec();
        body.extend(unknown.encode_to_vec());
        body
    }

    fn meta(name: &str) -> Option<meta::ObjectMeta> {
        Some(meta::ObjectMeta {
            name: Some(name.into()),
            labels: [("app".to_string(), name.to_string())].into(),
            ..Default::default()
        })
    }

    #[test]
    fn a_deployment_decodes_to_its_json_form() {
        let container = core::Container {
            name: Some("web".into()),
            image: Some("registry.example/web:1".into()),
            resources: Some(core::ResourceRequirements {
                limits: [(
                    "cpu".to_string(),
                    Quantity {
                        string: Some("500m".into()),
                    },
                )]
                .into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let deployment = apps::Deployment {
            metadata: meta("web"),
            spec: Some(apps::DeploymentSpec {
                replicas: Some(2),
                selector: Some(meta::LabelSelector {
                    match_labels: [("app".to_string(), "web".to_string())].into(),
                    ..Default::default()
                }),
                template: Some(core::PodTemplateSpec {
                    metadata: meta("web"),
                    spec: Some(core::PodSpec {
                        containers: vec![container],
                        ..Default::default()
                    }),
                }),
                strategy: Some(apps::DeploymentStrategy {
                    r#type: Some("RollingUpdate".into()),
                    rolling_update: Some(apps::RollingUpdateDeployment {
                        max_surge: Some(IntOrString {
                            r#type: Some(1),
                            int_val: None,
                            str_val: Some("25%".into()),
                        }),
                        max_unavailable: Some(IntOrString {
                            r#type: Some(0),
                            int_val: Some(1),
                            str_val: None,
                        }),
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        };
        let object = decode(&encode("apps/v1", "Deployment", &deployment)).unwrap();
        assert_eq!(
            object,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"app": "web"}},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"name": "web", "labels": {"app": "web"}},
                        "spec": {"containers": [{
                            "name": "web",
                            "image": "registry.example/web:1",
                            "resources": {"limits": {"cpu": "500m"}},
                        }]},
                    },
                    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                },
            })
        );
    }

    #[test]
    fn gos_zero_values_are_left_out() {
        let cases = [
            (
                json!({"metadata": {"name": "", "uid": "", "generation": 0, "creationTimestamp": "1970-01-01T00:00:00Z",
                    "labels": {"empty": ""}}}),
                json!({"metadata": {"labels": {"empty": ""}}}),
            ),
            (
                json!({"spec": {"strategy": {"type": ""}, "replicas": 0, "selector": {"matchLabels": {"a": ""}}}}),
                json!({"spec": {"strategy": {}, "replicas": 0, "selector": {"matchLabels": {"a": ""}}}}),
            ),
            (
                json!({"spec": {"selector": {"app": ""}, "ports": [{"port": 80, "nodePort": 0, "name": ""}]}}),
                json!({"spec": {"selector": {"app": ""}, "ports": [{"port": 80}]}}),
            ),
            (
                json!({"containers": [{"tty": false, "stdin": true, "args": [""], "imagePullPolicy": ""}]}),
                json!({"containers": [{"stdin": true, "args": [""]}]}),
            ),
        ];
        for (mut object, want) in cases {
            drop_zero_values(&mut object, false);
            assert_eq!(object, want);
        }
    }

    #[test]
    fn a_configmap_keeps_data_and_binary_data() {
        let config_map = core::ConfigMap {
            metadata: meta("settings"),
            immutable: None,
            data: [("color".to_string(), "blue".to_string())].into(),
            binary_data: [("raw".to_string(), vec![0u8, 1, 2])].into(),
        };
        let object = decode(&encode("v1", "ConfigMap", &config_map)).unwrap();
        assert_eq!(object["data"], json!({"color": "blue"}));
        assert_eq!(object["binaryData"], json!({"raw": "AAEC"}));
    }

    #[test]
    fn bad_bodies_are_400_and_unknown_kinds_415() {
        let namespace = core::Namespace {
            metadata: meta("team"),
            ..Default::default()
        };
        let good = encode("v1", "Namespace", &namespace);
        let cases: Vec<(Vec<u8>, u16)> = vec![
            (Vec::new(), 400),
            (b"{\"kind\": \"Namespace\"}".to_vec(), 400),
            (good[4..].to_vec(), 400),
            ([MAGIC, &[0xff, 0xff, 0xff]].concat(), 400),
            (good[..good.len() - 3].to_vec(), 400),
            (encode("", "", &namespace), 400),
            // A ConfigMap envelope around bytes that are no ConfigMap.
            (
                [
                    MAGIC,
                    &Unknown {
                        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                            api_version: Some("v1".into()),
                            kind: Some("ConfigMap".into()),
                        }),
                        raw: Some(vec![0x0a, 0x05, 0x01]),
                        ..Default::default()
                    }
                    .encode_to_vec(),
                ]
                .concat(),
                400,
            ),
            (encode("v1", "Endpoints", &namespace), 415),
        ];
        for (body, code) in cases {
            assert_eq!(decode(&body).unwrap_err().code, code, "{body:?}");
        }
        assert_eq!(decode(&good).unwrap()["metadata"]["name"], "team");
    }
}
