//! Integrity of what replicas say to each other over NATS (`owner ──[change,
//! MAC]──▶ stream ──▶ [check] ──▶ hubs`, `replica ──[task, MAC]──▶ bucket
//! ──▶ [check] ──▶ board`): an HMAC-SHA256 with a key every replica shares
//! (`--nats-signing-key-file`), over each change of the stream and each
//! entry of the task bucket. A NATS client that may publish there but holds
//! no key cannot make a change any replica serves or a task any replica
//! runs. Pure: no client; the log's limiter takes the time as an argument.
//!
//! What a MAC covers (each with its own label, so one kind can never pass
//! for the other):
//! - a change: `kube-pulse change v1`, the subject, the payload (the JSON
//!   envelope, which names the topic, its revision and the publishing
//!   replica). Carried in the message header [`HEADER`].
//! - a task bucket entry: `kube-pulse task v1`, the bucket, the key, the
//!   value (a task or an app's claim). The key-value API has no headers,
//!   so the value is sealed: `kp1.{MAC, base64url}\n{value}`.

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use ring::hmac;

use super::nats_auth::NatsAuthError;

/// The message header that carries a change's MAC.
pub const HEADER: &str = "Kube-Pulse-Mac";

/// The shortest key accepted, in bytes (as the hash's output).
pub const MIN_KEY_BYTES: usize = 32;

/// What the key file is, in errors.
const WHAT: &str = "NATS signing key file";

/// The label of the hub key's derivation.
const HUB_KEY: &str = "kube-pulse hub key v1";

/// The prefix of a sealed bucket value, before its MAC.
const SEAL: &[u8] = b"kp1.";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The key replicas sign changes and task entries with. Never shown: its
/// `Debug` and [`SigningKey::id`] give a fingerprint, so that logs can tell
/// whether two replicas hold the same key.
#[derive(Clone)]
pub struct SigningKey {
    key: hmac::Key,
    id: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey(id {})", self.id)
    }
}

impl PartialEq for SigningKey {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for SigningKey {}

/// Why a change or an entry was not accepted: the label of
/// `kube_pulse_relay_rejected_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// No MAC: not written by a replica with the key.
    Unsigned,
    /// A MAC that does not match: another key, or bytes changed.
    BadMac,
    /// A change whose payload is not an envelope.
    Malformed,
    /// A change whose envelope names a topic of another subject.
    WrongSubject,
}

impl Rejection {
    /// The metric label and log field.
    pub fn label(self) -> &'static str {
        match self {
            Self::Unsigned => "unsigned",
            Self::BadMac => "bad-mac",
            Self::Malformed => "malformed",
            Self::WrongSubject => "wrong-subject",
        }
    }
}

impl SigningKey {
    /// The key of `bytes`, at least [`MIN_KEY_BYTES`] long.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(format!(
                "it holds {} bytes; a signing key needs at least {MIN_KEY_BYTES} (e.g. `openssl rand -hex 32`)",
                bytes.len()
            ));
        }
        let fingerprint = ring::digest::digest(
            &ring::digest::SHA256,
            &[b"kube-pulse key id\0".as_slice(), bytes].concat(),
        );
        let id = fingerprint.as_ref()[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, bytes),
            id,
        })
    }

    /// The key a file holds: its bytes, without the last line end (so that
    /// `openssl rand -hex 32 > FILE` and a Secret's value both work).
    pub fn from_file(path: &Path) -> Result<Self, NatsAuthError> {
        let mut bytes = std::fs::read(path).map_err(|source| NatsAuthError::Read {
            what: WHAT,
            path: path.to_path_buf(),
            source,
        })?;
        for end in [b'\n', b'\r'] {
            if bytes.last() == Some(&end) {
                bytes.pop();
            }
        }
        Self::from_bytes(&bytes).map_err(|reason| NatsAuthError::Invalid {
            what: WHAT,
            path: path.to_path_buf(),
            reason,
        })
    }

    /// A random key, for one process alone (`kube-pulse demo`).
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .expect("the system's random numbers");
        Self::from_bytes(&bytes).expect("32 bytes")
    }

    /// A fingerprint of the key (12 hex digits), safe to log.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn tag(&self, label: &str, parts: &[&[u8]]) -> hmac::Tag {
        let mut context = hmac::Context::with_key(&self.key);
        context.update(label.as_bytes());
        for part in parts {
            // Lengths first: no two splits of the same bytes sign alike.
            context.update(&(part.len() as u64).to_be_bytes());
            context.update(part);
        }
        context.sign()
    }

    fn check(&self, label: &str, parts: &[&[u8]], mac: &[u8]) -> Result<(), Rejection> {
        let Ok(mac) = B64.decode(mac) else {
            return Err(Rejection::BadMac);
        };
        let tag = self.tag(label, parts);
        // In constant time.
        if bool::from(subtle::ConstantTimeEq::ct_eq(tag.as_ref(), mac.as_slice())) {
            Ok(())
        } else {
            Err(Rejection::BadMac)
        }
    }

    /// The replicas' hub key: an Ed25519 key pair derived from this key, so
    /// that every replica holding it signs requests to agents alike and an
    /// agent checks them with the public key alone (`--hub-key`).
    pub fn hub_key(&self) -> nkeys::KeyPair {
        let tag = self.tag(HUB_KEY, &[]);
        let mut seed = [0u8; 32];
        seed.copy_from_slice(&tag.as_ref()[..32]);
        nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::Server, seed)
            .expect("32 bytes make a key pair")
    }

    /// The MAC of a change published on `subject`, for [`HEADER`].
    pub fn sign_change(&self, subject: &str, payload: &[u8]) -> String {
        B64.encode(self.tag(CHANGE, &[subject.as_bytes(), payload]))
    }

    /// Whether `mac` (None: the header is absent) is this key's for the
    /// change on `subject`.
    pub fn check_change(
        &self,
        subject: &str,
        payload: &[u8],
        mac: Option<&[u8]>,
    ) -> Result<(), Rejection> {
        let mac = mac.ok_or(Rejection::Unsigned)?;
        self.check(CHANGE, &[subject.as_bytes(), payload], mac)
    }

    /// `value` sealed for `key` of `bucket`: its MAC, then itself.
    pub fn seal_entry(&self, bucket: &str, key: &str, value: &[u8]) -> Vec<u8> {
        let tag = self.tag(TASK, &[bucket.as_bytes(), key.as_bytes(), value]);
        let mut out = Vec::with_capacity(SEAL.len() + 44 + value.len());
        out.extend_from_slice(SEAL);
        out.extend_from_slice(B64.encode(tag).as_bytes());
        out.push(b'\n');
        out.extend_from_slice(value);
        out
    }

    /// The value of a sealed entry of `key` in `bucket`, if this key sealed
    /// it there.
    pub fn open_entry<'a>(
        &self,
        bucket: &str,
        key: &str,
        sealed: &'a [u8],
    ) -> Result<&'a [u8], Rejection> {
        let rest = sealed.strip_prefix(SEAL).ok_or(Rejection::Unsigned)?;
        let end = rest
            .iter()
            .position(|b| *b == b'\n')
            .ok_or(Rejection::BadMac)?;
        let (mac, value) = (&rest[..end], &rest[end + 1..]);
        self.check(TASK, &[bucket.as_bytes(), key.as_bytes(), value], mac)?;
        Ok(value)
    }
}

/// At most one log line per this long about rejected messages.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// Rate-limits the log lines about rejected messages (someone publishing
/// forgeries must not flood the log): the first, then at most one per
/// [`LOG_EVERY`], saying how many were rejected since the last line.
#[derive(Debug, Default)]
pub(crate) struct RejectionLog {
    last: Option<Instant>,
    since: u64,
}

impl RejectionLog {
    /// One more rejection at `now`: Some(rejections since the last line,
    /// this one included) when a line is due.
    pub(crate) fn note(&mut self, now: Instant) -> Option<u64> {
        self.since += 1;
        let due = self
            .last
            .is_none_or(|last| now.duration_since(last) >= LOG_EVERY);
        if !due {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.since))
    }
}

const CHANGE: &str = "kube-pulse change v1";
const TASK: &str = "kube-pulse task v1";

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> SigningKey {
        SigningKey::from_bytes(&[byte; 32]).unwrap()
    }

    /// (subject, payload, MAC, why it is refused)
    type Forged<'a> = (&'a str, &'a [u8], Option<&'a [u8]>, Rejection);

    #[test]
    fn a_change_passes_with_its_key_only() {
        let (k, other) = (key(1), key(2));
        let subject = "kube-pulse.topics.clusters.a";
        let payload = br#"{"topic":"clusters/a","rev":3,"replica":"r1","doc":null}"#;
        let mac = k.sign_change(subject, payload);
        assert_eq!(mac.len(), 43);
        assert_eq!(
            k.check_change(subject, payload, Some(mac.as_bytes())),
            Ok(())
        );
        // (subject, payload, mac, why)
        let forged: &[Forged] = &[
            (subject, payload, None, Rejection::Unsigned),
            (subject, payload, Some(b"nope"), Rejection::BadMac),
            (subject, payload, Some(b""), Rejection::BadMac),
            (
                "kube-pulse.topics.clusters.b",
                payload,
                Some(mac.as_bytes()),
                Rejection::BadMac,
            ),
            (
                subject,
                br#"{"topic":"clusters/a","rev":4,"replica":"r1","doc":null}"#,
                Some(mac.as_bytes()),
                Rejection::BadMac,
            ),
        ];
        for (subject, payload, mac, why) in forged {
            assert_eq!(
                k.check_change(subject, payload, *mac),
                Err(*why),
                "{subject}"
            );
        }
        let theirs = other.sign_change(subject, payload);
        assert_eq!(
            k.check_change(subject, payload, Some(theirs.as_bytes())),
            Err(Rejection::BadMac)
        );
    }

    #[test]
    fn an_entry_opens_with_its_key_bucket_and_key_only() {
        let (k, other) = (key(1), key(2));
        let value = br#"{"id":"t1","type":"Stop"}"#;
        let sealed = k.seal_entry("B", "t1", value);
        assert!(sealed.starts_with(b"kp1."));
        assert_eq!(k.open_entry("B", "t1", &sealed), Ok(value.as_slice()));
        assert_eq!(k.open_entry("B", "t2", &sealed), Err(Rejection::BadMac));
        assert_eq!(k.open_entry("C", "t1", &sealed), Err(Rejection::BadMac));
        assert_eq!(other.open_entry("B", "t1", &sealed), Err(Rejection::BadMac));
        assert_eq!(k.open_entry("B", "t1", value), Err(Rejection::Unsigned));
        assert_eq!(k.open_entry("B", "t1", b"kp1.abc"), Err(Rejection::BadMac));
        let mut changed = sealed.clone();
        *changed.last_mut().unwrap() = b' ';
        assert_eq!(k.open_entry("B", "t1", &changed), Err(Rejection::BadMac));
        // A change's MAC is no entry's.
        let mac = k.sign_change("B", b"t1");
        let mut crafted = b"kp1.".to_vec();
        crafted.extend_from_slice(mac.as_bytes());
        crafted.extend_from_slice(b"\n");
        assert_eq!(k.open_entry("B", "t1", &crafted), Err(Rejection::BadMac));
    }

    #[test]
    fn keys_are_read_from_files_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("signing.key");
        let hex = "6f1c".repeat(16);
        std::fs::write(&path, format!("{hex}\n")).unwrap();
        let from_file = SigningKey::from_file(&path).unwrap();
        assert_eq!(from_file, SigningKey::from_bytes(hex.as_bytes()).unwrap());
        assert_eq!(from_file.id().len(), 12);
        let shown = format!("{from_file:?}");
        assert!(
            !shown.contains(&hex) && shown.contains(from_file.id()),
            "{shown}"
        );
        std::fs::write(&path, "short\n").unwrap();
        let err = SigningKey::from_file(&path).unwrap_err().to_string();
        assert!(
            err.contains("at least 32") && !err.contains("short"),
            "{err}"
        );
        let err = SigningKey::from_file(&dir.path().join("absent"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("signing key file"), "{err}");
        assert_ne!(SigningKey::generate(), SigningKey::generate());
    }

    #[test]
    fn rejections_are_logged_at_most_once_per_period() {
        let start = Instant::now();
        let mut log = RejectionLog::default();
        assert_eq!(log.note(start), Some(1));
        for i in 1..100 {
            assert_eq!(log.note(start + Duration::from_millis(i)), None);
        }
        assert_eq!(log.note(start + LOG_EVERY), Some(100));
        assert_eq!(log.note(start + LOG_EVERY * 3 / 2), None);
    }
}
