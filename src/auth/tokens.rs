//! `--auth tokens`: static bearer tokens from a YAML file, each with its
//! subject and scopes. The file may hold SHA-256 digests instead of the
//! tokens themselves, so it need not be a secret.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::credential::sha256;
use super::scope::{Principal, Scopes};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tokens: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    subject: String,
    #[serde(default)]
    token: Option<String>,
    /// Hex SHA-256 of the token.
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    write: Vec<String>,
    #[serde(default)]
    expires: Option<DateTime<Utc>>,
}

struct Token {
    digest: [u8; 32],
    principal: Principal,
}

/// The tokens of one file.
pub struct TokenFile {
    tokens: Vec<Token>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Subjects only: even a digest of a token is not printed.
        let subjects: Vec<&str> = self
            .tokens
            .iter()
            .map(|t| t.principal.subject.as_str())
            .collect();
        f.debug_struct("TokenFile")
            .field("subjects", &subjects)
            .finish()
    }
}

fn from_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl TokenFile {
    /// Reads and parses the token file at `path` (see `parse`).
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read token file {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("token file {}: {e}", path.display()))
    }

    /// Parses a YAML token file (`tokens: [{subject, token | sha256, read,
    /// write, expires}]`); tokens are kept only as their SHA-256.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        let mut tokens = Vec::new();
        for (i, e) in file.tokens.into_iter().enumerate() {
            let at = format!("tokens[{i}] ({})", e.subject);
            let digest = match (&e.token, &e.sha256) {
                (Some(t), None) if t.len() >= 16 => sha256(t.as_bytes()),
                (Some(_), None) => return Err(format!("{at}: a token has at least 16 characters")),
                (None, Some(h)) => from_hex(&h.to_ascii_lowercase())
                    .ok_or_else(|| format!("{at}: sha256 must be 64 hex digits"))?,
                _ => return Err(format!("{at}: give exactly one of token and sha256")),
            };
            let read = Scopes::parse(&e.read).map_err(|err| format!("{at}: read: {err}"))?;
            let write = Scopes::parse(&e.write).map_err(|err| format!("{at}: write: {err}"))?;
            tokens.push(Token {
                digest,
                principal: Principal {
                    subject: e.subject,
                    read,
                    write,
                    expires: e.expires,
                    kube_user: None,
                },
            });
        }
        Ok(Self { tokens })
    }

    /// The principal of `token`, comparing digests in constant time.
    pub fn find(&self, token: &str, now: DateTime<Utc>) -> Result<Principal, String> {
        let digest = sha256(token.as_bytes());
        let mut found = None;
        for t in &self.tokens {
            // No early exit: every entry is compared.
            if bool::from(subtle::ConstantTimeEq::ct_eq(&t.digest[..], &digest[..])) {
                found = Some(&t.principal);
            }
        }
        let principal = found.ok_or("unknown token")?;
        if principal.expires.is_some_and(|e| e <= now) {
            return Err("the token has expired".into());
        }
        Ok(principal.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_digests() {
        let digest: String = sha256(b"bob-token-0123456789")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let file = TokenFile::parse(&format!(
            "tokens:\n\
             - {{subject: alice, token: alice-token-0123456789, read: [a], write: [a/shop]}}\n\
             - {{subject: bob, sha256: {digest}, read: ['*']}}\n\
             - {{subject: old, token: old-token-0123456789, expires: '2020-01-01T00:00:00Z'}}\n"
        ))
        .unwrap();
        let now = Utc::now();
        let alice = file.find("alice-token-0123456789", now).unwrap();
        assert_eq!(alice.subject, "alice");
        assert!(alice.write.allows("a", Some("shop")));
        assert!(!alice.write.allows("a", Some("other")));
        assert!(
            file.find("bob-token-0123456789", now)
                .unwrap()
                .read
                .is_all()
        );
        assert_eq!(file.find("nope", now).unwrap_err(), "unknown token");
        assert!(
            file.find("old-token-0123456789", now)
                .unwrap_err()
                .contains("expired")
        );
        let bad = [
            ("tokens: [{subject: x}]", "exactly one of token and sha256"),
            ("tokens: [{subject: x, token: short}]", "at least 16"),
            ("tokens: [{subject: x, sha256: abc}]", "64 hex digits"),
            (
                "tokens: [{subject: x, token: long-enough-token-123, read: ['a/b/c']}]",
                "read: scope",
            ),
            (
                "tokens: [{subject: x, token: long-enough-token-123, colour: red}]",
                "unknown field",
            ),
        ];
        for (text, want) in bad {
            let err = TokenFile::parse(text).err().unwrap();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
