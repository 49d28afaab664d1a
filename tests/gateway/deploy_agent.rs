//! The member cluster's manifests of `kube-pulse agent` (deploy/agent/ and
//! its `tasks` component, docs/AGENT-DEPLOY.md): they render with
//! kustomize, validate against the Kubernetes schemas offline and apply to
//! the simulator with kubectl; the agent's command takes the member, the
//! hub's NATS and key from the ConfigMap's keys and its seed from the
//! Secret's, mounted where the flag reads it; its probes reach its port;
//! its account only reads, may hold its Lease, and with `tasks` may do
//! what the task executor does.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use pulse_testkit::kubectl::{kustomize, overlay};
use pulse_testkit::manifests::{self, find, kinds, named, selects, validate};
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const NAMESPACE: &str = "kube-pulse-agent";

fn base_dir() -> PathBuf {
    Path::new(ROOT).join("deploy/agent")
}

/// `kubectl apply -k deploy/agent/`.
fn render() -> (String, Vec<Value>) {
    kustomize(&base_dir())
}

/// deploy/agent/ with the `tasks` component, from an overlay outside it.
fn render_tasks() -> (String, Vec<Value>) {
    static OVERLAY: OnceLock<PathBuf> = OnceLock::new();
    kustomize(OVERLAY.get_or_init(|| {
        let at = Path::new(env!("CARGO_TARGET_TMPDIR")).join("agent-with-tasks");
        overlay(&at, &base_dir(), &["tasks"])
    }))
}

fn pod(docs: &[Value]) -> &Value {
    &find(docs, "Deployment")["spec"]["template"]["spec"]
}

/// Every (apiGroup, resource, verb) a ClusterRole's resource rules grant.
fn grants(role: &Value) -> BTreeSet<(String, String, String)> {
    let strings = |rule: &Value, key: &str| -> Vec<String> {
        rule[key]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in strings(rule, "apiGroups") {
            for resource in strings(rule, "resources") {
                for verb in strings(rule, "verbs") {
                    out.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out
}

fn triples(groups: &[(&str, &[&str], &[&str])]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for (group, resources, verbs) in groups {
        for resource in *resources {
            for verb in *verbs {
                out.insert((group.to_string(), resource.to_string(), verb.to_string()));
            }
        }
    }
    out
}

#[test]
fn the_agent_manifests_validate_against_the_kubernetes_schemas() {
    let (text, docs) = render();
    assert_eq!(
        kinds(&docs),
        [
            "Namespace",
            "ServiceAccount",
            "Role",
            "ClusterRole",
            "RoleBinding",
            "ClusterRoleBinding",
            "ConfigMap",
            "Secret",
            "Deployment"
        ]
    );
    validate("agent", &text);
    let (text, with_tasks) = render_tasks();
    assert_eq!(with_tasks.len(), docs.len() + 2);
    validate("agent-tasks", &text);
    for doc in &with_tasks {
        let kind = doc["kind"].as_str().unwrap();
        if !["Namespace", "ClusterRole", "ClusterRoleBinding"].contains(&kind) {
            assert_eq!(doc["metadata"]["namespace"], NAMESPACE, "{doc}");
        }
        assert_eq!(
            doc["metadata"]["labels"]["app.kubernetes.io/part-of"], "kube-pulse",
            "{doc}"
        );
    }
    assert_eq!(find(&docs, "Namespace")["metadata"]["name"], NAMESPACE);
}

/// `kube-pulse agent --member $(MEMBER) --nats $(NATS_URL)
/// --nats-nkey-seed FILE --hub-key $(HUB_KEY)`: each `$(NAME)` is a
/// variable of the container taken from a key the ConfigMap has, the seed
/// file is the Secret's key mounted read-only, readable by the pod's group.
#[test]
fn the_agent_takes_its_settings_from_the_configmap_and_its_seed_from_the_secret() {
    let (_, docs) = render();
    let pod = pod(&docs);
    let container = &pod["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "agent",
            "--member",
            "$(MEMBER)",
            "--nats",
            "$(NATS_URL)",
            "--nats-nkey-seed",
            "/etc/kube-pulse-agent/seed",
            "--hub-key",
            "$(HUB_KEY)"
        ]
    );
    let env = container["env"].as_array().unwrap();
    let variable = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {env:?}"))
    };
    let config_map = named(&docs, "ConfigMap", "kube-pulse-agent");
    for (arg, key) in [
        ("$(MEMBER)", "member"),
        ("$(NATS_URL)", "nats-url"),
        ("$(HUB_KEY)", "hub-key"),
    ] {
        let name = arg.trim_start_matches("$(").trim_end_matches(')');
        let from = &variable(name)["valueFrom"]["configMapKeyRef"];
        assert_eq!(from["name"], config_map["metadata"]["name"], "{name}");
        assert_eq!(from["key"], key, "{name}");
        // A placeholder to replace, never a real value.
        let value = config_map["data"][key].as_str().unwrap();
        assert!(value.contains("REPLACE"), "{key}: {value}");
    }
    assert_eq!(
        variable("POD_NAMESPACE")["valueFrom"],
        json!({"fieldRef": {"fieldPath": "metadata.namespace"}})
    );
    // The Lease's holder: the pod's name (a restarted container takes it back).
    assert_eq!(
        variable("POD_NAME")["valueFrom"],
        json!({"fieldRef": {"fieldPath": "metadata.name"}})
    );
    // The seed: the Secret's key, where --nats-nkey-seed reads it.
    let seed_file =
        Path::new(args[args.iter().position(|a| *a == "--nats-nkey-seed").unwrap() + 1]);
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| Path::new(m["mountPath"].as_str().unwrap()) == seed_file.parent().unwrap())
        .expect("the seed's directory is mounted");
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    let secret = named(&docs, "Secret", "kube-pulse-agent");
    assert_eq!(volume["secret"]["secretName"], secret["metadata"]["name"]);
    let item = &volume["secret"]["items"][0];
    assert_eq!(item["key"], "seed");
    assert_eq!(
        Path::new(mount["mountPath"].as_str().unwrap()).join(item["path"].as_str().unwrap()),
        seed_file
    );
    let seed = secret["stringData"]["seed"].as_str().unwrap();
    assert!(seed.contains("REPLACE"), "{seed}");
    let mode = volume["secret"]["defaultMode"].as_u64().unwrap();
    assert_eq!(mode, 0o440, "{mode:o}");
    assert!(pod["securityContext"]["fsGroup"].is_u64());
}

/// The probes reach the container's port; the pod is hardened as the
/// gateway's (deploy/deployment.yaml); one replica, the ServiceAccount's
/// token mounted (the agent watches its own cluster through it).
#[test]
fn the_agent_pod_is_probed_on_its_port_and_hardened_as_the_gateways() {
    let (_, docs) = render();
    let deployment = find(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert!(selects(
        &deployment["spec"]["selector"]["matchLabels"],
        labels
    ));
    let pod = pod(&docs);
    let container = &pod["containers"][0];
    let ports = container["ports"].as_array().unwrap();
    for (probe, path) in [("livenessProbe", "/livez"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        let port = ports
            .iter()
            .find(|p| p["name"] == get["port"] || p["containerPort"] == get["port"])
            .unwrap_or_else(|| panic!("{probe} names no port of the container"));
        // --listen's default.
        assert_eq!(port["containerPort"], 8080, "{probe}");
    }
    let (_, gateway) = kustomize(&Path::new(ROOT).join("deploy"));
    let gateway_pod = &find(&gateway, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"], gateway_pod["securityContext"]);
    let gateway_container = &gateway_pod["containers"][0];
    for key in ["securityContext", "resources", "image"] {
        assert_eq!(container[key], gateway_container[key], "{key}");
    }
    let account = pod["serviceAccountName"].as_str().unwrap();
    let sa = find(&docs, "ServiceAccount");
    assert_eq!(sa["metadata"]["name"], account);
    assert_ne!(sa["automountServiceAccountToken"], false);
    assert_ne!(pod["automountServiceAccountToken"], false);
}

/// The account reads what the sources watch and the probe's paths, and
/// nothing more; it may hold its Lease in its own namespace.
#[test]
fn the_agent_only_reads_and_holds_its_lease() {
    let (_, docs) = render();
    let account = pod(&docs)["serviceAccountName"]
        .as_str()
        .unwrap()
        .to_string();
    let subject = json!([{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]);
    let role = find(&docs, "ClusterRole");
    let read: &[&str] = &["get", "list", "watch"];
    assert_eq!(
        grants(role),
        triples(&[
            ("", &["namespaces", "nodes", "pods", "events"], read),
            ("apps", &["deployments", "statefulsets"], read),
            // The custom workloads of the built-in health rules.
            ("apps.kusionstack.io", &["collasets"], read),
            ("apps.kruise.io", &["clonesets"], read),
            ("argoproj.io", &["rollouts"], read),
        ])
    );
    let non_resource: Vec<&Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["nonResourceURLs"].is_array())
        .collect();
    assert_eq!(
        non_resource,
        [&json!({"nonResourceURLs": ["/readyz", "/version"], "verbs": ["get"]})]
    );
    let binding = find(&docs, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"], subject);
    // The Lease, in the pod's namespace (--lease-namespace's default).
    let lease_role = find(&docs, "Role");
    assert_eq!(lease_role["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        lease_role["rules"],
        json!([{
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "create", "update"],
        }])
    );
    let lease_binding = find(&docs, "RoleBinding");
    assert_eq!(lease_binding["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        lease_binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": lease_role["metadata"]["name"]})
    );
    assert_eq!(lease_binding["subjects"], subject);
}

/// The `tasks` component adds exactly the task executor's writes, for the
/// agent's account, and changes nothing else.
#[test]
fn the_tasks_component_grants_what_tasks_do() {
    let (_, base) = render();
    let (_, docs) = render_tasks();
    let role = named(&docs, "ClusterRole", "kube-pulse-agent-tasks");
    assert_eq!(
        grants(role),
        triples(&[
            (
                "apps",
                &["deployments", "statefulsets"],
                &["get", "patch", "delete"]
            ),
            ("apps", &["deployments"], &["create"]),
            ("", &["namespaces"], &["create", "delete"]),
            // Custom workloads: replicas through /scale where the CRD
            // declares it, else a patch; images by patch.
            ("apps.kusionstack.io", &["collasets"], &["patch", "delete"]),
            ("apps.kruise.io", &["clonesets"], &["patch", "delete"]),
            ("apps.kruise.io", &["clonesets/scale"], &["get", "patch"]),
            ("argoproj.io", &["rollouts"], &["patch", "delete"]),
            ("argoproj.io", &["rollouts/scale"], &["get", "patch"]),
        ])
    );
    let binding = named(&docs, "ClusterRoleBinding", "kube-pulse-agent-tasks");
    assert_eq!(binding["roleRef"]["name"], "kube-pulse-agent-tasks");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": pod(&docs)["serviceAccountName"], "namespace": NAMESPACE}])
    );
    for doc in &base {
        let name = doc["metadata"]["name"].as_str().unwrap();
        assert_eq!(
            named(&docs, doc["kind"].as_str().unwrap(), name),
            doc,
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_agent_manifests_to_the_simulator() {
    let also = "configmaps,secrets,roles,rolebindings,serviceaccounts";
    let expected = [
        "configmap/kube-pulse-agent",
        "role.rbac.authorization.k8s.io/kube-pulse-agent-leases",
        "rolebinding.rbac.authorization.k8s.io/kube-pulse-agent-leases",
        "secret/kube-pulse-agent",
        "serviceaccount/kube-pulse-agent",
    ];
    for (name, (text, _)) in [("agent", render()), ("agent-tasks", render_tasks())] {
        let applied = manifests::apply(
            &format!("apply-{name}"),
            &text,
            NAMESPACE,
            "kube-pulse-agent",
            also,
        )
        .await;
        assert_eq!(applied.replicas, "1", "{name}");
        let mut listed: Vec<&str> = applied.listed.lines().collect();
        listed.sort_unstable();
        assert_eq!(listed, expected, "{name}: {}", applied.output);
        let tasks = applied
            .output
            .contains("clusterrole.rbac.authorization.k8s.io/kube-pulse-agent-tasks created");
        assert_eq!(tasks, name == "agent-tasks", "{}", applied.output);
    }
}
