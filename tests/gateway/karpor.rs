//! Members and sync registries from Karpor, end to end: a gateway reading a
//! simulated Karpor apiserver over loopback, Cluster and SyncRegistry
//! objects written with kubectl, members served by the simulator.

use std::time::{Duration, Instant};

use kube_pulse::gateway::Gateway;
use kube_pulse::karpor::KarporSettings;
use kube_pulse_sim::SimCluster;
use kube_pulse_sim::karpor::{self, Credential, ExecConfig, KarporOptions, MemberAccess};
use pulse_testkit::binary::{spawn_binary, terminate, wait_for_url};
use pulse_testkit::gateway::{doc_where, start_gateway};
use pulse_testkit::http::{get_json, http, metric};
use pulse_testkit::kubectl::{kubectl, ok};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{karpor_kubeconfig, karpor_settings, sim, sim_with};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Generous on a loaded 2-core machine; figures are printed, not asserted tighter.
const WAIT: Duration = Duration::from_secs(30);

/// A Karpor apiserver, a kubeconfig for it, and a gateway reading it.
struct Setup {
    karpor: SimCluster,
    dir: tempfile::TempDir,
    url: String,
    gateway: Gateway,
    shutdown: CancellationToken,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn setup(options: KarporOptions, allow_exec: bool) -> Setup {
    let karpor = karpor::start(options).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = karpor_kubeconfig(dir.path(), &karpor.url());
    let shutdown = CancellationToken::new();
    let settings = KarporSettings {
        kubeconfig,
        context: None,
        allow_exec,
        endpoints: kube_pulse::karpor::EndpointPolicy::allowing_loopback(),
        status: None,
    };
    let (url, gateway) = start_gateway(&[], |c| c.karpor = Some(settings), &shutdown).await;
    Setup {
        karpor,
        dir,
        url,
        gateway,
        shutdown,
    }
}

impl Setup {
    /// `kubectl apply -f` of `object` against Karpor.
    async fn apply(&self, object: &Value) {
        let name = object["metadata"]["name"].as_str().unwrap();
        let path = self.dir.path().join(format!("{name}.json"));
        std::fs::write(&path, object.to_string()).unwrap();
        ok(&kubectl(&self.karpor.url(), &["apply", "-f", path.to_str().unwrap()]).await);
    }

    async fn doc(&self, topic: &str, what: impl Fn(&Value) -> bool) -> Value {
        doc_where(self.gateway.hub(), topic, WAIT, what).await
    }

    async fn gone(&self, topic: &str) {
        eventually(WAIT, &format!("{topic} removed"), || async {
            self.gateway.hub().get(topic).is_none().then_some(())
        })
        .await;
    }
}

fn token_access(member: &SimCluster, token: &str) -> MemberAccess {
    MemberAccess {
        credential: Credential::ServiceAccountToken(token.into()),
        ..MemberAccess::to_sim(member)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_applied_with_kubectl_becomes_a_member_restarts_on_new_credentials_and_goes_when_deleted()
 {
    let member = sim_with(|c| c.token = Some("right".into())).await;
    let s = setup(
        KarporOptions {
            default_registry: false,
            ..Default::default()
        },
        false,
    )
    .await;
    // Wrong token first: the member's lists are refused.
    let applied = Instant::now();
    s.apply(&karpor::cluster_manifest(
        "edge",
        &token_access(&member, "wrong"),
    ))
    .await;
    s.doc("clusters/edge", |d| d["phase"].is_string()).await;
    let appeared = applied.elapsed();
    eprintln!("figures: clusters/edge appeared {appeared:?} after kubectl apply");
    assert!(appeared < Duration::from_secs(5), "took {appeared:?}");
    s.doc("clusters/edge", |d| d["reason"] == "Unauthorized")
        .await;
    // The right token: the member restarts with it and syncs.
    s.apply(&karpor::cluster_manifest(
        "edge",
        &token_access(&member, "right"),
    ))
    .await;
    let doc = s
        .doc("clusters/edge/sync/apps/v1/deployments", |d| {
            d["phase"] == "Syncing"
        })
        .await;
    assert_eq!(doc["kind"], "Deployment");
    s.doc("clusters/edge", |d| d["phase"] == "Healthy").await;
    assert_eq!(
        metric(&s.url, "kube_pulse_karpor_clusters{state=\"running\"}").await,
        1.0
    );
    assert_eq!(metric(&s.url, "kube_pulse_karpor_connected").await, 1.0);
    let ready = http()
        .get(format!("{}/readyz/Karpor", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "{}", ready.text().await.unwrap());
    // Deleted: every topic of the member goes.
    ok(&kubectl(
        &s.karpor.url(),
        &["delete", "clusters.cluster.karpor.io", "edge"],
    )
    .await);
    s.gone("clusters/edge").await;
    s.gone("clusters/edge/sync/apps/v1/deployments").await;
}

/// A push-mode Cluster (docs/KARPOR.md) applied to a Karpor that has
/// #836's schema: never listed or watched from the hub, held until its
/// agent is named (this gateway has no NATS: no agent link), beside a
/// pulled Cluster of the same member. (Without #836's schema the apiserver
/// prunes `spec.mode`: the simulator's `typed` tests pin that.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_mode_cluster_is_held_for_its_agent_where_karpor_keeps_spec_mode() {
    let member = sim().await;
    let s = setup(
        KarporOptions {
            default_registry: false,
            push_mode: true,
            ..Default::default()
        },
        false,
    )
    .await;
    let mut manifest = karpor::cluster_manifest("edge-1", &MemberAccess::to_sim(&member));
    manifest["spec"]["mode"] = json!("push");
    s.apply(&manifest).await;
    let doc = s
        .doc("clusters/edge-1", |d| d["phase"] == "Unhealthy")
        .await;
    assert_eq!(doc["reason"], "AgentNotNamed", "{doc}");
    // The documented `kubectl annotate` names its agent: the member is then
    // followed through it, which this gateway without NATS cannot.
    let key = nkeys::KeyPair::new_user().public_key();
    ok(&kubectl(
        &s.karpor.url(),
        &[
            "annotate",
            "clusters.cluster.karpor.io",
            "edge-1",
            &format!("kube-pulse.io/agent={key}"),
        ],
    )
    .await);
    s.doc("clusters/edge-1", |d| d["reason"] == "NoAgentLink")
        .await;
    let stats = member.stats();
    assert_eq!(
        (stats.total("list"), stats.total("watch")),
        (0, 0),
        "a push member is never listed or watched from the hub"
    );
    s.apply(&karpor::cluster_manifest(
        "pulled",
        &MemberAccess::to_sim(&member),
    ))
    .await;
    s.doc("clusters/pulled", |d| d["phase"] == "Healthy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_kube_pulse_will_not_use_give_a_clear_reason() {
    let member = sim().await;
    let s = setup(
        KarporOptions {
            default_registry: false,
            ..Default::default()
        },
        false,
    )
    .await;
    let exec = MemberAccess {
        credential: Credential::Exec(ExecConfig {
            command: "karpor-login".into(),
            ..Default::default()
        }),
        ..MemberAccess::to_sim(&member)
    };
    let oidc = MemberAccess {
        credential: Credential::Oidc,
        ..MemberAccess::to_sim(&member)
    };
    s.apply(&karpor::cluster_manifest("by-exec", &exec)).await;
    s.apply(&karpor::cluster_manifest("by-oidc", &oidc)).await;
    let doc = s
        .doc("clusters/by-exec", |d| d["phase"] == "Unhealthy")
        .await;
    assert_eq!(doc["reason"], "CredentialsUnsupported");
    let message = doc["message"].as_str().unwrap();
    assert!(
        message.contains("karpor-login") && message.contains("--karpor-allow-exec"),
        "{message}"
    );
    assert_eq!(doc["server"], member.url());
    let doc = s
        .doc("clusters/by-oidc", |d| d["phase"] == "Unhealthy")
        .await;
    assert_eq!(doc["reason"], "CredentialsUnsupported");
    assert!(doc["message"].as_str().unwrap().contains("OIDC"), "{doc}");
    // No sources run for a held member: it has no sync documents.
    let sync = get_json(&format!("{}/api/v1/clusters/by-exec/sync", s.url)).await;
    assert_eq!(sync["items"], json!([]), "{sync}");
    assert_eq!(
        metric(&s.url, "kube_pulse_karpor_clusters{state=\"held\"}").await,
        2.0
    );
    // Switched to a token: held → running, the topic follows.
    s.apply(&karpor::cluster_manifest(
        "by-exec",
        &MemberAccess::to_sim(&member),
    ))
    .await;
    s.doc("clusters/by-exec", |d| d["phase"] == "Healthy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karpors_default_registry_gives_per_cluster_sync_documents() {
    let (a, b) = (sim().await, sim().await);
    let s = setup(KarporOptions::default(), false).await;
    s.apply(&karpor::cluster_manifest("a", &MemberAccess::to_sim(&a)))
        .await;
    s.apply(&karpor::cluster_manifest("b", &MemberAccess::to_sim(&b)))
        .await;
    for cluster in ["a", "b"] {
        let pdb = s
            .doc(
                &format!("clusters/{cluster}/sync/policy/v1beta1/poddisruptionbudgets"),
                |d| d["reason"] == "NotServed",
            )
            .await;
        assert_eq!(pdb["phase"], "NotServed", "{pdb}");
        assert_eq!(pdb["kind"], "PodDisruptionBudget", "{pdb}");
        let pods = s
            .doc(&format!("clusters/{cluster}/sync/core/v1/pods"), |d| {
                d["phase"] == "Syncing"
            })
            .await;
        assert_eq!(pods["kind"], "Pod");
    }
    // A registry of its own: resource "*" of core/v1 on cluster a only,
    // expanded through a's discovery (configmaps is no built-in watch).
    s.apply(&json!({
        "apiVersion": "search.karpor.io/v1beta1",
        "kind": "SyncRegistry",
        "metadata": {"name": "core-everything"},
        "spec": {"clusters": ["a"], "syncResources": [{"apiVersion": "v1", "resource": "*"}]},
    }))
    .await;
    let configmaps = s
        .doc("clusters/a/sync/core/v1/configmaps", |d| {
            d["phase"] == "Syncing"
        })
        .await;
    assert_eq!(configmaps["kind"], "ConfigMap");
    // Deleting it stops that watch on a; b never had it.
    ok(&kubectl(
        &s.karpor.url(),
        &[
            "delete",
            "syncclusterresources.search.karpor.io",
            "core-everything",
        ],
    )
    .await);
    s.doc("clusters/a/sync/core/v1/configmaps", |d| {
        d["reason"] == "RemovedFromRegistry"
    })
    .await;
    assert!(
        s.gateway
            .hub()
            .get("clusters/b/sync/core/v1/configmaps")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_karpor_keeps_the_last_known_members() {
    let member = sim().await;
    let s = setup(
        KarporOptions {
            default_registry: false,
            ..Default::default()
        },
        false,
    )
    .await;
    s.apply(&karpor::cluster_manifest(
        "kept",
        &MemberAccess::to_sim(&member),
    ))
    .await;
    s.doc("clusters/kept", |d| d["phase"] == "Healthy").await;
    s.karpor.set_faults(kube_pulse_sim::Faults {
        refuse: true,
        ..Default::default()
    });
    eventually(WAIT, "the Karpor check failing", || async {
        let ready = http()
            .get(format!("{}/readyz/Karpor", s.url))
            .send()
            .await
            .unwrap();
        let text = ready.text().await.unwrap();
        text.contains("unreachable").then_some(())
    })
    .await;
    assert_eq!(metric(&s.url, "kube_pulse_karpor_connected").await, 0.0);
    // The member stays and keeps being watched.
    let doc = s.doc("clusters/kept", |d| d["phase"] == "Healthy").await;
    assert_eq!(doc["name"], "kept");
    s.karpor.set_faults(kube_pulse_sim::Faults::default());
    eventually(WAIT, "the Karpor check passing again", || async {
        let ready = http()
            .get(format!("{}/readyz/Karpor", s.url))
            .send()
            .await
            .unwrap();
        (ready.status() == 200).then_some(())
    })
    .await;
}

/// Karpor's apiserver back with a younger store (an etcd restored or
/// re-installed): the watches' resourceVersions are ahead of it, which it
/// answers with "Too large resource version" for as long as they are. The
/// reader (and the writer) list again instead of resuming for ever: the
/// members follow the Clusters the new store has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karpor_back_with_a_younger_store_is_listed_again() {
    let (kept, dropped) = (sim().await, sim().await);
    let options = KarporOptions {
        default_registry: false,
        ..Default::default()
    };
    let mut s = setup(options, false).await;
    s.apply(&karpor::cluster_manifest(
        "kept",
        &MemberAccess::to_sim(&kept),
    ))
    .await;
    s.apply(&karpor::cluster_manifest(
        "dropped",
        &MemberAccess::to_sim(&dropped),
    ))
    .await;
    // Writes that take the old store's resourceVersion well past the new one's.
    for n in 0..8 {
        let mut manifest = karpor::cluster_manifest("dropped", &MemberAccess::to_sim(&dropped));
        manifest["metadata"]["labels"] = json!({ "round": n.to_string() });
        s.apply(&manifest).await;
    }
    s.doc("clusters/kept", |d| d["phase"] == "Healthy").await;
    s.doc("clusters/dropped", |d| d["phase"] == "Healthy").await;

    // The old apiserver lets go of its port (and cuts the watches); a new
    // one, with a store of its own, takes it.
    let addr = s.karpor.addr();
    s.karpor.set_faults(kube_pulse_sim::Faults {
        refuse: true,
        ..Default::default()
    });
    let younger = eventually(WAIT, "the port free again", || async {
        SimCluster::start(kube_pulse_sim::SimConfig {
            listen: addr,
            ..karpor::config(options)
        })
        .await
        .ok()
    })
    .await;
    std::mem::replace(&mut s.karpor, younger).shutdown().await;
    s.apply(&karpor::cluster_manifest(
        "kept",
        &MemberAccess::to_sim(&kept),
    ))
    .await;
    s.gone("clusters/dropped").await;
    s.doc("clusters/kept", |d| d["phase"] == "Healthy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_members_and_karpor_members_coexist_and_the_file_wins_a_name() {
    let (file_member, karpor_member) = (sim().await, sim().await);
    let karpor = karpor::start(KarporOptions {
        default_registry: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // With the status writer: Karpor's Cluster of the file's name is left
    // alone (the member running under that name is the file's).
    let settings = karpor_settings(dir.path(), &karpor.url(), true);
    let shutdown = CancellationToken::new();
    let (url, gateway) =
        start_gateway(&[&file_member], |c| c.karpor = Some(settings), &shutdown).await;
    let s = Setup {
        karpor,
        dir,
        url,
        gateway,
        shutdown,
    };
    let name = file_member.name().to_string();
    // Karpor names the file's member too, with an endpoint nothing answers on.
    let elsewhere = MemberAccess {
        endpoint: "http://127.0.0.1:9".into(),
        ..MemberAccess::to_sim(&file_member)
    };
    s.apply(&karpor::cluster_manifest(&name, &elsewhere)).await;
    s.apply(&karpor::cluster_manifest(
        "from-karpor",
        &MemberAccess::to_sim(&karpor_member),
    ))
    .await;
    s.doc("clusters/from-karpor", |d| d["phase"] == "Healthy")
        .await;
    let doc = s
        .doc(&format!("clusters/{name}"), |d| d["phase"] == "Healthy")
        .await;
    let server = doc["server"].as_str().unwrap().trim_end_matches('/');
    assert_eq!(server, file_member.url(), "{doc}");
    let cluster = |name: String| {
        let karpor = s.karpor.url();
        async move {
            let out = ok(&kubectl(
                &karpor,
                &["get", "clusters.cluster.karpor.io", &name, "-o", "json"],
            )
            .await);
            serde_json::from_str::<Value>(&out).unwrap()
        }
    };
    eventually(WAIT, "from-karpor's status written", || async {
        let c = cluster("from-karpor".into()).await;
        (c["status"]["healthy"] == true).then_some(())
    })
    .await;
    // A few of the writer's rounds later, still nothing on the other.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let shadowed = cluster(name.clone()).await;
    assert!(
        shadowed["status"].get("healthy").is_none()
            && shadowed["status"].get("conditions").is_none(),
        "the file's member's status was written onto Karpor's Cluster: {}",
        shadowed["status"]
    );
    // Karpor's Cluster of that name going away leaves the file's member.
    ok(&kubectl(
        &s.karpor.url(),
        &["delete", "clusters.cluster.karpor.io", &name],
    )
    .await);
    ok(&kubectl(
        &s.karpor.url(),
        &["delete", "clusters.cluster.karpor.io", "from-karpor"],
    )
    .await);
    s.gone("clusters/from-karpor").await;
    let doc = s.gateway.hub().get(&format!("clusters/{name}")).unwrap();
    assert_eq!(doc.doc["phase"], "Healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_exec_plugin_runs_and_its_token_is_used() {
    let member = sim_with(|c| c.token = Some("from-plugin".into())).await;
    let s = setup(
        KarporOptions {
            default_registry: false,
            ..Default::default()
        },
        true,
    )
    .await;
    let plugin = s.dir.path().join("karpor-login.sh");
    std::fs::write(
        &plugin,
        "#!/bin/sh\necho '{\"apiVersion\": \"client.authentication.k8s.io/v1beta1\", \"kind\": \"ExecCredential\", \"status\": {\"token\": \"'\"$PLUGIN_TOKEN\"'\"}}'\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .args(["+x", plugin.to_str().unwrap()])
        .status()
        .unwrap();
    let access = MemberAccess {
        credential: Credential::Exec(ExecConfig {
            command: plugin.display().to_string(),
            env: vec![("PLUGIN_TOKEN".into(), "from-plugin".into())],
            api_version: "client.authentication.k8s.io/v1beta1".into(),
            ..Default::default()
        }),
        ..MemberAccess::to_sim(&member)
    };
    s.apply(&karpor::cluster_manifest("by-plugin", &access))
        .await;
    s.doc("clusters/by-plugin/sync/apps/v1/deployments", |d| {
        d["phase"] == "Syncing"
    })
    .await;
    s.doc("clusters/by-plugin", |d| d["phase"] == "Healthy")
        .await;
}

/// `serve` with only `--karpor-kubeconfig`: Karpor's Clusters are its
/// members. Endpoints on loopback or link-local addresses (the cloud's
/// metadata service), by address or by a name that resolves there, are
/// refused with a reason until `--karpor-allow-endpoint` allows their
/// block; a name is then pinned to the address it was checked at. A name
/// that resolves to nothing is held with its own reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_takes_its_members_from_karpor_alone() {
    let member = sim().await;
    let karpor = karpor::start(KarporOptions {
        default_registry: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = karpor_kubeconfig(dir.path(), &karpor.url());
    let metadata = MemberAccess {
        endpoint: "http://169.254.169.254:80".into(),
        ..MemberAccess::to_sim(&member)
    };
    let named = MemberAccess {
        endpoint: member.url().replace("127.0.0.1", "localhost"),
        ..MemberAccess::to_sim(&member)
    };
    let nowhere = MemberAccess {
        endpoint: "https://kube-pulse-test.invalid:6443".into(),
        ..MemberAccess::to_sim(&member)
    };
    for (name, access) in [
        ("remote", MemberAccess::to_sim(&member)),
        ("metadata", metadata),
        ("named", named),
        ("nowhere", nowhere),
    ] {
        let manifest = dir.path().join(format!("{name}.json"));
        std::fs::write(
            &manifest,
            karpor::cluster_manifest(name, &access).to_string(),
        )
        .unwrap();
        ok(&kubectl(&karpor.url(), &["apply", "-f", manifest.to_str().unwrap()]).await);
    }
    let serve = |extra: &[&str]| {
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--karpor-kubeconfig",
            kubeconfig.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let mut child = spawn_binary(&args);
        let url = wait_for_url(&mut child);
        (child, url)
    };
    let phase = |url: &str, name: &str, phase: &'static str| {
        let at = format!("{url}/api/v1/clusters/{name}");
        async move {
            eventually(WAIT, &format!("{at} {phase}"), || async {
                let doc = get_json(&at).await;
                (doc["phase"] == phase).then_some(doc)
            })
            .await
        }
    };
    let stop = |mut child: std::process::Child| async move {
        let status = tokio::task::spawn_blocking(move || terminate(&mut child))
            .await
            .unwrap();
        assert!(status.success(), "exit status {status:?}");
    };

    // By default neither endpoint is reached.
    let (child, url) = serve(&[]);
    for (name, address) in [
        ("remote", "127.0.0.1"),
        ("metadata", "169.254.169.254"),
        ("named", "127.0.0.1"),
    ] {
        let doc = phase(&url, name, "Unhealthy").await;
        assert_eq!(doc["reason"], "EndpointNotAllowed", "{doc}");
        let message = doc["message"].as_str().unwrap();
        assert!(
            message.contains(address) && message.contains("--karpor-allow-endpoint"),
            "{message}"
        );
    }
    assert_eq!(
        member.stats().count("core/namespaces", "list"),
        0,
        "no request reached the member"
    );
    let doc = phase(&url, "nowhere", "Unhealthy").await;
    assert_eq!(doc["reason"], "EndpointNotResolved", "{doc}");
    stop(child).await;

    // Loopback allowed: the members run, the one by name pinned to the
    // address it was checked at; the metadata address stays refused.
    let (child, url) = serve(&["--karpor-allow-endpoint", "127.0.0.0/8"]);
    phase(&url, "remote", "Healthy").await;
    let doc = phase(&url, "named", "Healthy").await;
    let server = doc["server"].as_str().unwrap();
    assert!(server.starts_with("http://127.0.0.1:"), "{doc}");
    let doc = phase(&url, "metadata", "Unhealthy").await;
    assert_eq!(doc["reason"], "EndpointNotAllowed", "{doc}");
    stop(child).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_label_selector_follows_the_clusters_labels_live() {
    let member = sim().await;
    let s = setup(
        KarporOptions {
            default_registry: false,
            ..Default::default()
        },
        false,
    )
    .await;
    s.apply(&karpor::cluster_manifest(
        "labelled",
        &MemberAccess::to_sim(&member),
    ))
    .await;
    s.apply(&json!({
        "apiVersion": "search.karpor.io/v1beta1",
        "kind": "SyncRegistry",
        "metadata": {"name": "prod-configmaps"},
        "spec": {
            "clusterLabelSelector": {"matchLabels": {"env": "prod"}},
            "syncResources": [{"apiVersion": "v1", "resource": "configmaps", "namespace": "shop"}],
        },
    }))
    .await;
    s.doc("clusters/labelled", |d| d["phase"] == "Healthy")
        .await;
    assert!(
        s.gateway
            .hub()
            .get("clusters/labelled/sync/core/v1/configmaps")
            .is_none()
    );
    let label = |value: &'static str| {
        let server = s.karpor.url();
        async move {
            let env = format!("env={value}");
            let args = [
                "label",
                "--overwrite",
                "clusters.cluster.karpor.io",
                "labelled",
                &env,
            ];
            ok(&kubectl(&server, &args).await);
        }
    };
    label("prod").await;
    s.doc("clusters/labelled/sync/core/v1/configmaps", |d| {
        d["phase"] == "Syncing"
    })
    .await;
    label("dev").await;
    s.doc("clusters/labelled/sync/core/v1/configmaps", |d| {
        d["reason"] == "RemovedFromRegistry"
    })
    .await;
}
