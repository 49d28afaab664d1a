//! A push member as its owner's engine holds it (`pushed.rs` applies the
//! link's observations to it): the agent's documents, the hub's lifecycle
//! of the cluster document, the apps' active tasks, how the agent is seen.
//! Pure: documents and times in, documents out.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use crate::protocol::topic::{Topic, TopicKind};
use crate::status::Lifecycle;
use crate::status::app::ActiveTask;
use crate::status::cluster::{ClusterPhase, ClusterStatus};
use crate::status::time::serialize_millis_opt;

fn to_doc<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("status documents always serialize")
}

/// How the hub sees a push member's agent: the cluster document's `agent`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AgentView {
    /// Heartbeats arrive within the grace period.
    pub(super) connected: bool,
    /// When the last heartbeat reached the stream (the broker's clock).
    #[serde(serialize_with = "serialize_millis_opt")]
    pub(super) last_heartbeat_at: Option<DateTime<Utc>>,
    /// The agent's kube-pulse version.
    pub(super) version: Option<String>,
}

/// Why a push member's documents are not current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Lost {
    pub(super) since: DateTime<Utc>,
    pub(super) message: String,
}

/// One push member, as its owner's engine holds it.
#[derive(Debug)]
pub(super) struct PushedModel {
    /// The cluster document's phase as the hub sees it: the agent's, or
    /// `Unknown (AgentLost)`; transitions are the hub's.
    pub(super) lifecycle: Lifecycle<ClusterPhase>,
    /// The agent's own cluster document.
    pub(super) cluster: Option<Value>,
    /// The agent's other documents (sync, apps), with the session that sent each.
    pub(super) docs: BTreeMap<String, (Value, u64)>,
    /// Active tasks by (namespace, app).
    pub(super) tasks: HashMap<(String, String), ActiveTask>,
    pub(super) agent: AgentView,
    /// The newest agent session heard from.
    pub(super) session: u64,
    pub(super) lost: Option<Lost>,
}

/// The lifecycle fields of a cluster document, which the hub sets.
const LIFECYCLE_FIELDS: [&str; 5] = ["phase", "reason", "message", "since", "history"];

/// Phase, reason and message of an agent's cluster document.
fn agent_phase(doc: &Value) -> Option<(ClusterPhase, String, String)> {
    let phase = serde_json::from_value(doc.get("phase")?.clone()).ok()?;
    let text = |k: &str| doc.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Some((phase, text("reason"), text("message")))
}

/// Whether `topic` is one of `cluster`'s topics other than its cluster document.
pub(super) fn topic_of(cluster: &str, topic: &str) -> bool {
    let Ok(parsed) = Topic::parse(topic) else {
        return false;
    };
    match parsed.kind() {
        Some(TopicKind::Sync { cluster: c, .. } | TopicKind::App { cluster: c, .. }) => {
            c == cluster
        }
        _ => false,
    }
}

impl PushedModel {
    pub(super) fn new(lifecycle: Lifecycle<ClusterPhase>) -> Self {
        Self {
            lifecycle,
            cluster: None,
            docs: BTreeMap::new(),
            tasks: HashMap::new(),
            agent: AgentView::default(),
            session: 0,
            lost: None,
        }
    }

    /// The cluster document: the agent's, with the hub's lifecycle and `agent`.
    pub(super) fn cluster_doc(&mut self, name: &str, now: DateTime<Utc>) -> Value {
        let (phase, reason, message) =
            match (&self.lost, self.cluster.as_ref().and_then(agent_phase)) {
                (Some(lost), _) => (
                    ClusterPhase::Unknown,
                    "AgentLost".into(),
                    lost.message.clone(),
                ),
                (None, Some(reported)) => reported,
                (None, None) => (
                    ClusterPhase::Pending,
                    "AwaitingAgent".into(),
                    "the member's agent has not reported yet".into(),
                ),
            };
        self.lifecycle.set(phase, &reason, message, now);
        let mut doc = match &self.cluster {
            Some(doc) if doc.is_object() => doc.clone(),
            _ => to_doc(&ClusterStatus::new(name, "", now)),
        };
        let lifecycle = to_doc(&self.lifecycle);
        for field in LIFECYCLE_FIELDS {
            doc[field] = lifecycle[field].clone();
        }
        doc["name"] = json!(name);
        doc["mode"] = json!("push");
        doc["agent"] = to_doc(&self.agent);
        doc
    }

    /// Another document of the member: the agent's, marked stale while the
    /// agent is lost, with the app's active task over its stable state.
    pub(super) fn doc(&self, topic: &str) -> Option<Value> {
        let (doc, _) = self.docs.get(topic)?;
        let mut doc = doc.clone();
        if !doc.is_object() {
            return Some(doc);
        }
        if let Some(lost) = &self.lost {
            doc["stale"] = json!({
                "reason": "AgentLost",
                "since": crate::status::time::millis(&lost.since),
            });
        }
        if let Ok(parsed) = Topic::parse(topic)
            && let Some(TopicKind::App { namespace, app, .. }) = parsed.kind()
        {
            let key = (namespace.to_string(), app.to_string());
            match self.tasks.get(&key) {
                Some(task) => {
                    doc["task"] = to_doc(task);
                    doc["state"] = json!(task.state);
                }
                None => {
                    doc["task"] = Value::Null;
                    if let Some(phase) = doc.get("phase").cloned() {
                        doc["state"] = phase;
                    }
                }
            }
        }
        Some(doc)
    }
}
