//! `core/v1` Events as the simulated controllers, scheduler and kubelet
//! write them: reason, message, type, source, the involved object, and a
//! count that grows (with `lastTimestamp`) when the same event repeats
//! instead of a new object, as the client-go event recorder aggregates.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::object::{UpdateScope, name_of, namespace_of, timestamp};
use super::store::Store;

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// Who reports an event (`source.component`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Kubelet,
    Scheduler,
    DeploymentController,
    StatefulSetController,
}

impl Source {
    fn component(self) -> &'static str {
        match self {
            Source::Kubelet => "kubelet",
            Source::Scheduler => "default-scheduler",
            Source::DeploymentController => "deployment-controller",
            Source::StatefulSetController => "statefulset-controller",
        }
    }
}

/// One event to record.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    /// The object it is about (a Pod, Deployment, …).
    pub object: &'a Value,
    pub kind: EventType,
    pub reason: &'a str,
    pub message: String,
    pub source: Source,
}

/// The event object for `event`, first seen at `now`.
pub fn object(event: &Event<'_>, name: &str, now: DateTime<Utc>) -> Value {
    let at = timestamp(now);
    let involved = event.object;
    let mut source = json!({"component": event.source.component()});
    if event.source == Source::Kubelet
        && let Some(node) = involved.pointer("/spec/nodeName")
    {
        source["host"] = node.clone();
    }
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace_of(involved)},
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "namespace": namespace_of(involved),
            "name": name_of(involved),
            "uid": involved["metadata"]["uid"],
        },
        "reason": event.reason,
        "message": event.message,
        "type": match event.kind {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        },
        "source": source,
        "reportingComponent": event.source.component(),
        "reportingInstance": "",
        "count": 1,
        "firstTimestamp": at,
        "lastTimestamp": at,
    })
}

/// Writes events to a store, aggregating repeats into one object.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Event name by (involved uid, reason, message).
    seen: HashMap<(String, String, String), String>,
}

impl Recorder {
    /// Records `event` at `now`: a repeat of an event still stored bumps
    /// its `count` and `lastTimestamp`; anything else creates one.
    pub fn record(&mut self, store: &Store, event: Event<'_>, now: DateTime<Utc>) {
        let Some(def) = store.catalog().find("", "v1", "events").cloned() else {
            return;
        };
        let uid = event.object["metadata"]["uid"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let key = (uid, event.reason.to_string(), event.message.clone());
        let namespace = namespace_of(event.object).to_string();
        if let Some(name) = self.seen.get(&key) {
            let bumped = store.mutate(
                &def,
                Some(&namespace),
                name,
                UpdateScope::Main,
                false,
                |current| {
                    let mut next = current.clone();
                    next["count"] = json!(current["count"].as_u64().unwrap_or(1) + 1);
                    next["lastTimestamp"] = json!(timestamp(now));
                    Ok(next)
                },
            );
            if bumped.is_ok() {
                return;
            }
        }
        let name = event_name(event.object, &key, now);
        let created = store.create(&def, Some(&namespace), object(&event, &name, now), false);
        if created.is_ok() {
            if self.seen.len() > 10_000 {
                self.seen.clear();
            }
            self.seen.insert(key, name);
        }
    }
}

/// `{object}.{16 hex digits}`, as the recorder names events.
fn event_name(object: &Value, key: &(String, String, String), now: DateTime<Utc>) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (key, now.timestamp_nanos_opt()).hash(&mut hasher);
    format!("{}.{:016x}", name_of(object), hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;
    use crate::selector::Selection;
    use crate::store::ListFrom;

    #[test]
    fn repeats_are_counted_on_one_object() {
        let store = Store::new(Catalog::new(vec![]), 100);
        let ns = store.catalog().namespaces().clone();
        store
            .create(&ns, None, json!({"metadata": {"name": "shop"}}), false)
            .unwrap();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "p-1"},
            "spec": {"nodeName": "sim-node-2"}});
        let mut recorder = Recorder::default();
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let backoff = || Event {
            object: &pod,
            kind: EventType::Warning,
            reason: "BackOff",
            message: "Back-off restarting failed container app in pod web-1_shop(p-1)".into(),
            source: Source::Kubelet,
        };
        recorder.record(&store, backoff(), now);
        recorder.record(&store, backoff(), now + chrono::Duration::seconds(20));
        recorder.record(
            &store,
            Event {
                reason: "Started",
                kind: EventType::Normal,
                message: "Started container app".into(),
                ..backoff()
            },
            now,
        );
        let def = store.catalog().find("", "v1", "events").unwrap().clone();
        let page = store
            .list(
                &def,
                Some("shop"),
                &Selection::default(),
                ListFrom::Latest,
                None,
                None,
            )
            .unwrap();
        assert_eq!(page.items.len(), 2);
        let backoff = page
            .items
            .iter()
            .find(|e| e["reason"] == "BackOff")
            .unwrap();
        assert_eq!(backoff["count"], 2);
        assert_eq!(backoff["type"], "Warning");
        assert_eq!(backoff["involvedObject"]["name"], "web-1");
        assert_eq!(backoff["source"]["host"], "sim-node-2");
        assert_eq!(backoff["firstTimestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(backoff["lastTimestamp"], "2023-11-14T22:13:40Z");
    }
}
