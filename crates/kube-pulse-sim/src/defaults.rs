//! The defaults the apiserver (its defaulting functions, its strategies'
//! `PrepareForCreate`, and admission such as `ServiceAccount` and
//! `DefaultTolerationSeconds`) fills into a built-in object on create and
//! update: workload specs, a pod's spec, containers and first status (with
//! its QoS class), a Service's type, ports and allocated cluster IP, a
//! Secret's `stringData`. Pure functions over JSON, called by `object.rs`
//! for every write through the API.

use std::hash::{Hash, Hasher};

use base64::Engine;
use serde_json::{Map, Value, json};

use super::resources::ResourceDef;

/// `spec` of an object, created empty when missing (or not an object).
fn spec_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let spec = obj
        .as_object_mut()
        .expect("checked to be an object")
        .entry("spec")
        .or_insert_with(|| json!({}));
    if !spec.is_object() {
        *spec = json!({});
    }
    spec.as_object_mut().expect("made an object")
}

/// Fills the defaults of a built-in kind into `obj`; `current` is the stored
/// object of an update (None on create), whose allocated values an update
/// that omits them keeps.
pub fn apply(def: &ResourceDef, obj: &mut Value, current: Option<&Value>) {
    if def.typed.is_some() {
        return;
    }
    // A pod template's `creationTimestamp: null` (Go clients write it) is
    // no value: decoded into Go's struct and written again, it is gone.
    if let Some(meta) = obj
        .pointer_mut("/spec/template/metadata")
        .and_then(Value::as_object_mut)
        && meta.get("creationTimestamp").is_some_and(Value::is_null)
    {
        meta.remove("creationTimestamp");
    }
    match (def.group.as_str(), def.kind.as_str()) {
        ("apps", "Deployment") => {
            let spec = spec_mut(obj);
            spec.entry("replicas").or_insert(json!(1));
            spec.entry("progressDeadlineSeconds").or_insert(json!(600));
            spec.entry("revisionHistoryLimit").or_insert(json!(10));
            deployment_strategy(spec);
        }
        ("apps", "StatefulSet") => {
            let spec = spec_mut(obj);
            spec.entry("replicas").or_insert(json!(1));
            spec.entry("podManagementPolicy")
                .or_insert(json!("OrderedReady"));
            spec.entry("updateStrategy").or_insert(json!({
                "type": "RollingUpdate",
                "rollingUpdate": {"partition": 0}
            }));
        }
        ("", "Namespace") => {
            // Also under an empty `spec: {}`, which Go clients send.
            spec_mut(obj)
                .entry("finalizers")
                .or_insert_with(|| json!(["kubernetes"]));
        }
        ("", "Pod") => {
            pod_spec(spec_mut(obj));
            if current.is_none() {
                // The pod strategy's PrepareForCreate.
                obj["status"] = json!({"phase": "Pending", "qosClass": qos_class(obj)});
            }
        }
        ("", "Service") => service(obj, current),
        ("", "Secret") => secret(obj),
        _ => {}
    }
}

/// A Deployment's strategy: `RollingUpdate` unless set, whose surge and
/// unavailability default to 25% each.
fn deployment_strategy(spec: &mut Map<String, Value>) {
    let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
    let Some(strategy) = strategy.as_object_mut() else {
        return;
    };
    let kind = strategy.entry("type").or_insert(json!("RollingUpdate"));
    if kind != "RollingUpdate" {
        return;
    }
    let rolling = strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
    if let Some(rolling) = rolling.as_object_mut() {
        rolling.entry("maxSurge").or_insert(json!("25%"));
        rolling.entry("maxUnavailable").or_insert(json!("25%"));
    }
}

/// A pod's spec as defaulting and admission leave it.
fn pod_spec(spec: &mut Map<String, Value>) {
    for (key, value) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
        ("preemptionPolicy", json!("PreemptLowerPriority")),
        ("priority", json!(0)),
    ] {
        spec.entry(key).or_insert(value);
    }
    let account = spec
        .get("serviceAccountName")
        .or_else(|| spec.get("serviceAccount"))
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), json!(account));
    spec.insert("serviceAccount".into(), json!(account));
    spec.entry("tolerations").or_insert_with(|| {
        json!(["not-ready", "unreachable"].map(|t| json!({
            "key": format!("node.kubernetes.io/{t}"), "operator": "Exists",
            "effect": "NoExecute", "tolerationSeconds": 300
        })))
    });
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            containers
                .iter_mut()
                .filter_map(Value::as_object_mut)
                .for_each(container);
        }
    }
}

/// A container's defaults: pull policy from the image's tag, termination
/// message, ports' protocol, and requests copied from limits.
fn container(c: &mut Map<String, Value>) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    let policy = pull_policy(image);
    c.entry("imagePullPolicy").or_insert(json!(policy));
    c.entry("terminationMessagePath")
        .or_insert(json!("/dev/termination-log"));
    c.entry("terminationMessagePolicy").or_insert(json!("File"));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.entry("protocol").or_insert(json!("TCP"));
        }
    }
    let resources = c.entry("resources").or_insert_with(|| json!({}));
    if let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() {
        let requests = resources
            .as_object_mut()
            .map(|r| r.entry("requests").or_insert_with(|| json!({})));
        if let Some(requests) = requests.and_then(Value::as_object_mut) {
            for (name, value) in limits {
                requests.entry(name).or_insert(value);
            }
        }
    }
}

/// `Always` for an image without a tag or tagged `latest`, else
/// `IfNotPresent` (a digest counts as a tag).
pub fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// A quantity (`100m`, `1.5`, `128Mi`, `1e3`) as a number, for comparisons.
fn quantity(value: &Value) -> f64 {
    let text = match value {
        Value::String(s) => s.trim(),
        Value::Number(n) => return n.as_f64().unwrap_or(0.0),
        _ => return 0.0,
    };
    const SUFFIXES: [(&str, f64); 14] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    for (suffix, factor) in SUFFIXES {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().unwrap_or(0.0) * factor;
        }
    }
    if let Some(number) = text.strip_suffix('E') {
        return number.parse::<f64>().unwrap_or(0.0) * 1e18;
    }
    text.parse().unwrap_or(0.0)
}

/// The pod's QoS class, as the kubelet's `GetPodQOS` computes it over its
/// (init) containers' cpu and memory requests and limits.
pub fn qos_class(pod: &Value) -> &'static str {
    let mut requests: Map<String, Value> = Map::new();
    let mut limits: Map<String, Value> = Map::new();
    let mut guaranteed = true;
    let add = |sum: &mut Map<String, Value>, name: &str, q: f64| {
        let total = sum.get(name).and_then(Value::as_f64).unwrap_or(0.0) + q;
        sum.insert(name.to_string(), json!(total));
    };
    let containers = ["containers", "initContainers"].into_iter().flat_map(|l| {
        pod.pointer(&format!("/spec/{l}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    });
    for c in containers {
        let positive = |kind: &str| -> Vec<(String, f64)> {
            c.pointer(&format!("/resources/{kind}"))
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter(|(n, _)| matches!(n.as_str(), "cpu" | "memory"))
                        .map(|(n, v)| (n.clone(), quantity(v)))
                        .filter(|(_, q)| *q > 0.0)
                        .collect()
                })
                .unwrap_or_default()
        };
        for (name, q) in positive("requests") {
            add(&mut requests, &name, q);
        }
        let found = positive("limits");
        for (name, q) in &found {
            add(&mut limits, name, *q);
        }
        if found.len() < 2 {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    guaranteed &= requests.iter().all(|(n, q)| limits.get(n) == Some(q));
    if guaranteed && requests.len() == limits.len() {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// A cluster IP in the service range `10.96.0.0/16` (`.0.1` is the
/// `kubernetes` service's), from the object's uid.
fn cluster_ip(obj: &Value) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .hash(&mut hasher);
    let n = hasher.finish() % (256 * 254);
    let (third, fourth) = (n / 254, n % 254 + 1);
    let fourth = if (third, fourth) == (0, 1) { 2 } else { fourth };
    format!("10.96.{third}.{fourth}")
}

/// A Service's type, affinity, IP family, ports and addresses; an update
/// keeps the cluster IP and node ports it was given.
fn service(obj: &mut Value, current: Option<&Value>) {
    let ip = cluster_ip(obj);
    let old = |key: &str| current.and_then(|c| c.pointer(&format!("/spec/{key}")).cloned());
    let spec = spec_mut(obj);
    let kind = spec
        .entry("type")
        .or_insert(json!("ClusterIP"))
        .as_str()
        .unwrap_or("ClusterIP")
        .to_string();
    spec.entry("sessionAffinity").or_insert(json!("None"));
    if kind == "ExternalName" {
        return;
    }
    for key in ["clusterIP", "clusterIPs"] {
        if !spec.contains_key(key)
            && let Some(value) = old(key)
        {
            spec.insert(key.into(), value);
        }
    }
    let ip = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .map_or(ip, str::to_string);
    spec.insert("clusterIP".into(), json!(ip));
    spec.entry("clusterIPs").or_insert(json!([ip]));
    spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
    spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
    spec.entry("internalTrafficPolicy")
        .or_insert(json!("Cluster"));
    let node_ports = matches!(kind.as_str(), "NodePort" | "LoadBalancer");
    if node_ports {
        spec.entry("externalTrafficPolicy")
            .or_insert(json!("Cluster"));
    }
    let old_ports = old("ports").unwrap_or(json!([]));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for (i, port) in ports.iter_mut().enumerate() {
            let Some(port) = port.as_object_mut() else {
                continue;
            };
            port.entry("protocol").or_insert(json!("TCP"));
            if let Some(number) = port.get("port").cloned() {
                port.entry("targetPort").or_insert(number);
            }
            if node_ports && !port.contains_key("nodePort") {
                let kept = old_ports[i].get("nodePort").cloned();
                let number = port["port"].as_u64().unwrap_or(0);
                let allocated = 30000 + (number * 7 + i as u64 * 131 + ip.len() as u64) % 2768;
                port.insert("nodePort".into(), kept.unwrap_or(json!(allocated)));
            }
        }
    }
    let root = obj.as_object_mut().expect("checked to be an object");
    if current.is_none() {
        root.insert("status".into(), json!({"loadBalancer": {}}));
    }
}

/// `stringData` merged into `data` (base64), as the conversion of a v1
/// Secret does, and `type: Opaque` by default.
fn secret(obj: &mut Value) {
    let root = obj.as_object_mut().expect("checked to be an object");
    root.entry("type").or_insert(json!("Opaque"));
    let Some(strings) = root.remove("stringData") else {
        return;
    };
    let Some(strings) = strings.as_object() else {
        return;
    };
    let data = root.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    let data = data.as_object_mut().expect("made an object");
    for (key, value) in strings {
        let text = value.as_str().unwrap_or_default();
        let encoded = base64::engine::general_purpose::STANDARD.encode(text);
        data.insert(key.clone(), json!(encoded));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;

    fn defaulted(plural: &str, mut obj: Value) -> Value {
        let catalog = Catalog::new(vec![]);
        let group = if plural == "deployments" { "apps" } else { "" };
        let def = catalog.find(group, "v1", plural).unwrap();
        apply(def, &mut obj, None);
        obj
    }

    #[test]
    fn qos_classes() {
        let pod = |resources: Vec<Value>| {
            let containers: Vec<Value> = resources
                .into_iter()
                .map(|r| json!({"name": "c", "resources": r}))
                .collect();
            json!({"spec": {"containers": containers}})
        };
        let both = json!({"cpu": "500m", "memory": "128Mi"});
        let cases = [
            (pod(vec![json!({})]), "BestEffort"),
            (pod(vec![json!({"requests": {"cpu": "0"}})]), "BestEffort"),
            (pod(vec![json!({"limits": both})]), "Guaranteed"),
            (
                pod(vec![
                    json!({"limits": both, "requests": {"cpu": "0.5", "memory": "128Mi"}}),
                ]),
                "Guaranteed",
            ),
            (
                pod(vec![json!({"limits": both, "requests": {"cpu": "100m"}})]),
                "Burstable",
            ),
            (
                pod(vec![json!({"requests": {"memory": "1Gi"}})]),
                "Burstable",
            ),
            (pod(vec![json!({"limits": {"cpu": "1"}})]), "Burstable"),
            (pod(vec![json!({"limits": both}), json!({})]), "Burstable"),
        ];
        for (pod, want) in cases {
            // Requests default to limits before the class is computed.
            let pod = defaulted("pods", pod);
            assert_eq!(pod["status"]["qosClass"], want, "{pod}");
        }
    }

    #[test]
    fn a_templates_null_creation_timestamp_is_dropped() {
        let deployment = defaulted(
            "deployments",
            json!({"spec": {"template": {"metadata": {"creationTimestamp": null, "labels": {"a": "b"}}}}}),
        );
        assert_eq!(
            deployment["spec"]["template"]["metadata"],
            json!({"labels": {"a": "b"}})
        );
    }

    #[test]
    fn pull_policies() {
        let cases = [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("registry:5000/app", "Always"),
            ("registry:5000/app:2", "IfNotPresent"),
            ("app@sha256:abc", "IfNotPresent"),
        ];
        for (image, want) in cases {
            assert_eq!(pull_policy(image), want, "{image}");
        }
    }

    #[test]
    fn pods_services_and_secrets_get_the_apiservers_defaults() {
        let pod = defaulted(
            "pods",
            json!({"metadata": {"uid": "u"}, "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]}}),
        );
        for (pointer, want) in [
            ("/spec/restartPolicy", json!("Always")),
            ("/spec/dnsPolicy", json!("ClusterFirst")),
            ("/spec/schedulerName", json!("default-scheduler")),
            ("/spec/terminationGracePeriodSeconds", json!(30)),
            ("/spec/serviceAccountName", json!("default")),
            ("/spec/containers/0/imagePullPolicy", json!("Always")),
            (
                "/spec/containers/0/terminationMessagePath",
                json!("/dev/termination-log"),
            ),
            ("/spec/containers/0/terminationMessagePolicy", json!("File")),
            ("/spec/containers/0/ports/0/protocol", json!("TCP")),
            ("/status/phase", json!("Pending")),
            ("/status/qosClass", json!("BestEffort")),
        ] {
            assert_eq!(pod.pointer(pointer), Some(&want), "{pointer}");
        }

        let svc = defaulted(
            "services",
            json!({"metadata": {"uid": "u"}, "spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": 5353}]}}),
        );
        let ip = svc["spec"]["clusterIP"].as_str().unwrap();
        assert!(ip.starts_with("10.96.") && ip != "10.96.0.1", "{ip}");
        assert_eq!(svc["spec"]["clusterIPs"], json!([ip]));
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(svc["spec"]["sessionAffinity"], "None");
        assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP", "targetPort": 80},
                   {"port": 53, "protocol": "UDP", "targetPort": 5353}])
        );
        let headless = defaulted(
            "services",
            json!({"spec": {"clusterIP": "None", "ports": [{"port": 80}]}}),
        );
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));

        // An update without the allocated address keeps it.
        let catalog = Catalog::new(vec![]);
        let def = catalog.find("", "v1", "services").unwrap();
        let mut update = json!({"metadata": {"uid": "u"}, "spec": {"ports": [{"port": 80}]}});
        apply(def, &mut update, Some(&svc));
        assert_eq!(update["spec"]["clusterIP"], ip);

        let secret = defaulted(
            "secrets",
            json!({"data": {"a": "eA=="}, "stringData": {"b": "hello"}}),
        );
        assert_eq!(
            secret,
            json!({"type": "Opaque", "data": {"a": "eA==", "b": "aGVsbG8="}})
        );
    }
}
