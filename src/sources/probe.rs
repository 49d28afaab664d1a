//! The periodic probe of a member apiserver: `GET /readyz` (falling back to
//! `/version` where `/readyz` is not served), with a timeout and the
//! latency measured. Emits one observation per probe, and counts the times
//! the member answers again after failing, so failed watches retry at once.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::SourceConfig;
use crate::classify;
use crate::engine::Observation;
use crate::status::cluster::{ClusterInput, ProbeFailure};

/// The most of a probe's answer that is read: an apiserver's `/readyz`,
/// `/livez` and `/version` answers are a few hundred bytes; an endpoint
/// that sends more is not an apiserver worth reading further.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The error for an answer longer than [`MAX_ANSWER_BYTES`], in words of
/// kube-pulse's own (a `Status`, so its message is shown).
fn too_long(path: &str, status: http::StatusCode) -> kube::Error {
    let message = format!(
        "the answer to {path} is over {} KiB; not read further",
        MAX_ANSWER_BYTES / 1024
    );
    kube::Error::Api(
        kube::core::Status::failure(&message, "AnswerTooLong")
            .with_code(status.as_u16())
            .boxed(),
    )
}

async fn get(client: &kube::Client, path: &str) -> Result<String, kube::Error> {
    get_dated(client, path).await.map(|(text, _)| text)
}

/// GETs `path`: its body and the member's clock (its `Date` header), with
/// errors as kube-rs reports them (`Error::Api` with the `Status`).
async fn get_dated(
    client: &kube::Client,
    path: &str,
) -> Result<(String, Option<DateTime<Utc>>), kube::Error> {
    use http_body_util::BodyExt;
    let request = http::Request::get(path)
        .body(kube::client::Body::empty())
        .map_err(kube::Error::HttpError)?;
    let response = client.send(request).await?;
    let status = response.status();
    let date = response
        .headers()
        .get(http::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| DateTime::parse_from_rfc2822(v).ok())
        .map(|d| d.with_timezone(&Utc));
    let bytes = match http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(too_long(path, status));
        }
        Err(e) => return Err(kube::Error::Service(e)),
    };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    // Anything but a success, a redirect included (it is not followed: an
    // apiserver answers its own paths).
    if !status.is_success() {
        let api = serde_json::from_str::<kube::core::Status>(&text).unwrap_or_else(|_| {
            kube::core::Status::failure(text.trim(), "Failed to parse error data")
                .with_code(status.as_u16())
        });
        return Err(kube::Error::Api(api.boxed()));
    }
    Ok((text, date))
}

/// The member's clock minus ours, in whole seconds, from a `Date` header
/// read at `received` (the header has a resolution of one second).
pub(crate) fn clock_skew(date: DateTime<Utc>, received: DateTime<Utc>) -> i64 {
    (date - received).num_milliseconds().div_euclid(1000)
        + i64::from((date - received).num_milliseconds().rem_euclid(1000) >= 500)
}

/// The `gitVersion` of a `/version` answer.
fn git_version(text: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v["gitVersion"].as_str().map(str::to_string))
}

/// One probe: ready?, and the server version while `want_version`. The
/// timeout bounds the readiness answer (`/readyz`, or where that is not
/// served `/readyz` and `/version` together), and the version's request,
/// made only once the member answered, on its own: a member that answers
/// each in time is not a member that timed out. `want_version` is cleared
/// once the version is read or refused (a 4xx: this identity may not read
/// it); one that timed out or failed otherwise is asked for again at the
/// next probe.
pub(crate) async fn probe_once(
    client: &kube::Client,
    timeout: Duration,
    want_version: &mut bool,
) -> ClusterInput {
    let started = Instant::now();
    let ready = async {
        match get_dated(client, "/readyz").await {
            Ok((_, date)) => Ok((date, None)),
            // Some clusters do not serve /readyz to this identity: /version still proves liveness.
            Err(kube::Error::Api(s)) if s.code == 404 => {
                let (text, date) = get_dated(client, "/version").await?;
                Ok((date, Some(text)))
            }
            Err(e) => Err(e),
        }
    };
    let result = tokio::time::timeout(timeout, ready).await;
    let latency_ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(Ok((date, version_text))) => {
            let clock_skew_seconds = date.map(|d| clock_skew(d, Utc::now()));
            let version = match version_text {
                _ if !*want_version => None,
                Some(text) => {
                    *want_version = false;
                    git_version(&text)
                }
                None => match tokio::time::timeout(timeout, get(client, "/version")).await {
                    Ok(Ok(text)) => {
                        *want_version = false;
                        git_version(&text)
                    }
                    Ok(Err(kube::Error::Api(s))) if (400..500).contains(&s.code) => {
                        *want_version = false;
                        None
                    }
                    _ => None,
                },
            };
            ClusterInput::ProbeSucceeded {
                latency_ms,
                version,
                clock_skew_seconds,
            }
        }
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
    // Its turn among the connections the gateway starts (src/sources/pacer.rs).
    tokio::select! {
        _ = shutdown.cancelled() => return,
        _ = config.pacer.turn() => {}
    }
    let mut ticker = tokio::time::interval(config.probe_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut want_version = true;
    let mut failing = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let input = tokio::select! {
            _ = shutdown.cancelled() => return,
            input = probe_once(&client, config.probe_timeout, &mut want_version) => input,
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_skew_rounds_to_the_header_resolution() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let received = at("2026-12-03T10:00:00.400Z");
        // (Date header, skew)
        let cases = [
            ("2026-12-03T10:00:00Z", 0),
            ("2026-12-03T10:02:00Z", 120),
            ("2026-12-03T09:58:30Z", -90),
            ("2026-12-03T10:00:01Z", 1),
        ];
        for (date, want) in cases {
            assert_eq!(clock_skew(at(date), received), want, "{date}");
        }
    }

    /// The timeout bounds each answer, not their sum: a member answering
    /// `/readyz` and then `/version` each in time is up, with its version.
    #[tokio::test]
    async fn a_member_answering_each_request_in_time_is_up_with_its_version() {
        let sim = kube_pulse_sim::SimCluster::start(Default::default())
            .await
            .unwrap();
        let client = sim.client();
        let timeout = Duration::from_millis(800);
        // (latency of every answer, the phase the probe finds)
        let cases = [(500, true), (1_000, false)];
        for (latency_ms, up) in cases {
            sim.set_faults(kube_pulse_sim::faults::Faults {
                latency_ms,
                ..Default::default()
            });
            let mut want_version = true;
            match probe_once(&client, timeout, &mut want_version).await {
                ClusterInput::ProbeSucceeded { version, .. } => {
                    assert!(up, "{latency_ms} ms: up");
                    assert!(
                        version.is_some_and(|v| v.starts_with('v')),
                        "{latency_ms} ms"
                    );
                    assert!(!want_version, "read once, not asked again");
                }
                ClusterInput::ProbeFailed { failure, .. } => {
                    assert!(!up, "{latency_ms} ms: {failure:?}");
                    assert_eq!(failure, ProbeFailure::Timeout);
                }
                other => panic!("{other:?}"),
            }
        }
        // A member that refuses this identity its version is up, and is
        // not asked for it again at every probe.
        sim.set_faults(kube_pulse_sim::faults::Faults {
            status: Some(403),
            status_path_prefix: Some("/version".into()),
            ..Default::default()
        });
        let mut want_version = true;
        let input = probe_once(&client, timeout, &mut want_version).await;
        assert!(
            matches!(input, ClusterInput::ProbeSucceeded { version: None, .. }),
            "{input:?}"
        );
        assert!(!want_version);
    }

    /// A redirect is not followed, and not a ready apiserver.
    #[tokio::test]
    async fn a_member_redirecting_its_readiness_is_not_ready() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let answer = "HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\ncontent-length: 0\r\n\r\n";
                let _ = socket.write_all(answer.as_bytes()).await;
            }
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let input = probe_once(&client, Duration::from_secs(2), &mut true).await;
        match input {
            ClusterInput::ProbeFailed {
                failure, message, ..
            } => {
                assert_eq!(failure, ProbeFailure::ApiServerNotReady);
                assert!(message.contains("302"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
