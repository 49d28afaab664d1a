//! The Helm chart (charts/kube-pulse), rendered by Helm's own engine
//! (helm-python-sdk, Helm 4's SDK): for the default values and for every
//! optional block (karpor, replicas, nats, monitoring, all together) it
//! lints clean, validates against the Kubernetes schemas offline, embeds a
//! config the gateway accepts and flags it parses, and applies to the
//! simulator with kubectl; with the default values it is deploy/'s base,
//! its blocks deploy/'s components (the one source of truth: both must
//! agree, key for key). Names stay within Kubernetes' limits for the
//! longest release name, `podLabels` keeps the selector labels the
//! chart's, and the ServiceMonitor authenticates in every auth mode. The
//! values' contract (schema, every value used and documented) and the
//! READMEs are in values.rs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use pulse_testkit::helm::{Helm, Render, Rendered};
use pulse_testkit::kubectl::{kustomize, overlay};
use pulse_testkit::manifests::{
    self, documents, embedded_config, find, kinds, named, rendered_file, selects, serve_args,
    service_hosts, validate,
};
use serde_json::{Value, json};

mod agent;
mod values;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn chart() -> PathBuf {
    Path::new(ROOT).join("charts/kube-pulse")
}

fn chart_file(name: &str) -> String {
    std::fs::read_to_string(chart().join(name)).unwrap()
}

/// The signing key the "all" render gives (`nats.signing.key`).
const GIVEN_SIGNING_KEY: &str = "a signing key of the operator's, 32 bytes or more";

/// Values that turn every monitoring object on.
/// A render of `values` as the release `kube-pulse` in namespace `kube-pulse`.
fn release(values: &Value) -> Render {
    Render {
        values: values.clone(),
        name: "kube-pulse".into(),
        namespace: "kube-pulse".into(),
    }
}

/// Renders of `values` as each release `(name, namespace)`.
pub(crate) fn releases(values: &Value, at: &[(&str, &str)]) -> Vec<Render> {
    at.iter()
        .map(|(name, namespace)| Render {
            values: values.clone(),
            name: name.to_string(),
            namespace: namespace.to_string(),
        })
        .collect()
}

/// Each of `refused` rendered as [`release`] fails, its error naming the
/// reason given beside it.
pub(crate) fn assert_refused(helm: &Helm, refused: &[(Value, &str)]) {
    let jobs: Vec<Render> = refused.iter().map(|(values, _)| release(values)).collect();
    for ((values, expected), result) in refused.iter().zip(helm.render(&chart(), &jobs)) {
        match result {
            Ok(_) => panic!("{values} rendered"),
            Err(error) => assert!(error.contains(expected), "{values}: {error}"),
        }
    }
}

fn monitoring_on() -> Value {
    json!({
        "prometheusRule": {"enabled": true},
        "serviceMonitor": {"enabled": true},
        "grafanaDashboard": {"enabled": true},
    })
}

/// The renders every test reads: (name, values, release, namespace).
fn variants() -> Vec<Variant> {
    vec![
        ("default", json!({}), "kube-pulse", "kube-pulse"),
        // The documented install: next to Karpor, in its namespace.
        (
            "karpor",
            json!({"karpor": {"enabled": true}}),
            "kube-pulse",
            "karpor",
        ),
        (
            "replicas",
            json!({"replicas": {"enabled": true}}),
            "kube-pulse",
            "kube-pulse",
        ),
        (
            "nats",
            json!({"replicas": {"enabled": true}, "nats": {"enabled": true}}),
            "kube-pulse",
            "kube-pulse",
        ),
        (
            "monitoring",
            json!({"monitoring": monitoring_on()}),
            "kube-pulse",
            "kube-pulse",
        ),
        // Everything at once, under another release name.
        (
            "all",
            json!({
                "karpor": {
                    "enabled": true,
                    "context": "karpor",
                    "allowEndpoints": ["10.0.0.0/8"],
                    "denyEndpoints": ["10.96.0.0/12", "192.168.0.0/16"],
                },
                "replicas": {"enabled": true, "count": 4},
                "nats": {
                    "enabled": true,
                    "auth": {"password": "a-password"},
                    "signing": {"key": GIVEN_SIGNING_KEY},
                },
                "monitoring": monitoring_on(),
                "config": {
                    "allowedHosts": ["pulse.example.com"],
                    "extra": {"appRetentionSeconds": 300, "podWatch": {"enabled": false}},
                },
                "rbac": {"extraRules": [{
                    "apiGroups": ["example.com"],
                    "resources": ["widgets"],
                    "verbs": ["list", "watch"],
                }]},
            }),
            "pulse",
            "karpor",
        ),
        // Every other value away from its default.
        (
            "options",
            json!({
                "fullnameOverride": "pulse",
                "image": {"tag": "0.1.1", "pullPolicy": "Always"},
                "imagePullSecrets": [{"name": "registry"}],
                "logFormat": "pretty",
                "logLevel": "kube_pulse=debug",
                "extraArgs": ["--max-connections", "5000"],
                "extraEnv": [{"name": "TZ", "value": "UTC"}],
                "extraVolumes": [{"name": "tokens", "secret": {"secretName": "pulse-tokens"}}],
                "extraVolumeMounts": [{"name": "tokens", "mountPath": "/etc/pulse-tokens", "readOnly": true}],
                "podAnnotations": {"example.com/team": "platform"},
                "podLabels": {"team": "platform"},
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                    "weight": 100,
                    "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "kube-pulse"}}},
                }]}},
                "serviceAccount": {"name": "pulse-gateway", "annotations": {"example.com/role": "pulse"}},
                "service": {"type": "NodePort", "port": 8080, "sessionAffinity": "None", "annotations": {"example.com/lb": "internal"}},
                "config": {"health": {"format": "kubernetes"}, "clusters": [], "syncRegistries": []},
                "karpor": {"enabled": true, "allowExec": true, "kubeconfigConfigMap": "pulse-karpor", "kubeconfigKey": "kubeconfig"},
                "replicas": {"enabled": true, "count": 2},
                "nats": {
                    "enabled": true,
                    "servers": 5,
                    "streamReplicas": 3,
                    "storage": {"size": "20Gi", "storageClassName": "fast"},
                    "jetstream": {"maxFileStore": "16GB"},
                    "auth": {"user": "pulse", "existingSecret": "pulse-nats"},
                    "signing": {"existingSecret": "pulse-nats-signing"},
                },
                "monitoring": {
                    "prometheusRule": {"enabled": true, "labels": {"release": "prometheus"}},
                    "serviceMonitor": {"enabled": true, "interval": "15s", "labels": {"release": "prometheus"}},
                },
            }),
            "kube-pulse",
            "karpor",
        ),
        (
            "karpor-read-only",
            json!({"karpor": {"enabled": true, "readOnly": true}, "replicaCount": 2}),
            "kube-pulse",
            "karpor",
        ),
        // HTTPS from a kubernetes.io/tls Secret, scraped by a named
        // Prometheus over HTTPS with its token.
        (
            "tls",
            json!({
                "tls": {"secretName": "kube-pulse-tls"},
                "monitoring": {
                    "serviceMonitor": {
                        "enabled": true,
                        "tlsConfig": {"ca": {"secret": {"name": "kube-pulse-tls", "key": "ca.crt"}}},
                    },
                    "prometheus": {"serviceAccount": {"name": "kps-kube-prometheus-prometheus", "namespace": "monitoring"}},
                },
            }),
            "kube-pulse",
            "kube-pulse",
        ),
        // The host member without the tasks' writes.
        (
            "no-tasks",
            json!({"rbac": {"tasks": false}}),
            "kube-pulse",
            "kube-pulse",
        ),
    ]
}

/// A variant of the chart's values: its name, the values, the release's
/// name and namespace.
pub(crate) type Variant = (&'static str, Value, &'static str, &'static str);

/// Every one of `variants` rendered, in one run of Helm's engine; None when
/// it is not installed (outside CI).
pub(crate) fn render_all(variants: &[Variant]) -> Option<BTreeMap<&'static str, Rendered>> {
    let helm = Helm::find_or_skip()?;
    let jobs: Vec<Render> = variants
        .iter()
        .map(|(_, values, name, namespace)| Render {
            values: values.clone(),
            name: name.to_string(),
            namespace: namespace.to_string(),
        })
        .collect();
    let rendered = helm.render(&chart(), &jobs);
    Some(
        variants
            .iter()
            .zip(rendered)
            .map(|((variant, ..), r)| (*variant, r.unwrap_or_else(|e| panic!("{variant}: {e}"))))
            .collect(),
    )
}

/// Every variant of [`variants`] rendered, once.
fn renders() -> Option<&'static BTreeMap<&'static str, Rendered>> {
    static RENDERS: OnceLock<Option<BTreeMap<&'static str, Rendered>>> = OnceLock::new();
    RENDERS.get_or_init(|| render_all(&variants())).as_ref()
}

/// A variant's manifests as text and documents.
fn render(variant: &str) -> Option<(String, Vec<Value>)> {
    let rendered = &renders()?[variant];
    Some((rendered.manifests.clone(), documents(&rendered.manifests)))
}

fn release_namespace(variant: &str) -> &'static str {
    variants()
        .into_iter()
        .find(|(v, ..)| *v == variant)
        .unwrap()
        .3
}

/// deploy/ with `components` (none: the base), as kustomize renders it.
fn deploy(components: &[&str]) -> Vec<Value> {
    let base = Path::new(ROOT).join("deploy");
    if components.is_empty() {
        return kustomize(&base).1;
    }
    let at = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("helm-{}", components.join("-")));
    kustomize(&overlay(&at, &base, components)).1
}

fn container(docs: &[Value]) -> &Value {
    &find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

/// The gateway's Service (named as its Deployment; the NATS Services
/// come first in template order).
fn gateway_service(docs: &[Value]) -> &Value {
    let name = find(docs, "Deployment")["metadata"]["name"]
        .as_str()
        .unwrap();
    named(docs, "Service", name)
}

fn config_yaml(docs: &[Value], name: &str) -> Value {
    let text = named(docs, "ConfigMap", name)["data"]["config.yaml"]
        .as_str()
        .unwrap();
    serde_yaml_ng::from_str(text).unwrap()
}

// ------------------------------------------------------------- helm lint

#[test]
fn the_chart_lints_clean_with_every_block() {
    let Some(helm) = Helm::find_or_skip() else {
        return;
    };
    assert!(helm.version.starts_with("v4."), "{}", helm.version);
    for (variant, values, _, namespace) in variants() {
        let report = helm.lint(&chart(), &values, namespace);
        assert_eq!(report["total_charts_linted"], 1, "{variant}: {report}");
        // Severity 1 is information ("icon is recommended"); warnings and
        // errors fail.
        let serious: Vec<&Value> = report["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["severity"].as_u64().unwrap() >= 2)
            .collect();
        assert!(serious.is_empty(), "{variant}: {serious:?}");
        assert_eq!(report["errors"], json!([]), "{variant}");
    }
    // Lint runs the schema too: a bad value is an error.
    let report = helm.lint(&chart(), &json!({"replicas": {"count": "3"}}), "kube-pulse");
    assert_ne!(report["errors"], json!([]), "{report}");
}

// ------------------------------------------------- offline validation

#[test]
fn every_render_validates_against_the_kubernetes_schemas() {
    if renders().is_none() {
        return;
    }
    let expected: [(&str, &[&str]); 9] = [
        (
            "default",
            &[
                "ConfigMap",
                "Deployment",
                "ClusterRole",
                "ClusterRoleBinding",
                "Service",
                "ServiceAccount",
            ],
        ),
        (
            "karpor",
            &[
                "ConfigMap",
                "Deployment",
                "ClusterRole",
                "ClusterRoleBinding",
                "Service",
                "ServiceAccount",
            ],
        ),
        (
            "replicas",
            &[
                "ConfigMap",
                "Deployment",
                "PodDisruptionBudget",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Service",
                "ServiceAccount",
            ],
        ),
        (
            "nats",
            &[
                "ConfigMap",
                "Deployment",
                "Secret",
                "ConfigMap",
                "NetworkPolicy",
                "PodDisruptionBudget",
                "Service",
                "Service",
                "Secret",
                "StatefulSet",
                "PodDisruptionBudget",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Service",
                "ServiceAccount",
            ],
        ),
        (
            "monitoring",
            &[
                "ConfigMap",
                "Deployment",
                "ConfigMap",
                "PrometheusRule",
                "ClusterRole",
                "ClusterRoleBinding",
                "Service",
                "ServiceAccount",
                "ServiceMonitor",
            ],
        ),
        (
            "all",
            &[
                "ConfigMap",
                "Deployment",
                "ConfigMap",
                "Secret",
                "ConfigMap",
                "NetworkPolicy",
                "PodDisruptionBudget",
                "Service",
                "Service",
                "Secret",
                "StatefulSet",
                "PodDisruptionBudget",
                "PrometheusRule",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Service",
                "ServiceAccount",
                "ServiceMonitor",
            ],
        ),
        (
            "options",
            &[
                "ConfigMap",
                "Deployment",
                "ConfigMap",
                "NetworkPolicy",
                "PodDisruptionBudget",
                "Service",
                "Service",
                "StatefulSet",
                "PodDisruptionBudget",
                "PrometheusRule",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Service",
                "ServiceAccount",
                "ServiceMonitor",
            ],
        ),
        (
            "tls",
            &[
                "ConfigMap",
                "Deployment",
                "ClusterRole",
                "ClusterRoleBinding",
                "Service",
                "ServiceAccount",
                "ServiceMonitor",
                "ClusterRole",
                "ClusterRoleBinding",
            ],
        ),
        (
            "no-tasks",
            &[
                "ConfigMap",
                "Deployment",
                "ClusterRole",
                "ClusterRoleBinding",
                "Service",
                "ServiceAccount",
            ],
        ),
    ];
    for (variant, kinds_expected) in expected {
        let (text, docs) = render(variant).unwrap();
        assert_eq!(kinds(&docs), kinds_expected, "{variant}");
        validate(&format!("helm-{variant}"), &text);
        // Everything namespaced is in the release namespace, labelled as
        // part of kube-pulse.
        let namespace = release_namespace(variant);
        for doc in &docs {
            let kind = doc["kind"].as_str().unwrap();
            if !["ClusterRole", "ClusterRoleBinding"].contains(&kind) {
                assert_eq!(doc["metadata"]["namespace"], namespace, "{variant}: {doc}");
            }
            assert_eq!(
                doc["metadata"]["labels"]["app.kubernetes.io/part-of"], "kube-pulse",
                "{variant}: {doc}"
            );
        }
    }
}

/// Each variant's embedded config is accepted by the gateway, its flags
/// parse, and in-cluster callers reach it by its Service's names.
#[test]
fn every_render_embeds_a_config_the_gateway_accepts() {
    if renders().is_none() {
        return;
    }
    for (variant, ..) in variants() {
        let (_, docs) = render(variant).unwrap();
        let service = gateway_service(&docs);
        let name = service["metadata"]["name"].as_str().unwrap();
        let namespace = service["metadata"]["namespace"].as_str().unwrap();
        let config = embedded_config(&format!("helm-{variant}"), named(&docs, "ConfigMap", name));
        assert_eq!(config.listen.unwrap().port(), 8080, "{variant}");
        for host in service_hosts(name, namespace) {
            assert!(
                kube_pulse::http::guard::host_allowed(&host, &config.allowed_hosts),
                "{variant}: {host} is not in allowedHosts"
            );
        }
        let serve = serve_args(&docs);
        assert_eq!(
            serve.config.as_deref(),
            Some(Path::new("/etc/kube-pulse/config.yaml")),
            "{variant}"
        );
        assert_eq!(
            serve.security.auth_settings().mode,
            kube_pulse::auth::ModeName::Kubernetes,
            "{variant}"
        );
        // The ConfigMap is mounted where --config reads it.
        let pod = &find(&docs, "Deployment")["spec"]["template"]["spec"];
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["configMap"]["name"] == name)
            .unwrap_or_else(|| panic!("{variant}: the ConfigMap is no volume"));
        let mount = container(&docs)["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == volume["name"])
            .unwrap();
        assert_eq!(mount["mountPath"], "/etc/kube-pulse", "{variant}");
        // The Service reaches the gateway's pods.
        let labels = &find(&docs, "Deployment")["spec"]["template"]["metadata"]["labels"];
        assert!(selects(&service["spec"]["selector"], labels), "{variant}");
    }
    // `config.extra` reaches the file; `config.allowedHosts` adds to the
    // Service's names; `rbac.extraRules` to the ClusterRole.
    let (_, docs) = render("all").unwrap();
    let config = embedded_config(
        "helm-all-extra",
        named(&docs, "ConfigMap", "pulse-kube-pulse"),
    );
    assert_eq!(config.app_retention_seconds, Some(300));
    assert!(!config.pod_watch.enabled);
    assert!(
        config
            .allowed_hosts
            .contains(&"pulse.example.com".to_string())
    );
    let rules = find(&docs, "ClusterRole")["rules"].as_array().unwrap();
    assert_eq!(rules.last().unwrap()["resources"], json!(["widgets"]));
}

/// Each value of the "options" render, away from its default, lands where
/// values.yaml says.
#[test]
fn every_value_reaches_its_place() {
    let Some((_, docs)) = render("options") else {
        return;
    };
    let deployment = named(&docs, "Deployment", "pulse");
    let pod = &deployment["spec"]["template"];
    let spec = &pod["spec"];
    let gateway = &spec["containers"][0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(gateway["image"], "ghcr.io/kube-pulse/kube-pulse:0.1.1");
    assert_eq!(gateway["imagePullPolicy"], "Always");
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "registry"}]));
    let args = gateway["args"].as_array().unwrap();
    assert_eq!(args[4], "pretty");
    assert_eq!(
        &args[args.len() - 2..],
        [json!("--max-connections"), json!("5000")]
    );
    let env = gateway["env"].as_array().unwrap();
    assert!(env.contains(&json!({"name": "RUST_LOG", "value": "kube_pulse=debug"})));
    assert!(env.contains(&json!({"name": "TZ", "value": "UTC"})));
    assert!(
        spec["volumes"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "tokens", "secret": {"secretName": "pulse-tokens"}}))
    );
    assert!(
        gateway["volumeMounts"].as_array().unwrap().contains(
            &json!({"name": "tokens", "mountPath": "/etc/pulse-tokens", "readOnly": true})
        )
    );
    assert_eq!(
        pod["metadata"]["annotations"]["example.com/team"],
        "platform"
    );
    assert_eq!(pod["metadata"]["labels"]["team"], "platform");
    assert_eq!(spec["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert_eq!(spec["tolerations"][0]["key"], "dedicated");
    assert!(spec["affinity"]["podAntiAffinity"].is_object());
    // The named ServiceAccount, bound to the roles.
    assert_eq!(spec["serviceAccountName"], "pulse-gateway");
    let account = named(&docs, "ServiceAccount", "pulse-gateway");
    assert_eq!(
        account["metadata"]["annotations"]["example.com/role"],
        "pulse"
    );
    for binding in ["ClusterRoleBinding", "RoleBinding"] {
        assert_eq!(find(&docs, binding)["subjects"][0]["name"], "pulse-gateway");
    }
    let service = named(&docs, "Service", "pulse")["spec"].clone();
    assert_eq!(service["type"], "NodePort");
    assert_eq!(service["ports"][0]["port"], 8080);
    assert_eq!(service["sessionAffinity"], "None");
    assert_eq!(
        named(&docs, "Service", "pulse")["metadata"]["annotations"]["example.com/lb"],
        "internal"
    );
    // The config file: the health format, no members of its own, Karpor's
    // kubeconfig under its key in the ConfigMap named, exec plugins run.
    let file = embedded_config("helm-options", named(&docs, "ConfigMap", "pulse"));
    assert_eq!(
        config_yaml(&docs, "pulse")["health"]["format"],
        "kubernetes"
    );
    assert!(file.clusters.is_empty() && file.sync_registries.is_empty());
    let karpor = file.karpor.unwrap();
    assert_eq!(
        karpor.kubeconfig.as_deref(),
        Some(Path::new("/etc/karpor/kubeconfig"))
    );
    assert!(karpor.allow_exec);
    assert!(spec["volumes"].as_array().unwrap().contains(&json!({
        "name": "karpor-kubeconfig",
        "configMap": {"name": "pulse-karpor", "items": [{"key": "kubeconfig", "path": "kubeconfig"}]},
    })));
    // NATS: five servers, three copies, the claim, the store, the user and
    // a Secret of the operator's (none rendered).
    let statefulset = named(&docs, "StatefulSet", "pulse-nats")["spec"].clone();
    assert_eq!(statefulset["replicas"], 5);
    let claim = &statefulset["volumeClaimTemplates"][0]["spec"];
    assert_eq!(claim["storageClassName"], "fast");
    assert_eq!(claim["resources"]["requests"]["storage"], "20Gi");
    let conf = named(&docs, "ConfigMap", "pulse-nats")["data"]["nats.conf"]
        .as_str()
        .unwrap();
    assert!(
        conf.contains("nats://pulse-nats-4.pulse-nats-headless:6222"),
        "{conf}"
    );
    assert!(conf.contains("max_file_store: 16GB"), "{conf}");
    assert!(conf.contains("user: pulse\n"), "{conf}");
    let serve = serve_args(&docs);
    assert_eq!(serve.nats_auth.nats_user.as_deref(), Some("pulse"));
    assert_eq!(serve.nats_stream_replicas, Some(3));
    assert!(!kinds(&docs).contains(&"Secret"));
    let password = &statefulset["template"]["spec"]["containers"][0]["env"][1];
    assert_eq!(password["valueFrom"]["secretKeyRef"]["name"], "pulse-nats");
    assert!(
        spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == "pulse-nats")
    );
    // The operator's signing key Secret, mounted where the flag reads it.
    let signing = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"] == "pulse-nats-signing")
        .expect("the operator's signing key Secret as a volume");
    assert_eq!(
        signing["secret"]["items"],
        json!([{"key": "signing.key", "path": "signing.key"}])
    );
    assert_eq!(
        serve.nats_auth.nats_signing_key_file.as_deref(),
        Some(Path::new("/etc/kube-pulse/nats-signing/signing.key"))
    );
    // Monitoring: the labels Prometheus selects by, the interval.
    for kind in ["PrometheusRule", "ServiceMonitor"] {
        assert_eq!(
            find(&docs, kind)["metadata"]["labels"]["release"],
            "prometheus",
            "{kind}"
        );
    }
    assert_eq!(
        find(&docs, "ServiceMonitor")["spec"]["endpoints"][0]["interval"],
        "15s"
    );
}

// ------------------------------------------------ one source of truth

/// With the default values (release `kube-pulse` in namespace
/// `kube-pulse`) the chart is deploy/'s base: the same config file key for
/// key, the same container (flags, probes, ports, resources, security
/// context, image), pod settings, RBAC rules and Service. The documented
/// differences (charts/kube-pulse/README.md, "Same as deploy/"): Helm's
/// labels (the selector adds `app.kubernetes.io/instance`), the config's
/// checksum annotation, an explicit imagePullPolicy, and no Namespace
/// object (`helm install -n NS --create-namespace`).
#[test]
fn the_default_render_is_deploys_base() {
    let Some((_, docs)) = render("default") else {
        return;
    };
    let base = deploy(&[]);
    assert_eq!(
        config_yaml(&docs, "kube-pulse"),
        config_yaml(&base, "kube-pulse"),
        "the chart's default config.yaml differs from deploy/configmap.yaml's"
    );
    let (ours, theirs) = (container(&docs), container(&base));
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
        assert_eq!(ours[key], theirs[key], "container {key}");
    }
    let pod = |docs: &[Value]| find(docs, "Deployment")["spec"].clone();
    let (ours, theirs) = (pod(&docs), pod(&base));
    assert_eq!(ours["replicas"], theirs["replicas"]);
    for key in [
        "serviceAccountName",
        "terminationGracePeriodSeconds",
        "securityContext",
        "volumes",
    ] {
        assert_eq!(
            ours["template"]["spec"][key], theirs["template"]["spec"][key],
            "pod {key}"
        );
    }
    assert_eq!(
        find(&docs, "ClusterRole")["rules"],
        find(&base, "ClusterRole")["rules"]
    );
    assert_eq!(
        find(&docs, "ClusterRoleBinding")["subjects"],
        find(&base, "ClusterRoleBinding")["subjects"]
    );
    let service = |docs: &[Value]| find(docs, "Service")["spec"].clone();
    let (ours, theirs) = (service(&docs), service(&base));
    assert_eq!(ours["ports"], theirs["ports"]);
    assert_eq!(ours["sessionAffinity"], theirs["sessionAffinity"]);
    assert_eq!(
        find(&docs, "ServiceAccount")["automountServiceAccountToken"],
        find(&base, "ServiceAccount")["automountServiceAccountToken"]
    );
}

/// `replicas.enabled` is deploy/replicas: the same flags and environment
/// (`--lease-in-cluster`, POD_NAME), the same Role on Leases, a PDB of one
/// pod at a time over the gateway's pods, and the base's config.
#[test]
fn the_replicas_block_is_deploys_replicas_component() {
    let Some((_, docs)) = render("replicas") else {
        return;
    };
    let theirs = deploy(&["replicas"]);
    assert_eq!(find(&docs, "Deployment")["spec"]["replicas"], 3);
    assert_eq!(container(&docs)["args"], container(&theirs)["args"]);
    assert_eq!(container(&docs)["env"], container(&theirs)["env"]);
    assert_eq!(find(&docs, "Role")["rules"], find(&theirs, "Role")["rules"]);
    let binding = find(&docs, "RoleBinding");
    assert_eq!(
        binding["roleRef"]["name"],
        find(&docs, "Role")["metadata"]["name"]
    );
    assert_eq!(
        binding["subjects"],
        find(&theirs, "RoleBinding")["subjects"]
    );
    let pdb = find(&docs, "PodDisruptionBudget");
    assert_eq!(
        pdb["spec"]["maxUnavailable"],
        find(&theirs, "PodDisruptionBudget")["spec"]["maxUnavailable"]
    );
    let labels = &find(&docs, "Deployment")["spec"]["template"]["metadata"]["labels"];
    assert!(selects(&pdb["spec"]["selector"]["matchLabels"], labels));
    assert_eq!(
        config_yaml(&docs, "kube-pulse"),
        config_yaml(&deploy(&[]), "kube-pulse")
    );
    let serve = serve_args(&docs);
    assert!(serve.lease_in_cluster && serve.lease_namespace.is_none());
    // The pods spread over nodes as deploy/replicas' do; the selector is
    // the chart's (it adds the instance label) and selects them.
    let spread = |docs: &[Value]| {
        let mut spread =
            find(docs, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"]
                .clone();
        let selector = spread[0]["labelSelector"]["matchLabels"].clone();
        spread[0]["labelSelector"] = Value::Null;
        (spread, selector)
    };
    let ((ours, selector), (theirs, _)) = (spread(&docs), spread(&theirs));
    assert_eq!(ours, theirs);
    assert!(selects(&selector, labels));
    assert!(
        find(&render("default").unwrap().1, "Deployment")["spec"]["template"]["spec"]
            ["topologySpreadConstraints"]
            .is_null()
    );
}

/// `nats.enabled` is deploy/nats: nats.conf byte for byte (so the real
/// nats-server's acceptance of deploy/'s, tests/gateway/deploy.rs, holds
/// for the chart's), the same gateway flags, NATS container, volumes and
/// Services; the Secrets the gateway and the servers read are the chart's,
/// with a random password and signing key unless they are given, and the
/// key is mounted where `--nats-signing-key-file` reads it, in the
/// gateway's pods only.
#[test]
fn the_nats_block_is_deploys_nats_component() {
    let Some((_, docs)) = render("nats") else {
        return;
    };
    let theirs = deploy(&["replicas", "nats"]);
    let conf = |docs: &[Value]| {
        named(docs, "ConfigMap", "kube-pulse-nats")["data"]["nats.conf"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        conf(&docs),
        conf(&theirs),
        "the chart's nats.conf differs from deploy/nats/nats-config.yaml's"
    );
    assert_eq!(container(&docs)["args"], container(&theirs)["args"]);
    let pod = |docs: &[Value]| find(docs, "Deployment")["spec"]["template"]["spec"].clone();
    assert_eq!(pod(&docs)["volumes"], pod(&theirs)["volumes"]);
    assert_eq!(
        container(&docs)["volumeMounts"],
        container(&theirs)["volumeMounts"]
    );
    let statefulset =
        |docs: &[Value]| named(docs, "StatefulSet", "kube-pulse-nats")["spec"].clone();
    let (ours, deploys) = (statefulset(&docs), statefulset(&theirs));
    for key in ["replicas", "serviceName", "podManagementPolicy"] {
        assert_eq!(ours[key], deploys[key], "StatefulSet {key}");
    }
    assert_eq!(
        ours["volumeClaimTemplates"][0]["spec"],
        deploys["volumeClaimTemplates"][0]["spec"]
    );
    let (ours_pod, deploys_pod) = (&ours["template"]["spec"], &deploys["template"]["spec"]);
    for key in [
        "automountServiceAccountToken",
        "terminationGracePeriodSeconds",
        "securityContext",
        "volumes",
        "topologySpreadConstraints",
    ] {
        assert_eq!(ours_pod[key], deploys_pod[key], "NATS pod {key}");
    }
    let (ours_c, deploys_c) = (&ours_pod["containers"][0], &deploys_pod["containers"][0]);
    for key in [
        "image",
        "command",
        "env",
        "ports",
        "startupProbe",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
    ] {
        assert_eq!(ours_c[key], deploys_c[key], "NATS container {key}");
    }
    for name in ["kube-pulse-nats", "kube-pulse-nats-headless"] {
        let (a, b) = (
            &named(&docs, "Service", name)["spec"],
            &named(&theirs, "Service", name)["spec"],
        );
        assert_eq!(a["ports"], b["ports"], "{name}");
        assert_eq!(a["clusterIP"], b["clusterIP"], "{name}");
        assert!(
            selects(&a["selector"], &ours["template"]["metadata"]["labels"]),
            "{name}"
        );
    }
    // The NetworkPolicy: the gateway's pods on the client port, the NATS
    // pods on the route port.
    let policy = &named(&docs, "NetworkPolicy", "kube-pulse-nats")["spec"];
    let gateway_labels = &find(&docs, "Deployment")["spec"]["template"]["metadata"]["labels"];
    let nats_labels = &ours["template"]["metadata"]["labels"];
    assert!(selects(&policy["podSelector"]["matchLabels"], nats_labels));
    let ingress = policy["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 2);
    assert_eq!(
        ingress[0]["ports"],
        json!([{"port": 4222, "protocol": "TCP"}])
    );
    assert!(selects(
        &ingress[0]["from"][0]["podSelector"]["matchLabels"],
        gateway_labels
    ));
    assert!(!selects(
        &ingress[0]["from"][0]["podSelector"]["matchLabels"],
        nats_labels
    ));
    assert_eq!(
        ingress[1]["ports"],
        json!([{"port": 6222, "protocol": "TCP"}])
    );
    assert!(selects(
        &ingress[1]["from"][0]["podSelector"]["matchLabels"],
        nats_labels
    ));
    let pdb = named(&docs, "PodDisruptionBudget", "kube-pulse-nats");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(selects(
        &pdb["spec"]["selector"]["matchLabels"],
        nats_labels
    ));
    // The password: random and long by default, the given one otherwise.
    let secret = named(&docs, "Secret", "kube-pulse-nats-auth");
    let password = secret["stringData"]["password"].as_str().unwrap();
    assert!(password.len() >= 32, "{password}");
    assert!(!password.contains("REPLACE"), "{password}");
    let (_, all) = render("all").unwrap();
    let secret = named(&all, "Secret", "pulse-kube-pulse-nats-auth");
    assert_eq!(secret["stringData"]["password"], "a-password");
    // The signing key: random and long by default, the given one otherwise.
    let key = named(&docs, "Secret", "kube-pulse-nats-signing")["stringData"]["signing.key"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(key.len() >= 64, "{key}");
    assert!(!key.contains("REPLACE"), "{key}");
    let secret = named(&all, "Secret", "pulse-kube-pulse-nats-signing");
    assert_eq!(secret["stringData"]["signing.key"], GIVEN_SIGNING_KEY);
    // It is mounted where the flag points (0440, the pod's group reads
    // it), from the chart's Secret, in the gateway's pods and not in the
    // NATS servers'.
    let serve = serve_args(&docs);
    let key_file = serve
        .nats_auth
        .nats_signing_key_file
        .clone()
        .expect("--nats-signing-key-file");
    assert_eq!(
        key_file,
        Path::new("/etc/kube-pulse/nats-signing/signing.key")
    );
    let gateway_pod = &find(&docs, "Deployment")["spec"]["template"]["spec"];
    let mount = container(&docs)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| Path::new(m["mountPath"].as_str().unwrap()) == key_file.parent().unwrap())
        .expect("the signing key is mounted");
    assert_eq!(mount["readOnly"], true);
    let volume = gateway_pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(
        volume["secret"],
        json!({
            "secretName": "kube-pulse-nats-signing",
            "items": [{"key": "signing.key", "path": "signing.key"}],
            "defaultMode": 0o440,
        })
    );
    let nats_pod = named(&docs, "StatefulSet", "kube-pulse-nats").to_string();
    assert!(!nats_pod.contains("nats-signing"), "{nats_pod}");
    // The gateway logs in as the user nats.conf admits, with the mounted
    // password, to the client Service, and signs with the mounted key: its
    // own parsers take the rendered flags, with files here in place of the
    // Secrets' (the chart's own key and password).
    let mut serve = serve;
    serve.nats_auth.nats_password_file = Some(rendered_file("helm-nats-password", password));
    serve.nats_auth.nats_signing_key_file = Some(rendered_file("helm-nats-signing", &key));
    let settings = serve
        .nats_with_env(None, &|_| None)
        .unwrap()
        .expect("--nats");
    assert_eq!(settings.url, "nats://kube-pulse-nats:4222");
    assert_eq!(settings.replicas, 3);
    assert_eq!(settings.auth.describe(), "user kube-pulse");
    assert!(settings.check_integrity().is_ok(), "{settings:?}");
    assert_eq!(
        settings.signing,
        Some(kube_pulse::scale::SigningKey::from_bytes(key.as_bytes()).unwrap())
    );
    assert!(!settings.insecure_unsigned);
    // The given key, in the "all" render's Secret, is the one it signs with.
    let mut serve = serve_args(&all);
    serve.nats_auth.nats_password_file =
        Some(rendered_file("helm-all-nats-password", "a-password"));
    serve.nats_auth.nats_signing_key_file =
        Some(rendered_file("helm-all-nats-signing", GIVEN_SIGNING_KEY));
    let settings = serve
        .nats_with_env(None, &|_| None)
        .unwrap()
        .expect("--nats");
    assert_eq!(
        settings.signing,
        Some(kube_pulse::scale::SigningKey::from_bytes(GIVEN_SIGNING_KEY.as_bytes()).unwrap())
    );
    // Under another release name the names follow it, consistently.
    let serve = serve_args(&all);
    assert_eq!(
        serve.nats.as_ref().map(|u| u.0.as_str()),
        Some("nats://pulse-kube-pulse-nats:4222")
    );
    let conf = named(&all, "ConfigMap", "pulse-kube-pulse-nats")["data"]["nats.conf"]
        .as_str()
        .unwrap();
    assert!(
        conf.contains("nats://pulse-kube-pulse-nats-2.pulse-kube-pulse-nats-headless:6222"),
        "{conf}"
    );
}

// ------------------------------------------------------------- karpor

/// `karpor.enabled` mounts Karpor's kubeconfig ConfigMap (its chart's
/// `karpor-kubeconfig`, key `config`) and names the mounted file in the
/// config's `karpor:` block, which the gateway turns into its Karpor
/// settings: a status writer, unless `karpor.readOnly`; the endpoint
/// policy's blocks as given. One replica by default (one status writer).
#[test]
fn karpor_mounts_its_kubeconfig_and_turns_the_integration_on() {
    let Some((_, docs)) = render("karpor") else {
        return;
    };
    assert_eq!(find(&docs, "Deployment")["spec"]["replicas"], 1);
    let pod = &find(&docs, "Deployment")["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["configMap"]["name"] == "karpor-kubeconfig")
        .expect("Karpor's kubeconfig ConfigMap as a volume");
    assert_eq!(
        volume["configMap"]["items"],
        json!([{"key": "config", "path": "config"}])
    );
    let mount = container(&docs)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("mounted");
    assert_eq!(mount["readOnly"], true);
    let file = embedded_config("helm-karpor", named(&docs, "ConfigMap", "kube-pulse"));
    let karpor = file.karpor.clone().expect("a karpor: block");
    let mounted = Path::new(mount["mountPath"].as_str().unwrap()).join("config");
    assert_eq!(karpor.kubeconfig.as_deref(), Some(mounted.as_path()));
    // The gateway's Karpor settings, with a kubeconfig here in place of the
    // mounted one (the gateway opens it at start).
    let settings = |docs: &[Value], file: &kube_pulse::config::FileConfig| {
        let mut karpor = file.karpor.clone().unwrap();
        karpor.kubeconfig = Some(rendered_file(
            "helm-karpor-kubeconfig",
            "apiVersion: v1\nkind: Config\n",
        ));
        serve_args(docs)
            .karpor(Some(&karpor))
            .unwrap()
            .expect("Karpor is on")
    };
    let on = settings(&docs, &file);
    assert!(on.status.is_some(), "status is written back");
    assert!(on.endpoints.allow.is_empty() && on.endpoints.deny.is_empty());
    assert_eq!(on.context, None);
    // The host member stays beside Karpor's (config.clusters).
    assert_eq!(file.clusters[0].name, "host");

    let (_, all) = render("all").unwrap();
    let file = embedded_config(
        "helm-all-karpor",
        named(&all, "ConfigMap", "pulse-kube-pulse"),
    );
    let on = settings(&all, &file);
    let blocks = |b: &[kube_pulse::http_settings::Cidr]| -> Vec<String> {
        b.iter().map(ToString::to_string).collect()
    };
    assert_eq!(blocks(&on.endpoints.allow), ["10.0.0.0/8"]);
    assert_eq!(
        blocks(&on.endpoints.deny),
        ["10.96.0.0/12", "192.168.0.0/16"]
    );
    assert_eq!(on.context.as_deref(), Some("karpor"));
    // With Leases, as many replicas as asked, each writing what it owns.
    assert_eq!(find(&all, "Deployment")["spec"]["replicas"], 4);
    assert!(serve_args(&all).lease_in_cluster);

    let (_, read_only) = render("karpor-read-only").unwrap();
    let file = embedded_config(
        "helm-karpor-ro",
        named(&read_only, "ConfigMap", "kube-pulse"),
    );
    assert!(
        settings(&read_only, &file).status.is_none(),
        "karpor.readOnly writes nothing"
    );
    assert_eq!(find(&read_only, "Deployment")["spec"]["replicas"], 2);
}

// ------------------------------------------------------------- monitoring

/// The PrometheusRule carries deploy/'s rules file unchanged, the
/// ServiceMonitor scrapes the Service's port under the job KubePulseDown
/// expects whatever the release is called, and the dashboard is deploy/'s.
#[test]
fn the_monitoring_block_is_deploys_rules_and_dashboard() {
    let monitoring = Path::new(ROOT).join("deploy/monitoring");
    // The chart's copies (a chart reads only its own files) are deploy/'s.
    for (ours, theirs) in [
        ("files/kube-pulse.rules.yaml", "kube-pulse.rules.yaml"),
        ("files/grafana-dashboard.json", "grafana-dashboard.json"),
    ] {
        assert_eq!(
            chart_file(ours),
            std::fs::read_to_string(monitoring.join(theirs)).unwrap(),
            "charts/kube-pulse/{ours} differs from deploy/monitoring/{theirs}: copy it"
        );
    }
    let Some((_, docs)) = render("all") else {
        return;
    };
    let rules: Value = serde_yaml_ng::from_str(&chart_file("files/kube-pulse.rules.yaml")).unwrap();
    assert_eq!(find(&docs, "PrometheusRule")["spec"], rules);
    let monitor = find(&docs, "ServiceMonitor");
    let service = gateway_service(&docs);
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        service["spec"]["ports"][0]["name"]
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    // The job is the Service's label named by jobLabel: `kube-pulse`, as
    // the rules' `up{job="kube-pulse"}` expects, though the release (and
    // the Service) is `pulse-kube-pulse`.
    assert_eq!(service["metadata"]["name"], "pulse-kube-pulse");
    let job_label = monitor["spec"]["jobLabel"].as_str().unwrap();
    let job = service["metadata"]["labels"][job_label].as_str().unwrap();
    assert!(
        chart_file("files/kube-pulse.rules.yaml").contains(&format!("up{{job=\"{job}\"}}")),
        "{job}"
    );
    let dashboard = named(&docs, "ConfigMap", "pulse-kube-pulse-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json_text = dashboard["data"]["kube-pulse.json"].as_str().unwrap();
    let ours: Value = serde_json::from_str(json_text).unwrap();
    let theirs: Value = serde_json::from_str(&chart_file("files/grafana-dashboard.json")).unwrap();
    assert_eq!(ours, theirs);
}

// ------------------------------------------------------------- TLS

/// `tls.secretName` mounts the Secret read-only (no subPath: the gateway
/// reloads renewed files), passes `--tls-cert`/`--tls-key` at its files,
/// turns both probes to HTTPS, and the ServiceMonitor scrapes with
/// `scheme: https`, checking the certificate against the Service's name
/// with the given CA; without it, everything stays HTTP.
#[test]
fn tls_serves_https_and_the_probes_and_scrapes_follow() {
    let Some((_, docs)) = render("tls") else {
        return;
    };
    let gateway = container(&docs);
    let args: Vec<&str> = gateway["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let flag = |name: &str| {
        let at = args
            .iter()
            .position(|a| *a == name)
            .unwrap_or_else(|| panic!("no {name}"));
        Path::new(args[at + 1]).to_path_buf()
    };
    let (cert, key) = (flag("--tls-cert"), flag("--tls-key"));
    assert_eq!(cert.parent(), key.parent());
    let mount = gateway["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| Path::new(m["mountPath"].as_str().unwrap()) == cert.parent().unwrap())
        .expect("the certificate's directory is mounted");
    assert_eq!(mount["readOnly"], true);
    assert!(mount["subPath"].is_null(), "a subPath freezes the files");
    let volume = find(&docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(volume["secret"]["secretName"], "kube-pulse-tls");
    let items: Vec<&str> = volume["secret"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].as_str().unwrap())
        .collect();
    for file in [&cert, &key] {
        let name = file.file_name().unwrap().to_str().unwrap();
        assert!(items.contains(&name), "{name} not in {items:?}");
    }
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(gateway[probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
    }
    let endpoint = &find(&docs, "ServiceMonitor")["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(
        endpoint["tlsConfig"],
        json!({
            "serverName": "kube-pulse.kube-pulse.svc",
            "ca": {"secret": {"name": "kube-pulse-tls", "key": "ca.crt"}},
            "insecureSkipVerify": false,
        })
    );
    // Without tls.secretName: HTTP, no TLS flag.
    let (_, plain) = render("monitoring").unwrap();
    let plain_container = container(&plain);
    assert!(!plain_container["args"].to_string().contains("--tls"));
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(
            plain_container[probe]["httpGet"]["scheme"], "HTTP",
            "{probe}"
        );
    }
    let endpoint = &find(&plain, "ServiceMonitor")["spec"]["endpoints"][0];
    assert!(endpoint["scheme"].is_null() && endpoint["tlsConfig"].is_null());
}

/// With `auth: kubernetes` the ServiceMonitor sends Prometheus's own
/// service-account token, and the named Prometheus account is granted
/// `get` on the non-resource URL /metrics (what the gateway's
/// SubjectAccessReview asks); no account named: no grant (NOTES warns).
#[test]
fn prometheus_scrapes_metrics_with_its_token_and_a_grant() {
    let Some((_, docs)) = render("tls") else {
        return;
    };
    let endpoint = &find(&docs, "ServiceMonitor")["spec"]["endpoints"][0];
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    let role = named(&docs, "ClusterRole", "kube-pulse-kube-pulse-metrics");
    assert_eq!(
        role["rules"],
        json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    let binding = named(&docs, "ClusterRoleBinding", "kube-pulse-kube-pulse-metrics");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "kps-kube-prometheus-prometheus", "namespace": "monitoring"}])
    );
    let rendered = &renders().unwrap()["monitoring"];
    let monitoring = documents(&rendered.manifests);
    assert_eq!(
        find(&monitoring, "ServiceMonitor")["spec"]["endpoints"][0]["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    assert_eq!(
        monitoring
            .iter()
            .filter(|d| d["kind"] == "ClusterRole")
            .count(),
        1,
        "no Prometheus account named: the gateway's ClusterRole only"
    );
    assert!(
        rendered.notes.contains("every scrape is refused"),
        "{}",
        rendered.notes
    );
}

/// With `auth: tokens` or `jwt` /metrics takes a bearer token with the `*`
/// read grant only (no service-account token to review): the
/// ServiceMonitor sends the one of `monitoring.serviceMonitor.
/// bearerTokenSecret` as its `authorization` (from the Secret's key, no
/// `bearerTokenFile`), and without it the render is refused with the
/// reason. With `auth: kubernetes` the Secret's token replaces
/// Prometheus's own, and the grant still goes to the named account.
#[test]
fn the_service_monitor_sends_a_token_from_a_secret_in_every_auth_mode() {
    let Some(helm) = Helm::find_or_skip() else {
        return;
    };
    let monitor = |auth: &str, secret: Value| {
        json!({
            "auth": auth,
            "monitoring": {
                "serviceMonitor": {"enabled": true, "bearerTokenSecret": secret},
                "prometheus": {"serviceAccount": {"name": "metrics-reader", "namespace": "monitoring"}},
            },
        })
    };
    let cases: Vec<(Value, Value)> = vec![
        (
            monitor("tokens", json!({"name": "kube-pulse-metrics-token"})),
            json!({"type": "Bearer", "credentials": {"name": "kube-pulse-metrics-token", "key": "token"}}),
        ),
        (
            monitor(
                "jwt",
                json!({"name": "kube-pulse-metrics-jwt", "key": "jwt"}),
            ),
            json!({"type": "Bearer", "credentials": {"name": "kube-pulse-metrics-jwt", "key": "jwt"}}),
        ),
        (
            monitor("kubernetes", json!({"name": "metrics-reader-token"})),
            json!({"type": "Bearer", "credentials": {"name": "metrics-reader-token", "key": "token"}}),
        ),
    ];
    let jobs: Vec<Render> = cases.iter().map(|(values, _)| release(values)).collect();
    for ((values, authorization), result) in cases.iter().zip(helm.render(&chart(), &jobs)) {
        let rendered = result.unwrap_or_else(|e| panic!("{values}: {e}"));
        let docs = documents(&rendered.manifests);
        let endpoint = &find(&docs, "ServiceMonitor")["spec"]["endpoints"][0];
        assert_eq!(&endpoint["authorization"], authorization, "{values}");
        assert!(
            endpoint["bearerTokenFile"].is_null(),
            "{values}: {endpoint}"
        );
        let metrics_grants = docs
            .iter()
            .filter(|d| d["kind"] == "ClusterRoleBinding")
            .filter(|d| d["subjects"][0]["name"] == "metrics-reader")
            .count();
        if values["auth"] == "kubernetes" {
            // The token's account may `get` /metrics, as the gateway's
            // SubjectAccessReview asks.
            assert_eq!(metrics_grants, 1, "{values}");
        } else {
            // No review to answer: the token's `*` read grant is all.
            assert_eq!(metrics_grants, 0, "{values}");
            assert!(
                rendered.notes.contains("`*` read grant"),
                "{}",
                rendered.notes
            );
        }
    }
    // Prometheus's own token, and no `authorization`, by default.
    if let Some((_, docs)) = render("monitoring") {
        let endpoint = &find(&docs, "ServiceMonitor")["spec"]["endpoints"][0];
        assert!(endpoint["authorization"].is_null(), "{endpoint}");
        assert_eq!(
            endpoint["bearerTokenFile"],
            "/var/run/secrets/kubernetes.io/serviceaccount/token"
        );
    }
    // Without a token under tokens or jwt every scrape would be refused:
    // the render is, with the reason; a key must be named.
    let refused: Vec<(Value, &str)> = vec![
        (
            json!({"auth": "tokens", "monitoring": {"serviceMonitor": {"enabled": true}}}),
            "monitoring.serviceMonitor.bearerTokenSecret: with auth tokens, /metrics needs a bearer token with the `*` read grant",
        ),
        (
            json!({"auth": "jwt", "monitoring": {"serviceMonitor": {"enabled": true}}}),
            "monitoring.serviceMonitor.bearerTokenSecret: with auth jwt, /metrics needs a bearer token with the `*` read grant",
        ),
        (
            monitor(
                "tokens",
                json!({"name": "kube-pulse-metrics-token", "key": ""}),
            ),
            "/monitoring/serviceMonitor/bearerTokenSecret/key",
        ),
        (
            monitor(
                "tokens",
                json!({"name": "kube-pulse-metrics-token", "optional": true}),
            ),
            "'optional' not allowed",
        ),
    ];
    assert_refused(&helm, &refused);
    // Monitoring off: no token needed whatever the auth mode.
    let off = helm.render(&chart(), &[release(&json!({"auth": "tokens"}))]);
    assert!(off[0].is_ok(), "{:?}", off[0]);
}

// ------------------------------------------------------------- RBAC

/// The gateway's ClusterRole grants the host member's reads only when a
/// `config.clusters` entry reaches the host through the pod's service
/// account, the tasks' writes only then and with `rbac.tasks`, and the
/// reviews with `auth: kubernetes`; no `create` on StatefulSets (a Create
/// task makes a Deployment); cluster-wide names carry the namespace.
#[test]
fn the_cluster_role_grants_only_what_the_members_and_tasks_use() {
    if renders().is_none() {
        return;
    }
    let rules = |variant: &str| -> Vec<Value> {
        let (_, docs) = render(variant).unwrap();
        find(&docs, "ClusterRole")["rules"]
            .as_array()
            .unwrap()
            .clone()
    };
    let grants = |rules: &[Value], resource: &str, verb: &str| {
        rules.iter().any(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|rs| rs.contains(&json!(resource)))
                && r["verbs"].as_array().unwrap().contains(&json!(verb))
        })
    };
    let reviews = json!([
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    ]);
    // The host member, tasks on (the default): reads and writes.
    let default = rules("default");
    assert!(grants(&default, "pods", "watch") && grants(&default, "nodes", "list"));
    assert!(grants(&default, "deployments", "create") && grants(&default, "namespaces", "delete"));
    assert!(!grants(&default, "statefulsets", "create"));
    // rbac.tasks=false: the reads, and no write but the reviews.
    let no_tasks = rules("no-tasks");
    assert!(grants(&no_tasks, "pods", "watch"));
    for verb in ["patch", "delete", "update"] {
        assert!(
            !no_tasks
                .iter()
                .any(|r| r["verbs"].as_array().unwrap().contains(&json!(verb))),
            "{verb}: {no_tasks:?}"
        );
    }
    assert_eq!(
        &no_tasks[no_tasks.len() - 2..],
        &reviews.as_array().unwrap()[..]
    );
    // Karpor's members only (config.clusters=[]): the reviews alone.
    assert_eq!(json!(rules("options")), reviews);
    let (_, options) = render("options").unwrap();
    assert_eq!(
        find(&options, "ClusterRole")["metadata"]["name"],
        "pulse-karpor"
    );
    let (_, all) = render("all").unwrap();
    for kind in ["ClusterRole", "ClusterRoleBinding"] {
        assert_eq!(
            find(&all, kind)["metadata"]["name"],
            "pulse-kube-pulse-karpor"
        );
    }
    assert_eq!(
        find(&all, "ClusterRoleBinding")["roleRef"]["name"],
        "pulse-kube-pulse-karpor"
    );
}

// ------------------------------------------------------------- names

/// The longest release name Helm takes (53 characters).
pub(crate) const LONG_RELEASE: &str = "a-release-name-of-fifty-three-characters-in-all-of-it";
/// The longest namespace name Kubernetes takes (a DNS label, 63).
pub(crate) const LONG_NAMESPACE: &str =
    "a-namespace-as-long-as-kubernetes-allows-which-is-63-characters";

/// Whether `value` is a valid label value: at most 63 characters of
/// alphanumerics, `-`, `_` and `.`, beginning and ending with an
/// alphanumeric, or empty.
fn label_value_ok(value: &str) -> bool {
    let alphanumeric = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && alphanumeric(value.chars().next())
            && alphanumeric(value.chars().last()))
}

/// Whether `name` is a DNS label (RFC 1123): at most 63 lower-case
/// alphanumerics and `-`, beginning and ending with an alphanumeric; a
/// Service's name (beginning with a letter, RFC 1035) and a pod's host
/// name must be one.
fn dns_label_ok(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Every label under `value` (each `labels` and `matchLabels` map): where,
/// its key and its value.
fn labels_under(value: &Value, at: &str, out: &mut Vec<(String, String, Value)>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let path = format!("{at}.{key}");
                if key == "labels" || key == "matchLabels" {
                    for (label, v) in child.as_object().into_iter().flatten() {
                        out.push((path.clone(), label.clone(), v.clone()));
                    }
                }
                labels_under(child, &path, out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                labels_under(item, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Asserts that every name and label value of `docs` is within
/// Kubernetes' limits: each object's name a DNS label (so at most 63
/// characters), a StatefulSet's at most 52 (its pods' controller-revision-
/// hash label is its name and a hash of up to 10 characters), a Service's
/// beginning with a letter; every label value, of the objects, their pod
/// templates and claims, and every selector, valid; no two objects of a
/// kind named alike.
pub(crate) fn assert_names_within_limits(what: &str, docs: &[Value]) {
    let mut seen = BTreeSet::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        assert!(seen.insert((kind, name)), "{what}: two {kind}s {name}");
        assert!(
            dns_label_ok(name),
            "{what}: {kind} {name} ({} characters) is no DNS label",
            name.len()
        );
        if kind == "StatefulSet" {
            assert!(
                name.len() <= 52,
                "{what}: StatefulSet {name} ({} characters) leaves no room for its pods' controller-revision-hash",
                name.len()
            );
        }
        if kind == "Service" {
            assert!(
                name.starts_with(|c: char| c.is_ascii_lowercase()),
                "{what}: Service {name}"
            );
        }
        let mut labels = Vec::new();
        labels_under(&doc["metadata"], ".metadata", &mut labels);
        // A PrometheusRule's spec holds alert labels, not Kubernetes'.
        if kind != "PrometheusRule" {
            labels_under(&doc["spec"], ".spec", &mut labels);
        }
        if kind == "Service" {
            for (label, v) in doc["spec"]["selector"].as_object().into_iter().flatten() {
                labels.push((".spec.selector".into(), label.clone(), v.clone()));
            }
        }
        for (at, label, value) in labels {
            assert!(
                value.as_str().is_some_and(label_value_ok),
                "{what}: {kind} {name}{at}: {label}={value}"
            );
        }
    }
}

/// With the longest release name Helm takes, in the longest namespace,
/// every block on: every name and label value within Kubernetes' limits
/// (the NATS StatefulSet's name within 52, its Services', ConfigMap's,
/// Secrets' and labels' within 63), no object named as another of its kind
/// (the NATS Service, ConfigMap and PodDisruptionBudget as the gateway's,
/// as a plain cut of `FULLNAME-nats` gave), the names made from one another
/// still meeting (the gateway's NATS URL, the StatefulSet's Service and
/// pods in nats.conf's routes, the Secrets the pods read, every roleRef),
/// and valid for Kubernetes' schemas. Two long releases cut alike keep
/// their own names, and one release in two namespaces its own
/// cluster-wide ones.
#[test]
fn long_release_names_keep_every_name_within_kubernetes_limits() {
    let Some(helm) = Helm::find_or_skip() else {
        return;
    };
    let values = json!({
        "replicas": {"enabled": true},
        "nats": {
            "enabled": true,
            "auth": {"password": "a-password"},
            "signing": {"key": GIVEN_SIGNING_KEY},
        },
        "monitoring": {
            "prometheusRule": {"enabled": true},
            "serviceMonitor": {"enabled": true},
            "grafanaDashboard": {"enabled": true},
            "prometheus": {"serviceAccount": {"name": "kps-kube-prometheus-prometheus", "namespace": "monitoring"}},
        },
    });
    // The same name but its last character: cut, the two read alike.
    let twin = format!("{}x", &LONG_RELEASE[..LONG_RELEASE.len() - 1]);
    assert_eq!(LONG_RELEASE.len(), 53);
    assert_eq!(LONG_NAMESPACE.len(), 63);
    let jobs = releases(
        &values,
        &[
            (LONG_RELEASE, LONG_NAMESPACE),
            (twin.as_str(), LONG_NAMESPACE),
            (LONG_RELEASE, "kube-pulse"),
        ],
    );
    let long: Vec<Vec<Value>> = helm
        .render(&chart(), &jobs)
        .into_iter()
        .zip(&jobs)
        .enumerate()
        .map(|(i, (result, job))| {
            let rendered =
                result.unwrap_or_else(|e| panic!("{} in {}: {e}", job.name, job.namespace));
            validate(&format!("helm-long-{i}"), &rendered.manifests);
            documents(&rendered.manifests)
        })
        .collect();
    for (docs, job) in long.iter().zip(&jobs) {
        let what = format!("{} in {}", job.name, job.namespace);
        assert_names_within_limits(&what, docs);
        // The NATS servers: their Service, pods and routes.
        let statefulset = find(docs, "StatefulSet");
        let nats = statefulset["metadata"]["name"].as_str().unwrap();
        let headless = statefulset["spec"]["serviceName"].as_str().unwrap();
        let nats_pods = &statefulset["spec"]["template"]["metadata"]["labels"];
        let governing = named(docs, "Service", headless);
        assert_eq!(governing["spec"]["clusterIP"], "None", "{what}");
        assert!(selects(&governing["spec"]["selector"], nats_pods), "{what}");
        let conf = named(docs, "ConfigMap", nats)["data"]["nats.conf"]
            .as_str()
            .unwrap();
        for i in 0..3 {
            let pod = format!("{nats}-{i}");
            assert!(dns_label_ok(&pod), "{what}: pod {pod}");
            let route = format!("nats://{pod}.{headless}:6222");
            assert!(conf.contains(&route), "{what}: no {route} in {conf}");
        }
        assert_eq!(
            statefulset["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"], nats,
            "{what}"
        );
        // The gateway reaches them through their client Service, not its own.
        let serve = serve_args(docs);
        let url = serve.nats.as_ref().map(|u| u.0.clone()).expect("--nats");
        let client = url
            .strip_prefix("nats://")
            .and_then(|u| u.strip_suffix(":4222"))
            .unwrap_or_else(|| panic!("{what}: {url}"));
        let client_service = named(docs, "Service", client);
        assert!(
            selects(&client_service["spec"]["selector"], nats_pods),
            "{what}"
        );
        let gateway = find(docs, "Deployment");
        assert!(
            !selects(
                &client_service["spec"]["selector"],
                &gateway["spec"]["template"]["metadata"]["labels"]
            ),
            "{what}"
        );
        assert!(selects(
            &gateway_service(docs)["spec"]["selector"],
            &gateway["spec"]["template"]["metadata"]["labels"]
        ));
        // Every Secret the pods read is one of the render's.
        let secrets: Vec<&str> = docs
            .iter()
            .filter(|d| d["kind"] == "Secret")
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(secrets.len(), 2, "{what}");
        let password = &statefulset["spec"]["template"]["spec"]["containers"][0]["env"][1];
        assert!(
            secrets.contains(
                &password["valueFrom"]["secretKeyRef"]["name"]
                    .as_str()
                    .unwrap()
            ),
            "{what}: {password}"
        );
        for volume in gateway["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap()
        {
            if let Some(secret) = volume["secret"]["secretName"].as_str() {
                assert!(secrets.contains(&secret), "{what}: {secret}");
            }
        }
        // Every binding refers to a role of the render.
        for binding in docs.iter().filter(|d| {
            ["RoleBinding", "ClusterRoleBinding"].contains(&d["kind"].as_str().unwrap())
        }) {
            let role = &binding["roleRef"];
            named(
                docs,
                role["kind"].as_str().unwrap(),
                role["name"].as_str().unwrap(),
            );
        }
    }
    let names_of = |docs: &[Value], kind: &str| -> Vec<String> {
        docs.iter()
            .filter(|d| d["kind"] == kind)
            .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    // Two releases in one namespace: each its own NATS objects.
    for kind in ["StatefulSet", "Service", "ConfigMap", "Secret", "Role"] {
        let (a, b) = (names_of(&long[0], kind), names_of(&long[1], kind));
        assert!(a.iter().all(|n| !b.contains(n)), "{kind}: {a:?} and {b:?}");
    }
    // One release in two namespaces: each its own cluster-wide objects.
    for kind in ["ClusterRole", "ClusterRoleBinding"] {
        let (a, b) = (names_of(&long[0], kind), names_of(&long[2], kind));
        assert_eq!(a.len(), 2, "{kind}: {a:?}");
        assert!(a.iter().all(|n| !b.contains(n)), "{kind}: {a:?} and {b:?}");
    }
    // Names that fit are not touched: the default render's.
    if let Some((_, docs)) = render("nats") {
        assert_names_within_limits("nats", &docs);
        assert_eq!(names_of(&docs, "StatefulSet"), ["kube-pulse-nats"]);
        let mut services = names_of(&docs, "Service");
        services.sort();
        assert_eq!(
            services,
            ["kube-pulse", "kube-pulse-nats", "kube-pulse-nats-headless"]
        );
        assert_eq!(names_of(&docs, "ClusterRole"), ["kube-pulse-kube-pulse"]);
    }
}

// ------------------------------------------------------------- podLabels

/// Every document of `text` parsed by serde_yaml_ng's own Value, which
/// refuses a key twice in one mapping (serde_json's map, which
/// `documents` fills, keeps the last one silently).
fn strict_yaml(text: &str) -> Result<(), String> {
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        <serde_yaml_ng::Value as serde::Deserialize>::deserialize(document)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `podLabels` may repeat a selector label with the chart's own value,
/// which is then written once (a key twice in one mapping is invalid
/// YAML: some parsers refuse it, others keep either), and may not change
/// one (the Deployment would not select its own pods): refused with the
/// reason, for the gateway's pods and for the agent's.
#[test]
fn pod_labels_keep_the_selector_labels_the_charts() {
    let Some(helm) = Helm::find_or_skip() else {
        return;
    };
    let agent = |labels: Value| {
        json!({
            "agent": {
                "enabled": true,
                "member": "edge-1",
                "nats": {"url": "nats://hub:4222"},
                "existingSecret": "edge-1-seed",
            },
            "podLabels": labels,
        })
    };
    let same = json!({
        "app.kubernetes.io/name": "kube-pulse",
        "app.kubernetes.io/instance": "kube-pulse",
        "team": "platform",
    });
    let accepted = [json!({"podLabels": same}), agent(same.clone())];
    let refused: Vec<(Value, &str)> = vec![
        (
            json!({"podLabels": {"app.kubernetes.io/name": "pulse", "team": "platform"}}),
            "podLabels: app.kubernetes.io/name is a selector label the chart sets to kube-pulse, not pulse",
        ),
        (
            json!({"podLabels": {"app.kubernetes.io/instance": "other"}}),
            "podLabels: app.kubernetes.io/instance is a selector label the chart sets to kube-pulse, not other",
        ),
        (
            agent(json!({"app.kubernetes.io/name": "kube-pulse-agent"})),
            "podLabels: app.kubernetes.io/name is a selector label the chart sets to kube-pulse, not kube-pulse-agent",
        ),
    ];
    let jobs: Vec<Render> = accepted.iter().map(release).collect();
    for (values, result) in accepted.iter().zip(helm.render(&chart(), &jobs)) {
        let rendered = result.unwrap_or_else(|e| panic!("{values}: {e}"));
        strict_yaml(&rendered.manifests).unwrap_or_else(|e| panic!("{values}: {e}"));
        let docs = documents(&rendered.manifests);
        let deployment = find(&docs, "Deployment");
        let labels = &deployment["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels, &same, "{values}");
        assert!(
            selects(&deployment["spec"]["selector"]["matchLabels"], labels),
            "{values}"
        );
    }
    assert_refused(&helm, &refused);
}

// ------------------------------------------------------------- kubectl

/// Every render applies to the simulator with kubectl (the Prometheus
/// Operator's kinds served as if their CRDs were installed), into a
/// namespace made first as `helm install --create-namespace` does, beside
/// Karpor's kubeconfig ConfigMap for the Karpor variants, as Karpor's
/// chart leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_every_render_to_the_simulator() {
    if renders().is_none() {
        return;
    }
    let expected: [(&str, &str, &str, &[&str]); 4] = [
        (
            "default",
            "kube-pulse",
            "2",
            &["configmap/kube-pulse", "service/kube-pulse"],
        ),
        (
            "karpor",
            "kube-pulse",
            "1",
            &[
                "configmap/karpor-kubeconfig",
                "configmap/kube-pulse",
                "service/kube-pulse",
            ],
        ),
        (
            "nats",
            "kube-pulse",
            "3",
            &[
                "configmap/kube-pulse",
                "configmap/kube-pulse-nats",
                "networkpolicy.networking.k8s.io/kube-pulse-nats",
                "poddisruptionbudget.policy/kube-pulse",
                "poddisruptionbudget.policy/kube-pulse-nats",
                "role.rbac.authorization.k8s.io/kube-pulse-leases",
                "secret/kube-pulse-nats-auth",
                "secret/kube-pulse-nats-signing",
                "service/kube-pulse",
                "service/kube-pulse-nats",
                "service/kube-pulse-nats-headless",
                "statefulset.apps/kube-pulse-nats",
            ],
        ),
        (
            "all",
            "pulse-kube-pulse",
            "4",
            &[
                "configmap/karpor-kubeconfig",
                "configmap/pulse-kube-pulse",
                "configmap/pulse-kube-pulse-dashboard",
                "configmap/pulse-kube-pulse-nats",
                "networkpolicy.networking.k8s.io/pulse-kube-pulse-nats",
                "poddisruptionbudget.policy/pulse-kube-pulse",
                "poddisruptionbudget.policy/pulse-kube-pulse-nats",
                "prometheusrule.monitoring.coreos.com/pulse-kube-pulse",
                "role.rbac.authorization.k8s.io/pulse-kube-pulse-leases",
                "secret/pulse-kube-pulse-nats-auth",
                "secret/pulse-kube-pulse-nats-signing",
                "service/pulse-kube-pulse",
                "service/pulse-kube-pulse-nats",
                "service/pulse-kube-pulse-nats-headless",
                "servicemonitor.monitoring.coreos.com/pulse-kube-pulse",
                "statefulset.apps/pulse-kube-pulse-nats",
            ],
        ),
    ];
    for (variant, deployment, replicas, listed_expected) in expected {
        let (text, docs) = render(variant).unwrap();
        let namespace = release_namespace(variant);
        let mut before =
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n");
        if config_has_karpor(&docs) {
            before.push_str(&format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: karpor-kubeconfig\n  namespace: {namespace}\ndata:\n  config: |\n    apiVersion: v1\n    kind: Config\n"
            ));
        }
        let applied = manifests::apply(
            &format!("helm-apply-{variant}"),
            &format!("{before}{text}"),
            namespace,
            deployment,
            "configmaps,networkpolicies,poddisruptionbudgets,prometheusrules,roles,secrets,servicemonitors,services,statefulsets",
        )
        .await;
        assert_eq!(applied.replicas, replicas, "{variant}");
        let mut listed: Vec<&str> = applied.listed.lines().collect();
        listed.sort_unstable();
        assert_eq!(listed, listed_expected, "{variant}: {}", applied.output);
    }
}

fn config_has_karpor(docs: &[Value]) -> bool {
    docs.iter().any(|d| {
        d["kind"] == "ConfigMap"
            && d["data"]["config.yaml"]
                .as_str()
                .is_some_and(|c| c.contains("\nkarpor:"))
    })
}
