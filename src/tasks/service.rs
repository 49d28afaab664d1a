//! The task service (`API ──▶ [Tasks] ──▶ board / executor`): validates
//! requests against the cluster's current state, starts the built-in
//! executor or waits for an external one's reports, cancels, lists, and
//! forgets finished tasks after the retention time. Every revision goes
//! through the [`Board`], shared with the executors it spawns.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::board::{Board, store_error};
use super::executor;
use super::model::{Executor, StatusReport, Task, TaskRequest, TaskStatus, TaskType};
use super::progress;
use super::store::{MemoryStore, StoreError, TaskStore};
use crate::engine::Observation;
use crate::error::{Error, Result};
use crate::hub::{Hub, topic};
use crate::members::MemberClients;

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
    /// Only tasks on this member cluster (None: any).
    pub cluster: Option<String>,
    /// Only tasks in this namespace (None: any).
    pub namespace: Option<String>,
    /// Only tasks on this app (None: any).
    pub app: Option<String>,
    /// Only tasks with this status (None: any).
    pub status: Option<TaskStatus>,
    /// Only tasks of this type (None: any).
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
    /// Where every revision is stored and published (shared with the executors).
    board: Arc<Board>,
    /// The running members' clients (members come and go while tasks run).
    clients: Arc<MemberClients>,
    app_label: String,
    settings: TaskSettings,
    /// Ends the executor (or the deadline watch of an external task) of
    /// each active task.
    running: parking_lot::Mutex<HashMap<String, CancellationToken>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The member clients stay out: they carry the clusters' credentials.
        let clusters = self.clients.names();
        f.debug_struct("Tasks")
            .field("board", &self.board)
            .field("clusters", &clusters)
            .field("app_label", &self.app_label)
            .field("settings", &self.settings)
            .field("running", &self.running.lock().len())
            .finish_non_exhaustive()
    }
}

impl Tasks {
    /// Tasks on the members of `clients`, publishing into `hub` and
    /// telling the engine through `engine`.
    pub fn new(
        store: Arc<dyn TaskStore>,
        hub: Arc<Hub>,
        engine: mpsc::Sender<Observation>,
        clients: Arc<MemberClients>,
        app_label: &str,
        settings: TaskSettings,
        shutdown: &CancellationToken,
    ) -> Arc<Self> {
        let tasks = Arc::new(Self {
            board: Arc::new(Board::new(store, hub, engine)),
            clients,
            app_label: app_label.into(),
            settings,
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
            pipeline.members().clone(),
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
        let member = self
            .clients
            .get(&request.cluster)
            .ok_or_else(|| not_member(&request.cluster))?;
        let now = Utc::now();
        let id = uuid::Uuid::new_v4().to_string();
        let default_timeout = self.settings.default_timeout.as_secs();
        let task = {
            let _write = self.board.writes.lock().await;
            let task = self
                .board
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
            self.board.publish(&task).await;
            task
        };
        tracing::info!(task = %task.id, kind = ?task.kind, target = %task.target, executor = ?task.executor, "task created");
        let token = self.shutdown.child_token();
        self.running.lock().insert(task.id.clone(), token.clone());
        let this = self.clone();
        let board = self.board.clone();
        let run = task.clone();
        // A member taken out fails its tasks: the executor stops, then the
        // task ends `Failed (MemberRemoved)` (unless it ended meanwhile).
        let (removed, watch_removed) = (member.removed.clone(), member.removed.clone());
        let cluster = task.target.cluster.clone();
        let stop = token.clone();
        let run_task = async move {
            match run.executor {
                Executor::Builtin => {
                    let app_label = this.app_label.clone();
                    executor::run(board.clone(), run.clone(), member.client, &app_label, token)
                        .await
                }
                Executor::External => executor::expire(&board, &run, token).await,
            }
            if removed.is_cancelled() {
                let message =
                    format!("member cluster {cluster} was removed from the configuration");
                executor::finish(
                    &board,
                    &run.id,
                    TaskStatus::Failed,
                    "MemberRemoved",
                    message,
                )
                .await;
            }
            this.running.lock().remove(&run.id);
        };
        self.tracker.spawn(async move {
            let watch = async move {
                watch_removed.cancelled().await;
                stop.cancel();
                std::future::pending::<()>().await
            };
            tokio::select! {
                _ = run_task => {}
                _ = watch => {}
            }
        });
        Ok(task)
    }

    /// Refuses requests the cluster's current state rules out.
    fn admit(&self, request: &TaskRequest) -> Result<()> {
        if !self.clients.contains(&request.cluster) {
            return Err(not_member(&request.cluster));
        }
        let target = request.target();
        let app = progress::AppView::read(&self.board.hub, &target.topic());
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

    /// The task `id`, or 404.
    pub async fn get(&self, id: &str) -> Result<Task> {
        self.board.get(id).await
    }

    /// The stored tasks `filter` lets through, oldest first.
    pub async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        let tasks = self.board.store.list().await.map_err(store_error)?;
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

    /// Read, change, store and publish one task (see [`Board::write`]).
    pub(crate) async fn write(
        &self,
        id: &str,
        change: impl Fn(&Task) -> Result<Task>,
    ) -> Result<Task> {
        self.board.write(id, change).await
    }

    /// The `Server` health check's part: the store answers.
    pub async fn check(&self) -> std::result::Result<(), String> {
        let store = &self.board.store;
        store
            .check()
            .await
            .map_err(|e| format!("task store ({}): {e}", store.name()))
    }

    /// Stops every executor and waits for them (tasks stay as they are).
    pub async fn stop(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// 404 for a task on a cluster that is not (or no longer) a member.
fn not_member(cluster: &str) -> Error {
    Error::NotFound(format!(
        "field `cluster`: {cluster:?} is not a member cluster"
    ))
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
        match tasks.board.store.purge(before).await {
            Ok(ids) => {
                for id in ids {
                    tasks.board.hub.remove(&topic::task(&id));
                }
            }
            Err(e) => tracing::warn!(cause = %e, "purging finished tasks failed"),
        }
    }
}
