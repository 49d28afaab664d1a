//! Tasks: user actions on an app and the transitional states they show
//! (`Starting`, `Stopping`, `Deleting`, `Updating`) with live progress.
//!
//! ```text
//! API ──▶ [Tasks] ──▶ store            (one active task per app)
//!            │ ├──▶ hub: tasks/{id}
//!            │ └──Observation::Task──▶ engine ──▶ hub: apps/… (state, task)
//!            └──▶ executor ──kube-rs──▶ member cluster
//!                    ▲ hub: apps/… (what the watches report → progress)
//! ```
//!
//! Every write goes through [`Tasks::write`], which stores, then publishes
//! the task and the app's transitional slot, one write at a time.

pub mod api;
mod executor;
pub mod model;
pub mod progress;
pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::Observation;
use crate::error::{Error, Result};
use crate::hub::{Hub, topic};

pub use model::{Executor, StatusReport, Target, Task, TaskRequest, TaskStatus, TaskType};
pub use store::{MemoryStore, StoreError, TaskStore};

/// How tasks behave.
#[derive(Debug, Clone)]
pub struct TaskSettings {
    /// Deadline of a task that names none.
    pub default_timeout: Duration,
    /// How long finished tasks stay readable (and on their topic).
    pub retention: Duration,
    /// Most tasks the in-memory store holds.
    pub capacity: usize,
}

impl Default for TaskSettings {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(600),
            retention: Duration::from_secs(3600),
            capacity: 10_000,
        }
    }
}

/// What `GET /api/v1/tasks` filters on.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub cluster: Option<String>,
    pub namespace: Option<String>,
    pub app: Option<String>,
    pub status: Option<TaskStatus>,
    pub kind: Option<TaskType>,
}

impl TaskFilter {
    fn matches(&self, t: &Task) -> bool {
        let eq = |want: &Option<String>, got: &str| want.as_deref().is_none_or(|w| w == got);
        eq(&self.cluster, &t.target.cluster)
            && eq(&self.namespace, &t.target.namespace)
            && eq(&self.app, &t.target.app)
            && self.status.is_none_or(|s| s == t.status)
            && self.kind.is_none_or(|k| k == t.kind)
    }
}

/// The task service: validates, stores, runs and publishes tasks.
pub struct Tasks {
    store: Arc<dyn TaskStore>,
    hub: Arc<Hub>,
    engine: mpsc::Sender<Observation>,
    clients: BTreeMap<String, kube::Client>,
    app_label: String,
    settings: TaskSettings,
    /// Serializes store writes with their publication, so subscribers see
    /// a task's revisions in order.
    writes: tokio::sync::Mutex<()>,
    /// Ends the executor (or the deadline watch of an external task) of
    /// each active task.
    running: parking_lot::Mutex<HashMap<String, CancellationToken>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

fn store_error(e: StoreError) -> Error {
    match e {
        StoreError::ActiveTask { .. } | StoreError::Stale(_) | StoreError::Exists(_) => {
            Error::Conflict(e.to_string())
        }
        StoreError::NotFound(_) => Error::NotFound(e.to_string()),
        StoreError::Full(_) | StoreError::Backend(_) => Error::Unavailable(e.to_string()),
    }
}

impl Tasks {
    /// Tasks on `clients` (member name → kube-rs client), publishing into
    /// `hub` and telling the engine through `engine`.
    pub fn new(
        store: Arc<dyn TaskStore>,
        hub: Arc<Hub>,
        engine: mpsc::Sender<Observation>,
        clients: BTreeMap<String, kube::Client>,
        app_label: &str,
        settings: TaskSettings,
        shutdown: &CancellationToken,
    ) -> Arc<Self> {
        let tasks = Arc::new(Self {
            store,
            hub,
            engine,
            clients,
            app_label: app_label.into(),
            settings,
            writes: tokio::sync::Mutex::new(()),
            running: parking_lot::Mutex::new(HashMap::new()),
            tracker: TaskTracker::new(),
            shutdown: shutdown.child_token(),
        });
        tasks.tracker.spawn(purge_loop(tasks.clone()));
        tasks
    }

    /// Tasks over a running pipeline's hub, engine and member clients.
    pub fn for_pipeline(
        pipeline: &crate::pipeline::Pipeline,
        settings: TaskSettings,
        shutdown: &CancellationToken,
    ) -> Arc<Self> {
        let store = Arc::new(MemoryStore::new(settings.capacity));
        Self::new(
            store,
            pipeline.hub().clone(),
            pipeline.observations(),
            pipeline.clients().clone(),
            pipeline.app_label(),
            settings,
            shutdown,
        )
    }

    /// Validates and stores a task, then starts it (built-in) or waits for
    /// reports (external).
    pub async fn create(self: &Arc<Self>, request: TaskRequest) -> Result<Task> {
        request.validate().map_err(Error::BadRequest)?;
        self.admit(&request)?;
        let now = Utc::now();
        let id = uuid::Uuid::new_v4().to_string();
        let default_timeout = self.settings.default_timeout.as_secs();
        let task = {
            let _write = self.writes.lock().await;
            let task = self
                .store
                .create(Task::new(id, &request, default_timeout, now))
                .await
                .map_err(|e| match e {
                    StoreError::ActiveTask { id, status } => Error::Conflict(format!(
                        "app {} already has an active task: {id} ({status}); \
                         wait for it or cancel it with DELETE /api/v1/tasks/{id}",
                        request.target()
                    )),
                    other => store_error(other),
                })?;
            self.publish(&task).await;
            task
        };
        tracing::info!(task = %task.id, kind = ?task.kind, target = %task.target, executor = ?task.executor, "task created");
        let token = self.shutdown.child_token();
        self.running.lock().insert(task.id.clone(), token.clone());
        let this = self.clone();
        let run = task.clone();
        match task.executor {
            Executor::Builtin => {
                let client = self.clients[&task.target.cluster].clone();
                self.tracker.spawn(async move {
                    executor::run(this.clone(), run.clone(), client, token).await;
                    this.running.lock().remove(&run.id);
                });
            }
            Executor::External => {
                self.tracker.spawn(async move {
                    executor::expire(&this, &run, token).await;
                    this.running.lock().remove(&run.id);
                });
            }
        }
        Ok(task)
    }

    /// Refuses requests the cluster's current state rules out.
    fn admit(&self, request: &TaskRequest) -> Result<()> {
        if !self.clients.contains_key(&request.cluster) {
            return Err(Error::NotFound(format!(
                "field `cluster`: {:?} is not a member cluster",
                request.cluster
            )));
        }
        let target = request.target();
        let app = progress::AppView::read(&self.hub, &target.topic());
        let has_workloads = app.as_ref().is_some_and(|a| !a.workloads.is_empty());
        match (request.kind, &app) {
            (TaskType::Create, _) if has_workloads => Err(Error::Conflict(format!(
                "app {target} already exists; use Start or Update"
            ))),
            (TaskType::Create, _) => Ok(()),
            (_, None) => Err(Error::NotFound(format!("app {target} does not exist"))),
            (TaskType::Delete, Some(a)) if a.phase == "NotExisted" => Err(Error::Conflict(
                format!("app {target} does not exist any more (its namespace is gone)"),
            )),
            (_, Some(a)) if a.phase == "NotExisted" => Err(Error::Conflict(format!(
                "the namespace of app {target} does not exist; use Create"
            ))),
            (TaskType::Start | TaskType::Stop | TaskType::Update, Some(_)) if !has_workloads => {
                Err(Error::Conflict(format!(
                    "app {target} has no Deployment or StatefulSet to act on"
                )))
            }
            _ => Ok(()),
        }
    }

    pub async fn get(&self, id: &str) -> Result<Task> {
        self.store
            .get(id)
            .await
            .map_err(store_error)?
            .ok_or_else(|| Error::NotFound(format!("task {id:?} does not exist")))
    }

    pub async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        let tasks = self.store.list().await.map_err(store_error)?;
        Ok(tasks.into_iter().filter(|t| filter.matches(t)).collect())
    }

    /// Cancels an active task. The built-in executor stops acting; what it
    /// already changed on the cluster stays.
    pub async fn cancel(&self, id: &str) -> Result<Task> {
        let task = self
            .write(id, |t| {
                if !t.status.is_active() {
                    return Err(Error::Conflict(format!(
                        "task {id} already finished: {}",
                        t.summary()
                    )));
                }
                t.advance(
                    TaskStatus::Cancelled,
                    None,
                    Some("Cancelled".into()),
                    Some("cancelled by request".into()),
                    Utc::now(),
                )
                .map_err(Error::Conflict)
            })
            .await?;
        if let Some(token) = self.running.lock().remove(id) {
            token.cancel();
        }
        Ok(task)
    }

    /// An external executor's report.
    pub async fn report(&self, id: &str, report: StatusReport) -> Result<Task> {
        let task = self.write(id, |t| {
            if t.executor != Executor::External {
                return Err(Error::Conflict(format!(
                    "task {id} is run by the built-in executor; only external tasks take status reports"
                )));
            }
            report.apply(t, Utc::now()).map_err(Error::BadRequest)
        })
        .await?;
        if !task.status.is_active()
            && let Some(deadline) = self.running.lock().remove(id)
        {
            deadline.cancel();
        }
        Ok(task)
    }

    /// Read, change, store and publish one task. `change` sees the stored
    /// task; a concurrent change elsewhere (another replica) retries.
    pub(crate) async fn write(
        &self,
        id: &str,
        change: impl Fn(&Task) -> Result<Task>,
    ) -> Result<Task> {
        let _write = self.writes.lock().await;
        for _ in 0..5 {
            let current = self.get(id).await?;
            let next = change(&current)?;
            if next == current {
                return Ok(current);
            }
            match self.store.update(next).await {
                Ok(stored) => {
                    self.publish(&stored).await;
                    return Ok(stored);
                }
                Err(StoreError::Stale(_)) => continue,
                Err(e) => return Err(store_error(e)),
            }
        }
        Err(Error::Conflict(format!(
            "task {id} keeps changing concurrently; try again"
        )))
    }

    /// Puts the task on its topic and its state in the app's slot.
    async fn publish(&self, task: &Task) {
        let doc = serde_json::to_value(task).expect("tasks always serialize");
        self.hub.put(&topic::task(&task.id), doc);
        let observation = Observation::Task {
            cluster: task.target.cluster.clone(),
            namespace: task.target.namespace.clone(),
            app: task.target.app.clone(),
            task: task.active(),
        };
        // The engine ends only at shutdown; the slot then no longer matters.
        let _ = self.engine.send(observation).await;
    }

    /// The `Server` health check's part: the store answers.
    pub async fn check(&self) -> std::result::Result<(), String> {
        self.store
            .check()
            .await
            .map_err(|e| format!("task store ({}): {e}", self.store.name()))
    }

    /// Stops every executor and waits for them (tasks stay as they are).
    pub async fn stop(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// Forgets finished tasks after the retention time, and their topics.
async fn purge_loop(tasks: Arc<Tasks>) {
    let every =
        (tasks.settings.retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tasks.shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let retention =
            chrono::Duration::from_std(tasks.settings.retention).unwrap_or(chrono::Duration::MAX);
        let before = Utc::now() - retention;
        match tasks.store.purge(before).await {
            Ok(ids) => {
                for id in ids {
                    tasks.hub.remove(&topic::task(&id));
                }
            }
            Err(e) => tracing::warn!(cause = %e, "purging finished tasks failed"),
        }
    }
}
