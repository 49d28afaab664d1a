//! The task board: where every task revision is written and announced
//! (`service / executor ──▶ [board] ──▶ store`, then `──▶ hub: tasks/{id}`
//! and `──Observation::Task──▶ engine ──▶ hub: apps/…`). The task service
//! and the built-in executor both write through it, one write at a time,
//! so subscribers see a task's revisions in order.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::model::Task;
use super::store::{StoreError, TaskStore};
use crate::engine::Observation;
use crate::error::{Error, Result};
use crate::hub::Hub;
use crate::protocol::topic;

/// The store of tasks and the places each revision is published to.
pub(super) struct Board {
    pub(super) store: Arc<dyn TaskStore>,
    pub(super) hub: Arc<Hub>,
    engine: mpsc::Sender<Observation>,
    /// Serializes store writes with their publication, so subscribers see
    /// a task's revisions in order.
    pub(super) writes: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Board")
            .field("store", &self.store.name())
            .finish_non_exhaustive()
    }
}

/// The API error a store error stands for.
pub(super) fn store_error(e: StoreError) -> Error {
    match e {
        StoreError::ActiveTask { .. } | StoreError::Stale(_) | StoreError::Exists(_) => {
            Error::Conflict(e.to_string())
        }
        StoreError::NotFound(_) => Error::NotFound(e.to_string()),
        StoreError::Full(_) | StoreError::Backend(_) => Error::Unavailable(e.to_string()),
    }
}

impl Board {
    /// A board over `store`, publishing into `hub` and telling the engine
    /// through `engine`.
    pub(super) fn new(
        store: Arc<dyn TaskStore>,
        hub: Arc<Hub>,
        engine: mpsc::Sender<Observation>,
    ) -> Self {
        Self {
            store,
            hub,
            engine,
            writes: tokio::sync::Mutex::new(()),
        }
    }

    /// The stored task `id`, or 404.
    pub(super) async fn get(&self, id: &str) -> Result<Task> {
        self.store
            .get(id)
            .await
            .map_err(store_error)?
            .ok_or_else(|| Error::NotFound(format!("task {id:?} does not exist")))
    }

    /// Read, change, store and publish one task. `change` sees the stored
    /// task; a concurrent change elsewhere (another replica) retries.
    pub(super) async fn write(
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
    pub(super) async fn publish(&self, task: &Task) {
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
}
