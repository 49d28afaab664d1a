//! Where a request's token comes from and how it is kept (`HTTP / WebSocket
//! handshake ──▶ [credential] ──▶ Auth::authenticate`): the `Authorization`
//! header, the Kubernetes bearer subprotocol of a WebSocket handshake, the
//! raw [`Credential`] a long-lived session re-checks, and the SHA-256 key
//! token files and review caches use instead of the token itself.

use axum::http::{HeaderMap, header};
use base64::Engine;

/// The WebSocket subprotocol prefix that carries a bearer token (the one the
/// Kubernetes apiserver accepts): `base64url.bearer.authorization.k8s.io.<token, base64url>`.
pub const WS_TOKEN_PROTOCOL: &str = "base64url.bearer.authorization.k8s.io.";
/// The subprotocol the gateway answers with.
pub const WS_PROTOCOL: &str = "kube-pulse";

/// SHA-256 of a token: how token files and review caches key tokens
/// without keeping them.
pub(super) fn sha256(data: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// The bearer token of an `Authorization` header.
pub fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

/// The token a WebSocket handshake carries in `Sec-WebSocket-Protocol`, if
/// any. One that is not base64url of UTF-8 is taken as it is written, so
/// that it is refused as a wrong token (401, a failure counted) rather
/// than read as no token at all.
pub fn ws_protocol_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .find_map(|p| p.strip_prefix(WS_TOKEN_PROTOCOL))
        .map(|b64| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(b64.trim_end_matches('='))
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .unwrap_or_else(|| b64.to_string())
        })
}

/// The raw token a request was authenticated with (sessions re-check it).
#[derive(Clone, Default)]
pub struct Credential(pub Option<String>);

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself: only whether one was sent.
        let token = self.0.as_ref().map(|_| "<redacted>");
        f.debug_tuple("Credential").field(&token).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn tokens_come_from_headers_and_subprotocols() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc.def"),
        );
        assert_eq!(bearer(&h).as_deref(), Some("abc.def"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&h), None);
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("tok-123");
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_str(&format!("kube-pulse, {WS_TOKEN_PROTOCOL}{encoded}")).unwrap(),
        );
        assert_eq!(ws_protocol_token(&h).as_deref(), Some("tok-123"));
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_str(&format!("kube-pulse, {WS_TOKEN_PROTOCOL}!!!")).unwrap(),
        );
        assert_eq!(
            ws_protocol_token(&h).as_deref(),
            Some("!!!"),
            "a token, refused as one"
        );
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("kube-pulse"),
        );
        assert_eq!(ws_protocol_token(&h), None);
    }
}
