//! The demo scenario: a fixed, repeating script that scales, rolls out,
//! breaks and heals the simulated member clusters, so every status machine
//! has something to show. Steps act on the simulator directly, as the
//! cluster's own users and failures would; the gateway sees them only
//! through kube-rs over HTTP.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::object::UpdateScope;
use crate::pods::ImageFault;
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
    /// Roll a workload to `image` with a 20 s progress deadline: a rollout
    /// whose new pods fail (crash, cannot pull, OOM) while old ones serve.
    BadRollout {
        namespace: &'static str,
        name: &'static str,
        image: &'static str,
    },
    /// Pods the cluster has room for (None: unlimited); more stay Pending, unschedulable.
    Capacity(Option<u32>),
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
/// An image whose container exits 1 at once: `CrashLoopBackOff`.
pub const CRASH_IMAGE: &str = "registry.example/cart:1.2-crash";
/// An image no registry has: `ErrImagePull`, then `ImagePullBackOff`.
pub const MISSING_IMAGE: &str = "registry.example/ingest:4.0-missing";
/// An image whose container runs out of memory: `OOMKilled`.
pub const OOM_IMAGE: &str = "registry.example/cart:1.3-oom";
/// Pods a demo cluster has room for during the unschedulable scale-up:
/// the seeded 8 (web 3, cart 2, db 1, ingest 2).
const SEEDED_PODS: u32 = 8;

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

/// The custom workloads the demo's first cluster (dev) also runs, one of
/// each kind a health rule reads: namespace `platform`.
pub fn custom_workloads() -> Vec<WorkloadSeed> {
    let w = |kind: &str, name: &str, image: &str| WorkloadSeed {
        kind: kind.into(),
        namespace: "platform".into(),
        name: name.into(),
        replicas: 2,
        image: image.into(),
    };
    vec![
        w("CollaSet", "gateway", "registry.example/gateway:2.1"),
        w("CloneSet", "search", "registry.example/search:5.0"),
        w("Rollout", "checkout", "registry.example/checkout:1.4"),
    ]
}

const DEV: usize = 0;
const STAGING: usize = 1;
const PROD: usize = 2;

/// How long one round of [`script`] takes (217 s).
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
        // A rollout whose new pods crash-loop while the old ones serve;
        // past its 20 s deadline the app is Degraded (CrashLoopBackOff).
        s(
            2,
            PROD,
            BadRollout {
                namespace: "shop",
                name: "cart",
                image: CRASH_IMAGE,
            },
        ),
        // dev refuses connections for a while: Unhealthy (Disconnected).
        s(
            8,
            DEV,
            Faults(crate::Faults {
                refuse: true,
                ..Default::default()
            }),
        ),
        s(20, DEV, Heal),
        // OOM-killed pods of a rollout on dev.
        s(
            2,
            DEV,
            BadRollout {
                namespace: "shop",
                name: "cart",
                image: OOM_IMAGE,
            },
        ),
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
        s(
            2,
            PROD,
            Image {
                namespace: "shop",
                name: "cart",
                image: "registry.example/cart:1.0",
            },
        ),
        // A denied resource: sync Error (Forbidden), cluster Degraded.
        s(8, STAGING, Deny(vec!["core/configmaps"])),
        // An image that cannot be pulled (ImagePullBackOff).
        s(
            2,
            STAGING,
            BadRollout {
                namespace: "analytics",
                name: "ingest",
                image: MISSING_IMAGE,
            },
        ),
        s(33, STAGING, Deny(vec![])),
        s(
            2,
            STAGING,
            Image {
                namespace: "analytics",
                name: "ingest",
                image: "registry.example/ingest:3.2",
            },
        ),
        s(
            5,
            PROD,
            Image {
                namespace: "analytics",
                name: "ingest",
                image: "registry.example/ingest:3.2",
            },
        ),
        s(
            2,
            DEV,
            Image {
                namespace: "shop",
                name: "cart",
                image: "registry.example/cart:1.0",
            },
        ),
        // A namespace deleted and recreated: NotExisted, then back.
        s(8, DEV, DeleteNamespace("analytics")),
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
        // A scale-up past the cluster's room: Unschedulable pods.
        s(2, PROD, Capacity(Some(SEEDED_PODS))),
        s(
            3,
            PROD,
            Scale {
                namespace: "shop",
                name: "web",
                replicas: 5,
            },
        ),
        s(
            15,
            DEV,
            Scale {
                namespace: "shop",
                name: "web",
                replicas: 3,
            },
        ),
        s(15, PROD, Capacity(None)),
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
        Action::BadRollout {
            namespace,
            name,
            image,
        } => update(cluster, namespace, name, |m| {
            m["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
            m["spec"]["progressDeadlineSeconds"] = json!(20);
        })?,
        Action::Capacity(pods) => cluster.set_pod_capacity(*pods),
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
        cluster.set_image_faults([
            (CRASH_IMAGE, ImageFault::Crash),
            (MISSING_IMAGE, ImageFault::PullError),
            (OOM_IMAGE, ImageFault::OomKilled),
        ]);
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
        assert_eq!(round(), Duration::from_secs(217));
        let seeds = seed_workloads();
        let mut faulted = std::collections::HashSet::new();
        let mut denied = std::collections::HashSet::new();
        let mut deleted = std::collections::HashSet::new();
        let mut limited = std::collections::HashSet::new();
        // Workloads rolled to a failing image, until rolled back.
        let mut bad = std::collections::HashSet::new();
        for step in script() {
            match &step.action {
                Action::BadRollout {
                    namespace, name, ..
                } => assert!(bad.insert((step.cluster, *namespace, *name))),
                Action::Image {
                    namespace, name, ..
                } => {
                    bad.remove(&(step.cluster, *namespace, *name));
                }
                _ => {}
            }
            match &step.action {
                Action::Scale {
                    namespace, name, ..
                }
                | Action::Image {
                    namespace, name, ..
                }
                | Action::BadRollout {
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
                Action::Capacity(Some(_)) => assert!(limited.insert(step.cluster)),
                Action::Capacity(None) => assert!(limited.remove(&step.cluster)),
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
            faulted.is_empty()
                && denied.is_empty()
                && deleted.is_empty()
                && limited.is_empty()
                && bad.is_empty(),
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
            &Action::BadRollout {
                namespace: "shop",
                name: "web",
                image: CRASH_IMAGE,
            },
        )
        .unwrap();
        let web = cluster.store().get(&deploy, Some("shop"), "web").unwrap();
        assert_eq!(
            web["spec"]["template"]["spec"]["containers"][0]["image"],
            CRASH_IMAGE
        );
        assert_eq!(web["spec"]["replicas"], 7);
        apply(&cluster, &Action::Capacity(Some(3))).unwrap();
        assert_eq!(*cluster.shared.pod_capacity.read(), Some(3));
        apply(&cluster, &Action::Capacity(None)).unwrap();
        assert_eq!(*cluster.shared.pod_capacity.read(), None);
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
