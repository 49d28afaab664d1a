//! The deployment manifests: they render with kustomize, validate against
//! the Kubernetes schemas offline, carry the seed's probes, embed a config
//! the gateway accepts, and apply to the simulator with kubectl — the base
//! alone, and with the `replicas` component (several replicas sharing the
//! members through Leases).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use kube_pulse_sim::ResourceDef;
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `kubectl kustomize dir`, as text and as documents.
fn kustomize(dir: &Path) -> (String, Vec<Value>) {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl is installed (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let docs = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    (text, docs)
}

/// The base, `kubectl apply -k deploy/`.
fn render() -> (String, Vec<Value>) {
    kustomize(&Path::new(ROOT).join("deploy"))
}

/// The base with the `replicas` component, from an overlay outside
/// deploy/ as deploy/replicas/kustomization.yaml shows (kustomize refuses
/// an overlay inside the base's directory). Written once: tests run in
/// parallel.
fn render_replicas() -> (String, Vec<Value>) {
    static OVERLAY: OnceLock<PathBuf> = OnceLock::new();
    let overlay = OVERLAY.get_or_init(|| {
        let overlay = Path::new(env!("CARGO_TARGET_TMPDIR")).join("with-replicas");
        std::fs::create_dir_all(&overlay).unwrap();
        let base = common::relative(&overlay, &Path::new(ROOT).join("deploy"));
        std::fs::write(
            overlay.join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
                 resources:\n  - {base}\ncomponents:\n  - {base}/replicas\n",
                base = base.display()
            ),
        )
        .unwrap();
        overlay
    });
    kustomize(overlay)
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().map(|d| d["kind"].as_str().unwrap()).collect()
}

/// `text` in a file of its own (`name` tells the renders apart).
fn rendered_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "kube-pulse-rendered-{name}-{}.yaml",
        std::process::id()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// `kubernetes-validate --strict` against Kubernetes 1.32's schemas.
fn validate(name: &str, text: &str) {
    let path = rendered_file(name, text);
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--quiet", "-k", "1.32.0"])
        .arg(&path)
        .output()
        .expect("kubernetes-validate is installed (scripts/test.sh installs it from PyPI)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `serve` flags of the Deployment's container.
fn serve_args(docs: &[Value]) -> kube_pulse::cli::ServeArgs {
    use clap::Parser;
    let container = &find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let cli = kube_pulse::cli::Cli::try_parse_from(std::iter::once("kube-pulse").chain(args))
        .expect("the manifest's arguments parse");
    let kube_pulse::cli::Command::Serve(serve) = cli.command else {
        panic!("the deployment runs serve");
    };
    *serve
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
    let config = find(&docs, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    let path = std::env::temp_dir().join(format!("kube-pulse-config-{}.yaml", std::process::id()));
    std::fs::write(&path, config).unwrap();
    let parsed = kube_pulse::config::load_file(&path).unwrap();
    assert_eq!(parsed.clusters[0].name, "host");
    assert_eq!(parsed.listen.unwrap().port(), 8080);
    // In-cluster callers reach it by the Service's names (docs/SECURITY.md).
    let service = find(&docs, "Service");
    let namespace = service["metadata"]["namespace"].as_str().unwrap();
    let name = service["metadata"]["name"].as_str().unwrap();
    for host in [
        name.to_string(),
        format!("{name}.{namespace}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.cluster.local"),
    ] {
        assert!(
            kube_pulse::guard::host_allowed(&host, &parsed.allowed_hosts),
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
}

/// The kinds the manifests add to what the simulator serves.
fn extra_resources() -> Vec<ResourceDef> {
    let rbac = |plural: &str, kind: &str, namespaced: bool| ResourceDef {
        namespaced,
        status_subresource: false,
        ..ResourceDef::custom("rbac.authorization.k8s.io", "v1", plural, kind)
    };
    vec![
        ResourceDef {
            namespaced: true,
            status_subresource: false,
            ..ResourceDef::custom("", "v1", "serviceaccounts", "ServiceAccount")
        },
        ResourceDef {
            namespaced: true,
            ..ResourceDef::custom("", "v1", "services", "Service")
        },
        rbac("clusterroles", "ClusterRole", false),
        rbac("clusterrolebindings", "ClusterRoleBinding", false),
        rbac("roles", "Role", true),
        rbac("rolebindings", "RoleBinding", true),
    ]
}

/// Applies `text` to a fresh simulator and returns the Deployment's
/// replica count as the simulator stores it, and what `kubectl get` then
/// lists of `also` in the namespace.
async fn apply(name: &str, text: &str, also: &str) -> (String, String) {
    let sim = common::sim_with(|c| c.extra_resources = extra_resources()).await;
    let path = rendered_file(name, text);
    let out = common::kubectl(&sim.url(), &["apply", "-f", path.to_str().unwrap()]).await;
    let stdout = common::ok(&out);
    assert!(
        stdout.contains("deployment.apps/kube-pulse created"),
        "{stdout}"
    );
    let out = common::kubectl(
        &sim.url(),
        &[
            "get",
            "deployment",
            "kube-pulse",
            "-n",
            "kube-pulse",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    )
    .await;
    let replicas = common::ok(&out).to_string();
    let out = common::kubectl(&sim.url(), &["get", also, "-n", "kube-pulse", "-o", "name"]).await;
    let listed = common::ok(&out).to_string();
    sim.shutdown().await;
    (replicas, listed)
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
    // The Role lets that account do what src/scale/store.rs does, in the
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_replicas_component_to_the_simulator() {
    let (text, _) = render_replicas();
    let (replicas, listed) = apply("apply-replicas", &text, "poddisruptionbudgets").await;
    assert_eq!(replicas, "3");
    assert_eq!(listed.trim(), "poddisruptionbudget.policy/kube-pulse");
}
