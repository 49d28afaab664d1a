//! The demo scenario: a fixed, repeating script that scales, rolls out,
//! breaks and heals the simulated member clusters, so every status machine
//! has something to show. Steps act on the simulator directly, as the
//! cluster's own users and failures would; the gateway sees them only
//! through kube-rs over HTTP.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::object::UpdateScope;
use crate::{ApiError, Faults, SimCluster, WorkloadSeed, workload_manifest};

/// One thing that happens to a cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Scale {
        namespace: &'static str,
        name: &'static str,
        replicas: u32,
    },
    Image {
        namespace: &'static str,
        name: &'static str,
        image: &'static str,
    },
    /// Roll a workload to an image whose pods never get ready (20 s deadline).
    Break {
        namespace: &'static str,
        name: &'static str,
    },
    DeleteNamespace(&'static str),
    /// Recreate a namespace and its seeded workloads.
    RestoreNamespace(&'static str),
    /// RBAC: deny these `group/resource[:verb]` rules (empty: allow everything).
    /// Open watches are closed too, as their periodic timeout would, so the
    /// new rules take effect when clients re-watch.
    Deny(Vec<&'static str>),
    Faults(Faults),
    Heal,
}

/// A step: wait, then act on the cluster at `cluster` (index into the demo's clusters).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub after: Duration,
    pub cluster: usize,
    pub action: Action,
}

/// An image whose pods never become ready.
pub const BROKEN_IMAGE: &str = "registry.example/broken:1";

/// The workloads each demo cluster starts with.
pub fn seed_workloads() -> Vec<WorkloadSeed> {
    let w = |kind: &str, namespace: &str, name: &str, replicas, image: &str| WorkloadSeed {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
        replicas,
        image: image.into(),
    };
    vec![
        w("Deployment", "shop", "web", 3, "registry.example/web:1.0"),
        w("Deployment", "shop", "cart", 2, "registry.example/cart:1.0"),
        w(
            "StatefulSet",
            "shop",
            "db",
            1,
            "registry.example/postgres:16",
        ),
        w(
            "Deployment",
            "analytics",
            "ingest",
            2,
            "registry.example/ingest:3.2",
        ),
    ]
}

const DEV: usize = 0;
const STAGING: usize = 1;
const PROD: usize = 2;

/// How long one round of [`script`] takes (198 s).
pub fn round() -> Duration {
    script().iter().map(|step| step.after).sum()
}

/// The script, repeated for as long as the demo runs (a [`round`] each time).
pub fn script() -> Vec<Step> {
    use Action::*;
    let s = |secs, cluster, action| Step {
        after: Duration::from_secs(secs),
        cluster,
        action,
    };
    vec![
        // Scaling up and down.
        s(
            8,
            PROD,
            Scale {
                namespace: "shop",
                name: "web",
                replicas: 5,
            },
        ),
        // A rollout.
        s(
            10,
            STAGING,
            Image {
                namespace: "shop",
                name: "cart",
                image: "registry.example/cart:1.1",
            },
        ),
        // dev refuses connections for a while: Unhealthy (Disconnected).
        s(
            10,
            DEV,
            Faults(crate::Faults {
                refuse: true,
                ..Default::default()
            }),
        ),
        s(20, DEV, Heal),
        // An app with nothing ready and a failed rollout: Panic.
        s(
            5,
            PROD,
            Scale {
                namespace: "analytics",
                name: "ingest",
                replicas: 0,
            },
        ),
        s(
            5,
            PROD,
            Break {
                namespace: "analytics",
                name: "ingest",
            },
        ),
        // A denied resource: sync Error (Forbidden), cluster Degraded.
        s(10, STAGING, Deny(vec!["core/configmaps"])),
        s(35, STAGING, Deny(vec![])),
        s(
            5,
            PROD,
            Image {
                namespace: "analytics",
                name: "ingest",
                image: "registry.example/ingest:3.2",
            },
        ),
        // A namespace deleted and recreated: NotExisted, then back.
        s(10, DEV, DeleteNamespace("analytics")),
        s(20, DEV, RestoreNamespace("analytics")),
        // staging stalls: Unhealthy (Timeout).
        s(
            10,
            STAGING,
            Faults(crate::Faults {
                stall: true,
                ..Default::default()
            }),
        ),
        s(20, STAGING, Heal),
        s(
            5,
            PROD,
            Scale {
                namespace: "shop",
                name: "web",
                replicas: 3,
            },
        ),
        s(
            5,
            STAGING,
            Image {
                namespace: "shop",
                name: "cart",
                image: "registry.example/cart:1.0",
            },
        ),
        s(
            20,
            DEV,
            Scale {
                namespace: "shop",
                name: "web",
                replicas: 3,
            },
        ),
    ]
}

fn workload_def(cluster: &SimCluster, namespace: &str, name: &str) -> Option<crate::ResourceDef> {
    let store = cluster.store();
    let catalog = store.catalog();
    ["deployments", "statefulsets"]
        .iter()
        .filter_map(|p| catalog.find("apps", "v1", p))
        .find(|d| store.get(d, Some(namespace), name).is_ok())
        .cloned()
}

fn update(
    cluster: &SimCluster,
    namespace: &str,
    name: &str,
    change: impl FnOnce(&mut serde_json::Value),
) -> Result<(), ApiError> {
    let def = workload_def(cluster, namespace, name)
        .ok_or_else(|| ApiError::bad_request(format!("no workload {namespace}/{name}")))?;
    cluster.store().mutate(
        &def,
        Some(namespace),
        name,
        UpdateScope::Main,
        false,
        |current| {
            let mut next = current.clone();
            change(&mut next);
            Ok(next)
        },
    )?;
    Ok(())
}

fn restore_namespace(cluster: &SimCluster, namespace: &str) -> Result<(), ApiError> {
    cluster.apply(
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
    )?;
    for seed in seed_workloads().iter().filter(|w| w.namespace == namespace) {
        cluster.apply(&workload_manifest(seed))?;
    }
    Ok(())
}

/// Performs one action on a cluster.
pub fn apply(cluster: &SimCluster, action: &Action) -> Result<(), ApiError> {
    match action {
        Action::Faults(faults) => cluster.set_faults(faults.clone()),
        Action::Heal => cluster.heal(),
        Action::Deny(rules) => {
            cluster.set_deny(rules.iter().copied());
            cluster.close_watches();
        }
        Action::Scale {
            namespace,
            name,
            replicas,
        } => update(cluster, namespace, name, |m| {
            m["spec"]["replicas"] = json!(replicas);
        })?,
        Action::Image {
            namespace,
            name,
            image,
        } => update(cluster, namespace, name, |m| {
            m["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        })?,
        Action::Break { namespace, name } => update(cluster, namespace, name, |m| {
            m["spec"]["template"]["spec"]["containers"][0]["image"] = json!(BROKEN_IMAGE);
            m["spec"]["progressDeadlineSeconds"] = json!(20);
            m["spec"]["replicas"] = json!(2);
        })?,
        Action::DeleteNamespace(namespace) => {
            let ns = cluster.store().catalog().namespaces().clone();
            cluster
                .store()
                .delete(&ns, None, namespace, &Default::default(), false)?;
        }
        Action::RestoreNamespace(namespace) => restore_namespace(cluster, namespace)?,
    }
    Ok(())
}

/// Plays the script over `clusters` until shutdown.
pub async fn run(clusters: &[SimCluster], shutdown: CancellationToken) {
    for cluster in clusters {
        cluster.set_failing_images([BROKEN_IMAGE]);
    }
    loop {
        for step in script() {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(step.after) => {}
            }
            let Some(cluster) = clusters.get(step.cluster) else {
                continue;
            };
            tracing::info!(cluster = cluster.name(), action = ?step.action, "scenario");
            if let Err(err) = apply(cluster, &step.action) {
                // Someone changed the cluster meanwhile (kubectl works on it too):
                // put the seeded state back and go on.
                tracing::info!(cluster = cluster.name(), cause = %err, "scenario step skipped; reseeding");
                for ns in ["shop", "analytics"] {
                    let _ = restore_namespace(cluster, ns);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimConfig;

    #[test]
    fn script_targets_seeded_workloads_and_undoes_every_fault() {
        let seeds = seed_workloads();
        let mut faulted = std::collections::HashSet::new();
        let mut denied = std::collections::HashSet::new();
        let mut deleted = std::collections::HashSet::new();
        for step in script() {
            match &step.action {
                Action::Scale {
                    namespace, name, ..
                }
                | Action::Image {
                    namespace, name, ..
                }
                | Action::Break { namespace, name } => {
                    assert!(
                        seeds
                            .iter()
                            .any(|w| w.namespace == *namespace && w.name == *name),
                        "{name}"
                    );
                }
                Action::Faults(_) => assert!(faulted.insert(step.cluster)),
                Action::Heal => assert!(faulted.remove(&step.cluster), "heal without fault"),
                Action::Deny(rules) if rules.is_empty() => assert!(denied.remove(&step.cluster)),
                Action::Deny(_) => assert!(denied.insert(step.cluster)),
                Action::DeleteNamespace(ns) => assert!(deleted.insert((step.cluster, *ns))),
                Action::RestoreNamespace(ns) => assert!(deleted.remove(&(step.cluster, *ns))),
            }
            assert!(step.cluster < 3);
        }
        assert!(
            faulted.is_empty() && denied.is_empty() && deleted.is_empty(),
            "every round ends healed"
        );
    }

    #[tokio::test]
    async fn actions_change_the_cluster() {
        let cluster = SimCluster::start(SimConfig {
            workloads: seed_workloads(),
            ..SimConfig::named("t")
        })
        .await
        .unwrap();
        let catalog = cluster.store().catalog().clone();
        let deploy = catalog.find("apps", "v1", "deployments").unwrap().clone();
        apply(
            &cluster,
            &Action::Scale {
                namespace: "shop",
                name: "web",
                replicas: 7,
            },
        )
        .unwrap();
        assert_eq!(
            cluster.store().get(&deploy, Some("shop"), "web").unwrap()["spec"]["replicas"],
            7
        );
        apply(
            &cluster,
            &Action::Image {
                namespace: "shop",
                name: "db",
                image: "pg:17",
            },
        )
        .unwrap();
        let sts = catalog.find("apps", "v1", "statefulsets").unwrap().clone();
        let db = cluster.store().get(&sts, Some("shop"), "db").unwrap();
        assert_eq!(
            db["spec"]["template"]["spec"]["containers"][0]["image"],
            "pg:17"
        );
        apply(
            &cluster,
            &Action::Break {
                namespace: "shop",
                name: "cart",
            },
        )
        .unwrap();
        let cart = cluster.store().get(&deploy, Some("shop"), "cart").unwrap();
        assert_eq!(cart["spec"]["progressDeadlineSeconds"], 20);
        apply(
            &cluster,
            &Action::Faults(Faults {
                not_ready: true,
                ..Faults::default()
            }),
        )
        .unwrap();
        assert!(cluster.faults().not_ready);
        apply(&cluster, &Action::Heal).unwrap();
        assert_eq!(cluster.faults(), Faults::default());
        apply(&cluster, &Action::DeleteNamespace("analytics")).unwrap();
        assert!(
            apply(
                &cluster,
                &Action::Scale {
                    namespace: "nowhere",
                    name: "x",
                    replicas: 1
                }
            )
            .is_err()
        );
        cluster.shutdown().await;
    }
}
