//! The state of one simulated cluster that its HTTP handlers, accept loop
//! and controllers share: the store, the faults in force, RBAC and review
//! emulation, counters and the signals that end watches and tasks. Below
//! everything that serves a request or runs a controller; built by
//! [`SimCluster::start`](crate::SimCluster::start).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;

use super::faults::{Faults, Stats};
use super::pods::ImageFault;
use super::resources::ResourceDef;
use super::reviews::ReviewPolicy;
use super::store::Store;

/// State shared by the handlers, the accept loop and the controllers of one cluster.
pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) addr: SocketAddr,
    pub(crate) store: Store,
    pub(crate) token: Option<String>,
    /// Written by the control API and [`SimCluster`]; read by every request.
    pub(crate) faults: tokio::sync::watch::Sender<Faults>,
    pub(crate) deny: RwLock<BTreeSet<String>>,
    pub(crate) failing_images: RwLock<BTreeSet<String>>,
    /// What goes wrong with pods of these images (besides `failing_images`,
    /// whose pods run but never get ready).
    pub(crate) image_faults: RwLock<BTreeMap<String, ImageFault>>,
    /// Pods the cluster has room for (None: unlimited); the rest are unschedulable.
    pub(crate) pod_capacity: RwLock<Option<u32>>,
    /// Answers to TokenReview and SubjectAccessReview.
    pub(crate) reviews: RwLock<ReviewPolicy>,
    pub(crate) stats: Stats,
    /// Bumped to end every open watch stream cleanly.
    pub(crate) close_watches: tokio::sync::watch::Sender<u64>,
    pub(crate) bookmark_interval: Duration,
    /// Streaming lists are served (`SimConfig::watch_list`).
    pub(crate) watch_list: bool,
    pub(crate) shutdown: CancellationToken,
}

impl Shared {
    /// Every image with a fault: `failing_images` as `NotReady`, then the
    /// explicit faults (which win).
    pub(crate) fn image_faults(&self) -> BTreeMap<String, ImageFault> {
        let mut faults: BTreeMap<String, ImageFault> = self
            .failing_images
            .read()
            .iter()
            .map(|i| (i.clone(), ImageFault::NotReady))
            .collect();
        faults.extend(self.image_faults.read().clone());
        faults
    }
    pub(crate) fn is_denied(&self, def: &ResourceDef, verb: &str) -> bool {
        let key = def.stats_key();
        let deny = self.deny.read();
        deny.contains(&key) || deny.contains(&format!("{key}:{verb}"))
    }

    pub(crate) fn set_faults(&self, faults: Faults) {
        self.faults.send_replace(faults);
    }

    /// Clears `applied` after `after`, unless the faults were changed meanwhile.
    pub(crate) fn heal_later(self: &Arc<Self>, after: Duration, applied: Faults) {
        let shared = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shared.shutdown.cancelled() => {}
                _ = tokio::time::sleep(after) => {
                    shared.faults.send_if_modified(|f| {
                        if *f == applied { *f = Faults::default(); true } else { false }
                    });
                }
            }
        });
    }
}
