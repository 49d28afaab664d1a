//! The agent's side of tasks (`replica ──[ActRequest]──▶ [act] ──kube-rs──▶
//! member`, then `──[ActReply]──▶ replica`): a request is run only when the
//! hub key signed it for this member, recently; the work is the tasks
//! module's, with the agent's own credentials. Progress is followed by the
//! replica that runs the task, from the documents the agent publishes.

use std::sync::Arc;

use chrono::Utc;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::scale::agents::wire::{self, ActReply};

/// What the responder needs.
pub(super) struct Responder {
    pub(super) client: async_nats::Client,
    pub(super) member: String,
    pub(super) kube: kube::Client,
    /// The replicas' public key; None: every request is refused.
    pub(super) hub_key: Option<Arc<nkeys::KeyPair>>,
    /// The member's documents as this agent computes them: what a task
    /// acts on is read here, not taken from the request.
    pub(super) hub: Arc<crate::hub::Hub>,
    /// How the member's custom workloads are read (its pipeline's rules).
    pub(super) rules: Arc<crate::status::rules::HealthRules>,
    /// Signatures of the requests believed in the last [`wire::REQUEST_WINDOW`]:
    /// one seen again (a replay) is refused.
    pub(super) answered:
        parking_lot::Mutex<std::collections::HashMap<String, chrono::DateTime<Utc>>>,
}

impl Responder {
    /// Answers requests until `stop`; each runs on its own task.
    pub(super) async fn run(self, stop: CancellationToken) {
        let subject = wire::act_subject(&self.member);
        let what = "take task requests";
        let Some(mut requests) =
            super::control::subscribe(&self.client, &subject, what, &stop).await
        else {
            return;
        };
        let this = Arc::new(self);
        loop {
            let message = tokio::select! {
                () = stop.cancelled() => return,
                message = requests.next() => message,
            };
            let Some(message) = message else { return };
            let Some(reply) = message.reply.clone() else {
                continue;
            };
            let this = this.clone();
            tokio::spawn(async move {
                let answer = this.answer(&message).await;
                let payload = serde_json::to_vec(&answer).expect("an answer serializes");
                if let Err(e) = this.client.publish(reply, payload.into()).await {
                    tracing::warn!(cause = %e, "a task request's answer could not be sent");
                }
            });
        }
    }

    async fn answer(&self, message: &async_nats::Message) -> ActReply {
        let refused = |reason: &str, message: String| ActReply::Refused {
            reason: reason.into(),
            message,
        };
        let Some(hub_key) = &self.hub_key else {
            return refused(
                "AgentRefused",
                format!(
                    "the agent of {} runs no tasks: it was started without --hub-key",
                    self.member
                ),
            );
        };
        let signature = wire::signature_of(message);
        let now = Utc::now();
        let request = match wire::admit_request(
            hub_key,
            &self.member,
            message.subject.as_str(),
            &message.payload,
            signature,
            now,
        ) {
            Ok(request) => request,
            Err(refusal) => {
                tracing::warn!(reason = refusal.label(), "a task request was not believed");
                return refused(
                    "AgentRefused",
                    format!(
                        "the agent of {} did not believe the request: {}",
                        self.member,
                        refusal.label()
                    ),
                );
            }
        };
        // Single use: within its window a request is believed once.
        let key = signature
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .unwrap_or_default();
        {
            let mut answered = self.answered.lock();
            answered.retain(|_, at| now - *at <= wire::REQUEST_WINDOW * 2);
            if answered.insert(key, request.at).is_some() {
                tracing::warn!("a task request was seen again (a replay): refused");
                return refused(
                    "AgentRefused",
                    format!(
                        "the agent of {} has answered this request already",
                        self.member
                    ),
                );
            }
        }
        match crate::tasks::act_for_hub(
            &self.member,
            &self.kube,
            &self.hub,
            &self.rules,
            request.body,
        )
        .await
        {
            Ok(plan) => ActReply::Done(plan),
            Err((reason, message)) => ActReply::Refused { reason, message },
        }
    }
}
