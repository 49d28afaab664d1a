//! A member's nodes and capacity (`node watch, pod watch ──▶ [capacity]
//! ──▶ the cluster document's nodes and pods`): what the gateway keeps of
//! each Node (a few numbers, well under 500 bytes with its name), the
//! cluster's sums, and Kubernetes quantities read as numbers. Pure.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// CPU in millicores and memory in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// CPU, in thousandths of a core.
    pub cpu_millis: u64,
    /// Memory, in bytes.
    pub memory_bytes: u64,
    /// Pods (capacity and allocatable only; 0 in requests).
    #[serde(skip_serializing_if = "is_zero", default)]
    pub pods: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Resources {
    fn add(&mut self, other: Resources) {
        self.cpu_millis += other.cpu_millis;
        self.memory_bytes += other.memory_bytes;
        self.pods += other.pods;
    }

    fn sub(&mut self, other: Resources) {
        self.cpu_millis = self.cpu_millis.saturating_sub(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.saturating_sub(other.memory_bytes);
        self.pods = self.pods.saturating_sub(other.pods);
    }

    /// Reads `cpu`, `memory` and `pods` of a resource list.
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Self {
        let get = |name: &str| list.and_then(|l| l.get(name)).map(|q| q.0.as_str());
        Self {
            cpu_millis: get("cpu").and_then(millis).unwrap_or(0),
            memory_bytes: get("memory").and_then(bytes).unwrap_or(0),
            pods: get("pods").and_then(bytes).unwrap_or(0),
        }
    }
}

/// A quantity's value times `scale`, rounded up (as Kubernetes rounds
/// requests): `100m` CPU is 100 millicores, `1.5` is 1500, `128Mi` is
/// 134 217 728 bytes, `1e3` is 1000. None when it is not a quantity.
fn scaled(raw: &str, scale: f64) -> Option<u64> {
    let raw = raw.trim();
    let split = raw
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(raw.len());
    let (number, suffix) = raw.split_at(split);
    let multiplier = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "Ki" => 1024.0,
        "Mi" => 1024.0_f64.powi(2),
        "Gi" => 1024.0_f64.powi(3),
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    Some((value * multiplier * scale).ceil() as u64)
}

/// A CPU quantity in millicores.
pub fn millis(raw: &str) -> Option<u64> {
    scaled(raw, 1000.0)
}

/// A memory (or count) quantity in bytes (units).
pub fn bytes(raw: &str) -> Option<u64> {
    scaled(raw, 1.0)
}

/// What the gateway keeps of one Node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// Cordoned (`spec.unschedulable`).
    pub unschedulable: bool,
    /// `status.capacity`.
    pub capacity: Resources,
    /// `status.allocatable`.
    pub allocatable: Resources,
}

impl NodeFacts {
    /// Reads a Node.
    pub fn from_node(node: &Node) -> Self {
        let status = node.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or(&[])
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        Self {
            ready,
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            capacity: Resources::from_list(status.and_then(|s| s.capacity.as_ref())),
            allocatable: Resources::from_list(status.and_then(|s| s.allocatable.as_ref())),
        }
    }
}

/// The `nodes` block of a cluster document.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    /// Nodes the member has.
    pub total: u64,
    /// Of them, Ready.
    pub ready: u64,
    /// Of them, cordoned.
    pub unschedulable: u64,
    /// Their summed capacity.
    pub capacity: Resources,
    /// Their summed allocatable resources.
    pub allocatable: Resources,
}

impl NodeSummary {
    /// The sums over `nodes`.
    pub fn of<'a>(nodes: impl IntoIterator<Item = &'a NodeFacts>) -> Self {
        let mut sum = Self::default();
        for node in nodes {
            sum.total += 1;
            sum.ready += u64::from(node.ready);
            sum.unschedulable += u64::from(node.unschedulable);
            sum.capacity.add(node.capacity);
            sum.allocatable.add(node.allocatable);
        }
        sum
    }
}

/// The `pods` block of a cluster document: from the pod watch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodFigures {
    /// Pods that are neither finished nor being deleted.
    pub total: u64,
    /// Of them, in phase Running.
    pub running: u64,
    /// The requests of their containers, summed.
    pub requests: Resources,
}

/// One pod's part in [`PodFigures`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodShare {
    /// Counted at all (not finished, not being deleted).
    pub counted: bool,
    /// In phase Running.
    pub running: bool,
    /// Its containers' requests.
    pub requests: Resources,
}

impl PodFigures {
    /// Adds one pod's share.
    pub fn add(&mut self, share: PodShare) {
        if !share.counted {
            return;
        }
        self.total += 1;
        self.running += u64::from(share.running);
        self.requests.add(share.requests);
    }

    /// Takes one pod's share away.
    pub fn remove(&mut self, share: PodShare) {
        if !share.counted {
            return;
        }
        self.total = self.total.saturating_sub(1);
        self.running = self.running.saturating_sub(u64::from(share.running));
        self.requests.sub(share.requests);
    }
}

/// The pod figures a document shows: exact when `exact_now` (a list
/// completed, the nodes changed, or nothing was shown), else the ones shown
/// until a count or a request sum differs from it by more than a tenth, so
/// that pod churn does not republish the cluster on every pod event (as
/// the object count, [`super::cluster::shown_objects`]).
pub fn shown_pods(shown: Option<PodFigures>, exact: PodFigures, exact_now: bool) -> PodFigures {
    let Some(shown) = shown.filter(|_| !exact_now) else {
        return exact;
    };
    let off = |a: u64, b: u64| a.abs_diff(b) > b / 10;
    let moved = off(exact.total, shown.total)
        || off(exact.running, shown.running)
        || off(exact.requests.cpu_millis, shown.requests.cpu_millis)
        || off(exact.requests.memory_bytes, shown.requests.memory_bytes);
    if moved { exact } else { shown }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        let table = [
            ("100m", Some(100), Some(1)),
            ("1", Some(1000), Some(1)),
            ("1.5", Some(1500), Some(2)),
            ("4", Some(4000), Some(4)),
            ("128Mi", Some(134_217_728_000), Some(134_217_728)),
            ("16393216Ki", None, Some(16_786_653_184)),
            ("1G", None, Some(1_000_000_000)),
            ("1e3", Some(1_000_000), Some(1000)),
            ("110", Some(110_000), Some(110)),
            ("x", None, None),
            ("-1", None, None),
            ("1Zi", None, None),
        ];
        for (raw, cpu, memory) in table {
            if let Some(cpu) = cpu {
                assert_eq!(millis(raw), Some(cpu), "{raw} as cpu");
            }
            assert_eq!(bytes(raw), memory, "{raw} as memory");
        }
    }

    #[test]
    fn nodes_sum_up() {
        let node = |ready, unschedulable| NodeFacts {
            ready,
            unschedulable,
            capacity: Resources {
                cpu_millis: 4000,
                memory_bytes: 16,
                pods: 110,
            },
            allocatable: Resources {
                cpu_millis: 3900,
                memory_bytes: 15,
                pods: 110,
            },
        };
        let sum = NodeSummary::of(&[node(true, false), node(false, false), node(true, true)]);
        assert_eq!((sum.total, sum.ready, sum.unschedulable), (3, 2, 1));
        assert_eq!(sum.capacity.cpu_millis, 12_000);
        assert_eq!(sum.allocatable.pods, 330);
    }

    #[test]
    fn pod_figures_follow_the_tenth_rule_unless_exact() {
        let figures = |total, running| PodFigures {
            total,
            running,
            requests: Resources::default(),
        };
        let shown = figures(100, 90);
        assert_eq!(shown_pods(Some(shown), figures(105, 95), false), shown);
        assert_eq!(
            shown_pods(Some(shown), figures(120, 95), false),
            figures(120, 95)
        );
        assert_eq!(
            shown_pods(Some(shown), figures(101, 90), true),
            figures(101, 90)
        );
        assert_eq!(shown_pods(None, figures(3, 1), false), figures(3, 1));
        // Small clusters: every change shows.
        assert_eq!(
            shown_pods(Some(figures(3, 3)), figures(3, 2), false),
            figures(3, 2)
        );
    }
}
