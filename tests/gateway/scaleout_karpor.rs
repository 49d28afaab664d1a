//! Karpor's status with several replicas and one stream of changes: a real
//! `nats-server -js` on loopback, a simulated host cluster holding the
//! Leases, a simulated Karpor apiserver (Cluster and SyncRegistry kinds,
//! Karpor's default registry) naming three simulated members, and three
//! gateway replicas taking their members from Karpor. Every hub holds
//! every member's documents, yet each Cluster's status is written by its
//! owner only and the registry's by one replica, as `managedFields` shows;
//! from 3 to 2 to 3 replicas, a member's writes move with it.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the test
//! says so and passes, unless `CI` is set: then it fails.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube_pulse::karpor::{KarporSettings, WriterSettings};
use kube_pulse_sim::karpor::{self, KarporOptions};
use kube_pulse_sim::{Faults, SimCluster};
use pulse_testkit::http::{metric, readiness};
use pulse_testkit::nats::{Nats, nats};
use pulse_testkit::poll::eventually;
use pulse_testkit::scale::{LEASE, Replica, WITHIN, owners, replica_with};
use pulse_testkit::sim::{karpor_kubeconfig, sim, sim_with};
use serde_json::Value;

/// Karpor's Cluster and SyncRegistry kinds, as dynamic objects.
fn karpor_apis(karpor: &SimCluster) -> (Api<DynamicObject>, Api<DynamicObject>) {
    let kind = |group: &str, kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1beta1", kind), plural)
    };
    let clusters = kind("cluster.karpor.io", "Cluster", "clusters");
    let registries = kind("search.karpor.io", "SyncRegistry", "syncclusterresources");
    (
        Api::all_with(karpor.client(), &clusters),
        Api::all_with(karpor.client(), &registries),
    )
}

/// The object's status and the kube-pulse field managers that wrote it.
async fn status_and_writers(api: &Api<DynamicObject>, name: &str) -> (Value, BTreeSet<String>) {
    let object = api.get(name).await.unwrap();
    let writers = object
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.subresource.as_deref() == Some("status"))
        .filter_map(|e| e.manager)
        .filter(|m| m.starts_with("kube-pulse/"))
        .collect();
    let status = object.data.get("status").cloned().unwrap_or(Value::Null);
    (status, writers)
}

/// A replica taking its members from Karpor (none from a file), writing
/// status as `kube-pulse/{id}`.
async fn karpor_replica(
    id: &str,
    host: &SimCluster,
    nats: &Nats,
    kubeconfig: &std::path::Path,
) -> Replica {
    let settings = KarporSettings {
        kubeconfig: kubeconfig.to_path_buf(),
        context: None,
        allow_exec: false,
        endpoints: kube_pulse::karpor::EndpointPolicy::allowing_loopback(),
        status: Some(WriterSettings {
            replica: id.into(),
            min_interval: Duration::from_millis(300),
            ..Default::default()
        }),
    };
    replica_with(id, host, &[], nats, LEASE, |c| c.karpor = Some(settings)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_karpor_object_is_written_by_its_owner_only_from_3_to_2_to_3_replicas() {
    let Some(nats) = nats().await else {
        return;
    };
    let host = sim().await;
    let karpor = karpor::start(KarporOptions {
        conditions: true,
        default_registry: true,
        push_mode: false,
    })
    .await
    .unwrap();
    let named = |name: &'static str| sim_with(move |c| c.name = name.into());
    let [a, b, c] = [named("a").await, named("b").await, named("c").await];
    let members: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = karpor_kubeconfig(dir.path(), &karpor.url());
    let mut replicas = vec![
        karpor_replica("r1", &host, &nats, &kubeconfig).await,
        karpor_replica("r2", &host, &nats, &kubeconfig).await,
        karpor_replica("r3", &host, &nats, &kubeconfig).await,
    ];
    // Members appear only once every replica has said it is alive, so
    // that the first owner of each is its lasting one (a member moving
    // while the replicas start would rightly leave two writers in its
    // managedFields). A round lists the Leases before it plans.
    let leases: Api<Lease> = Api::namespaced(host.client(), "default");
    eventually(WITHIN, "every replica's own Lease", || async {
        let names: BTreeSet<String> = leases
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|l| l.metadata.name)
            .collect();
        ["r1", "r2", "r3"]
            .iter()
            .all(|r| names.contains(&format!("kube-pulse-replica-{r}")))
            .then_some(())
    })
    .await;
    tokio::time::sleep(LEASE).await;
    karpor::register_members(&karpor, &[&a, &b, &c]).unwrap();
    let live: Vec<&Replica> = replicas.iter().collect();
    let owners: BTreeMap<String, String> = owners(&host, &live, &members).await;
    eprintln!("owners {owners:?}");

    // Each Cluster's status, written by its owner and nobody else.
    let (clusters, registries) = karpor_apis(&karpor);
    for member in &members {
        let owner = format!("kube-pulse/{}", owners[member]);
        let writers = eventually(WITHIN, &format!("{member}'s status on Karpor"), || async {
            let (status, writers) = status_and_writers(&clusters, member).await;
            let ready = status["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (status["healthy"] == true && ready).then_some(writers)
        })
        .await;
        assert_eq!(writers, BTreeSet::from([owner]), "{member}");
    }
    // The default registry applies to every cluster: the owner of `a`,
    // the first by name, writes it.
    let registry_writer = format!("kube-pulse/{}", owners["a"]);
    let writers = eventually(WITHIN, "the registry's status on Karpor", || async {
        let (status, writers) = status_and_writers(&registries, karpor::DEFAULT_REGISTRY).await;
        let listed: Vec<&str> = status["clusters"]
            .as_array()?
            .iter()
            .filter_map(|c| c["cluster"].as_str())
            .collect();
        (listed == ["a", "b", "c"]).then_some(writers)
    })
    .await;
    assert_eq!(writers, BTreeSet::from([registry_writer.clone()]));

    // Settled: still one writer each, nobody stands by, writes succeed,
    // and no member moved (which would have made a second writer right).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for member in &members {
        let (_, writers) = status_and_writers(&clusters, member).await;
        assert_eq!(writers.len(), 1, "{member}: {writers:?}");
    }
    let (_, writers) = status_and_writers(&registries, karpor::DEFAULT_REGISTRY).await;
    assert_eq!(writers, BTreeSet::from([registry_writer]));
    let mut written = 0.0;
    for r in &replicas {
        assert_eq!(
            metric(&r.url, "kube_pulse_karpor_status_writer_standby").await,
            0.0,
            "{}",
            r.id
        );
        for change in ["released", "lost"] {
            let moved = metric(
                &r.url,
                &format!("kube_pulse_lease_changes_total{{change=\"{change}\"}}"),
            )
            .await;
            assert_eq!(moved, 0.0, "{}: a member {change} while the test ran", r.id);
        }
        written += metric(
            &r.url,
            "kube_pulse_karpor_status_writes_total{kind=\"Cluster\",result=\"written\"}",
        )
        .await;
        let (status, body) = readiness(&r.url, "KarporStatus").await;
        assert_eq!(status, 200, "{}: {body}", r.id);
    }
    assert!(written >= 3.0, "{written} Cluster writes");

    // 3 → 2: the owner of `a`, the registry's writer too, stops; `a` moves.
    // Unreachable, it gets a new status, which only its new owner writes,
    // and so does the registry.
    let first = owners["a"].clone();
    let at = replicas.iter().position(|r| r.id == first).unwrap();
    let stopped = replicas.remove(at);
    stopped.token.cancel();
    stopped.gateway.stop().await;
    let live: Vec<&Replica> = replicas.iter().collect();
    let moved = pulse_testkit::scale::owners(&host, &live, &members).await;
    eprintln!("owners with 2 replicas {moved:?}");
    let second = moved["a"].clone();
    let both = BTreeSet::from([
        format!("kube-pulse/{first}"),
        format!("kube-pulse/{second}"),
    ]);
    a.set_faults(Faults {
        refuse: true,
        ..Faults::default()
    });
    let writers = eventually(WITHIN, "a unreachable on Karpor", || async {
        let (status, writers) = status_and_writers(&clusters, "a").await;
        let down = status["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "False");
        down.then_some(writers)
    })
    .await;
    assert_eq!(writers, both, "a after its move");
    let writers = eventually(WITHIN, "the registry written by a's new owner", || async {
        let (_, writers) = status_and_writers(&registries, karpor::DEFAULT_REGISTRY).await;
        writers
            .contains(&format!("kube-pulse/{second}"))
            .then_some(writers)
    })
    .await;
    assert_eq!(writers, both, "the registry after a's move");
    for member in &members {
        let (_, writers) = status_and_writers(&clusters, member).await;
        let allowed = BTreeSet::from([
            format!("kube-pulse/{}", owners[member]),
            format!("kube-pulse/{}", moved[member]),
        ]);
        assert!(
            writers.contains(&format!("kube-pulse/{}", owners[member]))
                && writers.is_subset(&allowed),
            "{member}: {writers:?}, owners {} then {}",
            owners[member],
            moved[member]
        );
    }

    // 2 → 3: the stopped replica comes back and takes `a` again; healed,
    // `a` is written by it, and its interim owner writes nothing more.
    replicas.push(karpor_replica(&first, &host, &nats, &kubeconfig).await);
    let live: Vec<&Replica> = replicas.iter().collect();
    let back = pulse_testkit::scale::owners(&host, &live, &members).await;
    assert_eq!(back, owners, "the same owners with the same replicas");
    let interim = replicas.iter().find(|r| r.id == second).unwrap();
    let writes_of = |kind: &'static str| {
        metric(
            &interim.url,
            match kind {
                "Cluster" => {
                    "kube_pulse_karpor_status_writes_total{kind=\"Cluster\",result=\"written\"}"
                }
                _ => {
                    "kube_pulse_karpor_status_writes_total{kind=\"SyncRegistry\",result=\"written\"}"
                }
            },
        )
    };
    let before = (writes_of("Cluster").await, writes_of("SyncRegistry").await);
    a.heal();
    eventually(WITHIN, "a healthy again on Karpor", || async {
        let (status, _) = status_and_writers(&clusters, "a").await;
        let ready = status["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        (status["healthy"] == true && ready).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = (writes_of("Cluster").await, writes_of("SyncRegistry").await);
    assert_eq!(
        after, before,
        "{second} wrote (Cluster, SyncRegistry) after handing a back to {first}"
    );
    let (_, writers) = status_and_writers(&clusters, "a").await;
    assert_eq!(writers, both, "a back with {first}");
    for r in &replicas {
        r.token.cancel();
        r.gateway.stop().await;
    }
    karpor.shutdown().await;
}
