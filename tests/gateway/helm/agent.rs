//! The chart's agent mode (`agent.enabled`: `kube-pulse agent` in a member
//! cluster, nothing of the gateway) and the hub's `nats.agents`: rendered
//! by Helm's engine, linted, validated offline and applied to the
//! simulator; the agent is deploy/agent/'s (flags, environment, probes,
//! volumes, RBAC, the `tasks` rules), its seed Secret and ConfigMap hold
//! the given values; bad agent values are refused with the reason; the
//! hub's nats.conf with two agents is `manifests::nats_conf_with_agents`
//! of deploy/nats's, byte for byte, and the real nats-server accepts it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use pulse_testkit::helm::{Helm, Rendered};
use pulse_testkit::kubectl::{kustomize, overlay};
use pulse_testkit::manifests::{
    self, documents, find, kinds, named, nats_conf_with_agents, rendered_file, validate,
};
use pulse_testkit::nats::check_config;
use serde_json::{Value, json};

use super::{LONG_NAMESPACE, LONG_RELEASE, ROOT, assert_names_within_limits, chart, deploy};

const NAMESPACE: &str = "kube-pulse-agent";
const HUB_KEY: &str = "HUBKEY-AS-kube-pulse-hub-key-PRINTS-IT";

/// Keys made once for every render: the agent's seed, two agents' public
/// keys for the hub.
struct Keys {
    seed: String,
    agents: [(String, String); 2],
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| Keys {
        seed: nkeys::KeyPair::new_user().seed().unwrap(),
        agents: [
            ("edge-1".into(), nkeys::KeyPair::new_user().public_key()),
            ("edge-2".into(), nkeys::KeyPair::new_user().public_key()),
        ],
    })
}

/// The renders of this file: (name, values, release, namespace).
fn variants() -> Vec<super::Variant> {
    let keys = keys();
    let agents: Vec<Value> = keys
        .agents
        .iter()
        .map(|(member, key)| json!({"member": member, "publicKey": key}))
        .collect();
    vec![
        // The documented install: every value, tasks on.
        (
            "agent",
            json!({"agent": {
                "enabled": true,
                "member": "edge-1",
                "nats": {"url": "tls://nats.hub.example.com:4222"},
                "hubKey": HUB_KEY,
                "seed": format!("{}\n", keys.seed),
                "tasks": true,
            }}),
            "kube-pulse-agent",
            NAMESPACE,
        ),
        // The least: the seed from a Secret of the operator's, no hub key
        // (no tasks), a config file, more flags and a CA mounted.
        (
            "agent-minimal",
            json!({
                "agent": {
                    "enabled": true,
                    "member": "edge-2",
                    "nats": {"url": "nats://nats.hub.example.com:4222"},
                    "existingSecret": "edge-2-seed",
                    "config": {
                        "syncRegistries": [{"name": "config", "clusters": ["*"], "resources": [{"group": "", "version": "v1", "resource": "configmaps"}]}],
                        "podWatch": {"enabled": false},
                        "initialLists": "paged",
                    },
                    "extraArgs": ["--nats-ca", "/etc/hub-ca/ca.crt"],
                },
                "extraVolumes": [{"name": "hub-ca", "configMap": {"name": "hub-ca"}}],
                "extraVolumeMounts": [{"name": "hub-ca", "mountPath": "/etc/hub-ca", "readOnly": true}],
                "rbac": {"extraRules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]},
            }),
            "edge",
            "agents",
        ),
        // The hub: NATS with two agents.
        (
            "hub",
            json!({
                "replicas": {"enabled": true},
                "nats": {"enabled": true, "agents": agents},
            }),
            "kube-pulse",
            "kube-pulse",
        ),
    ]
}

fn renders() -> Option<&'static BTreeMap<&'static str, Rendered>> {
    static RENDERS: OnceLock<Option<BTreeMap<&'static str, Rendered>>> = OnceLock::new();
    RENDERS
        .get_or_init(|| super::render_all(&variants()))
        .as_ref()
}

fn render(variant: &str) -> Option<(String, Vec<Value>)> {
    let rendered = &renders()?[variant];
    Some((rendered.manifests.clone(), documents(&rendered.manifests)))
}

/// deploy/agent/ with the `tasks` component.
fn deploy_agent() -> Vec<Value> {
    let at = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-agent-tasks");
    kustomize(&overlay(
        &at,
        &Path::new(ROOT).join("deploy/agent"),
        &["tasks"],
    ))
    .1
}

fn container(docs: &[Value]) -> &Value {
    &find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

#[test]
fn the_agent_mode_lints_and_validates_and_has_nothing_of_the_gateway() {
    let Some(helm) = Helm::find_or_skip() else {
        return;
    };
    for (variant, values, _, namespace) in variants() {
        let report = helm.lint(&chart(), &values, namespace);
        let serious: Vec<&Value> = report["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["severity"].as_u64().unwrap() >= 2)
            .collect();
        assert!(serious.is_empty(), "{variant}: {serious:?}");
        assert_eq!(report["errors"], json!([]), "{variant}");
        let (text, _) = render(variant).unwrap();
        validate(&format!("helm-{variant}"), &text);
    }
    let (_, docs) = render("agent").unwrap();
    assert_eq!(
        kinds(&docs),
        [
            "ConfigMap",
            "Deployment",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "Secret",
            "ServiceAccount"
        ]
    );
    let (_, minimal) = render("agent-minimal").unwrap();
    assert_eq!(
        kinds(&minimal),
        [
            "ConfigMap",
            "Deployment",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ServiceAccount"
        ]
    );
    for (variant, docs) in [("agent", &docs), ("agent-minimal", &minimal)] {
        assert_eq!(
            docs.iter().filter(|d| d["kind"] == "Deployment").count(),
            1,
            "{variant}"
        );
        let text = serde_json::to_string(docs).unwrap();
        assert!(!text.contains("\"serve\""), "{variant}: the gateway runs");
        assert!(!text.contains("config.yaml\":\"listen"), "{variant}");
    }
}

/// With release `kube-pulse-agent` in namespace `kube-pulse-agent` the
/// agent is deploy/agent/'s (with `tasks`): the container's flags,
/// environment, ports, probes, mounts, security context and resources,
/// the pod's volumes and security context, every RBAC rule and binding
/// (the chart's cluster-wide names carry the namespace), the ConfigMap's
/// and the Secret's keys.
#[test]
fn the_agent_mode_is_deploys_agent() {
    let Some((_, docs)) = render("agent") else {
        return;
    };
    let theirs = deploy_agent();
    let (ours_c, theirs_c) = (container(&docs), container(&theirs));
    for key in [
        "name",
        "image",
        "args",
        "env",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
    ] {
        assert_eq!(ours_c[key], theirs_c[key], "container {key}");
    }
    let spec = |docs: &[Value]| find(docs, "Deployment")["spec"].clone();
    let (ours, deploys) = (spec(&docs), spec(&theirs));
    assert_eq!(ours["replicas"], deploys["replicas"]);
    for key in [
        "serviceAccountName",
        "terminationGracePeriodSeconds",
        "securityContext",
        "volumes",
    ] {
        assert_eq!(
            ours["template"]["spec"][key], deploys["template"]["spec"][key],
            "pod {key}"
        );
    }
    // (kind, the chart's name, deploy/agent's name)
    for (kind, ours, deploys) in [
        (
            "ClusterRole",
            "kube-pulse-agent-kube-pulse-agent",
            "kube-pulse-agent",
        ),
        (
            "ClusterRole",
            "kube-pulse-agent-kube-pulse-agent-tasks",
            "kube-pulse-agent-tasks",
        ),
        ("Role", "kube-pulse-agent-leases", "kube-pulse-agent-leases"),
    ] {
        assert_eq!(
            named(&docs, kind, ours)["rules"],
            named(&theirs, kind, deploys)["rules"],
            "{kind} {ours}"
        );
    }
    for (kind, ours, deploys) in [
        (
            "ClusterRoleBinding",
            "kube-pulse-agent-kube-pulse-agent",
            "kube-pulse-agent",
        ),
        (
            "ClusterRoleBinding",
            "kube-pulse-agent-kube-pulse-agent-tasks",
            "kube-pulse-agent-tasks",
        ),
        (
            "RoleBinding",
            "kube-pulse-agent-leases",
            "kube-pulse-agent-leases",
        ),
    ] {
        let (a, b) = (named(&docs, kind, ours), named(&theirs, kind, deploys));
        assert_eq!(a["subjects"], b["subjects"], "{kind} {ours}");
        // The same kind of role, the chart's named as the binding.
        for key in ["apiGroup", "kind"] {
            assert_eq!(a["roleRef"][key], b["roleRef"][key], "{kind} {ours}");
        }
        assert_eq!(a["roleRef"]["name"], ours, "{kind} {ours}");
    }
    let keys_of = |doc: &Value, field: &str| -> Vec<String> {
        doc[field].as_object().unwrap().keys().cloned().collect()
    };
    let (ours_cm, theirs_cm) = (
        named(&docs, "ConfigMap", "kube-pulse-agent"),
        named(&theirs, "ConfigMap", "kube-pulse-agent"),
    );
    assert_eq!(keys_of(ours_cm, "data"), keys_of(theirs_cm, "data"));
    // The given values, the seed without its line end.
    assert_eq!(
        ours_cm["data"],
        json!({"member": "edge-1", "nats-url": "tls://nats.hub.example.com:4222", "hub-key": HUB_KEY})
    );
    let secret = named(&docs, "Secret", "kube-pulse-agent");
    assert_eq!(secret["stringData"], json!({"seed": keys().seed}));
    assert_eq!(
        keys_of(secret, "stringData"),
        keys_of(named(&theirs, "Secret", "kube-pulse-agent"), "stringData")
    );
    assert_eq!(
        find(&docs, "ServiceAccount")["automountServiceAccountToken"],
        true
    );
}

/// Without `agent.hubKey` neither the flag nor its variable; the seed from
/// the operator's Secret; `agent.config` mounted where `--config` reads
/// it, a file the gateway's parser takes; extraArgs after the chart's
/// flags, extraVolumes and extraVolumeMounts in the pod, extraRules in the
/// ClusterRole; no tasks' ClusterRole.
#[test]
fn the_agent_modes_options_reach_their_place() {
    let Some((_, docs)) = render("agent-minimal") else {
        return;
    };
    let container = container(&docs);
    assert_eq!(
        container["args"],
        json!([
            "agent",
            "--member",
            "$(MEMBER)",
            "--nats",
            "$(NATS_URL)",
            "--nats-nkey-seed",
            "/etc/kube-pulse-agent/seed",
            "--config",
            "/etc/kube-pulse/config.yaml",
            "--nats-ca",
            "/etc/hub-ca/ca.crt"
        ])
    );
    let env: Vec<&str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        env,
        [
            "RUST_LOG",
            "MEMBER",
            "NATS_URL",
            "POD_NAMESPACE",
            "POD_NAME"
        ]
    );
    let pod = &find(&docs, "Deployment")["spec"]["template"]["spec"];
    let volumes = pod["volumes"].as_array().unwrap();
    assert_eq!(volumes[0]["secret"]["secretName"], "edge-2-seed");
    let config_map = find(&docs, "ConfigMap");
    assert_eq!(config_map["metadata"]["name"], "edge-kube-pulse");
    assert!(config_map["data"]["hub-key"].is_null());
    assert_eq!(volumes[1]["configMap"]["name"], "edge-kube-pulse");
    assert_eq!(volumes[2]["name"], "hub-ca");
    let mounts = container["volumeMounts"].as_array().unwrap();
    assert_eq!(mounts[1]["mountPath"], "/etc/kube-pulse");
    assert_eq!(mounts[2]["mountPath"], "/etc/hub-ca");
    // The gateway's parser checks the keys the agent reads; it wants a
    // member besides, which the agent's file has no need of.
    let text = format!(
        "{}clusters:\n  - {{name: member, server: \"https://127.0.0.1:6443\", token: t}}\n",
        config_map["data"]["config.yaml"].as_str().unwrap()
    );
    let file = kube_pulse::config::load_file(&rendered_file("helm-agent-config", &text))
        .expect("the gateway's parser takes the agent's config file");
    assert_eq!(file.sync_registries.len(), 1);
    assert!(!file.pod_watch.enabled);
    let rules = find(&docs, "ClusterRole")["rules"].as_array().unwrap();
    assert_eq!(rules.last().unwrap()["resources"], json!(["configmaps"]));
    assert_eq!(
        docs.iter()
            .filter(|d| d["kind"] == "ClusterRole")
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["edge-kube-pulse-agents"],
        "tasks without agent.tasks"
    );
}

/// The agent's ClusterRoles and bindings (the read-only one and the
/// tasks') are named with the release namespace, as the gateway's are: one
/// release name in two namespaces of a member gives two sets, each bound
/// to its own namespace's ServiceAccount. With the longest release name
/// and namespace every name stays within Kubernetes' limits and the two
/// namespaces' still differ.
#[test]
fn the_agents_cluster_wide_names_carry_the_namespace() {
    let Some(helm) = Helm::find_or_skip() else {
        return;
    };
    let values = variants()
        .into_iter()
        .find(|(variant, ..)| *variant == "agent")
        .unwrap()
        .1;
    let releases = [
        ("kube-pulse-agent", "edge-a"),
        ("kube-pulse-agent", "edge-b"),
        (LONG_RELEASE, LONG_NAMESPACE),
        (LONG_RELEASE, "edge-a"),
    ];
    let jobs = super::releases(&values, &releases);
    let cluster_wide: Vec<Vec<String>> = helm
        .render(&chart(), &jobs)
        .into_iter()
        .zip(&releases)
        .map(|(result, (name, namespace))| {
            let what = format!("{name} in {namespace}");
            let rendered = result.unwrap_or_else(|e| panic!("{what}: {e}"));
            let docs = documents(&rendered.manifests);
            assert_names_within_limits(&what, &docs);
            let roles: Vec<String> = docs
                .iter()
                .filter(|d| d["kind"] == "ClusterRole")
                .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(roles.len(), 2, "{what}: {roles:?}");
            let bindings: Vec<&Value> = docs
                .iter()
                .filter(|d| d["kind"] == "ClusterRoleBinding")
                .collect();
            assert_eq!(bindings.len(), 2, "{what}");
            for (binding, role) in bindings.iter().zip(&roles) {
                assert_eq!(binding["metadata"]["name"], role.as_str(), "{what}");
                assert_eq!(binding["roleRef"]["name"], role.as_str(), "{what}");
                assert_eq!(binding["subjects"][0]["namespace"], *namespace, "{what}");
            }
            roles
        })
        .collect();
    assert_eq!(
        cluster_wide[0],
        ["kube-pulse-agent-edge-a", "kube-pulse-agent-edge-a-tasks"]
    );
    assert_eq!(
        cluster_wide[1],
        ["kube-pulse-agent-edge-b", "kube-pulse-agent-edge-b-tasks"]
    );
    for (a, b) in [(0, 1), (2, 3)] {
        assert!(
            cluster_wide[a].iter().all(|n| !cluster_wide[b].contains(n)),
            "{:?} and {:?}",
            cluster_wide[a],
            cluster_wide[b]
        );
    }
}

/// Values the agent mode refuses, each with its reason.
#[test]
fn bad_agent_values_are_refused() {
    let Some(helm) = Helm::find_or_skip() else {
        return;
    };
    let agent = |extra: Value| {
        let mut values = json!({"agent": {
            "enabled": true,
            "member": "edge-1",
            "nats": {"url": "nats://hub:4222"},
            "seed": keys().seed,
        }});
        for (key, value) in extra.as_object().unwrap() {
            if key == "agent" {
                for (k, v) in value.as_object().unwrap() {
                    values["agent"][k] = v.clone();
                }
            } else {
                values[key] = value.clone();
            }
        }
        values
    };
    let public = &keys().agents[0].1;
    let cases: Vec<(Value, &str)> = vec![
        (agent(json!({"agent": {"member": ""}})), "agent.member"),
        (
            agent(json!({"agent": {"member": "Edge_1"}})),
            "/agent/member",
        ),
        (
            agent(json!({"agent": {"nats": {"url": ""}}})),
            "agent.nats.url",
        ),
        (
            agent(json!({"agent": {"nats": {"url": "nats://u:p@hub:4222"}}})),
            "/agent/nats/url",
        ),
        (
            agent(json!({"agent": {"seed": ""}})),
            "agent.seed or agent.existingSecret",
        ),
        (agent(json!({"agent": {"seed": public}})), "/agent/seed"),
        (
            agent(json!({"agent": {"tasks": true}})),
            "agent.tasks needs agent.hubKey",
        ),
        (
            agent(json!({"replicas": {"enabled": true}})),
            "replicas.enabled with agent.enabled",
        ),
        (
            agent(json!({"karpor": {"enabled": true}})),
            "karpor.enabled with agent.enabled",
        ),
        (
            agent(json!({"monitoring": {"serviceMonitor": {"enabled": true}}})),
            "monitoring.serviceMonitor.enabled with agent.enabled",
        ),
        (
            agent(json!({"agent": {"config": {"clusters": []}}})),
            "'clusters' not allowed",
        ),
        (
            agent(json!({"agent": {"config": {"podWatch": {"onDemand": true}}}})),
            "podWatch.onDemand on an agent needs --hub-key",
        ),
        (
            json!({"replicas": {"enabled": true}, "nats": {"enabled": true, "agents": [{"member": "edge-1", "publicKey": keys().seed}]}}),
            "/nats/agents/0/publicKey",
        ),
        (
            json!({"nats": {"agents": [{"member": "edge-1", "publicKey": public}]}}),
            "nats.agents needs nats.enabled",
        ),
        (
            json!({"replicas": {"enabled": true}, "nats": {"enabled": true, "agents": [
                {"member": "edge-1", "publicKey": public},
                {"member": "edge-1", "publicKey": keys().agents[1].1},
            ]}}),
            "nats.agents: member edge-1 twice",
        ),
        (
            json!({"replicas": {"enabled": true}, "nats": {"enabled": true, "agents": [
                {"member": "edge-1", "publicKey": public},
                {"member": "edge-2", "publicKey": public},
            ]}}),
            "the key of edge-2 is another agent's too",
        ),
        (
            json!({"replicas": {"enabled": true}, "nats": {"enabled": true, "agents": [
                {"member": "host", "publicKey": public},
            ]}}),
            "member host is in config.clusters too",
        ),
    ];
    super::assert_refused(&helm, &cases);
}

/// The hub's `nats.agents` is `nats_conf_with_agents` of deploy/nats's
/// nats.conf, byte for byte (the agents' own tests use that helper), and
/// the real nats-server accepts it.
#[test]
fn the_hubs_nats_agents_are_one_user_each() {
    let Some((_, docs)) = render("hub") else {
        return;
    };
    let conf = |docs: &[Value]| {
        named(docs, "ConfigMap", "kube-pulse-nats")["data"]["nats.conf"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let agents: Vec<(&str, &str)> = keys()
        .agents
        .iter()
        .map(|(m, k)| (m.as_str(), k.as_str()))
        .collect();
    let ours = conf(&docs);
    assert_eq!(
        ours,
        nats_conf_with_agents(&conf(&deploy(&["replicas", "nats"])), &agents)
    );
    let env = [
        ("POD_NAME", "kube-pulse-nats-0"),
        ("KUBE_PULSE_NATS_PASSWORD", "a-password"),
    ];
    if let Some(checked) = check_config(&ours, &env) {
        checked.expect("nats-server accepts the chart's nats.conf with two agents");
    }
    // Each agent's member is a push member of the gateway, as the gateway's
    // own parser reads the rendered file.
    let config = named(&docs, "ConfigMap", "kube-pulse")["data"]["config.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    let path = manifests::rendered_file("helm-hub-config.yaml", &config);
    let file = kube_pulse::config::load_file(&path).unwrap();
    let pushed: Vec<(&str, &str)> = file
        .clusters
        .iter()
        .filter_map(|c| Some((c.name.as_str(), c.pushed_by()?)))
        .collect();
    let expected: Vec<(&str, &str)> = agents.clone();
    assert_eq!(pushed, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_agent_mode_to_the_simulator() {
    let Some((text, _)) = render("agent") else {
        return;
    };
    let namespace = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n");
    let applied = manifests::apply(
        "helm-apply-agent",
        &format!("{namespace}---\n{text}"),
        NAMESPACE,
        "kube-pulse-agent",
        "configmaps,secrets,roles,rolebindings,serviceaccounts,services",
    )
    .await;
    assert_eq!(applied.replicas, "1");
    let mut listed: Vec<&str> = applied.listed.lines().collect();
    listed.sort_unstable();
    assert_eq!(
        listed,
        [
            "configmap/kube-pulse-agent",
            "role.rbac.authorization.k8s.io/kube-pulse-agent-leases",
            "rolebinding.rbac.authorization.k8s.io/kube-pulse-agent-leases",
            "secret/kube-pulse-agent",
            "serviceaccount/kube-pulse-agent"
        ],
        "{}",
        applied.output
    );
}
