//! Health beside the data flow: pluggable [`Check`]s, the [`Health`] of each
//! endpoint, and the two output formats over the same checks: Karpor's (the
//! seed's expected output, the default on `/livez` and `/readyz`; `format:
//! karpor`) and the Kubernetes apiserver's, byte for byte (always on
//! `/healthz`; on all three with `format: kubernetes`). The routes that
//! serve them (`/livez`, `/readyz`, `/healthz`, `/{endpoint}/{check}`) are
//! src/http/health.rs.

pub mod checks;
mod format;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

pub(crate) use format::Query;
pub use format::{Format, Outcome};

/// One health check: a name and an async probe that explains a failure.
pub trait Check: Send + Sync {
    /// Shown as `[+] Name ok` (Karpor format) or `[+]name ok` (Kubernetes format).
    fn name(&self) -> &str;
    /// Ok, or why not (shown only by `/readyz/{name}` and the log).
    fn check(&self) -> BoxFuture<'_, Result<(), String>>;
    /// Ok, or why not in parts, each with the cluster it names, so that
    /// `/readyz/{name}` shows a caller only the clusters it may see. By
    /// default the whole reason of [`Check::check`], naming no cluster.
    fn problems(&self) -> BoxFuture<'_, Result<(), Vec<Problem>>> {
        Box::pin(async move {
            self.check().await.map_err(|text| {
                vec![Problem {
                    cluster: None,
                    text,
                }]
            })
        })
    }
}

/// One part of a failed check's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The member cluster it is about, if any: shown only to callers that
    /// may see that cluster.
    pub cluster: Option<String>,
    /// What is wrong (names the cluster, if any).
    pub text: String,
}

/// The checks of each endpoint and how they are shown.
pub struct Health {
    /// Checks of `/livez`: only what a restart would fix.
    pub livez: Vec<Arc<dyn Check>>,
    /// Checks of `/readyz` and `/healthz`: whether to send traffic here.
    pub readyz: Vec<Arc<dyn Check>>,
    /// Format of `/livez` and `/readyz` (`/healthz` is always Kubernetes).
    pub format: Format,
    /// Each check gets at most this long.
    pub timeout: Duration,
}

// By hand: checks are trait objects; their names say what runs.
impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |checks: &[Arc<dyn Check>]| {
            checks
                .iter()
                .map(|c| c.name().to_owned())
                .collect::<Vec<_>>()
        };
        f.debug_struct("Health")
            .field("livez", &names(&self.livez))
            .field("readyz", &names(&self.readyz))
            .field("format", &self.format)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Health {
    /// Runs `checks` concurrently, each bounded by the timeout, in order.
    pub async fn run(&self, checks: &[Arc<dyn Check>]) -> Vec<Outcome> {
        let runs = checks.iter().map(|c| async move {
            let result = match tokio::time::timeout(self.timeout, c.check()).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
            };
            if let Err(reason) = &result {
                tracing::warn!(check = c.name(), %reason, "health check failed");
            }
            Outcome {
                name: c.name().to_string(),
                result,
            }
        });
        futures::future::join_all(runs).await
    }
}
