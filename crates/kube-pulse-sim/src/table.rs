//! `meta.k8s.io/v1 Table` output, which `kubectl get` asks for
//! (`Accept: application/json;as=Table;…`): the same columns the apiserver
//! prints for the built-in kinds, NAME and AGE for everything else.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::resources::ResourceDef;
use super::status::{ApiError, ApiResult};

/// Age the way kubectl prints it (`45s`, `3m12s`, `2d4h`, …).
pub fn human_age(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    match s {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 && s % 60 != 0 => format!("{m}m{}s", s % 60),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 && m % 60 != 0 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if d < 8 && h % 24 != 0 => format!("{d}d{}h", h % 24),
        _ if d < 730 => format!("{d}d"),
        _ => format!("{}y", d / 365),
    }
}

fn column(name: &str, kind: &str, priority: u8) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": kind, "format": format, "description": "", "priority": priority})
}

fn columns(def: &ResourceDef) -> Vec<Value> {
    if def.typed.is_some() {
        // The generic registry's default table.
        return vec![column("Name", "string", 0), column("Created At", "date", 0)];
    }
    if def.kind == "Event" {
        return vec![
            column("Last Seen", "string", 0),
            column("Type", "string", 0),
            column("Reason", "string", 0),
            column("Object", "string", 0),
            column("Message", "string", 0),
            column("Count", "integer", 1),
            column("Name", "string", 1),
        ];
    }
    let mut cols = vec![column("Name", "string", 0)];
    match def.kind.as_str() {
        "Pod" => cols.extend([
            column("Ready", "string", 0),
            column("Status", "string", 0),
            column("Restarts", "string", 0),
        ]),
        "Deployment" => cols.extend([
            column("Ready", "string", 0),
            column("Up-to-date", "integer", 0),
            column("Available", "integer", 0),
        ]),
        "StatefulSet" => cols.push(column("Ready", "string", 0)),
        "Namespace" => cols.push(column("Status", "string", 0)),
        "Node" => cols.extend([column("Status", "string", 0), column("Roles", "string", 0)]),
        "ReplicaSet" => cols.extend([
            column("Desired", "integer", 0),
            column("Current", "integer", 0),
            column("Ready", "integer", 0),
        ]),
        "Secret" => cols.extend([column("Type", "string", 0), column("Data", "string", 0)]),
        "ConfigMap" => cols.push(column("Data", "integer", 0)),
        "Service" => cols.extend([
            column("Type", "string", 0),
            column("Cluster-IP", "string", 0),
            column("External-IP", "string", 0),
            column("Port(s)", "string", 0),
        ]),
        _ => {}
    }
    cols.push(column("Age", "string", 0));
    if def.kind == "Node" {
        cols.push(column("Version", "string", 0));
    }
    if matches!(def.kind.as_str(), "Deployment" | "StatefulSet") {
        cols.extend([
            column("Containers", "string", 1),
            column("Images", "string", 1),
        ]);
    }
    if def.kind == "Pod" {
        cols.extend([column("IP", "string", 1), column("Node", "string", 1)]);
    }
    if def.kind == "Service" {
        cols.push(column("Selector", "string", 1));
    }
    cols
}

/// A pod's READY, STATUS and RESTARTS cells, as kubectl's printer writes them.
fn pod_cells(obj: &Value) -> [Value; 3] {
    let statuses = obj
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let total = obj
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = statuses.iter().filter(|c| c["ready"] == true).count();
    let restarts: i64 = statuses
        .iter()
        .filter_map(|c| c["restartCount"].as_i64())
        .sum();
    let waiting = statuses
        .iter()
        .find_map(|c| c.pointer("/state/waiting/reason").and_then(Value::as_str));
    let status = waiting
        .or_else(|| obj.pointer("/status/phase").and_then(Value::as_str))
        .unwrap_or("Pending");
    [
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts.to_string()),
    ]
}

/// A service's TYPE, CLUSTER-IP, EXTERNAL-IP and PORT(S) cells, as the
/// apiserver's printer writes them.
fn service_cells(obj: &Value) -> [Value; 4] {
    let spec = &obj["spec"];
    let kind = spec["type"].as_str().unwrap_or("ClusterIP");
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut external = strings(&spec["externalIPs"]);
    let ingress: Vec<String> = obj
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|i| i["ip"].as_str().or(i["hostname"].as_str()))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let external = match kind {
        "ExternalName" => spec["externalName"].as_str().unwrap_or("").to_string(),
        "LoadBalancer" if ingress.is_empty() && external.is_empty() => "<pending>".into(),
        "LoadBalancer" => {
            external.extend(ingress);
            external.join(",")
        }
        _ if external.is_empty() => "<none>".into(),
        _ => external.join(","),
    };
    let ports: Vec<String> = spec["ports"]
        .as_array()
        .map(|ports| {
            ports
                .iter()
                .map(|p| {
                    let protocol = p["protocol"].as_str().unwrap_or("TCP");
                    match p["nodePort"].as_i64() {
                        Some(node) => format!("{}:{node}/{protocol}", p["port"]),
                        None => format!("{}/{protocol}", p["port"]),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let ports = if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    };
    let cluster_ip = spec["clusterIP"].as_str().filter(|ip| !ip.is_empty());
    [
        json!(kind),
        json!(cluster_ip.unwrap_or("<none>")),
        json!(external),
        json!(ports),
    ]
}

/// A service's SELECTOR cell (`-o wide`).
fn selector_cell(obj: &Value) -> String {
    let pairs: Vec<String> = obj
        .pointer("/spec/selector")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// A node's STATUS cell: Ready or NotReady, as its Ready condition says.
fn node_status(obj: &Value) -> &'static str {
    let ready = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .is_some_and(|c| c["status"] == "True");
    if ready { "Ready" } else { "NotReady" }
}

/// An event's row: last seen, type, reason, kind/name, message, count, name.
fn event_cells(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let last = obj["lastTimestamp"]
        .as_str()
        .and_then(|t| t.parse::<DateTime<Utc>>().ok())
        .map(|t| human_age((now - t).num_seconds()))
        .unwrap_or_else(|| "<unknown>".into());
    let involved = &obj["involvedObject"];
    vec![
        json!(last),
        obj["type"].clone(),
        obj["reason"].clone(),
        json!(format!(
            "{}/{}",
            involved["kind"].as_str().unwrap_or("").to_lowercase(),
            involved["name"].as_str().unwrap_or("")
        )),
        obj["message"].clone(),
        obj["count"].clone(),
        obj.pointer("/metadata/name").cloned().unwrap_or(json!("")),
    ]
}

fn int(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn cells(def: &ResourceDef, obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    if def.kind == "Event" {
        return event_cells(obj, now);
    }
    let name = obj.pointer("/metadata/name").cloned().unwrap_or(json!(""));
    if def.typed.is_some() {
        let created = obj.pointer("/metadata/creationTimestamp").cloned();
        return vec![name, created.unwrap_or(json!("<unknown>"))];
    }
    let created = obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<DateTime<Utc>>().ok())
        .map(|t| human_age((now - t).num_seconds()))
        .unwrap_or_else(|| "<unknown>".into());
    let containers = |field: &str| {
        obj.pointer("/spec/template/spec/containers")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c[field].as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    };
    let ready = format!(
        "{}/{}",
        int(obj, "/status/readyReplicas"),
        obj.pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
    );
    let mut row = vec![name];
    match def.kind.as_str() {
        "Pod" => row.extend(pod_cells(obj)),
        "Deployment" => row.extend([
            json!(ready),
            json!(int(obj, "/status/updatedReplicas")),
            json!(int(obj, "/status/availableReplicas")),
        ]),
        "StatefulSet" => row.push(json!(ready)),
        "Namespace" => row.push(
            obj.pointer("/status/phase")
                .cloned()
                .unwrap_or(json!("Active")),
        ),
        "Node" => row.extend([json!(node_status(obj)), json!("<none>")]),
        "ReplicaSet" => row.extend([
            json!(int(obj, "/spec/replicas")),
            json!(int(obj, "/status/replicas")),
            json!(int(obj, "/status/readyReplicas")),
        ]),
        "Secret" => {
            let data = obj["data"].as_object().map_or(0, |m| m.len());
            row.extend([
                obj.get("type").cloned().unwrap_or(json!("Opaque")),
                json!(data),
            ]);
        }
        "ConfigMap" => {
            let data = obj["data"].as_object().map_or(0, |m| m.len())
                + obj["binaryData"].as_object().map_or(0, |m| m.len());
            row.push(json!(data));
        }
        "Service" => row.extend(service_cells(obj)),
        _ => {}
    }
    row.push(json!(created));
    if def.kind == "Node" {
        row.push(
            obj.pointer("/status/nodeInfo/kubeletVersion")
                .cloned()
                .unwrap_or(json!("")),
        );
    }
    if matches!(def.kind.as_str(), "Deployment" | "StatefulSet") {
        row.extend([json!(containers("name")), json!(containers("image"))]);
    }
    if def.kind == "Service" {
        row.push(json!(selector_cell(obj)));
    }
    if def.kind == "Pod" {
        row.extend([
            obj.pointer("/status/podIP")
                .cloned()
                .unwrap_or(json!("<none>")),
            obj.pointer("/spec/nodeName")
                .cloned()
                .unwrap_or(json!("<none>")),
        ]);
    }
    row
}

/// What each row carries of its object: the `includeObject` parameter of a
/// table request (kubectl's default is `Metadata`; `--sort-by` and custom
/// columns ask for `Object`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No `object` in the rows.
    None,
    /// `PartialObjectMetadata` (kubectl reads namespace and name from it).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// The parameter's value; an unknown one is 400, as the apiserver's
    /// validation of `TableOptions` answers.
    pub fn parse(value: Option<&str>) -> ApiResult<Self> {
        match value {
            None | Some("" | "Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(ApiError::bad_request(format!(
                "TableOptions.meta.k8s.io \"\" is invalid: includeObject: Unsupported value: {other:?}: \
                 supported values: \"None\", \"Metadata\", \"Object\""
            ))),
        }
    }
}

/// One row: its cells and, as asked, its object.
fn row(def: &ResourceDef, obj: &Value, now: DateTime<Utc>, include: IncludeObject) -> Value {
    let mut row = json!({"cells": cells(def, obj, now)});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => row["object"] = super::media::partial(obj),
        IncludeObject::Object => row["object"] = obj.clone(),
    }
    row
}

/// A Table of `items`; `list_meta` is the list's metadata (resourceVersion,
/// continue), `include` what each row carries of its object.
pub fn table(
    def: &ResourceDef,
    items: &[&Value],
    list_meta: Value,
    now: DateTime<Utc>,
    include: IncludeObject,
) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| row(def, obj, now, include))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": columns(def),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 + 120, "3h2m"),
            (30 * 3600, "30h"),
            (3 * 86_400 + 7200, "3d2h"),
            (40 * 86_400, "40d"),
            (800 * 86_400, "2y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_age(secs), want, "{secs}");
        }
    }

    #[test]
    fn member_and_karpor_rows_read_like_kubectl() {
        let catalog = Catalog::new(crate::karpor_api::resources(Default::default()));
        let now: DateTime<Utc> = "2026-01-01T00:10:00Z".parse().unwrap();
        let created = "2026-01-01T00:09:00Z";
        let node = json!({"metadata": {"name": "sim-node-1", "creationTimestamp": created},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.32.0"}}});
        let not_ready = json!({"metadata": {"name": "n", "creationTimestamp": created},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
        let rs = json!({"metadata": {"name": "web-abc", "creationTimestamp": created},
            "spec": {"replicas": 3}, "status": {"replicas": 3, "readyReplicas": 2}});
        let secret = json!({"metadata": {"name": "s", "creationTimestamp": created},
            "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}});
        let cluster = json!({"metadata": {"name": "prod", "creationTimestamp": created}});
        let svc = json!({"metadata": {"name": "web", "creationTimestamp": created},
            "spec": {"type": "NodePort", "clusterIP": "10.96.3.4", "selector": {"app": "web"},
                     "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 53, "protocol": "UDP"}]}});
        let lb = json!({"metadata": {"name": "lb", "creationTimestamp": created},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.3.5", "ports": []}});
        let cases = [
            (
                ("", "v1", "nodes"),
                node,
                json!(["sim-node-1", "Ready", "<none>", "60s", "v1.32.0"]),
            ),
            (
                ("", "v1", "nodes"),
                not_ready,
                json!(["n", "NotReady", "<none>", "60s", ""]),
            ),
            (
                ("apps", "v1", "replicasets"),
                rs,
                json!(["web-abc", 3, 3, 2, "60s"]),
            ),
            (
                ("", "v1", "secrets"),
                secret,
                json!(["s", "kubernetes.io/tls", 2, "60s"]),
            ),
            (
                ("", "v1", "services"),
                svc,
                json!([
                    "web",
                    "NodePort",
                    "10.96.3.4",
                    "<none>",
                    "80:30080/TCP,53/UDP",
                    "60s",
                    "app=web"
                ]),
            ),
            (
                ("", "v1", "services"),
                lb,
                json!([
                    "lb",
                    "LoadBalancer",
                    "10.96.3.5",
                    "<pending>",
                    "<none>",
                    "60s",
                    "<none>"
                ]),
            ),
            (
                ("cluster.karpor.io", "v1beta1", "clusters"),
                cluster,
                json!(["prod", created]),
            ),
        ];
        for ((group, version, plural), obj, want) in cases {
            let def = catalog.find(group, version, plural).unwrap();
            assert_eq!(json!(cells(def, &obj, now)), want, "{plural}");
            assert_eq!(columns(def).len(), cells(def, &obj, now).len(), "{plural}");
        }
    }

    #[test]
    fn pod_and_event_rows_read_like_kubectl() {
        let catalog = Catalog::new(vec![]);
        let now: DateTime<Utc> = "2026-01-01T00:10:00Z".parse().unwrap();
        let pods = catalog.find("", "v1", "pods").unwrap();
        let pod = json!({
            "metadata": {"name": "web-1", "creationTimestamp": "2026-01-01T00:09:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "sim-node-1"},
            "status": {"phase": "Running", "podIP": "10.244.0.2", "containerStatuses": [
                {"ready": true, "restartCount": 0, "state": {"running": {}}},
                {"ready": false, "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
        });
        assert_eq!(
            cells(pods, &pod, now),
            [
                json!("web-1"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!("4"),
                json!("60s"),
                json!("10.244.0.2"),
                json!("sim-node-1")
            ]
        );
        assert_eq!(columns(pods).len(), cells(pods, &pod, now).len());
        let events = catalog.find("", "v1", "events").unwrap();
        let event = json!({
            "metadata": {"name": "web.1"}, "lastTimestamp": "2026-01-01T00:09:30Z", "type": "Warning",
            "reason": "BackOff", "involvedObject": {"kind": "Pod", "name": "web-1"}, "message": "m", "count": 3
        });
        assert_eq!(
            cells(events, &event, now),
            [
                json!("30s"),
                json!("Warning"),
                json!("BackOff"),
                json!("pod/web-1"),
                json!("m"),
                json!(3),
                json!("web.1")
            ]
        );
        assert_eq!(columns(events).len(), 7);
    }

    #[test]
    fn deployment_rows() {
        let catalog = Catalog::new(vec![]);
        let def = catalog.find("apps", "v1", "deployments").unwrap();
        let now: DateTime<Utc> = "2026-01-01T00:10:00Z".parse().unwrap();
        let obj = json!({
            "metadata": {"name": "web", "namespace": "shop", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}
        });
        let t = table(
            def,
            &[&obj],
            json!({"resourceVersion": "5"}),
            now,
            IncludeObject::default(),
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["web", "2/3", 3, 2, "10m", "web", "nginx:1"])
        );
        assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), 7);
        assert_eq!(t["rows"][0]["object"]["metadata"]["namespace"], "shop");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        let whole = table(def, &[&obj], json!({}), now, IncludeObject::Object);
        assert_eq!(whole["rows"][0]["object"], obj);
        let bare = table(def, &[&obj], json!({}), now, IncludeObject::None);
        assert!(bare["rows"][0].get("object").is_none());
        let cases = [
            (None, Ok(IncludeObject::Metadata)),
            (Some("None"), Ok(IncludeObject::None)),
            (Some("Object"), Ok(IncludeObject::Object)),
            (Some("Everything"), Err(400)),
        ];
        for (value, want) in cases {
            assert_eq!(
                IncludeObject::parse(value).map_err(|e| e.code),
                want,
                "{value:?}"
            );
        }
    }
}
