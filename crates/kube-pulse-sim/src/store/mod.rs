//! The object store of one simulated cluster: tables of JSON objects, one
//! monotonic resourceVersion, and a bounded event window per table (the
//! apiserver's watch cache, which it keeps per resource type) that watches
//! replay from and paged lists read snapshots from.
//!
//! All mutation happens under one lock; every committed change is appended to
//! its table's window and published on its table's broadcast channel, which
//! open watches of that table read. Busy pods therefore never expire a
//! Deployment watch, as on a real apiserver.
//!
//! Above the object rules (`object.rs`, `crd.rs`, `managed.rs`) and below
//! every handler and controller. This file holds the tables, the windows and
//! the commit; reads are in `read.rs`, writes in `write.rs`, and what a
//! CustomResourceDefinition write does to the catalogue in `crds.rs`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::object::is_terminating;
use super::resources::{Catalog, ResourceDef};
use super::status::{ApiError, ApiResult};

mod crds;
mod read;
mod write;

pub use read::{ListFrom, ListPage, WatchStart};
pub use write::{Deleted, Preconditions};

/// Type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One committed change, as kept in the window.
#[derive(Debug)]
pub struct StoredEvent {
    pub rv: u64,
    pub table: String,
    pub kind: EventType,
    /// The object after the change; for a delete, the last state with the
    /// delete's resourceVersion.
    pub object: Arc<Value>,
    /// The object before the change (None for ADDED).
    pub prev: Option<Arc<Value>>,
}

type Key = (String, String);
type Table = BTreeMap<Key, Arc<Value>>;

struct Inner {
    rv: u64,
    tables: HashMap<String, Table>,
    /// Event windows and watch channels, by table.
    windows: HashMap<String, Window>,
    /// The floor of a table without a window yet (raised by `expire_all`).
    floor: u64,
}

/// The recent events of one table, and its watchers' channel.
struct Window {
    events: VecDeque<Arc<StoredEvent>>,
    /// Events of this table with `rv <= floor` are gone from the window.
    floor: u64,
    channel: broadcast::Sender<Arc<StoredEvent>>,
}

impl Inner {
    /// The window of `table`, created (empty, with the store's floor) on first use.
    fn window(&mut self, table: &str, capacity: usize) -> &mut Window {
        let floor = self.floor;
        self.windows
            .entry(table.to_string())
            .or_insert_with(|| Window {
                events: VecDeque::new(),
                floor,
                channel: broadcast::channel(capacity).0,
            })
    }

    /// The oldest resourceVersion a watch or list of `table` may start from.
    fn floor_of(&self, table: &str) -> u64 {
        self.windows.get(table).map_or(self.floor, |w| w.floor)
    }
}

/// The store of one cluster.
pub struct Store {
    inner: Mutex<Inner>,
    /// Replaced (never mutated in place) when a CRD is written or deleted, under
    /// the `inner` lock; readers take a snapshot. Lock order: `inner`, then this.
    catalog: RwLock<Arc<Catalog>>,
    window_size: usize,
    /// Bumped when every open watch must end with 410 Expired.
    expiry: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("catalog", &self.catalog)
            .field("window_size", &self.window_size)
            .finish_non_exhaustive()
    }
}

fn ns_key(def: &ResourceDef, namespace: Option<&str>, name: &str) -> Key {
    let ns = if def.namespaced {
        namespace.unwrap_or("")
    } else {
        ""
    };
    (ns.to_string(), name.to_string())
}

impl Store {
    /// A store with the given event-window size (events kept per table for
    /// watch resume).
    pub fn new(catalog: Catalog, window_size: usize) -> Self {
        let (expiry, _) = tokio::sync::watch::channel(0);
        Self {
            inner: Mutex::new(Inner {
                rv: 1,
                tables: HashMap::new(),
                windows: HashMap::new(),
                floor: 1,
            }),
            catalog: RwLock::new(Arc::new(catalog)),
            window_size: window_size.max(1),
            expiry,
        }
    }

    /// How many events a watch may fall behind before it is ended.
    fn channel_capacity(&self) -> usize {
        self.window_size.clamp(64, 16_384)
    }

    /// The resources served now (a snapshot: CRDs change the catalogue).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().clone()
    }

    pub fn resource_version(&self) -> u64 {
        self.inner.lock().rv
    }

    /// Oldest resourceVersion a watch of `def` may still resume from.
    pub fn window_floor(&self, def: &ResourceDef) -> u64 {
        self.inner.lock().floor_of(&def.table_key())
    }

    /// Subscribes to "all watches expire" notifications.
    pub fn expiry_signal(&self) -> tokio::sync::watch::Receiver<u64> {
        self.expiry.subscribe()
    }

    /// Compacts the window to now: every open watch gets 410 Expired and any
    /// watch or paged list from an older resourceVersion does too.
    pub fn expire_all(&self) {
        let mut inner = self.inner.lock();
        let rv = inner.rv;
        inner.floor = rv;
        for window in inner.windows.values_mut() {
            window.floor = rv;
            window.events.clear();
        }
        drop(inner);
        self.expiry.send_modify(|n| *n += 1);
    }

    fn commit(
        &self,
        inner: &mut Inner,
        def: &ResourceDef,
        key: Key,
        kind: EventType,
        object: Option<Value>,
    ) -> Arc<Value> {
        inner.rv += 1;
        let rv = inner.rv;
        let table = inner.tables.entry(def.table_key()).or_default();
        let prev = table.get(&key).cloned();
        let mut object = match object {
            Some(o) => o,
            None => (**prev.as_ref().expect("delete of a stored object")).clone(),
        };
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let object = Arc::new(object);
        if kind == EventType::Deleted {
            table.remove(&key);
        } else {
            table.insert(key, object.clone());
        }
        let event = Arc::new(StoredEvent {
            rv,
            table: def.table_key(),
            kind,
            object: object.clone(),
            prev,
        });
        let (size, capacity) = (self.window_size, self.channel_capacity());
        let window = inner.window(&def.table_key(), capacity);
        window.events.push_back(event.clone());
        while window.events.len() > size {
            if let Some(old) = window.events.pop_front() {
                window.floor = old.rv;
            }
        }
        // No receivers is fine: nobody watches yet.
        let _ = window.channel.send(event);
        object
    }

    fn check_namespace_open(&self, inner: &Inner, namespace: &str) -> ApiResult<()> {
        let catalog = self.catalog();
        let ns_def = catalog.namespaces();
        let ns = inner
            .tables
            .get(&ns_def.table_key())
            .and_then(|t| t.get(&(String::new(), namespace.to_string())));
        match ns {
            None => Err(ApiError::not_found(ns_def, namespace)),
            Some(ns) if is_terminating(ns) => Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
            )),
            Some(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{name_of, resource_version_of};
    use crate::selector::Selection;

    pub(super) fn store(window: usize) -> Store {
        let store = Store::new(Catalog::new(vec![]), window);
        let ns = store.catalog().namespaces().clone();
        store
            .create(&ns, None, json!({"metadata": {"name": "shop"}}), false)
            .unwrap();
        store
    }

    pub(super) fn cm(store: &Store, name: &str, labels: Value) -> Arc<Value> {
        let def = store
            .catalog()
            .find("", "v1", "configmaps")
            .unwrap()
            .clone();
        store
            .create(
                &def,
                Some("shop"),
                json!({"metadata": {"name": name, "labels": labels}}),
                false,
            )
            .unwrap()
    }

    pub(super) fn names(items: &[Arc<Value>]) -> Vec<&str> {
        items.iter().map(|o| name_of(o)).collect()
    }

    #[test]
    fn window_expires_old_versions() {
        let s = store(3);
        let first = cm(&s, "a", json!({}));
        let first_rv: u64 = resource_version_of(&first).parse().unwrap();
        for name in ["b", "c", "d", "e"] {
            cm(&s, name, json!({}));
        }
        let def = s.catalog().find("", "v1", "configmaps").unwrap().clone();
        let err = s.watch(&def, Some(first_rv), false).err().unwrap();
        assert_eq!((err.code, err.reason), (410, "Expired"));
        let recent = s.resource_version() - 2;
        let start = s.watch(&def, Some(recent), false).ok().unwrap();
        assert_eq!(start.backlog.len(), 2);
        assert!(start.initial.is_empty());
        let paged = s.list(
            &def,
            None,
            &Selection::default(),
            ListFrom::Exact(first_rv),
            None,
            None,
        );
        assert_eq!(paged.unwrap_err().code, 410);
        s.expire_all();
        let err = s.watch(&def, Some(recent), false).err().unwrap();
        assert_eq!(err.code, 410);
        assert!(s.watch(&def, Some(s.resource_version()), false).is_ok());
    }

    /// The window is per table, like the apiserver's watch cache: a flood
    /// of ConfigMap events leaves a Namespace watch resumable, and a
    /// ConfigMap watch still expires.
    #[test]
    fn windows_are_kept_per_table() {
        let s = store(3);
        let ns = s.catalog().namespaces().clone();
        let cms = s.catalog().find("", "v1", "configmaps").unwrap().clone();
        let before = s.resource_version();
        for i in 0..10 {
            cm(&s, &format!("c{i}"), json!({}));
        }
        let start = s.watch(&ns, Some(before), false).ok().unwrap();
        assert!(start.backlog.is_empty() && start.initial.is_empty());
        assert_eq!(s.watch(&cms, Some(before), false).err().unwrap().code, 410);
        assert_eq!(s.window_floor(&ns), 1);
        assert!(s.window_floor(&cms) > before);
        // A Namespace list at that version is still exact.
        let page = s
            .list(
                &ns,
                None,
                &Selection::default(),
                ListFrom::Exact(before),
                None,
                None,
            )
            .unwrap();
        assert_eq!(page.items.len(), 1);
    }
}
