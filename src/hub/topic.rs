//! Subscription patterns, and the index that matches a topic against many
//! patterns without scanning them all (`transports → subscribe → [index] ←
//! hub publish`). Topic names themselves are [`crate::protocol::topic`]
//! (re-exported here for the engine and the tasks that build them).
//!
//! Patterns: `*` matches one segment, `**` (last segment only) matches one
//! or more remaining segments. Matching reads the parsed topic's segments.

use std::collections::HashMap;

pub use crate::protocol::topic::{MAX_TOPIC_LEN, Topic, app, cluster, sync, task};

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

    /// Whether the pattern names exactly one topic.
    pub fn is_exact(&self) -> bool {
        self.segments.iter().all(|s| s != "*" && s != "**")
    }
}

/// Subscriber ids by pattern, as a trie over segments: matching a topic
/// costs its depth times the branching actually used, not the number of
/// subscriptions.
#[derive(Debug, Default)]
pub struct PatternIndex<Id> {
    root: Node<Id>,
    len: usize,
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
    pub fn insert(&mut self, pattern: &Pattern, id: Id) {
        let mut node = &mut self.root;
        for seg in &pattern.segments {
            match seg.as_str() {
                "**" => {
                    node.rest.push(id);
                    self.len += 1;
                    return;
                }
                "*" => node = node.star.get_or_insert_with(Default::default),
                literal => node = node.literal.entry(literal.to_string()).or_default(),
            }
        }
        node.here.push(id);
        self.len += 1;
    }

    /// Removes one registration of `id` under `pattern`.
    pub fn remove(&mut self, pattern: &Pattern, id: &Id) {
        let mut node = &mut self.root;
        for seg in &pattern.segments {
            let next = match seg.as_str() {
                "**" => {
                    if let Some(pos) = node.rest.iter().position(|x| x == id) {
                        node.rest.swap_remove(pos);
                        self.len -= 1;
                    }
                    return;
                }
                "*" => node.star.as_deref_mut(),
                literal => node.literal.get_mut(literal),
            };
            match next {
                Some(n) => node = n,
                None => return,
            }
        }
        if let Some(pos) = node.here.iter().position(|x| x == id) {
            node.here.swap_remove(pos);
            self.len -= 1;
        }
    }

    /// Every id whose pattern matches `topic` (an id with two matching patterns appears twice).
    pub fn matches(&self, topic: &Topic) -> Vec<Id> {
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
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the index holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
