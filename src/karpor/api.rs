//! Reaching Karpor's apiserver (`--karpor-kubeconfig ──▶ [api] ──Api<Cluster>,
//! Api<SyncRegistry>──▶ source, writer`): a client from a kubeconfig, and
//! discovery of where Karpor serves its two kinds. The plural of each kind
//! is read from discovery, never assumed (Karpor serves `SyncRegistry`
//! under `syncclusterresources`).

use std::path::{Path, PathBuf};

use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::{ApiCapabilities, ApiResource};
use kube::{Client, core::GroupVersion};

use super::types::{Cluster, SyncRegistry};

/// Karpor's group of `Cluster`.
pub const CLUSTER_GROUP: &str = "cluster.karpor.io";
/// Karpor's group of `SyncRegistry`.
pub const SEARCH_GROUP: &str = "search.karpor.io";
/// The version both groups are read at.
pub const VERSION: &str = "v1beta1";
/// The kind of member clusters.
pub const CLUSTER_KIND: &str = "Cluster";
/// The kind of sync registries.
pub const SYNC_REGISTRY_KIND: &str = "SyncRegistry";

/// What can go wrong reaching Karpor.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Karpor kubeconfig cannot be read, or names no usable context.
    #[error("Karpor kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The `--karpor-kubeconfig` file.
        path: PathBuf,
        /// What kube-rs said.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No HTTP client could be built from the configuration (TLS settings).
    #[error("Karpor client: {0}")]
    Client(#[source] kube::Error),
    /// Discovery of a group/version failed (unreachable, refused, not served).
    #[error("Karpor discovery of {group_version}: {source}")]
    Discovery {
        /// `cluster.karpor.io/v1beta1`.
        group_version: String,
        /// The request's error.
        #[source]
        source: kube::Error,
    },
    /// The group/version is served but has no resource of the kind.
    #[error("Karpor serves {group_version} but no {kind} in it (found: {found})")]
    KindNotServed {
        /// `search.karpor.io/v1beta1`.
        group_version: String,
        /// `SyncRegistry`.
        kind: String,
        /// The kinds that are there, comma-separated.
        found: String,
    },
}

impl Error {
    /// A short label for metrics and readiness details.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kubeconfig { .. } => "kubeconfig",
            Error::Client(_) => "client",
            Error::Discovery { .. } => "discovery",
            Error::KindNotServed { .. } => "kind_not_served",
        }
    }
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The client configuration for Karpor's apiserver: `context` of the
/// kubeconfig at `path`, or its current context.
pub async fn kube_config(path: &Path, context: Option<&str>) -> Result<kube::Config> {
    let kubeconfig_err = |source| Error::Kubeconfig {
        path: path.to_path_buf(),
        source,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(kubeconfig_err)?;
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(kubeconfig_err)
}

/// One of Karpor's kinds as its apiserver serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KarporKind {
    /// Group, version, kind and the discovered plural.
    pub resource: ApiResource,
    /// Whether a `status` subresource is served (where status writes go).
    pub status_subresource: bool,
}

/// A client of Karpor's apiserver and where it serves `Cluster` and `SyncRegistry`.
#[derive(Clone)]
pub struct KarporApi {
    client: Client,
    clusters: KarporKind,
    registries: KarporKind,
}

impl std::fmt::Debug for KarporApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KarporApi")
            .field("clusters", &self.clusters)
            .field("registries", &self.registries)
            .finish_non_exhaustive()
    }
}

impl KarporApi {
    /// Connects with `config` and discovers both kinds.
    pub async fn connect(config: kube::Config) -> Result<Self> {
        let client = crate::sources::bounded::client(config).map_err(Error::Client)?;
        Self::discover(client).await
    }

    /// Discovers both kinds through `client`.
    pub async fn discover(client: Client) -> Result<Self> {
        let clusters = discover_kind(&client, CLUSTER_GROUP, CLUSTER_KIND).await?;
        let registries = discover_kind(&client, SEARCH_GROUP, SYNC_REGISTRY_KIND).await?;
        Ok(Self {
            client,
            clusters,
            registries,
        })
    }

    /// The client, for requests the typed handles do not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Where `Cluster` is served.
    pub fn cluster_kind(&self) -> &KarporKind {
        &self.clusters
    }

    /// Where `SyncRegistry` is served.
    pub fn registry_kind(&self) -> &KarporKind {
        &self.registries
    }

    /// Karpor's `Cluster` objects.
    pub fn clusters(&self) -> Api<Cluster> {
        Api::all_with(self.client.clone(), &self.clusters.resource)
    }

    /// Karpor's `SyncRegistry` objects.
    pub fn registries(&self) -> Api<SyncRegistry> {
        Api::all_with(self.client.clone(), &self.registries.resource)
    }
}

/// Finds `kind` in `group`'s `v1beta1` on the server.
async fn discover_kind(client: &Client, group: &str, kind: &str) -> Result<KarporKind> {
    let gv = GroupVersion::gv(group, VERSION);
    let group_version = format!("{group}/{VERSION}");
    let api_group = kube::discovery::pinned_group(client, &gv)
        .await
        .map_err(|source| Error::Discovery {
            group_version: group_version.clone(),
            source,
        })?;
    find_kind(&api_group.versioned_resources(VERSION), kind).ok_or_else(|| Error::KindNotServed {
        group_version,
        kind: kind.into(),
        found: api_group
            .versioned_resources(VERSION)
            .iter()
            .map(|(ar, _)| format!("{} ({})", ar.kind, ar.plural))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// The top-level resource of `kind` among discovered resources (kube-rs
/// lists subresources such as `clusters/status` under their resource, not here).
fn find_kind(resources: &[(ApiResource, ApiCapabilities)], kind: &str) -> Option<KarporKind> {
    resources
        .iter()
        .find(|(ar, _)| ar.kind == kind)
        .map(|(ar, caps)| KarporKind {
            resource: ar.clone(),
            status_subresource: caps
                .subresources
                .iter()
                .any(|(sub, _)| sub.plural == "status"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::discovery::Scope;

    fn resource(kind: &str, plural: &str, subresources: &[&str]) -> (ApiResource, ApiCapabilities) {
        let ar = ApiResource {
            group: SEARCH_GROUP.into(),
            version: VERSION.into(),
            api_version: format!("{SEARCH_GROUP}/{VERSION}"),
            kind: kind.into(),
            plural: plural.into(),
        };
        let subresources = subresources
            .iter()
            .map(|name| {
                let sub = ApiResource {
                    plural: (*name).into(),
                    ..ar.clone()
                };
                let caps = ApiCapabilities {
                    scope: Scope::Cluster,
                    subresources: vec![],
                    operations: vec!["get".into(), "update".into()],
                };
                (sub, caps)
            })
            .collect();
        let caps = ApiCapabilities {
            scope: Scope::Cluster,
            subresources,
            operations: vec!["list".into(), "watch".into()],
        };
        (ar, caps)
    }

    #[test]
    fn the_kind_is_found_under_whatever_plural_is_served() {
        let served = [
            resource("TransformRule", "transformrules", &[]),
            resource("SyncRegistry", "syncclusterresources", &["status"]),
        ];
        let found = find_kind(&served, SYNC_REGISTRY_KIND).unwrap();
        assert_eq!(found.resource.plural, "syncclusterresources");
        assert!(found.status_subresource);
        let without_status = [resource("SyncRegistry", "syncregistries", &[])];
        let found = find_kind(&without_status, SYNC_REGISTRY_KIND).unwrap();
        assert_eq!(found.resource.plural, "syncregistries");
        assert!(!found.status_subresource);
        assert_eq!(find_kind(&served, CLUSTER_KIND), None);
    }

    #[tokio::test]
    async fn a_bad_kubeconfig_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("karpor.yaml");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n",
        )
        .unwrap();
        let err = kube_config(&path, Some("nope")).await.unwrap_err();
        assert_eq!(err.metric_label(), "kubeconfig");
        assert!(err.to_string().contains("karpor.yaml"), "{err}");
        let missing = kube_config(&dir.path().join("absent"), None)
            .await
            .unwrap_err();
        assert!(missing.to_string().contains("absent"), "{missing}");
    }
}
