//! `--auth jwt`: signed JSON Web Tokens. HS256 with a shared secret, or
//! RS256 / ES256 with public keys (PEM files or a JWKS file). `exp` is
//! required; `nbf`, `iss` and `aud` are checked; a token is only ever
//! verified with a key of its header's algorithm, so `alg: none` and key
//! confusion (an HS256 token "signed" with a public key) are refused.
//!
//! Grants come from the `pulse` claim: `{"read": [SCOPE…], "write": [SCOPE…]}`.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::scope::{Principal, Scopes};

/// Where the keys come from and what the claims must say.
#[derive(Debug, Clone, Default)]
pub struct JwtSettings {
    /// File holding the HS256 secret (its bytes, trailing newline removed).
    pub hs256_secret: Option<PathBuf>,
    /// PEM public keys: RSA (RS256) or EC P-256 (ES256).
    pub public_keys: Vec<PathBuf>,
    /// A JWKS file (`{"keys": [...]}`) of RSA and EC P-256 keys.
    pub jwks: Option<PathBuf>,
    /// The `iss` a token must carry (None: any issuer).
    pub issuer: Option<String>,
    /// An `aud` a token must list (None: any audience).
    pub audience: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    pub leeway: u64,
}

struct Key {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

/// Verifies tokens against the configured keys.
pub struct JwtVerifier {
    keys: Vec<Key>,
    issuer: Option<String>,
    audience: Option<String>,
    leeway: u64,
}

#[derive(Debug, Deserialize)]
struct Claims {
    #[serde(default)]
    sub: Option<String>,
    exp: i64,
    #[serde(default)]
    pulse: Grants,
}

#[derive(Debug, Default, Deserialize)]
struct Grants {
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    write: Vec<String>,
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn pem_key(pem: &[u8], path: &Path) -> Result<Key, String> {
    if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
        return Ok(Key {
            kid: None,
            algorithm: Algorithm::RS256,
            key,
        });
    }
    if let Ok(key) = DecodingKey::from_ec_pem(pem) {
        return Ok(Key {
            kid: None,
            algorithm: Algorithm::ES256,
            key,
        });
    }
    Err(format!(
        "{}: not an RSA or EC P-256 public key in PEM form",
        path.display()
    ))
}

fn jwks_keys(json: &[u8], path: &Path) -> Result<Vec<Key>, String> {
    let set: JwkSet = serde_json::from_slice(json)
        .map_err(|e| format!("{}: not a JWKS document: {e}", path.display()))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let algorithm = match (&jwk.algorithm, jwk.common.key_algorithm) {
            (AlgorithmParameters::RSA(_), None | Some(KeyAlgorithm::RS256)) => Algorithm::RS256,
            (AlgorithmParameters::EllipticCurve(ec), None | Some(KeyAlgorithm::ES256))
                if ec.curve == EllipticCurve::P256 =>
            {
                Algorithm::ES256
            }
            // Other key types and algorithms are not accepted.
            _ => continue,
        };
        let key = DecodingKey::from_jwk(jwk)
            .map_err(|e| format!("{}: key {:?}: {e}", path.display(), jwk.common.key_id))?;
        keys.push(Key {
            kid: jwk.common.key_id.clone(),
            algorithm,
            key,
        });
    }
    Ok(keys)
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys stay out: an HS256 key is the shared secret itself.
        f.debug_struct("JwtVerifier")
            .field("keys", &self.keys.len())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("leeway", &self.leeway)
            .finish()
    }
}

impl JwtVerifier {
    /// Reads the keys `settings` names; fails on an unreadable or unusable key.
    pub fn new(settings: &JwtSettings) -> Result<Self, String> {
        let mut keys = Vec::new();
        if let Some(path) = &settings.hs256_secret {
            let mut secret = read(path)?;
            while secret.last().is_some_and(|b| b.is_ascii_whitespace()) {
                secret.pop();
            }
            if secret.len() < 32 {
                return Err(format!(
                    "{}: an HS256 secret has at least 32 bytes",
                    path.display()
                ));
            }
            keys.push(Key {
                kid: None,
                algorithm: Algorithm::HS256,
                key: DecodingKey::from_secret(&secret)
                    .map_err(|e| format!("{}: {e}", path.display()))?,
            });
        }
        for path in &settings.public_keys {
            keys.push(pem_key(&read(path)?, path)?);
        }
        if let Some(path) = &settings.jwks {
            keys.extend(jwks_keys(&read(path)?, path)?);
        }
        if keys.is_empty() {
            return Err(
                "jwt auth needs a key: an HS256 secret, a public key or a JWKS file".into(),
            );
        }
        Ok(Self {
            keys,
            issuer: settings.issuer.clone(),
            audience: settings.audience.clone(),
            leeway: settings.leeway,
        })
    }

    /// The principal of a valid token, or why it is not valid.
    pub fn verify(&self, token: &str) -> Result<Principal, String> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| format!("malformed token: {e}"))?;
        let candidates: Vec<&Key> = self
            .keys
            .iter()
            .filter(|k| k.algorithm == header.alg)
            .filter(|k| match (&header.kid, &k.kid) {
                (Some(want), Some(have)) => want == have,
                _ => true,
            })
            .collect();
        if candidates.is_empty() {
            return Err(format!("no key accepts algorithm {:?}", header.alg));
        }
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.leeway;
        validation.validate_nbf = true;
        let mut required = vec!["exp"];
        match &self.issuer {
            Some(iss) => {
                validation.set_issuer(&[iss]);
                required.push("iss");
            }
            None => validation.iss = None,
        }
        match &self.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        let mut last = String::new();
        for key in candidates {
            match jsonwebtoken::decode::<Claims>(token, &key.key, &validation) {
                Ok(data) => return principal(data.claims, self.leeway),
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!("invalid token: {last}"))
    }
}

/// The principal of verified claims. Its session lasts while the token is
/// accepted: until `exp` plus the leeway. (Ending it at `exp` would make a
/// live session re-check at once, and keep doing so, all through the
/// leeway, since the token still verifies.)
fn principal(claims: Claims, leeway: u64) -> Result<Principal, String> {
    let read = Scopes::parse(&claims.pulse.read).map_err(|e| format!("claim pulse.read: {e}"))?;
    let write =
        Scopes::parse(&claims.pulse.write).map_err(|e| format!("claim pulse.write: {e}"))?;
    Ok(Principal {
        subject: claims.sub.unwrap_or_else(|| "jwt".into()),
        read,
        write,
        expires: DateTime::<Utc>::from_timestamp(
            claims
                .exp
                .saturating_add(i64::try_from(leeway).unwrap_or(i64::MAX)),
            0,
        ),
        kube_user: None,
    })
}
