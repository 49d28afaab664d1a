//! The WebSocket handshake (RFC 6455 §4.2) and the negotiation of
//! `permessage-deflate` (RFC 7692), in front of tungstenite's framing:
//! `client ──▶ [ws::upgrade] ──▶ ws::inflate ──▶ tungstenite ──▶ ws::wire`.
//! A request that is not a WebSocket handshake gets a JSON error.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use super::inflate::{Deflate, Inflating};
use crate::protocol::error_response;

/// A socket after the handshake: tungstenite over the inflating reader.
pub(crate) type Socket = WebSocketStream<Inflating<TokioIo<hyper::upgrade::Upgraded>>>;

/// A WebSocket handshake, checked; answered by [`Upgrade::accept`].
pub(crate) struct Upgrade {
    key: HeaderValue,
    /// The subprotocol offered that the gateway answers with.
    protocol: Option<HeaderValue>,
    /// The client's `permessage-deflate` offer the gateway can accept.
    offer: Option<Deflate>,
    on_upgrade: hyper::upgrade::OnUpgrade,
}

fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    error_response(status, code, message)
}

/// Whether a comma-separated header holds `token` (case-insensitive).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

impl<S: Send + Sync> FromRequestParts<S> for Upgrade {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        let h = &parts.headers;
        if parts.method != Method::GET {
            return Err(refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "a WebSocket handshake is a GET",
            ));
        }
        if !has_token(h, header::CONNECTION, "upgrade")
            || !has_token(h, header::UPGRADE, "websocket")
        {
            let mut response = refuse(
                StatusCode::UPGRADE_REQUIRED,
                "upgrade_required",
                "this is a WebSocket endpoint: send `Connection: Upgrade` and `Upgrade: websocket` \
                 (docs/PROTOCOL.md), or use SSE at /api/v1/events",
            );
            let headers = response.headers_mut();
            headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
            headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
            return Err(response);
        }
        let mut versions = h.get_all(header::SEC_WEBSOCKET_VERSION).iter();
        if versions.next().map(HeaderValue::as_bytes) != Some(b"13") || versions.next().is_some() {
            let mut response = refuse(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "Sec-WebSocket-Version must be 13",
            );
            response.headers_mut().insert(
                header::SEC_WEBSOCKET_VERSION,
                HeaderValue::from_static("13"),
            );
            return Err(response);
        }
        let Some(key) = h.get(header::SEC_WEBSOCKET_KEY).cloned() else {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "Sec-WebSocket-Key is missing",
            ));
        };
        if !key_is_valid(&key) || h.get_all(header::SEC_WEBSOCKET_KEY).iter().count() > 1 {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "Sec-WebSocket-Key must be one base64 value of 16 bytes (RFC 6455 §4.1)",
            ));
        }
        let protocol = h
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| p.trim() == crate::auth::WS_PROTOCOL)
            .then(|| HeaderValue::from_static(crate::auth::WS_PROTOCOL));
        let offer = h
            .get_all(header::SEC_WEBSOCKET_EXTENSIONS)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(acceptable_offer);
        // HTTP/1.1 only: the listeners do not enable HTTP/2's extended CONNECT.
        let Some(on_upgrade) = parts.extensions.remove::<hyper::upgrade::OnUpgrade>() else {
            return Err(refuse(
                StatusCode::UPGRADE_REQUIRED,
                "upgrade_required",
                "this connection cannot be upgraded: WebSockets need HTTP/1.1",
            ));
        };
        Ok(Self {
            key,
            protocol,
            offer,
            on_upgrade,
        })
    }
}

impl Upgrade {
    /// Answers 101 and runs `callback` on the socket once the connection
    /// is handed over; `deflate` says whether the gateway offers
    /// compression at all.
    pub(crate) fn accept<F, Fut>(
        self,
        config: WebSocketConfig,
        deflate: bool,
        max_message: usize,
        callback: F,
    ) -> Response
    where
        F: FnOnce(Socket, Option<Deflate>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let agreed = self.offer.filter(|_| deflate);
        let accept =
            tokio_tungstenite::tungstenite::handshake::derive_accept_key(self.key.as_bytes());
        let on_upgrade = self.on_upgrade;
        // The session runs in a task of its own: awaited here, it would sit
        // in this task beside the handover's state (2 816 bytes a socket
        // against the session's 1 568, `-Zprint-type-sizes`).
        tokio::spawn(async move {
            let Ok(upgraded) = on_upgrade.await else {
                return;
            };
            let io = Inflating::new(TokioIo::new(upgraded), agreed, max_message);
            let socket = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
            tokio::spawn(callback(socket, agreed));
        });
        let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
        let h = response.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        if let Ok(accept) = HeaderValue::from_str(&accept) {
            h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        }
        if let Some(protocol) = self.protocol {
            h.insert(header::SEC_WEBSOCKET_PROTOCOL, protocol);
        }
        if agreed.is_some() {
            h.insert(header::SEC_WEBSOCKET_EXTENSIONS, AGREED);
        }
        response
    }
}

/// The `Sec-WebSocket-Extensions` answer: each side compresses every
/// message on its own. The gateway's messages are shared by its sockets
/// (`server_no_context_takeover`); asking the same of the client
/// (`client_no_context_takeover`, RFC 7692 §7.1.1.2: a server may, offered
/// or not) lets a socket drop its inflater after each operation instead of
/// keeping a 32 KiB window for as long as it is open.
const AGREED: HeaderValue = HeaderValue::from_static(
    "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
);

/// Whether a `Sec-WebSocket-Key` is what RFC 6455 §4.1 says a client sends:
/// the base64 of 16 bytes (24 characters).
fn key_is_valid(key: &HeaderValue) -> bool {
    use base64::Engine as _;
    key.len() == 24
        && base64::engine::general_purpose::STANDARD
            .decode(key.as_bytes())
            .is_ok_and(|bytes| bytes.len() == 16)
}

/// The first `permessage-deflate` offer of a header value that the gateway
/// can accept (RFC 7692 §7.1): any parameter but a server window smaller
/// than 15 bits (the shared compressed bytes use 15), each at most once.
fn acceptable_offer(value: &str) -> Option<Deflate> {
    value.split(',').find_map(|offer| {
        let mut params = offer.split(';').map(str::trim);
        if !params.next()?.eq_ignore_ascii_case("permessage-deflate") {
            return None;
        }
        let mut seen: Vec<String> = Vec::new();
        for param in params {
            let (name, value) = match param.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
                None => (param, None),
            };
            let name = name.to_ascii_lowercase();
            if seen.contains(&name) {
                return None;
            }
            let bits = |v: Option<&str>| {
                v.and_then(|v| v.parse::<u8>().ok())
                    .filter(|b| (8..=15).contains(b))
            };
            match (name.as_str(), value) {
                ("server_no_context_takeover" | "client_no_context_takeover", None) => {}
                ("server_max_window_bits", v) => {
                    if bits(v) != Some(15) {
                        return None;
                    }
                }
                ("client_max_window_bits", None) => {}
                ("client_max_window_bits", v) => {
                    bits(v)?;
                }
                _ => return None,
            }
            seen.push(name);
        }
        Some(Deflate)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        for (key, valid) in [
            ("dGhlIHNhbXBsZSBub25jZQ==", true),
            ("AAAAAAAAAAAAAAAAAAAAAA==", true),
            ("", false),
            ("abc", false),
            ("!!!!", false),
            // 24 characters that are not the base64 of 16 bytes.
            ("dGhlIHNhbXBsZSBub25jZQ!!", false),
            ("dGhlIHNhbXBsZSBub25jZSE=", false),
        ] {
            assert_eq!(
                key_is_valid(&HeaderValue::from_static(key)),
                valid,
                "{key:?}"
            );
        }
    }

    #[test]
    fn offers() {
        let plain = Some(Deflate);
        let no_takeover = Some(Deflate);
        let table = [
            // Chromium's, Firefox's, Python websockets' and Node ws' offers.
            ("permessage-deflate; client_max_window_bits", plain),
            ("permessage-deflate", plain),
            ("permessage-deflate; client_max_window_bits=15", plain),
            (
                "permessage-deflate; client_no_context_takeover",
                no_takeover,
            ),
            (
                "permessage-deflate; server_no_context_takeover; client_max_window_bits=10",
                plain,
            ),
            ("x-webkit-deflate-frame", None),
            ("", None),
            // A server window the shared bytes do not fit: the next offer.
            (
                "permessage-deflate; server_max_window_bits=10, permessage-deflate",
                plain,
            ),
            ("permessage-deflate; server_max_window_bits=10", None),
            ("permessage-deflate; server_max_window_bits=\"15\"", plain),
            ("permessage-deflate; client_max_window_bits=7", None),
            ("permessage-deflate; client_max_window_bits=x", None),
            (
                "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
                None,
            ),
            ("permessage-deflate; server_no_context_takeover=1", None),
            ("permessage-deflate; mystery", None),
            ("foo, PERMESSAGE-DEFLATE", plain),
        ];
        for (offer, want) in table {
            assert_eq!(acceptable_offer(offer), want, "{offer:?}");
        }
    }
}
