//! The task service (`API ──▶ [Tasks] ──▶ board / executor`): validates
//! requests against the cluster's current state, starts the built-in
//! executor or waits for an external one's reports, cancels, lists, and
//! forgets finished tasks after the retention time. Every revision goes
//! through the [`Board`], shared with the executors it spawns.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::board::{Board, store_error};
use super::executor;
use super::model::{Executor, StatusReport, Task, TaskRequest, TaskStatus, TaskType};
use super::progress;
use super::store::{MemoryStore, StoreError, TaskChange, TaskStore};
use crate::engine::Observation;
use crate::error::{Error, Result};
use crate::hub::Hub;
use crate::pipeline::{MemberClient, MemberClients};
use crate::protocol::topic;
use crate::status::rules::HealthRules;

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
    /// How custom workloads are acted on (their resource, `/scale` or paths).
    rules: Arc<HealthRules>,
    settings: TaskSettings,
    /// Ends the executor (or the deadline watch of an external task) of
    /// each active task.
    running: parking_lot::Mutex<HashMap<String, CancellationToken>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// With a store shared by replicas: every member there is (this
    /// replica runs some of them). A task on a member another replica runs
    /// is stored here and run there.
    members: Option<watch::Receiver<BTreeSet<String>>>,
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
        (app_label, rules): (&str, Arc<HealthRules>),
        settings: TaskSettings,
        shutdown: &CancellationToken,
    ) -> Arc<Self> {
        let tasks = Arc::new(Self {
            board: Arc::new(Board::new(store, hub, engine)),
            clients,
            app_label: app_label.into(),
            rules,
            settings,
            running: parking_lot::Mutex::new(HashMap::new()),
            tracker: TaskTracker::new(),
            shutdown: shutdown.child_token(),
            members: None,
        });
        tasks.tracker.spawn(purge_loop(tasks.clone()));
        tasks
    }

    /// Tasks in a store shared by replicas (`store.changes()` is Some):
    /// accepted here for any of `members`, published on every replica, run
    /// by the replica that runs the task's member — and by the next one if
    /// the member moves while the task is active.
    pub fn shared(
        store: Arc<dyn TaskStore>,
        pipeline: &crate::pipeline::Pipeline,
        settings: TaskSettings,
        members: watch::Receiver<BTreeSet<String>>,
        shutdown: &CancellationToken,
    ) -> Arc<Self> {
        let changes = store.changes();
        let tasks = Arc::new(Self {
            board: Arc::new(Board::new(
                store,
                pipeline.hub().clone(),
                pipeline.observations(),
            )),
            clients: pipeline.members().clone(),
            app_label: pipeline.app_label().into(),
            rules: pipeline.rules().clone(),
            settings,
            running: parking_lot::Mutex::new(HashMap::new()),
            tracker: TaskTracker::new(),
            shutdown: shutdown.child_token(),
            members: Some(members),
        });
        tasks.tracker.spawn(purge_loop(tasks.clone()));
        if let Some(changes) = changes {
            tasks.tracker.spawn(follow(tasks.clone(), changes));
        }
        tasks
    }

    /// Whether `cluster` is a member here: running, or (with a shared
    /// store) run by another replica.
    fn is_member(&self, cluster: &str) -> bool {
        self.clients.contains(cluster) || self.handed_elsewhere(cluster)
    }

    /// With a shared store: `cluster` is a member another replica may run.
    fn handed_elsewhere(&self, cluster: &str) -> bool {
        self.members
            .as_ref()
            .is_some_and(|m| m.borrow().contains(cluster))
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
            (pipeline.app_label(), pipeline.rules().clone()),
            settings,
            shutdown,
        )
    }

    /// Validates and stores a task, then starts it (built-in) or waits for
    /// reports (external).
    pub async fn create(self: &Arc<Self>, request: TaskRequest) -> Result<Task> {
        request.validate().map_err(Error::BadRequest)?;
        self.admit(&request)?;
        let member = self.clients.get(&request.cluster);
        if member.is_none() && !self.handed_elsewhere(&request.cluster) {
            return Err(not_member(&request.cluster));
        }
        let now = Utc::now();
        let id = uuid::Uuid::new_v4().to_string();
        let default_timeout = self.settings.default_timeout.as_secs();
        // Marked running before it is stored: a shared store announces it
        // back, and it must not start twice.
        let token = self.shutdown.child_token();
        if member.is_some() {
            self.running.lock().insert(id.clone(), token.clone());
        }
        let stored = {
            let _write = self.board.writes.lock().await;
            let stored = self
                .board
                .store
                .create(Task::new(id.clone(), &request, default_timeout, now))
                .await;
            if let Ok(created) = &stored {
                if let Some(evicted) = &created.evicted {
                    self.board.hub.remove(&topic::task(evicted));
                }
                self.board.publish(&created.task).await;
            }
            stored
        };
        let task = match stored {
            Ok(created) => created.task,
            Err(e) => {
                self.running.lock().remove(&id);
                return Err(match e {
                    StoreError::ActiveTask { id, status } => Error::Conflict(format!(
                        "app {} already has an active task: {id} ({status}); \
                         wait for it or cancel it with DELETE /api/v1/tasks/{id}",
                        request.target()
                    )),
                    other => store_error(other),
                });
            }
        };
        tracing::info!(task = %task.id, kind = ?task.kind, target = %task.target, executor = ?task.executor, "task created");
        match member {
            Some(member) => self.run(task.clone(), member, token),
            None => {
                tracing::info!(task = %task.id, cluster = %task.target.cluster, "the task runs on the replica that runs its member");
            }
        }
        Ok(task)
    }

    /// Starts `task`'s executor (built-in) or deadline (external) on
    /// `member`, ended by `token`.
    fn run(self: &Arc<Self>, task: Task, member: MemberClient, token: CancellationToken) {
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
                    let reading = (this.app_label.as_str(), this.rules.as_ref());
                    executor::run(board.clone(), run.clone(), member.access, reading, token).await
                }
                Executor::External => executor::expire(&board, &run, token).await,
            }
            if removed.is_cancelled() && this.handed_elsewhere(&cluster) {
                // The member moved to another replica, which goes on with it.
                tracing::info!(task = %run.id, %cluster, "the task's member moved to another replica; it continues there");
            } else if removed.is_cancelled() {
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
    }

    /// With a shared store: the active tasks of members this replica runs
    /// that no executor here runs yet (created on another replica, or left
    /// by a replica that stopped or died) are started, once each.
    async fn take_over(self: &Arc<Self>, task: &Task) {
        if !task.status.is_active() || self.running.lock().contains_key(&task.id) {
            return;
        }
        let Some(member) = self.clients.get(&task.target.cluster) else {
            return;
        };
        // Read again: an executor here removes itself only after storing
        // the task's end, so a task still active now is not one that just
        // ended here (`task` may be an older revision, announced late).
        let task = match self.board.store.get(&task.id).await {
            Ok(Some(current)) if current.status.is_active() => current,
            _ => return,
        };
        let token = {
            let mut running = self.running.lock();
            if running.contains_key(&task.id) {
                return;
            }
            let token = self.shutdown.child_token();
            running.insert(task.id.clone(), token.clone());
            token
        };
        tracing::info!(task = %task.id, target = %task.target, status = ?task.status, "running a task of a member this replica runs");
        self.run(task, member, token);
    }

    /// Refuses requests the cluster's current state rules out.
    fn admit(&self, request: &TaskRequest) -> Result<()> {
        if !self.is_member(&request.cluster) {
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

/// With a store shared by replicas: publishes every task revision any
/// replica stores (its topic here, and its app's transitional state to
/// the engine, which takes it for the members it runs), and runs the
/// active tasks of the members this replica runs — on each change, and
/// once a second for members that moved here.
async fn follow(tasks: Arc<Tasks>, mut changes: broadcast::Receiver<TaskChange>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tasks.shutdown.cancelled() => return,
            change = changes.recv() => match change {
                Ok(TaskChange::Stored(task)) => {
                    tasks.board.publish(&task).await;
                    if task.status.is_active() {
                        tasks.take_over(&task).await;
                    } else if let Some(token) = tasks.running.lock().remove(&task.id) {
                        // Ended elsewhere (cancelled, or reported by an
                        // external executor through another replica).
                        token.cancel();
                    }
                }
                Ok(TaskChange::Gone(id)) => {
                    tasks.board.hub.remove(&topic::task(&id));
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "task changes came faster than they were published; publishing every task again");
                    if let Ok(all) = tasks.board.store.list().await {
                        for task in all {
                            tasks.board.publish(&task).await;
                        }
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tick.tick() => {
                if let Ok(all) = tasks.board.store.list().await {
                    for task in all.iter().filter(|t| t.status.is_active()) {
                        tasks.take_over(task).await;
                    }
                }
            }
        }
    }
}
