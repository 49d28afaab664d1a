//! The engine's task (`sources ──channel──▶ [engine task] ──▶ hub`): one
//! loop that applies each observation as it arrives and expires gone apps
//! on a timer, beside the summary topics' task.

use std::sync::Arc;

use chrono::Utc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::observation::Observation;
use super::state::Engine;
use super::summaries;
use crate::hub::Hub;

/// Runs the engine until shutdown or until every source is gone.
pub(crate) async fn run(
    mut engine: Engine,
    served: Arc<Hub>,
    mut rx: mpsc::Receiver<Observation>,
    shutdown: CancellationToken,
) {
    // The summary topics: kept live beside the engine, ended with it, over
    // the documents clients are served (every member's, with a stream of
    // changes between the engine and them).
    let summaries_stop = shutdown.child_token();
    let summaries = tokio::spawn(summaries::run(served, summaries_stop.clone()));
    let mut expiry = tokio::time::interval(engine.expiry_period());
    expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A second's transitions past the line budget are summed up as it ends.
    let mut summing = tokio::time::interval(std::time::Duration::from_secs(1));
    summing.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = expiry.tick() => engine.expire(Utc::now()),
            _ = summing.tick() => engine.transitions.roll(std::time::Instant::now()),
            o = rx.recv() => match o {
                Some(o) => engine.apply(o, Utc::now()),
                None => break,
            },
        }
    }
    summaries_stop.cancel();
    let _ = summaries.await;
}
