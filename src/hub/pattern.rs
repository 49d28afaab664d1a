//! Subscription patterns, and the index that matches a topic against many
//! patterns without scanning them all (`transports → subscribe → [index] ←
//! hub publish`). Topic names themselves, and their builders, are
//! [`crate::protocol::topic`].
//!
//! Patterns: `*` matches one segment, `**` (last segment only) matches one
//! or more remaining segments. Matching reads the parsed topic's segments.

use std::collections::HashMap;

use crate::protocol::topic::{MAX_TOPIC_LEN, Topic};

/// A parsed subscription pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pattern {
    segments: Vec<String>,
}

impl Pattern {
    /// Parses a pattern, naming what is wrong with a bad one.
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.is_empty() {
            return Err("a topic pattern must not be empty".into());
        }
        if raw.len() > MAX_TOPIC_LEN {
            return Err(format!("a topic pattern is at most {MAX_TOPIC_LEN} bytes"));
        }
        let segments: Vec<String> = raw.split('/').map(str::to_string).collect();
        for (i, s) in segments.iter().enumerate() {
            if s.is_empty() {
                return Err(format!("pattern {raw:?} has an empty segment"));
            }
            if s == "**" && i + 1 != segments.len() {
                return Err(format!(
                    "pattern {raw:?}: `**` may only be the last segment"
                ));
            }
            if s != "*" && s != "**" && s.contains('*') {
                return Err(format!("pattern {raw:?}: `*` must be a whole segment"));
            }
            if s.chars().any(|c| c.is_control() || c.is_whitespace()) {
                return Err(format!(
                    "pattern {raw:?} contains whitespace or control characters"
                ));
            }
        }
        Ok(Self { segments })
    }

    /// Whether `topic` is one the pattern names (`*` one segment, `**` one or more).
    pub fn matches(&self, topic: &Topic) -> bool {
        let depth = topic.depth();
        for (i, seg) in self.segments.iter().enumerate() {
            match seg.as_str() {
                "**" => return depth > i,
                "*" if i < depth => {}
                literal if topic.segment(i) == Some(literal) => {}
                _ => return false,
            }
        }
        self.segments.len() == depth
    }

    /// Whether the pattern can reach a topic whose documents come from
    /// member `member`: `clusters/{m}…`, `apps/{m}/…` and
    /// `summary/apps/{m}/…` by their member segment; `summary/clusters` and
    /// `tasks/…` (a task's target may be any member) and a leading
    /// wildcard reach every member.
    pub fn reaches_member(&self, member: &str) -> bool {
        let seg = |i: usize| self.segments.get(i).map(String::as_str);
        let names = |i: usize| matches!(seg(i), Some(s) if s == "*" || s == "**" || s == member);
        match seg(0) {
            Some("clusters" | "apps") => names(1),
            Some("summary") => match seg(1) {
                Some("apps") => names(2),
                Some("clusters" | "*" | "**") => true,
                _ => false,
            },
            Some("tasks" | "*" | "**") => true,
            _ => false,
        }
    }

    /// Whether the pattern can reach an app document of member `member`
    /// (`apps/{member}/…`), which pod-level reasons are part of.
    pub fn reaches_apps_of(&self, member: &str) -> bool {
        let seg = |i: usize| self.segments.get(i).map(String::as_str);
        match seg(0) {
            Some("**") => true,
            Some("apps" | "*") => {
                matches!(seg(1), Some(s) if s == "*" || s == "**" || s == member)
            }
            _ => false,
        }
    }

    /// Whether the pattern can reach an app document of some member.
    pub fn reaches_some_apps(&self) -> bool {
        match self.segments.first().map(String::as_str) {
            Some("**") => true,
            Some("apps" | "*") => self.segments.len() > 1,
            _ => false,
        }
    }

    /// Whether the pattern names exactly one topic.
    pub fn is_exact(&self) -> bool {
        self.segments.iter().all(|s| s != "*" && s != "**")
    }
}

impl std::fmt::Display for Pattern {
    /// The pattern as written (what [`Pattern::parse`] reads back).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.segments.join("/"))
    }
}

/// Subscriber ids by pattern, as a trie over segments: matching a topic
/// costs its depth times the branching actually used, not the number of
/// subscriptions.
#[derive(Debug, Default)]
pub(super) struct PatternIndex<Id> {
    root: Node<Id>,
    len: usize,
    /// Trie nodes below the root; [`PatternIndex::remove`] prunes the ones
    /// it empties, so this follows the live patterns, not every pattern ever
    /// subscribed to.
    nodes: usize,
}

#[derive(Debug)]
struct Node<Id> {
    literal: HashMap<String, Node<Id>>,
    star: Option<Box<Node<Id>>>,
    /// Subscribers whose pattern ends here.
    here: Vec<Id>,
    /// Subscribers whose pattern ends with `**` here.
    rest: Vec<Id>,
}

impl<Id> Default for Node<Id> {
    fn default() -> Self {
        Self {
            literal: HashMap::new(),
            star: None,
            here: Vec::new(),
            rest: Vec::new(),
        }
    }
}

impl<Id: Clone + PartialEq> PatternIndex<Id> {
    /// Adds `id` under `pattern` (an id may be under several patterns).
    pub(super) fn insert(&mut self, pattern: &Pattern, id: Id) {
        let mut node = &mut self.root;
        for seg in &pattern.segments {
            match seg.as_str() {
                "**" => {
                    node.rest.push(id);
                    self.len += 1;
                    return;
                }
                "*" => {
                    if node.star.is_none() {
                        self.nodes += 1;
                    }
                    node = node.star.get_or_insert_with(Default::default);
                }
                literal => {
                    node = match node.literal.entry(literal.to_string()) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            self.nodes += 1;
                            e.insert(Node::default())
                        }
                    };
                }
            }
        }
        node.here.push(id);
        self.len += 1;
    }

    /// Removes one registration of `id` under `pattern`, and every node
    /// that leaves without a registration or a child: an index that churns
    /// through unique patterns stays the size of its live ones.
    pub(super) fn remove(&mut self, pattern: &Pattern, id: &Id) {
        let (removed, pruned) = Self::remove_below(&mut self.root, &pattern.segments, id);
        if removed {
            self.len -= 1;
        }
        self.nodes -= pruned;
    }

    /// Removes `id` under `segments` from `node`'s subtree: (whether it was
    /// there, how many nodes below `node` were pruned).
    fn remove_below(node: &mut Node<Id>, segments: &[String], id: &Id) -> (bool, usize) {
        let Some((seg, rest)) = segments.split_first() else {
            return (Self::take(&mut node.here, id), 0);
        };
        match seg.as_str() {
            "**" => (Self::take(&mut node.rest, id), 0),
            "*" => {
                let Some(child) = node.star.as_deref_mut() else {
                    return (false, 0);
                };
                let (removed, mut pruned) = Self::remove_below(child, rest, id);
                if child.is_empty() {
                    node.star = None;
                    pruned += 1;
                }
                (removed, pruned)
            }
            literal => {
                let Some(child) = node.literal.get_mut(literal) else {
                    return (false, 0);
                };
                let (removed, mut pruned) = Self::remove_below(child, rest, id);
                if child.is_empty() {
                    node.literal.remove(literal);
                    pruned += 1;
                    // A map that once held many children keeps their room.
                    if node.literal.capacity() > 16
                        && node.literal.len() * 4 < node.literal.capacity()
                    {
                        node.literal.shrink_to_fit();
                    }
                }
                (removed, pruned)
            }
        }
    }

    /// Removes one `id` from `ids`: whether it was there.
    fn take(ids: &mut Vec<Id>, id: &Id) -> bool {
        match ids.iter().position(|x| x == id) {
            Some(pos) => {
                ids.swap_remove(pos);
                if ids.is_empty() {
                    // Not kept at the size of a crowd that has left.
                    ids.shrink_to_fit();
                }
                true
            }
            None => false,
        }
    }

    /// Every id whose pattern matches `topic` (an id with two matching patterns appears twice).
    pub(super) fn matches(&self, topic: &Topic) -> Vec<Id> {
        let mut out = Vec::new();
        Self::walk(&self.root, topic, 0, &mut out);
        out
    }

    /// Collects the ids under `node` matching `topic` from segment `i` on.
    fn walk(node: &Node<Id>, topic: &Topic, i: usize, out: &mut Vec<Id>) {
        let Some(segment) = topic.segment(i) else {
            out.extend(node.here.iter().cloned());
            return;
        };
        out.extend(node.rest.iter().cloned());
        if let Some(child) = node.literal.get(segment) {
            Self::walk(child, topic, i + 1, out);
        }
        if let Some(star) = &node.star {
            Self::walk(star, topic, i + 1, out);
        }
    }

    /// How many (pattern, id) entries the index holds.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether the index holds no entry.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Trie nodes below the root (0 for an empty index): what the index
    /// costs besides its entries.
    pub(super) fn nodes(&self) -> usize {
        self.nodes
    }
}

impl<Id> Node<Id> {
    /// No registration here and no child: nothing would miss this node.
    fn is_empty(&self) -> bool {
        self.here.is_empty()
            && self.rest.is_empty()
            && self.star.is_none()
            && self.literal.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_reach_members_and_their_apps() {
        // (pattern, reaches a topic of member prod, reaches an app of prod)
        let cases = [
            ("clusters/prod", true, false),
            ("clusters/dev", false, false),
            ("clusters/*", true, false),
            ("clusters/**", true, false),
            ("clusters", false, false),
            ("apps/prod/shop/web", true, true),
            ("apps/prod/**", true, true),
            ("apps/*/shop/*", true, true),
            ("apps/**", true, true),
            ("apps/dev/**", false, false),
            ("summary/apps/prod/shop", true, false),
            ("summary/apps/dev/shop", false, false),
            ("summary/clusters", true, false),
            ("summary/*", true, false),
            ("tasks/*", true, false),
            ("*/prod", true, true),
            ("*/prod/shop/web", true, true),
            ("**", true, true),
            ("other/prod", false, false),
        ];
        for (pattern, member, apps) in cases {
            let p = Pattern::parse(pattern).unwrap();
            assert_eq!(p.reaches_member("prod"), member, "{pattern}: member");
            assert_eq!(p.reaches_apps_of("prod"), apps, "{pattern}: apps");
        }
    }

    #[test]
    fn patterns_match_like_documented() {
        let cases = [
            ("clusters/*", "clusters/a", true),
            ("clusters/*", "clusters/a/sync/apps/v1/deployments", false),
            ("clusters/**", "clusters/a/sync/apps/v1/deployments", true),
            ("clusters/**", "clusters/a", true),
            ("clusters/**", "clusters", false),
            (
                "clusters/a/sync/*/*/*",
                "clusters/a/sync/core/v1/namespaces",
                true,
            ),
            ("apps/*/shop/*", "apps/prod/shop/web", true),
            ("apps/*/shop/*", "apps/prod/other/web", false),
            ("apps/prod/shop/web", "apps/prod/shop/web", true),
            ("apps/prod/shop/web", "apps/prod/shop/webx", false),
            ("**", "tasks/1", true),
        ];
        for (pattern, topic, want) in cases {
            assert_eq!(
                Pattern::parse(pattern).unwrap().matches(&Topic::new(topic)),
                want,
                "{pattern} vs {topic}"
            );
        }
        for bad in ["", "a//b", "**/a", "a/b*", "a/ b", "/a"] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Pattern::parse("apps/a/b/c").unwrap().is_exact());
        assert!(!Pattern::parse("apps/*/b/c").unwrap().is_exact());
    }

    #[test]
    fn index_agrees_with_linear_matching() {
        let patterns = [
            "clusters/*",
            "clusters/**",
            "clusters/a",
            "clusters/a/sync/*/*/*",
            "apps/*/shop/*",
            "apps/prod/**",
            "apps/prod/shop/web",
            "**",
            "tasks/*",
        ];
        let topics = [
            "clusters/a",
            "clusters/b",
            "clusters/a/sync/apps/v1/deployments",
            "apps/prod/shop/web",
            "apps/dev/shop/db",
            "apps/prod/other/x",
            "tasks/42",
            "nothing",
        ];
        let mut index = PatternIndex::default();
        let parsed: Vec<Pattern> = patterns
            .iter()
            .map(|p| Pattern::parse(p).unwrap())
            .collect();
        for (id, p) in parsed.iter().enumerate() {
            index.insert(p, id);
        }
        assert_eq!(index.len(), patterns.len());
        for topic in topics {
            let mut got = index.matches(&Topic::new(topic));
            got.sort();
            let want: Vec<usize> = parsed
                .iter()
                .enumerate()
                .filter(|(_, p)| p.matches(&Topic::new(topic)))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(got, want, "{topic}");
        }
        index.remove(&parsed[7], &7);
        index.remove(&parsed[0], &0);
        index.remove(&parsed[0], &99);
        assert_eq!(index.len(), patterns.len() - 2);
        let mut got = index.matches(&Topic::new("clusters/a"));
        got.sort();
        assert_eq!(got, [1, 2]);
    }

    /// Counts the nodes below the root by walking them.
    fn walked<Id>(node: &Node<Id>) -> usize {
        node.literal.values().map(|c| 1 + walked(c)).sum::<usize>()
            + node.star.as_deref().map_or(0, |c| 1 + walked(c))
    }

    #[test]
    fn removing_prunes_the_nodes_it_emptied() {
        let mut index = PatternIndex::default();
        assert_eq!((index.len(), index.nodes()), (0, 0));
        let kept = Pattern::parse("clusters/*").unwrap();
        index.insert(&kept, 0u64);
        let baseline = (index.len(), index.nodes());
        assert_eq!(baseline, (1, 2));
        // Unique patterns subscribed and unsubscribed, as a churning client does.
        for n in 1..=200u64 {
            let patterns: Vec<Pattern> = [
                format!("u{n}/a/b/c/d/e"),
                format!("clusters/*/sync/u{n}/*/x"),
                format!("apps/u{n}/**"),
                format!("clusters/u{n}"),
                "clusters/*".to_string(),
            ]
            .iter()
            .map(|p| Pattern::parse(p).unwrap())
            .collect();
            for p in &patterns {
                index.insert(p, n);
            }
            assert!(index.nodes() > baseline.1);
            assert_eq!(index.nodes(), walked(&index.root));
            for p in &patterns {
                index.remove(p, &n);
            }
            assert_eq!(
                (index.len(), index.nodes()),
                baseline,
                "after pattern set {n}"
            );
            assert_eq!(walked(&index.root), baseline.1);
        }
        // Removing what is not there changes nothing.
        index.remove(&Pattern::parse("u1/a/b").unwrap(), &1);
        index.remove(&kept, &7);
        assert_eq!((index.len(), index.nodes()), baseline);
        // Two ids under one pattern: the node stays until the last leaves.
        let shared = Pattern::parse("apps/x/y/z").unwrap();
        index.insert(&shared, 1);
        index.insert(&shared, 2);
        index.remove(&shared, &1);
        assert_eq!(index.matches(&Topic::new("apps/x/y/z")), [2]);
        index.remove(&shared, &2);
        index.remove(&kept, &0);
        assert_eq!((index.len(), index.nodes()), (0, 0));
        assert!(index.root.is_empty() && index.is_empty());
    }
}
