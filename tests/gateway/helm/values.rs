//! The chart's values as a contract: Helm honours values.schema.json (bad
//! values are refused before anything renders, bad combinations by the
//! templates' checks); every value of values.yaml is used by a template,
//! documented in the chart's README table and in the schema; the READMEs'
//! install next to Karpor and the grants they document for Karpor's
//! apiserver.

use std::collections::BTreeSet;
use std::path::Path;

use pulse_testkit::helm::{Helm, Render};
use pulse_testkit::manifests::{documents, find, validate};
use serde_json::{Value, json};

use super::{ROOT, chart, chart_file};

// ------------------------------------------------------------- the schema

/// Helm honours values.schema.json: values of the wrong type, unknown
/// keys, bad enums and patterns are refused before anything renders, and
/// combinations the gateway would refuse or run wrongly by the
/// templates' checks, each with a message naming the value.
#[test]
fn bad_values_are_refused() {
    let Some(helm) = Helm::find_or_skip() else {
        return;
    };
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"replicaCount": "two"}),
            "kube-pulse",
            "/replicaCount",
        ),
        (
            json!({"nats": {"enabled": true, "bogus": 1}}),
            "kube-pulse",
            "'bogus' not allowed",
        ),
        (
            json!({"karpor": {"allowEndpoints": ["not-a-block"]}}),
            "karpor",
            "/karpor/allowEndpoints/0",
        ),
        (json!({"logFormat": "xml"}), "kube-pulse", "/logFormat"),
        (
            json!({"replicas": {"count": 1}}),
            "kube-pulse",
            "/replicas/count",
        ),
        (
            json!({"service": {"port": 0}}),
            "kube-pulse",
            "/service/port",
        ),
        (
            json!({"monitoring": {"serviceMonitor": {"interval": "often"}}}),
            "kube-pulse",
            "/monitoring/serviceMonitor/interval",
        ),
        (
            json!({"nats": {"enabled": true}}),
            "kube-pulse",
            "nats.enabled needs replicas.enabled",
        ),
        (
            json!({"replicas": {"enabled": true}, "nats": {"enabled": true, "servers": 3, "streamReplicas": 5}}),
            "kube-pulse",
            "nats.streamReplicas (5) exceeds nats.servers (3)",
        ),
        (
            json!({"replicas": {"enabled": true}, "nats": {"enabled": true, "signing": {"key": format!("{}\n", "k".repeat(31))}}}),
            "kube-pulse",
            "nats.signing.key is shorter than 32 bytes",
        ),
        (
            json!({"nats": {"signing": {"keyFile": "/etc/key"}}}),
            "kube-pulse",
            "'keyFile' not allowed",
        ),
        (
            json!({"karpor": {"enabled": true, "namespace": "karpor"}}),
            "kube-pulse",
            "karpor.namespace is karpor but the release is in kube-pulse",
        ),
        (
            json!({"karpor": {"enabled": true}, "replicaCount": 2}),
            "karpor",
            "replicaCount > 1 with karpor.enabled",
        ),
        // The keys the chart writes are no `config.extra` key.
        (
            json!({"config": {"extra": {"clusters": []}}}),
            "kube-pulse",
            "'clusters' not allowed",
        ),
        // Typos the gateway would refuse at start (CrashLoopBackOff).
        (
            json!({"config": {"extra": {"podwatch": {"enabled": false}}}}),
            "kube-pulse",
            "'podwatch' not allowed",
        ),
        (
            json!({"config": {"extra": {"podWatch": {"ondemand": true}}}}),
            "kube-pulse",
            "'ondemand' not allowed",
        ),
        (
            json!({"config": {"health": {"formt": "kubernetes"}}}),
            "kube-pulse",
            "'formt' not allowed",
        ),
        (
            json!({"config": {"clusters": [{"name": "host", "tokenfile": "/t"}]}}),
            "kube-pulse",
            "'tokenfile' not allowed",
        ),
        (
            json!({"config": {"extra": {"initialLists": "stream"}}}),
            "kube-pulse",
            "/config/extra/initialLists",
        ),
        // TLS through extraArgs would leave the probes on HTTP.
        (
            json!({"extraArgs": ["--tls-cert", "/c", "--tls-key", "/k"]}),
            "kube-pulse",
            "give the certificate with tls.secretName",
        ),
        (
            json!({"tls": {"secretName": "Not_A_Name"}}),
            "kube-pulse",
            "/tls/secretName",
        ),
        (
            json!({"monitoring": {"serviceMonitor": {"enabled": true}, "prometheus": {"serviceAccount": {"name": "prometheus"}}}}),
            "kube-pulse",
            "give both name and namespace",
        ),
    ];
    let jobs: Vec<Render> = cases
        .iter()
        .map(|(values, namespace, _)| Render {
            values: values.clone(),
            name: "kube-pulse".into(),
            namespace: namespace.to_string(),
        })
        .collect();
    for ((values, _, expected), result) in cases.iter().zip(helm.render(&chart(), &jobs)) {
        match result {
            Ok(_) => panic!("{values} rendered"),
            Err(error) => assert!(error.contains(expected), "{values}: {error}"),
        }
    }
}

/// Values Kubernetes, the Prometheus Operator or the gateway take, which
/// the schema must not refuse: no pod (`replicaCount: 0`), quantities in
/// every Kubernetes form, a compound duration, decimal storage, the
/// health format's former name, Karpor's namespace emptied for the
/// release's, every key of the config file the chart does not write.
#[test]
fn valid_values_are_accepted() {
    let Some(helm) = Helm::find_or_skip() else {
        return;
    };
    let cases: Vec<(Value, &str)> = vec![
        (json!({"replicaCount": 0}), "kube-pulse"),
        (
            json!({"resources": {"requests": {"memory": "1Pi", "cpu": "0.5"}, "limits": {"memory": "512e6", "cpu": 2}}}),
            "kube-pulse",
        ),
        (
            json!({"monitoring": {"serviceMonitor": {"enabled": true, "interval": "1m30s"}}}),
            "kube-pulse",
        ),
        (
            json!({"replicas": {"enabled": true}, "nats": {"enabled": true, "storage": {"size": "10G"}}}),
            "kube-pulse",
        ),
        (
            json!({"config": {"health": {"format": "seed"}}}),
            "kube-pulse",
        ),
        (
            json!({"karpor": {"enabled": true, "namespace": ""}}),
            "kube-pulse",
        ),
        (
            json!({"config": {
                "clusters": [{"name": "edge", "kubeconfig": "/etc/k", "context": "edge", "insecureSkipTLSVerify": false}],
                "health": {"format": "kubernetes", "storage": [{"name": "es", "url": "http://es:9200", "expectStatus": 200, "jsonField": "status", "allowedValues": ["green"]}]},
                "extra": {
                    "appLabel": "app", "initialLists": "paged", "watchSilenceSeconds": 150,
                    "appRetentionSeconds": 600, "memberStartRate": 500, "replayLogAgeSeconds": 120,
                    "replayLogBytes": 67108864, "trustedProxies": ["10.0.0.0/8"], "forwardedHeader": "forwarded",
                    "podWatch": {"enabled": true, "labelSelector": "tier=web", "onDemand": true, "lingerSeconds": 300},
                    "probe": {"intervalSeconds": 5, "timeoutSeconds": 3, "successThreshold": 1, "failureThreshold": 2},
                    "authFailures": {"maxPerIp": 20, "windowSeconds": 60},
                    "connections": {"headerReadTimeoutSeconds": 10, "idleTimeoutSeconds": 60},
                },
            }}),
            "kube-pulse",
        ),
    ];
    let jobs: Vec<Render> = cases
        .iter()
        .map(|(values, namespace)| Render {
            values: values.clone(),
            name: "kube-pulse".into(),
            namespace: namespace.to_string(),
        })
        .collect();
    for ((values, _), result) in cases.iter().zip(helm.render(&chart(), &jobs)) {
        if let Err(error) = result {
            panic!("{values} refused: {error}");
        }
    }
}

/// The defaults are valid for the schema, and every object level of the
/// values refuses unknown keys there.
#[test]
fn the_schema_covers_every_value() {
    let schema: Value = serde_json::from_str(&chart_file("values.schema.json")).unwrap();
    let problems = value_problems(&chart_inputs(), &schema);
    assert!(problems.is_empty(), "{problems:#?}");
}

// ------------------------------------------- every value used, documented

/// What the value check reads.
struct ChartInputs {
    values: Value,
    templates: Vec<String>,
    readme: String,
}

fn chart_inputs() -> ChartInputs {
    let mut templates = Vec::new();
    for entry in std::fs::read_dir(chart().join("templates")).unwrap() {
        templates.push(std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    ChartInputs {
        values: serde_yaml_ng::from_str(&chart_file("values.yaml")).unwrap(),
        templates,
        readme: chart_file("README.md"),
    }
}

/// Dotted paths of values.yaml's leaves (scalars, lists, empty maps; null
/// included) and of its maps.
fn walk(value: &Value, at: &str, leaves: &mut Vec<String>, maps: &mut Vec<String>) {
    match value.as_object() {
        Some(map) if !map.is_empty() => {
            maps.push(at.to_string());
            for (key, child) in map {
                let path = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                walk(child, &path, leaves, maps);
            }
        }
        _ => leaves.push(at.to_string()),
    }
}

/// Every `.Values.a.b.c` a template names.
fn references(templates: &[String]) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for text in templates {
        for (i, _) in text.match_indices(".Values.") {
            let rest = &text[i + ".Values.".len()..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                .collect();
            refs.insert(path.trim_end_matches('.').to_string());
        }
    }
    refs
}

/// The value rows of the README's table: the first cell's `name`.
fn documented(readme: &str) -> BTreeSet<String> {
    readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// The schema's node for a dotted path (through `properties`).
fn schema_at<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .filter(|k| !k.is_empty())
        .try_fold(schema, |node, key| node["properties"].get(key))
}

/// Why the chart's values are not all used, documented and in the schema:
/// each leaf of values.yaml must be named by a template, itself or through
/// a block a template uses whole (one no template reaches into, as
/// `resources` in `toYaml .Values.resources`); each such value (leaf or
/// whole block) must be a row of the README's table, and every row such a
/// value; each must be in the schema, and each map the templates reach
/// into must refuse unknown keys there.
fn value_problems(chart: &ChartInputs, schema: &Value) -> Vec<String> {
    let (mut leaves, mut maps) = (Vec::new(), Vec::new());
    walk(&chart.values, "", &mut leaves, &mut maps);
    let refs = references(&chart.templates);
    let whole = |path: &str| {
        refs.contains(path) && !refs.iter().any(|r| r.starts_with(&format!("{path}.")))
    };
    let mut problems = Vec::new();
    let mut units = BTreeSet::new();
    for leaf in &leaves {
        let unit = if refs.contains(leaf) {
            Some(leaf.clone())
        } else {
            let parts: Vec<&str> = leaf.split('.').collect();
            (1..parts.len())
                .rev()
                .map(|n| parts[..n].join("."))
                .find(|p| whole(p))
        };
        match unit {
            Some(unit) => {
                units.insert(unit);
            }
            None => problems.push(format!("{leaf}: no template uses it")),
        }
    }
    let rows = documented(&chart.readme);
    for unit in &units {
        if !rows.contains(unit) {
            problems.push(format!(
                "{unit}: not in charts/kube-pulse/README.md's table"
            ));
        }
        if schema_at(schema, unit).is_none() {
            problems.push(format!("{unit}: not in values.schema.json"));
        }
    }
    for row in rows.difference(&units) {
        problems.push(format!("{row}: a README row, but no value of values.yaml"));
    }
    for map in &maps {
        if units
            .iter()
            .any(|u| map == u || map.starts_with(&format!("{u}.")))
        {
            continue;
        }
        match schema_at(schema, map) {
            Some(node) if node["additionalProperties"] == false => {}
            _ => problems.push(format!("{map:?}: the schema lets unknown keys in")),
        }
    }
    problems
}

/// The check fails on a value no template uses, on a missing README row,
/// on a stale row, and on a value the schema lacks.
#[test]
fn the_value_check_catches_unused_undocumented_and_unschemaed_values() {
    let schema: Value = serde_json::from_str(&chart_file("values.schema.json")).unwrap();
    let mut unused = chart_inputs();
    unused.values["nats"]["unused"] = json!(1);
    let problems = value_problems(&unused, &schema);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("nats.unused: no template")),
        "{problems:?}"
    );

    let mut undocumented = chart_inputs();
    undocumented.readme = undocumented
        .readme
        .lines()
        .filter(|l| !l.starts_with("| `karpor.denyEndpoints`"))
        .collect::<Vec<_>>()
        .join("\n");
    let problems = value_problems(&undocumented, &schema);
    assert_eq!(
        problems,
        ["karpor.denyEndpoints: not in charts/kube-pulse/README.md's table"]
    );

    let mut stale = chart_inputs();
    stale.readme.push_str("\n| `karpor.gone` | `1` | |\n");
    let problems = value_problems(&stale, &schema);
    assert_eq!(
        problems,
        ["karpor.gone: a README row, but no value of values.yaml"]
    );

    let mut used_elsewhere = chart_inputs();
    used_elsewhere.values["karpor"]["extra"] = json!("x");
    used_elsewhere
        .templates
        .push("{{ .Values.karpor.extra }}".into());
    used_elsewhere
        .readme
        .push_str("\n| `karpor.extra` | `x` | |\n");
    let problems = value_problems(&used_elsewhere, &schema);
    assert_eq!(problems, ["karpor.extra: not in values.schema.json"]);
}

// ------------------------------------------------------------- README

/// The root README's "Install next to Karpor" and the chart README's are
/// the same three commands, the last one the documented install.
#[test]
fn the_readmes_install_next_to_karpor_in_three_commands() {
    let install = "helm install kube-pulse charts/kube-pulse -n karpor --set karpor.enabled=true";
    for (name, text) in [
        (
            "README.md",
            std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap(),
        ),
        ("charts/kube-pulse/README.md", chart_file("README.md")),
    ] {
        let section = text
            .split("## Install next to Karpor")
            .nth(1)
            .unwrap_or_else(|| panic!("{name} has no \"Install next to Karpor\" section"));
        let block = section
            .split("```sh\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .unwrap_or_else(|| panic!("{name}: no sh block"));
        let commands: Vec<&str> = block
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .collect();
        assert_eq!(commands.len(), 3, "{name}: {commands:?}");
        assert_eq!(commands[2], install, "{name}");
    }
}

/// The grants the chart's README documents for kube-pulse's own identity
/// on Karpor's apiserver: what the reader and the status writer use (get,
/// list and watch Clusters and SyncRegistries; patch — a JSON merge patch,
/// src/karpor/writer.rs's only call on the subresource — their status),
/// and nothing else; valid RBAC.
#[test]
fn the_documented_karpor_grants_cover_the_reader_and_the_writer() {
    let readme = chart_file("README.md");
    let block = readme
        .split("### Grants on Karpor's apiserver")
        .nth(1)
        .and_then(|s| s.split("```yaml\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("a yaml block under \"Grants on Karpor's apiserver\"");
    validate("karpor-grants", block);
    let docs = documents(block);
    let rules = find(&docs, "ClusterRole")["rules"].as_array().unwrap();
    let granted: BTreeSet<(String, String, String)> = rules
        .iter()
        .flat_map(|rule| {
            let strings = |key: &str| -> Vec<String> {
                rule[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect()
            };
            let (groups, resources, verbs) =
                (strings("apiGroups"), strings("resources"), strings("verbs"));
            let mut out = Vec::new();
            for g in &groups {
                for r in &resources {
                    for v in &verbs {
                        out.push((g.clone(), r.clone(), v.clone()));
                    }
                }
            }
            out
        })
        .collect();
    let mut expected = BTreeSet::new();
    for (group, plural) in [
        ("cluster.karpor.io", "clusters"),
        ("search.karpor.io", "syncclusterresources"),
    ] {
        for verb in ["get", "list", "watch"] {
            expected.insert((group.to_string(), plural.to_string(), verb.to_string()));
        }
        expected.insert((
            group.to_string(),
            format!("{plural}/status"),
            "patch".to_string(),
        ));
    }
    assert_eq!(granted, expected);
    let binding = find(&docs, "ClusterRoleBinding");
    assert_eq!(
        binding["roleRef"]["name"],
        find(&docs, "ClusterRole")["metadata"]["name"]
    );
}
