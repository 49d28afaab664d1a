//! The deployment manifests: they render with kustomize, validate against
//! the Kubernetes schemas offline, carry the seed's probes, embed a config
//! the gateway accepts, and apply to the simulator with kubectl — the base
//! alone, with the `replicas` component (several replicas sharing the
//! members through Leases), and with `replicas` and `nats` (the NATS server
//! of the stream of changes, whose nats.conf the real nats-server accepts,
//! locked to the gateway's user, and its NetworkPolicy).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use pulse_testkit::http::{get_json, http};
use pulse_testkit::kubectl::kustomize;
use pulse_testkit::manifests::nats_conf_with_agents;
use pulse_testkit::manifests::{
    self, embedded_config, find, kinds, named, rendered_file, selects, serve_args, service_hosts,
    validate,
};
use pulse_testkit::nats::{check_config, free_port, nats_server_or_skip};
use pulse_testkit::poll::eventually;
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The base, `kubectl apply -k deploy/`.
fn render() -> (String, Vec<Value>) {
    kustomize(&Path::new(ROOT).join("deploy"))
}

/// An overlay outside deploy/ with the base and `components` (kustomize
/// refuses an overlay inside the base's directory), as
/// deploy/replicas/kustomization.yaml shows.
fn overlay(name: &str, components: &[&str]) -> PathBuf {
    let at = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    pulse_testkit::kubectl::overlay(&at, &Path::new(ROOT).join("deploy"), components)
}

/// The base with the `replicas` component. Written once: tests run in
/// parallel.
fn render_replicas() -> (String, Vec<Value>) {
    static OVERLAY: OnceLock<PathBuf> = OnceLock::new();
    kustomize(OVERLAY.get_or_init(|| overlay("with-replicas", &["replicas"])))
}

/// The base with the `replicas` and `nats` components, in that order
/// (deploy/nats/kustomization.yaml).
fn render_nats() -> (String, Vec<Value>) {
    static OVERLAY: OnceLock<PathBuf> = OnceLock::new();
    kustomize(OVERLAY.get_or_init(|| overlay("with-replicas-and-nats", &["replicas", "nats"])))
}

/// Applies `text` to a fresh simulator; returns the Deployment's replica
/// count as the simulator stores it, and what `kubectl get` then lists of
/// `also` in the namespace.
async fn apply(name: &str, text: &str, also: &str) -> (String, String) {
    let applied = manifests::apply(name, text, "kube-pulse", "kube-pulse", also).await;
    (applied.replicas, applied.listed)
}

#[test]
fn manifests_validate_against_the_kubernetes_schemas() {
    let (text, docs) = render();
    assert_eq!(
        kinds(&docs),
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Service",
            "Deployment"
        ]
    );
    validate("base", &text);
}

#[test]
fn probes_are_exactly_the_seeds() {
    let (_, docs) = render();
    let deployment = find(&docs, "Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["ports"][0],
        json!({"name": "http", "containerPort": 8080, "protocol": "TCP"})
    );
    let probe = |path: &str, success: u8| {
        json!({
            "failureThreshold": 3,
            "httpGet": {"path": path, "port": "http", "scheme": "HTTP"},
            "initialDelaySeconds": 10,
            "periodSeconds": 5,
            "successThreshold": success,
            "timeoutSeconds": 10,
        })
    };
    assert_eq!(container["livenessProbe"], probe("/livez", 1));
    assert_eq!(container["readinessProbe"], probe("/readyz", 2));
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() > 30);
    assert!(container["resources"]["limits"]["memory"].is_string());
}

#[test]
fn the_embedded_config_is_accepted() {
    let (_, docs) = render();
    let parsed = embedded_config("base", find(&docs, "ConfigMap"));
    assert_eq!(parsed.clusters[0].name, "host");
    assert_eq!(parsed.listen.unwrap().port(), 8080);
    // In-cluster callers reach it by the Service's names (docs/SECURITY.md).
    let service = find(&docs, "Service");
    let namespace = service["metadata"]["namespace"].as_str().unwrap();
    let name = service["metadata"]["name"].as_str().unwrap();
    for host in service_hosts(name, namespace) {
        assert!(
            kube_pulse::http::guard::host_allowed(&host, &parsed.allowed_hosts),
            "{host} is not in allowedHosts"
        );
    }
}

#[test]
fn the_deployment_runs_with_kubernetes_authentication() {
    let (_, docs) = render();
    let serve = serve_args(&docs);
    // One process per pod, every member, no Leases.
    assert!(!serve.lease_in_cluster && serve.lease_kubeconfig.is_none());
    let auth = serve.security.auth_settings();
    assert_eq!(auth.mode, kube_pulse::auth::ModeName::Kubernetes);
    // It listens on every address, which `none` would refuse.
    assert!(auth.check_listener(([0, 0, 0, 0], 8080).into()).is_ok());
    let none = kube_pulse::auth::AuthSettings::default();
    assert!(none.check_listener(([0, 0, 0, 0], 8080).into()).is_err());
    assert!(none.check_listener(([127, 0, 0, 1], 8080).into()).is_ok());
    // The service account may ask the reviews.
    let rules = find(&docs, "ClusterRole")["rules"].to_string();
    assert!(
        rules.contains("tokenreviews") && rules.contains("subjectaccessreviews"),
        "{rules}"
    );
    // The pod watch may list and watch pods and events.
    assert!(rules.contains(r#"["pods","events"]"#), "{rules}");
    // A Create task makes a namespace and a Deployment, nothing else: no
    // rule grants `create` on another workload (deploy/agent/tasks' too).
    for rule in find(&docs, "ClusterRole")["rules"].as_array().unwrap() {
        if rule["verbs"].as_array().unwrap().contains(&json!("create"))
            && rule["apiGroups"] == json!(["apps"])
        {
            assert_eq!(rule["resources"], json!(["deployments"]), "{rule}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_manifests_to_the_simulator() {
    let (text, _) = render();
    let (replicas, listed) = apply("apply-base", &text, "poddisruptionbudgets").await;
    assert_eq!(replicas, "2");
    assert_eq!(listed.trim(), "");
}

// ------------------------------------------------------------- replicas

#[test]
fn the_replicas_component_validates_against_the_kubernetes_schemas() {
    let (text, docs) = render_replicas();
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
            "Service",
            "Deployment",
            "PodDisruptionBudget"
        ]
    );
    validate("replicas", &text);
    // Everything namespaced is in the gateway's namespace, labelled as the base.
    for doc in &docs {
        if ["Namespace", "ClusterRole", "ClusterRoleBinding"]
            .contains(&doc["kind"].as_str().unwrap())
        {
            continue;
        }
        assert_eq!(doc["metadata"]["namespace"], "kube-pulse", "{doc}");
        assert_eq!(
            doc["metadata"]["labels"]["app.kubernetes.io/part-of"], "kube-pulse",
            "{doc}"
        );
    }
}

#[test]
fn the_replicas_share_the_members_through_leases_in_their_own_namespace() {
    let (_, base) = render();
    let (_, docs) = render_replicas();
    let deployment = find(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    // The probes, ports and everything else of the container stay the base's.
    let base_container = &find(&base, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    for key in [
        "livenessProbe",
        "readinessProbe",
        "ports",
        "securityContext",
        "resources",
        "image",
    ] {
        assert_eq!(container[key], base_container[key], "{key}");
    }
    // In-cluster Leases, authentication as the base; nothing else added.
    let serve = serve_args(&docs);
    assert!(serve.lease_in_cluster);
    assert!(serve.lease_kubeconfig.is_none() && serve.lease_namespace.is_none());
    assert_eq!(
        serve.security.auth_settings().mode,
        kube_pulse::auth::ModeName::Kubernetes
    );
    let base_args = base_container["args"].as_array().unwrap();
    let args = container["args"].as_array().unwrap();
    assert_eq!(&args[..base_args.len()], &base_args[..]);
    assert_eq!(&args[base_args.len()..], [json!("--lease-in-cluster")]);
    // The replica id is the pod's name (POD_NAME, the flag's env).
    let env = container["env"].as_array().unwrap();
    let pod_name = env
        .iter()
        .find(|e| e["name"] == "POD_NAME")
        .unwrap_or_else(|| panic!("no POD_NAME in {env:?}"));
    assert_eq!(
        pod_name["valueFrom"],
        json!({"fieldRef": {"fieldPath": "metadata.name"}})
    );
    assert!(env.iter().any(|e| e["name"] == "RUST_LOG"), "{env:?}");
    // In-cluster needs the service account's token mounted.
    let account = pod["serviceAccountName"].as_str().unwrap();
    let sa = find(&docs, "ServiceAccount");
    assert_eq!(sa["metadata"]["name"], account);
    assert_ne!(sa["automountServiceAccountToken"], false);
    assert_ne!(pod["automountServiceAccountToken"], false);
    // The Role lets that account do what src/scale/leases.rs does, in the
    // pods' namespace (the Leases' namespace in-cluster).
    let namespace = deployment["metadata"]["namespace"].as_str().unwrap();
    let role = find(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], namespace);
    assert_eq!(
        role["rules"],
        json!([{
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "create", "update"],
        }])
    );
    let binding = find(&docs, "RoleBinding");
    assert_eq!(binding["metadata"]["namespace"], namespace);
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": account, "namespace": namespace}])
    );
    // One pod at a time through voluntary disruptions, selecting these pods.
    let pdb = find(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (key, value) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&labels[key], value, "{key}");
    }
    // The embedded config is the base's: the members are shared, not split.
    assert_eq!(find(&docs, "ConfigMap"), find(&base, "ConfigMap"));
    // The replicas spread over nodes (a node that goes takes one
    // replica's members with it, not all), selecting these pods.
    let spread = pod["topologySpreadConstraints"].as_array().unwrap();
    assert_eq!(spread.len(), 1, "{spread:?}");
    assert_eq!(spread[0]["topologyKey"], "kubernetes.io/hostname");
    assert!(selects(&spread[0]["labelSelector"]["matchLabels"], labels));
    assert!(
        find(&base, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"]
            .is_null(),
        "the base's single-purpose pods are left to the scheduler"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_replicas_component_to_the_simulator() {
    let (text, _) = render_replicas();
    let (replicas, listed) = apply("apply-replicas", &text, "poddisruptionbudgets").await;
    assert_eq!(replicas, "3");
    assert_eq!(listed.trim(), "poddisruptionbudget.policy/kube-pulse");
}

// ----------------------------------------------------------------- nats

/// `key: value` settings of a nats.conf, in order; a list (`key: [`, one
/// value a line, `]`) as its values separated by commas.
type Settings = Vec<(String, String)>;

/// A value of a nats.conf: a string (quotes dropped), a list or a block.
#[derive(Debug, Clone)]
enum Conf {
    Str(String),
    List(Vec<Conf>),
    Block(Vec<(String, Conf)>),
}

impl Conf {
    /// The value of `key` in a block.
    fn get(&self, key: &str) -> &Conf {
        match self {
            Conf::Block(entries) => entries
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no {key} in {self:?}")),
            _ => panic!("{self:?} is not a block"),
        }
    }

    fn has(&self, key: &str) -> bool {
        matches!(self, Conf::Block(entries) if entries.iter().any(|(k, _)| k == key))
    }

    fn str(&self) -> &str {
        match self {
            Conf::Str(s) => s,
            _ => panic!("{self:?} is not a string"),
        }
    }

    fn list(&self) -> &[Conf] {
        match self {
            Conf::List(items) => items,
            _ => panic!("{self:?} is not a list"),
        }
    }

    fn entries(&self) -> &[(String, Conf)] {
        match self {
            Conf::Block(entries) => entries,
            _ => panic!("{self:?} is not a block"),
        }
    }
}

/// A nats.conf as deploy/nats/nats-config.yaml writes it: one setting a
/// line (`key: value`), blocks (`key {`, `key: {`, or `{` as a list's
/// item) closed by `}`, lists (`key: [`) of one item a line closed by `]`,
/// `#` comments.
fn nats_tree(text: &str) -> Conf {
    let unquote = |v: &str| v.trim().trim_matches('"').to_string();
    // Open blocks and lists, each with the key it goes under.
    let mut stack: Vec<(Option<String>, Conf)> = vec![(None, Conf::Block(Vec::new()))];
    for line in text.lines().map(|l| l.split('#').next().unwrap().trim()) {
        if line.is_empty() {
            continue;
        }
        if line == "}" || line == "]" {
            let (key, done) = stack.pop().expect("balanced");
            match (&mut stack.last_mut().expect("balanced in\n{text}").1, key) {
                (Conf::Block(entries), Some(key)) => entries.push((key, done)),
                (Conf::List(items), None) => items.push(done),
                (open, key) => panic!("{key:?} closed into {open:?}"),
            }
            continue;
        }
        let open = |head: &str| {
            let key = head.trim().trim_end_matches([':', '=']).trim();
            (!key.is_empty()).then(|| key.to_string())
        };
        if let Some(head) = line.strip_suffix('{') {
            stack.push((open(head), Conf::Block(Vec::new())));
            continue;
        }
        if let Some(head) = line.strip_suffix('[') {
            stack.push((open(head), Conf::List(Vec::new())));
            continue;
        }
        match &mut stack.last_mut().unwrap().1 {
            Conf::List(items) => items.push(Conf::Str(unquote(line))),
            Conf::Block(entries) => {
                let (key, value) = line
                    .split_once([':', '='])
                    .unwrap_or_else(|| panic!("{line}"));
                entries.push((key.trim().to_string(), Conf::Str(unquote(value))));
            }
            Conf::Str(_) => unreachable!(),
        }
    }
    assert_eq!(stack.len(), 1, "unbalanced in\n{text}");
    stack.pop().unwrap().1
}

/// The top-level settings of a nats.conf, and those of each of its
/// top-level blocks (`jetstream { … }`, `cluster { … }`), by name: strings,
/// and lists of strings as their items separated by commas.
fn nats_conf(text: &str) -> (Settings, BTreeMap<String, Settings>) {
    let flat = |entries: &[(String, Conf)]| -> Settings {
        entries
            .iter()
            .filter_map(|(k, v)| match v {
                Conf::Str(s) => Some((k.clone(), s.clone())),
                Conf::List(items) if items.iter().all(|i| matches!(i, Conf::Str(_))) => Some((
                    k.clone(),
                    items.iter().map(Conf::str).collect::<Vec<_>>().join(","),
                )),
                _ => None,
            })
            .collect()
    };
    let tree = nats_tree(text);
    let blocks = tree
        .entries()
        .iter()
        .filter(|(_, v)| matches!(v, Conf::Block(_)))
        .map(|(k, v)| (k.clone(), flat(v.entries())))
        .collect();
    (flat(tree.entries()), blocks)
}

fn setting<'a>(settings: &'a [(String, String)], key: &str) -> &'a str {
    settings
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {key} in {settings:?}"))
}

/// The nats.conf the component's StatefulSet reads.
fn nats_conf_text(docs: &[Value]) -> String {
    named(docs, "ConfigMap", "kube-pulse-nats")["data"]["nats.conf"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The container port named `name` of `container`.
fn container_port(container: &Value, name: &str) -> u64 {
    container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no port {name} in {container}"))["containerPort"]
        .as_u64()
        .unwrap()
}

#[test]
fn the_nats_component_validates_against_the_kubernetes_schemas() {
    let (text, docs) = render_nats();
    let mut kinds = kinds(&docs);
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "ConfigMap",
            "Deployment",
            "Namespace",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Secret",
            "Secret",
            "Service",
            "Service",
            "Service",
            "ServiceAccount",
            "StatefulSet"
        ]
    );
    validate("nats", &text);
    for doc in &docs {
        if ["Namespace", "ClusterRole", "ClusterRoleBinding"]
            .contains(&doc["kind"].as_str().unwrap())
        {
            continue;
        }
        assert_eq!(doc["metadata"]["namespace"], "kube-pulse", "{doc}");
        assert_eq!(
            doc["metadata"]["labels"]["app.kubernetes.io/part-of"], "kube-pulse",
            "{doc}"
        );
    }
}

#[test]
fn the_gateway_reaches_nats_through_its_service_and_keeps_its_leases() {
    let (_, replicas) = render_replicas();
    let (_, docs) = render_nats();
    // The replicas component's arguments, then --nats URL,
    // --nats-stream-replicas N, --nats-user NAME and --nats-password-file
    // PATH.
    let args = |docs: &[Value]| {
        find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .clone()
    };
    let (before, after) = (args(&replicas), args(&docs));
    assert_eq!(&after[..before.len()], &before[..]);
    assert_eq!(after[before.len()], "--nats");
    assert_eq!(after[before.len() + 2], "--nats-stream-replicas");
    assert_eq!(after[before.len() + 4], "--nats-user");
    assert_eq!(after[before.len() + 6], "--nats-password-file");
    assert_eq!(after[before.len() + 8], "--nats-signing-key-file");
    assert_eq!(after.len(), before.len() + 10, "{after:?}");
    // The signing key: the Secret's key, mounted where the flag points, in
    // the gateway's pods and not in the NATS servers'.
    let key_path = after[before.len() + 9].as_str().unwrap();
    assert_eq!(key_path, "/etc/kube-pulse/nats-signing/signing.key");
    let pod = &find(&docs, "Deployment")["spec"]["template"]["spec"];
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| Some(m["mountPath"].as_str().unwrap()) == key_path.rsplit_once('/').map(|p| p.0))
        .expect("the signing key is mounted");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(volume["secret"]["secretName"], "kube-pulse-nats-signing");
    assert_eq!(volume["secret"]["items"][0]["key"], "signing.key");
    let secret = named(&docs, "Secret", "kube-pulse-nats-signing");
    assert!(secret["stringData"]["signing.key"].is_string(), "{secret}");
    let nats_pod = named(&docs, "StatefulSet", "kube-pulse-nats").to_string();
    assert!(!nats_pod.contains("kube-pulse-nats-signing"), "{nats_pod}");
    // As the gateway reads them, with the embedded config's `nats:` (none)
    // and a password file and a key file here in place of the Secrets'.
    let mut serve = serve_args(&docs);
    let password = rendered_file("nats-password", "a-password\n");
    serve.nats_auth.nats_password_file = Some(password);
    let key = rendered_file("nats-signing-key", &"k".repeat(64));
    serve.nats_auth.nats_signing_key_file = Some(key);
    assert!(serve.lease_in_cluster, "--nats needs Lease ownership");
    let config = named(&docs, "ConfigMap", "kube-pulse")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    let path = rendered_file("nats-gateway-config", config);
    let file = kube_pulse::config::load_file(&path).unwrap();
    let settings = serve
        .nats_with_env(file.nats.as_ref(), &|_| None)
        .unwrap()
        .expect("--nats");
    assert_eq!(settings.stream, "KUBE_PULSE");
    assert_eq!(settings.auth.describe(), "user kube-pulse");
    assert!(settings.check_integrity().is_ok(), "{settings:?}");
    // As many copies as servers at most (JetStream places each on its own
    // server), and an odd count: an even one survives no more failures
    // than the odd count below it.
    let servers = named(&docs, "StatefulSet", "kube-pulse-nats")["spec"]["replicas"]
        .as_u64()
        .unwrap();
    let copies = settings.replicas as u64;
    assert!(copies <= servers, "{copies} copies on {servers} servers");
    assert_eq!(copies % 2, 1, "streamReplicas {copies} is even");
    assert_eq!(copies, 3, "the component keeps a copy on each of 3 servers");
    // nats://SERVICE[.NAMESPACE[.svc…]]:PORT of the client Service.
    let (host, port) = settings
        .url
        .strip_prefix("nats://")
        .and_then(|rest| rest.rsplit_once(':'))
        .unwrap_or_else(|| panic!("{}", settings.url));
    let port: u64 = port.parse().unwrap();
    let mut labels = host.split('.');
    let service = named(&docs, "Service", labels.next().unwrap());
    if let Some(namespace) = labels.next() {
        assert_eq!(service["metadata"]["namespace"], namespace);
    }
    assert_ne!(service["spec"]["clusterIP"], "None", "a headless Service");
    let service_port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == port)
        .unwrap_or_else(|| panic!("{service} has no port {port}"));
    // … which leads to the NATS pods' client port, the one nats.conf listens on.
    let statefulset = named(&docs, "StatefulSet", "kube-pulse-nats");
    let pod = &statefulset["spec"]["template"];
    assert!(
        selects(&service["spec"]["selector"], &pod["metadata"]["labels"]),
        "{service}"
    );
    let nats = &pod["spec"]["containers"][0];
    let target = service_port["targetPort"].as_str().expect("a named port");
    let client = container_port(nats, target);
    let (conf, _) = nats_conf(&nats_conf_text(&docs));
    assert_eq!(setting(&conf, "port"), client.to_string());
    // The gateway's Service, PDB and Leases stay the gateway's: neither
    // selects the NATS pods, and the NATS Services select no gateway pod.
    let gateway = find(&docs, "Deployment");
    let gateway_labels = &gateway["spec"]["template"]["metadata"]["labels"];
    let nats_labels = &pod["metadata"]["labels"];
    let gateway_service = named(&docs, "Service", "kube-pulse");
    assert!(!selects(&gateway_service["spec"]["selector"], nats_labels));
    let gateway_pdb = named(&docs, "PodDisruptionBudget", "kube-pulse");
    assert!(selects(
        &gateway_pdb["spec"]["selector"]["matchLabels"],
        gateway_labels
    ));
    assert!(!selects(
        &gateway_pdb["spec"]["selector"]["matchLabels"],
        nats_labels
    ));
    for name in ["kube-pulse-nats", "kube-pulse-nats-headless"] {
        let selector = &named(&docs, "Service", name)["spec"]["selector"];
        assert!(!selects(selector, gateway_labels), "{name}");
    }
    assert_eq!(
        find(&docs, "Role")["rules"][0]["resources"],
        json!(["leases"])
    );
    assert_eq!(find(&docs, "RoleBinding")["roleRef"]["kind"], "Role");
}

#[test]
fn the_nats_statefulset_runs_jetstream_on_its_volume() {
    let (_, docs) = render_nats();
    let statefulset = named(&docs, "StatefulSet", "kube-pulse-nats");
    let spec = &statefulset["spec"];
    let pod = &spec["template"];
    let labels = &pod["metadata"]["labels"];
    assert!(selects(&spec["selector"]["matchLabels"], labels));
    // Its governing Service is the headless one, which selects its pods.
    let headless = named(&docs, "Service", spec["serviceName"].as_str().unwrap());
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert!(selects(&headless["spec"]["selector"], labels));
    // The servers spread over nodes: JetStream keeps its quorum when one goes.
    let spread = &pod["spec"]["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "kubernetes.io/hostname");
    assert!(selects(&spread["labelSelector"]["matchLabels"], labels));
    // nats-server reads the ConfigMap's nats.conf.
    let container = &pod["spec"]["containers"][0];
    let command: Vec<&str> = container["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let config_path = command[command.iter().position(|a| *a == "--config").unwrap() + 1];
    let mount = |name: &str| {
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no mount {name}"))["mountPath"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let volume = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["configMap"]["name"] == "kube-pulse-nats")
        .expect("the ConfigMap as a volume");
    let config_dir = mount(volume["name"].as_str().unwrap());
    assert_eq!(config_path, format!("{config_dir}/nats.conf"));
    // JetStream on, its store on the claim of every pod.
    let (conf, blocks) = nats_conf(&nats_conf_text(&docs));
    let jetstream = &blocks["jetstream"];
    let claim = &spec["volumeClaimTemplates"][0];
    let data = mount(claim["metadata"]["name"].as_str().unwrap());
    let store = setting(jetstream, "store_dir");
    assert!(
        Path::new(store).starts_with(&data),
        "{store} is not on the volume at {data}"
    );
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    assert!(claim["spec"]["resources"]["requests"]["storage"].is_string());
    // server_name is the pod's name.
    assert_eq!(setting(&conf, "server_name"), "$POD_NAME");
    let env = container["env"].as_array().unwrap();
    assert!(
        env.iter().any(|e| e["name"] == "POD_NAME"
            && e["valueFrom"] == json!({"fieldRef": {"fieldPath": "metadata.name"}})),
        "{env:?}"
    );
    // Probes on the monitoring port nats.conf opens; liveness needs JetStream.
    let monitor = container_port(container, "monitor");
    assert_eq!(setting(&conf, "http_port"), monitor.to_string());
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        assert_eq!(container[probe]["httpGet"]["port"], "monitor", "{probe}");
    }
    assert_eq!(
        container["livenessProbe"]["httpGet"]["path"],
        "/healthz?js-enabled-only=true"
    );
    // A pinned image, not root, nothing writable but the volume, bounded.
    let image = container["image"].as_str().unwrap();
    let tag = image.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
    assert!(
        tag.starts_with(|c: char| c.is_ascii_digit()) && tag.contains('.'),
        "{image} is not pinned to a version"
    );
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert!(pod["spec"]["securityContext"]["fsGroup"].is_u64());
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert!(container["resources"]["limits"]["memory"].is_string());
    assert!(container["resources"]["requests"]["cpu"].is_string());
    // Its own PDB selects its pods, and lets one server down at a time:
    // the others keep a quorum of the stream's copies.
    let pdb = named(&docs, "PodDisruptionBudget", "kube-pulse-nats");
    assert!(selects(&pdb["spec"]["selector"]["matchLabels"], labels));
    let servers = spec["replicas"].as_u64().unwrap();
    assert_eq!(servers, 3);
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(pdb["spec"]["minAvailable"].is_null());
    assert!(servers - 1 > servers / 2, "two of three are a quorum");
    // The servers start together (none is ready without a quorum).
    assert_eq!(spec["podManagementPolicy"], "Parallel");
}

/// The servers form one cluster: nats.conf routes to every pod of the
/// StatefulSet by its name through the headless Service, on the cluster
/// port that the container and the headless Service expose.
#[test]
fn the_nats_servers_route_to_every_pod_through_the_headless_service() {
    let (_, docs) = render_nats();
    let statefulset = named(&docs, "StatefulSet", "kube-pulse-nats");
    let spec = &statefulset["spec"];
    let name = statefulset["metadata"]["name"].as_str().unwrap();
    let headless_name = spec["serviceName"].as_str().unwrap();
    let headless = named(&docs, "Service", headless_name);
    let (_, blocks) = nats_conf(&nats_conf_text(&docs));
    let cluster = blocks.get("cluster").expect("a cluster block");
    assert!(!setting(cluster, "name").is_empty());
    let port: u64 = setting(cluster, "port").parse().unwrap();
    let container = &spec["template"]["spec"]["containers"][0];
    assert_eq!(container_port(container, "cluster"), port);
    let service_port = headless["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == port)
        .unwrap_or_else(|| panic!("{headless} has no port {port}"));
    assert_eq!(service_port["targetPort"], "cluster");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);
    let mut routes: Vec<&str> = setting(cluster, "routes").split(',').collect();
    routes.sort_unstable();
    let servers = spec["replicas"].as_u64().unwrap();
    let expected: Vec<String> = (0..servers)
        .map(|i| format!("nats://{name}-{i}.{headless_name}:{port}"))
        .collect();
    assert_eq!(routes, expected, "one route per pod");
}

/// nats.conf locks the server: one account for kube-pulse with JetStream,
/// one user, the gateway's (`--nats-user`), whose password is the
/// Secret's key that the servers read from their environment and the
/// gateway from the file `--nats-password-file` names (the same Secret
/// mounted there); its permissions are the relay's and the task bucket's,
/// with nothing that deletes or purges, and nobody else gets in.
#[test]
fn the_nats_servers_admit_only_the_gateways_user() {
    let (_, docs) = render_nats();
    let tree = nats_tree(&nats_conf_text(&docs));
    for open in ["authorization", "no_auth_user", "system_account"] {
        assert!(!tree.has(open), "nats.conf sets {open}");
    }
    let accounts = tree.get("accounts").entries();
    assert_eq!(accounts.len(), 1, "{accounts:?}");
    let (name, account) = &accounts[0];
    assert_eq!(name, "KUBE_PULSE");
    assert_eq!(account.get("jetstream").str(), "enabled");
    let users = account.get("users").list();
    assert_eq!(users.len(), 1, "{users:?}");
    let user = &users[0];
    // The gateway logs in as that user, with the password file the Secret
    // is mounted as.
    let serve = serve_args(&docs);
    let auth = &serve.nats_auth;
    assert_eq!(auth.nats_user.as_deref(), Some(user.get("user").str()));
    let password_file = auth
        .nats_password_file
        .clone()
        .expect("--nats-password-file");
    let variable = user
        .get("password")
        .str()
        .strip_prefix('$')
        .expect("the password is an environment variable's");
    let statefulset = named(&docs, "StatefulSet", "kube-pulse-nats");
    let env = statefulset["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap();
    let from = &env
        .iter()
        .find(|e| e["name"] == variable)
        .unwrap_or_else(|| panic!("no {variable} in {env:?}"))["valueFrom"]["secretKeyRef"];
    let (secret_name, key) = (
        from["name"].as_str().unwrap(),
        from["key"].as_str().unwrap(),
    );
    let secret = named(&docs, "Secret", secret_name);
    assert!(secret["stringData"][key].is_string(), "{secret}");
    let pod = &find(&docs, "Deployment")["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"] == secret_name)
        .expect("the Secret mounted in the gateway's pod");
    let item = volume["secret"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["key"] == key)
        .expect("the password's key");
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the volume mounted");
    assert_eq!(mount["readOnly"], true);
    assert_eq!(
        password_file,
        Path::new(mount["mountPath"].as_str().unwrap()).join(item["path"].as_str().unwrap())
    );
    // The pod's group reads it (the container runs as that group, not root).
    let mode = volume["secret"]["defaultMode"].as_u64().unwrap();
    assert_eq!(mode & 0o040, 0o040, "{mode:o}");
    assert_eq!(mode & 0o007, 0, "{mode:o}");
    assert!(pod["securityContext"]["fsGroup"].is_u64());
    // Least privilege: the subjects of the relay and the task bucket only.
    let permissions = user.get("permissions");
    let allowed = |what: &str| -> Vec<String> {
        permissions
            .get(what)
            .get("allow")
            .list()
            .iter()
            .map(|s| s.str().to_string())
            .collect()
    };
    let publish = allowed("publish");
    assert!(
        publish.contains(&"kube-pulse.topics.>".to_string()),
        "{publish:?}"
    );
    assert!(
        publish.contains(&"$KV.KUBE_PULSE_TASKS.>".to_string()),
        "{publish:?}"
    );
    for subject in &publish {
        assert!(
            !subject.contains("DELETE.KUBE_PULSE")
                || subject.starts_with("$JS.API.CONSUMER.DELETE."),
            "{subject}"
        );
        assert!(!subject.contains("PURGE"), "{subject}");
        assert!(
            !["$JS.API.>", ">", "$JS.>"].contains(&subject.as_str()),
            "{subject}"
        );
        if let Some(api) = subject.strip_prefix("$JS.API.") {
            let named = api.contains("KUBE_PULSE");
            assert!(named, "{subject} names neither the stream nor the bucket");
        }
    }
    assert_eq!(allowed("subscribe"), ["_INBOX.>"]);
    assert!(!permissions.has("deny"), "allow-lists only");
    // The agents' part (docs/AGENT-DEPLOY.md): task requests to every
    // agent, the agents' stream made and read; never publishing as an
    // agent.
    for subject in [
        "kube-pulse.agentctl.>",
        "$JS.API.STREAM.CREATE.KUBE_PULSE_AGENTS",
        "$JS.API.STREAM.UPDATE.KUBE_PULSE_AGENTS",
        "$JS.API.STREAM.INFO.KUBE_PULSE_AGENTS",
        "$JS.API.CONSUMER.CREATE.KUBE_PULSE_AGENTS",
        "$JS.API.CONSUMER.CREATE.KUBE_PULSE_AGENTS.>",
        "$JS.API.CONSUMER.INFO.KUBE_PULSE_AGENTS.>",
        "$JS.API.CONSUMER.DELETE.KUBE_PULSE_AGENTS.>",
        "$JS.API.CONSUMER.MSG.NEXT.KUBE_PULSE_AGENTS.>",
    ] {
        assert!(publish.contains(&subject.to_string()), "{subject}");
    }
    assert!(
        !publish.iter().any(|s| s.starts_with("kube-pulse.agents")),
        "{publish:?}"
    );
}

/// Agent users inserted into the component's nats.conf (as
/// `manifests::nats_conf_with_agents` writes them, the chart's
/// `nats.agents` too): each is an nkey with its own subjects and
/// `allow_responses`, after the replicas' user, and the real nats-server
/// accepts the file; it refuses an agent whose key is not a user's.
#[test]
fn nats_conf_takes_one_user_per_agent() {
    let (_, docs) = render_nats();
    let text = nats_conf_text(&docs);
    let keys = [nkeys::KeyPair::new_user(), nkeys::KeyPair::new_user()];
    let agents = [
        ("edge-1", keys[0].public_key()),
        ("edge-2", keys[1].public_key()),
    ];
    let pairs: Vec<(&str, &str)> = agents.iter().map(|(m, k)| (*m, k.as_str())).collect();
    let with_agents = nats_conf_with_agents(&text, &pairs);
    let tree = nats_tree(&with_agents);
    let users = tree.get("accounts").get("KUBE_PULSE").get("users").list();
    assert_eq!(users.len(), 3, "{users:?}");
    assert_eq!(users[0].get("user").str(), "kube-pulse");
    for (user, (member, key)) in users[1..].iter().zip(&agents) {
        assert_eq!(user.get("nkey").str(), key);
        assert!(!user.has("user") && !user.has("password"), "{user:?}");
        let permissions = user.get("permissions");
        let allowed = |what: &str| -> Vec<&str> {
            permissions
                .get(what)
                .get("allow")
                .list()
                .iter()
                .map(Conf::str)
                .collect()
        };
        assert_eq!(
            allowed("publish"),
            [format!("kube-pulse.agents.{member}.>")]
        );
        assert_eq!(
            allowed("subscribe"),
            [
                format!("_INBOX_{member}.>"),
                format!("kube-pulse.agentctl.{member}.>")
            ]
        );
        assert_eq!(permissions.get("allow_responses").str(), "true");
    }
    // Nothing else changed: without agents the text is the same, and the
    // lines with them are the text's with the entries inserted.
    assert_eq!(nats_conf_with_agents(&text, &[]), text);
    let mut kept = with_agents.lines().collect::<Vec<_>>();
    let first = kept
        .iter()
        .position(|l| l.trim() == "# The agent of member edge-1.")
        .unwrap();
    let entry = kept
        .iter()
        .skip(first + 1)
        .position(|l| l.trim() == "# The agent of member edge-2.")
        .unwrap()
        + 1;
    kept.drain(first..first + 2 * entry);
    assert_eq!(kept, text.lines().collect::<Vec<_>>());
    let env = [
        ("POD_NAME", "kube-pulse-nats-0"),
        ("KUBE_PULSE_NATS_PASSWORD", "a-password"),
    ];
    let Some(checked) = check_config(&with_agents, &env) else {
        return;
    };
    checked.expect("nats-server accepts nats.conf with two agents");
    let account_key = nkeys::KeyPair::new_account().public_key();
    let refused = check_config(
        &nats_conf_with_agents(&text, &[("edge-3", &account_key)]),
        &env,
    )
    .unwrap();
    assert!(refused.is_err(), "an account's key taken as an agent's");
}

/// Only the gateway's pods reach the NATS servers' client port, and only
/// the NATS pods their route port; nothing else reaches either.
#[test]
fn the_network_policy_lets_only_the_gateway_reach_nats() {
    let (_, docs) = render_nats();
    let policy = named(&docs, "NetworkPolicy", "kube-pulse-nats");
    let statefulset = named(&docs, "StatefulSet", "kube-pulse-nats");
    let nats_pod = &statefulset["spec"]["template"];
    let nats_labels = &nats_pod["metadata"]["labels"];
    let gateway_labels = &find(&docs, "Deployment")["spec"]["template"]["metadata"]["labels"];
    let spec = &policy["spec"];
    assert!(selects(&spec["podSelector"]["matchLabels"], nats_labels));
    assert!(!selects(
        &spec["podSelector"]["matchLabels"],
        gateway_labels
    ));
    assert_eq!(spec["policyTypes"], json!(["Ingress"]));
    let container = &nats_pod["spec"]["containers"][0];
    let (client, cluster) = (
        container_port(container, "client"),
        container_port(container, "cluster"),
    );
    let rules = spec["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "{rules:?}");
    // (port, who may reach it, who may not)
    for (port, allowed, refused) in [
        (client, gateway_labels, nats_labels),
        (cluster, nats_labels, gateway_labels),
    ] {
        let rule = rules
            .iter()
            .find(|r| {
                r["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["port"] == port)
            })
            .unwrap_or_else(|| panic!("no rule for port {port}: {rules:?}"));
        assert_eq!(rule["ports"].as_array().unwrap().len(), 1, "{rule}");
        let from = rule["from"].as_array().expect("a rule names its peers");
        assert_eq!(from.len(), 1, "{rule}");
        let peer = &from[0];
        assert!(
            peer["namespaceSelector"].is_null() && peer["ipBlock"].is_null(),
            "pods of this namespace only: {rule}"
        );
        let selector = &peer["podSelector"]["matchLabels"];
        assert!(selects(selector, allowed), "{rule}");
        assert!(!selects(selector, refused), "{rule}");
    }
    // The monitoring port is in no rule (the kubelet's probes come from the node).
    let monitor = container_port(container, "monitor");
    assert!(
        !policy.to_string().contains(&format!(":{monitor}")),
        "{policy}"
    );
}

/// The real nats-server with the component's nats.conf, its store moved to
/// a temporary directory and its ports to free loopback ones (flags win
/// over the file): it accepts the file, and serves JetStream with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_server_accepts_the_components_config() {
    let Some(binary) = nats_server_or_skip() else {
        return;
    };
    let (_, docs) = render_nats();
    let text = nats_conf_text(&docs);
    let (_, blocks) = nats_conf(&text);
    let store = setting(&blocks["jetstream"], "store_dir").to_string();
    let dir = tempfile::tempdir().unwrap();
    let local = text.replace(
        &format!("store_dir: {store}"),
        &format!("store_dir: {}", dir.path().display()),
    );
    assert_ne!(local, text);
    let conf = dir.path().join("nats.conf");
    std::fs::write(&conf, &local).unwrap();
    let out = Command::new(&binary)
        .arg("-c")
        .arg(&conf)
        .arg("-t")
        .env("POD_NAME", "kube-pulse-nats-0")
        .env("KUBE_PULSE_NATS_PASSWORD", "a-password")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "nats-server refuses the config: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (port, monitor) = (free_port(), free_port());
    let cluster_port = free_port();
    // The routes stay: the pods' names do not resolve here, and the
    // server goes on trying them while it serves.
    let mut child = Command::new(&binary)
        .arg("-c")
        .arg(&conf)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .args(["-m", &monitor.to_string()])
        .args(["--cluster", &format!("nats://127.0.0.1:{cluster_port}")])
        .env("POD_NAME", "kube-pulse-nats-0")
        .env("KUBE_PULSE_NATS_PASSWORD", "a-password")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let client = http();
    let base = format!("http://127.0.0.1:{monitor}");
    let healthy = eventually(
        std::time::Duration::from_secs(120),
        "the liveness probe's /healthz?js-enabled-only=true answers 200",
        || {
            let (client, base) = (client.clone(), base.clone());
            async move {
                let answer = client
                    .get(format!("{base}/healthz?js-enabled-only=true"))
                    .send()
                    .await
                    .ok()?;
                (answer.status() == 200).then_some(answer.status())
            }
        },
    )
    .await;
    let varz: Value = get_json(&format!("{base}/varz")).await;
    // Clients log in: without the password none gets in, with it the
    // gateway's user does.
    let url = format!("nats://127.0.0.1:{port}");
    let connect = |options: async_nats::ConnectOptions| {
        let url = url.clone();
        async move {
            tokio::time::timeout(std::time::Duration::from_secs(30), options.connect(url))
                .await
                .map_err(|_| "no answer".to_string())?
                .map_err(|e| e.to_string())
        }
    };
    let anonymous = connect(async_nats::ConnectOptions::new()).await;
    let user = connect(
        async_nats::ConnectOptions::new()
            .user_and_password("kube-pulse".into(), "a-password".into()),
    )
    .await;
    let running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(running, "nats-server stopped with routes it cannot resolve");
    assert_eq!(healthy, 200);
    assert_eq!(varz["auth_required"], true, "{varz}");
    assert!(anonymous.is_err(), "a client without the password got in");
    assert!(user.is_ok(), "the gateway's user: {user:?}");
    let (_, blocks) = nats_conf(&text);
    let cluster = &blocks["cluster"];
    assert_eq!(varz["cluster"]["name"], setting(cluster, "name"), "{varz}");
    assert_eq!(varz["cluster"]["cluster_port"], cluster_port, "{varz}");
    let routes = varz["cluster"]["urls"].as_array().map_or(0, Vec::len);
    assert_eq!(routes, 3, "the routes of nats.conf: {varz}");
    assert_eq!(varz["server_name"], "kube-pulse-nats-0");
    assert_eq!(varz["port"], port);
    let config = &varz["jetstream"]["config"];
    assert!(
        config["store_dir"]
            .as_str()
            .is_some_and(|d| Path::new(d).starts_with(dir.path())),
        "{varz}"
    );
    assert!(config["max_storage"].as_u64().unwrap() > 0, "{varz}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_nats_component_to_the_simulator() {
    let (text, _) = render_nats();
    let (replicas, listed) = apply(
        "apply-nats",
        &text,
        "networkpolicies,poddisruptionbudgets,secrets,services,statefulsets",
    )
    .await;
    assert_eq!(replicas, "3");
    let mut listed: Vec<&str> = listed.lines().collect();
    listed.sort_unstable();
    assert_eq!(
        listed,
        [
            "networkpolicy.networking.k8s.io/kube-pulse-nats",
            "poddisruptionbudget.policy/kube-pulse",
            "poddisruptionbudget.policy/kube-pulse-nats",
            "secret/kube-pulse-nats-auth",
            "secret/kube-pulse-nats-signing",
            "service/kube-pulse",
            "service/kube-pulse-nats",
            "service/kube-pulse-nats-headless",
            "statefulset.apps/kube-pulse-nats"
        ]
    );
}
