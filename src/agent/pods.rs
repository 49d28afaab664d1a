//! Pods on demand in an agent (`replica ──[PodsWanted, signed]──▶ [pods]
//! ──▶ the member's pod and event watches`). With `podWatch.onDemand` the
//! agent starts without its member's Pods and Warning events and watches
//! them while the hub says some client looks at the member's apps (the
//! hub applies the linger). A word is believed when the hub key signed it
//! for this member, within [`wire::REQUEST_WINDOW`] of the agent's clock,
//! and no earlier than the last one believed from the same replica (a new
//! owner, whose clock may be behind, is believed at once). docs/AGENT.md,
//! "Pods on demand".

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::pipeline::Pipeline;
use crate::scale::RejectionLog;
use crate::scale::agents::wire::{self, PodsWanted, Refusal};

/// What the follower needs.
pub(super) struct Follower {
    pub(super) client: async_nats::Client,
    pub(super) member: String,
    /// The replicas' public key.
    pub(super) hub_key: Arc<nkeys::KeyPair>,
    /// The agent's pipeline, running the member.
    pub(super) pipeline: Arc<Pipeline>,
}

/// The last word believed (who said it, when), to refuse an older one of
/// the same replica after it.
#[derive(Debug, Default)]
pub(super) struct Heard {
    last: Option<(String, DateTime<Utc>)>,
}

impl Heard {
    /// The hub's word `payload` on `subject` (signed `signature`) for
    /// `member`, checked with `hub` at `now`: believed (and then the
    /// latest), or why not (None: older than one believed already).
    pub(super) fn admit(
        &mut self,
        hub: &nkeys::KeyPair,
        member: &str,
        subject: &str,
        payload: &[u8],
        signature: Option<&[u8]>,
        now: DateTime<Utc>,
    ) -> Result<Option<PodsWanted>, Refusal> {
        let word = wire::admit_pods(hub, member, subject, payload, signature, now)?;
        let older =
            |(replica, at): &(String, DateTime<Utc>)| *replica == word.replica && word.at < *at;
        if self.last.as_ref().is_some_and(older) {
            return Ok(None);
        }
        self.last = Some((word.replica.clone(), word.at));
        Ok(Some(word))
    }
}

impl Follower {
    /// Follows the hub's word until `stop`.
    pub(super) async fn run(self, stop: CancellationToken) {
        let subject = wire::pods_subject(&self.member);
        let what = "hear the hub on pods";
        let Some(mut words) = super::control::subscribe(&self.client, &subject, what, &stop).await
        else {
            return;
        };
        let mut heard = Heard::default();
        let mut rejections = RejectionLog::default();
        let mut wanted = None;
        loop {
            let message = tokio::select! {
                () = stop.cancelled() => return,
                message = words.next() => message,
            };
            let Some(message) = message else { return };
            let signature = wire::signature_of(&message);
            let word = heard.admit(
                &self.hub_key,
                &self.member,
                message.subject.as_str(),
                &message.payload,
                signature,
                Utc::now(),
            );
            match word {
                Ok(Some(word)) => {
                    if wanted != Some(word.wanted) {
                        tracing::info!(member = %self.member, wanted = word.wanted, "the hub says whether a client looks at the member's apps: pods and events watched accordingly");
                        wanted = Some(word.wanted);
                    }
                    self.pipeline.want_pods(&self.member, word.wanted).await;
                }
                Ok(None) => {}
                Err(why) => {
                    if let Some(more) = rejections.note(Instant::now().into_std()) {
                        tracing::warn!(%subject, reason = why.label(), rejected_since_last_line = more, "a word on pods was not believed: not signed by the hub key for this member, or not recent");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_older_than_one_believed_is_ignored() {
        let hub = crate::scale::SigningKey::from_bytes(&[7u8; 32])
            .unwrap()
            .hub_key();
        let public = wire::hub_public_key(&hub.public_key()).unwrap();
        let subject = wire::pods_subject("a");
        let now = Utc::now();
        let said_by = |replica: &str, wanted: bool, seconds: i64| {
            let word = PodsWanted {
                member: "a".into(),
                wanted,
                replica: replica.into(),
                at: now + chrono::TimeDelta::seconds(seconds),
            };
            let payload = serde_json::to_vec(&word).unwrap();
            let signature = wire::sign_pods(&hub, &subject, &payload);
            (payload, signature)
        };
        let said = |wanted: bool, seconds: i64| said_by("r1", wanted, seconds);
        let mut heard = Heard::default();
        let mut hear = |(payload, signature): (Vec<u8>, String)| {
            heard
                .admit(
                    &public,
                    "a",
                    &subject,
                    &payload,
                    Some(signature.as_bytes()),
                    now,
                )
                .map(|w| w.map(|w| w.wanted))
        };
        // (wanted, seconds after now, believed)
        assert_eq!(hear(said(true, 0)), Ok(Some(true)));
        assert_eq!(hear(said(false, 10)), Ok(Some(false)));
        assert_eq!(hear(said(true, 5)), Ok(None), "older than the last");
        assert_eq!(hear(said(true, 10)), Ok(Some(true)), "as recent");
        // A new owner whose clock is behind is believed, then followed.
        assert_eq!(hear(said_by("r2", false, 2)), Ok(Some(false)));
        assert_eq!(hear(said_by("r2", true, 1)), Ok(None));
        assert_eq!(hear(said_by("r2", true, 3)), Ok(Some(true)));
        assert_eq!(
            hear(said(true, 3600)),
            Err(Refusal::Expired),
            "too far ahead"
        );
        let (payload, _) = said(false, 20);
        assert_eq!(
            heard.admit(&public, "a", &subject, &payload, None, now),
            Err(Refusal::Unsigned)
        );
    }
}
