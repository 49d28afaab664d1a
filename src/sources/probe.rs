//! The periodic probe of a member apiserver: `GET /readyz` (falling back to
//! `/version` where `/readyz` is not served), with a timeout and the
//! latency measured. Emits one observation per probe, and counts the times
//! the member answers again after failing, so failed watches retry at once.

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::SourceConfig;
use crate::classify;
use crate::engine::Observation;
use crate::status::cluster::{ClusterInput, ProbeFailure};

async fn get(client: &kube::Client, path: &str) -> Result<String, kube::Error> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request_text(request).await
}

/// One probe: ready?, and the server version when not yet known.
pub(crate) async fn probe_once(
    client: &kube::Client,
    timeout: Duration,
    want_version: bool,
) -> ClusterInput {
    let started = Instant::now();
    let attempt = async {
        match get(client, "/readyz").await {
            Ok(_) => {}
            // Some clusters do not serve /readyz to this identity: /version still proves liveness.
            Err(kube::Error::Api(s)) if s.code == 404 => {
                get(client, "/version").await?;
            }
            Err(e) => return Err(e),
        }
        if want_version {
            let text = get(client, "/version").await?;
            let version = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["gitVersion"].as_str().map(str::to_string));
            return Ok(version);
        }
        Ok(None)
    };
    let result = tokio::time::timeout(timeout, attempt).await;
    let latency_ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(Ok(version)) => ClusterInput::ProbeSucceeded {
            latency_ms,
            version,
        },
        Ok(Err(err)) => {
            let (failure, message) = classify::probe_failure(&err);
            ClusterInput::ProbeFailed {
                failure,
                message,
                latency_ms: Some(latency_ms),
            }
        }
        Err(_) => ClusterInput::ProbeFailed {
            failure: ProbeFailure::Timeout,
            message: format!("no answer within {} ms", timeout.as_millis()),
            latency_ms: None,
        },
    }
}

/// Probes until shutdown, every `config.probe_interval`. A success after a
/// failure counts up `recoveries`, after the engine was told.
pub(crate) async fn run(
    cluster: String,
    client: kube::Client,
    config: SourceConfig,
    tx: mpsc::Sender<Observation>,
    recoveries: watch::Sender<u64>,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(config.probe_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut have_version = false;
    let mut failing = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let input = tokio::select! {
            _ = shutdown.cancelled() => return,
            input = probe_once(&client, config.probe_timeout, !have_version) => input,
        };
        if let ClusterInput::ProbeSucceeded {
            version: Some(_), ..
        } = &input
        {
            have_version = true;
        }
        let succeeded = matches!(input, ClusterInput::ProbeSucceeded { .. });
        if tx
            .send(Observation::Cluster {
                cluster: cluster.clone(),
                input,
            })
            .await
            .is_err()
        {
            return;
        }
        if succeeded && failing {
            recoveries.send_modify(|n| *n += 1);
        }
        failing = !succeeded;
    }
}
