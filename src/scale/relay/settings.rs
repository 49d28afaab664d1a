//! Where the stream of changes is and how its client logs in (`flags, file
//! ──▶ [NatsSettings] ──▶ relay, task bucket`): the servers, the stream's
//! name and limits, credentials and TLS ([`NatsAuth`]), and the key that
//! signs what replicas say to each other ([`SigningKey`]).

use crate::scale::nats_auth::{NatsAuth, NatsAuthError, has_userinfo};
use crate::scale::signing::SigningKey;

/// Default name of the JetStream stream.
pub const DEFAULT_STREAM: &str = "KUBE_PULSE";
/// Default messages kept per topic: the last one rebuilds the document; a
/// few more keep the stream's recent history for later use.
pub const DEFAULT_HISTORY: i64 = 16;
/// Default copies of the stream (and of the task bucket): one server.
pub const DEFAULT_REPLICAS: usize = 1;
/// The most copies JetStream keeps of a stream (nats-server refuses more:
/// "maximum replicas is 5").
pub const MAX_REPLICAS: usize = 5;

/// How long a push member's agent may be silent before the member is
/// `Unknown (AgentLost)`, by default (Karmada's grace for pull clusters).
pub const DEFAULT_AGENT_GRACE: std::time::Duration = std::time::Duration::from_secs(40);

/// Where the stream of changes is, and how the client logs in there.
#[derive(Clone, PartialEq, Eq)]
pub struct NatsSettings {
    /// `nats://HOST:PORT` of a NATS server with JetStream, or several
    /// servers of one cluster separated by commas (the client connects to
    /// any of them and learns the others from it).
    pub url: String,
    /// The JetStream stream's name.
    pub stream: String,
    /// Messages kept per topic (`max_msgs_per_subject`).
    pub history: i64,
    /// Copies of the stream and of the task bucket on distinct servers of
    /// a JetStream cluster (`num_replicas`), 1 to 5.
    pub replicas: usize,
    /// Credentials and TLS of the client (anonymous and plain by default).
    pub auth: NatsAuth,
    /// The key every replica signs its changes and task entries with, and
    /// checks the others' with (`--nats-signing-key-file`): what is not
    /// signed with it is neither served nor run.
    pub signing: Option<SigningKey>,
    /// Accept changes and tasks without a MAC (`--nats-insecure-unsigned`):
    /// anyone who may publish on the stream or write the bucket is then
    /// believed. Without it, a gateway without a key does not start.
    pub insecure_unsigned: bool,
    /// How long a push member's agent may send no heartbeat before the
    /// member is `Unknown (AgentLost)` (docs/AGENT.md).
    pub agent_grace: std::time::Duration,
}

impl std::fmt::Debug for NatsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSettings")
            .field("url", &self.shown_url())
            .field("stream", &self.stream)
            .field("history", &self.history)
            .field("replicas", &self.replicas)
            .field("auth", &self.auth)
            .field("signing", &self.signing)
            .field("insecure_unsigned", &self.insecure_unsigned)
            .field("agent_grace", &self.agent_grace)
            .finish()
    }
}

impl NatsSettings {
    /// Settings for the server at `url`, with the default stream.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            stream: DEFAULT_STREAM.into(),
            history: DEFAULT_HISTORY,
            replicas: DEFAULT_REPLICAS,
            auth: NatsAuth::default(),
            signing: None,
            insecure_unsigned: false,
            agent_grace: DEFAULT_AGENT_GRACE,
        }
    }

    /// These settings with `key` signing and checking what replicas say
    /// to each other.
    pub fn signed_with(mut self, key: SigningKey) -> Self {
        self.signing = Some(key);
        self
    }

    /// Refuses a relay that would believe anyone: no signing key, unless
    /// explicitly [`NatsSettings::insecure_unsigned`]; and both at once.
    pub fn check_integrity(&self) -> crate::Result<()> {
        match (&self.signing, self.insecure_unsigned) {
            (Some(_), false) | (None, true) => Ok(()),
            (None, false) => Err(crate::Error::Settings(
                "nats: no signing key: give --nats-signing-key-file FILE (signingKeyFile in the nats: block; the same key on every replica), so that changes and tasks that no replica signed are neither served nor run; or --nats-insecure-unsigned to believe anyone who may publish on the stream".into(),
            )),
            (Some(_), true) => Err(crate::Error::Settings(
                "nats: a signing key and --nats-insecure-unsigned exclude each other".into(),
            )),
        }
    }

    /// How the integrity of what replicas say is checked, for the log.
    pub fn describe_integrity(&self) -> String {
        match &self.signing {
            Some(key) => format!("HMAC-SHA256, key {}", key.id()),
            None => "none (--nats-insecure-unsigned)".into(),
        }
    }

    /// The URL as logs and errors may show it: not at all when it carries
    /// credentials (which [`NatsSettings::validate`] refuses).
    pub fn shown_url(&self) -> &str {
        if has_userinfo(&self.url) {
            "(a URL with credentials, not shown)"
        } else {
            &self.url
        }
    }

    /// The servers of `url`, in order (each URL of the comma-separated list,
    /// trimmed).
    pub fn servers(&self) -> Vec<&str> {
        self.url.split(',').map(str::trim).collect()
    }

    /// Refuses a URL that carries credentials (without showing it), a URL
    /// (of the list) that is not `nats://HOST:PORT` or `tls://HOST:PORT`, a
    /// stream name NATS would refuse, a history outside 1 to 1000, and
    /// replicas outside 1 to 5.
    pub fn validate(&self) -> crate::Result<()> {
        if has_userinfo(&self.url) {
            return Err(NatsAuthError::UrlCredentials.into());
        }
        let refuse = |m: String| Err(crate::Error::Settings(format!("nats: {m}")));
        for url in self.servers() {
            let host = url
                .strip_prefix("nats://")
                .or_else(|| url.strip_prefix("tls://"));
            let plain = |h: &str| !h.is_empty() && !h.contains(|c: char| c.is_whitespace());
            if !host.is_some_and(plain) || url.parse::<async_nats::ServerAddr>().is_err() {
                return refuse(format!(
                    "each URL must be nats://HOST:PORT or tls://HOST:PORT (several separated by commas), not {url:?}"
                ));
            }
        }
        let bad = |c: char| c.is_whitespace() || ".*>/\\".contains(c);
        if self.stream.is_empty() || self.stream.len() > 255 || self.stream.contains(bad) {
            return refuse(format!(
                "the stream name {:?} must be 1 to 255 characters without whitespace, '.', '*', '>', '/' or '\\'",
                self.stream
            ));
        }
        if !(1..=1000).contains(&self.history) {
            return refuse(format!(
                "historyPerTopic must be 1 to 1000, not {}",
                self.history
            ));
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return refuse(format!(
                "streamReplicas must be 1 to {MAX_REPLICAS} (JetStream keeps at most {MAX_REPLICAS} copies), not {}",
                self.replicas
            ));
        }
        Ok(())
    }

    /// Connects a client named `name` with these settings' credentials and
    /// TLS, after [`NatsSettings::validate`]: what the relay's client does,
    /// without its events.
    pub async fn connect(&self, name: &str) -> crate::Result<async_nats::Client> {
        self.validate()?;
        self.dial(async_nats::ConnectOptions::new().name(name))
            .await
    }

    /// Connects with `options` and these settings' credentials and TLS,
    /// to any server of the list; the error names the URL, no secret.
    pub(crate) async fn dial(
        &self,
        options: async_nats::ConnectOptions,
    ) -> crate::Result<async_nats::Client> {
        let url = self.shown_url();
        self.auth
            .apply(options)?
            // Any server of the list; the client learns the cluster's
            // others from it, and reconnects to any of them.
            .connect(self.servers())
            .await
            .map_err(|e| crate::Error::Settings(format!("nats: cannot connect to {url}: {e}")))
    }
}

/// What to add to an error of JetStream about a stream of `replicas`
/// copies: more than one needs as many servers in a JetStream cluster
/// (a single server answers "replicas > 1 not supported in non-clustered
/// mode", a smaller cluster "no suitable peers for placement").
pub(crate) fn replicas_hint(replicas: usize) -> String {
    if replicas > 1 {
        format!(
            " (streamReplicas {replicas} needs a JetStream cluster of at least {replicas} servers)"
        )
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_validated() {
        let with = |url: &str, change: fn(&mut NatsSettings)| {
            let mut settings = NatsSettings::new(url);
            change(&mut settings);
            settings
        };
        let keep: fn(&mut NatsSettings) = |_| {};
        // (settings, None when valid, else a part of the error)
        let cases: Vec<(NatsSettings, Option<&str>)> = vec![
            (with("nats://127.0.0.1:4222", keep), None),
            (with("tls://nats.example:4222", keep), None),
            (with("nats://a:4222,nats://b:4222,tls://c:4222", keep), None),
            (with(" nats://a:4222 , nats://b:4222 ", keep), None),
            (
                with("http://127.0.0.1:4222", keep),
                Some("nats://HOST:PORT"),
            ),
            (with("nats://", keep), Some("\"nats://\"")),
            (with("127.0.0.1:4222", keep), Some("\"127.0.0.1:4222\"")),
            (with("nats://a:4222,", keep), Some("not \"\"")),
            (with("nats://a:4222,,nats://b:4222", keep), Some("not \"\"")),
            (with("nats://a:4222,ws://b:80", keep), Some("\"ws://b:80\"")),
            (with("nats://a b:4222", keep), Some("\"nats://a b:4222\"")),
            (
                with("nats://h:1", |s| s.stream = "a.b".into()),
                Some("stream name"),
            ),
            (
                with("nats://h:1", |s| s.stream = String::new()),
                Some("stream name"),
            ),
            (
                with("nats://h:1", |s| s.history = 0),
                Some("historyPerTopic"),
            ),
            (
                with("nats://h:1", |s| s.history = 1001),
                Some("historyPerTopic"),
            ),
            (
                with("nats://h:1", |s| s.replicas = 0),
                Some("streamReplicas must be 1 to 5"),
            ),
            (with("nats://h:1", |s| s.replicas = 1), None),
            (with("nats://h:1", |s| s.replicas = 2), None),
            (with("nats://h:1", |s| s.replicas = 3), None),
            (with("nats://h:1", |s| s.replicas = 5), None),
            (with("nats://h:1", |s| s.replicas = 6), Some("not 6")),
            (
                with("nats://kube-pulse:s3cret@h:4222", keep),
                Some("carries credentials"),
            ),
            (with("nats://s3cret@h:4222", keep), Some("--nats-user")),
            (
                with("nats://a:1,tls://u:s3cret@b:2", keep),
                Some("carries credentials"),
            ),
        ];
        for (settings, want) in cases {
            match (settings.validate(), want) {
                (Ok(()), None) => {}
                (Err(err), Some(part)) => {
                    let err = err.to_string();
                    assert!(
                        err.starts_with("settings") || err.contains("nats: "),
                        "{err}"
                    );
                    assert!(err.contains(part), "{settings:?}: {err} lacks {part:?}");
                    assert!(!err.contains("s3cret"), "{err}");
                }
                (got, _) => panic!("{settings:?}: {got:?}, expected {want:?}"),
            }
        }
    }

    #[test]
    fn a_url_with_credentials_is_never_shown() {
        let settings = NatsSettings::new("nats://kube-pulse:s3cret@h:4222");
        for shown in [format!("{settings:?}"), settings.shown_url().to_string()] {
            assert!(!shown.contains("s3cret"), "{shown}");
        }
        let plain = NatsSettings::new("nats://h:4222");
        assert_eq!(plain.shown_url(), "nats://h:4222");
        assert!(format!("{plain:?}").contains("nats://h:4222"));
    }

    #[test]
    fn a_list_of_servers_is_split_in_order() {
        for (url, servers) in [
            ("nats://a:4222", vec!["nats://a:4222"]),
            (
                "nats://a:4222,nats://b:4222",
                vec!["nats://a:4222", "nats://b:4222"],
            ),
            (
                " tls://a:1 ,nats://b:2, nats://c:3",
                vec!["tls://a:1", "nats://b:2", "nats://c:3"],
            ),
        ] {
            assert_eq!(NatsSettings::new(url).servers(), servers, "{url}");
        }
    }

    #[test]
    fn a_relay_without_a_signing_key_is_refused_unless_insecure() {
        let key = SigningKey::from_bytes(&[1; 32]).unwrap();
        let plain = NatsSettings::new("nats://h:1");
        let err = plain.check_integrity().unwrap_err().to_string();
        assert!(err.contains("--nats-signing-key-file"), "{err}");
        assert!(
            plain
                .clone()
                .signed_with(key.clone())
                .check_integrity()
                .is_ok()
        );
        let insecure = NatsSettings {
            insecure_unsigned: true,
            ..plain
        };
        assert!(insecure.check_integrity().is_ok());
        let both = insecure.signed_with(key.clone());
        assert!(both.check_integrity().is_err());
        let shown = format!("{both:?}");
        assert!(shown.contains(key.id()), "{shown}");
    }

    #[test]
    fn more_than_one_replica_says_it_needs_as_many_servers() {
        assert_eq!(replicas_hint(1), "");
        assert!(replicas_hint(3).contains("at least 3 servers"));
    }
}
