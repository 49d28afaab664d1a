//! Who may see and act on what: scopes (`*`, `cluster`, `cluster/namespace`,
//! `*/namespace`), the principal that holds them, and the rule that maps a
//! topic to the scope it needs. Pure: no I/O. Topics arrive parsed
//! ([`Topic`]), so the check that runs on every delivery splits no string.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::protocol::{Topic, TopicKind};

/// One grant: every cluster, one cluster, or one namespace (in one or every cluster).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every cluster and namespace (`*`).
    All,
    /// Every namespace of one member cluster.
    Cluster(String),
    /// `(cluster, namespace)`; cluster `*` means every cluster.
    Namespace(String, String),
}

impl Scope {
    /// Parses `*`, `prod`, `prod/shop`, `*/shop`. A namespace `*` (`*/*`,
    /// `prod/*`) is refused rather than read as `*` or `prod`: those grant
    /// more than namespaces (cluster documents, metrics, the summaries, the
    /// simulator's control), which a grant written as "every namespace"
    /// should not carry without saying so.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let bad =
            || format!("scope {raw:?} is not `*`, `CLUSTER`, `CLUSTER/NAMESPACE` or `*/NAMESPACE`");
        let parts: Vec<&str> = raw.split('/').collect();
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 253
                && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        };
        match parts.as_slice() {
            ["*"] => Ok(Scope::All),
            [c, "*"] => Err(format!(
                "scope {raw:?}: a namespace is named, not `*`; write `{}` for all of {}, \
                 which grants its cluster-wide documents too",
                c,
                if *c == "*" {
                    "every cluster"
                } else {
                    "the cluster"
                }
            )),
            [c] if name_ok(c) && !c.contains('*') => Ok(Scope::Cluster((*c).into())),
            [c, ns]
                if name_ok(c)
                    && name_ok(ns)
                    && !ns.contains('*')
                    && (*c == "*" || !c.contains('*')) =>
            {
                Ok(Scope::Namespace((*c).into(), (*ns).into()))
            }
            _ => Err(bad()),
        }
    }

    fn covers(&self, cluster: &str, namespace: Option<&str>) -> bool {
        match self {
            Scope::All => true,
            Scope::Cluster(c) => c == cluster,
            Scope::Namespace(c, ns) => {
                (c == "*" || c == cluster) && namespace.is_some_and(|n| n == ns)
            }
        }
    }

    /// Whether the scope reaches into `cluster` at all.
    fn touches(&self, cluster: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Cluster(c) | Scope::Namespace(c, _) => c == "*" || c == cluster,
        }
    }
}

/// A set of scopes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scopes {
    /// Whether one of them is `*`. Asked on every delivery of every
    /// session, so kept beside the list instead of read from it: the list
    /// is each session's own allocation, with 1 000 sessions served in turn
    /// rarely still in the cache (1 % of the server's CPU at 1 000 SSE
    /// subscribers, docs/benchmarks/33-objects-per-delivery.md).
    all: bool,
    scopes: Vec<Scope>,
}

impl Scopes {
    /// These scopes.
    pub fn new(scopes: Vec<Scope>) -> Self {
        Self {
            all: scopes.contains(&Scope::All),
            scopes,
        }
    }

    /// Everything: the grant of an unauthenticated gateway.
    pub fn all() -> Self {
        Self::new(vec![Scope::All])
    }

    /// Scopes from their written form (`*`, `cluster`, `cluster/namespace`).
    pub fn parse<S: AsRef<str>>(raw: &[S]) -> Result<Self, String> {
        raw.iter()
            .map(|s| Scope::parse(s.as_ref()))
            .collect::<Result<_, _>>()
            .map(Self::new)
    }

    /// Whether these scopes grant everything.
    pub fn is_all(&self) -> bool {
        self.all
    }

    /// The whole cluster (`namespace` None) or one namespace of it.
    pub fn allows(&self, cluster: &str, namespace: Option<&str>) -> bool {
        self.scopes.iter().any(|s| s.covers(cluster, namespace))
    }

    fn touches(&self, cluster: &str) -> bool {
        self.scopes.iter().any(|s| s.touches(cluster))
    }
}

/// A user as the host cluster's TokenReview names it: the identity a
/// principal of `--auth kubernetes` carries for its access reviews.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KubeUser {
    /// The user name access reviews ask about.
    pub username: String,
    /// The user's UID (empty when the apiserver reports none).
    pub uid: String,
    /// The groups the user belongs to (RBAC grants to groups count).
    pub groups: Vec<String>,
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Who: a token's subject, a JWT `sub`, a Kubernetes user name.
    pub subject: String,
    /// Which clusters and namespaces it may watch (topics it may see).
    pub read: Scopes,
    /// Creating, cancelling and reporting on tasks.
    pub write: Scopes,
    /// When the credential stops being valid (sessions end then, unless
    /// it is renewed).
    pub expires: Option<DateTime<Utc>>,
    /// The Kubernetes identity, for access reviews in `kubernetes` mode.
    pub(crate) kube_user: Option<KubeUser>,
}

impl Principal {
    /// The principal of `--auth none`: everything.
    pub fn unrestricted() -> Self {
        Self {
            subject: "anonymous".into(),
            read: Scopes::all(),
            write: Scopes::all(),
            expires: None,
            kube_user: None,
        }
    }

    /// Whether the cluster `name` is visible at all (its `clusters/{name}`
    /// document): any grant in it. Health details follow this too.
    pub fn can_see_cluster(&self, name: &str) -> bool {
        self.read.touches(name)
    }

    /// Whether a topic (with its document, when there is one) is visible:
    /// `clusters/{c}` with any grant in `c`; sync documents with the whole
    /// cluster; `apps/{c}/{ns}/…` with `c` or `c/ns`; `tasks/{id}` by the
    /// task's target (a removed task topic only with `*`); anything else
    /// only with `*`.
    pub fn can_see(&self, topic: &Topic, doc: Option<&Value>) -> bool {
        if self.read.is_all() {
            return true;
        }
        match topic.kind() {
            Some(TopicKind::Cluster { cluster }) => self.read.touches(cluster),
            Some(TopicKind::Sync { cluster, .. }) => self.read.allows(cluster, None),
            Some(TopicKind::App {
                cluster, namespace, ..
            }) => self.read.allows(cluster, Some(namespace)),
            Some(TopicKind::Task { .. }) => doc
                .and_then(|d| d.get("target"))
                .and_then(|t| Some((t.get("cluster")?.as_str()?, t.get("namespace")?.as_str()?)))
                .is_some_and(|(c, ns)| self.read.allows(c, Some(ns))),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scopes_parse() {
        let cases = [
            ("*", Ok(Scope::All)),
            ("*/*", Err(())),
            ("prod", Ok(Scope::Cluster("prod".into()))),
            ("prod/*", Err(())),
            (
                "prod/shop",
                Ok(Scope::Namespace("prod".into(), "shop".into())),
            ),
            ("*/shop", Ok(Scope::Namespace("*".into(), "shop".into()))),
            ("", Err(())),
            ("a/b/c", Err(())),
            ("pr*d", Err(())),
            ("a b", Err(())),
            ("prod/", Err(())),
        ];
        for (raw, want) in cases {
            assert_eq!(Scope::parse(raw).map_err(|_| ()), want, "{raw}");
        }
    }

    #[test]
    fn everything_is_granted_by_a_star_anywhere_in_the_list() {
        for (raw, all) in [
            (&["*"][..], true),
            (&["prod", "*"][..], true),
            (&["prod", "*/shop"][..], false),
            (&[][..], false),
        ] {
            let scopes = Scopes::parse(raw).unwrap();
            assert_eq!(scopes.is_all(), all, "{raw:?}");
            assert_eq!(scopes.allows("staging", Some("x")), all, "{raw:?}");
        }
        assert!(Scopes::all().is_all());
        assert!(!Scopes::default().is_all());
    }

    #[test]
    fn topics_are_visible_by_scope() {
        let p = |read: &[&str]| Principal {
            subject: "t".into(),
            read: Scopes::parse(read).unwrap(),
            write: Scopes::default(),
            expires: None,
            kube_user: None,
        };
        let a = p(&["a"]);
        let shop = p(&["b/shop"]);
        let any_shop = p(&["*/shop"]);
        let task =
            |c: &str, ns: &str| json!({"target": {"cluster": c, "namespace": ns, "app": "web"}});
        let cases: Vec<(&Principal, &str, Option<Value>, bool)> = vec![
            (&a, "clusters/a", None, true),
            (&a, "clusters/b", None, false),
            (&a, "clusters/a/sync/apps/v1/deployments", None, true),
            (&a, "clusters/b/sync/apps/v1/deployments", None, false),
            (&a, "apps/a/shop/web", None, true),
            (&a, "apps/b/shop/web", None, false),
            (&a, "tasks/1", Some(task("a", "shop")), true),
            (&a, "tasks/1", Some(task("b", "shop")), false),
            (&a, "tasks/1", None, false),
            (&a, "other/a", None, false),
            (&shop, "clusters/b", None, true),
            (&shop, "clusters/a", None, false),
            (&shop, "clusters/b/sync/core/v1/configmaps", None, false),
            (&shop, "apps/b/shop/web", None, true),
            (&shop, "apps/b/other/web", None, false),
            (&shop, "apps/a/shop/web", None, false),
            (&any_shop, "apps/a/shop/web", None, true),
            (&any_shop, "apps/z/shop/web", None, true),
            (&any_shop, "apps/z/kube/web", None, false),
        ];
        for (principal, topic, doc, want) in cases {
            assert_eq!(
                principal.can_see(&Topic::new(topic), doc.as_ref()),
                want,
                "{principal:?} {topic}"
            );
        }
        assert!(Principal::unrestricted().can_see(&Topic::new("anything/at/all"), None));
    }
}
