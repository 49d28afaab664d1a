//! Workload controller emulation: Deployment and StatefulSet status converges
//! on spec a few pods per tick, and terminating namespaces are emptied.
//!
//! The pod model and the status it implies are pure functions
//! (`rollout.rs`, re-exported here); [`run`] is the loop that applies them to
//! the store, through the ReplicaSets (`replicasets.rs`) and the pods
//! (`kubelet.rs`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::custom_status;
use super::kubelet::{Kubelet, Workload, fault_of};
use super::object::{is_terminating, name_of, namespace_of};
use super::pods::Owner;
use super::replicasets;
use super::rollout::desired_replicas;
pub use super::rollout::{Pods, deployment_status, images, statefulset_status, template_hash};
use super::shared::Shared;
use super::workloads::{self, Ownership};

/// How fast workloads converge.
#[derive(Debug, Clone, Copy)]
pub struct ConvergeConfig {
    /// Time between controller steps.
    pub tick: Duration,
    /// Pods created, readied or removed per workload per step.
    pub pods_per_tick: u32,
}

impl Default for ConvergeConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_millis(500),
            pods_per_tick: 1,
        }
    }
}

/// The controller loop of one simulated cluster.
pub(crate) async fn run(shared: Arc<Shared>, config: ConvergeConfig, shutdown: CancellationToken) {
    let mut controllers = Controllers::default();
    let mut ticker = tokio::time::interval(config.tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        controllers.step_all(&shared, config, Utc::now());
    }
}

/// What the controllers remember between steps.
#[derive(Debug, Default)]
struct Controllers {
    /// Pod counts by workload uid.
    pods: HashMap<String, Pods>,
    /// `spec.replicas` last seen, by workload uid (for scaling events).
    desired: HashMap<String, u32>,
    kubelet: Kubelet,
}

impl Controllers {
    fn step_all(&mut self, shared: &Shared, config: ConvergeConfig, now: DateTime<Utc>) {
        let store = &shared.store;
        let faults = shared.image_faults();
        let capacity = *shared.pod_capacity.read();
        let seconds = config.tick.as_secs_f64();
        let mut live = BTreeSet::new();
        // Pods the cluster holds so far this step (against its capacity).
        let mut used: u32 = 0;
        for kind in &workloads::KINDS {
            let found = store
                .catalog()
                .find(kind.group, kind.version, kind.plural)
                .cloned();
            let Some(def) = found else {
                continue;
            };
            let via_replica_sets = kind.ownership == Ownership::ReplicaSets;
            for obj in store.snapshot(&def) {
                let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_string();
                live.insert(uid.clone());
                let model = self
                    .pods
                    .entry(uid.clone())
                    .or_insert_with(|| Pods::new(now));
                let fault = fault_of(&obj, &faults);
                let room = capacity.map_or(u32::MAX, |c| c.saturating_sub(used + model.old));
                let recreate = obj.pointer("/spec/strategy/type") == Some(&json!("Recreate"));
                let desired = desired_replicas(&obj);
                model.step(
                    desired,
                    template_hash(&obj),
                    if fault.is_some() { 0 } else { room },
                    recreate,
                    config.pods_per_tick,
                    now,
                );
                let schedulable = model.new.min(room);
                used = used.saturating_add(model.old + schedulable);
                let previous = self.desired.insert(uid.clone(), desired);
                // The controller scales a new ReplicaSet up when the Deployment
                // appears, and on every change of `replicas`.
                let scaled = match previous {
                    None => desired > 0,
                    Some(p) => p != desired,
                };
                if scaled && via_replica_sets {
                    let rs = Owner {
                        workload: &obj,
                        template_hash: model.template_hash,
                        replica_set_uid: None,
                    }
                    .replica_set();
                    let verb = if previous < Some(desired) {
                        "up"
                    } else {
                        "down"
                    };
                    self.kubelet.workload_event(
                        store,
                        &obj,
                        "ScalingReplicaSet",
                        format!("Scaled {verb} replica set {rs} to {desired}"),
                        now,
                    );
                }
                let replica_sets = if via_replica_sets {
                    replicasets::sync(store, &obj, model, desired)
                } else {
                    replicasets::Uids::default()
                };
                self.kubelet.sync(
                    store,
                    &Workload {
                        object: &obj,
                        pods: model,
                        schedulable,
                        fault,
                        replica_sets: &replica_sets,
                    },
                    seconds,
                    now,
                );
                let status = match kind.kind {
                    "Deployment" => deployment_status(&obj, model, now),
                    "StatefulSet" => {
                        let previous = obj
                            .pointer("/status/currentRevision")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        statefulset_status(&obj, model, previous)
                    }
                    _ => custom_status::status(kind, &obj, model, now),
                };
                if obj.get("status") == Some(&status) {
                    continue;
                }
                let (ns, name) = (namespace_of(&obj).to_string(), name_of(&obj).to_string());
                let result = store.set_status(&def, Some(&ns), &name, status);
                if let Err(err) = result
                    && err.code != 404
                {
                    tracing::warn!(cluster = %shared.name, %name, cause = %err, "status update failed");
                }
            }
        }
        self.pods.retain(|uid, _| live.contains(uid));
        self.desired.retain(|uid, _| live.contains(uid));
        self.kubelet.forget_others(store, &live);
        replicasets::collect_garbage(store, &live);
        self.kubelet.run_unowned(store, &faults, seconds, now);
        let ns_def = store.catalog().namespaces().clone();
        for ns in store.snapshot(&ns_def) {
            if is_terminating(&ns) {
                store.finalize_namespace(name_of(&ns));
            }
        }
    }
}
