//! What a watch keeps of the objects it counts (`sources::watch` feeds it,
//! the sync status reads its count and resourceVersion): one compact key per
//! object and nothing else.
//!
//! A watch must tell an update from a creation to count right, so it needs
//! the set of objects it has seen; it needs none of their bodies, nor even
//! their names. Each key is a 128-bit hash ([`object_key`](crate::names::object_key)) of the object's namespace and
//! name (two SipHash-1-3 hashes under random keys drawn once per process),
//! held inline in the set: with the set's control byte and its spare room,
//! some 20 to 40 bytes an object and no allocation of its own, all of it
//! released with the watch. During a (re)list the listed keys are gathered
//! apart and replace the known set when the list completes, so a relist
//! forgets the objects deleted meanwhile.
//!
//! Two objects of one watch with the same key would count as one: the
//! watch's count would be one short while either exists (until a relist
//! that no longer lists one of them), and nothing else would be wrong: no
//! document is built from these keys. The odds among n objects are about
//! n² / 2¹²⁹: 4 · 10⁻²⁸ for 500 000 pods in one watch. The keys are random
//! per process, so no chosen pair of names collides everywhere.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use crate::names::ObjectKey;

/// Hashes a set's keys, already uniform, by taking their low half: no
/// second hash per lookup.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by `u128` keys; folds any other input all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, key: u128) {
        // The low half of a uniform hash (a truncation meant as one).
        self.0 = key as u64;
    }
}

type Keys = HashSet<ObjectKey, BuildHasherDefault<KeyHasher>>;

/// The objects a watch has seen and the newest resourceVersion among them.
#[derive(Debug, Default)]
pub(crate) struct Census {
    known: Keys,
    /// Keys of the list in progress; empty between lists.
    listing: Keys,
    /// The newest resourceVersion of the list in progress.
    listing_rv: Option<String>,
    resource_version: Option<String>,
}

/// Whether `candidate` is newer than `current` (resourceVersions compare as
/// numbers, as the apiserver issues them; an unparsable one counts as 0).
fn newer(candidate: &str, current: Option<&str>) -> bool {
    let number = |rv: &str| rv.parse::<u64>().unwrap_or(0);
    current.is_none_or(|c| number(candidate) > number(c))
}

impl Census {
    /// A (re)list starts: forgets the keys of a list cut short.
    pub(crate) fn list_started(&mut self) {
        self.listing = Keys::default();
        self.listing_rv = None;
    }

    /// One object of the list in progress; returns how many were listed.
    pub(crate) fn listed(&mut self, key: ObjectKey, resource_version: Option<&str>) -> usize {
        if let Some(rv) = resource_version
            && newer(rv, self.listing_rv.as_deref())
        {
            self.listing_rv = Some(rv.to_string());
        }
        self.listing.insert(key);
        self.listing.len()
    }

    /// The list is complete: its keys become the known set (released
    /// capacity included) and its newest resourceVersion the current one.
    pub(crate) fn list_done(&mut self) {
        let mut listed = std::mem::take(&mut self.listing);
        listed.shrink_to_fit();
        self.known = listed;
        self.resource_version = self.listing_rv.take();
    }

    /// An object was created or changed.
    pub(crate) fn applied(&mut self, key: ObjectKey, resource_version: Option<&str>) {
        self.known.insert(key);
        self.advance(resource_version);
    }

    /// An object was deleted.
    pub(crate) fn deleted(&mut self, key: ObjectKey, resource_version: Option<&str>) {
        self.known.remove(&key);
        self.advance(resource_version);
    }

    /// An event's resourceVersion is the newest: events arrive in order.
    fn advance(&mut self, resource_version: Option<&str>) {
        if let Some(rv) = resource_version {
            self.resource_version = Some(rv.to_string());
        }
    }

    /// How many objects exist now.
    pub(crate) fn count(&self) -> u64 {
        self.known.len() as u64
    }

    /// The resourceVersion of the newest object or event seen.
    pub(crate) fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::object_key;

    /// One step a watch feeds the census.
    #[derive(Clone, Copy)]
    enum Step {
        Start,
        List(&'static str, &'static str),
        Done,
        Apply(&'static str, &'static str),
        Delete(&'static str, &'static str),
    }
    use Step::*;

    fn run(steps: &[Step]) -> Census {
        let mut census = Census::default();
        for step in steps {
            match *step {
                Start => census.list_started(),
                List(name, rv) => {
                    census.listed(object_key(Some("ns"), name), Some(rv));
                }
                Done => census.list_done(),
                Apply(name, rv) => census.applied(object_key(Some("ns"), name), Some(rv)),
                Delete(name, rv) => census.deleted(object_key(Some("ns"), name), Some(rv)),
            }
        }
        census
    }

    #[test]
    fn counts_and_versions_follow_lists_and_events() {
        let cases: &[(&str, &[Step], u64, Option<&str>)] = &[
            ("nothing yet", &[], 0, None),
            ("empty list", &[Start, Done], 0, None),
            (
                "list: newest version, numerically",
                &[
                    Start,
                    List("a", "9"),
                    List("b", "12"),
                    List("c", "10"),
                    Done,
                ],
                3,
                Some("12"),
            ),
            (
                "a list in progress counts nothing yet",
                &[Start, List("a", "9"), List("b", "12")],
                0,
                None,
            ),
            (
                "updates do not count twice",
                &[
                    Start,
                    List("a", "1"),
                    Done,
                    Apply("a", "5"),
                    Apply("b", "6"),
                    Apply("b", "7"),
                ],
                2,
                Some("7"),
            ),
            (
                "deletes, also of unknown objects",
                &[
                    Start,
                    List("a", "1"),
                    List("b", "2"),
                    Done,
                    Delete("a", "3"),
                    Delete("zz", "4"),
                ],
                1,
                Some("4"),
            ),
            (
                "a relist forgets what was deleted meanwhile",
                &[
                    Start,
                    List("a", "1"),
                    List("b", "2"),
                    Done,
                    Start,
                    List("b", "8"),
                    Done,
                ],
                1,
                Some("8"),
            ),
            (
                "a list cut short is forgotten by the next one",
                &[
                    Start,
                    List("a", "1"),
                    List("b", "2"),
                    Start,
                    List("c", "3"),
                    Done,
                ],
                1,
                Some("3"),
            ),
            (
                "events before a relist's end stay counted until it completes",
                &[Start, List("a", "1"), Done, Start, List("b", "4")],
                1,
                Some("1"),
            ),
        ];
        for (name, steps, count, rv) in cases {
            let census = run(steps);
            assert_eq!(census.count(), *count, "{name}");
            assert_eq!(census.resource_version(), *rv, "{name}");
        }
    }

    #[test]
    fn keys_tell_namespaces_apart() {
        // The same object, the same key; any other part, another one.
        assert_eq!(object_key(Some("a"), "x"), object_key(Some("a"), "x"));
        let distinct = [
            object_key(Some("a"), "x"),
            object_key(Some("b"), "x"),
            object_key(None, "x"),
            object_key(Some(""), "x"),
            object_key(Some("a/b"), "c"),
            object_key(Some("a"), "b/c"),
            object_key(Some("a"), "y"),
        ];
        let set: HashSet<ObjectKey> = distinct.iter().copied().collect();
        assert_eq!(set.len(), distinct.len());
        let mut census = Census::default();
        for k in distinct {
            census.applied(k, None);
        }
        assert_eq!(census.count(), distinct.len() as u64);
        census.deleted(object_key(Some("a"), "b/c"), None);
        assert_eq!(census.count(), distinct.len() as u64 - 1);
        assert_eq!(census.resource_version(), None);
    }

    #[test]
    fn listed_returns_the_running_count() {
        let mut census = Census::default();
        census.list_started();
        assert_eq!(census.listed(object_key(Some("n"), "a"), None), 1);
        assert_eq!(census.listed(object_key(Some("n"), "b"), Some("x")), 2);
        assert_eq!(census.listed(object_key(Some("n"), "a"), None), 2);
        census.list_done();
        // An unparsable version counts as 0 but is still the only one seen.
        assert_eq!(census.resource_version(), Some("x"));
    }
}
