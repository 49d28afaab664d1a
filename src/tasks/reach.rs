//! How a built-in task reaches one workload of an app
//! (`executor ──[reach]──kube-rs──▶ member`): a Deployment or StatefulSet
//! through its typed resource, a custom workload through the resource its
//! health rule names. Replica counts go through the `/scale` subresource
//! where the member serves one for the resource (what `kubectl scale`
//! uses), else through a merge patch at the rule's `replicasPath`; an image
//! through a merge patch of the container list at the rule's `templatePath`
//! (custom resources take no strategic merge patches).

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::status::rules::{HealthRule, HealthRules};

/// Why an action failed: a reason word and a message.
pub(super) type Failure = (String, String);

/// The reason and message of an action the member refused.
pub(super) fn failure(err: &kube::Error) -> Failure {
    crate::classify::action_failure(err)
}

/// One workload kind on one member, in one namespace, as tasks act on it.
pub(super) struct Reach<'a> {
    pub(super) api: Api<DynamicObject>,
    /// The rule of a custom workload; None for Deployments and StatefulSets.
    rule: Option<&'a HealthRule>,
    /// The member serves `/scale` for the resource.
    scale: bool,
}

/// The reaches of one task's workloads, made once per kind: an app of two
/// workloads of one custom kind looks its resource up once.
pub(super) struct Reaches<'a> {
    client: &'a kube::Client,
    rules: &'a HealthRules,
    namespace: &'a str,
    by_kind: std::collections::HashMap<String, Reach<'a>>,
}

impl<'a> Reaches<'a> {
    pub(super) fn new(
        client: &'a kube::Client,
        rules: &'a HealthRules,
        namespace: &'a str,
    ) -> Self {
        Self {
            client,
            rules,
            namespace,
            by_kind: std::collections::HashMap::new(),
        }
    }

    /// The reach of `kind`, made the first time it is asked for.
    pub(super) async fn of(&mut self, kind: &str) -> Result<&Reach<'a>, Failure> {
        if !self.by_kind.contains_key(kind) {
            let reach = Reach::new(self.client, self.rules, kind, self.namespace).await?;
            self.by_kind.insert(kind.to_string(), reach);
        }
        Ok(&self.by_kind[kind])
    }
}

impl<'a> Reach<'a> {
    /// The workloads of `kind` in `namespace`: a Deployment or StatefulSet,
    /// or a kind a health rule reads (whose `/scale` is looked up).
    pub(super) async fn new(
        client: &kube::Client,
        rules: &'a HealthRules,
        kind: &str,
        namespace: &str,
    ) -> Result<Reach<'a>, Failure> {
        let builtin = match kind {
            "Deployment" => Some(ApiResource::erase::<Deployment>(&())),
            "StatefulSet" => Some(ApiResource::erase::<StatefulSet>(&())),
            _ => None,
        };
        if let Some(resource) = builtin {
            return Ok(Self {
                api: Api::namespaced_with(client.clone(), namespace, &resource),
                rule: None,
                scale: false,
            });
        }
        let rule = rules.for_kind(kind).ok_or_else(|| {
            (
                "UnknownKind".to_string(),
                format!("no health rule reads {kind} workloads"),
            )
        })?;
        let gvr = &rule.gvr;
        let resource = ApiResource {
            group: gvr.group.clone(),
            version: gvr.version.clone(),
            api_version: format!("{}/{}", gvr.group, gvr.version),
            kind: rule.kind.to_string(),
            plural: gvr.resource.clone(),
        };
        let found = crate::sources::lookup(client, gvr)
            .await
            .map_err(|e| failure(&e))?;
        let scale = found.is_some_and(|(_, caps)| {
            caps.subresources
                .iter()
                .any(|(sub, _)| sub.plural == "scale")
        });
        Ok(Self {
            api: Api::namespaced_with(client.clone(), namespace, &resource),
            rule: Some(rule),
            scale,
        })
    }

    /// Sets the replica count of `name`, and with it `annotations` (a map;
    /// null values remove).
    pub(super) async fn set_replicas(
        &self,
        name: &str,
        replicas: i32,
        annotations: Option<Value>,
    ) -> Result<(), Failure> {
        let params = PatchParams::default();
        let Some(rule) = self.rule else {
            let mut patch = json!({"spec": {"replicas": replicas}});
            if let Some(annotations) = annotations {
                patch["metadata"] = json!({ "annotations": annotations });
            }
            return self.merge(name, &patch).await;
        };
        if let Some(annotations) = annotations {
            self.merge(name, &json!({"metadata": {"annotations": annotations}}))
                .await?;
        }
        if self.scale {
            let patch = json!({"spec": {"replicas": replicas}});
            self.api
                .patch_scale(name, &params, &Patch::Merge(&patch))
                .await
                .map_err(|e| failure(&e))?;
            return Ok(());
        }
        self.merge(name, &nested(&rule.replicas_path, json!(replicas)))
            .await
    }

    /// Sets the image of the first container of `obj` (as read), named
    /// `container`. A custom workload gets its whole container list back
    /// with that one image changed, in a merge patch that carries the
    /// object's resourceVersion: custom resources take no strategic merge
    /// patch, and a change made meanwhile is a conflict, never overwritten.
    pub(super) async fn set_image(
        &self,
        obj: &DynamicObject,
        container: &str,
        image: &str,
    ) -> Result<(), Failure> {
        let name = obj.metadata.name.as_deref().unwrap_or_default();
        let patch = match self.rule {
            None => {
                json!({"spec": {"template": {"spec": {"containers": [{"name": container, "image": image}]}}}})
            }
            Some(rule) => {
                let path = format!("{}/spec/containers", rule.template_path);
                let mut containers = obj.data.pointer(&path).cloned().unwrap_or_default();
                containers[0]["image"] = json!(image);
                let mut patch = nested(&path, containers);
                patch["metadata"] = json!({"resourceVersion": obj.metadata.resource_version});
                patch
            }
        };
        let kind = if self.rule.is_some() {
            Patch::Merge(&patch)
        } else {
            Patch::Strategic(&patch)
        };
        self.api
            .patch(name, &PatchParams::default(), &kind)
            .await
            .map(|_| ())
            .map_err(|e| failure(&e))
    }

    /// The pod template's first container's name, if any.
    pub(super) fn first_container<'o>(&self, obj: &'o DynamicObject) -> Option<&'o str> {
        let template = self
            .rule
            .map_or("/spec/template", |r| r.template_path.as_str());
        obj.data
            .pointer(&format!("{template}/spec/containers/0/name"))
            .and_then(Value::as_str)
    }

    /// The replica count `obj` asks for, if set.
    pub(super) fn replicas(&self, obj: &DynamicObject) -> Option<i32> {
        let path = self
            .rule
            .map_or("/spec/replicas", |r| r.replicas_path.as_str());
        obj.data
            .pointer(path)
            .and_then(Value::as_i64)
            .and_then(|r| i32::try_from(r).ok())
    }

    async fn merge(&self, name: &str, patch: &Value) -> Result<(), Failure> {
        self.api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|e| failure(&e))
    }
}

/// `value` at the JSON pointer `pointer`, as a merge patch: `/spec/replicas`
/// and 3 make `{"spec": {"replicas": 3}}`.
fn nested(pointer: &str, value: Value) -> Value {
    let tokens: Vec<&str> = pointer.split('/').skip(1).collect();
    tokens.into_iter().rev().fold(value, |inner, token| {
        let key = token.replace("~1", "/").replace("~0", "~");
        json!({ key: inner })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_become_merge_patches() {
        let cases = [
            ("/spec/replicas", json!({"spec": {"replicas": 3}})),
            (
                "/spec/scale/count",
                json!({"spec": {"scale": {"count": 3}}}),
            ),
            ("/spec/a~1b/c~0d", json!({"spec": {"a/b": {"c~d": 3}}})),
        ];
        for (pointer, want) in cases {
            assert_eq!(nested(pointer, json!(3)), want, "{pointer}");
        }
    }
}
