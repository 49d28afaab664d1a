//! The task as stored and published (`tasks/{id}`), the request that creates
//! it and the status report an external executor sends — with the pure rules
//! that validate them. No I/O here.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::status::app::ActiveTask;

/// Longest accepted deadline of a task.
pub const MAX_TIMEOUT_SECONDS: u64 = 24 * 3600;
/// Most replicas a task may ask for per workload.
pub const MAX_REPLICAS: i32 = 10_000;

/// A user action on an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskType {
    /// Create the namespace if needed and a Deployment named after the app.
    Create,
    /// Scale the app's workloads back up.
    Start,
    /// Scale the app's workloads to zero, remembering their replicas.
    Stop,
    /// Delete the app's workloads, and its namespace unless shared.
    Delete,
    /// Set the image and/or the replicas of the app's workloads.
    Update,
}

impl TaskType {
    /// The transitional state the app shows while the task is active.
    pub fn transitional_state(self) -> &'static str {
        match self {
            TaskType::Create | TaskType::Start => "Starting",
            TaskType::Stop => "Stopping",
            TaskType::Delete => "Deleting",
            TaskType::Update => "Updating",
        }
    }
}

/// Where a task is in its own life (not the app's state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskStatus {
    /// Stored, not yet acted on.
    Pending,
    /// Acting, or waiting for the cluster to show the result.
    Running,
    /// The cluster shows what the task asked for (progress 100).
    Succeeded,
    /// Ended without success; `reason` says why.
    Failed,
    /// Ended by request; what it already changed stays.
    Cancelled,
}

impl TaskStatus {
    /// Pending and Running tasks hold their app (one active task per app).
    pub fn is_active(self) -> bool {
        matches!(self, TaskStatus::Pending | TaskStatus::Running)
    }

    /// Finished tasks never change again; active ones may move forward.
    pub fn can_become(self, next: TaskStatus) -> bool {
        match self {
            TaskStatus::Pending => next != TaskStatus::Pending,
            TaskStatus::Running => next != TaskStatus::Pending,
            _ => false,
        }
    }
}

/// Who does the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Executor {
    /// The gateway acts on the member cluster through kube-rs.
    #[default]
    Builtin,
    /// Another system acts and reports with `PATCH /api/v1/tasks/{id}/status`.
    External,
}

/// The app a task acts on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Target {
    /// Member cluster name.
    pub cluster: String,
    /// Namespace of the app.
    pub namespace: String,
    /// App name (the value of the app label).
    pub app: String,
}

impl Target {
    /// The hub topic of the app (`apps/{cluster}/{namespace}/{app}`).
    pub fn topic(&self) -> String {
        crate::protocol::topic::app(&self.cluster, &self.namespace, &self.app)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.cluster, self.namespace, self.app)
    }
}

/// A task: stored, published on `tasks/{id}` and returned by the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// A UUID given at creation.
    pub id: String,
    /// What it does (`type` on the wire).
    #[serde(rename = "type")]
    pub kind: TaskType,
    /// Who does the work.
    pub executor: Executor,
    /// The app it acts on.
    pub target: Target,
    /// Replicas asked for (Start, Update, Create; None: the task's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Container image asked for (Update, Create).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Deadline after creation, in seconds.
    pub timeout_seconds: u64,
    /// The app's transitional state while this task is active.
    pub state: String,
    /// Where the task is in its own life.
    pub status: TaskStatus,
    /// 0–100; never goes backwards; 100 only when Succeeded.
    pub progress: u8,
    /// Why it failed or was cancelled (`Forbidden`, `DeadlineExceeded`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What is happening now, for people.
    pub message: String,
    /// When it was created (milliseconds on the wire).
    #[serde(serialize_with = "crate::status::time::serialize_millis")]
    pub created: DateTime<Utc>,
    /// When it last changed (milliseconds on the wire).
    #[serde(serialize_with = "crate::status::time::serialize_millis")]
    pub updated: DateTime<Utc>,
    /// When it ended (None while active).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::status::time::serialize_millis_opt"
    )]
    pub finished: Option<DateTime<Utc>>,
    /// Bumped by the store on every write (optimistic concurrency, like a
    /// Kubernetes resourceVersion).
    pub revision: u64,
}

impl Task {
    /// A new Pending task for a validated request.
    pub fn new(
        id: String,
        request: &TaskRequest,
        default_timeout: u64,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            id,
            kind: request.kind,
            executor: request.executor,
            target: request.target(),
            replicas: request.replicas,
            image: request.image.clone(),
            timeout_seconds: request.timeout_seconds.unwrap_or(default_timeout),
            state: request.kind.transitional_state().into(),
            status: TaskStatus::Pending,
            progress: 0,
            reason: None,
            message: match request.executor {
                Executor::Builtin => "waiting for the executor".into(),
                Executor::External => "waiting for the external executor to report".into(),
            },
            created: now,
            updated: now,
            finished: None,
            revision: 0,
        }
    }

    /// The slot the app document shows while this task is active.
    pub fn active(&self) -> Option<ActiveTask> {
        self.status.is_active().then(|| ActiveTask {
            id: self.id.clone(),
            state: self.state.clone(),
            status: format!("{:?}", self.status),
            progress: self.progress,
        })
    }

    /// Moves the task to `status` with `progress`, enforcing the rules:
    /// only allowed transitions, progress never backwards, 100 only (and
    /// always) on success.
    pub fn advance(
        &self,
        status: TaskStatus,
        progress: Option<u8>,
        reason: Option<String>,
        message: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<Task, String> {
        if !self.status.can_become(status) {
            return Err(format!(
                "task {} is {:?} and cannot become {status:?}",
                self.id, self.status
            ));
        }
        let progress = match (status, progress) {
            (TaskStatus::Succeeded, Some(p)) if p != 100 => {
                return Err(format!("a Succeeded task has progress 100, not {p}"));
            }
            (TaskStatus::Succeeded, _) => 100,
            (_, Some(100)) => {
                return Err("progress 100 is reserved for status Succeeded".into());
            }
            (_, Some(p)) if p > 100 => return Err(format!("progress {p} is not within 0–100")),
            (_, Some(p)) if p < self.progress => {
                return Err(format!(
                    "progress never goes backwards: it is {} and cannot become {p}",
                    self.progress
                ));
            }
            (_, Some(p)) => p,
            (_, None) => self.progress,
        };
        let mut next = self.clone();
        next.status = status;
        next.progress = progress;
        if reason.is_some() {
            next.reason = reason;
        }
        if let Some(message) = message {
            next.message = message;
        }
        next.updated = now;
        if !status.is_active() {
            next.finished = Some(now);
        }
        Ok(next)
    }

    /// How the task reads in one line: `Failed (Forbidden)`.
    pub fn summary(&self) -> String {
        match &self.reason {
            Some(reason) if self.status == TaskStatus::Failed => {
                format!("{:?} ({reason})", self.status)
            }
            _ => format!("{:?}", self.status),
        }
    }
}

/// `POST /api/v1/tasks`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaskRequest {
    /// What to do (`type` on the wire).
    #[serde(rename = "type")]
    pub kind: TaskType,
    /// Member cluster of the app.
    pub cluster: String,
    /// Namespace of the app.
    pub namespace: String,
    /// App name (the value of the app label).
    pub app: String,
    /// Replicas per workload, 0 to `MAX_REPLICAS` (Start, Update, Create).
    #[serde(default)]
    pub replicas: Option<i32>,
    /// Container image (Update, Create).
    #[serde(default)]
    pub image: Option<String>,
    /// Who does the work (default: the built-in executor).
    #[serde(default)]
    pub executor: Executor,
    /// Deadline of the task (default: the gateway's setting).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

impl TaskRequest {
    /// The app the request acts on.
    pub fn target(&self) -> Target {
        Target {
            cluster: self.cluster.clone(),
            namespace: self.namespace.clone(),
            app: self.app.clone(),
        }
    }

    /// Checks the fields against each other and the type, naming the field at fault.
    pub fn validate(&self) -> Result<(), String> {
        use crate::names::{valid_name, valid_segment};
        if !valid_segment(&self.cluster) {
            return Err(format!(
                "field `cluster`: {:?} is not a cluster name",
                self.cluster
            ));
        }
        if !valid_name(&self.namespace) {
            return Err(format!(
                "field `namespace`: {:?} is not a valid namespace name (a DNS-1123 label)",
                self.namespace
            ));
        }
        let app_ok = if self.kind == TaskType::Create {
            valid_name(&self.app)
        } else {
            valid_segment(&self.app)
        };
        if !app_ok {
            return Err(format!(
                "field `app`: {:?} is not a valid app name{}",
                self.app,
                if self.kind == TaskType::Create {
                    " (Create names a Deployment after it: a DNS-1123 label)"
                } else {
                    ""
                }
            ));
        }
        if let Some(r) = self.replicas
            && !(0..=MAX_REPLICAS).contains(&r)
        {
            return Err(format!(
                "field `replicas`: {r} is not within 0–{MAX_REPLICAS}"
            ));
        }
        if let Some(image) = &self.image
            && (image.is_empty()
                || image.len() > 512
                || image.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(format!(
                "field `image`: {image:?} is not a container image reference"
            ));
        }
        if let Some(t) = self.timeout_seconds
            && !(1..=MAX_TIMEOUT_SECONDS).contains(&t)
        {
            return Err(format!(
                "field `timeoutSeconds`: {t} is not within 1–{MAX_TIMEOUT_SECONDS}"
            ));
        }
        let unused = |field: &str| {
            Err(format!(
                "field `{field}` is not used by a {:?} task",
                self.kind
            ))
        };
        match self.kind {
            TaskType::Create if self.image.is_none() => {
                Err("field `image` is required for Create".into())
            }
            TaskType::Create | TaskType::Start if self.replicas == Some(0) => Err(format!(
                "field `replicas`: a {:?} task needs at least 1 (use Stop to scale to 0)",
                self.kind
            )),
            TaskType::Start if self.image.is_some() => unused("image"),
            TaskType::Stop | TaskType::Delete if self.image.is_some() => unused("image"),
            TaskType::Stop | TaskType::Delete if self.replicas.is_some() => unused("replicas"),
            TaskType::Update if self.image.is_none() && self.replicas.is_none() => {
                Err("an Update task needs field `image`, `replicas` or both".into())
            }
            _ => Ok(()),
        }
    }
}

/// `PATCH /api/v1/tasks/{id}/status`, from an external executor.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusReport {
    /// The task's new status.
    pub status: TaskStatus,
    /// Wider than `u8` so that 300 is refused by name, not as a type error.
    #[serde(default)]
    pub progress: Option<i64>,
    /// What is happening now (None: unchanged).
    #[serde(default)]
    pub message: Option<String>,
    /// Why it failed or was cancelled.
    #[serde(default)]
    pub reason: Option<String>,
}

impl StatusReport {
    /// Applies the report to `task` under the same rules as the built-in executor.
    pub fn apply(&self, task: &Task, now: DateTime<Utc>) -> Result<Task, String> {
        let progress = match self.progress {
            Some(p) if !(0..=100).contains(&p) => {
                return Err(format!("field `progress`: {p} is not within 0–100"));
            }
            Some(p) => Some(p as u8),
            None => None,
        };
        if let Some(m) = &self.message
            && m.len() > 1024
        {
            return Err("field `message` is longer than 1024 bytes".into());
        }
        if let Some(r) = &self.reason
            && (r.is_empty() || r.len() > 64 || !r.chars().all(|c| c.is_ascii_alphanumeric()))
        {
            return Err(format!(
                "field `reason`: {r:?} must be a short CamelCase word, e.g. ImagePullFailed"
            ));
        }
        task.advance(
            self.status,
            progress,
            self.reason.clone(),
            self.message.clone(),
            now,
        )
        .map_err(|e| format!("field `status`/`progress`: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(value: serde_json::Value) -> Result<TaskRequest, String> {
        let request: TaskRequest = serde_json::from_value(value).map_err(|e| e.to_string())?;
        request.validate()?;
        Ok(request)
    }

    #[test]
    fn requests_are_checked_field_by_field() {
        let base = json!({"type": "Stop", "cluster": "dev", "namespace": "shop", "app": "web"});
        let with = |patch: serde_json::Value| {
            let mut v = base.clone();
            json_patch::merge(&mut v, &patch);
            v
        };
        let cases: Vec<(&str, serde_json::Value, Option<&str>)> = vec![
            ("stop", base.clone(), None),
            (
                "unknown type",
                with(json!({"type": "Explode"})),
                Some("unknown variant `Explode`"),
            ),
            (
                "missing app",
                with(json!({"app": null})),
                Some("missing field `app`"),
            ),
            (
                "unknown field",
                with(json!({"colour": "red"})),
                Some("unknown field `colour`"),
            ),
            (
                "bad namespace",
                with(json!({"namespace": "Shop!"})),
                Some("field `namespace`"),
            ),
            (
                "bad cluster",
                with(json!({"cluster": "a/b"})),
                Some("field `cluster`"),
            ),
            (
                "stop with replicas",
                with(json!({"replicas": 2})),
                Some("field `replicas` is not used by a Stop"),
            ),
            (
                "delete with image",
                with(json!({"type": "Delete", "image": "x:1"})),
                Some("field `image` is not used"),
            ),
            (
                "create without image",
                with(json!({"type": "Create"})),
                Some("field `image` is required"),
            ),
            (
                "create",
                with(json!({"type": "Create", "image": "web:2", "replicas": 2})),
                None,
            ),
            (
                "create an odd name",
                with(json!({"type": "Create", "image": "web:2", "app": "Web_1"})),
                Some("DNS-1123"),
            ),
            (
                "existing app with an odd name",
                with(json!({"app": "Web_1"})),
                None,
            ),
            (
                "start with zero",
                with(json!({"type": "Start", "replicas": 0})),
                Some("at least 1"),
            ),
            (
                "negative replicas",
                with(json!({"type": "Update", "replicas": -1})),
                Some("field `replicas`: -1"),
            ),
            (
                "huge replicas",
                with(json!({"type": "Update", "replicas": 100000})),
                Some("not within 0–10000"),
            ),
            (
                "empty update",
                with(json!({"type": "Update"})),
                Some("needs field `image`, `replicas`"),
            ),
            (
                "image with spaces",
                with(json!({"type": "Update", "image": "a b"})),
                Some("field `image`"),
            ),
            (
                "update replicas",
                with(json!({"type": "Update", "replicas": 0})),
                None,
            ),
            (
                "zero timeout",
                with(json!({"timeoutSeconds": 0})),
                Some("field `timeoutSeconds`"),
            ),
            ("external", with(json!({"executor": "external"})), None),
            (
                "unknown executor",
                with(json!({"executor": "robot"})),
                Some("unknown variant `robot`"),
            ),
        ];
        for (name, value, expected) in cases {
            match (request(value), expected) {
                (Ok(_), None) => {}
                (Err(e), Some(want)) => assert!(e.contains(want), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want error {want:?}"),
            }
        }
    }

    #[test]
    fn transitional_states() {
        let cases = [
            (TaskType::Create, "Starting"),
            (TaskType::Start, "Starting"),
            (TaskType::Stop, "Stopping"),
            (TaskType::Delete, "Deleting"),
            (TaskType::Update, "Updating"),
        ];
        for (kind, state) in cases {
            assert_eq!(kind.transitional_state(), state);
        }
    }

    fn task() -> Task {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let request = request(json!({"type": "Stop", "cluster": "dev", "namespace": "shop", "app": "web", "executor": "external"})).unwrap();
        Task::new("t1".into(), &request, 60, now)
    }

    #[test]
    fn status_reports_follow_the_rules() {
        use TaskStatus::*;
        let now = DateTime::from_timestamp(1_700_000_010, 0).unwrap();
        let running_at_40 = task().advance(Running, Some(40), None, None, now).unwrap();
        let report = |status, progress: Option<i64>| StatusReport {
            status,
            progress,
            message: None,
            reason: None,
        };
        type Case<'a> = (
            &'a str,
            &'a Task,
            StatusReport,
            Result<(TaskStatus, u8), &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "start",
                &running_at_40,
                report(Running, Some(50)),
                Ok((Running, 50)),
            ),
            (
                "same progress",
                &running_at_40,
                report(Running, Some(40)),
                Ok((Running, 40)),
            ),
            (
                "no progress given",
                &running_at_40,
                report(Running, None),
                Ok((Running, 40)),
            ),
            (
                "backwards",
                &running_at_40,
                report(Running, Some(30)),
                Err("never goes backwards"),
            ),
            (
                "over 100",
                &running_at_40,
                report(Running, Some(300)),
                Err("field `progress`: 300"),
            ),
            (
                "negative",
                &running_at_40,
                report(Running, Some(-1)),
                Err("field `progress`: -1"),
            ),
            (
                "100 while running",
                &running_at_40,
                report(Running, Some(100)),
                Err("reserved for status Succeeded"),
            ),
            (
                "success fills the bar",
                &running_at_40,
                report(Succeeded, None),
                Ok((Succeeded, 100)),
            ),
            (
                "success below 100",
                &running_at_40,
                report(Succeeded, Some(90)),
                Err("progress 100"),
            ),
            (
                "failure keeps progress",
                &running_at_40,
                report(Failed, None),
                Ok((Failed, 40)),
            ),
            (
                "back to pending",
                &running_at_40,
                report(Pending, None),
                Err("cannot become Pending"),
            ),
        ];
        for (name, task, report, want) in cases {
            let got = report.apply(task, now).map(|t| (t.status, t.progress));
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
                (Err(e), Err(want)) => assert!(e.contains(want), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
        let done = report(Succeeded, None).apply(&running_at_40, now).unwrap();
        assert_eq!(done.finished, Some(now));
        assert!(done.active().is_none());
        let err = report(Running, Some(50)).apply(&done, now).unwrap_err();
        assert!(err.contains("Succeeded and cannot become Running"), "{err}");
    }

    #[test]
    fn the_app_slot_and_summary() {
        let t = task();
        let slot = t.active().unwrap();
        assert_eq!(
            (slot.state.as_str(), slot.status.as_str()),
            ("Stopping", "Pending")
        );
        let now = t.created;
        let failed = t
            .advance(
                TaskStatus::Failed,
                None,
                Some("Forbidden".into()),
                None,
                now,
            )
            .unwrap();
        assert_eq!(failed.summary(), "Failed (Forbidden)");
        let doc = serde_json::to_value(&failed).unwrap();
        assert_eq!(doc["type"], "Stop");
        assert_eq!(doc["target"]["app"], "web");
        assert_eq!(doc["executor"], "external");
        assert!(doc.get("replicas").is_none());
    }
}
