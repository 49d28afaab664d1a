//! A simulated Karpor apiserver (`karpor-server`): the source of members and
//! sync registries that kube-pulse can read, and the objects it writes
//! status back to (`Karpor ──watch──▶ members, registries; status ◀── writer`).
//!
//! It is an ordinary [`SimCluster`] started with [`SimConfig::karpor`] set:
//! its catalogue is Karpor 0.6's — `cluster.karpor.io/v1beta1` `clusters`
//! and `search.karpor.io/v1beta1` `syncclusterresources` (kind SyncRegistry),
//! `syncresources`, `transformrules`, `trimrules`, all cluster-scoped, the
//! first two with a `status` subresource — beside the core resources Karpor
//! serves (namespaces, pods, secrets, serviceaccounts). Its resources are
//! typed (`typed.rs`): Karpor's strategies and Go types (`schema/karpor.rs`),
//! not a CRD's. The catalogue and the objects tests and the demo create (a
//! Cluster for a member, Karpor's default sync registry) are data, in
//! `karpor_api/`, re-exported here; this module is the top of the crate: it
//! drives running clusters.

use std::sync::Arc;

use serde_json::Value;

use super::managed::{Operation, Writer};
use super::object::UpdateScope;
use super::status::{ApiError, ApiResult};
use super::{SimCluster, SimConfig};

pub use super::karpor_api::{
    CLUSTER_GROUP, Credential, DEFAULT_REGISTRY, DEFAULT_SYNC_RESOURCES, ExecConfig, KarporOptions,
    MemberAccess, ONLY_METADATA_RULE, SEARCH_GROUP, VERSION, catalog, cluster_manifest,
    default_sync_registry, only_metadata_rule, resources,
};

impl MemberAccess {
    /// Access to a simulated member: its URL, with its bearer token (an
    /// empty one when the member takes any request).
    pub fn to_sim(cluster: &SimCluster) -> Self {
        Self {
            endpoint: cluster.url(),
            ca_bundle: None,
            insecure: false,
            credential: Credential::ServiceAccountToken(
                cluster.token().unwrap_or_default().to_string(),
            ),
        }
    }
}

/// Creates (or replaces) a Cluster object in `karpor` for each simulated
/// member, named after it, as an operator registers members in Karpor.
pub fn register_members(karpor: &SimCluster, members: &[&SimCluster]) -> ApiResult<()> {
    for member in members {
        karpor.apply(&cluster_manifest(
            member.name(),
            &MemberAccess::to_sim(member),
        ))?;
    }
    Ok(())
}

/// Writes `status` to the Cluster (`plural` `clusters`) or SyncRegistry
/// (`syncclusterresources`) `name` through the status endpoint's rules, as
/// `manager` (recorded in managedFields): another status writer, for tests.
pub fn write_status(
    karpor: &SimCluster,
    plural: &str,
    name: &str,
    status: Value,
    manager: &str,
) -> ApiResult<Arc<Value>> {
    let group = if plural == "clusters" {
        CLUSTER_GROUP
    } else {
        SEARCH_GROUP
    };
    let store = karpor.store();
    let def = store
        .catalog()
        .find(group, VERSION, plural)
        .cloned()
        .ok_or_else(|| ApiError::bad_request(format!("{plural:?} is not served")))?;
    let writer = Writer {
        manager: manager.to_string(),
        operation: Operation::Update,
        subresource: Some("status"),
    };
    store.mutate_by(
        &def,
        None,
        name,
        UpdateScope::Status,
        false,
        Some(&writer),
        |current| {
            let mut next = current.clone();
            next["status"] = status;
            Ok(next)
        },
    )
}

/// The configuration of a simulated Karpor apiserver named `karpor`.
pub fn config(options: KarporOptions) -> SimConfig {
    SimConfig {
        karpor: Some(options),
        ..SimConfig::named("karpor")
    }
}

/// Starts a simulated Karpor apiserver on a free loopback port.
pub async fn start(options: KarporOptions) -> std::io::Result<SimCluster> {
    SimCluster::start(config(options)).await
}
