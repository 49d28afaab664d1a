//! Where tasks live (`manager ──▶ [store]`). A small trait so that a
//! Kubernetes custom-resource store (several gateway replicas agreeing on
//! tasks) can replace the in-memory one without touching the executor or
//! the API: writes carry a revision (a resourceVersion in that store), and
//! "one active task per app" is the store's to enforce atomically.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use parking_lot::Mutex;

use super::model::Task;

/// What a store can refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Another task is still active on the same app.
    #[error("task {id} is still {status} on this app")]
    ActiveTask {
        /// The active task's id.
        id: String,
        /// Its status (`Pending`, `Running`).
        status: String,
    },
    /// No task has this id.
    #[error("task {0} does not exist")]
    NotFound(String),
    /// The task changed since it was read (revision mismatch).
    #[error("task {0} was changed concurrently")]
    Stale(String),
    /// A task with this id is already stored.
    #[error("task {0} already exists")]
    Exists(String),
    /// Every slot holds an active task (the capacity is the value).
    #[error("the task store is full ({0} tasks, all active)")]
    Full(usize),
    /// The backend failed (I/O, connection).
    #[error("task store: {0}")]
    Backend(String),
}

/// A backend for tasks.
pub trait TaskStore: Send + Sync {
    /// Shown by the `Server` health check.
    fn name(&self) -> &str;
    /// Stores a new task, unless another one is active on its app; says
    /// which finished task, if any, left the store to make room.
    fn create(&self, task: Task) -> BoxFuture<'_, Result<Created, StoreError>>;
    /// The task `id`, if stored.
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Task>, StoreError>>;
    /// Every stored task, oldest first.
    fn list(&self) -> BoxFuture<'_, Result<Vec<Task>, StoreError>>;
    /// Replaces a task read at `task.revision`; returns it at its new revision.
    fn update(&self, task: Task) -> BoxFuture<'_, Result<Task, StoreError>>;
    /// Removes tasks that finished before `before`; returns their ids.
    fn purge(&self, before: DateTime<Utc>) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;
    /// Whether the backend answers.
    fn check(&self) -> BoxFuture<'_, Result<(), String>>;

    /// Changes of tasks made anywhere, for a store shared by replicas (each
    /// replica publishes every task and runs those of its members); None
    /// for a store only this process writes.
    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<TaskChange>> {
        None
    }
}

/// A task stored by [`TaskStore::create`].
#[derive(Debug, Clone, PartialEq)]
pub struct Created {
    /// The task at its first revision.
    pub task: Task,
    /// The id of the oldest finished task, removed to make room in a full
    /// store: its topic goes too.
    pub evicted: Option<String>,
}

/// A change a shared store reports.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskChange {
    /// A task was stored (created or updated), by any replica.
    Stored(Box<Task>),
    /// The task of this id was purged.
    Gone(String),
}

/// The default store: a bounded map in this process. Tasks are lost on restart.
#[derive(Debug)]
pub struct MemoryStore {
    tasks: Mutex<BTreeMap<String, Task>>,
    capacity: usize,
}

impl MemoryStore {
    /// Holds at most `capacity` tasks; when full, the oldest finished task
    /// makes room, and with none finished new tasks are refused.
    pub fn new(capacity: usize) -> Self {
        Self {
            tasks: Mutex::new(BTreeMap::new()),
            capacity: capacity.max(1),
        }
    }
}

impl TaskStore for MemoryStore {
    fn name(&self) -> &str {
        "memory"
    }

    fn create(&self, mut task: Task) -> BoxFuture<'_, Result<Created, StoreError>> {
        let result = (|| {
            let mut tasks = self.tasks.lock();
            if tasks.contains_key(&task.id) {
                return Err(StoreError::Exists(task.id));
            }
            if let Some(active) = tasks
                .values()
                .find(|t| t.target == task.target && t.status.is_active())
            {
                return Err(StoreError::ActiveTask {
                    id: active.id.clone(),
                    status: format!("{:?}", active.status),
                });
            }
            let mut evicted = None;
            if tasks.len() >= self.capacity {
                let oldest = tasks
                    .values()
                    .filter(|t| !t.status.is_active())
                    .min_by_key(|t| t.finished)
                    .map(|t| t.id.clone())
                    .ok_or(StoreError::Full(tasks.len()))?;
                tasks.remove(&oldest);
                evicted = Some(oldest);
            }
            task.revision = 1;
            tasks.insert(task.id.clone(), task.clone());
            Ok(Created { task, evicted })
        })();
        Box::pin(async move { result })
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Task>, StoreError>> {
        let task = self.tasks.lock().get(id).cloned();
        Box::pin(async move { Ok(task) })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Task>, StoreError>> {
        let mut tasks: Vec<Task> = self.tasks.lock().values().cloned().collect();
        tasks.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        Box::pin(async move { Ok(tasks) })
    }

    fn update(&self, mut task: Task) -> BoxFuture<'_, Result<Task, StoreError>> {
        let result = (|| {
            let mut tasks = self.tasks.lock();
            let stored = tasks
                .get_mut(&task.id)
                .ok_or_else(|| StoreError::NotFound(task.id.clone()))?;
            if stored.revision != task.revision {
                return Err(StoreError::Stale(task.id));
            }
            task.revision += 1;
            *stored = task.clone();
            Ok(task)
        })();
        Box::pin(async move { result })
    }

    fn purge(&self, before: DateTime<Utc>) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        let mut removed = Vec::new();
        self.tasks.lock().retain(|id, t| {
            let keep = t.finished.is_none_or(|f| f >= before);
            if !keep {
                removed.push(id.clone());
            }
            keep
        });
        Box::pin(async move { Ok(removed) })
    }

    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        // A poisoned or deadlocked map would not answer at all.
        let answered = self.tasks.try_lock_for(std::time::Duration::from_secs(1));
        let result = match answered {
            Some(_) => Ok(()),
            None => Err("the in-memory task store is locked".into()),
        };
        Box::pin(async move { result })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::model::{TaskRequest, TaskStatus};

    fn task(id: &str, app: &str, at: i64) -> Task {
        let request: TaskRequest = serde_json::from_value(serde_json::json!({
            "type": "Stop", "cluster": "dev", "namespace": "shop", "app": app
        }))
        .unwrap();
        Task::new(
            id.into(),
            &request,
            60,
            DateTime::from_timestamp(at, 0).unwrap(),
        )
    }

    fn finish(store: &MemoryStore, id: &str, at: i64) {
        let t = futures::executor::block_on(store.get(id)).unwrap().unwrap();
        let done = t
            .advance(
                TaskStatus::Cancelled,
                None,
                None,
                None,
                DateTime::from_timestamp(at, 0).unwrap(),
            )
            .unwrap();
        futures::executor::block_on(store.update(done)).unwrap();
    }

    #[test]
    fn one_active_task_per_app_and_revisions() {
        use futures::executor::block_on;
        let store = MemoryStore::new(10);
        let first = block_on(store.create(task("a", "web", 0))).unwrap().task;
        assert_eq!(first.revision, 1);
        let err = block_on(store.create(task("b", "web", 1))).unwrap_err();
        assert_eq!(
            err,
            StoreError::ActiveTask {
                id: "a".into(),
                status: "Pending".into()
            }
        );
        assert!(block_on(store.create(task("c", "cart", 1))).is_ok());
        assert_eq!(
            block_on(store.create(task("c", "db", 1))).unwrap_err(),
            StoreError::Exists("c".into())
        );
        // A write based on an old read is refused.
        let mut stale = first.clone();
        stale.message = "x".into();
        let newer = block_on(store.update(stale.clone())).unwrap();
        assert_eq!(newer.revision, 2);
        assert_eq!(
            block_on(store.update(stale)).unwrap_err(),
            StoreError::Stale("a".into())
        );
        finish(&store, "a", 5);
        assert!(block_on(store.create(task("b", "web", 6))).is_ok());
        let ids: Vec<String> = block_on(store.list())
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(ids, ["a", "c", "b"]);
    }

    #[test]
    fn finished_tasks_are_purged_and_make_room() {
        use futures::executor::block_on;
        let store = MemoryStore::new(2);
        block_on(store.create(task("a", "web", 0))).unwrap();
        block_on(store.create(task("b", "cart", 0))).unwrap();
        assert_eq!(
            block_on(store.create(task("c", "db", 0))).unwrap_err(),
            StoreError::Full(2)
        );
        finish(&store, "a", 10);
        let created = block_on(store.create(task("c", "db", 11))).unwrap();
        assert_eq!(created.evicted.as_deref(), Some("a"), "named as it goes");
        assert!(block_on(store.get("a")).unwrap().is_none(), "evicted");
        finish(&store, "b", 20);
        let before = DateTime::from_timestamp(30, 0).unwrap();
        assert_eq!(block_on(store.purge(before)).unwrap(), ["b"]);
        assert!(block_on(store.get("c")).unwrap().is_some(), "active stays");
        assert!(block_on(store.check()).is_ok());
    }
}
