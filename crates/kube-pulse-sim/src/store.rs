//! The object store of one simulated cluster: tables of JSON objects, one
//! monotonic resourceVersion, and a bounded event window per table (the
//! apiserver's watch cache, which it keeps per resource type) that watches
//! replay from and paged lists read snapshots from.
//!
//! All mutation happens under one lock; every committed change is appended to
//! its table's window and published on its table's broadcast channel, which
//! open watches of that table read. Busy pods therefore never expire a
//! Deployment watch, as on a real apiserver.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use base64::Engine;
use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::crd;
use super::managed::{self, Writer};
use super::object::{
    self, UpdateScope, has_finalizers, is_terminating, name_of, resource_version_of, timestamp,
};
use super::resources::{Catalog, ResourceDef};
use super::selector::Selection;
use super::status::{ApiError, ApiResult};

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

/// Result of a delete.
#[derive(Debug)]
pub enum Deleted {
    /// The object is gone.
    Gone(Arc<Value>),
    /// Finalizers (or the namespace controller) still hold it; it is terminating.
    Terminating(Arc<Value>),
}

/// One page of a list.
#[derive(Debug)]
pub struct ListPage {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

/// Where a list reads from (the `resourceVersion` + `resourceVersionMatch` pair).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListFrom {
    /// The most recent state.
    Latest,
    /// Exactly the state at this resourceVersion (must still be in the window).
    Exact(u64),
}

/// What a new watch starts with.
pub struct WatchStart {
    /// Objects to send as synthetic ADDED events first.
    pub initial: Vec<Arc<Value>>,
    /// Window events after the requested resourceVersion, for this table.
    pub backlog: Vec<Arc<StoredEvent>>,
    pub receiver: broadcast::Receiver<Arc<StoredEvent>>,
    /// resourceVersion at the moment the watch started.
    pub resource_version: u64,
}

impl std::fmt::Debug for WatchStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStart")
            .field("initial", &self.initial.len())
            .field("backlog", &self.backlog.len())
            .field("resource_version", &self.resource_version)
            .finish_non_exhaustive()
    }
}

/// Preconditions of a delete (`DeleteOptions.preconditions`).
#[derive(Debug, Default, Clone)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
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

/// `left`: the matching items after `key` at `rv`, counted by the first page
/// (every page reads the same state, so later pages subtract instead of
/// walking the rest of the table again).
fn encode_continue(rv: u64, key: &Key, left: usize) -> String {
    let raw = json!({"rv": rv, "ns": key.0, "name": key.1, "left": left}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(token: &str) -> ApiResult<(u64, Key, Option<usize>)> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    let ns = v["ns"].as_str().ok_or_else(bad)?.to_string();
    let name = v["name"].as_str().ok_or_else(bad)?.to_string();
    let left = v["left"].as_u64().map(|l| l as usize);
    Ok((rv, (ns, name), left))
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

    /// For a CRD being written: checks it, sets the status its controllers
    /// would write, and returns the resources to serve (None when a built-in
    /// resource has its group and plural, so its names are not accepted).
    fn accept_crd(
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
    fn serve_crd(&self, crd: &Value, defs: Vec<ResourceDef>) {
        let (group, plural) = crd::group_plural(crd);
        let mut catalog = self.catalog.write();
        *catalog = Arc::new(catalog.with_custom(group, plural, defs));
    }

    /// Before a CRD's deletion is committed: deletes every object of its
    /// resource (watchers see them DELETED), then stops serving it.
    fn drop_crd(&self, inner: &mut Inner, crd: &Value) {
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

    pub fn get(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> ApiResult<Arc<Value>> {
        let inner = self.inner.lock();
        inner
            .tables
            .get(&def.table_key())
            .and_then(|t| t.get(&ns_key(def, namespace, name)))
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))
    }

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
            super::typed::check_update_precondition(def, name, &body)?;
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

    /// A table as it was at `rv` (undoing newer window events), or 410.
    fn table_at(&self, inner: &Inner, def: &ResourceDef, rv: u64) -> ApiResult<Table> {
        let mut table = inner
            .tables
            .get(&def.table_key())
            .cloned()
            .unwrap_or_default();
        if rv >= inner.rv {
            return Ok(table);
        }
        let table_key = def.table_key();
        let floor = inner.floor_of(&table_key);
        if rv < floor {
            return Err(ApiError::expired(format!(
                "too old resource version: {rv} ({})",
                floor + 1
            )));
        }
        let events = inner.windows.get(&table_key).map(|w| &w.events);
        for event in events.into_iter().flatten().rev().take_while(|e| e.rv > rv) {
            let key = (
                object::namespace_of(&event.object).to_string(),
                name_of(&event.object).to_string(),
            );
            match &event.prev {
                Some(prev) => table.insert(key, prev.clone()),
                None => table.remove(&key),
            };
        }
        Ok(table)
    }

    /// Lists a resource, optionally within a namespace, filtered and paged.
    pub fn list(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        selection: &Selection,
        from: ListFrom,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> ApiResult<ListPage> {
        let inner = self.inner.lock();
        let (rv, start, left) = match continue_token.filter(|t| !t.is_empty()) {
            Some(token) => {
                let (rv, key, left) = decode_continue(token)?;
                (rv, Some(key), left)
            }
            None => match from {
                ListFrom::Latest => (inner.rv, None, None),
                ListFrom::Exact(rv) if rv > inner.rv => {
                    return Err(ApiError::new(
                        504,
                        "Timeout",
                        format!("Too large resource version: {rv}, current: {}", inner.rv),
                    ));
                }
                ListFrom::Exact(rv) => (rv, None, None),
            },
        };
        // A page of the current state is read in place: cloning the table for
        // every page would make a paged list quadratic in the table's size.
        // Only a page of an older state rebuilds the table as it was.
        let empty = Table::new();
        let rebuilt;
        let table: &Table = if rv >= inner.rv {
            inner.tables.get(&def.table_key()).unwrap_or(&empty)
        } else {
            rebuilt = self.table_at(&inner, def, rv).map_err(|e| {
                if start.is_some() {
                    ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    )
                } else {
                    e
                }
            })?;
            &rebuilt
        };
        let ns_filter = namespace.filter(|_| def.namespaced);
        let after = match &start {
            Some(key) => Bound::Excluded(key),
            None => Bound::Unbounded,
        };
        let mut matching = table
            .range::<Key, _>((after, Bound::Unbounded))
            .filter(|((ns, _), _)| ns_filter.is_none_or(|want| want == ns))
            .filter(|(_, obj)| selection.matches(obj));
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut items = Vec::new();
        let mut last = None;
        for (key, obj) in matching.by_ref().take(limit) {
            items.push(Arc::clone(obj));
            last = Some(key);
        }
        // Matching items after this page (remainingItemCount): walked once,
        // by the first page; a walk per page made a paged list quadratic.
        let remaining = if matching.next().is_none() {
            0
        } else {
            match left {
                Some(left) => left.saturating_sub(items.len()).max(1),
                None => 1 + matching.count(),
            }
        };
        let continue_token = last
            .filter(|_| remaining > 0)
            .map(|key| encode_continue(rv, key, remaining));
        drop(inner);
        Ok(ListPage {
            items,
            resource_version: rv,
            continue_token,
            remaining: (remaining > 0).then_some(remaining),
        })
    }

    /// Starts a watch. `from`: None or Some(0) = current state as ADDED events
    /// then changes; Some(rv) = changes after `rv` (410 if it left the window).
    /// `send_initial` forces the initial ADDED events (streaming lists).
    pub fn watch(
        &self,
        def: &ResourceDef,
        from: Option<u64>,
        send_initial: bool,
    ) -> ApiResult<WatchStart> {
        let mut inner = self.inner.lock();
        let table_key = def.table_key();
        let capacity = self.channel_capacity();
        let receiver = inner.window(&table_key, capacity).channel.subscribe();
        let floor = inner.floor_of(&table_key);
        let table = inner.tables.get(&table_key);
        let current: Vec<Arc<Value>> = table
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default();
        let (initial, backlog) = match from {
            None | Some(0) => (current, Vec::new()),
            Some(rv) if rv < floor => {
                return Err(ApiError::expired(format!(
                    "too old resource version: {rv} ({})",
                    floor + 1
                )));
            }
            Some(rv) if rv > inner.rv => {
                return Err(ApiError::new(
                    504,
                    "Timeout",
                    format!("Too large resource version: {rv}, current: {}", inner.rv),
                ));
            }
            Some(rv) => {
                let backlog = inner.windows[&table_key]
                    .events
                    .iter()
                    .filter(|e| e.rv > rv)
                    .cloned()
                    .collect();
                if send_initial {
                    (current, Vec::new())
                } else {
                    (Vec::new(), backlog)
                }
            }
        };
        Ok(WatchStart {
            initial,
            backlog,
            receiver,
            resource_version: inner.rv,
        })
    }

    /// Every object of a table (for the controllers).
    pub fn snapshot(&self, def: &ResourceDef) -> Vec<Arc<Value>> {
        let inner = self.inner.lock();
        inner
            .tables
            .get(&def.table_key())
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::LabelSelector;

    fn store(window: usize) -> Store {
        let store = Store::new(Catalog::new(vec![]), window);
        let ns = store.catalog().namespaces().clone();
        store
            .create(&ns, None, json!({"metadata": {"name": "shop"}}), false)
            .unwrap();
        store
    }

    fn cm(store: &Store, name: &str, labels: Value) -> Arc<Value> {
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

    fn names(items: &[Arc<Value>]) -> Vec<&str> {
        items.iter().map(|o| name_of(o)).collect()
    }

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
    fn paging_is_consistent_at_the_first_page_version() {
        let s = store(100);
        for name in ["a", "b", "c", "d", "e"] {
            cm(&s, name, json!({"app": "x"}));
        }
        let def = s.catalog().find("", "v1", "configmaps").unwrap().clone();
        let sel = Selection::default();
        let p1 = s
            .list(&def, Some("shop"), &sel, ListFrom::Latest, Some(2), None)
            .unwrap();
        assert_eq!(names(&p1.items), ["a", "b"]);
        assert_eq!(p1.remaining, Some(3));
        // Changes after the first page do not show up in later pages.
        cm(&s, "bb", json!({}));
        s.delete(&def, Some("shop"), "e", &Preconditions::default(), false)
            .unwrap();
        let p2 = s
            .list(
                &def,
                Some("shop"),
                &sel,
                ListFrom::Latest,
                Some(2),
                p1.continue_token.as_deref(),
            )
            .unwrap();
        assert_eq!(names(&p2.items), ["c", "d"]);
        assert_eq!(p2.resource_version, p1.resource_version);
        // Counted from the first page's state, as the items are.
        assert_eq!(p2.remaining, Some(1));
        let p3 = s
            .list(
                &def,
                Some("shop"),
                &sel,
                ListFrom::Latest,
                Some(2),
                p2.continue_token.as_deref(),
            )
            .unwrap();
        assert_eq!(names(&p3.items), ["e"]);
        assert_eq!(p3.remaining, None);
        assert!(p3.continue_token.is_none());
        let now = s
            .list(&def, None, &sel, ListFrom::Latest, None, None)
            .unwrap();
        assert_eq!(names(&now.items), ["a", "b", "bb", "c", "d"]);
        assert!(
            s.list(&def, None, &sel, ListFrom::Latest, None, Some("%%%"))
                .is_err()
        );
    }

    #[test]
    fn list_filters_by_label() {
        let s = store(100);
        cm(&s, "a", json!({"app": "web"}));
        cm(&s, "b", json!({"app": "db"}));
        let def = s.catalog().find("", "v1", "configmaps").unwrap().clone();
        let sel = Selection {
            labels: LabelSelector::parse("app=web").unwrap(),
            ..Default::default()
        };
        let page = s
            .list(&def, None, &sel, ListFrom::Latest, None, None)
            .unwrap();
        assert_eq!(names(&page.items), ["a"]);
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
