//! Writes to the store: create, update, mutate (read, change, write under
//! the lock), delete with finalizers and preconditions, and the namespace
//! controller's cascade. Each applies the object rules (`object.rs`),
//! records the writer (`managed.rs`) and commits through `mod.rs`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{EventType, Key, Store, ns_key};
use crate::crd;
use crate::managed::{self, Writer};
use crate::object::{
    self, UpdateScope, has_finalizers, is_terminating, name_of, resource_version_of, timestamp,
};
use crate::resources::ResourceDef;
use crate::status::{ApiError, ApiResult};
use crate::typed;

/// Result of a delete.
#[derive(Debug)]
pub enum Deleted {
    /// The object is gone.
    Gone(Arc<Value>),
    /// Finalizers (or the namespace controller) still hold it; it is terminating.
    Terminating(Arc<Value>),
}

/// Preconditions of a delete (`DeleteOptions.preconditions`).
#[derive(Debug, Default, Clone)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl Store {
    /// Creates an object; `dry_run` validates without storing.
    pub fn create(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        body: Value,
        dry_run: bool,
    ) -> ApiResult<Arc<Value>> {
        self.create_by(def, namespace, body, dry_run, None)
    }

    /// [`Store::create`] on behalf of `writer`, recorded in `managedFields`.
    pub fn create_by(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        body: Value,
        dry_run: bool,
        writer: Option<&Writer>,
    ) -> ApiResult<Arc<Value>> {
        let now = chrono::Utc::now();
        let mut obj = object::prepare_create(def, namespace, body, now)?;
        if let Some(writer) = writer {
            managed::record(&def.api_version(), None, &mut obj, writer, &timestamp(now));
        }
        let name = name_of(&obj).to_string();
        let mut inner = self.inner.lock();
        // The resource's CRD may have been deleted since the path was resolved.
        if self
            .catalog()
            .find(&def.group, &def.version, &def.plural)
            .is_none()
        {
            return Err(ApiError::new(
                404,
                "NotFound",
                format!(
                    "the server could not find the requested resource ({})",
                    def.group_resource()
                ),
            ));
        }
        let custom = if crd::is_crd(def) {
            self.accept_crd(def, &mut obj, None)?
        } else {
            None
        };
        if let Some(ns) = namespace.filter(|_| def.namespaced) {
            self.check_namespace_open(&inner, ns)?;
        }
        let key = ns_key(def, namespace, &name);
        if inner
            .tables
            .get(&def.table_key())
            .is_some_and(|t| t.contains_key(&key))
        {
            return Err(ApiError::already_exists(def, &name));
        }
        if dry_run {
            return Ok(Arc::new(obj));
        }
        let created = self.commit(&mut inner, def, key, EventType::Added, Some(obj));
        if let Some(defs) = custom {
            self.serve_crd(&created, defs);
        }
        drop(inner);
        // Karpor #831 writes status right after it creates a Cluster.
        if let Some(status) = typed::status_on_create(def, &created, &timestamp(now)) {
            let karpor = Writer {
                manager: typed::KARPOR_MANAGER.to_string(),
                operation: managed::Operation::Update,
                subresource: Some("status"),
            };
            return self.mutate_by(
                def,
                namespace,
                &name,
                UpdateScope::Status,
                false,
                Some(&karpor),
                |current| {
                    let mut next = current.clone();
                    next["status"] = status;
                    Ok(next)
                },
            );
        }
        Ok(created)
    }

    /// Replaces an object (PUT). A `resourceVersion` in the body must match
    /// (and a typed resource needs one).
    pub fn update(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        scope: UpdateScope,
        dry_run: bool,
    ) -> ApiResult<Arc<Value>> {
        self.update_by(def, namespace, name, body, scope, dry_run, None)
    }

    /// [`Store::update`] on behalf of `writer`, recorded in `managedFields`.
    #[allow(clippy::too_many_arguments)]
    pub fn update_by(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        scope: UpdateScope,
        dry_run: bool,
        writer: Option<&Writer>,
    ) -> ApiResult<Arc<Value>> {
        self.mutate_by(def, namespace, name, scope, dry_run, writer, |current| {
            crate::typed::check_update_precondition(def, name, &body)?;
            let wanted_rv = resource_version_of(&body);
            if !wanted_rv.is_empty() && wanted_rv != resource_version_of(current) {
                return Err(ApiError::conflict(def, name));
            }
            Ok(body)
        })
    }

    /// Read-modify-write under the lock: `change` gets the current object and
    /// returns the requested new one, which then goes through the update rules.
    pub fn mutate(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        scope: UpdateScope,
        dry_run: bool,
        change: impl FnOnce(&Value) -> ApiResult<Value>,
    ) -> ApiResult<Arc<Value>> {
        self.mutate_by(def, namespace, name, scope, dry_run, None, change)
    }

    /// Writes `status` as the object's status, as its controller does
    /// through the `status` subresource.
    pub fn set_status(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        status: Value,
    ) -> ApiResult<Arc<Value>> {
        self.mutate(
            def,
            namespace,
            name,
            UpdateScope::Status,
            false,
            |current| {
                let mut next = current.clone();
                next["status"] = status;
                Ok(next)
            },
        )
    }

    /// [`Store::mutate`] on behalf of `writer`: a change is recorded in
    /// `managedFields`.
    #[allow(clippy::too_many_arguments)]
    pub fn mutate_by(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        scope: UpdateScope,
        dry_run: bool,
        writer: Option<&Writer>,
        change: impl FnOnce(&Value) -> ApiResult<Value>,
    ) -> ApiResult<Arc<Value>> {
        let mut inner = self.inner.lock();
        let key = ns_key(def, namespace, name);
        let current = inner
            .tables
            .get(&def.table_key())
            .and_then(|t| t.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))?;
        let requested = change(&current)?;
        let mut next = object::prepare_update(def, &current, requested, scope)?;
        let custom = if crd::is_crd(def) {
            crd::check_update(def, &current, &next)?;
            self.accept_crd(def, &mut next, Some(&current))?
        } else {
            None
        };
        next["metadata"]["resourceVersion"] = json!(resource_version_of(&current));
        if object::same_content(&current, &next) {
            return Ok(current);
        }
        if let Some(writer) = writer {
            let now = timestamp(chrono::Utc::now());
            managed::record(&def.api_version(), Some(&current), &mut next, writer, &now);
        }
        if dry_run {
            return Ok(Arc::new(next));
        }
        if is_terminating(&next) && !has_finalizers(&next) && def.kind != "Namespace" {
            if crd::is_crd(def) {
                self.drop_crd(&mut inner, &current);
            }
            return Ok(self.commit(&mut inner, def, key, EventType::Deleted, Some(next)));
        }
        let updated = self.commit(&mut inner, def, key, EventType::Modified, Some(next));
        if let Some(defs) = custom.filter(|_| !is_terminating(&updated)) {
            self.serve_crd(&updated, defs);
        }
        Ok(updated)
    }

    /// Deletes an object. Namespaces and objects with finalizers become
    /// terminating first; the namespace controller (converger) finishes them.
    pub fn delete(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        pre: &Preconditions,
        dry_run: bool,
    ) -> ApiResult<Deleted> {
        let mut inner = self.inner.lock();
        let key = ns_key(def, namespace, name);
        let current = inner
            .tables
            .get(&def.table_key())
            .and_then(|t| t.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))?;
        if let Some(uid) = &pre.uid {
            let actual = current["metadata"]["uid"].as_str().unwrap_or("");
            if uid != actual {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                    ),
                ));
            }
        }
        if let Some(rv) = &pre.resource_version {
            let actual = resource_version_of(&current);
            if rv != actual {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
                    ),
                ));
            }
        }
        if dry_run {
            return Ok(Deleted::Gone(current));
        }
        let graceful = def.kind == "Namespace" || has_finalizers(&current);
        if !graceful {
            if crd::is_crd(def) {
                self.drop_crd(&mut inner, &current);
            }
            let gone = self.commit(&mut inner, def, key, EventType::Deleted, None);
            return Ok(Deleted::Gone(gone));
        }
        if is_terminating(&current) {
            return Ok(Deleted::Terminating(current));
        }
        let mut next = (*current).clone();
        next["metadata"]["deletionTimestamp"] = json!(timestamp(chrono::Utc::now()));
        next["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        if def.kind == "Namespace" {
            next["status"] = json!({"phase": "Terminating"});
        }
        let updated = self.commit(&mut inner, def, key, EventType::Modified, Some(next));
        Ok(Deleted::Terminating(updated))
    }

    /// Removes what is left of a terminating namespace: its objects first, then
    /// the namespace itself. Returns how many objects it deleted.
    pub fn finalize_namespace(&self, namespace: &str) -> usize {
        let mut inner = self.inner.lock();
        let catalog = self.catalog();
        let ns_def = catalog.namespaces().clone();
        let ns_key_ = (String::new(), namespace.to_string());
        let terminating = inner
            .tables
            .get(&ns_def.table_key())
            .and_then(|t| t.get(&ns_key_))
            .is_some_and(|ns| is_terminating(ns));
        if !terminating {
            return 0;
        }
        let mut removed = 0;
        for def in catalog.namespaced_tables() {
            let keys: Vec<Key> = inner
                .tables
                .get(&def.table_key())
                .map(|t| {
                    t.keys()
                        .filter(|(ns, _)| ns == namespace)
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            for key in keys {
                self.commit(&mut inner, def, key, EventType::Deleted, None);
                removed += 1;
            }
        }
        self.commit(&mut inner, &ns_def, ns_key_, EventType::Deleted, None);
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{cm, store};

    #[test]
    fn resource_versions_are_monotonic_and_noop_updates_keep_them() {
        let s = store(100);
        let a = cm(&s, "a", json!({}));
        let b = cm(&s, "b", json!({}));
        let (ra, rb): (u64, u64) = (
            resource_version_of(&a).parse().unwrap(),
            resource_version_of(&b).parse().unwrap(),
        );
        assert!(rb > ra);
        let def = s.catalog().find("", "v1", "configmaps").unwrap().clone();
        let same = s
            .update(
                &def,
                Some("shop"),
                "a",
                (*a).clone(),
                UpdateScope::Main,
                false,
            )
            .unwrap();
        assert_eq!(resource_version_of(&same), resource_version_of(&a));
        let stale = s.update(
            &def,
            Some("shop"),
            "a",
            json!({"metadata": {"name": "a", "resourceVersion": "1"}, "data": {"k": "v"}}),
            UpdateScope::Main,
            false,
        );
        assert_eq!(stale.unwrap_err().reason, "Conflict");
    }

    #[test]
    fn namespaces_terminate_then_cascade() {
        let s = store(100);
        cm(&s, "a", json!({}));
        let ns = s.catalog().namespaces().clone();
        let out = s
            .delete(&ns, None, "shop", &Preconditions::default(), false)
            .unwrap();
        let Deleted::Terminating(obj) = out else {
            panic!("namespace should terminate first")
        };
        assert_eq!(obj["status"]["phase"], "Terminating");
        let def = s.catalog().find("", "v1", "configmaps").unwrap().clone();
        let err = s
            .create(
                &def,
                Some("shop"),
                json!({"metadata": {"name": "z"}}),
                false,
            )
            .unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(s.finalize_namespace("shop"), 1);
        assert_eq!(s.get(&ns, None, "shop").unwrap_err().code, 404);
        let err = s
            .create(
                &def,
                Some("shop"),
                json!({"metadata": {"name": "z"}}),
                false,
            )
            .unwrap_err();
        assert_eq!(err.code, 404);
    }

    #[test]
    fn finalizers_hold_deletes() {
        let s = store(100);
        let def = s.catalog().find("", "v1", "configmaps").unwrap().clone();
        s.create(
            &def,
            Some("shop"),
            json!({"metadata": {"name": "f", "finalizers": ["x/y"]}}),
            false,
        )
        .unwrap();
        let pre = Preconditions {
            uid: Some("nope".into()),
            ..Default::default()
        };
        assert_eq!(
            s.delete(&def, Some("shop"), "f", &pre, false)
                .unwrap_err()
                .code,
            409
        );
        assert!(matches!(
            s.delete(&def, Some("shop"), "f", &Preconditions::default(), false)
                .unwrap(),
            Deleted::Terminating(_)
        ));
        let current = s.get(&def, Some("shop"), "f").unwrap();
        let mut cleared = (*current).clone();
        cleared["metadata"]["finalizers"] = json!([]);
        s.update(&def, Some("shop"), "f", cleared, UpdateScope::Main, false)
            .unwrap();
        assert_eq!(s.get(&def, Some("shop"), "f").unwrap_err().code, 404);
    }
}
