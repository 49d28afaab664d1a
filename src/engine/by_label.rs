//! Items found by one of their labels (`[by label] ──▶ pod index, workload
//! index`): a pod index's label sets by each label they carry, a
//! namespace's workloads by their selector's first label. Held under a
//! hash of the label (key and value), so no label's text is copied;
//! hashes may collide, so whoever reads a bucket checks its items.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

#[derive(Debug)]
pub(super) struct ByLabel<T> {
    buckets: HashMap<u64, Vec<T>>,
}

impl<T> Default for ByLabel<T> {
    fn default() -> Self {
        Self {
            buckets: HashMap::new(),
        }
    }
}

/// The hash a label is held under.
fn label_hash(key: &str, value: &str) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    (key, value).hash(&mut hasher);
    hasher.finish()
}

impl<T: PartialEq> ByLabel<T> {
    /// Holds `item` under label `key=value`.
    pub(super) fn add(&mut self, key: &str, value: &str, item: T) {
        self.buckets
            .entry(label_hash(key, value))
            .or_default()
            .push(item);
    }

    /// Drops `item` (every equal one) from label `key=value`'s bucket.
    pub(super) fn remove(&mut self, key: &str, value: &str, item: &T) {
        let hash = label_hash(key, value);
        if let Some(items) = self.buckets.get_mut(&hash) {
            items.retain(|i| i != item);
            if items.is_empty() {
                self.buckets.remove(&hash);
            }
        }
    }

    /// The items held under label `key=value`, and any whose label's hash
    /// is the same.
    pub(super) fn get(&self, key: &str, value: &str) -> &[T] {
        self.buckets
            .get(&label_hash(key, value))
            .map_or(&[], Vec::as_slice)
    }

    /// Nothing held.
    pub(super) fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Labels with something held (tests: nothing is left behind).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_found_by_their_label_until_removed() {
        let mut index = ByLabel::default();
        index.add("app", "web", 1);
        index.add("app", "web", 2);
        index.add("app", "api", 3);
        assert_eq!(index.get("app", "web"), [1, 2]);
        assert_eq!(index.get("app", "db"), [] as [i32; 0]);
        index.remove("app", "web", &1);
        index.remove("app", "api", &3);
        assert_eq!(index.get("app", "web"), [2]);
        assert_eq!(index.len(), 1);
        index.remove("app", "web", &2);
        assert!(index.is_empty());
    }
}
