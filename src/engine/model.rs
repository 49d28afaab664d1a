//! A member's model (`observations → [model] → status machines`): what
//! the engine knows of one member cluster (its status, sync states,
//! workloads, namespaces, apps, tasks, pods and warning events), which the
//! status machines read to make its documents.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::status::app::{ActiveTask, AppStatus, Workload};
use crate::status::capacity::{NodeFacts, PodFigures};
use crate::status::cluster::ClusterStatus;
use crate::status::labels::Labels;
use crate::status::pods::{EventKey, PodState, Warning};
use crate::status::sync::{Gvr, SyncStatus};

pub(super) type WorkloadKey = (&'static str, String, String);

/// Warning events kept per member at most (one per event object; the
/// oldest by `lastSeen` go first). Events of deleted pods and workloads
/// are dropped at once, so this only bounds events of objects never seen.
pub(super) const MAX_WARNINGS: usize = 10_000;

use super::by_label::ByLabel;
pub(super) use super::pod_index::{PodIndex, PodKey, pod_key};

pub(super) struct ClusterModel {
    pub(super) status: ClusterStatus,
    /// The number of the cluster's last transition already logged.
    pub(super) logged: u64,
    pub(super) syncs: BTreeMap<Gvr, SyncStatus>,
    pub(super) workloads: Workloads,
    /// None until the first namespace list completed.
    pub(super) namespaces: Option<BTreeSet<String>>,
    pub(super) apps: BTreeMap<(String, String), AppStatus>,
    /// Active tasks by (namespace, app): the apps' transitional slots.
    pub(super) tasks: HashMap<(String, String), ActiveTask>,
    /// Metric series of this cluster, removed with it (bounded: resources x reasons).
    pub(super) series: ClusterSeries,
    /// None until the first pod list completed (and while the pod watch is off).
    pub(super) pods: Option<PodIndex>,
    /// The exact pod figures of `pods`, kept as pods come and go.
    pub(super) pod_figures: PodFigures,
    /// None until the first node list completed.
    pub(super) nodes: Option<HashMap<Box<str>, NodeFacts>>,
    /// Warning events about pods and workloads, by event key; at most [`MAX_WARNINGS`].
    pub(super) warnings: BTreeMap<EventKey, Warning>,
    /// False while on-demand pod and event watches are stopped
    /// (`podWatch.onDemand`): the app documents say so.
    pub(super) pods_watched: bool,
}

impl ClusterModel {
    /// The apps whose workloads select `pod` (usually one).
    pub(super) fn apps_of_pod(
        &self,
        namespace: &str,
        pod: &PodState,
    ) -> BTreeSet<(String, String)> {
        self.workloads
            .selecting(namespace, &pod.labels)
            .map(|w| (w.namespace.clone(), w.app.clone()))
            .collect()
    }

    /// The apps a warning is about: its workload's, or its pod's.
    pub(super) fn apps_of_warning(&self, w: &Warning) -> BTreeSet<(String, String)> {
        if w.kind == "Pod" {
            self.pods
                .as_ref()
                .and_then(|p| p.get(&w.namespace, &w.name))
                .map(|pod| self.apps_of_pod(&w.namespace, pod))
                .unwrap_or_default()
        } else {
            self.workloads
                .in_namespace(&w.namespace)
                .filter(|x| x.kind == w.kind && x.name == w.name)
                .map(|x| (x.namespace.clone(), x.app.clone()))
                .collect()
        }
    }

    /// Drops the warnings about one object (it is gone).
    pub(super) fn forget_warnings(&mut self, kind: &str, namespace: &str, name: &str) {
        self.warnings
            .retain(|_, w| !(w.kind == kind && w.namespace == namespace && w.name == name));
    }

    /// Keeps at most [`MAX_WARNINGS`], dropping the oldest.
    pub(super) fn cap_warnings(&mut self) {
        while self.warnings.len() > MAX_WARNINGS {
            let oldest = self
                .warnings
                .iter()
                .min_by_key(|(_, w)| w.last_seen)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(key) => self.warnings.remove(&key),
                None => break,
            };
        }
    }
}

/// The watch metric series one cluster created (prometheus-client cannot
/// list a family's series, so the engine remembers them to remove them).
#[derive(Default)]
pub(super) struct ClusterSeries {
    pub(super) lists: BTreeSet<(String, String)>,
    pub(super) errors: BTreeSet<(String, String, String)>,
}

/// A member's workloads, by key, by app and by their selector's first
/// label: an app's workloads (a namespace's, a pod's) are read without
/// going through the member's others, so that recomputing one app costs
/// the same on a member of ten apps and on one of 100 000.
#[derive(Debug, Default)]
pub(super) struct Workloads {
    by_key: HashMap<WorkloadKey, Workload>,
    /// The keys of each (namespace, app)'s workloads, sorted: a namespace's
    /// apps are one range.
    by_app: BTreeMap<(String, String), BTreeSet<WorkloadKey>>,
    /// The keys of each namespace's workloads that have a selector (an
    /// empty one selects nothing), by their selector's first label: the
    /// workloads that may select a pod are found from the pod's own labels.
    by_first_label: HashMap<String, ByLabel<WorkloadKey>>,
}

impl Workloads {
    /// Holds `workload` under `key`; the workload it replaces, if any.
    pub(super) fn insert(&mut self, key: WorkloadKey, workload: Workload) -> Option<Workload> {
        // A new version of a workload in the same app with the same first
        // selector label (a status change, nearly always) stays where the
        // indexes hold it: only its value changes.
        if let Some(held) = self.by_key.get_mut(&key)
            && held.namespace == workload.namespace
            && held.app == workload.app
            && held.selector.iter().next() == workload.selector.iter().next()
        {
            return Some(std::mem::replace(held, workload));
        }
        let old = self.remove(&key);
        self.by_app
            .entry((workload.namespace.clone(), workload.app.clone()))
            .or_default()
            .insert(key.clone());
        if let Some((label, value)) = workload.selector.iter().next() {
            self.by_first_label
                .entry(workload.namespace.clone())
                .or_default()
                .add(label, value, key.clone());
        }
        self.by_key.insert(key, workload);
        old
    }

    /// Drops the workload under `key`.
    pub(super) fn remove(&mut self, key: &WorkloadKey) -> Option<Workload> {
        let old = self.by_key.remove(key)?;
        let app = (old.namespace.clone(), old.app.clone());
        if let Some(keys) = self.by_app.get_mut(&app) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_app.remove(&app);
            }
        }
        if let Some((label, value)) = old.selector.iter().next()
            && let Some(index) = self.by_first_label.get_mut(&old.namespace)
        {
            index.remove(label, value, key);
            if index.is_empty() {
                self.by_first_label.remove(&old.namespace);
            }
        }
        Some(old)
    }

    /// Drops every workload of `kind` (before a relist of that kind).
    pub(super) fn remove_kind(&mut self, kind: &str) {
        let keys: Vec<WorkloadKey> = self
            .by_key
            .keys()
            .filter(|(k, _, _)| *k == kind)
            .cloned()
            .collect();
        for key in keys {
            self.remove(&key);
        }
    }

    /// The workloads of `namespace` whose selectors select a pod with
    /// `labels` (`matchLabels`; each at most once but for hash collisions).
    pub(super) fn selecting<'a>(
        &'a self,
        namespace: &str,
        labels: &'a Labels,
    ) -> impl Iterator<Item = &'a Workload> + 'a {
        let index = self.by_first_label.get(namespace);
        index
            .into_iter()
            .flat_map(move |index| labels.pairs().flat_map(|(k, v)| index.get(k, v)))
            .filter_map(|key| self.by_key.get(key))
            .filter(move |w| labels.has_all(&w.selector))
    }

    /// The workloads of app `app` in `namespace`, by kind and name.
    pub(super) fn of_app<'a>(
        &'a self,
        namespace: &str,
        app: &str,
    ) -> impl Iterator<Item = &'a Workload> + 'a {
        self.by_app
            .get(&(namespace.to_string(), app.to_string()))
            .into_iter()
            .flatten()
            .filter_map(|key| self.by_key.get(key))
    }

    /// The workloads of `namespace`, by app, kind and name.
    pub(super) fn in_namespace<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a Workload> + 'a {
        self.by_app
            .range((namespace.to_string(), String::new())..)
            .take_while(move |((ns, _), _)| ns == namespace)
            .flat_map(|(_, keys)| keys)
            .filter_map(|key| self.by_key.get(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(kind: &'static str, namespace: &str, name: &str, app: &str) -> Workload {
        Workload {
            kind,
            namespace: namespace.into(),
            name: name.into(),
            app: app.into(),
            generation: 1,
            observed_generation: 1,
            expected: 1,
            replicas: 1,
            updated: 1,
            ready: 1,
            available: 1,
            failure: None,
            paused: false,
            progressing: None,
            terminating: false,
            images: Vec::new(),
            selector: BTreeMap::new(),
        }
    }

    fn key(kind: &'static str, namespace: &str, name: &str) -> WorkloadKey {
        (kind, namespace.into(), name.into())
    }

    /// Holds workload `name` of `kind` in `namespace`, of `app`.
    fn put(
        ws: &mut Workloads,
        (kind, namespace, name, app): (&'static str, &str, &str, &str),
    ) -> Option<Workload> {
        ws.insert(
            key(kind, namespace, name),
            workload(kind, namespace, name, app),
        )
    }

    fn names<'a>(ws: impl Iterator<Item = &'a Workload>) -> Vec<String> {
        ws.map(|w| format!("{}/{}/{}", w.namespace, w.kind, w.name))
            .collect()
    }

    #[test]
    fn an_apps_workloads_follow_inserts_app_changes_and_removals() {
        let mut ws = Workloads::default();
        for w in [
            ("Deployment", "shop", "web", "web"),
            ("StatefulSet", "shop", "db", "web"),
            ("Deployment", "shopping", "web", "web"),
            ("Deployment", "sh", "x", "x"),
        ] {
            put(&mut ws, w);
        }
        assert_eq!(
            names(ws.of_app("shop", "web")),
            ["shop/Deployment/web", "shop/StatefulSet/db"]
        );
        // A namespace is its own apps only, not those of a namespace it prefixes.
        assert_eq!(
            names(ws.in_namespace("shop")),
            ["shop/Deployment/web", "shop/StatefulSet/db"]
        );
        assert_eq!(names(ws.in_namespace("sh")), ["sh/Deployment/x"]);
        // A new version in the same app replaces the old in place.
        let old = put(&mut ws, ("Deployment", "shop", "web", "web")).expect("replaced");
        assert_eq!((old.namespace.as_str(), old.name.as_str()), ("shop", "web"));
        assert_eq!(
            names(ws.of_app("shop", "web")),
            ["shop/Deployment/web", "shop/StatefulSet/db"]
        );
        // The app label changed: the workload moves to its new app.
        let old = put(&mut ws, ("StatefulSet", "shop", "db", "db")).expect("replaced");
        assert_eq!(old.app, "web");
        assert_eq!(names(ws.of_app("shop", "web")), ["shop/Deployment/web"]);
        assert_eq!(names(ws.of_app("shop", "db")), ["shop/StatefulSet/db"]);
        // Removed, then a kind relisted: nothing of them is left, the rest stays.
        assert!(ws.remove(&key("Deployment", "shop", "web")).is_some());
        assert!(ws.remove(&key("Deployment", "shop", "web")).is_none());
        assert_eq!(names(ws.of_app("shop", "web")), Vec::<String>::new());
        ws.remove_kind("Deployment");
        assert_eq!(names(ws.in_namespace("shopping")), Vec::<String>::new());
        assert_eq!(names(ws.in_namespace("shop")), ["shop/StatefulSet/db"]);
        assert_eq!(ws.by_app.len(), 1, "no empty app entries: {:?}", ws.by_app);
    }

    /// Holds a workload with `selector`.
    fn put_selecting(
        ws: &mut Workloads,
        (kind, namespace, name, app): (&'static str, &str, &str, &str),
        selector: &[(&str, &str)],
    ) {
        let mut w = workload(kind, namespace, name, app);
        w.selector = crate::status::labels::map(selector);
        ws.insert(key(kind, namespace, name), w);
    }

    /// The workloads selecting a pod of `namespace` with `labels`, found
    /// through the index and, for reference, by matching every workload of
    /// the namespace; both sorted.
    fn selecting(ws: &Workloads, namespace: &str, labels: &[(&str, &str)]) -> Vec<String> {
        let labels = Labels::of(Some(&crate::status::labels::map(labels)));
        let mut found = names(ws.selecting(namespace, &labels));
        found.sort();
        let mut reference = names(
            ws.in_namespace(namespace)
                .filter(|w| !w.selector.is_empty() && labels.has_all(&w.selector)),
        );
        reference.sort();
        assert_eq!(found, reference, "{namespace} {labels:?}");
        found
    }

    #[test]
    fn the_workloads_selecting_a_pod_are_found_from_its_labels() {
        let mut ws = Workloads::default();
        let d = "Deployment";
        put_selecting(&mut ws, (d, "shop", "web", "web"), &[("app", "web")]);
        put_selecting(
            &mut ws,
            (d, "shop", "web-canary", "web"),
            &[("app", "web"), ("track", "canary")],
        );
        put_selecting(&mut ws, (d, "shop", "api", "api"), &[("app", "api")]);
        put_selecting(&mut ws, (d, "shop", "bare", "bare"), &[]);
        put_selecting(&mut ws, (d, "shopping", "web", "web"), &[("app", "web")]);
        let canary = [("app", "web"), ("hash", "1"), ("track", "canary")];
        assert_eq!(
            selecting(&ws, "shop", &canary),
            ["shop/Deployment/web", "shop/Deployment/web-canary"]
        );
        assert_eq!(
            selecting(&ws, "shop", &[("app", "web")]),
            ["shop/Deployment/web"]
        );
        assert!(selecting(&ws, "shop", &[("track", "canary")]).is_empty());
        assert!(selecting(&ws, "shop", &[]).is_empty());
        assert_eq!(
            selecting(&ws, "shopping", &[("app", "web")]),
            ["shopping/Deployment/web"]
        );
        // A label after the selector's first changed: the workload stays
        // where the index holds it and is matched by its new selector.
        let stable = [("app", "web"), ("track", "stable")];
        put_selecting(&mut ws, (d, "shop", "web-canary", "web"), &stable);
        assert_eq!(selecting(&ws, "shop", &canary), ["shop/Deployment/web"]);
        assert_eq!(
            selecting(&ws, "shop", &stable),
            ["shop/Deployment/web", "shop/Deployment/web-canary"]
        );
        // A selector changed: the workload is found under its new one only.
        put_selecting(&mut ws, (d, "shop", "web-canary", "web"), &[("app", "api")]);
        assert_eq!(
            selecting(&ws, "shop", &[("app", "api")]),
            ["shop/Deployment/api", "shop/Deployment/web-canary"]
        );
        assert_eq!(selecting(&ws, "shop", &canary), ["shop/Deployment/web"]);
        ws.remove(&key(d, "shop", "api"));
        ws.remove_kind("StatefulSet");
        assert_eq!(
            selecting(&ws, "shop", &[("app", "api")]),
            ["shop/Deployment/web-canary"]
        );
        ws.remove_kind(d);
        assert!(ws.by_first_label.is_empty(), "{:?}", ws.by_first_label);
    }
}
