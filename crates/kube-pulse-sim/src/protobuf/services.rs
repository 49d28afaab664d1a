//! The protobuf messages of the kinds kubectl's other typed generators
//! send (`create secret generic`, `create service clusterip`, `create
//! serviceaccount`, `create ingress`, `create poddisruptionbudget`):
//! Secret, Service, ServiceAccount, Ingress and PodDisruptionBudget, in
//! their JSON form (metadata and spec; not status).

use k8s_pb::api::core::v1 as core;
use k8s_pb::api::networking::v1 as networking;
use k8s_pb::api::policy::v1 as policy;
use serde_json::{Map, Value};

use super::Json;

impl Json for core::Secret {
    fn json(&self) -> Option<Value> {
        object! {
            "metadata": self.metadata,
            "immutable": self.immutable,
            "data": self.data,
            "stringData": self.string_data,
            "type": self.r#type,
        }
    }
}

impl Json for core::ObjectReference {
    fn json(&self) -> Option<Value> {
        object! {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "apiVersion": self.api_version,
            "resourceVersion": self.resource_version,
            "fieldPath": self.field_path,
        }
    }
}

impl Json for core::ServiceAccount {
    fn json(&self) -> Option<Value> {
        object! {
            "metadata": self.metadata,
            "secrets": self.secrets,
            "imagePullSecrets": self.image_pull_secrets,
            "automountServiceAccountToken": self.automount_service_account_token,
        }
    }
}

impl Json for core::Service {
    fn json(&self) -> Option<Value> {
        object! {"metadata": self.metadata, "spec": self.spec}
    }
}

impl Json for core::ServiceSpec {
    fn json(&self) -> Option<Value> {
        let affinity = self
            .session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| object! {"timeoutSeconds": c.timeout_seconds});
        let affinity = affinity.and_then(|c| object! {"clientIP": Some(c)});
        object! {
            "ports": self.ports,
            "selector": self.selector,
            "clusterIP": self.cluster_ip,
            "clusterIPs": self.cluster_ips,
            "type": self.r#type,
            "externalIPs": self.external_ips,
            "sessionAffinity": self.session_affinity,
            "loadBalancerIP": self.load_balancer_ip,
            "loadBalancerSourceRanges": self.load_balancer_source_ranges,
            "externalName": self.external_name,
            "externalTrafficPolicy": self.external_traffic_policy,
            "healthCheckNodePort": self.health_check_node_port,
            "publishNotReadyAddresses": self.publish_not_ready_addresses,
            "sessionAffinityConfig": affinity,
            "ipFamilies": self.ip_families,
            "ipFamilyPolicy": self.ip_family_policy,
            "allocateLoadBalancerNodePorts": self.allocate_load_balancer_node_ports,
            "loadBalancerClass": self.load_balancer_class,
            "internalTrafficPolicy": self.internal_traffic_policy,
            "trafficDistribution": self.traffic_distribution,
        }
    }
}

impl Json for core::ServicePort {
    fn json(&self) -> Option<Value> {
        object! {
            "name": self.name,
            "protocol": self.protocol,
            "appProtocol": self.app_protocol,
            "port": self.port,
            "targetPort": self.target_port,
            "nodePort": self.node_port,
        }
    }
}

impl Json for networking::Ingress {
    fn json(&self) -> Option<Value> {
        object! {"metadata": self.metadata, "spec": self.spec}
    }
}

impl Json for networking::IngressSpec {
    fn json(&self) -> Option<Value> {
        object! {
            "ingressClassName": self.ingress_class_name,
            "defaultBackend": self.default_backend,
            "tls": self.tls,
            "rules": self.rules,
        }
    }
}

impl Json for networking::IngressTls {
    fn json(&self) -> Option<Value> {
        object! {"hosts": self.hosts, "secretName": self.secret_name}
    }
}

/// The rule value (`http`) is inlined into the rule in JSON.
impl Json for networking::IngressRule {
    fn json(&self) -> Option<Value> {
        let http = self
            .ingress_rule_value
            .as_ref()
            .and_then(|v| v.http.as_ref());
        let http = http.and_then(|h| object! {"paths": h.paths});
        object! {"host": self.host, "http": http}
    }
}

impl Json for networking::HttpIngressPath {
    fn json(&self) -> Option<Value> {
        object! {"path": self.path, "pathType": self.path_type, "backend": self.backend}
    }
}

impl Json for networking::IngressBackend {
    fn json(&self) -> Option<Value> {
        let resource = self.resource.as_ref().and_then(|r| {
            object! {"apiGroup": r.api_group, "kind": r.kind, "name": r.name}
        });
        object! {"service": self.service, "resource": resource}
    }
}

impl Json for networking::IngressServiceBackend {
    fn json(&self) -> Option<Value> {
        let port = self
            .port
            .as_ref()
            .and_then(|p| object! {"name": p.name, "number": p.number});
        object! {"name": self.name, "port": port}
    }
}

impl Json for policy::PodDisruptionBudget {
    fn json(&self) -> Option<Value> {
        object! {"metadata": self.metadata, "spec": self.spec}
    }
}

impl Json for policy::PodDisruptionBudgetSpec {
    fn json(&self) -> Option<Value> {
        object! {
            "minAvailable": self.min_available,
            "selector": self.selector,
            "maxUnavailable": self.max_unavailable,
            "unhealthyPodEvictionPolicy": self.unhealthy_pod_eviction_policy,
        }
    }
}
