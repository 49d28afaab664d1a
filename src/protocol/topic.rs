//! Topic names (`engine → hub keys → [Topic] → grants and messages`): the
//! four documented kinds (`docs/PROTOCOL.md`, "Topics and patterns"),
//! parsed once when the hub first holds a topic. Every change, resync and
//! snapshot carries the parsed form, so deciding who may see a delivery
//! reads its segments instead of splitting the name again.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};

/// Longest accepted topic or pattern.
pub const MAX_TOPIC_LEN: usize = 512;

/// `clusters/{name}`.
pub fn cluster(name: &str) -> String {
    format!("clusters/{name}")
}

/// `clusters/{cluster}/sync/{group}/{version}/{resource}` (`gvr_path` is
/// `{group}/{version}/{resource}`, the core group written `core`).
pub fn sync(cluster: &str, gvr_path: &str) -> String {
    format!("clusters/{cluster}/sync/{gvr_path}")
}

/// `apps/{cluster}/{namespace}/{app}`.
pub fn app(cluster: &str, namespace: &str, app: &str) -> String {
    format!("apps/{cluster}/{namespace}/{app}")
}

/// `tasks/{id}`.
pub fn task(id: &str) -> String {
    format!("tasks/{id}")
}

/// What a topic names, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicKind<'a> {
    /// `clusters/{cluster}`: a cluster status document.
    Cluster {
        /// The member cluster's name.
        cluster: &'a str,
    },
    /// `clusters/{cluster}/sync/{group}/{version}/{resource}`: a sync status document.
    Sync {
        /// The member cluster's name.
        cluster: &'a str,
        /// API group as written in the topic (`core` for the core group).
        group: &'a str,
        /// API version, e.g. `v1`.
        version: &'a str,
        /// Plural resource name, e.g. `deployments`.
        resource: &'a str,
    },
    /// `apps/{cluster}/{namespace}/{app}`: an application status document.
    App {
        /// The member cluster's name.
        cluster: &'a str,
        /// The app's namespace.
        namespace: &'a str,
        /// The app's name.
        app: &'a str,
    },
    /// `tasks/{id}`: a task status document.
    Task {
        /// The task's id.
        id: &'a str,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Cluster,
    Sync,
    App,
    Task,
    /// Not one of the four kinds: only the `*` read grant reaches it.
    Other,
}

/// A parsed topic name; cloning shares it. Compares, orders and hashes as
/// its text, and is written on the wire as a string.
#[derive(Clone)]
pub struct Topic(Arc<Parsed>);

struct Parsed {
    raw: Box<str>,
    /// Where each `/`-separated segment ends in `raw`.
    ends: Box<[usize]>,
    shape: Shape,
}

impl Topic {
    /// Parses a topic of one of the four kinds whose segments are
    /// non-empty and hold no `*`, whitespace or control characters.
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.len() > MAX_TOPIC_LEN {
            return Err(format!("a topic is at most {MAX_TOPIC_LEN} bytes"));
        }
        let segments: Vec<&str> = raw.split('/').collect();
        if let Some(bad) = segments.iter().find(|s| {
            s.is_empty()
                || s.contains('*')
                || s.chars().any(|c| c.is_whitespace() || c.is_control())
        }) {
            return Err(format!("topic {raw:?} has a bad segment {bad:?}"));
        }
        let shape = match segments.as_slice() {
            ["clusters", _] => Shape::Cluster,
            ["clusters", _, "sync", _, _, _] => Shape::Sync,
            ["apps", _, _, _] => Shape::App,
            ["tasks", _] => Shape::Task,
            _ => {
                return Err(format!(
                    "topic {raw:?} is not clusters/CLUSTER, clusters/CLUSTER/sync/GROUP/VERSION/RESOURCE, \
                     apps/CLUSTER/NAMESPACE/APP or tasks/ID"
                ));
            }
        };
        Ok(Self::with_shape(raw, shape))
    }

    /// Any name the hub holds: parsed as [`Topic::parse`] does, else kept
    /// as a topic of no kind (matched by patterns, visible only with `*`).
    pub fn new(raw: &str) -> Self {
        Self::parse(raw).unwrap_or_else(|_| Self::with_shape(raw, Shape::Other))
    }

    fn with_shape(raw: &str, shape: Shape) -> Self {
        let ends = raw
            .match_indices('/')
            .map(|(i, _)| i)
            .chain([raw.len()])
            .collect();
        Self(Arc::new(Parsed {
            raw: raw.into(),
            ends,
            shape,
        }))
    }

    /// The topic's name, as published (`clusters/dev`).
    pub fn as_str(&self) -> &str {
        &self.0.raw
    }

    /// How many `/`-separated segments the name has.
    pub fn depth(&self) -> usize {
        self.0.ends.len()
    }

    /// The `i`-th segment (from 0).
    pub fn segment(&self, i: usize) -> Option<&str> {
        let end = *self.0.ends.get(i)?;
        let start = match i {
            0 => 0,
            _ => self.0.ends[i - 1] + 1,
        };
        Some(&self.0.raw[start..end])
    }

    /// What the topic names (None: none of the four kinds).
    pub fn kind(&self) -> Option<TopicKind<'_>> {
        let s = |i| self.segment(i).unwrap_or_default();
        Some(match self.0.shape {
            Shape::Cluster => TopicKind::Cluster { cluster: s(1) },
            Shape::Sync => TopicKind::Sync {
                cluster: s(1),
                group: s(3),
                version: s(4),
                resource: s(5),
            },
            Shape::App => TopicKind::App {
                cluster: s(1),
                namespace: s(2),
                app: s(3),
            },
            Shape::Task => TopicKind::Task { id: s(1) },
            Shape::Other => return None,
        })
    }
}

impl From<&str> for Topic {
    fn from(raw: &str) -> Self {
        Topic::new(raw)
    }
}

impl AsRef<str> for Topic {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// Lets maps keyed by topic be read with a `&str`.
impl Borrow<str> for Topic {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Topic {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Topic {}

impl PartialEq<str> for Topic {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Topic {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialOrd for Topic {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Topic {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for Topic {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for Topic {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_parse_into_their_kind() {
        use TopicKind::*;
        let cases: [(&str, Option<TopicKind<'_>>); 8] = [
            ("clusters/prod", Some(Cluster { cluster: "prod" })),
            (
                "clusters/prod/sync/apps/v1/deployments",
                Some(Sync {
                    cluster: "prod",
                    group: "apps",
                    version: "v1",
                    resource: "deployments",
                }),
            ),
            (
                "clusters/prod/sync/core/v1/configmaps",
                Some(Sync {
                    cluster: "prod",
                    group: "core",
                    version: "v1",
                    resource: "configmaps",
                }),
            ),
            (
                "apps/prod/shop/web",
                Some(App {
                    cluster: "prod",
                    namespace: "shop",
                    app: "web",
                }),
            ),
            ("tasks/t-42", Some(Task { id: "t-42" })),
            (&cluster("a"), Some(Cluster { cluster: "a" })),
            (
                &app("a", "b", "c"),
                Some(App {
                    cluster: "a",
                    namespace: "b",
                    app: "c",
                }),
            ),
            (&task("7"), Some(Task { id: "7" })),
        ];
        for (raw, want) in cases {
            let topic = Topic::parse(raw).unwrap();
            assert_eq!(topic.kind(), want, "{raw}");
            assert_eq!(topic.as_str(), raw);
            assert_eq!(Topic::new(raw).kind(), want, "{raw}");
        }
        assert_eq!(
            Topic::parse(&sync("a", "apps/v1/deployments"))
                .unwrap()
                .kind(),
            Some(Sync {
                cluster: "a",
                group: "apps",
                version: "v1",
                resource: "deployments"
            })
        );
    }

    #[test]
    fn bad_topics_are_refused_and_kept_as_no_kind() {
        let long = format!("tasks/{}", "x".repeat(MAX_TOPIC_LEN));
        let bad = [
            "",
            "clusters",
            "clusters/",
            "clusters//sync/apps/v1/deployments",
            "clusters/a/b",
            "clusters/a/sync",
            "clusters/a/sync/apps/v1",
            "clusters/a/sync/apps/v1/deployments/x",
            "apps/a/b",
            "apps/a/b/c/d",
            "apps/*/shop/web",
            "apps/a/sh op/web",
            "apps/a/shop/w\u{7}b",
            "tasks/1/2",
            "t/x",
            "anything/at/all",
            "/clusters/a",
            long.as_str(),
        ];
        for raw in bad {
            assert!(Topic::parse(raw).is_err(), "{raw:?}");
            let kept = Topic::new(raw);
            assert_eq!(kept.kind(), None, "{raw:?}");
            assert_eq!(kept.as_str(), raw);
        }
    }

    #[test]
    fn segments_compare_and_encode_as_text() {
        let t = Topic::new("clusters/a/sync/core/v1/pods");
        assert_eq!(t.depth(), 6);
        let segments: Vec<&str> = (0..t.depth()).map(|i| t.segment(i).unwrap()).collect();
        assert_eq!(segments, ["clusters", "a", "sync", "core", "v1", "pods"]);
        assert_eq!(t.segment(6), None);
        let odd = Topic::new("a//b");
        assert_eq!((odd.depth(), odd.segment(1)), (3, Some("")));
        assert_eq!(Topic::new("").depth(), 1);
        assert_eq!(t, "clusters/a/sync/core/v1/pods");
        assert!(Topic::new("apps/a/b/c") < Topic::new("clusters/a"));
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#""clusters/a/sync/core/v1/pods""#
        );
        assert_eq!(
            format!("{t} {t:?}"),
            r#"clusters/a/sync/core/v1/pods "clusters/a/sync/core/v1/pods""#
        );
        let mut map = std::collections::BTreeMap::new();
        map.insert(t.clone(), 1);
        assert_eq!(map.get("clusters/a/sync/core/v1/pods"), Some(&1));
    }
}
