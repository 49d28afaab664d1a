//! `kube-pulse sim`: one simulated Kubernetes cluster, or with `--karpor` a
//! simulated Karpor apiserver, from flags (only in builds with the `demo`
//! feature).

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use kube_pulse_sim::{
    ConvergeConfig, KarporOptions, ResourceDef, SimCluster, SimConfig, WorkloadSeed,
};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// Flags of `sim`: one simulated cluster's address, seed and faults.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Address of the simulated apiserver (plain HTTP).
    #[arg(long, env = "KUBE_PULSE_SIM_LISTEN", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Cluster name (shown in logs and the control API).
    #[arg(long, default_value = "sim")]
    pub name: String,
    /// Require `Authorization: Bearer TOKEN` on API requests (kubectl sends
    /// a token only over HTTPS: add --tls for kubectl).
    #[arg(long, env = "KUBE_PULSE_SIM_TOKEN")]
    pub token: Option<String>,
    /// Serve HTTPS with a certificate made at start for localhost and the
    /// loopback addresses; --write-kubeconfig writes its CA.
    #[arg(long)]
    pub tls: bool,
    /// Namespace to create at start (repeatable).
    #[arg(long = "namespace", value_name = "NAME")]
    pub namespaces: Vec<String>,
    /// Deployment to create at start: NAMESPACE/NAME[:REPLICAS] (repeatable).
    #[arg(long = "app", value_name = "NS/NAME[:REPLICAS]", value_parser = parse_workload)]
    pub apps: Vec<(String, String, u32)>,
    /// StatefulSet to create at start: NAMESPACE/NAME[:REPLICAS] (repeatable).
    #[arg(long = "statefulset", value_name = "NS/NAME[:REPLICAS]", value_parser = parse_workload)]
    pub statefulsets: Vec<(String, String, u32)>,
    /// KusionStack CollaSet to create at start: NAMESPACE/NAME[:REPLICAS]
    /// (repeatable; serves the custom workload CRDs).
    #[arg(long = "collaset", value_name = "NS/NAME[:REPLICAS]", value_parser = parse_workload)]
    pub collasets: Vec<(String, String, u32)>,
    /// OpenKruise CloneSet to create at start (as --collaset).
    #[arg(long = "cloneset", value_name = "NS/NAME[:REPLICAS]", value_parser = parse_workload)]
    pub clonesets: Vec<(String, String, u32)>,
    /// Argo Rollouts Rollout to create at start (as --collaset).
    #[arg(long = "rollout", value_name = "NS/NAME[:REPLICAS]", value_parser = parse_workload)]
    pub rollouts: Vec<(String, String, u32)>,
    /// Serve the custom workload kinds (CollaSet, CloneSet, Rollout)
    /// through their CRDs and run their controllers, even with none seeded.
    #[arg(long)]
    pub workload_crds: bool,
    /// Container image of the seeded workloads.
    #[arg(long, default_value = "registry.example/app:1.0")]
    pub image: String,
    /// Image whose pods never become ready (repeatable).
    #[arg(long = "failing-image", value_name = "IMAGE")]
    pub failing_images: Vec<String>,
    /// What goes wrong with pods of an image: IMAGE=pullError|crash|oomKilled|notReady (repeatable).
    #[arg(long = "image-fault", value_name = "IMAGE=FAULT", value_parser = parse_image_fault)]
    pub image_faults: Vec<(String, kube_pulse_sim::pods::ImageFault)>,
    /// Pods the cluster has room for; more stay Pending as unschedulable.
    #[arg(long, value_name = "PODS")]
    pub pod_capacity: Option<u32>,
    /// Answer 403 for GROUP/RESOURCE[:VERB], e.g. apps/deployments or core/namespaces:watch (repeatable).
    #[arg(long = "deny", value_name = "RULE")]
    pub deny: Vec<String>,
    /// Extra resource GROUP/VERSION/PLURAL/KIND[/cluster] (repeatable), e.g. example.com/v1/widgets/Widget.
    #[arg(long = "crd", value_name = "SPEC", value_parser = parse_crd)]
    pub crds: Vec<ResourceDef>,
    /// Events kept for watch resume; older resourceVersions get 410 Expired.
    #[arg(long, default_value_t = 1000)]
    pub window: usize,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 10)]
    pub bookmark_secs: u64,
    /// Answer as an apiserver without the WatchList feature: streaming
    /// lists (`sendInitialEvents`) are refused, clients list in pages.
    #[arg(long)]
    pub no_watch_list: bool,
    /// Milliseconds between workload controller steps.
    #[arg(long, default_value_t = 500)]
    pub tick_ms: u64,
    /// Pods created or readied per workload per step.
    #[arg(long, default_value_t = 1)]
    pub pods_per_tick: u32,
    /// Also serve the control API (`/_sim/...`) here, so it survives the `refuse` fault.
    #[arg(long, value_name = "ADDR")]
    pub control_listen: Option<SocketAddr>,
    /// Serve Karpor's API (clusters, syncclusterresources, …) instead of a
    /// Kubernetes cluster's, holding Karpor's default sync registry.
    #[arg(long, conflicts_with_all = ["apps", "statefulsets", "collasets", "clonesets", "rollouts"])]
    pub karpor: bool,
    /// With --karpor: Karpor #831's Cluster status schema (`apiserver`,
    /// `version`, `conditions`; set on create as Karpor does); without it,
    /// Karpor 0.6's, which keeps only `healthy`.
    #[arg(long, requires = "karpor")]
    pub karpor_conditions: bool,
    /// With --karpor: Karpor #836's Cluster schema, whose spec has `mode`
    /// (`pull` or `push`: an agent in the member cluster); without it,
    /// `spec.mode` is pruned as by a Karpor without #836.
    #[arg(long, requires = "karpor")]
    pub karpor_push_mode: bool,
    /// Write a kubeconfig for this apiserver here once it listens (context
    /// named after --name).
    #[arg(long, value_name = "PATH")]
    pub write_kubeconfig: Option<std::path::PathBuf>,
}

/// Parses `IMAGE=FAULT`.
pub fn parse_image_fault(s: &str) -> Result<(String, kube_pulse_sim::pods::ImageFault), String> {
    let (image, fault) = s
        .rsplit_once('=')
        .filter(|(image, _)| !image.is_empty())
        .ok_or_else(|| format!("{s:?} must look like IMAGE=FAULT"))?;
    Ok((
        image.to_string(),
        kube_pulse_sim::pods::ImageFault::parse(fault)?,
    ))
}

/// Parses `NAMESPACE/NAME[:REPLICAS]`.
pub fn parse_workload(s: &str) -> Result<(String, String, u32), String> {
    let (path, replicas) = match s.rsplit_once(':') {
        Some((p, r)) => (
            p,
            r.parse::<u32>()
                .map_err(|_| format!("replicas {r:?} is not a non-negative integer"))?,
        ),
        None => (s, 1),
    };
    let (ns, name) = path
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| format!("{s:?} must look like NAMESPACE/NAME[:REPLICAS]"))?;
    Ok((ns.to_string(), name.to_string(), replicas))
}

/// Parses `GROUP/VERSION/PLURAL/KIND[/cluster]`.
pub fn parse_crd(s: &str) -> Result<ResourceDef, String> {
    let parts: Vec<&str> = s.split('/').collect();
    let (group, version, plural, kind, namespaced) = match parts.as_slice() {
        [g, v, p, k] => (*g, *v, *p, *k, true),
        [g, v, p, k, "cluster"] => (*g, *v, *p, *k, false),
        _ => {
            return Err(format!(
                "{s:?} must look like GROUP/VERSION/PLURAL/KIND[/cluster]"
            ));
        }
    };
    if [group, version, plural, kind].iter().any(|p| p.is_empty()) || !group.contains('.') {
        return Err(format!(
            "{s:?}: group must be a domain (e.g. example.com) and no part may be empty"
        ));
    }
    let mut def = ResourceDef::custom(group, version, plural, kind);
    def.namespaced = namespaced;
    Ok(def)
}

impl SimArgs {
    /// The simulator configuration these flags describe.
    pub fn to_config(&self) -> SimConfig {
        let seeds = |list: &[(String, String, u32)], kind: &str| -> Vec<WorkloadSeed> {
            list.iter()
                .map(|(ns, name, replicas)| WorkloadSeed {
                    kind: kind.into(),
                    namespace: ns.clone(),
                    name: name.clone(),
                    replicas: *replicas,
                    image: self.image.clone(),
                })
                .collect()
        };
        let mut workloads = seeds(&self.apps, "Deployment");
        workloads.extend(seeds(&self.statefulsets, "StatefulSet"));
        let custom = seeds(&self.collasets, "CollaSet")
            .into_iter()
            .chain(seeds(&self.clonesets, "CloneSet"))
            .chain(seeds(&self.rollouts, "Rollout"));
        let before = workloads.len();
        workloads.extend(custom);
        let workload_crds = self.workload_crds || workloads.len() > before;
        SimConfig {
            name: self.name.clone(),
            listen: self.listen,
            token: self.token.clone(),
            extra_resources: self.crds.clone(),
            window: self.window.max(1),
            bookmark_interval: Duration::from_secs(self.bookmark_secs.max(1)),
            watch_list: !self.no_watch_list,
            converge: ConvergeConfig {
                tick: Duration::from_millis(self.tick_ms.max(10)),
                pods_per_tick: self.pods_per_tick.max(1),
            },
            workload_crds,
            deny: self.deny.clone(),
            namespaces: self.namespaces.clone(),
            workloads,
            reviews: Default::default(),
            image_faults: self.image_faults.iter().cloned().collect(),
            pod_capacity: self.pod_capacity,
            karpor: self.karpor.then_some(KarporOptions {
                conditions: self.karpor_conditions,
                default_registry: true,
                push_mode: self.karpor_push_mode,
            }),
            tls: self.tls,
        }
    }
}

/// Runs the simulated cluster these flags describe (and its control API on
/// `--control-listen`) until `shutdown`.
pub async fn run(args: SimArgs, shutdown: CancellationToken) -> Result<()> {
    let cluster = SimCluster::start_with_shutdown(args.to_config(), shutdown.clone())
        .await
        .map_err(|source| Error::Simulator {
            cluster: args.name.clone(),
            source,
        })?;
    cluster.set_failing_images(args.failing_images.clone());
    if let Some(path) = &args.write_kubeconfig {
        std::fs::write(path, cluster.kubeconfig(&args.name)).map_err(|source| {
            Error::Simulator {
                cluster: args.name.clone(),
                source,
            }
        })?;
    }
    // Both listeners are bound before the first line is printed, so
    // whoever waits for it can use either at once.
    let control_listener = match args.control_listen {
        Some(addr) => Some(crate::http::server::bind(addr).await?),
        None => None,
    };
    if args.karpor {
        println!("simulated Karpor apiserver listening on {}", cluster.url());
    } else {
        println!(
            "simulated cluster {} listening on {}",
            cluster.name(),
            cluster.url()
        );
    }
    let control = match control_listener {
        Some(listener) => {
            println!(
                "control API on http://{}/_sim/",
                listener.local_addr().map_err(Error::Serve)?
            );
            // The same paths as on the cluster's own port (docs/SIMULATOR.md).
            let app = axum::Router::new().nest("/_sim", cluster.control_router());
            let token = shutdown.clone();
            Some(tokio::spawn(crate::http::server::serve(
                listener, app, None, token,
            )))
        }
        None => None,
    };
    shutdown.cancelled().await;
    cluster.shutdown().await;
    if let Some(task) = control {
        task.await
            .map_err(|e| Error::Serve(std::io::Error::other(e)))??;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_specs() {
        assert_eq!(
            parse_workload("shop/web:3").unwrap(),
            ("shop".into(), "web".into(), 3)
        );
        assert_eq!(parse_workload("shop/web").unwrap().2, 1);
        for bad in ["web", "/web", "shop/", "shop/web:x", "a/b/c", "shop/web:-1"] {
            assert!(parse_workload(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn image_fault_specs() {
        use kube_pulse_sim::pods::ImageFault;
        assert_eq!(
            parse_image_fault("registry.example/web:2=crash").unwrap(),
            ("registry.example/web:2".into(), ImageFault::Crash)
        );
        assert_eq!(
            parse_image_fault("a=b=oomKilled").unwrap().1,
            ImageFault::OomKilled
        );
        for bad in ["web", "=crash", "web=boom"] {
            assert!(parse_image_fault(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn crd_specs() {
        let def = parse_crd("example.com/v1/widgets/Widget").unwrap();
        assert!(def.namespaced);
        assert_eq!(def.api_version(), "example.com/v1");
        assert!(
            !parse_crd("example.com/v1/globals/Global/cluster")
                .unwrap()
                .namespaced
        );
        for bad in [
            "widgets",
            "core/v1/widgets/Widget",
            "example.com/v1//Widget",
        ] {
            assert!(parse_crd(bad).is_err(), "{bad}");
        }
    }
}
