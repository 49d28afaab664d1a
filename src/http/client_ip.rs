//! Who a request really comes from (`listener ──▶ [client_ip] ──▶ router`):
//! behind a reverse proxy every request's TCP peer is the proxy, so the
//! per-IP limits would count a whole deployment as one client. When the
//! peer is a configured trusted proxy, the client is the right-most address
//! of the configured forwarding header that is not itself a trusted proxy;
//! from any other peer the header is ignored, so spoofing it changes
//! nothing. [`attach`] runs once per request, before the router: it puts the
//! client into `ConnectInfo<SocketAddr>` (what the limits, rates and auth
//! throttling read) and the TCP peer into [`PeerAddr`] (for logs).

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request};

use crate::http_settings::{Cidr, ForwardedHeader};

/// The TCP peer of a request, kept beside the client address that
/// `ConnectInfo<SocketAddr>` carries once forwarding headers were honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The proxies whose forwarding header is believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    /// Peers (and hops) trusted to report the client's address.
    pub cidrs: Vec<Cidr>,
    /// The header they report it in.
    pub header: ForwardedHeader,
}

/// Hops looked at from the right before giving up on a header (a proxy
/// chain is a few hops; a longer list is noise from the client).
const MAX_HOPS: usize = 32;

impl TrustedProxies {
    /// Whether `ip` is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.cidrs.iter().any(|c| c.contains(ip))
    }

    /// The client address of a request from `peer`: the peer itself unless
    /// it is trusted, then the right-most untrusted hop of the header (the
    /// left-most hop when all are trusted). A missing or malformed header
    /// gives the peer, never an error.
    pub fn client(&self, peer: SocketAddr, headers: &HeaderMap) -> SocketAddr {
        if self.cidrs.is_empty() || !self.contains(peer.ip()) {
            return peer;
        }
        let hops = match self.header {
            ForwardedHeader::XForwardedFor => {
                header_list(headers, "x-forwarded-for", |h| Some(h.trim().to_string()))
            }
            ForwardedHeader::Forwarded => header_list(headers, "forwarded", forwarded_for),
        };
        let Some(hops) = hops else { return peer };
        let mut last = None;
        for hop in hops.iter().rev().take(MAX_HOPS) {
            let Some(addr) = parse_node(hop) else {
                return peer;
            };
            if !self.contains(addr.ip()) {
                return addr;
            }
            last = Some(addr);
        }
        if hops.len() > MAX_HOPS {
            return peer;
        }
        last.unwrap_or(peer)
    }
}

/// The comma-separated elements of every `name` header, each mapped by
/// `element`; None when a header is not text or an element is malformed.
fn header_list(
    headers: &HeaderMap,
    name: &str,
    element: impl Fn(&str) -> Option<String>,
) -> Option<Vec<String>> {
    let mut hops = Vec::new();
    for value in headers.get_all(name) {
        for part in split_outside_quotes(value.to_str().ok()?, ',') {
            hops.push(element(part)?);
        }
    }
    Some(hops)
}

/// The `for=` value of one RFC 7239 element (`for=…;proto=…;by=…`).
fn forwarded_for(element: &str) -> Option<String> {
    split_outside_quotes(element, ';')
        .into_iter()
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| key.trim().eq_ignore_ascii_case("for"))
        .map(|(_, value)| value.trim().trim_matches('"').to_string())
}

fn split_outside_quotes(text: &str, separator: char) -> Vec<&str> {
    let (mut parts, mut start, mut quoted) = (Vec::new(), 0, false);
    for (i, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c == separator && !quoted => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]` or
/// `[2001:db8::1]:4711` (port 0 when none is given); None for anything
/// else, such as RFC 7239's `unknown` and obfuscated `_names`.
fn parse_node(raw: &str) -> Option<SocketAddr> {
    let raw = raw.trim();
    if let Ok(addr) = raw.parse::<SocketAddr>() {
        return Some(addr);
    }
    let bare = raw
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(raw);
    bare.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 0))
}

/// Puts the client address of a request from `peer` into
/// `ConnectInfo<SocketAddr>` and `peer` into [`PeerAddr`].
pub(crate) fn attach<B>(trusted: &TrustedProxies, peer: SocketAddr, request: &mut Request<B>) {
    let client = trusted.client(peer, request.headers());
    let extensions = request.extensions_mut();
    extensions.insert(PeerAddr(peer));
    extensions.insert(ConnectInfo(client));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(header: ForwardedHeader) -> TrustedProxies {
        TrustedProxies {
            cidrs: vec!["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()],
            header,
        }
    }

    fn client(trusted: &TrustedProxies, peer: &str, headers: &[(&str, &str)]) -> String {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                axum::http::HeaderValue::from_bytes(value.as_bytes()).unwrap(),
            );
        }
        trusted.client(peer.parse().unwrap(), &map).ip().to_string()
    }

    #[test]
    fn the_header_counts_only_from_a_trusted_peer() {
        let xff = proxies(ForwardedHeader::XForwardedFor);
        let spoofed = [("x-forwarded-for", "198.51.100.7")];
        assert_eq!(client(&xff, "203.0.113.1:5000", &spoofed), "203.0.113.1");
        assert_eq!(client(&xff, "10.0.0.2:5000", &spoofed), "198.51.100.7");
        // Right-most untrusted hop: the client's own claim on the left is ignored.
        let chain = [("x-forwarded-for", "1.1.1.1, 198.51.100.7, 10.0.0.9")];
        assert_eq!(client(&xff, "10.0.0.2:5000", &chain), "198.51.100.7");
        // Two header lines are one list.
        let lines = [
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "198.51.100.8"),
        ];
        assert_eq!(client(&xff, "10.0.0.2:5000", &lines), "198.51.100.8");
        // Every hop trusted: the left-most one.
        let inside = [("x-forwarded-for", "10.9.9.9, 10.0.0.9")];
        assert_eq!(client(&xff, "10.0.0.2:5000", &inside), "10.9.9.9");
        // The other header is not read.
        let other = [("forwarded", "for=198.51.100.7")];
        assert_eq!(client(&xff, "10.0.0.2:5000", &other), "10.0.0.2");
        // No header: the peer.
        assert_eq!(client(&xff, "10.0.0.2:5000", &[]), "10.0.0.2");
    }

    #[test]
    fn rfc_7239_forms_are_understood() {
        let fwd = proxies(ForwardedHeader::Forwarded);
        let peer = "[fd00::1]:443";
        let cases = [
            ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
            ("For=\"[2001:db8:cafe::17]:4711\"", "2001:db8:cafe::17"),
            ("for=192.0.2.43, for=198.51.100.17", "198.51.100.17"),
            (
                "for=198.51.100.17;by=\"a,b\", for=10.0.0.1",
                "198.51.100.17",
            ),
            ("for=192.0.2.43:8080", "192.0.2.43"),
        ];
        for (value, want) in cases {
            assert_eq!(client(&fwd, peer, &[("forwarded", value)]), want, "{value}");
        }
    }

    #[test]
    fn malformed_headers_give_the_peer() {
        let xff = proxies(ForwardedHeader::XForwardedFor);
        let fwd = proxies(ForwardedHeader::Forwarded);
        let peer = "10.0.0.2:5000";
        for value in [
            "",
            "not-an-ip",
            "1.1.1.1,,",
            "999.1.1.1",
            "[::1",
            "1.1.1.1 2.2.2.2",
        ] {
            assert_eq!(
                client(&xff, peer, &[("x-forwarded-for", value)]),
                "10.0.0.2",
                "{value:?}"
            );
        }
        for value in [
            "for=unknown",
            "for=_hidden",
            "proto=https",
            "for=",
            "garbage",
            "for=\"[::1\"",
        ] {
            assert_eq!(
                client(&fwd, peer, &[("forwarded", value)]),
                "10.0.0.2",
                "{value:?}"
            );
        }
        let long = vec!["10.0.0.1"; MAX_HOPS + 5].join(",");
        assert_eq!(
            client(&xff, peer, &[("x-forwarded-for", &long)]),
            "10.0.0.2"
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-forwarded-for",
            axum::http::HeaderValue::from_bytes(b"\xff1.1.1.1").unwrap(),
        );
        assert_eq!(
            xff.client(peer.parse().unwrap(), &headers).ip().to_string(),
            "10.0.0.2"
        );
    }
}
