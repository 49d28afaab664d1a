//! The deployment manifests: they render with kustomize, validate against
//! the Kubernetes schemas offline, carry the seed's probes, embed a config
//! the gateway accepts, and apply to the simulator with kubectl.

mod common;

use std::process::Command;

use kube_pulse_sim::ResourceDef;
use serde_json::{Value, json};

fn render() -> (String, Vec<Value>) {
    let out = Command::new("kubectl")
        .args(["kustomize", concat!(env!("CARGO_MANIFEST_DIR"), "/deploy")])
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

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn rendered_file(text: &str) -> std::path::PathBuf {
    let path =
        std::env::temp_dir().join(format!("kube-pulse-rendered-{}.yaml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn manifests_validate_against_the_kubernetes_schemas() {
    let (text, docs) = render();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
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
    let path = rendered_file(&text);
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
    use clap::Parser;
    let (_, docs) = render();
    let container = &find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_manifests_to_the_simulator() {
    let extra = vec![
        ResourceDef {
            namespaced: true,
            status_subresource: false,
            ..ResourceDef::custom("", "v1", "serviceaccounts", "ServiceAccount")
        },
        ResourceDef {
            namespaced: true,
            ..ResourceDef::custom("", "v1", "services", "Service")
        },
        ResourceDef {
            namespaced: false,
            status_subresource: false,
            ..ResourceDef::custom(
                "rbac.authorization.k8s.io",
                "v1",
                "clusterroles",
                "ClusterRole",
            )
        },
        ResourceDef {
            namespaced: false,
            status_subresource: false,
            ..ResourceDef::custom(
                "rbac.authorization.k8s.io",
                "v1",
                "clusterrolebindings",
                "ClusterRoleBinding",
            )
        },
    ];
    let sim = common::sim_with(|c| c.extra_resources = extra).await;
    let (text, _) = render();
    let path = rendered_file(&text);
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
    assert_eq!(common::ok(&out), "2");
    sim.shutdown().await;
}
