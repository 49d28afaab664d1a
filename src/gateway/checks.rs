//! The readiness checks that read the running gateway, mapped from the
//! seed's components: `Server` (the engine that feeds the hub runs and keeps
//! up, and the task store answers) and `Syncer` (every member cluster has
//! answered and its watches run; a member that is down is reported in its
//! status, not here); and [`health_for`], which puts them beside the checks
//! of src/health/ (`pipeline, tasks ──▶ [checks] ──▶ /readyz`).

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::config::HealthSettings;
use crate::health::checks::{Ping, Storage};
use crate::health::{Check, Health, Problem};
use crate::pipeline::Pipeline;
use crate::tasks::Tasks;

/// `Server`: the engine runs and its observation queue is not saturated,
/// and the task store answers.
pub(crate) struct Server {
    pub(crate) pipeline: Arc<Pipeline>,
    pub(crate) tasks: Option<Arc<Tasks>>,
}

impl Check for Server {
    fn name(&self) -> &str {
        "Server"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.pipeline.check_engine()?;
            match &self.tasks {
                Some(tasks) => tasks.check().await,
                None => Ok(()),
            }
        })
    }
}

/// `Syncer`: every member cluster has an answer and its watches run.
pub(crate) struct Syncer(pub(crate) Arc<Pipeline>);

impl Check for Syncer {
    fn name(&self) -> &str {
        "Syncer"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.0.check_syncer().await })
    }
    fn problems(&self) -> BoxFuture<'_, Result<(), Vec<Problem>>> {
        Box::pin(async move {
            let problems = self.0.syncer_problems().await;
            if problems.is_empty() {
                return Ok(());
            }
            Err(problems
                .into_iter()
                .map(|(cluster, text)| Problem {
                    cluster: Some(cluster),
                    text,
                })
                .collect())
        })
    }
}

/// Health of a gateway over `pipeline`: `/livez` pings, `/readyz` checks
/// Ping, Server (engine and task store), Syncer and Storage.
pub fn health_for(
    pipeline: &Arc<Pipeline>,
    tasks: Option<Arc<Tasks>>,
    settings: HealthSettings,
) -> Health {
    Health {
        livez: vec![Arc::new(Ping)],
        readyz: vec![
            Arc::new(Ping),
            Arc::new(Server {
                pipeline: pipeline.clone(),
                tasks,
            }),
            Arc::new(Syncer(pipeline.clone())),
            Arc::new(Storage::new(settings.storage)),
        ],
        format: settings.format,
        timeout: std::time::Duration::from_secs(5),
    }
}
