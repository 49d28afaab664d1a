//! What agents and replicas say to each other over NATS (`agent
//! ──[Report, signed]──▶ stream KUBE_PULSE_AGENTS ──▶ link`, `replica
//! ──[ActRequest, signed]──▶ agent ──[ActReply]──▶ replica`): subjects,
//! messages and their Ed25519 signatures. Pure: no client, no clock.
//!
//! An agent signs every report with its identity, an nkey user key pair
//! (`SU…` seed, `U…` public key); the hub checks it against the public key
//! its configuration names for the member, so a report on a member's
//! subjects from anyone else (a client with broader NATS rights included)
//! is not believed. Replicas sign task requests with the hub key derived
//! from their signing key ([`crate::scale::SigningKey::hub_key`]), which the
//! agent checks with the public key it is given (`--hub-key`).
//!
//! A signature covers a label, the subject and the payload, each
//! length-prefixed, so that no message passes for another kind or subject.

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Prefix of the subjects agents publish on.
pub const PREFIX: &str = "kube-pulse.agents";
/// Prefix of the subjects agents receive requests on.
pub const CONTROL_PREFIX: &str = "kube-pulse.agentctl";
/// The message header of a report's or a request's signature.
pub const SIGNATURE_HEADER: &str = "Kube-Pulse-Agent-Signature";

const REPORT: &str = "kube-pulse agent report v1";
const REQUEST: &str = "kube-pulse hub request v1";
const PODS: &str = "kube-pulse hub pods v1";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The stream agents publish into, beside the relay's stream `relay`.
pub fn stream_of(relay: &str) -> String {
    format!("{relay}_AGENTS")
}

/// Every subject of `member`'s agent (`kube-pulse.agents.{member}.>`).
pub fn member_subjects(member: &str) -> String {
    format!("{PREFIX}.{member}.>")
}

/// The subject of `member`'s document `topic`: the topic's tokens as on the
/// relay's stream, under `kube-pulse.agents.{member}.docs`.
pub fn doc_subject(member: &str, topic: &str) -> String {
    let relay = crate::scale::subject::of_topic(topic);
    let tokens = relay
        .strip_prefix(crate::scale::subject::PREFIX)
        .unwrap_or(&relay);
    format!("{PREFIX}.{member}.docs{tokens}")
}

/// The subject of `member`'s heartbeats.
pub fn heartbeat_subject(member: &str) -> String {
    format!("{PREFIX}.{member}.heartbeat")
}

/// The subject `member`'s agent takes task requests on.
pub fn act_subject(member: &str) -> String {
    format!("{CONTROL_PREFIX}.{member}.act")
}

/// The subject `member`'s agent is told on whether its pods are wanted.
pub fn pods_subject(member: &str) -> String {
    format!("{CONTROL_PREFIX}.{member}.pods")
}

/// The inbox prefix of `member`'s agent: replies (the stream's
/// acknowledgements) come to its own inboxes only.
pub fn inbox_prefix(member: &str) -> String {
    format!("_INBOX_{member}")
}

/// One message of an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The member it is about.
    pub member: String,
    /// The agent's session: its start, in milliseconds since the epoch; a
    /// later session wins.
    pub session: u64,
    /// Counts the session's messages from 1: an older one is ignored.
    pub seq: u64,
    /// What it says.
    #[serde(flatten)]
    pub body: Body,
}

/// What a report says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Body {
    /// A document of the member (None: its topic was removed).
    Doc {
        /// The topic, one of the member's.
        topic: String,
        /// The whole document.
        doc: Option<Value>,
    },
    /// The agent runs.
    Heartbeat {
        /// The agent's kube-pulse version.
        version: String,
        /// Every document the agent holds was sent before this heartbeat.
        synced: bool,
        /// How many topics the agent holds.
        topics: usize,
    },
}

impl Report {
    /// The subject this report is published on.
    pub fn subject(&self) -> String {
        match &self.body {
            Body::Doc { topic, .. } => doc_subject(&self.member, topic),
            Body::Heartbeat { .. } => heartbeat_subject(&self.member),
        }
    }
}

/// Why a report or a request was not believed: the label of
/// `kube_pulse_agent_rejected_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No signature header.
    Unsigned,
    /// A signature that is not the expected key's over these bytes.
    BadSignature,
    /// Not a report (or request) at all.
    Malformed,
    /// A report of another member, or on another subject than its own.
    WrongSubject,
    /// A request too old or too far in the future.
    Expired,
}

impl Refusal {
    /// The metric label and log field.
    pub fn label(self) -> &'static str {
        match self {
            Self::Unsigned => "unsigned",
            Self::BadSignature => "bad-signature",
            Self::Malformed => "malformed",
            Self::WrongSubject => "wrong-subject",
            Self::Expired => "expired",
        }
    }
}

/// The signature a message carries in [`SIGNATURE_HEADER`], if any.
pub fn signature_of(message: &async_nats::Message) -> Option<&[u8]> {
    let headers = message.headers.as_ref()?;
    Some(headers.get(SIGNATURE_HEADER)?.as_str().as_bytes())
}

fn signed_bytes(label: &str, subject: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(label.len() + subject.len() + payload.len() + 16);
    out.extend_from_slice(label.as_bytes());
    for part in [subject.as_bytes(), payload] {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

fn sign(key: &nkeys::KeyPair, label: &str, subject: &str, payload: &[u8]) -> String {
    let signature = key
        .sign(&signed_bytes(label, subject, payload))
        .expect("a key pair with its seed signs");
    B64.encode(signature)
}

fn check(
    key: &nkeys::KeyPair,
    label: &str,
    subject: &str,
    payload: &[u8],
    signature: Option<&[u8]>,
) -> Result<(), Refusal> {
    let signature = signature.ok_or(Refusal::Unsigned)?;
    let signature = B64.decode(signature).map_err(|_| Refusal::BadSignature)?;
    key.verify(&signed_bytes(label, subject, payload), &signature)
        .map_err(|_| Refusal::BadSignature)
}

/// The signature of a report published on `subject`, for [`SIGNATURE_HEADER`].
pub fn sign_report(identity: &nkeys::KeyPair, subject: &str, payload: &[u8]) -> String {
    sign(identity, REPORT, subject, payload)
}

/// The report of `member` on `subject` if `agent` (its public key) signed
/// it there and it is one of `member`'s.
pub fn admit_report(
    agent: &nkeys::KeyPair,
    member: &str,
    subject: &str,
    payload: &[u8],
    signature: Option<&[u8]>,
) -> Result<Report, Refusal> {
    check(agent, REPORT, subject, payload, signature)?;
    let report: Report = serde_json::from_slice(payload).map_err(|_| Refusal::Malformed)?;
    if report.member != member || report.subject() != subject {
        return Err(Refusal::WrongSubject);
    }
    Ok(report)
}

/// A replica's request that an agent act for a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActRequest {
    /// The member whose agent is asked.
    pub member: String,
    /// When the replica asked (its clock): an agent refuses requests more
    /// than [`REQUEST_WINDOW`] away from its own clock.
    pub at: DateTime<Utc>,
    /// What the tasks module asks (its own format).
    pub body: Value,
}

/// How far a request's time may be from the agent's clock.
pub const REQUEST_WINDOW: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// The signature of a request on `subject`, with the hub key.
pub fn sign_request(hub: &nkeys::KeyPair, subject: &str, payload: &[u8]) -> String {
    sign(hub, REQUEST, subject, payload)
}

/// The request on `subject` for `member`, if the hub key `hub` signed it
/// there and it is recent at `now`.
pub fn admit_request(
    hub: &nkeys::KeyPair,
    member: &str,
    subject: &str,
    payload: &[u8],
    signature: Option<&[u8]>,
    now: DateTime<Utc>,
) -> Result<ActRequest, Refusal> {
    let signed = Signed {
        label: REQUEST,
        subject,
        payload,
        signature,
    };
    signed.admit_from_hub(hub, member, act_subject(member), now, |r: &ActRequest| {
        (&r.member, r.at)
    })
}

/// What the hub tells a push member's agent with `podWatch.onDemand`:
/// whether some client looks at the member's apps (or did within the
/// linger), so that the agent watches the member's pods and events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodsWanted {
    /// The member whose agent is told.
    pub member: String,
    /// Whether its pods and events are wanted.
    pub wanted: bool,
    /// The replica that says it (the member's owner).
    pub replica: String,
    /// When the replica said it (its clock): an agent believes it within
    /// [`REQUEST_WINDOW`] of its own clock, and not after a later word of
    /// the same replica.
    pub at: DateTime<Utc>,
}

/// The signature of a [`PodsWanted`] on `subject`, with the hub key.
pub fn sign_pods(hub: &nkeys::KeyPair, subject: &str, payload: &[u8]) -> String {
    sign(hub, PODS, subject, payload)
}

/// The hub's word on `member`'s pods on `subject`, if the hub key `hub`
/// signed it there and it is recent at `now`.
pub fn admit_pods(
    hub: &nkeys::KeyPair,
    member: &str,
    subject: &str,
    payload: &[u8],
    signature: Option<&[u8]>,
    now: DateTime<Utc>,
) -> Result<PodsWanted, Refusal> {
    let signed = Signed {
        label: PODS,
        subject,
        payload,
        signature,
    };
    signed.admit_from_hub(hub, member, pods_subject(member), now, |w: &PodsWanted| {
        (&w.member, w.at)
    })
}

/// A message as read: its kind's label, subject, payload and signature.
struct Signed<'a> {
    label: &'static str,
    subject: &'a str,
    payload: &'a [u8],
    signature: Option<&'a [u8]>,
}

impl Signed<'_> {
    /// The message, if the hub key `hub` signed it on `subject`, it is
    /// about `member` (as `about` reads it) on that member's own subject
    /// `expected`, and it was said (ditto) within [`REQUEST_WINDOW`] of `now`.
    fn admit_from_hub<T: serde::de::DeserializeOwned>(
        &self,
        hub: &nkeys::KeyPair,
        member: &str,
        expected: String,
        now: DateTime<Utc>,
        about: impl Fn(&T) -> (&str, DateTime<Utc>),
    ) -> Result<T, Refusal> {
        check(hub, self.label, self.subject, self.payload, self.signature)?;
        let message: T = serde_json::from_slice(self.payload).map_err(|_| Refusal::Malformed)?;
        let (of, at) = about(&message);
        if of != member || expected != self.subject {
            return Err(Refusal::WrongSubject);
        }
        if (at - now).abs() > REQUEST_WINDOW {
            return Err(Refusal::Expired);
        }
        Ok(message)
    }
}

/// An agent's answer to a request: what the tasks module returns, or why
/// the agent did not act.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ActReply {
    /// Acted: the tasks module's answer.
    Done(Value),
    /// Not acted: the request was refused (`reason` one word, then why).
    Refused {
        /// One CamelCase word.
        reason: String,
        /// What is wrong.
        message: String,
    },
}

pub use crate::names::agent_public_key as agent_key;

/// The hub's public key (`N…`), checked.
pub fn hub_public_key(public: &str) -> Result<nkeys::KeyPair, String> {
    crate::names::public_key(
        public,
        nkeys::KeyPairType::Server,
        "a hub key (N…, from `kube-pulse hub-key`)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(member: &str, body: Body) -> Report {
        Report {
            member: member.into(),
            session: 1_700_000_000_000,
            seq: 7,
            body,
        }
    }

    fn doc(topic: &str) -> Body {
        Body::Doc {
            topic: topic.into(),
            doc: Some(json!({"phase": "Running"})),
        }
    }

    #[test]
    fn subjects_are_the_members_own() {
        assert_eq!(
            doc_subject("edge-1", "apps/edge-1/shop/web"),
            "kube-pulse.agents.edge-1.docs.apps.edge-1.shop.web"
        );
        assert_eq!(
            doc_subject("e", "clusters/e/sync/apps/v1/deployments"),
            "kube-pulse.agents.e.docs.clusters.e.sync.apps.v1.deployments"
        );
        assert_eq!(heartbeat_subject("e"), "kube-pulse.agents.e.heartbeat");
        assert_eq!(member_subjects("e"), "kube-pulse.agents.e.>");
        assert_eq!(act_subject("e"), "kube-pulse.agentctl.e.act");
        assert_eq!(stream_of("KUBE_PULSE"), "KUBE_PULSE_AGENTS");
    }

    #[test]
    fn a_report_is_believed_from_its_agent_on_its_subject_only() {
        let agent = nkeys::KeyPair::new_user();
        let public = agent_key(&agent.public_key()).unwrap();
        let other = nkeys::KeyPair::new_user();
        let good = report("a", doc("apps/a/shop/web"));
        let payload = serde_json::to_vec(&good).unwrap();
        let subject = good.subject();
        let signature = sign_report(&agent, &subject, &payload);
        let admit = |subject: &str, payload: &[u8], signature: Option<&str>| {
            admit_report(&public, "a", subject, payload, signature.map(str::as_bytes))
        };
        assert_eq!(
            admit(&subject, &payload, Some(&signature)),
            Ok(good.clone())
        );
        // Unsigned, signed by another key, bytes changed, moved to another subject.
        assert_eq!(admit(&subject, &payload, None), Err(Refusal::Unsigned));
        let forged = sign_report(&other, &subject, &payload);
        assert_eq!(
            admit(&subject, &payload, Some(&forged)),
            Err(Refusal::BadSignature)
        );
        let mut changed = payload.clone();
        changed[10] ^= 1;
        assert_eq!(
            admit(&subject, &changed, Some(&signature)),
            Err(Refusal::BadSignature)
        );
        let elsewhere = doc_subject("a", "apps/a/shop/db");
        assert_eq!(
            admit(&elsewhere, &payload, Some(&signature)),
            Err(Refusal::BadSignature)
        );
        // Signed by the agent, but about another member or on another of its subjects.
        for (member, topic, subject) in [
            ("b", "apps/b/shop/web", doc_subject("b", "apps/b/shop/web")),
            ("a", "apps/a/shop/web", heartbeat_subject("a")),
        ] {
            let r = report(member, doc(topic));
            let payload = serde_json::to_vec(&r).unwrap();
            let signature = sign_report(&agent, &subject, &payload);
            assert_eq!(
                admit(&subject, &payload, Some(&signature)),
                Err(Refusal::WrongSubject),
                "{member} {subject}"
            );
        }
        let junk = b"{}";
        let signature = sign_report(&agent, &subject, junk);
        assert_eq!(
            admit(&subject, junk, Some(&signature)),
            Err(Refusal::Malformed)
        );
    }

    #[test]
    fn a_request_is_believed_from_the_hub_recently_only() {
        let signing = crate::scale::SigningKey::from_bytes(&[7u8; 32]).unwrap();
        let hub = signing.hub_key();
        assert!(hub.public_key().starts_with('N'));
        // Every replica with the same key derives the same hub key.
        let again = crate::scale::SigningKey::from_bytes(&[7u8; 32]).unwrap();
        assert_eq!(again.hub_key().public_key(), hub.public_key());
        let public = hub_public_key(&hub.public_key()).unwrap();
        let now = Utc::now();
        let request = ActRequest {
            member: "a".into(),
            at: now,
            body: json!({"task": "t1"}),
        };
        let payload = serde_json::to_vec(&request).unwrap();
        let subject = act_subject("a");
        let signature = sign_request(&hub, &subject, &payload);
        let admit = |member: &str, subject: &str, signature: Option<&str>, now| {
            admit_request(
                &public,
                member,
                subject,
                &payload,
                signature.map(str::as_bytes),
                now,
            )
        };
        assert_eq!(admit("a", &subject, Some(&signature), now), Ok(request));
        assert_eq!(admit("a", &subject, None, now), Err(Refusal::Unsigned));
        let other = crate::scale::SigningKey::from_bytes(&[8u8; 32]).unwrap();
        let forged = sign_request(&other.hub_key(), &subject, &payload);
        assert_eq!(
            admit("a", &subject, Some(&forged), now),
            Err(Refusal::BadSignature)
        );
        let later = now + chrono::TimeDelta::minutes(6);
        assert_eq!(
            admit("a", &subject, Some(&signature), later),
            Err(Refusal::Expired)
        );
        let to_b = act_subject("b");
        let signature_b = sign_request(&hub, &to_b, &payload);
        assert_eq!(
            admit("b", &to_b, Some(&signature_b), now),
            Err(Refusal::WrongSubject)
        );
    }

    #[test]
    fn the_hubs_word_on_pods_is_believed_from_the_hub_recently_only() {
        let hub = crate::scale::SigningKey::from_bytes(&[7u8; 32])
            .unwrap()
            .hub_key();
        let public = hub_public_key(&hub.public_key()).unwrap();
        let now = Utc::now();
        let word = PodsWanted {
            member: "a".into(),
            wanted: true,
            replica: "r1".into(),
            at: now,
        };
        let payload = serde_json::to_vec(&word).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&payload).unwrap()["wanted"],
            true
        );
        let subject = pods_subject("a");
        assert_eq!(subject, "kube-pulse.agentctl.a.pods");
        let signature = sign_pods(&hub, &subject, &payload);
        let admit = |member: &str, subject: &str, signature: &str, now| {
            admit_pods(
                &public,
                member,
                subject,
                &payload,
                Some(signature.as_bytes()),
                now,
            )
        };
        assert_eq!(admit("a", &subject, &signature, now), Ok(word));
        // A task request's signature is no word on pods, nor the reverse.
        let as_request = sign_request(&hub, &subject, &payload);
        assert_eq!(
            admit("a", &subject, &as_request, now),
            Err(Refusal::BadSignature)
        );
        let later = now + chrono::TimeDelta::minutes(6);
        assert_eq!(
            admit("a", &subject, &signature, later),
            Err(Refusal::Expired)
        );
        let on_act = act_subject("a");
        let signed_there = sign_pods(&hub, &on_act, &payload);
        assert_eq!(
            admit("a", &on_act, &signed_there, now),
            Err(Refusal::WrongSubject)
        );
        let to_b = pods_subject("b");
        let signature_b = sign_pods(&hub, &to_b, &payload);
        assert_eq!(
            admit("b", &to_b, &signature_b, now),
            Err(Refusal::WrongSubject)
        );
    }

    #[test]
    fn keys_of_the_wrong_kind_are_refused() {
        let user = nkeys::KeyPair::new_user().public_key();
        let server = nkeys::KeyPair::new_server().public_key();
        assert!(agent_key(&user).is_ok());
        assert!(agent_key(&server).unwrap_err().contains("not a user"));
        assert!(hub_public_key(&server).is_ok());
        assert!(hub_public_key(&user).unwrap_err().contains("not a hub key"));
        assert!(agent_key("hello").unwrap_err().contains("not an nkey"));
    }
}
