//! The nodes and pod figures of a cluster document (`node watch, pod
//! watch ──▶ [capacity] ──▶ cluster machine ──▶ hub`): the engine keeps
//! each node's few numbers and the pods' running sums, and tells the
//! cluster machine their totals when they change; the machine shows node
//! changes at once and coarsens pod churn (src/status/capacity.rs).

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::observation::Observation;
use super::state::Engine;
use crate::status::capacity::NodeSummary;
use crate::status::cluster::ClusterInput;

impl Engine {
    /// Node observations: the cluster's node map, then its document.
    pub(super) fn node_input(&mut self, observation: Observation, now: DateTime<Utc>) {
        let cluster = observation.cluster().to_string();
        let Some(model) = self.clusters.get_mut(&cluster) else {
            return;
        };
        let changed = match observation {
            Observation::NodesListed { items, .. } => {
                let nodes: HashMap<Box<str>, _> = items
                    .into_iter()
                    .map(|(name, facts)| (name.into_boxed_str(), facts))
                    .collect();
                let changed = model.nodes.as_ref() != Some(&nodes);
                model.nodes = Some(nodes);
                changed
            }
            Observation::NodeApplied { name, node, .. } => {
                let nodes = model.nodes.get_or_insert_with(HashMap::new);
                nodes.insert(name.into_boxed_str(), node) != Some(node)
            }
            Observation::NodeDeleted { name, .. } => model
                .nodes
                .as_mut()
                .is_some_and(|n| n.remove(name.as_str()).is_some()),
            _ => false,
        };
        if changed {
            self.capacity_changed(&cluster, true, now);
        }
    }

    /// Tells the cluster machine the current sums; `exact` shows the pod
    /// figures as they are (a list completed, a node changed).
    pub(super) fn capacity_changed(&mut self, cluster: &str, exact: bool, now: DateTime<Utc>) {
        let Some(model) = self.clusters.get(cluster) else {
            return;
        };
        let input = ClusterInput::Capacity {
            nodes: model.nodes.as_ref().map(|n| NodeSummary::of(n.values())),
            pods: model.pods.as_ref().map(|_| model.pod_figures),
            exact,
        };
        let shown = (model.status.nodes, model.status.pods);
        let thresholds = self.thresholds;
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        model.status = model.status.clone().step(input, thresholds, now);
        if (model.status.nodes, model.status.pods) != shown {
            self.publish_cluster(cluster);
        }
    }
}
