//! Custom resources in the store: a CustomResourceDefinition being written
//! is checked and given the status its controllers would write (`crd.rs`),
//! and its resources are served; one deleted takes its objects with it.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use super::{EventType, Inner, Key, Store};
use crate::crd;
use crate::object::timestamp;
use crate::resources::ResourceDef;
use crate::status::ApiResult;

impl Store {
    /// For a CRD being written: checks it, sets the status its controllers
    /// would write, and returns the resources to serve (None when a built-in
    /// resource has its group and plural, so its names are not accepted).
    pub(super) fn accept_crd(
        &self,
        def: &ResourceDef,
        crd: &mut Value,
        previous: Option<&Value>,
    ) -> ApiResult<Option<Vec<ResourceDef>>> {
        let defs = crd::served(def, crd)?;
        let (group, plural) = crd::group_plural(crd);
        let conflict = self.catalog().is_builtin(group, plural);
        let now = timestamp(chrono::Utc::now());
        crd["status"] = crd::status(crd, previous.map(|p| &p["status"]), conflict, &now);
        Ok((!conflict).then_some(defs))
    }

    /// Serves the resources of a committed CRD (replacing its earlier versions).
    pub(super) fn serve_crd(&self, crd: &Value, defs: Vec<ResourceDef>) {
        let (group, plural) = crd::group_plural(crd);
        let mut catalog = self.catalog.write();
        *catalog = Arc::new(catalog.with_custom(group, plural, defs));
    }

    /// Before a CRD's deletion is committed: deletes every object of its
    /// resource (watchers see them DELETED), then stops serving it.
    pub(super) fn drop_crd(&self, inner: &mut Inner, crd: &Value) {
        let (group, plural) = crd::group_plural(crd);
        let catalog = self.catalog();
        if catalog.is_builtin(group, plural) {
            return;
        }
        let Some(served) = catalog
            .all()
            .iter()
            .find(|d| d.group == group && d.plural == plural)
            .cloned()
        else {
            return;
        };
        let keys: Vec<Key> = inner
            .tables
            .get(&served.table_key())
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        for key in keys {
            self.commit(inner, &served, key, EventType::Deleted, None);
        }
        inner.tables.remove(&served.table_key());
        // Replacing the table's channel ends its open watches (after the
        // DELETED events already sent), as the apiserver ends them.
        let capacity = self.channel_capacity();
        if let Some(window) = inner.windows.get_mut(&served.table_key()) {
            window.channel = broadcast::channel(capacity).0;
        }
        self.serve_crd(crd, Vec::new());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::Preconditions;
    use crate::store::tests::store;

    #[test]
    fn crds_add_and_remove_resources() {
        let s = store(100);
        let crds = s
            .catalog()
            .find(crd::GROUP, "v1", "customresourcedefinitions")
            .unwrap()
            .clone();
        let definition = |group: &str, plural: &str| {
            json!({
                "metadata": {"name": format!("{plural}.{group}")},
                "spec": {
                    "group": group,
                    "scope": "Namespaced",
                    "names": {"plural": plural, "kind": "Thing"},
                    "versions": [{"name": "v1", "served": true, "storage": true}],
                },
            })
        };
        let created = s
            .create(
                &crds,
                None,
                definition("pulse.example.com", "things"),
                false,
            )
            .unwrap();
        assert_eq!(created["status"]["conditions"][1]["status"], "True");
        let things = s
            .catalog()
            .find("pulse.example.com", "v1", "things")
            .unwrap()
            .clone();
        s.create(
            &things,
            Some("shop"),
            json!({"metadata": {"name": "a"}}),
            false,
        )
        .unwrap();
        // A dry run serves nothing; a CRD over a built-in is not accepted.
        s.create(&crds, None, definition("pulse.example.com", "others"), true)
            .unwrap();
        assert!(
            s.catalog()
                .find("pulse.example.com", "v1", "others")
                .is_none()
        );
        let taken = s
            .create(
                &crds,
                None,
                definition(crd::GROUP, "customresourcedefinitions"),
                false,
            )
            .unwrap();
        assert_eq!(taken["status"]["conditions"][0]["reason"], "PluralConflict");
        assert!(
            s.catalog()
                .find(crd::GROUP, "v1", "customresourcedefinitions")
                .is_some()
        );

        let before = s.catalog().all().len();
        s.delete(
            &crds,
            None,
            "things.pulse.example.com",
            &Preconditions::default(),
            false,
        )
        .unwrap();
        assert_eq!(s.catalog().all().len(), before - 1);
        assert!(
            s.catalog()
                .find("pulse.example.com", "v1", "things")
                .is_none()
        );
        assert_eq!(s.get(&things, Some("shop"), "a").unwrap_err().code, 404);
        // The object went first, then its CRD, each with its own event.
        let start = s
            .watch(&things, Some(s.resource_version() - 2), false)
            .ok()
            .unwrap();
        assert_eq!(start.backlog.len(), 1);
        assert_eq!(start.backlog[0].kind, EventType::Deleted);
    }
}
