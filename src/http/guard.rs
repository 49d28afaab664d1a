//! The request guard in front of every route (`browser ──▶ [guard] ──▶
//! routes`): what keeps other web sites from acting on a gateway through a
//! visitor's browser (docs/SECURITY.md, "Browsers and other sites").
//!
//! - **Host allowlist**: IP literals, `localhost` and `*.localhost` always,
//!   names from `--allowed-host` besides (`*` turns the check off); others
//!   get `421 misdirected_request`. A DNS-rebinding page can only ever send
//!   its own name. The summary health endpoints are exempt.
//! - **Origin** on state-changing requests and WebSocket upgrades: the
//!   request's own origin, a loopback origin or one from `--allow-origin`
//!   ([`origin_allowed`], the one rule for REST and WebSocket); otherwise
//!   `403 forbidden_origin`. Without an `Origin`, a request that carries
//!   browser fetch metadata from another site is refused as well.
//! - **Framing**: every response says `X-Frame-Options: SAMEORIGIN` and
//!   `Content-Security-Policy: frame-ancestors 'self'`.
//!
//! [`require_json`] (on routes that read a JSON body) refuses other content
//! types with `415`.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use axum::body::HttpBody as _;
use axum::extract::{Request, State};
use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::protocol::error_response;

/// What the guard accepts besides its built-in defaults.
#[derive(Debug, Clone, Default)]
pub struct GuardConfig {
    /// Host names allowed besides IP literals and `localhost`: exact names,
    /// `*.example.com` (any name below it), or `*` (no Host check).
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed to act besides the request's own and loopback
    /// ones (`*` for any): `--allow-origin`, shared with CORS.
    pub allowed_origins: Vec<String>,
}

/// Paths that answer whatever the Host: the summary probes name checks
/// only, and monitoring may call them by any name.
const HOST_EXEMPT: &[&str] = &["/livez", "/readyz", "/healthz"];

/// Whether the host part of a `Host` (no port; IPv6 in brackets) is allowed.
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let ipv6 = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .is_some_and(|h| h.parse::<Ipv6Addr>().is_ok());
    if ipv6 || host.parse::<Ipv4Addr>().is_ok() {
        return true;
    }
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    allowed.iter().any(|a| {
        let a = a.to_ascii_lowercase();
        match a.strip_prefix("*.") {
            _ if a == "*" => true,
            Some(suffix) => host
                .strip_suffix(suffix)
                .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
            None => a == host,
        }
    })
}

/// Whether a browser `Origin` may act on this gateway: the request's own
/// origin (`host`: same host and port, a missing port being the scheme's
/// default), a loopback origin (`localhost`, `127.0.0.1`, `[::1]`), or one
/// of `allowed` (`*` for any). `null` and anything unparsable are refused.
pub fn origin_allowed(origin: &str, host: Option<&str>, allowed: &[String]) -> bool {
    if allowed
        .iter()
        .any(|a| a == "*" || a.eq_ignore_ascii_case(origin))
    {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return false,
    };
    if rest.contains(['/', '@', '?', '#']) {
        return false;
    }
    let Ok(from) = rest.parse::<Authority>() else {
        return false;
    };
    if matches!(
        from.host().to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "[::1]"
    ) {
        return true;
    }
    let Some(to) = host.and_then(|h| h.parse::<Authority>().ok()) else {
        return false;
    };
    from.host().eq_ignore_ascii_case(to.host())
        && from.port_u16().unwrap_or(default_port) == to.port_u16().unwrap_or(default_port)
}

/// The request's authority: the URI's (HTTP/2, absolute form) or `Host`.
fn authority(request: &Request) -> Option<String> {
    match request.uri().authority() {
        Some(a) => Some(a.as_str().to_string()),
        None => request
            .headers()
            .get(header::HOST)
            .map(|h| h.to_str().unwrap_or("\u{0}").to_string()),
    }
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Why a request is refused, if it is.
fn refusal(config: &GuardConfig, request: &Request) -> Option<Response> {
    let host = authority(request);
    if let Some(host) = &host
        && !HOST_EXEMPT.contains(&request.uri().path())
    {
        let name = host.parse::<Authority>().map(|a| a.host().to_string());
        if !name.is_ok_and(|n| host_allowed(&n, &config.allowed_hosts)) {
            return Some(error_response(
                StatusCode::MISDIRECTED_REQUEST,
                "misdirected_request",
                &format!(
                    "this gateway does not answer for the host {host:?}; add it with --allowed-host (allowedHosts in the config file)"
                ),
            ));
        }
    }
    let headers = request.headers();
    // CONNECT too: a WebSocket over HTTP/2 would arrive as one.
    let acts = matches!(
        *request.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE | Method::CONNECT
    );
    if !acts && !is_upgrade(headers) {
        return None;
    }
    let allowed = match headers.get(header::ORIGIN) {
        Some(origin) => origin
            .to_str()
            .is_ok_and(|o| origin_allowed(o, host.as_deref(), &config.allowed_origins)),
        // No Origin: not a browser, unless it says where it was sent from.
        None => !headers
            .get("sec-fetch-site")
            .is_some_and(|v| v == "cross-site" || v == "same-site"),
    };
    (!allowed).then(|| {
        error_response(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            "requests that change state or open a WebSocket must come from this gateway's own origin, a loopback origin or one listed with --allow-origin",
        )
    })
}

/// The guard middleware (over every route, see [`crate::http::router::app`]).
pub async fn guard(
    State(config): State<Arc<GuardConfig>>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = match refusal(&config, &request) {
        Some(refused) => {
            tracing::debug!(path = %request.uri().path(), status = %refused.status(), "request refused by the guard");
            refused
        }
        None => next.run(request).await,
    };
    let headers = response.headers_mut();
    headers.insert(
        header::X_FRAME_OPTIONS,
        HeaderValue::from_static("SAMEORIGIN"),
    );
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("frame-ancestors 'self'"),
        );
    }
    response
}

/// Whether a `Content-Type` is JSON: `application/json` or
/// `application/*+json`, with any parameters.
pub fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.len() > 5 && sub.ends_with("+json"))
}

/// Middleware for routes that read a JSON body: a POST, PUT or PATCH with a
/// body needs a JSON `Content-Type` (415 otherwise), so a cross-site
/// `text/plain` form or a `no-cors` fetch cannot reach them.
pub async fn require_json(request: Request, next: Next) -> Response {
    let writes = matches!(
        *request.method(),
        Method::POST | Method::PUT | Method::PATCH
    );
    let body = request.body();
    let empty = body.is_end_stream() || body.size_hint().exact() == Some(0);
    let json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(is_json);
    if writes && !empty && !json {
        return error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be JSON: send Content-Type: application/json",
        );
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let allowed = vec!["https://karpor.example.com".to_string()];
        let cases = [
            ("http://gw:8080", "gw:8080", true),
            ("http://GW:8080", "gw:8080", true),
            ("http://localhost:3000", "gw:8080", true),
            ("http://127.0.0.1:5173", "gw:8080", true),
            ("http://[::1]:5173", "gw:8080", true),
            ("https://karpor.example.com", "gw:8080", true),
            ("https://evil.example", "gw:8080", false),
            ("http://gw:8081", "gw:8080", false),
            ("null", "gw:8080", false),
            // A missing port is the scheme's default, on either side.
            ("https://pulse.example.com", "pulse.example.com", true),
            ("http://pulse.example.com", "pulse.example.com", true),
            ("https://pulse.example.com", "pulse.example.com:443", true),
            ("http://pulse.example.com:443", "pulse.example.com", false),
            ("https://pulse.example.com:8443", "pulse.example.com", false),
            ("ftp://gw:8080", "gw:8080", false),
            ("http://gw:8080/path", "gw:8080", false),
            ("http://user@gw:8080", "gw:8080", false),
            ("http://localhost.evil.example", "gw:8080", false),
            ("http://[::1]", "[::1]", true),
        ];
        for (origin, host, want) in cases {
            assert_eq!(
                origin_allowed(origin, Some(host), &allowed),
                want,
                "{origin:?} to {host:?}"
            );
        }
        assert!(!origin_allowed("http://gw:8080", None, &allowed));
        assert!(origin_allowed(
            "https://evil.example",
            Some("gw"),
            &["*".to_string()]
        ));
    }

    #[test]
    fn hosts() {
        let allowed = vec!["pulse.example.com".to_string(), "*.svc.example".to_string()];
        let cases = [
            ("127.0.0.1", true),
            ("10.1.2.3", true),
            ("[::1]", true),
            ("[fd00::1]", true),
            ("localhost", true),
            ("LOCALHOST.", true),
            ("app.localhost", true),
            ("pulse.example.com", true),
            ("Pulse.Example.Com", true),
            ("kube-pulse.ns.svc.example", true),
            ("svc.example", false),
            ("evilsvc.example", false),
            ("evil.example", false),
            ("localhost.evil.example", false),
            ("1.2.3.4.evil.example", false),
            ("[not-an-ip]", false),
            ("", false),
        ];
        for (host, want) in cases {
            assert_eq!(host_allowed(host, &allowed), want, "{host:?}");
        }
        assert!(host_allowed("evil.example", &["*".to_string()]));
    }

    #[test]
    fn json_content_types() {
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/merge-patch+json",
        ] {
            assert!(is_json(ok), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/+json",
            "text/json",
            "",
        ] {
            assert!(!is_json(bad), "{bad}");
        }
    }
}
