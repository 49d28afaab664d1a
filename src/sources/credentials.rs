//! When a member's credentials stop working: the `notAfter` of its X.509
//! client certificate, or the `exp` of a bearer token that is a JWT
//! (service-account tokens are). Read once when the member's sources
//! start; the cluster machine warns as the date comes near.

use base64::Engine;
use chrono::{DateTime, Utc};
use secrecy::ExposeSecret;

use crate::status::cluster::{CredentialInfo, CredentialKind};

/// The expiry of the credentials in `config`, when they have one we can read.
pub(crate) fn expiry(config: &kube::Config) -> Option<CredentialInfo> {
    let auth = &config.auth_info;
    let certificate = auth
        .client_certificate_data
        .as_ref()
        .and_then(|data| {
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .ok()
        })
        .or_else(|| {
            auth.client_certificate
                .as_ref()
                .and_then(|path| std::fs::read(path).ok())
        });
    if let Some(expires) = certificate.as_deref().and_then(certificate_not_after) {
        return Some(CredentialInfo {
            kind: CredentialKind::ClientCertificate,
            expires,
        });
    }
    let token = auth
        .token
        .as_ref()
        .map(|t| t.expose_secret().to_string())
        .or_else(|| {
            auth.token_file
                .as_ref()
                .and_then(|path| std::fs::read_to_string(path).ok())
        })?;
    Some(CredentialInfo {
        kind: CredentialKind::Token,
        expires: token_exp(token.trim())?,
    })
}

/// The `exp` claim of a JWT (not verified: only its date is wanted).
pub(crate) fn token_exp(token: &str) -> Option<DateTime<Utc>> {
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&json).ok()?;
    DateTime::from_timestamp(claims["exp"].as_i64()?, 0)
}

/// The `notAfter` of the first certificate in PEM (or DER) `bytes`.
pub(crate) fn certificate_not_after(bytes: &[u8]) -> Option<DateTime<Utc>> {
    let der = pem_body(bytes).unwrap_or_else(|| bytes.to_vec());
    let certificate = Der::new(&der).enter(0x30)?;
    let mut tbs = certificate.enter(0x30)?;
    if tbs.peek() == Some(0xa0) {
        tbs.skip()?; // [0] version
    }
    tbs.skip()?; // serialNumber
    tbs.skip()?; // signature algorithm
    tbs.skip()?; // issuer
    let mut validity = tbs.enter(0x30)?;
    validity.skip()?; // notBefore
    let (tag, time) = validity.take()?;
    parse_time(tag, std::str::from_utf8(time).ok()?)
}

/// The base64 body of the first `CERTIFICATE` block, decoded.
fn pem_body(bytes: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let start = text.find("-----BEGIN CERTIFICATE-----")? + "-----BEGIN CERTIFICATE-----".len();
    let end = start + text[start..].find("-----END CERTIFICATE-----")?;
    let body: String = text[start..end].split_whitespace().collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// UTCTime (`YYMMDDHHMMSSZ`, tag 0x17) or GeneralizedTime (`YYYYMMDDHHMMSSZ`, 0x18).
fn parse_time(tag: u8, text: &str) -> Option<DateTime<Utc>> {
    let full = match tag {
        0x17 => {
            let year: u32 = text.get(..2)?.parse().ok()?;
            format!("{}{text}", if year >= 50 { "19" } else { "20" })
        }
        0x18 => text.to_string(),
        _ => return None,
    };
    chrono::NaiveDateTime::parse_from_str(full.trim_end_matches('Z'), "%Y%m%d%H%M%S")
        .ok()
        .map(|t| t.and_utc())
}

/// A cursor over DER: tag-length-value elements, in order.
struct Der<'a> {
    rest: &'a [u8],
}

impl<'a> Der<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    /// The next element's tag and contents.
    fn take(&mut self) -> Option<(u8, &'a [u8])> {
        let tag = *self.rest.first()?;
        let first = *self.rest.get(1)?;
        let (len, header) = if first < 0x80 {
            (usize::from(first), 2)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 {
                return None;
            }
            let len = self
                .rest
                .get(2..2 + n)?
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            (len, 2 + n)
        };
        let value = self.rest.get(header..header.checked_add(len)?)?;
        self.rest = &self.rest[header + len..];
        Some((tag, value))
    }

    fn skip(&mut self) -> Option<()> {
        self.take().map(|_| ())
    }

    /// The contents of the next element, which must have `tag`.
    fn enter(mut self, tag: u8) -> Option<Der<'a>> {
        match self.take()? {
            (t, value) if t == tag => Some(Der::new(value)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: serde_json::Value) -> String {
        let enc = |v: &serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        format!(
            "{}.{}.c2lnbmF0dXJl",
            enc(&serde_json::json!({"alg": "RS256"})),
            enc(&claims)
        )
    }

    #[test]
    fn token_expiry_table() {
        let cases = [
            (
                jwt(serde_json::json!({"exp": 1_900_000_000})),
                Some(1_900_000_000),
            ),
            (jwt(serde_json::json!({"sub": "no-exp"})), None),
            ("an-opaque-static-token".to_string(), None),
            ("a.b".to_string(), None),
            ("a.b.c.d".to_string(), None),
            ("x.%%%.y".to_string(), None),
        ];
        for (token, want) in cases {
            assert_eq!(token_exp(&token).map(|t| t.timestamp()), want, "{token}");
        }
    }

    #[test]
    fn certificate_expiry_from_pem_and_der() {
        let mut params = rcgen::CertificateParams::new(vec!["member".into()]).unwrap();
        params.not_after = rcgen::date_time_ymd(2031, 5, 17);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let want = "2031-05-17T00:00:00Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(certificate_not_after(cert.pem().as_bytes()), Some(want));
        assert_eq!(certificate_not_after(cert.der()), Some(want));
        // GeneralizedTime for dates from 2050 on.
        params.not_after = rcgen::date_time_ymd(2051, 1, 2);
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            certificate_not_after(cert.der()).map(|t| t.to_rfc3339()),
            Some("2051-01-02T00:00:00+00:00".into())
        );
        for bad in [
            &b""[..],
            b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----",
            &[0x30, 0x82, 0xff],
        ] {
            assert_eq!(certificate_not_after(bad), None);
        }
    }

    #[test]
    fn a_kube_config_names_what_expires() {
        let mut config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        assert_eq!(expiry(&config), None);
        config.auth_info.token = Some(jwt(serde_json::json!({"exp": 1_900_000_000})).into());
        let info = expiry(&config).unwrap();
        assert_eq!(info.kind, CredentialKind::Token);
        assert_eq!(info.expires.timestamp(), 1_900_000_000);
        let mut params = rcgen::CertificateParams::new(vec!["member".into()]).unwrap();
        params.not_after = rcgen::date_time_ymd(2030, 1, 1);
        let cert = params
            .self_signed(&rcgen::KeyPair::generate().unwrap())
            .unwrap();
        config.auth_info.client_certificate_data =
            Some(base64::engine::general_purpose::STANDARD.encode(cert.pem()));
        assert_eq!(
            expiry(&config).unwrap().kind,
            CredentialKind::ClientCertificate
        );
    }
}
