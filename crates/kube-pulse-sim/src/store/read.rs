//! Reads from the store: get, paged lists at one consistent
//! resourceVersion (continue tokens), watches that start from the window or
//! from now, and snapshots for the controllers.

use std::ops::Bound;
use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::{Inner, Key, Store, StoredEvent, Table, ns_key};
use crate::object::{self, name_of};
use crate::resources::ResourceDef;
use crate::selector::Selection;
use crate::status::{ApiError, ApiResult};

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
    use crate::store::Preconditions;
    use crate::store::tests::{cm, names, store};

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
}
