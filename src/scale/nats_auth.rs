//! How a replica logs in to NATS and checks the server it reaches
//! (`flags, config file, environment ──▶ [nats_auth] ──▶ the client of the
//! relay and the task bucket`): one way to say who it is (a credentials
//! file, an nkey seed, a user and password, or a token) and TLS with a
//! private CA and a client certificate (mutual TLS). Every file is read and
//! checked before anything starts; passwords, tokens and seeds come from
//! files or the environment, never from a flag or the URL, and no `Debug`,
//! log line or error shows them. `docs/SCALE-OUT.md` ("Locking NATS") has
//! the setup.

use std::path::{Path, PathBuf};

/// The environment variable a password may come from instead of
/// `--nats-password-file`.
pub const PASSWORD_ENV: &str = "KUBE_PULSE_NATS_PASSWORD";
/// The environment variable a token may come from instead of
/// `--nats-token-file`.
pub const TOKEN_ENV: &str = "KUBE_PULSE_NATS_TOKEN";

/// Why the NATS client's credentials or TLS settings cannot be used. No
/// variant holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum NatsAuthError {
    /// A file named by a flag or key cannot be read.
    #[error("cannot read the {what} {path}: {source}")]
    Read {
        /// What the file is for (`password file`, `CA file`, …).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why reading it failed.
        #[source]
        source: std::io::Error,
    },
    /// A file holds nothing usable.
    #[error("the {what} {path} is not usable: {reason}")]
    Invalid {
        /// What the file is for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it (never its contents).
        reason: String,
    },
    /// A secret from the environment is empty.
    #[error("{0} is set but empty")]
    EmptyEnv(&'static str),
    /// Two ways to log in at once.
    #[error(
        "give one way to log in, not two: {first} and {second} are both set (their flags win over the nats: keys named in brackets)"
    )]
    TwoMethods {
        /// The first way found.
        first: &'static str,
        /// Another one.
        second: &'static str,
    },
    /// A password both from a file and the environment.
    #[error(
        "the password comes from --nats-password-file (passwordFile) or KUBE_PULSE_NATS_PASSWORD, not both"
    )]
    TwoPasswords,
    /// A token both from a file and the environment.
    #[error(
        "the token comes from --nats-token-file (tokenFile) or KUBE_PULSE_NATS_TOKEN, not both"
    )]
    TwoTokens,
    /// A user without a password.
    #[error(
        "--nats-user (user) needs a password: --nats-password-file (passwordFile) or KUBE_PULSE_NATS_PASSWORD"
    )]
    UserWithoutPassword,
    /// A password without a user.
    #[error(
        "a password (--nats-password-file, passwordFile or KUBE_PULSE_NATS_PASSWORD) needs --nats-user (user)"
    )]
    PasswordWithoutUser,
    /// A user name NATS cannot take.
    #[error("--nats-user (user) must be a name without whitespace")]
    BadUser,
    /// A client certificate without its key.
    #[error("the client certificate --nats-cert (cert) needs its private key: --nats-key (key)")]
    CertWithoutKey,
    /// A client key without its certificate.
    #[error("the client key --nats-key (key) needs its certificate: --nats-cert (cert)")]
    KeyWithoutCert,
    /// Credentials in the URL (`nats://user:password@host`).
    #[error(
        "a URL of --nats (url) carries credentials before its host (USER:PASSWORD@ or TOKEN@), which would show in process listings and logs; give them as --nats-user with --nats-password-file, --nats-token-file, --nats-credentials or --nats-nkey-seed instead (docs/SCALE-OUT.md, \"Locking NATS\")"
    )]
    UrlCredentials,
}

impl From<NatsAuthError> for crate::Error {
    fn from(e: NatsAuthError) -> Self {
        crate::Error::Settings(format!("nats: {e}"))
    }
}

/// A password, token, seed or credentials file's contents: its `Debug`
/// says only that it is there.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the client's options only.
    fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Who the client is to the server: one of the ways NATS knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NatsCredentials {
    /// A credentials file (`.creds`: a user JWT and its nkey seed).
    CredsFile {
        /// The file, for the log.
        path: PathBuf,
        /// Its contents.
        contents: Secret,
    },
    /// A user's nkey seed (`SU…`): the server knows its public key.
    NkeySeed {
        /// The file, for the log.
        path: PathBuf,
        /// The seed.
        seed: Secret,
    },
    /// A user and password.
    UserPassword {
        /// The user.
        user: String,
        /// The password.
        password: Secret,
    },
    /// A token.
    Token(Secret),
}

/// A client certificate and its key (mutual TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

/// TLS towards the server: a CA to trust instead of the system's, and a
/// client certificate. Either one makes TLS required, whatever the URL's
/// scheme (`tls://` requires it too).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsTls {
    /// PEM certificates of the CA that signed the servers' certificates.
    pub ca: Option<PathBuf>,
    /// The client's certificate, for servers that verify clients.
    pub client: Option<ClientCertificate>,
}

impl NatsTls {
    /// Whether the client must speak TLS.
    pub fn required(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }
}

/// How the client logs in and checks the server: read and checked, ready
/// for the client's options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsAuth {
    /// Who the client is; None: anonymous.
    pub credentials: Option<NatsCredentials>,
    /// TLS settings.
    pub tls: NatsTls,
}

impl NatsAuth {
    /// `options` with these credentials and TLS settings.
    pub(crate) fn apply(
        &self,
        options: async_nats::ConnectOptions,
    ) -> Result<async_nats::ConnectOptions, NatsAuthError> {
        let mut options = match &self.credentials {
            None => options,
            Some(NatsCredentials::CredsFile { path, contents }) => options
                .credentials(contents.expose())
                .map_err(|e| invalid(CREDS, path, e.to_string()))?,
            Some(NatsCredentials::NkeySeed { seed, .. }) => options.nkey(seed.expose().into()),
            Some(NatsCredentials::UserPassword { user, password }) => {
                options.user_and_password(user.clone(), password.expose().into())
            }
            Some(NatsCredentials::Token(token)) => options.token(token.expose().into()),
        };
        if let Some(ca) = &self.tls.ca {
            options = options.add_root_certificates(ca.clone());
        }
        if let Some(client) = &self.tls.client {
            options = options.add_client_certificate(client.cert.clone(), client.key.clone());
        }
        if self.tls.required() {
            options = options.require_tls(true);
        }
        Ok(options)
    }

    /// The user nkey pair this client logs in with: from an nkey seed, or
    /// the seed inside a credentials file; None for the other ways.
    pub fn user_key(&self) -> Option<nkeys::KeyPair> {
        let seed = match &self.credentials {
            Some(NatsCredentials::NkeySeed { seed, .. }) => seed.expose().trim().to_string(),
            Some(NatsCredentials::CredsFile { contents, .. }) => contents
                .expose()
                .lines()
                .map(str::trim)
                .find(|line| line.starts_with("SU"))?
                .to_string(),
            _ => return None,
        };
        nkeys::KeyPair::from_seed(&seed).ok()
    }

    /// What the log says of it: the way and the files, never a secret.
    pub fn describe(&self) -> String {
        let login = match &self.credentials {
            None => "anonymous".to_string(),
            Some(NatsCredentials::CredsFile { path, .. }) => {
                format!("credentials file {}", path.display())
            }
            Some(NatsCredentials::NkeySeed { path, .. }) => {
                format!("nkey seed {}", path.display())
            }
            Some(NatsCredentials::UserPassword { user, .. }) => format!("user {user}"),
            Some(NatsCredentials::Token(_)) => "token".to_string(),
        };
        let tls = match (&self.tls.ca, &self.tls.client) {
            (None, None) => String::new(),
            (ca, client) => format!(
                ", TLS{}{}",
                ca.as_ref()
                    .map(|ca| format!(" with CA {}", ca.display()))
                    .unwrap_or_default(),
                client
                    .as_ref()
                    .map(|c| format!(" and client certificate {}", c.cert.display()))
                    .unwrap_or_default()
            ),
        };
        format!("{login}{tls}")
    }
}

const CREDS: &str = "credentials file";
const NKEY: &str = "nkey seed file";
const PASSWORD: &str = "password file";
const TOKEN: &str = "token file";
const CA: &str = "CA file";
const CERT: &str = "client certificate";
const KEY: &str = "client key";

fn invalid(what: &'static str, path: &Path, reason: impl Into<String>) -> NatsAuthError {
    NatsAuthError::Invalid {
        what,
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Where the credentials and TLS files are, as flags over the config
/// file's `nats:` keys say, with the secrets of the environment: before
/// anything is read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsAuthSources {
    /// `--nats-credentials` / `credentials`.
    pub credentials: Option<PathBuf>,
    /// `--nats-nkey-seed` / `nkeySeed`.
    pub nkey_seed: Option<PathBuf>,
    /// `--nats-user` / `user`.
    pub user: Option<String>,
    /// `--nats-password-file` / `passwordFile`.
    pub password_file: Option<PathBuf>,
    /// [`PASSWORD_ENV`].
    pub password: Option<Secret>,
    /// `--nats-token-file` / `tokenFile`.
    pub token_file: Option<PathBuf>,
    /// [`TOKEN_ENV`].
    pub token: Option<Secret>,
    /// `--nats-ca` / `ca`.
    pub ca: Option<PathBuf>,
    /// `--nats-cert` / `cert`.
    pub cert: Option<PathBuf>,
    /// `--nats-key` / `key`.
    pub key: Option<PathBuf>,
}

/// Where a password or token comes from.
#[derive(Debug, Clone, Copy)]
enum Source<'a> {
    File(&'a Path),
    Env(&'a Secret),
}

/// The one way to log in the sources name, not read yet.
#[derive(Debug, Clone, Copy)]
enum Login<'a> {
    Creds(&'a Path),
    Nkey(&'a Path),
    User(&'a str, Source<'a>),
    Token(Source<'a>),
}

impl Login<'_> {
    fn name(&self) -> &'static str {
        match self {
            Login::Creds(_) => "a credentials file (--nats-credentials, credentials)",
            Login::Nkey(_) => "an nkey seed (--nats-nkey-seed, nkeySeed)",
            Login::User(..) => "a user and password (--nats-user, user)",
            Login::Token(_) => "a token (--nats-token-file, tokenFile, or KUBE_PULSE_NATS_TOKEN)",
        }
    }
}

/// One of a file and a secret of the environment, or neither.
fn one_of<'a>(
    file: &'a Option<PathBuf>,
    env: &'a Option<Secret>,
    both: NatsAuthError,
) -> Result<Option<Source<'a>>, NatsAuthError> {
    match (file, env) {
        (Some(_), Some(_)) => Err(both),
        (Some(path), None) => Ok(Some(Source::File(path))),
        (None, Some(secret)) => Ok(Some(Source::Env(secret))),
        (None, None) => Ok(None),
    }
}

impl NatsAuthSources {
    /// Whether nothing is set (anonymous, no TLS settings).
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// The way to log in these sources name: at most one, complete. Pure.
    fn login(&self) -> Result<Option<Login<'_>>, NatsAuthError> {
        let password = one_of(
            &self.password_file,
            &self.password,
            NatsAuthError::TwoPasswords,
        )?;
        let token = one_of(&self.token_file, &self.token, NatsAuthError::TwoTokens)?;
        let user = match (&self.user, password) {
            (Some(user), Some(password)) => Some(Login::User(user, password)),
            (Some(_), None) => return Err(NatsAuthError::UserWithoutPassword),
            (None, Some(_)) => return Err(NatsAuthError::PasswordWithoutUser),
            (None, None) => None,
        };
        let ways: Vec<Login<'_>> = [
            self.credentials.as_deref().map(Login::Creds),
            self.nkey_seed.as_deref().map(Login::Nkey),
            user,
            token.map(Login::Token),
        ]
        .into_iter()
        .flatten()
        .collect();
        match ways[..] {
            [] => Ok(None),
            [way] => Ok(Some(way)),
            [first, second, ..] => Err(NatsAuthError::TwoMethods {
                first: first.name(),
                second: second.name(),
            }),
        }
    }

    /// The TLS settings these sources name: a certificate needs its key
    /// and the other way round. Pure.
    fn tls(&self) -> Result<NatsTls, NatsAuthError> {
        let client = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some(ClientCertificate {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (Some(_), None) => return Err(NatsAuthError::CertWithoutKey),
            (None, Some(_)) => return Err(NatsAuthError::KeyWithoutCert),
            (None, None) => None,
        };
        Ok(NatsTls {
            ca: self.ca.clone(),
            client,
        })
    }

    /// Reads and checks every file these sources name: the credentials
    /// file parses, the seed is a user's, the CA file and the client
    /// certificate hold PEM certificates, the key a PEM private key.
    pub fn resolve(&self) -> Result<NatsAuth, NatsAuthError> {
        let credentials = match self.login()? {
            None => None,
            Some(Login::Creds(path)) => {
                let contents = Secret::new(read_text(CREDS, path)?);
                async_nats::ConnectOptions::new()
                    .credentials(contents.expose())
                    .map_err(|e| invalid(CREDS, path, e.to_string()))?;
                Some(NatsCredentials::CredsFile {
                    path: path.to_path_buf(),
                    contents,
                })
            }
            Some(Login::Nkey(path)) => {
                let seed = read_text(NKEY, path)?.trim().to_string();
                check_user_seed(&seed).map_err(|reason| invalid(NKEY, path, reason))?;
                Some(NatsCredentials::NkeySeed {
                    path: path.to_path_buf(),
                    seed: Secret::new(seed),
                })
            }
            Some(Login::User(user, password)) => {
                if user.is_empty() || user.contains(char::is_whitespace) {
                    return Err(NatsAuthError::BadUser);
                }
                Some(NatsCredentials::UserPassword {
                    user: user.to_string(),
                    password: secret(PASSWORD, PASSWORD_ENV, password)?,
                })
            }
            Some(Login::Token(token)) => {
                Some(NatsCredentials::Token(secret(TOKEN, TOKEN_ENV, token)?))
            }
        };
        let tls = self.tls()?;
        if let Some(ca) = &tls.ca {
            pem_certificates(CA, ca)?;
        }
        if let Some(client) = &tls.client {
            pem_certificates(CERT, &client.cert)?;
            pem_key(&client.key)?;
        }
        Ok(NatsAuth { credentials, tls })
    }
}

/// A secret from its file (its last line ending dropped) or the environment.
fn secret(
    what: &'static str,
    env: &'static str,
    from: Source<'_>,
) -> Result<Secret, NatsAuthError> {
    match from {
        Source::File(path) => {
            let text = read_text(what, path)?;
            let value = text.trim_end_matches(['\n', '\r']);
            if value.is_empty() {
                return Err(invalid(what, path, "it is empty"));
            }
            if value.contains(['\n', '\r']) {
                return Err(invalid(what, path, "it has more than one line"));
            }
            Ok(Secret::new(value))
        }
        Source::Env(secret) if secret.expose().is_empty() => Err(NatsAuthError::EmptyEnv(env)),
        Source::Env(secret) => Ok(secret.clone()),
    }
}

fn read_text(what: &'static str, path: &Path) -> Result<String, NatsAuthError> {
    std::fs::read_to_string(path).map_err(|source| NatsAuthError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn read_bytes(what: &'static str, path: &Path) -> Result<Vec<u8>, NatsAuthError> {
    std::fs::read(path).map_err(|source| NatsAuthError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// A user's nkey seed: `S` (a seed), `U` (of a user), 58 characters of
/// base32. Its checksum is checked when the client signs with it.
fn check_user_seed(seed: &str) -> Result<(), String> {
    let base32 = |c: char| c.is_ascii_uppercase() || ('2'..='7').contains(&c);
    if !seed.starts_with("SU") || seed.len() != 58 || !seed.chars().all(base32) {
        return Err("it must hold a user's nkey seed (SU…, 58 characters of base32), as `nk -gen user` writes".into());
    }
    Ok(())
}

fn pem_certificates(what: &'static str, path: &Path) -> Result<(), NatsAuthError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let bytes = read_bytes(what, path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| invalid(what, path, "it is not PEM"))?;
    if certificates.is_empty() {
        return Err(invalid(what, path, "it holds no PEM certificate"));
    }
    Ok(())
}

fn pem_key(path: &Path) -> Result<(), NatsAuthError> {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let bytes = read_bytes(KEY, path)?;
    PrivateKeyDer::from_pem_slice(&bytes)
        .map(drop)
        .map_err(|_| invalid(KEY, path, "it holds no PEM private key"))
}

/// Whether `url` (one URL or several separated by commas) carries
/// credentials before a host: any `@` does, and none is valid elsewhere.
pub(crate) fn has_userinfo(url: &str) -> bool {
    url.contains('@')
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "SUAIO3FHUX5PNV2LQIIP7TZ3N4L7TX3W53MQGEIVYFIGA635OZCKEYHFLM";

    fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn one_way_to_log_in_at_most() {
        let p = |s: &str| Some(PathBuf::from(s));
        let env = |s: &str| Some(Secret::new(s));
        let user = |s: &str| Some(s.to_string());
        // (sources, the way, or a part of the error)
        let cases: Vec<(NatsAuthSources, Result<&str, &str>)> = vec![
            (NatsAuthSources::default(), Ok("none")),
            (
                NatsAuthSources {
                    credentials: p("c"),
                    ..Default::default()
                },
                Ok("credentials file"),
            ),
            (
                NatsAuthSources {
                    nkey_seed: p("n"),
                    ..Default::default()
                },
                Ok("nkey seed"),
            ),
            (
                NatsAuthSources {
                    user: user("u"),
                    password_file: p("pw"),
                    ..Default::default()
                },
                Ok("user and password"),
            ),
            (
                NatsAuthSources {
                    user: user("u"),
                    password: env("x"),
                    ..Default::default()
                },
                Ok("user and password"),
            ),
            (
                NatsAuthSources {
                    token: env("t"),
                    ..Default::default()
                },
                Ok("token"),
            ),
            (
                NatsAuthSources {
                    token_file: p("t"),
                    ..Default::default()
                },
                Ok("token"),
            ),
            (
                NatsAuthSources {
                    user: user("u"),
                    ..Default::default()
                },
                Err("needs a password"),
            ),
            (
                NatsAuthSources {
                    password_file: p("pw"),
                    ..Default::default()
                },
                Err("needs --nats-user"),
            ),
            (
                NatsAuthSources {
                    password: env("x"),
                    ..Default::default()
                },
                Err("needs --nats-user"),
            ),
            (
                NatsAuthSources {
                    user: user("u"),
                    password_file: p("pw"),
                    password: env("x"),
                    ..Default::default()
                },
                Err("not both"),
            ),
            (
                NatsAuthSources {
                    token_file: p("t"),
                    token: env("t"),
                    ..Default::default()
                },
                Err("not both"),
            ),
            (
                NatsAuthSources {
                    credentials: p("c"),
                    nkey_seed: p("n"),
                    ..Default::default()
                },
                Err("a credentials file (--nats-credentials, credentials) and an nkey seed"),
            ),
            (
                NatsAuthSources {
                    user: user("u"),
                    password_file: p("pw"),
                    token: env("t"),
                    ..Default::default()
                },
                Err("a user and password (--nats-user, user) and a token"),
            ),
        ];
        for (sources, want) in cases {
            let got = sources.login().map(|way| way.map_or("none", |w| w.name()));
            match (got, want) {
                (Ok(got), Ok(want)) => assert!(got.contains(want), "{sources:?}: {got}"),
                (Err(err), Err(want)) => {
                    let err = err.to_string();
                    assert!(err.contains(want), "{sources:?}: {err}");
                }
                (got, want) => panic!("{sources:?}: {got:?}, expected {want:?}"),
            }
        }
    }

    #[test]
    fn a_client_certificate_needs_its_key() {
        let p = |s: &str| Some(PathBuf::from(s));
        let tls = |cert, key| {
            NatsAuthSources {
                ca: p("ca"),
                cert,
                key,
                ..Default::default()
            }
            .tls()
        };
        let err = tls(p("c"), None).unwrap_err().to_string();
        assert!(err.contains("needs its private key: --nats-key"), "{err}");
        let err = tls(None, p("k")).unwrap_err().to_string();
        assert!(err.contains("needs its certificate: --nats-cert"), "{err}");
        let both = tls(p("c"), p("k")).unwrap();
        assert!(both.required() && both.client.is_some());
        let ca_only = tls(None, None).unwrap();
        assert!(ca_only.required() && ca_only.client.is_none());
        assert!(!NatsTls::default().required());
    }

    #[test]
    fn secrets_are_read_from_files_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let password = file(dir, "password", "pa55-w0rd\n");
        let sources = NatsAuthSources {
            user: Some("kube-pulse".into()),
            password_file: Some(password),
            ..Default::default()
        };
        let auth = sources.resolve().unwrap();
        assert_eq!(
            auth.credentials,
            Some(NatsCredentials::UserPassword {
                user: "kube-pulse".into(),
                password: Secret::new("pa55-w0rd"),
            })
        );
        assert_eq!(auth.describe(), "user kube-pulse");
        let token = NatsAuthSources {
            token: Some(Secret::new("t0ken-from-env")),
            ..Default::default()
        };
        let token = token.resolve().unwrap();
        assert_eq!(token.describe(), "token");
        for shown in [
            format!("{auth:?}"),
            format!("{sources:?}"),
            format!("{token:?}"),
            auth.describe(),
        ] {
            assert!(
                !shown.contains("pa55") && !shown.contains("t0ken"),
                "{shown}"
            );
        }
        // An empty file, an empty variable, more than one line, a missing
        // file: each refused, and the message names the file.
        let empty = file(dir, "empty", "\n");
        let two = file(dir, "two", "a\nb\n");
        for (path, want) in [
            (empty.clone(), "is empty"),
            (two, "more than one line"),
            (dir.join("missing"), "cannot read the password file"),
        ] {
            let sources = NatsAuthSources {
                user: Some("u".into()),
                password_file: Some(path.clone()),
                ..Default::default()
            };
            let err = sources.resolve().unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains(&*path.to_string_lossy()),
                "{err}"
            );
        }
        let err = NatsAuthSources {
            token: Some(Secret::new("")),
            ..Default::default()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("KUBE_PULSE_NATS_TOKEN is set but empty"),
            "{err}"
        );
    }

    #[test]
    fn seeds_and_credentials_files_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let seed = file(dir, "seed", &format!("{SEED}\n"));
        let auth = NatsAuthSources {
            nkey_seed: Some(seed.clone()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert!(matches!(
            auth.credentials,
            Some(NatsCredentials::NkeySeed { .. })
        ));
        assert!(!format!("{auth:?}").contains(SEED));
        assert_eq!(auth.describe(), format!("nkey seed {}", seed.display()));
        let account_seed = file(dir, "account", &SEED.replacen("SU", "SA", 1));
        let err = NatsAuthSources {
            nkey_seed: Some(account_seed),
            ..Default::default()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(err.contains("a user's nkey seed"), "{err}");
        assert!(!err.contains(&SEED[2..]), "{err}");
        let not_creds = file(dir, "not.creds", "hello\n");
        let err = NatsAuthSources {
            credentials: Some(not_creds),
            ..Default::default()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("credentials file") && err.contains("not usable"),
            "{err}"
        );
    }

    #[test]
    fn tls_files_must_hold_pem() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["kube-pulse".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let ca = file(dir, "ca.pem", &cert.pem());
        let cert_file = file(dir, "cert.pem", &cert.pem());
        let key_file = file(dir, "key.pem", &key.serialize_pem());
        let junk = file(dir, "junk.pem", "not a certificate\n");
        let with = |ca: &Path, cert: &Path, key: &Path| NatsAuthSources {
            ca: Some(ca.into()),
            cert: Some(cert.into()),
            key: Some(key.into()),
            ..Default::default()
        };
        let auth = with(&ca, &cert_file, &key_file).resolve().unwrap();
        assert!(auth.tls.required());
        assert!(
            auth.describe().contains("TLS with CA"),
            "{}",
            auth.describe()
        );
        for (sources, want) in [
            (with(&junk, &cert_file, &key_file), "CA file"),
            (with(&ca, &junk, &key_file), "client certificate"),
            (with(&ca, &cert_file, &junk), "no PEM private key"),
            (with(&ca, &cert_file, &cert_file), "no PEM private key"),
            (
                with(&dir.join("none"), &cert_file, &key_file),
                "cannot read the CA file",
            ),
        ] {
            let err = sources.resolve().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
        // The key's contents are never in an error.
        let err = with(&ca, &key_file, &key_file)
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(!err.contains("PRIVATE KEY"), "{err}");
    }

    #[test]
    fn the_options_take_every_way() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        for credentials in [
            None,
            Some(NatsCredentials::NkeySeed {
                path: "s".into(),
                seed: Secret::new(SEED),
            }),
            Some(NatsCredentials::UserPassword {
                user: "u".into(),
                password: Secret::new("p"),
            }),
            Some(NatsCredentials::Token(Secret::new("t"))),
        ] {
            let auth = NatsAuth {
                credentials,
                tls: NatsTls {
                    ca: Some(ca.clone()),
                    client: None,
                },
            };
            let options = auth.apply(async_nats::ConnectOptions::new()).unwrap();
            let shown = format!("{options:?}");
            assert!(!shown.contains(SEED), "{shown}");
        }
    }

    #[test]
    fn credentials_in_a_url_are_found() {
        for (url, has) in [
            ("nats://a:4222", false),
            ("nats://a:4222,tls://b:4222", false),
            ("nats://u:p@a:4222", true),
            ("nats://token@a:4222", true),
            ("nats://a:4222,nats://u:p@b:4222", true),
        ] {
            assert_eq!(has_userinfo(url), has, "{url}");
        }
    }
}
