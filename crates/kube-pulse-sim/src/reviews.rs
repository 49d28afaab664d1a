//! The simulator's answers to `TokenReview` and `SubjectAccessReview` (the
//! APIs `--auth kubernetes` asks), from a policy set in Rust or over the
//! control API: known tokens name a user and groups; RBAC-style rules allow
//! verbs on resources, optionally in namespaces and for resource names.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A user a token stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewUser {
    pub token: String,
    pub username: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

/// One allow rule; empty lists and `*` match anything.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AccessRule {
    /// User names, or `group:NAME`.
    pub subjects: Vec<String>,
    pub verbs: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    /// Empty: cluster-wide (any namespace, and cluster-scoped requests).
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// A rule with these is about URLs, not resources (RBAC's
    /// `nonResourceURLs`, `/metrics`; a trailing `*` matches a prefix): it
    /// answers reviews of a `nonResourceAttributes` path only, and the
    /// other rules answer only reviews of resources.
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

/// Who the tokens are and what they may do.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewPolicy {
    #[serde(default)]
    pub users: Vec<ReviewUser>,
    #[serde(default)]
    pub rules: Vec<AccessRule>,
}

fn any(list: &[String], value: &str) -> bool {
    list.is_empty() || list.iter().any(|v| v == "*" || v == value)
}

impl ReviewPolicy {
    /// The `status` of a TokenReview.
    pub fn token_review(&self, review: &Value) -> Value {
        let token = review
            .pointer("/spec/token")
            .and_then(Value::as_str)
            .unwrap_or("");
        match self
            .users
            .iter()
            .find(|u| !token.is_empty() && u.token == token)
        {
            Some(u) => json!({
                "authenticated": true,
                "user": {"username": u.username, "uid": format!("uid-{}", u.username), "groups": u.groups},
            }),
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        }
    }

    /// The `status` of a SubjectAccessReview.
    pub fn access_review(&self, review: &Value) -> Value {
        let spec = &review["spec"];
        let user = spec["user"].as_str().unwrap_or("");
        let groups: Vec<&str> = spec["groups"]
            .as_array()
            .map(|g| g.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let url = spec["nonResourceAttributes"].is_object();
        let attrs = &spec[if url {
            "nonResourceAttributes"
        } else {
            "resourceAttributes"
        }];
        let field = |name: &str| attrs[name].as_str().unwrap_or("");
        let allowed = self.rules.iter().any(|r| {
            let subject = r.subjects.iter().any(|s| {
                s == user
                    || s.strip_prefix("group:")
                        .is_some_and(|g| groups.contains(&g))
            });
            if url || !r.non_resource_urls.is_empty() {
                let path = field("path");
                return url
                    && subject
                    && any(&r.verbs, field("verb"))
                    && r.non_resource_urls
                        .iter()
                        .any(|u| match u.strip_suffix('*') {
                            Some(prefix) => path.starts_with(prefix),
                            None => u == path,
                        });
            }
            let namespace = field("namespace");
            subject
                && any(&r.verbs, field("verb"))
                && any(&r.api_groups, field("group"))
                && any(&r.resources, field("resource"))
                && (r.namespaces.is_empty()
                    || (!namespace.is_empty() && any(&r.namespaces, namespace)))
                && any(&r.resource_names, field("name"))
        });
        json!({"allowed": allowed})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_follow_the_policy() {
        let policy = ReviewPolicy {
            users: vec![ReviewUser {
                token: "t-alice".into(),
                username: "alice".into(),
                groups: vec!["dev".into()],
            }],
            rules: vec![AccessRule {
                subjects: vec!["group:dev".into()],
                verbs: vec!["get".into()],
                api_groups: vec!["kube-pulse.io".into()],
                resources: vec!["apps".into()],
                namespaces: vec!["shop".into()],
                resource_names: vec!["a".into()],
                non_resource_urls: vec![],
            }],
        };
        let status = policy.token_review(&json!({"spec": {"token": "t-alice"}}));
        assert_eq!(status["user"]["username"], "alice");
        assert_eq!(
            policy.token_review(&json!({"spec": {"token": "x"}}))["authenticated"],
            false
        );
        let sar = |verb: &str, ns: Option<&str>, name: &str| {
            let mut attrs =
                json!({"group": "kube-pulse.io", "resource": "apps", "verb": verb, "name": name});
            if let Some(ns) = ns {
                attrs["namespace"] = json!(ns);
            }
            policy.access_review(
                &json!({"spec": {"user": "alice", "groups": ["dev"], "resourceAttributes": attrs}}),
            )["allowed"]
                .as_bool()
                .unwrap()
        };
        assert!(sar("get", Some("shop"), "a"));
        assert!(!sar("create", Some("shop"), "a"));
        assert!(!sar("get", Some("other"), "a"));
        assert!(
            !sar("get", None, "a"),
            "a namespaced rule does not grant cluster-wide"
        );
        assert!(!sar("get", Some("shop"), "b"));
    }

    #[test]
    fn url_rules_answer_url_reviews_only() {
        let policy: ReviewPolicy = serde_json::from_value(json!({
            "rules": [
                {"subjects": ["prometheus"], "verbs": ["get"], "nonResourceURLs": ["/metrics"]},
                {"subjects": ["ops"], "verbs": ["get"], "nonResourceURLs": ["/debug/*"]},
                {"subjects": ["viewer"], "verbs": ["get"], "resources": ["clusters"]}
            ]
        }))
        .unwrap();
        let url = |user: &str, verb: &str, path: &str| {
            policy.access_review(&json!({"spec": {"user": user,
                "nonResourceAttributes": {"path": path, "verb": verb}}}))["allowed"]
                .as_bool()
                .unwrap()
        };
        let resource = |user: &str| {
            policy.access_review(&json!({"spec": {"user": user,
                "resourceAttributes": {"group": "kube-pulse.io", "resource": "clusters", "verb": "get", "name": "a"}}}))
                ["allowed"]
                .as_bool()
                .unwrap()
        };
        assert!(url("prometheus", "get", "/metrics"));
        assert!(!url("prometheus", "post", "/metrics"));
        assert!(!url("prometheus", "get", "/metricsx"));
        assert!(url("ops", "get", "/debug/pprof"));
        assert!(
            !url("viewer", "get", "/metrics"),
            "a resource rule grants no URL"
        );
        assert!(!resource("prometheus"), "a URL rule grants no resource");
        assert!(resource("viewer"));
    }
}
