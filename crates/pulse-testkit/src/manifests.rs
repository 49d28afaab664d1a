//! Rendered deployment manifests, whether kustomize or Helm rendered them:
//! finding their documents, validating them offline against Kubernetes'
//! schemas, reading the gateway's flags and configuration from them, and
//! applying them to a simulator with kubectl.

use std::path::PathBuf;
use std::process::Command;

use kube_pulse_sim::ResourceDef;
use serde_json::Value;

use crate::kubectl::{kubectl, ok};
use crate::sim::sim_with;

/// The documents of a YAML stream (empty documents left out).
pub fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|d: &Value| !d.is_null())
        .collect()
}

/// The first document of `kind`.
pub fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// The document of `kind` named `name`.
pub fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The documents' kinds, in order.
pub fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().map(|d| d["kind"].as_str().unwrap()).collect()
}

/// Whether a label selector (`matchLabels`, or a Service's `selector`)
/// selects pods with `labels`.
pub fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().expect("a selector");
    !selector.is_empty() && selector.iter().all(|(k, v)| &labels[k] == v)
}

/// `text` in a file of its own (`name` tells the renders apart).
pub fn rendered_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "kube-pulse-rendered-{name}-{}.yaml",
        std::process::id()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// `kubernetes-validate --strict` against Kubernetes 1.32's schemas (kinds
/// it has no schema for, as the Prometheus Operator's, pass with a warning).
pub fn validate(name: &str, text: &str) {
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

/// The `serve` flags of the (first) Deployment's container, as the
/// gateway parses them.
pub fn serve_args(docs: &[Value]) -> kube_pulse::cli::ServeArgs {
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

/// The configuration file a ConfigMap's `config.yaml` holds, as the
/// gateway loads it (`name` tells the files apart).
pub fn embedded_config(name: &str, config_map: &Value) -> kube_pulse::config::FileConfig {
    let text = config_map["data"]["config.yaml"]
        .as_str()
        .expect("a config.yaml")
        .to_string();
    let path = rendered_file(&format!("{name}-config"), &text);
    kube_pulse::config::load_file(&path).expect("the gateway accepts the embedded config")
}

/// The names a client in the cluster reaches the Service `name` in
/// `namespace` by: each must be among the gateway's allowed hosts.
pub fn service_hosts(name: &str, namespace: &str) -> [String; 4] {
    [
        name.to_string(),
        format!("{name}.{namespace}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.cluster.local"),
    ]
}

/// One agent's user entry in nats.conf (`MEMBER` and `KEY` replaced).
const AGENT_USER: &str = r#"# The agent of member MEMBER.
{
  nkey: KEY
  permissions: {
    publish: {
      allow: [
        "kube-pulse.agents.MEMBER.>"
      ]
    }
    subscribe: {
      allow: [
        "_INBOX_MEMBER.>"
        "kube-pulse.agentctl.MEMBER.>"
      ]
    }
    allow_responses: true
  }
}"#;

/// `conf` (a nats.conf as deploy/nats/nats-config.yaml or the chart's
/// `nats.agents` write it) with one user entry per agent, `(member, its
/// nkey public key U…)`, appended to the users of the account `users: [`
/// opens: each may publish on `kube-pulse.agents.{member}.>` only,
/// receive on its inbox prefix `_INBOX_{member}` and on
/// `kube-pulse.agentctl.{member}.>`, and answer requests. Written exactly
/// as the chart writes `nats.agents` (tests/gateway/helm/agent.rs compares
/// them), so that the agents' tests and the deployment's run one text.
pub fn nats_conf_with_agents(conf: &str, agents: &[(&str, &str)]) -> String {
    let lines: Vec<&str> = conf.lines().collect();
    let code = |line: &str| {
        line.split('#')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let open = lines
        .iter()
        .position(|l| code(l).starts_with("users") && code(l).ends_with('['))
        .unwrap_or_else(|| panic!("no `users: [` in\n{conf}"));
    let mut depth = 0i64;
    let mut close = None;
    for (i, line) in lines.iter().enumerate().skip(open) {
        let code = code(line);
        depth += code.matches(['[', '{']).count() as i64;
        depth -= code.matches([']', '}']).count() as i64;
        if depth == 0 {
            close = Some(i);
            break;
        }
    }
    let close = close.unwrap_or_else(|| panic!("the users list is not closed in\n{conf}"));
    let indent = " ".repeat(lines[open].len() - lines[open].trim_start().len() + 2);
    let mut out: Vec<String> = lines[..close].iter().map(|l| l.to_string()).collect();
    for (member, key) in agents {
        let entry = AGENT_USER.replace("MEMBER", member).replace("KEY", key);
        out.extend(entry.lines().map(|l| format!("{indent}{l}")));
    }
    out.extend(lines[close..].iter().map(|l| l.to_string()));
    let mut text = out.join("\n");
    if conf.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// The kinds the manifests add to what the simulator serves: RBAC,
/// Services, Secrets, NetworkPolicies, and the Prometheus Operator's
/// ServiceMonitor and PrometheusRule (as if its CRDs were installed).
pub fn manifest_kinds() -> Vec<ResourceDef> {
    let plain = |group: &str, plural: &str, kind: &str, namespaced: bool| ResourceDef {
        namespaced,
        status_subresource: false,
        ..ResourceDef::custom(group, "v1", plural, kind)
    };
    vec![
        plain("", "serviceaccounts", "ServiceAccount", true),
        ResourceDef {
            namespaced: true,
            ..ResourceDef::custom("", "v1", "services", "Service")
        },
        plain("", "secrets", "Secret", true),
        plain(
            "networking.k8s.io",
            "networkpolicies",
            "NetworkPolicy",
            true,
        ),
        plain(
            "rbac.authorization.k8s.io",
            "clusterroles",
            "ClusterRole",
            false,
        ),
        plain(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
        ),
        plain("rbac.authorization.k8s.io", "roles", "Role", true),
        plain(
            "rbac.authorization.k8s.io",
            "rolebindings",
            "RoleBinding",
            true,
        ),
        plain(
            "monitoring.coreos.com",
            "servicemonitors",
            "ServiceMonitor",
            true,
        ),
        plain(
            "monitoring.coreos.com",
            "prometheusrules",
            "PrometheusRule",
            true,
        ),
    ]
}

/// What [`apply`] read back from the simulator.
#[derive(Debug)]
pub struct Applied {
    /// kubectl apply's output, one line per object.
    pub output: String,
    /// The Deployment's replica count as the simulator stores it.
    pub replicas: String,
    /// `kubectl get ALSO -n NAMESPACE -o name`, one line per object.
    pub listed: String,
}

/// Applies `text` with kubectl to a fresh simulator serving
/// [`manifest_kinds`]; asserts the Deployment `deployment` was created in
/// `namespace` and reads back its replicas and what `kubectl get also`
/// lists there.
pub async fn apply(
    name: &str,
    text: &str,
    namespace: &str,
    deployment: &str,
    also: &str,
) -> Applied {
    let sim = sim_with(|c| c.extra_resources = manifest_kinds()).await;
    let path = rendered_file(name, text);
    let out = kubectl(&sim.url(), &["apply", "-f", path.to_str().unwrap()]).await;
    let output = ok(&out);
    assert!(
        output.contains(&format!("deployment.apps/{deployment} created")),
        "{output}"
    );
    let out = kubectl(
        &sim.url(),
        &[
            "get",
            "deployment",
            deployment,
            "-n",
            namespace,
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    )
    .await;
    let replicas = ok(&out).to_string();
    let out = kubectl(&sim.url(), &["get", also, "-n", namespace, "-o", "name"]).await;
    let listed = ok(&out).to_string();
    sim.shutdown().await;
    Applied {
        output,
        replicas,
        listed,
    }
}
