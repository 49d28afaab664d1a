//! A member's pods as the engine holds them (`pod watch ──▶ [pod index]
//! ──▶ app machine`): by namespace, then name, and for each namespace the
//! distinct label sets its pods carry, by each of their labels. An app's
//! pods are found from its workloads' selectors through the label sets
//! (few: the pods of one ReplicaSet share theirs), and only the pods of
//! the matching sets are taken, by a pointer comparison each; no pod's
//! labels are matched against a selector. Recomputing one app of a
//! namespace of 10 000 apps does not match 10 000 pods.
//!
//! Each namespace holds one copy of each distinct label set (a pod
//! inserted with an equal set of another copy is given the namespace's),
//! so a set's pods are the pods holding that very copy.
//!
//! A pod is held under the key of its namespace and name ([`PodKey`], the
//! keyed 128-bit hash the watches' census keeps too), not its name:
//! 16 bytes inline where a boxed name took 16 and an allocation of 32–64
//! bytes. Nothing shown is built from the key (a problem names its pod
//! itself, and the app document orders problems by those names); a warning
//! event finds its pod by the key of the name it involves. Two pods of one
//! namespace with the same key would be held as one: the odds among n pods
//! are about n² / 2¹²⁹, and the keys are random per process, so no chosen
//! pair of names collides everywhere.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

use super::by_label::ByLabel;
use crate::names::{ObjectKey, object_key};
use crate::status::labels::Labels;
use crate::status::pods::PodState;

/// A pod's identity: the key of its namespace and name.
pub(super) type PodKey = ObjectKey;

/// The key of pod `name` of `namespace`.
pub(super) fn pod_key(namespace: &str, name: &str) -> PodKey {
    object_key(Some(namespace), name)
}

/// Pods by namespace; what a pod costs is in docs/BENCHMARKS.md.
#[derive(Debug, Default)]
pub(super) struct PodIndex {
    namespaces: BTreeMap<String, NamespacePods>,
}

#[derive(Debug, Default)]
struct NamespacePods {
    /// Pods by the key of their name, in full B-tree nodes when built
    /// from a list.
    pods: BTreeMap<PodKey, PodState>,
    /// The distinct label sets of `pods`, each with how many pods hold it.
    sets: HashMap<Labels, usize>,
    /// The sets of `sets` by each of their labels.
    by_label: ByLabel<Labels>,
}

impl NamespacePods {
    /// Builds a namespace from its pods at once: a B-tree collected in one
    /// go is built in full nodes (inserted one by one, in sorted order,
    /// every node would be left half empty).
    fn build(pods: Vec<(PodKey, PodState)>) -> Self {
        let mut pods: BTreeMap<PodKey, PodState> = pods.into_iter().collect();
        let mut ns = Self::default();
        for state in pods.values_mut() {
            state.labels = ns.hold(&state.labels);
        }
        ns.pods = pods;
        ns
    }

    /// The namespace's copy of `labels` (made its own if it is the first),
    /// counted once more.
    fn hold(&mut self, labels: &Labels) -> Labels {
        match self.sets.entry(labels.clone()) {
            Entry::Occupied(mut held) => {
                *held.get_mut() += 1;
                held.key().clone()
            }
            Entry::Vacant(new) => {
                new.insert(1);
                for (key, value) in labels.pairs() {
                    self.by_label.add(key, value, labels.clone());
                }
                labels.clone()
            }
        }
    }

    /// Counts `labels` once less; forgets the set when no pod holds it.
    fn release(&mut self, labels: &Labels) {
        let Some(count) = self.sets.get_mut(labels) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        self.sets.remove(labels);
        for (key, value) in labels.pairs() {
            self.by_label.remove(key, value, labels);
        }
    }

    /// The namespace's label sets that `selector` selects (`matchLabels`;
    /// an empty selector selects nothing).
    fn selected_sets<'a>(
        &'a self,
        selector: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a Labels> + 'a {
        // Every selected set carries the selector's first label.
        let candidates = selector
            .iter()
            .next()
            .map_or(&[][..], |(key, value)| self.by_label.get(key, value));
        candidates.iter().filter(move |set| set.has_all(selector))
    }
}

impl PodIndex {
    /// An index of each namespace's pods (a completed list), each under
    /// the [`pod_key`] of its name.
    pub(super) fn from_namespaces(namespaces: BTreeMap<String, Vec<(PodKey, PodState)>>) -> Self {
        Self {
            namespaces: namespaces
                .into_iter()
                .map(|(namespace, pods)| (namespace, NamespacePods::build(pods)))
                .collect(),
        }
    }

    /// Holds pod `name` of `namespace`; the state it replaces, if any.
    pub(super) fn insert(
        &mut self,
        namespace: String,
        name: &str,
        mut state: PodState,
    ) -> Option<PodState> {
        let key = pod_key(&namespace, name);
        let ns = self.namespaces.entry(namespace).or_default();
        state.labels = ns.hold(&state.labels);
        let old = ns.pods.insert(key, state);
        if let Some(old) = &old {
            ns.release(&old.labels);
        }
        old
    }

    /// Drops pod `name` of `namespace` (and the namespace with its last pod).
    pub(super) fn remove(&mut self, namespace: &str, name: &str) -> Option<PodState> {
        let ns = self.namespaces.get_mut(namespace)?;
        let old = ns.pods.remove(&pod_key(namespace, name))?;
        ns.release(&old.labels);
        if ns.pods.is_empty() {
            self.namespaces.remove(namespace);
        }
        Some(old)
    }

    /// Pod `name` of `namespace`.
    pub(super) fn get(&self, namespace: &str, name: &str) -> Option<&PodState> {
        self.namespaces
            .get(namespace)?
            .pods
            .get(&pod_key(namespace, name))
    }

    /// Every pod held.
    pub(super) fn values(&self) -> impl Iterator<Item = &PodState> {
        self.namespaces.values().flat_map(|ns| ns.pods.values())
    }

    /// The pods of `namespace` that any of `selectors` selects, with
    /// their keys (in the keys' order).
    pub(super) fn selected<'a>(
        &'a self,
        namespace: &str,
        selectors: &[&'a BTreeMap<String, String>],
    ) -> Vec<(PodKey, &'a PodState)> {
        let Some(ns) = self.namespaces.get(namespace) else {
            return Vec::new();
        };
        let mut sets: Vec<&Labels> = selectors
            .iter()
            .flat_map(|selector| ns.selected_sets(selector))
            .collect();
        sets.sort_by_key(|set| set.as_ptr());
        sets.dedup_by_key(|set| set.as_ptr());
        if sets.is_empty() {
            return Vec::new();
        }
        let wanted: usize = sets
            .iter()
            .map(|set| ns.sets.get(*set).copied().unwrap_or(0))
            .sum();
        let mut found = Vec::with_capacity(wanted);
        for (key, pod) in &ns.pods {
            if found.len() == wanted {
                break;
            }
            if sets.iter().any(|set| set.same(&pod.labels)) {
                found.push((*key, pod));
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::status::capacity::PodShare;
    use crate::status::labels::map as labels;

    fn pod(pairs: &[(&str, &str)]) -> PodState {
        PodState {
            // A copy of its own: the index must find it by content.
            labels: Labels::of(Some(&labels(pairs))),
            ready: true,
            terminating: false,
            problem: None,
            share: PodShare::default(),
        }
    }

    /// The names of `namespace`'s pods found (of those the tests use),
    /// sorted: the index holds keys, in their order.
    fn names(namespace: &str, found: Vec<(PodKey, &PodState)>) -> Vec<String> {
        let mut names: Vec<String> = found
            .into_iter()
            .map(|(key, _)| name_of(namespace, key))
            .collect();
        names.sort();
        names
    }

    fn name_of(namespace: &str, key: PodKey) -> String {
        ["web-1", "web-2", "web-3", "api-1", "a", "b"]
            .into_iter()
            .find(|name| pod_key(namespace, name) == key)
            .expect("a name the tests use")
            .to_string()
    }

    /// What `selected` must give: every pod of the namespace matched
    /// against every selector, as the engine did before the index.
    fn matched(
        index: &PodIndex,
        namespace: &str,
        selectors: &[&BTreeMap<String, String>],
    ) -> Vec<String> {
        index
            .namespaces
            .get(namespace)
            .into_iter()
            .flat_map(|ns| &ns.pods)
            .filter(|(_, p)| selectors.iter().any(|s| p.matches(s)))
            .map(|(key, _)| name_of(namespace, *key))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// A selector's labels.
    type Pairs<'a> = &'a [(&'a str, &'a str)];

    #[test]
    fn an_apps_pods_are_those_its_selectors_select() {
        let web = [("app", "web"), ("hash", "1")];
        let web2 = [("app", "web"), ("hash", "2")];
        let api = [("app", "api"), ("hash", "1")];
        let mut index = PodIndex::from_namespaces(BTreeMap::from([(
            "shop".to_string(),
            vec![
                (pod_key("shop", "web-2"), pod(&web)),
                (pod_key("shop", "web-1"), pod(&web)),
                (pod_key("shop", "api-1"), pod(&api)),
            ],
        )]));
        index.insert("shop".into(), "web-3", pod(&web2));
        index.insert("other".into(), "web-1", pod(&web));
        let cases: &[(&str, &[Pairs], &[&str])] = &[
            ("shop", &[&[("app", "web")]], &["web-1", "web-2", "web-3"]),
            (
                "shop",
                &[&[("app", "web"), ("hash", "1")]],
                &["web-1", "web-2"],
            ),
            ("shop", &[&[("hash", "1")]], &["api-1", "web-1", "web-2"]),
            (
                "shop",
                &[&[("app", "api")], &[("hash", "2")]],
                &["api-1", "web-3"],
            ),
            ("shop", &[&[("app", "web"), ("tier", "x")]], &[]),
            ("shop", &[&[]], &[]),
            ("shop", &[], &[]),
            ("other", &[&[("app", "web")]], &["web-1"]),
            ("none", &[&[("app", "web")]], &[]),
        ];
        for (namespace, selectors, want) in cases {
            let selectors: Vec<BTreeMap<String, String>> =
                selectors.iter().map(|s| labels(s)).collect();
            let refs: Vec<&BTreeMap<String, String>> = selectors.iter().collect();
            let got = names(namespace, index.selected(namespace, &refs));
            assert_eq!(got, *want, "{namespace} {selectors:?}");
            assert_eq!(
                got,
                matched(&index, namespace, &refs),
                "{namespace} {selectors:?}"
            );
        }
    }

    #[test]
    fn relabelled_and_removed_pods_leave_no_set_behind() {
        let mut index = PodIndex::default();
        index.insert("shop".into(), "a", pod(&[("app", "web")]));
        index.insert("shop".into(), "b", pod(&[("app", "web")]));
        // Equal sets share the namespace's copy.
        let (a, b) = (
            index.get("shop", "a").unwrap(),
            index.get("shop", "b").unwrap(),
        );
        assert!(a.labels.same(&b.labels));
        // `a` relabelled: it leaves web's set for api's.
        let old = index.insert("shop".into(), "a", pod(&[("app", "api")]));
        assert!(old.is_some());
        let web = labels(&[("app", "web")]);
        let api = labels(&[("app", "api")]);
        assert_eq!(names("shop", index.selected("shop", &[&web])), ["b"]);
        assert_eq!(names("shop", index.selected("shop", &[&api])), ["a"]);
        assert!(index.remove("shop", "b").is_some());
        assert!(index.remove("shop", "b").is_none());
        assert_eq!(
            names("shop", index.selected("shop", &[&web])),
            Vec::<String>::new()
        );
        let ns = &index.namespaces["shop"];
        assert_eq!(ns.sets.len(), 1, "{:?}", ns.sets);
        assert_eq!(ns.by_label.len(), 1, "{:?}", ns.by_label);
        assert_eq!(ns.by_label.get("app", "api").len(), 1, "{:?}", ns.by_label);
        // The namespace goes with its last pod.
        assert!(index.remove("shop", "a").is_some());
        assert!(index.namespaces.is_empty());
        assert_eq!(index.values().count(), 0);
    }
}
