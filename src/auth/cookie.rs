//! Cookie sessions for the browser's native `EventSource`, which cannot
//! send an `Authorization` header (`POST /api/v1/session` with a bearer
//! token ──▶ [Sessions] ──▶ an HttpOnly cookie ──▶ `require` on GET
//! requests ──▶ `Auth::authenticate` of the token it stands for).
//!
//! A session is a random 256-bit id in the cookie; the gateway keeps only
//! the SHA-256 of that id, with the token it stands for and when it ends
//! (the token's expiry, at most [`MAX_AGE`]). The token is checked again at
//! every request, so a revoked or expired token ends its cookie too. Only
//! safe methods take the cookie: an action (tasks) needs the bearer token,
//! so a cross-site request riding the cookie can change nothing. The store
//! is bounded ([`MAX_SESSIONS`]; expired sessions go first, then the
//! oldest).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};

/// The cookie's name.
pub const COOKIE: &str = "kube_pulse_session";
/// The longest a session lives, whatever its token's expiry.
pub const MAX_AGE: Duration = Duration::from_secs(8 * 3600);
/// Sessions held at most (a few hundred bytes each).
pub const MAX_SESSIONS: usize = 10_000;

struct Entry {
    token: String,
    ends: Instant,
    made: Instant,
}

/// The cookie sessions the gateway issued, by the SHA-256 of their id.
#[derive(Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<[u8; 32], Entry>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.by_id.lock().map(|m| m.len()).unwrap_or(0);
        f.debug_struct("Sessions").field("held", &held).finish()
    }
}

impl Sessions {
    /// A new session for `token`, living `ttl` (at most [`MAX_AGE`]) from
    /// `now`: its id, for the cookie.
    pub fn issue(&self, token: &str, ttl: Duration, now: Instant) -> String {
        let mut id = [0u8; 32];
        SystemRandom::new()
            .fill(&mut id)
            .expect("the system's random source");
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id);
        let mut map = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_SESSIONS {
            map.retain(|_, e| e.ends > now);
        }
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map.iter().min_by_key(|(_, e)| e.made).map(|(k, _)| *k)
        {
            map.remove(&oldest);
        }
        map.insert(
            super::credential::sha256(id.as_bytes()),
            Entry {
                token: token.to_string(),
                ends: now + ttl.min(MAX_AGE),
                made: now,
            },
        );
        id
    }

    /// The token the session `id` stands for, while it lives.
    pub fn token(&self, id: &str, now: Instant) -> Option<String> {
        let key = super::credential::sha256(id.as_bytes());
        let mut map = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(&key) {
            Some(e) if e.ends > now => Some(e.token.clone()),
            Some(_) => {
                map.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the session `id` (logout).
    pub fn end(&self, id: &str) {
        let key = super::credential::sha256(id.as_bytes());
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    }

    /// How many sessions are held (expired ones until they are looked at or evicted).
    pub fn len(&self) -> usize {
        self.by_id.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The session id a request's `Cookie` header carries, if any.
pub fn cookie_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The `Set-Cookie` value of a session: HttpOnly (no script reads it),
/// Secure (browsers send it over HTTPS, and to loopback), SameSite=Strict
/// (no other site's page sends it), for the whole gateway.
pub fn set_cookie(id: &str, max_age: Duration) -> String {
    format!(
        "{COOKIE}={id}; Path=/; Max-Age={}; HttpOnly; Secure; SameSite=Strict",
        max_age.as_secs()
    )
}

/// The `Set-Cookie` value that removes the cookie.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Strict")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_session_stands_for_its_token_until_it_ends() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let id = sessions.issue("tok", Duration::from_secs(60), now);
        assert_eq!(id.len(), 43, "256 bits, base64url");
        assert_eq!(sessions.token(&id, now).as_deref(), Some("tok"));
        assert_eq!(sessions.token("nope", now), None);
        assert_eq!(sessions.token(&id, now + Duration::from_secs(61)), None);
        assert!(
            sessions.is_empty(),
            "an expired session is dropped once seen"
        );
        let id = sessions.issue("tok", Duration::from_secs(999_999), now);
        assert_eq!(sessions.token(&id, now + MAX_AGE), None, "at most MAX_AGE");
        let id = sessions.issue("tok", Duration::from_secs(60), now);
        sessions.end(&id);
        assert_eq!(sessions.token(&id, now), None);
    }

    #[test]
    fn the_store_is_bounded() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let first = sessions.issue("a", Duration::from_secs(60), now);
        for i in 1..=MAX_SESSIONS {
            sessions.issue(
                "b",
                Duration::from_secs(60),
                now + Duration::from_millis(i as u64),
            );
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        assert_eq!(sessions.token(&first, now), None, "the oldest went");
    }

    #[test]
    fn the_cookie_is_read_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; kube_pulse_session=abc_DEF; b=2"),
        );
        assert_eq!(cookie_id(&h).as_deref(), Some("abc_DEF"));
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("kube_pulse_session="),
        );
        assert_eq!(cookie_id(&h), None);
        let set = set_cookie("x", Duration::from_secs(5));
        for attribute in [
            "HttpOnly",
            "Secure",
            "SameSite=Strict",
            "Max-Age=5",
            "Path=/",
        ] {
            assert!(set.contains(attribute), "{set}");
        }
    }
}
