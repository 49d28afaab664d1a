//! Cluster and sync documents (`Observation::Cluster`, `Observation::Sync`
//! ──▶ [cluster and sync machines] ──▶ hub`): a member's status and each
//! watched resource's, with their feedback: sync counts and cache figures
//! up into the cluster, `ClusterDown`/`ClusterUp` down into its syncs.

use chrono::{DateTime, Utc};

use super::state::{Engine, to_doc};
use super::transitions::{self, Subject};
use crate::protocol::topic;
use crate::status::cluster::{CacheInfo, ClusterInput, ClusterPhase, ResourceCounts};
use crate::status::sync::{Gvr, SyncInput, SyncPhase, SyncStatus};

impl Engine {
    pub(super) fn cluster_input(&mut self, cluster: &str, input: ClusterInput, now: DateTime<Utc>) {
        let thresholds = self.thresholds;
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        let before = model.status.phase();
        model.status = model.status.clone().step(input, thresholds, now);
        let after = model.status.phase();
        let sync_input = match (before, after) {
            (b, ClusterPhase::Unhealthy) if b != ClusterPhase::Unhealthy => {
                Some(SyncInput::ClusterDown)
            }
            (ClusterPhase::Unhealthy, ClusterPhase::Healthy | ClusterPhase::Degraded) => {
                Some(SyncInput::ClusterUp)
            }
            _ => None,
        };
        let gvrs: Vec<Gvr> = model.syncs.keys().cloned().collect();
        // The cluster's own transition before those it causes in its syncs.
        self.log_cluster(cluster);
        if let Some(input) = sync_input {
            for gvr in gvrs {
                self.step_sync(cluster, &gvr, input.clone(), now);
            }
        }
        self.recount(cluster, now);
        self.publish_cluster(cluster);
    }

    fn step_sync(&mut self, cluster: &str, gvr: &Gvr, input: SyncInput, now: DateTime<Utc>) {
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        let (resource, topic) = (gvr.path(), topic::sync(cluster, &gvr.path()));
        let down = model.status.phase() == ClusterPhase::Unhealthy;
        // A resource first observed in this run of the member continues the
        // document the hub holds, if any (published by its previous owner).
        let (sync, first) = match model.syncs.remove(gvr) {
            Some(sync) => (sync, false),
            None => {
                let held = self.hub.get(&topic);
                let sync = held
                    .and_then(|held| SyncStatus::restore(&held.doc, cluster, gvr))
                    .unwrap_or_else(|| SyncStatus::new(cluster, gvr.clone(), now));
                (sync, true)
            }
        };
        let before = transitions::last(&sync.lifecycle);
        // A resource first seen while its member is down is stopped like
        // the others were when it went down: its watch's failures (the
        // member's, not the resource's) do not make it an `Error`.
        let sync = if first && down && !matches!(input, SyncInput::ClusterDown) {
            sync.stopped_at_start(now)
        } else {
            sync
        };
        let sync = sync.step(input, now);
        let subject = Subject::Sync {
            cluster,
            resource: &resource,
        };
        self.transitions
            .log_after(&subject, &topic, &sync.lifecycle, before);
        self.hub.put(&topic, to_doc(&sync));
        model.syncs.insert(gvr.clone(), sync);
    }

    pub(super) fn sync_input(
        &mut self,
        cluster: &str,
        gvr: Gvr,
        input: SyncInput,
        now: DateTime<Utc>,
    ) {
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        // The source ends a watch before reporting its removal, so whatever a
        // removed resource reports afterwards comes from a new watch: the
        // resource is back in a registry, with a status of its own.
        // Taken out, it is first seen again below: its held document, a
        // removed one, is not continued.
        if !matches!(input, SyncInput::Removed | SyncInput::NoViewers)
            && model.syncs.get(&gvr).is_some_and(SyncStatus::is_removed)
        {
            model.syncs.remove(&gvr);
        }
        self.step_sync(cluster, &gvr, input, now);
        self.recount(cluster, now);
        self.publish_cluster(cluster);
    }

    /// Feeds the cluster machine the current sync counts when they changed.
    fn recount(&mut self, cluster: &str, now: DateTime<Utc>) {
        let thresholds = self.thresholds;
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        // Before its first sync observation a member keeps the counts its
        // document shows: none for a new one, the last published ones for
        // one continued from another owner (not zero until its watches report).
        if model.syncs.is_empty() {
            return;
        }
        let active = model.syncs.values().filter(|s| !s.is_removed());
        let mut counts = ResourceCounts::default();
        let mut not_served = Vec::new();
        for s in active {
            counts.total += 1;
            if s.phase() == SyncPhase::Syncing {
                counts.synced += 1;
            }
            if s.is_failing() {
                counts.failing += 1;
            }
            if s.is_not_served() {
                counts.not_served += 1;
                not_served.push(s.resource.path());
            }
        }
        // The names first, so that the counts' step shows both at once.
        if not_served != model.status.not_served {
            model.status =
                model
                    .status
                    .clone()
                    .step(ClusterInput::NotServed(not_served), thresholds, now);
        }
        if counts != model.status.resources {
            model.status =
                model
                    .status
                    .clone()
                    .step(ClusterInput::Resources(counts), thresholds, now);
        }
        let cache = cache_info(model.syncs.values());
        if cache != model.status.cache {
            // The machine coarsens the count: most of these steps change nothing.
            model.status = model
                .status
                .clone()
                .step(ClusterInput::Cache(cache), thresholds, now);
        }
    }

    /// Logs the cluster's transitions not logged yet.
    pub(super) fn log_cluster(&mut self, cluster: &str) {
        if let Some(model) = self.clusters.get_mut(cluster) {
            let lifecycle = &model.status.lifecycle;
            let subject = Subject::Cluster { cluster };
            self.transitions
                .log_after(&subject, &topic::cluster(cluster), lifecycle, model.logged);
            model.logged = transitions::last(lifecycle);
        }
    }

    /// Puts the cluster's document into the hub, logging its new transitions.
    pub(super) fn publish_cluster(&mut self, cluster: &str) {
        self.log_cluster(cluster);
        if let Some(model) = self.clusters.get(cluster) {
            self.hub
                .put(&topic::cluster(cluster), to_doc(&model.status));
        }
    }
}

/// The exact cache figures of a cluster: objects summed over its watched
/// resources' caches, and the latest completed list of any of them
/// (resources no registry names any more are left out, as in the counts).
fn cache_info<'a>(syncs: impl Iterator<Item = &'a SyncStatus>) -> CacheInfo {
    syncs
        .filter(|s| !s.is_removed())
        .fold(CacheInfo::default(), |acc, s| CacheInfo {
            objects: acc.objects + s.cached_objects(),
            last_list_at: acc.last_list_at.max(s.last_list_at()),
        })
}
