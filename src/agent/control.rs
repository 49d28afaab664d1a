//! The hub's subjects an agent listens on (`replica ──▶
//! kube-pulse.agentctl.{member}.… ──▶ [act, pods]`): subscribing to one
//! while NATS cannot be reached yet.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Subscribes to `subject` (trying again every second while NATS refuses,
/// saying so as `what`), or None once `stop` is cancelled.
pub(super) async fn subscribe(
    client: &async_nats::Client,
    subject: &str,
    what: &str,
    stop: &CancellationToken,
) -> Option<async_nats::Subscriber> {
    loop {
        match client.subscribe(subject.to_string()).await {
            Ok(subscriber) => return Some(subscriber),
            Err(e) => {
                tracing::warn!(%subject, cause = %e, "cannot {what} yet");
                tokio::select! {
                    () = stop.cancelled() => return None,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}
