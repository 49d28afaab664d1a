//! Pod labels as the gateway holds them: one shared, immutable copy per
//! distinct label set. The pods of one ReplicaSet (or StatefulSet revision)
//! carry identical labels, so a member's 500 000 pods hold a few thousand
//! label sets between them and each pod only a pointer (16 bytes).
//!
//! [`LabelSets`] interns the sets one watch reads; sets no pod holds any
//! more (a rollout's old `pod-template-hash`) are dropped as the table
//! grows, so churn does not make it grow without bound.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A label set, sorted by key: shared by every pod that carries it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Labels(Arc<[(Box<str>, Box<str>)]>);

impl Labels {
    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let i = self.0.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&self.0[i].1)
    }

    /// Whether every label of `selector` is there with its value (`matchLabels`).
    pub fn has_all(&self, selector: &BTreeMap<String, String>) -> bool {
        selector
            .iter()
            .all(|(k, v)| self.get(k) == Some(v.as_str()))
    }

    /// Its labels, sorted by key.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// Whether `other` is this very copy (not only an equal set).
    pub fn same(&self, other: &Labels) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The address of its copy: equal for [`same`](Self::same) sets.
    pub fn as_ptr(&self) -> *const () {
        Arc::as_ptr(&self.0).cast()
    }

    /// How many labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No labels at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A set of its own, shared with nothing (tests, one-off reads).
    pub fn of(labels: Option<&BTreeMap<String, String>>) -> Self {
        let pairs: Vec<(Box<str>, Box<str>)> = labels
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
            .collect();
        // A BTreeMap iterates sorted: `get` may search.
        Labels(pairs.into())
    }

    /// Pods holding this very set (tables and pods included).
    fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }

    /// Whether it holds exactly `labels`.
    fn equals(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let len = labels.map_or(0, BTreeMap::len);
        self.0.len() == len
            && self
                .0
                .iter()
                .zip(labels.into_iter().flatten())
                .all(|((k, v), (k2, v2))| **k == *k2 && **v == *v2)
    }
}

/// A hash of a label set, the same for `labels` and its [`Labels`].
fn fingerprint<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    for pair in pairs {
        pair.hash(&mut hasher);
    }
    hasher.finish()
}

/// The distinct label sets one watch has read.
#[derive(Debug, Default)]
pub struct LabelSets {
    /// By fingerprint: a set is looked up without being copied first.
    sets: HashMap<u64, Vec<Labels>>,
    /// Sets held, over every fingerprint.
    count: usize,
    /// The table's size after its last sweep: it is swept again when it
    /// has doubled since (and has at least [`SWEEP_FLOOR`] sets).
    swept_at: usize,
}

/// Below this many sets the table is never swept.
const SWEEP_FLOOR: usize = 256;

impl LabelSets {
    /// The shared copy of `labels`, made the first time it is seen.
    pub fn intern(&mut self, labels: Option<&BTreeMap<String, String>>) -> Labels {
        let pairs = labels
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()));
        let key = fingerprint(pairs);
        if let Some(held) = self
            .sets
            .get(&key)
            .and_then(|same| same.iter().find(|set| set.equals(labels)))
        {
            return held.clone();
        }
        if self.count >= SWEEP_FLOOR.max(2 * self.swept_at) {
            // Held only by this table: no pod carries it any more.
            for same in self.sets.values_mut() {
                same.retain(|set| set.holders() > 1);
            }
            self.sets.retain(|_, same| !same.is_empty());
            self.count = self.sets.values().map(Vec::len).sum();
            self.swept_at = self.count;
        }
        let set = Labels::of(labels);
        self.sets.entry(key).or_default().push(set.clone());
        self.count += 1;
        set
    }

    /// Distinct sets held.
    pub fn len(&self) -> usize {
        self.count
    }

    /// None held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// A label map from pairs (tests).
#[cfg(test)]
pub(crate) fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_match_by_every_label() {
        let labels = Labels::of(Some(&map(&[
            ("app", "web"),
            ("pod-template-hash", "7d9f"),
            ("tier", "front"),
        ])));
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[("app", "web")], true),
            (&[("app", "web"), ("tier", "front")], true),
            (&[("app", "web"), ("tier", "back")], false),
            (&[("zone", "a")], false),
            (&[("app", "we")], false),
        ];
        for (selector, want) in cases {
            assert_eq!(labels.has_all(&map(selector)), *want, "{selector:?}");
        }
        assert_eq!(labels.get("tier"), Some("front"));
        assert_eq!(labels.get("a"), None);
        assert_eq!(Labels::of(None).len(), 0);
    }

    #[test]
    fn equal_sets_are_one_copy_and_unheld_ones_are_swept() {
        let mut sets = LabelSets::default();
        let a = sets.intern(Some(&map(&[("app", "web")])));
        let b = sets.intern(Some(&map(&[("app", "web")])));
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(sets.len(), 1);
        // A rollout a minute for hours: every old set is dropped by its
        // pods, the table stays bounded by what pods hold.
        let mut held = Vec::new();
        for i in 0..10_000 {
            let set = sets.intern(Some(&map(&[("app", "web"), ("hash", &i.to_string())])));
            held.push(set);
            if held.len() > 10 {
                held.remove(0);
            }
            assert!(
                sets.len() <= 2 * SWEEP_FLOOR + 1,
                "{} sets at {i}",
                sets.len()
            );
        }
        // Sets still held survive a sweep.
        let kept = held.last().unwrap().clone();
        for i in 0..(2 * SWEEP_FLOOR) {
            sets.intern(Some(&map(&[("other", &i.to_string())])));
        }
        let again = sets.intern(Some(&map(&[("app", "web"), ("hash", "9999")])));
        assert!(Arc::ptr_eq(&kept.0, &again.0));
    }
}
