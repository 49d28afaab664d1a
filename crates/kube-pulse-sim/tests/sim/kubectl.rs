//! kubectl against the simulator: get, get -w, create -f, apply, scale,
//! set image, delete, the typed generators (which send protobuf) and a CRD's
//! lifecycle, and what a user reads to see why something is wrong (rollout
//! status, pods, events, descriptions) — all without errors.

use std::time::Duration;

use kube_pulse_sim::{WorkloadSeed, workload_manifest};
use pulse_testkit::kubectl::{kubectl, kubectl_lines, ok};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::sim;

const MANIFEST: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: shop
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
      - name: api
        image: registry.example/api:1
"#;

#[tokio::test]
async fn kubectl_create_get_scale_and_delete() {
    let sim = sim().await;
    let server = sim.url();
    let dir = std::env::temp_dir().join(format!("kube-pulse-kubectl-{}", sim.addr().port()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("api.yaml");
    std::fs::write(&file, MANIFEST).unwrap();
    let file = file.to_str().unwrap();

    let out = ok(&kubectl(&server, &["create", "-f", file]).await);
    assert_eq!(out.trim(), "deployment.apps/api created");
    let out = ok(&kubectl(&server, &["get", "deployments", "-n", "shop"]).await);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("api ")), "{out}");
    let out = ok(&kubectl(&server, &["get", "namespaces", "-o", "name"]).await);
    assert!(
        out.contains("namespace/shop") && out.contains("namespace/default"),
        "{out}"
    );

    let out = ok(&kubectl(
        &server,
        &["scale", "deployment", "api", "-n", "shop", "--replicas=4"],
    )
    .await);
    assert_eq!(out.trim(), "deployment.apps/api scaled");
    let out = ok(&kubectl(
        &server,
        &[
            "set",
            "image",
            "deployment/api",
            "-n",
            "shop",
            "api=registry.example/api:2",
        ],
    )
    .await);
    assert_eq!(out.trim(), "deployment.apps/api image updated");
    let jsonpath = "-o=jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image} {.metadata.generation}";
    let out = ok(&kubectl(
        &server,
        &["get", "deployment", "api", "-n", "shop", jsonpath],
    )
    .await);
    assert_eq!(out.trim(), "4 registry.example/api:2 3");
    // The emulated controller converges status on the new spec.
    let ready = "-o=jsonpath={.status.readyReplicas}/{.status.updatedReplicas}/{.status.observedGeneration}";
    eventually(Duration::from_secs(20), "rollout done", || {
        let server = server.clone();
        async move {
            let out = kubectl(&server, &["get", "deployment", "api", "-n", "shop", ready]).await;
            (String::from_utf8_lossy(&out.stdout).trim() == "4/4/3").then_some(())
        }
    })
    .await;

    let out = ok(&kubectl(&server, &["apply", "--server-side", "-f", file]).await);
    assert_eq!(out.trim(), "deployment.apps/api serverside-applied");
    let out = ok(&kubectl(&server, &["delete", "deployment", "api", "-n", "shop"]).await);
    assert_eq!(out.trim(), "deployment.apps \"api\" deleted");
    let out = kubectl(&server, &["get", "deployment", "api", "-n", "shop"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NotFound"));

    let out = ok(&kubectl(&server, &["delete", "namespace", "shop"]).await);
    assert_eq!(out.trim(), "namespace \"shop\" deleted");
    sim.shutdown().await;
}

// Multi-threaded: the test blocks on kubectl's output while the simulator serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_sees_a_change_made_meanwhile() {
    let sim = sim().await;
    let seed = WorkloadSeed {
        kind: "Deployment".into(),
        namespace: "shop".into(),
        name: "web".into(),
        replicas: 1,
        image: "registry.example/web:1".into(),
    };
    sim.apply(&workload_manifest(&seed)).unwrap();
    let url = sim.url();
    let args = [
        "get",
        "deployments",
        "-n",
        "shop",
        "-w",
        "--request-timeout=30s",
    ];
    let (mut child, rx) = kubectl_lines(&url, &args);
    // Table output: a header, then one row per object and per change.
    let header = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("initial listing");
    assert!(
        header.starts_with("NAME") && header.contains("READY"),
        "{header}"
    );
    let first = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("initial row");
    assert!(first.starts_with("web "), "{first}");
    // Wait for kubectl's watch to be open, then make a change.
    eventually(Duration::from_secs(20), "kubectl watching", || async {
        (sim.stats().count("apps/deployments", "watch") >= 1).then_some(())
    })
    .await;
    let mut manifest = workload_manifest(&seed);
    manifest["metadata"]["name"] = "api".into();
    sim.apply(&manifest).unwrap();
    let mut lines: Vec<String> = Vec::new();
    while !lines.iter().any(|l| l.starts_with("api ")) {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => lines.push(line),
            Err(_) => panic!("the change did not arrive; kubectl printed {lines:?}"),
        }
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.trim().is_empty(),
        "kubectl -w wrote errors: {stderr}"
    );
    sim.shutdown().await;
}

// kubectl's typed generators (create namespace/deployment/configmap, run) send protobuf bodies.
#[tokio::test]
async fn kubectl_typed_generators_create_objects() {
    let sim = sim().await;
    let server = sim.url();

    let out = ok(&kubectl(&server, &["create", "namespace", "team"]).await);
    assert_eq!(out.trim(), "namespace/team created");
    let out = ok(&kubectl(
        &server,
        &[
            "create",
            "deployment",
            "web",
            "-n",
            "team",
            "--image=registry.example/web:1",
            "--replicas=2",
        ],
    )
    .await);
    assert_eq!(out.trim(), "deployment.apps/web created");
    let out = ok(&kubectl(
        &server,
        &[
            "create",
            "configmap",
            "settings",
            "-n",
            "team",
            "--from-literal=color=blue",
            "--from-literal=size=9",
        ],
    )
    .await);
    assert_eq!(out.trim(), "configmap/settings created");
    let out = ok(&kubectl(
        &server,
        &[
            "run",
            "shell",
            "-n",
            "team",
            "--image=registry.example/shell:1",
        ],
    )
    .await);
    assert_eq!(out.trim(), "pod/shell created");

    let jsonpath = "-o=jsonpath={.spec.replicas} {.spec.selector.matchLabels.app} {.spec.template.spec.containers[0].image}";
    let out = ok(&kubectl(
        &server,
        &["get", "deployment", "web", "-n", "team", jsonpath],
    )
    .await);
    assert_eq!(out.trim(), "2 web registry.example/web:1");
    let out = ok(&kubectl(
        &server,
        &[
            "get",
            "configmap",
            "settings",
            "-n",
            "team",
            "-o=jsonpath={.data.color}/{.data.size}",
        ],
    )
    .await);
    assert_eq!(out.trim(), "blue/9");
    let out = ok(&kubectl(
        &server,
        &[
            "get",
            "pod",
            "shell",
            "-n",
            "team",
            "-o=jsonpath={.metadata.labels.run} {.spec.containers[0].name} {.spec.restartPolicy}",
        ],
    )
    .await);
    assert_eq!(out.trim(), "shell shell Always");
    let out = ok(&kubectl(
        &server,
        &[
            "get",
            "namespace",
            "team",
            "-o=jsonpath={.status.phase} {.spec.finalizers[0]}",
        ],
    )
    .await);
    assert_eq!(out.trim(), "Active kubernetes");
    // The controller converges the generated Deployment like any other.
    eventually(Duration::from_secs(20), "web ready", || {
        let server = server.clone();
        async move {
            let out = kubectl(
                &server,
                &[
                    "get",
                    "deployment",
                    "web",
                    "-n",
                    "team",
                    "-o=jsonpath={.status.readyReplicas}",
                ],
            )
            .await;
            (String::from_utf8_lossy(&out.stdout).trim() == "2").then_some(())
        }
    })
    .await;
    sim.shutdown().await;
}

/// An object as the simulator stores it, read as plain JSON.
async fn stored(sim: &kube_pulse_sim::SimCluster, path: &str) -> serde_json::Value {
    reqwest::get(format!("{}{path}", sim.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

// The other typed generators send protobuf too; what they leave unset is
// absent (not Go's zero values) and defaulted as JSON creates are.
#[tokio::test]
async fn kubectl_generators_of_secrets_services_and_accounts_send_protobuf() {
    let sim = sim().await;
    let server = sim.url();
    let cases: [&[&str]; 6] = [
        &[
            "create",
            "secret",
            "generic",
            "creds",
            "-n",
            "shop",
            "--from-literal=user=admin",
        ],
        &[
            "create",
            "service",
            "clusterip",
            "api",
            "-n",
            "shop",
            "--tcp=80:8080",
        ],
        &["create", "serviceaccount", "bot", "-n", "shop"],
        &[
            "create",
            "ingress",
            "web",
            "-n",
            "shop",
            "--rule=shop.example/*=api:80",
        ],
        &[
            "create",
            "poddisruptionbudget",
            "api",
            "-n",
            "shop",
            "--selector=app=api",
            "--min-available=1",
        ],
        &[
            "create",
            "deployment",
            "web",
            "-n",
            "shop",
            "--image=registry.example/web:1",
        ],
    ];
    for args in cases {
        let out = ok(&kubectl(&server, args).await);
        assert!(out.trim().ends_with("created"), "{args:?}: {out}");
    }
    let secret = stored(&sim, "/api/v1/namespaces/shop/secrets/creds").await;
    assert_eq!(secret["data"]["user"], "YWRtaW4=");
    assert_eq!(secret["type"], "Opaque");
    let svc = stored(&sim, "/api/v1/namespaces/shop/services/api").await;
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(
        svc["spec"]["ports"][0],
        serde_json::json!({"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080})
    );
    assert!(
        svc["spec"]["clusterIP"]
            .as_str()
            .unwrap()
            .starts_with("10.96.")
    );
    let account = stored(&sim, "/api/v1/namespaces/shop/serviceaccounts/bot").await;
    assert_eq!(account["metadata"]["name"], "bot");
    let ingress = stored(
        &sim,
        "/apis/networking.k8s.io/v1/namespaces/shop/ingresses/web",
    )
    .await;
    assert_eq!(
        ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"],
        serde_json::json!({"name": "api", "port": {"number": 80}})
    );
    let pdb = stored(
        &sim,
        "/apis/policy/v1/namespaces/shop/poddisruptionbudgets/api",
    )
    .await;
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    let deployment = stored(&sim, "/apis/apps/v1/namespaces/shop/deployments/web").await;
    assert_eq!(
        deployment["spec"]["strategy"],
        serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    );
    assert_eq!(deployment["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(deployment["spec"]["progressDeadlineSeconds"], 600);
    let template = &deployment["spec"]["template"]["metadata"];
    assert_eq!(template, &serde_json::json!({"labels": {"app": "web"}}));
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert!(container.get("imagePullPolicy").is_none(), "{container}");
    assert!(deployment["metadata"].get("generateName").is_none());
    sim.shutdown().await;
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.pulse.example.com
spec:
  group: pulse.example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

const WIDGET: &str = r#"apiVersion: pulse.example.com/v1
kind: Widget
metadata:
  name: gear
  namespace: shop
spec:
  size: 3
"#;

#[tokio::test]
async fn kubectl_applies_a_crd_then_its_objects_and_deletes_it() {
    let sim = sim().await;
    let server = sim.url();
    let dir = std::env::temp_dir().join(format!("kube-pulse-kubectl-crd-{}", sim.addr().port()));
    std::fs::create_dir_all(&dir).unwrap();
    let crd = dir.join("crd.yaml");
    let widget = dir.join("widget.yaml");
    std::fs::write(&crd, CRD).unwrap();
    std::fs::write(&widget, WIDGET).unwrap();
    let (crd, widget) = (crd.to_str().unwrap(), widget.to_str().unwrap());

    let out = ok(&kubectl(&server, &["apply", "-f", crd]).await);
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/widgets.pulse.example.com created"
    );
    let out = ok(&kubectl(&server, &["apply", "-f", crd]).await);
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/widgets.pulse.example.com unchanged"
    );
    let out = ok(&kubectl(&server, &["get", "crds", "-o", "name"]).await);
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/widgets.pulse.example.com"
    );
    let established = "-o=jsonpath={.status.conditions[?(@.type==\"Established\")].status} {.status.acceptedNames.kind}";
    let out = ok(&kubectl(
        &server,
        &["get", "crd", "widgets.pulse.example.com", established],
    )
    .await);
    assert_eq!(out.trim(), "True Widget");

    let out = ok(&kubectl(&server, &["apply", "-f", widget]).await);
    assert_eq!(out.trim(), "widget.pulse.example.com/gear created");
    let out = ok(&kubectl(&server, &["get", "widgets", "-n", "shop"]).await);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE"], "{out}");
    assert!(out.lines().any(|l| l.starts_with("gear ")), "{out}");
    let out = ok(&kubectl(&server, &["get", "wd", "-A", "-o", "name"]).await);
    assert_eq!(out.trim(), "widget.pulse.example.com/gear");
    let out = ok(&kubectl(
        &server,
        &[
            "get",
            "widget",
            "gear",
            "-n",
            "shop",
            "-o=jsonpath={.spec.size}",
        ],
    )
    .await);
    assert_eq!(out.trim(), "3");

    let out = ok(&kubectl(&server, &["delete", "crd", "widgets.pulse.example.com"]).await);
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io \"widgets.pulse.example.com\" deleted"
    );
    // kubectl still has widgets in its discovery cache: the list itself is 404.
    let out = kubectl(&server, &["get", "widgets", "-n", "shop"]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NotFound") && stderr.contains("could not find the requested resource"),
        "{stderr}"
    );
    // Refreshed discovery (api-resources refetches it) no longer lists them.
    let out = ok(&kubectl(&server, &["api-resources", "--api-group=pulse.example.com"]).await);
    assert!(!out.contains("widgets"), "{out}");
    let out = kubectl(&server, &["get", "widgets", "-n", "shop"]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the server doesn't have a resource type \"widgets\""),
        "{stderr}"
    );
    sim.shutdown().await;
}

/// What a new user types to see why something is wrong: `rollout status`,
/// `get pods`, `get events`, `describe deployment` and `describe pod`,
/// against a healthy Deployment and a crash-looping one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_rollouts_pods_events_and_descriptions() {
    let sim = sim().await;
    sim.set_image_faults([(
        "registry.example/crash:1",
        kube_pulse_sim::pods::ImageFault::Crash,
    )]);
    let server = sim.url();
    for (name, image) in [
        ("web", "registry.example/web:1"),
        ("crash", "registry.example/crash:1"),
    ] {
        let image = format!("--image={image}");
        ok(&kubectl(
            &server,
            &[
                "create",
                "deployment",
                name,
                "-n",
                "shop",
                &image,
                "--replicas=2",
            ],
        )
        .await);
    }
    let out = ok(&kubectl(
        &server,
        &[
            "rollout",
            "status",
            "deployment/web",
            "-n",
            "shop",
            "--timeout=20s",
        ],
    )
    .await);
    assert!(
        out.contains("deployment \"web\" successfully rolled out"),
        "{out}"
    );
    let pods = eventually(
        Duration::from_secs(20),
        "a crash loop in get pods",
        || async {
            let out = ok(&kubectl(&server, &["get", "pods", "-n", "shop"]).await);
            (out.contains("CrashLoopBackOff") && out.matches("Running").count() == 2).then_some(out)
        },
    )
    .await;
    assert!(pods.starts_with("NAME"), "{pods}");
    assert!(pods.contains("READY   STATUS"), "{pods}");
    let events = ok(&kubectl(&server, &["get", "events", "-n", "shop"]).await);
    for want in [
        "ScalingReplicaSet",
        "Scheduled",
        "Started",
        "BackOff",
        "deployment/web",
    ] {
        assert!(events.contains(want), "{want} in\n{events}");
    }
    let describe = ok(&kubectl(&server, &["describe", "deployment", "web", "-n", "shop"]).await);
    assert!(
        describe.contains("Scaled up replica set web-")
            && describe.contains("deployment-controller"),
        "{describe}"
    );
    let crash_pod = pods
        .lines()
        .find(|l| l.starts_with("crash-"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string();
    // The container alternates between running and backing off: describe
    // it until it is caught waiting.
    let wants = [
        "CrashLoopBackOff",
        "Exit Code:    1",
        "Back-off restarting failed container crash",
    ];
    eventually(
        Duration::from_secs(20),
        "describe shows the crash loop",
        || async {
            let describe =
                ok(&kubectl(&server, &["describe", "pod", &crash_pod, "-n", "shop"]).await);
            wants.iter().all(|w| describe.contains(w)).then_some(())
        },
    )
    .await;
    // kubectl logs: what the simulated kubelet knows of the container; the
    // crashed one's previous instance ended with its exit code.
    // (kubectl says on stderr which of the deployment's pods it read.)
    let logs = kubectl(&server, &["logs", "deployment/web", "-n", "shop"]).await;
    assert!(logs.status.success(), "{logs:?}");
    let logs = String::from_utf8_lossy(&logs.stdout);
    assert!(
        logs.contains("container web started (image registry.example/web:1"),
        "{logs}"
    );
    eventually(
        Duration::from_secs(20),
        "logs --previous of the crashed container",
        || async {
            let out = kubectl(&server, &["logs", &crash_pod, "-n", "shop", "--previous"]).await;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            (out.status.success() && text.contains("exited with code 1")).then_some(())
        },
    )
    .await;
    sim.shutdown().await;
}
