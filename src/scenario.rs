//! The demo scenario: a fixed, repeating script that scales, rolls out,
//! breaks and heals the simulated member clusters, so every status machine
//! has something to show. Steps act on the simulator directly, as the
//! cluster's own users and failures would.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::sim::{Faults, SimCluster, WorkloadSeed, workload_manifest};

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

/// An image the scenario marks as failing: its pods never become ready.
pub const BROKEN_IMAGE: &str = "registry.example/cart:broken";

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

/// The script, repeated for as long as the demo runs.
pub fn script() -> Vec<Step> {
    let s = |secs, cluster, action| Step {
        after: Duration::from_secs(secs),
        cluster,
        action,
    };
    vec![
        s(
            8,
            2,
            Action::Scale {
                namespace: "shop",
                name: "web",
                replicas: 5,
            },
        ),
        s(
            10,
            1,
            Action::Image {
                namespace: "shop",
                name: "cart",
                image: "registry.example/cart:1.1",
            },
        ),
        s(
            10,
            0,
            Action::Faults(Faults {
                refuse: true,
                ..Faults::default()
            }),
        ),
        s(20, 0, Action::Heal),
        s(
            5,
            2,
            Action::Image {
                namespace: "shop",
                name: "cart",
                image: BROKEN_IMAGE,
            },
        ),
        s(
            45,
            2,
            Action::Image {
                namespace: "shop",
                name: "cart",
                image: "registry.example/cart:1.0",
            },
        ),
        s(
            10,
            1,
            Action::Faults(Faults {
                not_ready: true,
                ..Faults::default()
            }),
        ),
        s(15, 1, Action::Heal),
        s(
            5,
            2,
            Action::Scale {
                namespace: "shop",
                name: "web",
                replicas: 3,
            },
        ),
        s(
            5,
            0,
            Action::Scale {
                namespace: "analytics",
                name: "ingest",
                replicas: 0,
            },
        ),
        s(
            20,
            0,
            Action::Scale {
                namespace: "analytics",
                name: "ingest",
                replicas: 2,
            },
        ),
        s(
            5,
            1,
            Action::Image {
                namespace: "shop",
                name: "cart",
                image: "registry.example/cart:1.0",
            },
        ),
    ]
}

fn apply(cluster: &SimCluster, action: &Action) {
    let workload = |namespace: &str, name: &str| {
        seed_workloads()
            .into_iter()
            .find(|w| w.namespace == namespace && w.name == name)
    };
    let result = match action {
        Action::Faults(faults) => {
            cluster.set_faults(faults.clone());
            Ok(())
        }
        Action::Heal => {
            cluster.heal();
            Ok(())
        }
        Action::Scale {
            namespace,
            name,
            replicas,
        } => update(cluster, namespace, name, |m| {
            m["spec"]["replicas"] = (*replicas).into();
        }),
        Action::Image {
            namespace,
            name,
            image,
        } => update(cluster, namespace, name, |m| {
            m["spec"]["template"]["spec"]["containers"][0]["image"] = (*image).into();
        }),
    };
    if let Err(err) = result {
        // A workload someone deleted meanwhile comes back from its seed.
        if let Action::Scale {
            namespace, name, ..
        }
        | Action::Image {
            namespace, name, ..
        } = action
            && let Some(seed) = workload(namespace, name)
        {
            let _ = cluster.apply(&workload_manifest(&seed));
        }
        tracing::debug!(cluster = cluster.name(), cause = %err, "scenario step skipped");
    }
}

fn update(
    cluster: &SimCluster,
    namespace: &str,
    name: &str,
    change: impl FnOnce(&mut serde_json::Value),
) -> Result<(), crate::sim::ApiError> {
    let store = cluster.store();
    let catalog = store.catalog();
    let def = ["deployments", "statefulsets"]
        .iter()
        .filter_map(|p| catalog.find("apps", "v1", p))
        .find(|d| store.get(d, Some(namespace), name).is_ok())
        .cloned()
        .ok_or_else(|| {
            crate::sim::ApiError::bad_request(format!("no workload {namespace}/{name}"))
        })?;
    store.mutate(
        &def,
        Some(namespace),
        name,
        crate::sim::object::UpdateScope::Main,
        false,
        |current| {
            let mut next = current.clone();
            change(&mut next);
            Ok(next)
        },
    )?;
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
            if let Some(cluster) = clusters.get(step.cluster) {
                tracing::info!(cluster = cluster.name(), action = ?step.action, "scenario");
                apply(cluster, &step.action);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_targets_seeded_workloads_and_heals_every_fault() {
        let seeds = seed_workloads();
        let mut faulted = std::collections::HashSet::new();
        for step in script() {
            match step.action {
                Action::Scale {
                    namespace, name, ..
                }
                | Action::Image {
                    namespace, name, ..
                } => {
                    assert!(
                        seeds
                            .iter()
                            .any(|w| w.namespace == namespace && w.name == name),
                        "{name}"
                    );
                }
                Action::Faults(_) => {
                    faulted.insert(step.cluster);
                }
                Action::Heal => {
                    assert!(faulted.remove(&step.cluster), "heal without fault");
                }
            }
            assert!(step.cluster < 3);
        }
        assert!(faulted.is_empty(), "every fault is healed within one round");
    }

    #[tokio::test]
    async fn actions_change_the_cluster() {
        let cluster = SimCluster::start(crate::sim::SimConfig {
            workloads: seed_workloads(),
            ..crate::sim::SimConfig::named("t")
        })
        .await
        .unwrap();
        apply(
            &cluster,
            &Action::Scale {
                namespace: "shop",
                name: "web",
                replicas: 7,
            },
        );
        let def = cluster
            .store()
            .catalog()
            .find("apps", "v1", "deployments")
            .unwrap()
            .clone();
        let web = cluster.store().get(&def, Some("shop"), "web").unwrap();
        assert_eq!(web["spec"]["replicas"], 7);
        apply(
            &cluster,
            &Action::Image {
                namespace: "shop",
                name: "db",
                image: "pg:17",
            },
        );
        let sts = cluster
            .store()
            .catalog()
            .find("apps", "v1", "statefulsets")
            .unwrap()
            .clone();
        let db = cluster.store().get(&sts, Some("shop"), "db").unwrap();
        assert_eq!(
            db["spec"]["template"]["spec"]["containers"][0]["image"],
            "pg:17"
        );
        apply(
            &cluster,
            &Action::Faults(Faults {
                not_ready: true,
                ..Faults::default()
            }),
        );
        assert!(cluster.faults().not_ready);
        apply(&cluster, &Action::Heal);
        assert_eq!(cluster.faults(), Faults::default());
        cluster.shutdown().await;
    }
}
