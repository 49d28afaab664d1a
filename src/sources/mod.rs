//! Sources: per member cluster, one kube-rs watcher per watched resource and
//! a periodic apiserver probe (`member clusters ──watch──▶ [sources]
//! ──Observation──▶ engine`). Sources never know about subscribers: the
//! number of watches on a member depends on its resources only.

pub mod bounded;
mod census;
mod cluster;
pub(crate) mod credentials;
mod discover;
mod listwatch;
mod pacer;
mod probe;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::status::app::DEFAULT_APP_LABEL;
use crate::status::rules::HealthRules;
use crate::status::sync::Gvr;

pub(crate) use cluster::ClusterSource;
pub(crate) use discover::lookup;
pub use pacer::{DEFAULT_START_RATE, Pacer};

/// A resource to keep in sync on a cluster (a sync registry entry).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyncResource {
    /// The resource, by group (empty for core), version and plural name.
    #[serde(flatten)]
    pub gvr: Gvr,
    /// Watch one namespace only.
    pub namespace: Option<String>,
    /// Label selector that limits the watch (`tier=web`); absent: every object.
    pub label_selector: Option<String>,
    /// Field selector that limits the watch (`metadata.name=web`); absent: every object.
    pub field_selector: Option<String>,
}

impl SyncResource {
    /// A resource watched in every namespace, without a label selector.
    pub fn all(group: &str, version: &str, resource: &str) -> Self {
        Self {
            gvr: Gvr::new(group, version, resource),
            namespace: None,
            label_selector: None,
            field_selector: None,
        }
    }
}

/// The resources every cluster watches: what the app machine reads (the
/// custom workloads of the health rules where the member serves them), and
/// the Nodes the cluster document sums up. With the pod watch on, also
/// Pods (narrowed by its label selector) and Events (only `type=Warning`,
/// a field selector the watch adds itself).
/// `pods_wanted`: the pod and event watches are wanted now (always, unless
/// `podWatch.onDemand` and no client looks at the member's apps).
pub(crate) fn builtin_resources(
    pods: &PodWatch,
    rules: &HealthRules,
    pods_wanted: bool,
) -> Vec<SyncResource> {
    let mut resources = vec![
        SyncResource::all("apps", "v1", "deployments"),
        SyncResource::all("apps", "v1", "statefulsets"),
        SyncResource::all("", "v1", "namespaces"),
        SyncResource::all("", "v1", "nodes"),
    ];
    resources.extend(rules.iter().map(|r| SyncResource {
        gvr: r.gvr.clone(),
        namespace: None,
        label_selector: None,
        field_selector: None,
    }));
    if pods.enabled && pods_wanted {
        resources.push(SyncResource {
            label_selector: pods.label_selector.clone(),
            ..SyncResource::all("", "v1", "pods")
        });
        resources.push(SyncResource::all("", "v1", "events"));
    }
    resources
}

/// `initialLists`: how a watch gets the current state of its resource
/// before following its changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum InitialLists {
    /// Streamed inside the watch (`sendInitialEvents`, the WatchList
    /// feature): objects arrive one by one, the member builds no list
    /// response and the gateway holds no page. A resource whose member
    /// refuses it (an apiserver without the feature answers 422) is listed
    /// in pages instead, from then on.
    #[default]
    Streaming,
    /// Paged LISTs (500 objects a page), then a watch.
    Paged,
}

/// `podWatch`: whether each member's Pods and Warning events are watched
/// for the apps' pod-level reasons, and which pods.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodWatch {
    /// Watch Pods and Warning events (default true).
    #[serde(default = "enabled")]
    pub enabled: bool,
    /// Only pods with these labels (`tier=web`); absent: every pod.
    pub label_selector: Option<String>,
    /// Watch a member's Pods and Warning events only while a client's
    /// subscription reaches its apps (`apps/{member}/…`, a live query
    /// included), and for `lingerSeconds` after (default false: always).
    #[serde(default)]
    pub on_demand: bool,
    /// With `onDemand`: how long the watches stay after the last
    /// subscription that needed them went (default 300 s).
    #[serde(default = "linger_seconds")]
    pub linger_seconds: u64,
}

fn enabled() -> bool {
    true
}

fn linger_seconds() -> u64 {
    300
}

impl Default for PodWatch {
    fn default() -> Self {
        Self {
            enabled: true,
            label_selector: None,
            on_demand: false,
            linger_seconds: linger_seconds(),
        }
    }
}

impl PodWatch {
    /// How long on-demand watches stay after their last viewer.
    pub fn linger(&self) -> Duration {
        Duration::from_secs(self.linger_seconds)
    }
}

/// Probe and watch settings.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Time between two apiserver probes (`probe.intervalSeconds`).
    pub probe_interval: Duration,
    /// How long a probe may take before it counts as failed with `Timeout`.
    pub probe_timeout: Duration,
    /// Label whose value names a workload's app.
    pub app_label: String,
    /// List page size (None: kube-rs's default of 500).
    pub page_size: Option<u32>,
    /// Streamed initial state, or paged lists (`initialLists`).
    pub initial_lists: InitialLists,
    /// How long a watch whose member sends bookmarks may stay without an
    /// event or a bookmark before it counts as stalled and is restarted
    /// (`watchSilenceSeconds`; default 150 s, 2.5 bookmark periods).
    pub watch_silence: Duration,
    /// Pods and Warning events for the apps' pod-level reasons.
    pub pod_watch: PodWatch,
    /// How custom workloads are read (`healthRules`, and the built-in ones).
    pub rules: Arc<HealthRules>,
    /// The pace at which probes and watches start, shared by every member
    /// (`memberStartRate`).
    pub pacer: Arc<Pacer>,
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            probe_interval: Duration::from_secs(5),
            probe_timeout: Duration::from_secs(3),
            app_label: DEFAULT_APP_LABEL.into(),
            page_size: None,
            initial_lists: InitialLists::default(),
            watch_silence: listwatch::DEFAULT_SILENCE,
            pod_watch: PodWatch::default(),
            rules: Arc::default(),
            pacer: Arc::new(Pacer::default()),
        }
    }
}

/// Which resources to sync on which clusters (in the spirit of Karpor's SyncRegistry).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyncRegistry {
    /// A name for logs and configuration errors; absent when the registry has none.
    #[serde(default)]
    pub name: Option<String>,
    /// Cluster names, or `"*"` for all.
    pub clusters: Vec<String>,
    /// The resources to sync on those clusters.
    pub resources: Vec<SyncResource>,
}

impl SyncRegistry {
    pub(crate) fn applies_to(&self, cluster: &str) -> bool {
        self.clusters.iter().any(|c| c == "*" || c == cluster)
    }
}

/// Registry resources for one cluster, in registry order.
pub(crate) fn resources_for(cluster: &str, registries: &[SyncRegistry]) -> Vec<SyncResource> {
    registries
        .iter()
        .filter(|r| r.applies_to(cluster))
        .flat_map(|r| r.resources.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_select_clusters_and_parse() {
        let yaml = "- clusters: ['*']\n  resources:\n  - {group: '', version: v1, resource: configmaps, namespace: shop}\n- clusters: [prod]\n  resources:\n  - {group: example.com, version: v1, resource: widgets, labelSelector: 'tier=web'}\n";
        let registries: Vec<SyncRegistry> = serde_yaml_ng::from_str(yaml).unwrap();
        let dev = resources_for("dev", &registries);
        assert_eq!(dev.len(), 1);
        assert_eq!(dev[0].gvr.path(), "core/v1/configmaps");
        assert_eq!(dev[0].namespace.as_deref(), Some("shop"));
        let prod = resources_for("prod", &registries);
        assert_eq!(prod.len(), 2);
        assert_eq!(prod[1].label_selector.as_deref(), Some("tier=web"));
        let bad = "- clusters: ['*']\n  resources:\n  - {group: '', version: v1, resourse: x}\n";
        assert!(serde_yaml_ng::from_str::<Vec<SyncRegistry>>(bad).is_err());
    }
}
