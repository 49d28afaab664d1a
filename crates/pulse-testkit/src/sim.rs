//! Simulated clusters on ephemeral loopback ports with a fast controller,
//! and the workloads tests seed them with.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube_pulse_sim::{ConvergeConfig, SimCluster, SimConfig, WorkloadSeed, workload_manifest};

/// A simulated cluster with a fast controller and frequent bookmarks.
pub async fn sim() -> SimCluster {
    sim_with(|_| {}).await
}

/// A simulated cluster with a configuration adjusted by `tweak`.
pub async fn sim_with(tweak: impl FnOnce(&mut SimConfig)) -> SimCluster {
    let mut config = SimConfig {
        converge: ConvergeConfig {
            tick: Duration::from_millis(50),
            pods_per_tick: 1,
        },
        bookmark_interval: Duration::from_millis(200),
        namespaces: vec!["shop".into()],
        ..SimConfig::named("test")
    };
    tweak(&mut config);
    SimCluster::start(config)
        .await
        .expect("simulated cluster starts")
}

/// A `kind` workload `namespace/name` of `replicas` pods of `registry.example/{name}:1`.
pub fn workload(kind: &str, namespace: &str, name: &str, replicas: u32) -> WorkloadSeed {
    WorkloadSeed {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
        replicas,
        image: format!("registry.example/{name}:1"),
    }
}

/// A Deployment `namespace/name` of `replicas` pods of `registry.example/{name}:1`.
pub fn deployment(namespace: &str, name: &str, replicas: u32) -> WorkloadSeed {
    workload("Deployment", namespace, name, replicas)
}

/// The manifest of Deployment `shop/{name}` with `replicas` pods of `image`.
pub fn deployment_manifest(name: &str, replicas: u32, image: &str) -> serde_json::Value {
    workload_manifest(&WorkloadSeed {
        image: image.into(),
        ..deployment("shop", name, replicas)
    })
}

/// Creates Deployment `shop/{name}` with `replicas` pods of `image` on `sim`.
pub fn deploy(sim: &SimCluster, name: &str, replicas: u32, image: &str) {
    sim.apply(&deployment_manifest(name, replicas, image))
        .unwrap();
}

/// The `clusters:` entries of a gateway's configuration file for `sims`
/// (`  - {name, server}` lines, the list's items only).
pub fn clusters_yaml<'a>(sims: impl IntoIterator<Item = &'a SimCluster>) -> String {
    sims.into_iter()
        .map(|s| format!("  - {{name: {}, server: \"{}\"}}\n", s.name(), s.url()))
        .collect()
}

/// A kubeconfig in `dir` for a (simulated) Karpor apiserver at `server`,
/// as the `karpor-kubeconfig` ConfigMap holds one.
pub fn karpor_kubeconfig(dir: &Path, server: &str) -> PathBuf {
    let path = dir.join("karpor-kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: karpor\n  cluster: {{server: '{server}'}}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: karpor\n  context: {{cluster: karpor, user: u}}\ncurrent-context: karpor\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Settings of a gateway reading the Karpor at `server` through a
/// kubeconfig written in `dir`, its members' loopback endpoints allowed;
/// with `writes`, it also writes status back onto Karpor's objects, as
/// replica `e2e`.
pub fn karpor_settings(
    dir: &Path,
    server: &str,
    writes: bool,
) -> kube_pulse::karpor::KarporSettings {
    kube_pulse::karpor::KarporSettings {
        kubeconfig: karpor_kubeconfig(dir, server),
        context: None,
        allow_exec: false,
        endpoints: kube_pulse::karpor::EndpointPolicy::allowing_loopback(),
        status: writes.then(|| kube_pulse::karpor::WriterSettings {
            replica: "e2e".into(),
            ..Default::default()
        }),
    }
}

/// Waits (20 s at most) until `sim` holds `count` open watches.
pub async fn until_open_watches(sim: &SimCluster, count: usize) {
    crate::poll::eventually(Duration::from_secs(20), "an open watch", || async {
        (sim.stats().open_watches == count).then_some(())
    })
    .await;
}
