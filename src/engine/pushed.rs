//! Members pushed by an agent (`agent ──NATS──▶ link ──Observation::Pushed──▶
//! [engine] ──▶ hub`): the agent runs the sources and status machines in
//! the member cluster and sends its documents; the engine of the member's
//! owner puts them into the hub as its own, and adds what only the hub
//! knows: how the agent is seen (`agent: {connected, lastHeartbeatAt,
//! version}`), `Unknown (AgentLost)` once its heartbeats stop, a `stale`
//! mark on every other document meanwhile, and the active task of each app
//! (its transitional state), as for a pulled member. Revisions are the
//! hub's, so cursors and resume work as for any topic. docs/AGENT.md.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::observation::PushedInput;
use super::pushed_model::{AgentView, Lost, PushedModel, topic_of};
use super::state::Engine;
use crate::hub::Pattern;
use crate::protocol::topic;
use crate::status::Lifecycle;
use crate::status::app::ActiveTask;
use crate::status::cluster::ClusterPhase;

impl Engine {
    /// Whether `cluster` is pushed by an agent.
    pub(super) fn is_pushed(&self, cluster: &str) -> bool {
        self.pushed.contains_key(cluster)
    }

    /// Applies what the link of a push member says.
    pub(super) fn pushed_input(&mut self, cluster: &str, input: PushedInput, now: DateTime<Utc>) {
        if let PushedInput::Attached = input {
            self.attach(cluster, now);
            return;
        }
        let Some(model) = self.pushed.get_mut(cluster) else {
            return;
        };
        match input {
            PushedInput::Attached => {}
            PushedInput::Document {
                topic,
                doc,
                session,
            } => {
                if topic == topic::cluster(cluster) {
                    model.cluster = doc.filter(Value::is_object);
                    self.publish_pushed_cluster(cluster, now);
                    return;
                }
                if !topic_of(cluster, &topic) {
                    return;
                }
                match doc {
                    Some(doc) => {
                        model.docs.insert(topic.clone(), (doc, session));
                    }
                    None => {
                        model.docs.remove(&topic);
                    }
                }
                self.publish_pushed(cluster, &topic);
            }
            PushedInput::Heartbeat {
                at,
                version,
                session,
                synced,
            } => {
                // Heard from the agent: its member is current as of now, by
                // the hub's clock (heartbeats' `asOf`).
                self.hub.freshness().mark(cluster, now);
                let was_lost = model.lost.take().is_some();
                model.agent = AgentView {
                    connected: true,
                    last_heartbeat_at: Some(at),
                    version: Some(version),
                };
                model.session = model.session.max(session);
                let mut gone = Vec::new();
                if synced && session == model.session {
                    // The agent sent every document it has before saying so:
                    // one still from an older session is one it no longer has.
                    gone = model
                        .docs
                        .iter()
                        .filter(|(_, (_, s))| *s < session)
                        .map(|(t, _)| t.clone())
                        .collect();
                    for topic in &gone {
                        model.docs.remove(topic);
                    }
                }
                if was_lost {
                    tracing::info!(%cluster, "the member's agent is heard again");
                }
                self.publish_pushed_cluster(cluster, now);
                if was_lost {
                    self.publish_all_pushed(cluster);
                }
                for topic in gone {
                    self.publish_pushed(cluster, &topic);
                }
            }
            PushedInput::Lost {
                silent_for,
                grace,
                last_heartbeat_at,
            } => {
                if model.lost.is_some() {
                    return;
                }
                if model.agent.last_heartbeat_at.is_none() {
                    model.agent.last_heartbeat_at = last_heartbeat_at;
                }
                let message = format!(
                    "no heartbeat from the member's agent for {}s (grace {}s)",
                    silent_for.as_secs(),
                    grace.as_secs()
                );
                tracing::warn!(%cluster, %message, "the member's agent is lost");
                model.lost = Some(Lost {
                    since: now,
                    message,
                });
                model.agent.connected = false;
                self.publish_pushed_cluster(cluster, now);
                self.publish_all_pushed(cluster);
            }
        }
    }

    /// A push member starts here: its cluster document continues the one
    /// the hub holds (a move between replicas), and the documents the hub
    /// holds of it are kept until its agent says it has them no more.
    fn attach(&mut self, cluster: &str, now: DateTime<Utc>) {
        if self.pushed.contains_key(cluster) {
            return;
        }
        let held = self.hub.get(&topic::cluster(cluster));
        let lifecycle = held
            .as_ref()
            .and_then(|held| Lifecycle::<ClusterPhase>::restore(&held.doc))
            .filter(|l| l.phase != ClusterPhase::Removed)
            .unwrap_or_else(|| {
                Lifecycle::new(
                    ClusterPhase::Pending,
                    "AwaitingAgent",
                    "the member's agent has not reported yet",
                    now,
                )
            });
        let mut model = PushedModel::new(lifecycle);
        model.cluster = held.map(|h| (*h.doc).clone());
        let patterns = [
            format!("clusters/{cluster}/**"),
            format!("apps/{cluster}/**"),
        ];
        let patterns: Vec<Pattern> = patterns
            .iter()
            .filter_map(|p| Pattern::parse(p).ok())
            .collect();
        for held in self.hub.list(&patterns) {
            let topic = held.topic.to_string();
            if topic_of(cluster, &topic) {
                let mut doc = (*held.doc).clone();
                if let Some(doc) = doc.as_object_mut() {
                    doc.remove("stale");
                }
                model.docs.insert(topic, (doc, 0));
            }
        }
        self.pushed.insert(cluster.to_string(), model);
        self.publish_pushed_cluster(cluster, now);
    }

    /// An app's active task changed on a push member.
    pub(super) fn pushed_task(
        &mut self,
        cluster: &str,
        key: (String, String),
        task: Option<ActiveTask>,
    ) {
        let Some(model) = self.pushed.get_mut(cluster) else {
            return;
        };
        let app = topic::app(cluster, &key.0, &key.1);
        match task {
            Some(task) => model.tasks.insert(key, task),
            None => model.tasks.remove(&key),
        };
        self.publish_pushed(cluster, &app);
    }

    /// Forgets a push member: its topics go.
    pub(super) fn detach(&mut self, cluster: &str) -> bool {
        let Some(model) = self.pushed.remove(cluster) else {
            return false;
        };
        for topic in model.docs.keys() {
            self.hub.remove(topic);
        }
        self.hub.remove(&topic::cluster(cluster));
        true
    }

    fn publish_pushed_cluster(&mut self, cluster: &str, now: DateTime<Utc>) {
        if let Some(model) = self.pushed.get_mut(cluster) {
            let doc = model.cluster_doc(cluster, now);
            self.hub.put(&topic::cluster(cluster), doc);
        }
    }

    fn publish_pushed(&self, cluster: &str, topic: &str) {
        let Some(model) = self.pushed.get(cluster) else {
            return;
        };
        match model.doc(topic) {
            Some(doc) => {
                self.hub.put(topic, doc);
            }
            None => {
                self.hub.remove(topic);
            }
        }
    }

    fn publish_all_pushed(&self, cluster: &str) {
        let Some(model) = self.pushed.get(cluster) else {
            return;
        };
        let topics: BTreeSet<&String> = model.docs.keys().collect();
        for topic in topics {
            if let Some(doc) = model.doc(topic) {
                self.hub.put(topic, doc);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::engine::Observation;
    use crate::hub::{Hub, HubConfig};
    use crate::status::cluster::Thresholds;

    const CLUSTER: &str = "clusters/e";
    const APP: &str = "apps/e/shop/web";
    const SYNC: &str = "clusters/e/sync/apps/v1/deployments";

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    fn pushed(input: PushedInput) -> Observation {
        Observation::Pushed {
            cluster: "e".into(),
            input,
        }
    }

    fn doc(topic: &str, doc: Option<Value>, session: u64) -> Observation {
        pushed(PushedInput::Document {
            topic: topic.into(),
            doc,
            session,
        })
    }

    fn heartbeat(at: i64, session: u64, synced: bool) -> Observation {
        pushed(PushedInput::Heartbeat {
            at: t(at),
            version: "9.9.9".into(),
            session,
            synced,
        })
    }

    fn lost() -> Observation {
        pushed(PushedInput::Lost {
            silent_for: Duration::from_secs(41),
            grace: Duration::from_secs(40),
            last_heartbeat_at: Some(t(1)),
        })
    }

    fn agent_cluster(phase: &str, reason: &str) -> Value {
        json!({"name": "e", "server": "https://10.96.0.1", "phase": phase, "reason": reason,
               "message": "", "since": "2023-01-01T00:00:00.000Z", "history": {}, "probe": {"ok": 1}})
    }

    fn app(phase: &str) -> Value {
        json!({"cluster": "e", "namespace": "shop", "app": "web", "phase": phase, "state": phase, "ready": 1})
    }

    /// `(topic, JSON pointer, value)`; `Value::Null` at pointer "" means the
    /// topic is gone from the hub.
    type Expect = (&'static str, &'static str, Value);

    fn get(hub: &Hub, topic: &str, pointer: &str) -> Value {
        hub.get(topic)
            .and_then(|d| d.doc.pointer(pointer).cloned())
            .unwrap_or(Value::Null)
    }

    /// (observation, then expectations: topic, pointer, value; Null at ""
    /// means the topic is gone).
    #[test]
    fn a_push_member_shows_its_agents_documents_with_what_the_hub_knows() {
        let hub = Hub::new(HubConfig::default());
        let mut engine = Engine::new(hub.clone(), Thresholds::default());
        let task = |state: &str| ActiveTask {
            id: "t1".into(),
            state: state.into(),
            status: "Running".into(),
            progress: 40,
        };
        let steps: Vec<(Observation, Vec<Expect>)> = vec![
            (
                pushed(PushedInput::Attached),
                vec![
                    (CLUSTER, "/phase", json!("Pending")),
                    (CLUSTER, "/reason", json!("AwaitingAgent")),
                    (CLUSTER, "/mode", json!("push")),
                    (CLUSTER, "/agent/connected", json!(false)),
                ],
            ),
            (
                doc(CLUSTER, Some(agent_cluster("Healthy", "Ready")), 1),
                vec![
                    (CLUSTER, "/phase", json!("Healthy")),
                    (CLUSTER, "/probe/ok", json!(1)),
                    (CLUSTER, "/history/1/to", json!("Healthy")),
                ],
            ),
            (
                heartbeat(5, 1, false),
                vec![
                    (CLUSTER, "/agent/connected", json!(true)),
                    (CLUSTER, "/agent/version", json!("9.9.9")),
                    (
                        CLUSTER,
                        "/agent/lastHeartbeatAt",
                        json!("2023-11-14T22:13:25.000Z"),
                    ),
                ],
            ),
            (
                doc(APP, Some(app("Running")), 1),
                vec![(APP, "/state", json!("Running"))],
            ),
            (
                doc(SYNC, Some(json!({"phase": "Syncing"})), 1),
                vec![(SYNC, "/phase", json!("Syncing"))],
            ),
            // A document of another member, or not a member topic: ignored.
            (
                doc("apps/other/shop/web", Some(app("Running")), 1),
                vec![("apps/other/shop/web", "", Value::Null)],
            ),
            (
                doc("tasks/t9", Some(json!({})), 1),
                vec![("tasks/t9", "", Value::Null)],
            ),
            // A task shows its transitional state over the agent's stable one.
            (
                Observation::Task {
                    cluster: "e".into(),
                    namespace: "shop".into(),
                    app: "web".into(),
                    task: Some(task("Stopping")),
                },
                vec![
                    (APP, "/state", json!("Stopping")),
                    (APP, "/task/progress", json!(40)),
                    (APP, "/phase", json!("Running")),
                ],
            ),
            (
                doc(APP, Some(app("Stopped")), 1),
                vec![
                    (APP, "/state", json!("Stopping")),
                    (APP, "/phase", json!("Stopped")),
                ],
            ),
            (
                Observation::Task {
                    cluster: "e".into(),
                    namespace: "shop".into(),
                    app: "web".into(),
                    task: None,
                },
                vec![
                    (APP, "/state", json!("Stopped")),
                    (APP, "/task", Value::Null),
                ],
            ),
            // Silent: Unknown (AgentLost), everything else stale.
            (
                lost(),
                vec![
                    (CLUSTER, "/phase", json!("Unknown")),
                    (CLUSTER, "/reason", json!("AgentLost")),
                    (CLUSTER, "/agent/connected", json!(false)),
                    (CLUSTER, "/history/2/from", json!("Healthy")),
                    (CLUSTER, "/history/2/to", json!("Unknown")),
                    (APP, "/stale/reason", json!("AgentLost")),
                    (SYNC, "/stale/reason", json!("AgentLost")),
                ],
            ),
            // A new session: heard again, marks gone; its own documents.
            (
                heartbeat(60, 2, false),
                vec![
                    (CLUSTER, "/phase", json!("Healthy")),
                    (CLUSTER, "/history/3/to", json!("Healthy")),
                    (APP, "/stale", Value::Null),
                    (SYNC, "/stale", Value::Null),
                ],
            ),
            (
                doc(APP, Some(app("Running")), 2),
                vec![(APP, "/phase", json!("Running"))],
            ),
            // Synced: what the new session did not send is gone (the sync topic).
            (
                heartbeat(61, 2, true),
                vec![(SYNC, "", Value::Null), (APP, "/phase", json!("Running"))],
            ),
            // A late heartbeat of the old session changes nothing of that.
            (
                doc(SYNC, Some(json!({"phase": "Syncing"})), 2),
                vec![(SYNC, "/phase", json!("Syncing"))],
            ),
            (
                heartbeat(62, 1, true),
                vec![(SYNC, "/phase", json!("Syncing"))],
            ),
            // The agent removes a topic.
            (doc(APP, None, 2), vec![(APP, "", Value::Null)]),
            // The member leaves: every topic of it goes.
            (
                Observation::Unregistered {
                    cluster: "e".into(),
                },
                vec![(CLUSTER, "", Value::Null), (SYNC, "", Value::Null)],
            ),
        ];
        for (i, (observation, expected)) in steps.into_iter().enumerate() {
            engine.apply(observation, t(i as i64 * 10));
            for (topic, pointer, value) in expected {
                if pointer.is_empty() {
                    assert!(hub.get(topic).is_none(), "step {i}: {topic} should be gone");
                } else {
                    assert_eq!(
                        get(&hub, topic, pointer),
                        value,
                        "step {i}: {topic}{pointer}"
                    );
                }
            }
        }
    }

    #[test]
    fn agent_heartbeats_say_how_current_the_member_is() {
        let hub = Hub::new(HubConfig::default());
        let mut engine = Engine::new(hub.clone(), Thresholds::default());
        let as_of = || hub.freshness().of("e");
        engine.apply(pushed(PushedInput::Attached), t(0));
        assert_eq!(as_of(), None, "not heard yet");
        // The hub's clock when it heard the agent, not the agent's own.
        engine.apply(heartbeat(1, 1, true), t(5));
        assert_eq!(as_of(), Some(t(5)));
        engine.apply(doc(APP, Some(app("Running")), 1), t(7));
        engine.apply(lost(), t(50));
        assert_eq!(as_of(), Some(t(5)), "a lost member's entry stops");
        engine.apply(heartbeat(60, 2, false), t(61));
        assert_eq!(as_of(), Some(t(61)));
        engine.apply(
            Observation::Unregistered {
                cluster: "e".into(),
            },
            t(70),
        );
        assert_eq!(as_of(), None, "a member gone has no entry");
    }

    #[test]
    fn a_member_moving_here_continues_its_cluster_document() {
        let hub = Hub::new(HubConfig::default());
        let mut before = Engine::new(hub.clone(), Thresholds::default());
        before.apply(pushed(PushedInput::Attached), t(0));
        before.apply(
            doc(CLUSTER, Some(agent_cluster("Healthy", "Ready")), 1),
            t(1),
        );
        before.apply(doc(APP, Some(app("Running")), 1), t(1));
        // Another replica's engine over the same documents (as the relay brings them).
        let mut after = Engine::new(hub.clone(), Thresholds::default());
        after.apply(pushed(PushedInput::Attached), t(100));
        assert_eq!(get(&hub, CLUSTER, "/phase"), json!("Healthy"));
        assert_eq!(
            get(&hub, CLUSTER, "/since"),
            json!("2023-11-14T22:13:21.000Z")
        );
        // What it held of the member is marked lost like the rest, if the agent is silent.
        after.apply(lost(), t(141));
        assert_eq!(get(&hub, APP, "/stale/reason"), json!("AgentLost"));
        assert_eq!(
            get(&hub, CLUSTER, "/agent/lastHeartbeatAt"),
            json!("2023-11-14T22:13:21.000Z")
        );
    }
}
