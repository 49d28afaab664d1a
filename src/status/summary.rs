//! Summary documents (`hub ──documents──▶ [summaries] ──▶ hub`): counts of
//! clusters by phase, and of a namespace's apps by state and phase — what
//! Karpor's cluster page computes with `summary=true`, kept live as topics
//! (`summary/clusters`, `summary/apps/{cluster}/{namespace}`). Pure folds
//! over documents; `crate::engine::summaries` keeps them published.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Names listed per cluster phase at most (the count is always whole).
pub const MAX_NAMES: usize = 100;

/// `summary/clusters` over the cluster documents `(name, doc)`:
/// `{"total", "phases": {phase: {"count", "names"}}}`, names sorted, at most
/// [`MAX_NAMES`] per phase.
pub fn clusters<'a>(docs: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Value {
    let mut phases: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut total = 0;
    for (name, doc) in docs {
        total += 1;
        let phase = doc["phase"].as_str().unwrap_or("Unknown");
        phases.entry(phase.to_string()).or_default().push(name);
    }
    let phases: serde_json::Map<String, Value> = phases
        .into_iter()
        .map(|(phase, mut names)| {
            names.sort_unstable();
            let count = names.len();
            names.truncate(MAX_NAMES);
            (phase, json!({"count": count, "names": names}))
        })
        .collect();
    json!({"total": total, "phases": phases})
}

/// `summary/apps/{cluster}/{namespace}` over that namespace's app
/// documents: `{"cluster", "namespace", "total", "states": {state: n},
/// "phases": {phase: n}}` (`state` is what a person sees: a task's
/// transitional state, else the phase).
pub fn apps<'a>(
    cluster: &str,
    namespace: &str,
    docs: impl IntoIterator<Item = &'a Value>,
) -> Value {
    let mut states: BTreeMap<String, u64> = BTreeMap::new();
    let mut phases: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0;
    for doc in docs {
        total += 1;
        let phase = doc["phase"].as_str().unwrap_or("Unknown");
        let state = doc["state"].as_str().unwrap_or(phase);
        *states.entry(state.to_string()).or_default() += 1;
        *phases.entry(phase.to_string()).or_default() += 1;
    }
    json!({"cluster": cluster, "namespace": namespace, "total": total, "states": states, "phases": phases})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_counts() {
        let healthy = json!({"phase": "Healthy"});
        let down = json!({"phase": "Unhealthy"});
        let odd = json!({"name": "x"});
        let cases: [(Vec<(&str, &Value)>, Value); 3] = [
            (vec![], json!({"total": 0, "phases": {}})),
            (
                vec![("b", &healthy), ("a", &healthy), ("c", &down)],
                json!({"total": 3, "phases": {
                    "Healthy": {"count": 2, "names": ["a", "b"]},
                    "Unhealthy": {"count": 1, "names": ["c"]},
                }}),
            ),
            (
                vec![("x", &odd)],
                json!({"total": 1, "phases": {"Unknown": {"count": 1, "names": ["x"]}}}),
            ),
        ];
        for (docs, want) in cases {
            assert_eq!(clusters(docs), want);
        }
        let names: Vec<String> = (0..MAX_NAMES + 5).map(|i| format!("c{i:03}")).collect();
        let many = clusters(names.iter().map(|n| (n.as_str(), &healthy)));
        assert_eq!(many["phases"]["Healthy"]["count"], MAX_NAMES + 5);
        assert_eq!(
            many["phases"]["Healthy"]["names"].as_array().unwrap().len(),
            MAX_NAMES
        );
    }

    #[test]
    fn app_counts() {
        let docs = [
            json!({"phase": "Running", "state": "Running"}),
            json!({"phase": "Running", "state": "Stopping"}),
            json!({"phase": "Degraded", "state": "Degraded"}),
            json!({"phase": "Stopped"}),
        ];
        assert_eq!(
            apps("prod", "shop", &docs),
            json!({"cluster": "prod", "namespace": "shop", "total": 4,
                "states": {"Running": 1, "Stopping": 1, "Degraded": 1, "Stopped": 1},
                "phases": {"Running": 2, "Degraded": 1, "Stopped": 1}})
        );
        assert_eq!(
            apps("prod", "empty", &[]),
            json!({"cluster": "prod", "namespace": "empty", "total": 0, "states": {}, "phases": {}})
        );
    }
}
