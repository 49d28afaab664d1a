//! App documents (`workloads, namespaces, pods, warning events, tasks
//! ──▶ [app machine] ──▶ hub`): which apps an observation touches, and
//! each touched app's status recomputed from its member's model.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::model::{PodIndex, PodKey, pod_key};
use super::observation::Observation;
use super::state::{Engine, to_doc};
use super::transitions::{self, Subject};
use crate::protocol::topic;
use crate::status::app::{AppStatus, Workload};
use crate::status::capacity::PodFigures;
use crate::status::pods::{self, PodState};

impl Engine {
    /// Pods and warning events: updates the model, then the apps they touch.
    pub(super) fn pod_input(&mut self, observation: Observation, now: DateTime<Utc>) {
        let (cluster, touched) = match observation {
            Observation::PodsWatched { cluster, watched } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                model.pods_watched = watched;
                if !watched {
                    // What the stopped watches brought is no longer followed.
                    model.pods = None;
                    model.pod_figures = PodFigures::default();
                    model.warnings.clear();
                }
                let touched = model.apps.keys().cloned().collect();
                self.capacity_changed(&cluster, true, now);
                (cluster, touched)
            }
            Observation::PodsListed { cluster, items } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                // Each namespace's pods indexed at once (in full B-tree nodes).
                let mut by_namespace: BTreeMap<String, Vec<(PodKey, PodState)>> = BTreeMap::new();
                for pod in items {
                    let key = pod_key(&pod.namespace, &pod.name);
                    by_namespace
                        .entry(pod.namespace)
                        .or_default()
                        .push((key, pod.state));
                }
                let index = PodIndex::from_namespaces(by_namespace);
                // Warnings of pods that are gone go with them.
                model
                    .warnings
                    .retain(|_, w| w.kind != "Pod" || index.get(&w.namespace, &w.name).is_some());
                let mut figures = PodFigures::default();
                for pod in index.values() {
                    figures.add(pod.share);
                }
                model.pods = Some(index);
                model.pod_figures = figures;
                let touched = model.apps.keys().cloned().collect();
                self.capacity_changed(&cluster, true, now);
                (cluster, touched)
            }
            Observation::PodApplied { cluster, pod } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let mut touched = model.apps_of_pod(&pod.namespace, &pod.state);
                let share = pod.state.share;
                let index = model.pods.get_or_insert_with(PodIndex::default);
                let old = index.insert(pod.namespace.clone(), &pod.name, pod.state);
                model.pod_figures.add(share);
                if let Some(old) = old {
                    model.pod_figures.remove(old.share);
                    // Its labels may have changed: the old apps too.
                    touched.extend(model.apps_of_pod(&pod.namespace, &old));
                }
                self.capacity_changed(&cluster, false, now);
                (cluster, touched)
            }
            Observation::PodDeleted {
                cluster,
                namespace,
                name,
            } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let old = model
                    .pods
                    .as_mut()
                    .and_then(|p| p.remove(&namespace, &name));
                model.forget_warnings("Pod", &namespace, &name);
                if let Some(old) = &old {
                    model.pod_figures.remove(old.share);
                }
                let touched = old
                    .map(|o| model.apps_of_pod(&namespace, &o))
                    .unwrap_or_default();
                self.capacity_changed(&cluster, false, now);
                (cluster, touched)
            }
            Observation::WarningsListed { cluster, items } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                model.warnings = items.into_iter().collect();
                model.cap_warnings();
                (cluster, model.apps.keys().cloned().collect())
            }
            Observation::WarningApplied {
                cluster,
                key,
                warning,
            } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let touched = model.apps_of_warning(&warning);
                model.warnings.insert(key, warning);
                model.cap_warnings();
                (cluster, touched)
            }
            Observation::WarningDeleted { cluster, key } => {
                let Some(model) = self.clusters.get_mut(&cluster) else {
                    return;
                };
                let touched = match model.warnings.remove(&key) {
                    Some(old) => model.apps_of_warning(&old),
                    None => BTreeSet::new(),
                };
                (cluster, touched)
            }
            _ => return,
        };
        self.refresh_apps(&cluster, touched, now);
    }

    pub(super) fn namespace_event(
        &mut self,
        cluster: &str,
        name: &str,
        exists: bool,
        now: DateTime<Utc>,
    ) {
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        let namespaces = model.namespaces.get_or_insert_with(BTreeSet::new);
        let changed = if exists {
            namespaces.insert(name.to_string())
        } else {
            namespaces.remove(name)
        };
        if changed {
            let touched = model
                .apps
                .keys()
                .filter(|(ns, _)| ns == name)
                .cloned()
                .collect();
            self.refresh_apps(cluster, touched, now);
        }
    }

    /// Recomputes the given apps of a cluster and publishes those that changed.
    pub(super) fn refresh_apps(
        &mut self,
        cluster: &str,
        apps: BTreeSet<(String, String)>,
        now: DateTime<Utc>,
    ) {
        let Some(model) = self.clusters.get_mut(cluster) else {
            return;
        };
        for (ns, app) in apps {
            let workloads: Vec<&Workload> = model.workloads.of_app(&ns, &app).collect();
            let ns_exists = model
                .namespaces
                .as_ref()
                .is_none_or(|set| set.contains(&ns));
            // The app's pods: those its workloads select, in its namespace.
            let selectors: Vec<&BTreeMap<String, String>> =
                workloads.iter().map(|w| &w.selector).collect();
            let app_pods: Option<Vec<(PodKey, &PodState)>> = model
                .pods
                .as_ref()
                .map(|index| index.selected(&ns, &selectors));
            let states: Option<Vec<&PodState>> = app_pods
                .as_ref()
                .map(|ps| ps.iter().map(|(_, p)| *p).collect());
            let cause = states.as_deref().and_then(pods::dominant);
            let view = states.as_deref().map(pods::fold);
            // Events live in the namespace of their object: only that range is read.
            let in_namespace = model
                .warnings
                .range((ns.clone(), String::new())..)
                .take_while(|((event_ns, _), _)| *event_ns == ns)
                .map(|(_, w)| w);
            let last_warning = pods::latest(in_namespace.filter(|w| {
                w.namespace == ns
                    && match w.kind.as_str() {
                        "Pod" => app_pods.as_ref().is_some_and(|ps| {
                            let key = pod_key(&ns, &w.name);
                            ps.iter().any(|(held, _)| *held == key)
                        }),
                        kind => workloads.iter().any(|x| x.kind == kind && x.name == w.name),
                    }
            }));
            let key = (ns.clone(), app.clone());
            let topic = topic::app(cluster, &ns, &app);
            // An app first seen in this run of the member continues the
            // document the hub holds, if any (published by its previous owner).
            let restored = || {
                let held = self.hub.get(&topic)?;
                AppStatus::restore(&held.doc, cluster, &ns, &app)
            };
            let mut current = match model.apps.remove(&key).or_else(restored) {
                Some(current) => current,
                None => AppStatus::first_seen(
                    cluster,
                    &ns,
                    &app,
                    ns_exists,
                    &workloads,
                    cause.clone(),
                    now,
                ),
            };
            current.task = model.tasks.get(&key).cloned();
            current.pods = view;
            current.cause = cause;
            current.last_warning = last_warning;
            let before = transitions::last(&current.lifecycle);
            let next = current.observe(ns_exists, &workloads, now);
            let subject = Subject::App {
                cluster,
                namespace: &ns,
                app: &app,
            };
            self.transitions
                .log_after(&subject, &topic, &next.lifecycle, before);
            let mut doc = to_doc(&next);
            if !model.pods_watched {
                doc["podsWatched"] = false.into();
            }
            self.hub.put(&topic, doc);
            model.apps.insert((ns, app), next);
        }
    }
}
