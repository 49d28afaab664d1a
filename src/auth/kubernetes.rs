//! `--auth kubernetes`: the bearer token is a Kubernetes token, checked
//! with a `TokenReview` and authorized with `SubjectAccessReview`s against
//! the host cluster, so access follows ordinary RBAC on virtual resources of
//! the API group `kube-pulse.io`:
//!
//! | To | verb | resource | namespace | name |
//! |---|---|---|---|---|
//! | read everything of cluster C | `get` | `clusters` | — | C |
//! | read the apps of namespace N in cluster C | `get` | `apps` | N | C |
//! | create, cancel, report tasks on apps of N in C | `create` | `tasks` | N | C |
//!
//! Decisions are cached for `ttl` (a rejected token for 10 s, apart from
//! the accepted ones); a principal's read grants are resolved
//! when it authenticates, over the clusters and namespaces the hub knows,
//! and expire with the cache so that sessions re-check them.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use parking_lot::Mutex;

use super::scope::{KubeUser, Principal, Scope, Scopes};
use crate::hub::{Hub, Pattern};
use crate::protocol::TopicKind;

/// The API group of the virtual resources.
pub const GROUP: &str = "kube-pulse.io";

/// Most review answers kept (in each cache).
const CACHE_SIZE: usize = 10_000;

/// How long a rejected token's answer is reused (at most the TTL): long
/// enough that a client retrying one bad token costs the host one review,
/// short enough that a token created just after is soon accepted.
const REJECTED_TTL: Duration = Duration::from_secs(10);

type Attrs = (String, String, Option<String>, String);
/// Token reviews' answers, by token digest, with when they were given.
#[derive(Default)]
struct TokenCache {
    accepted: HashMap<[u8; 32], (KubeUser, Instant)>,
    /// Apart from the accepted ones, so that a flood of guesses can never
    /// push a good token out.
    rejected: HashMap<[u8; 32], (String, Instant)>,
}

/// Reviews tokens and access on the host cluster.
pub struct KubeAuth {
    client: kube::Client,
    hub: Arc<Hub>,
    audiences: Vec<String>,
    ttl: Duration,
    tokens: Mutex<TokenCache>,
    decisions: Mutex<HashMap<(KubeUser, Attrs), (bool, Instant)>>,
}

impl std::fmt::Debug for KubeAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeAuth")
            .field("audiences", &self.audiences)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

fn remember<K: std::hash::Hash + Eq, V>(
    map: &mut HashMap<K, (V, Instant)>,
    key: K,
    value: V,
    ttl: Duration,
) {
    if map.len() >= CACHE_SIZE {
        let now = Instant::now();
        map.retain(|_, (_, at)| now.duration_since(*at) < ttl);
        if map.len() >= CACHE_SIZE {
            map.clear();
        }
    }
    map.insert(key, (value, Instant::now()));
}

impl KubeAuth {
    /// Reviews against the cluster of `client`; grants are resolved over the
    /// clusters and namespaces in `hub`.
    pub fn new(client: kube::Client, hub: Arc<Hub>, audiences: Vec<String>, ttl: Duration) -> Self {
        Self {
            client,
            hub,
            audiences,
            ttl,
            tokens: Mutex::new(TokenCache::default()),
            decisions: Mutex::new(HashMap::new()),
        }
    }

    async fn review_token(&self, token: &str) -> Result<KubeUser, String> {
        let key = super::credential::sha256(token.as_bytes());
        if let Some((user, at)) = self.tokens.lock().accepted.get(&key)
            && at.elapsed() < self.ttl
        {
            return Ok(user.clone());
        }
        let rejected_ttl = REJECTED_TTL.min(self.ttl);
        if let Some((reason, at)) = self.tokens.lock().rejected.get(&key)
            && at.elapsed() < rejected_ttl
        {
            return Err(reason.clone());
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.into(),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("token review failed: {e}"))?;
        let status = answer.status.unwrap_or_default();
        let result = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Ok(KubeUser {
                username: user.username.unwrap_or_default(),
                uid: user.uid.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
            }),
            _ => Err(status
                .error
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "the token was not accepted by the cluster".into())),
        };
        match &result {
            Ok(user) => remember(
                &mut self.tokens.lock().accepted,
                key,
                user.clone(),
                self.ttl,
            ),
            Err(reason) => remember(
                &mut self.tokens.lock().rejected,
                key,
                reason.clone(),
                rejected_ttl,
            ),
        }
        result
    }

    /// Whether `user` may `verb` the virtual `resource` named `name` (in `namespace`).
    pub async fn allowed(
        &self,
        user: &KubeUser,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<bool, String> {
        let attrs: Attrs = (
            verb.into(),
            resource.into(),
            namespace.map(str::to_string),
            name.into(),
        );
        self.decide(user, attrs, || SubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.into()),
                resource: Some(resource.into()),
                verb: Some(verb.into()),
                namespace: namespace.map(str::to_string),
                name: Some(name.into()),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
    }

    /// Whether `user` may `verb` the gateway's own URL `path` (`/metrics`),
    /// as RBAC's `nonResourceURLs` say: what the apiserver and
    /// kube-rbac-proxy ask for their metrics.
    pub async fn allowed_path(
        &self,
        user: &KubeUser,
        verb: &str,
        path: &str,
    ) -> Result<bool, String> {
        // A resource name never starts with `/`: no key of `allowed` is this.
        let attrs: Attrs = (verb.into(), path.into(), None, String::new());
        self.decide(user, attrs, || SubjectAccessReviewSpec {
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.into()),
                verb: Some(verb.into()),
            }),
            ..Default::default()
        })
        .await
    }

    /// The cluster's answer for `user` and `attrs` (remembered for the
    /// TTL), asking with the review `spec` gives (the user filled in).
    async fn decide(
        &self,
        user: &KubeUser,
        attrs: Attrs,
        spec: impl FnOnce() -> SubjectAccessReviewSpec,
    ) -> Result<bool, String> {
        let key = (user.clone(), attrs);
        if let Some((allowed, at)) = self.decisions.lock().get(&key)
            && at.elapsed() < self.ttl
        {
            return Ok(*allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.username.clone()),
                uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                groups: Some(user.groups.clone()),
                ..spec()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("access review failed: {e}"))?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        remember(&mut self.decisions.lock(), key, allowed, self.ttl);
        Ok(allowed)
    }

    /// Clusters the hub knows, and the namespaces with apps in each.
    fn layout(&self) -> Vec<(String, BTreeSet<String>)> {
        let clusters = Pattern::parse("clusters/*").expect("valid pattern");
        let apps = Pattern::parse("apps/**").expect("valid pattern");
        let mut out: Vec<(String, BTreeSet<String>)> = self
            .hub
            .list(&[clusters])
            .iter()
            .filter_map(|d| match d.topic.kind() {
                Some(TopicKind::Cluster { cluster }) => {
                    Some((cluster.to_string(), BTreeSet::new()))
                }
                _ => None,
            })
            .collect();
        for doc in self.hub.list(&[apps]) {
            if let Some(TopicKind::App {
                cluster, namespace, ..
            }) = doc.topic.kind()
                && let Some((_, namespaces)) = out.iter_mut().find(|(name, _)| name == cluster)
            {
                namespaces.insert(namespace.to_string());
            }
        }
        out
    }

    /// Reviews the token and resolves its read grants.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, String> {
        let user = self.review_token(token).await?;
        let mut scopes = Vec::new();
        for (cluster, namespaces) in self.layout() {
            if self
                .allowed(&user, "get", "clusters", None, &cluster)
                .await?
            {
                scopes.push(Scope::Cluster(cluster));
                continue;
            }
            for ns in namespaces {
                if self
                    .allowed(&user, "get", "apps", Some(&ns), &cluster)
                    .await?
                {
                    scopes.push(Scope::Namespace(cluster.clone(), ns));
                }
            }
        }
        Ok(Principal {
            subject: user.username.clone(),
            read: Scopes::new(scopes),
            // Writes are reviewed one by one (see `allowed`).
            write: Scopes::default(),
            // Sessions re-check the token and grants when the cache expires.
            expires: Some(Utc::now() + chrono::Duration::from_std(self.ttl).unwrap_or_default()),
            kube_user: Some(user),
        })
    }
}
