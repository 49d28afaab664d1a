//! Turning kube-rs errors into the reasons status documents show. Below the
//! data flow's stages that meet such errors: sources (probe and watch
//! failures), tasks (failed writes) and health (a failed storage check) all
//! classify here, so none of them imports another for it.

use kube::core::Status;
use kube::core::response::StatusSummary;

use crate::status::cluster::ProbeFailure;

/// kube-rs's reason for an error answer whose body is not a `Status`.
const NOT_A_STATUS: &str = "Failed to parse error data";

/// The most characters of a member's own words that reach a document, a
/// Karpor status or a log line.
pub(crate) const MAX_SHOWN_CHARS: usize = 200;

/// A member's words as they may be shown: control characters dropped,
/// every run of whitespace one space, at most [`MAX_SHOWN_CHARS`]
/// characters (then `…`).
pub(crate) fn shown(raw: &str) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for word in raw.split(|c: char| c.is_whitespace() || c.is_control()) {
        if word.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
            chars += 1;
        }
        for c in word.chars() {
            if chars == MAX_SHOWN_CHARS {
                out.truncate(out.trim_end().len());
                out.push('…');
                return out;
            }
            out.push(c);
            chars += 1;
        }
    }
    out
}

/// `403 Forbidden`: the code of an error answer and its reason phrase
/// (kube-rs reports code 0 for a JSON body that is no `Status`).
fn code_and_phrase(code: u16) -> String {
    if code == 0 {
        return "unknown status".into();
    }
    let phrase = http::StatusCode::from_u16(code)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("");
    format!("{code} {phrase}").trim_end().to_string()
}

/// Whether an error answer was a Kubernetes `Status` (an apiserver's own
/// words), not some other body (a proxy's page, another service reached
/// through a member's endpoint), which is never copied anywhere.
fn is_status(status: &Status) -> bool {
    status.status == Some(StatusSummary::Failure) && status.reason != NOT_A_STATUS
}

/// The failed checks of an apiserver's verbose `/readyz` or `/livez`
/// answer (`[+]ping ok`, `[-]etcd failed: reason withheld`, `readyz check
/// failed`), when the whole body is in that format: `etcd, informer-sync`.
fn failed_checks(body: &str) -> Option<String> {
    let mut failed = Vec::new();
    for line in body.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.len() <= 64
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        };
        if let Some(rest) = line.strip_prefix("[-]") {
            let name = rest.split_once(" failed").map(|(n, _)| n)?;
            failed.push(name_ok(name).then_some(name)?);
        } else if let Some(rest) = line.strip_prefix("[+]") {
            name_ok(rest.strip_suffix(" ok")?).then_some(())?;
        } else if !matches!(
            line,
            "readyz check failed" | "livez check failed" | "healthz check failed"
        ) {
            return None;
        }
    }
    (!failed.is_empty()).then(|| failed.join(", "))
}

/// Full error text, causes included.
pub(crate) fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn transport_reason(text: &str) -> &'static str {
    let lower = text.to_ascii_lowercase();
    if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake") {
        "TLSError"
    } else if lower.contains("timed out") || lower.contains("timeout") || lower.contains("deadline")
    {
        "Timeout"
    } else {
        "Disconnected"
    }
}

/// Reason for a failed list or watch of a synced resource.
pub(crate) fn sync_reason(err: &kube::Error) -> (&'static str, String) {
    match err {
        kube::Error::Api(status) => {
            let reason = match status.code {
                401 => "Unauthorized",
                403 => "Forbidden",
                404 => "NotServed",
                410 => "Expired",
                429 => "Throttled",
                504 => "Timeout",
                500..=599 => "ServerError",
                _ => "ApiError",
            };
            let message = if is_status(status) {
                format!(
                    "{} {}: {}",
                    status.code,
                    shown(&status.reason),
                    shown(&status.message)
                )
            } else {
                code_and_phrase(status.code)
            };
            (reason, message)
        }
        other => {
            let text = describe(other);
            (transport_reason(&text), shown(&text))
        }
    }
}

/// Reason and message for a failed write by a task: the apiserver's own
/// reason (`Forbidden`, `NotFound`, `AlreadyExists`, …) when it gave one.
pub(crate) fn action_failure(err: &kube::Error) -> (String, String) {
    match err {
        kube::Error::Api(status) => {
            let reason = if is_status(status) && !status.reason.is_empty() {
                status.reason.clone()
            } else {
                sync_reason(err).0.to_string()
            };
            let message = if is_status(status) {
                format!("{} {}", status.code, shown(&status.message))
            } else {
                code_and_phrase(status.code)
            };
            (shown(&reason), message)
        }
        other => {
            let text = describe(other);
            (transport_reason(&text).to_string(), shown(&text))
        }
    }
}

/// Reason for a failed probe of the member apiserver.
pub(crate) fn probe_failure(err: &kube::Error) -> (ProbeFailure, String) {
    match err {
        kube::Error::Api(status) => {
            let failure = match status.code {
                401 | 403 => ProbeFailure::Unauthorized,
                504 => ProbeFailure::Timeout,
                _ => ProbeFailure::ApiServerNotReady,
            };
            let message = match (is_status(status), failed_checks(&status.message)) {
                (true, _) if !status.message.trim().is_empty() => {
                    format!("HTTP {}: {}", status.code, shown(&status.message))
                }
                (false, Some(checks)) => format!(
                    "HTTP {}: failed checks: {checks}",
                    code_and_phrase(status.code)
                ),
                _ => format!("HTTP {}", code_and_phrase(status.code)),
            };
            (failure, message)
        }
        other => {
            let text = describe(other);
            let failure = match transport_reason(&text) {
                "TLSError" => ProbeFailure::TLSError,
                "Timeout" => ProbeFailure::Timeout,
                _ => ProbeFailure::Disconnected,
            };
            (failure, shown(&text))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Status::failure("nope", "Reason").with_code(code).boxed())
    }

    #[test]
    fn reasons_table() {
        let cases = [
            (401, "Unauthorized"),
            (403, "Forbidden"),
            (404, "NotServed"),
            (410, "Expired"),
            (429, "Throttled"),
            (504, "Timeout"),
            (500, "ServerError"),
            (418, "ApiError"),
        ];
        for (code, want) in cases {
            assert_eq!(sync_reason(&api(code)).0, want, "{code}");
        }
        let probe = [
            (401, ProbeFailure::Unauthorized),
            (403, ProbeFailure::Unauthorized),
            (500, ProbeFailure::ApiServerNotReady),
            (504, ProbeFailure::Timeout),
        ];
        for (code, want) in probe {
            assert_eq!(probe_failure(&api(code)).0, want, "{code}");
        }
        assert_eq!(
            transport_reason("error trying to connect: tcp connect error: Connection refused"),
            "Disconnected"
        );
        assert_eq!(
            transport_reason("invalid peer certificate: UnknownIssuer"),
            "TLSError"
        );
        assert_eq!(transport_reason("operation timed out"), "Timeout");
    }

    /// An error answer as kube-rs reports it: a `Status` body as it came,
    /// any other body as kube-rs wraps it (`NOT_A_STATUS`).
    fn answer(code: u16, body: &str) -> kube::Error {
        let status = serde_json::from_str::<Status>(body)
            .unwrap_or_else(|_| Status::failure(body.trim(), NOT_A_STATUS).with_code(code));
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn only_a_status_speaks_and_only_briefly() {
        let secret = "INTERNAL-SECRET-abc123 db_password=hunter2";
        let forbidden = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps is forbidden: User \"x\" cannot list","reason":"Forbidden","code":403}"#;
        let long = format!(
            r#"{{"kind":"Status","status":"Failure","message":"{}\u0007end","reason":"Forbidden","code":403}}"#,
            "a ".repeat(300)
        );
        let readyz =
            "[+]ping ok\n[-]etcd failed: reason withheld\n[+]log ok\nreadyz check failed\n";
        // (code, body, sync message, probe message, action (reason, message))
        type Case<'a> = (u16, &'a str, &'a str, &'a str, (&'a str, &'a str));
        let cases: [Case; 5] = [
            (
                403,
                secret,
                "403 Forbidden",
                "HTTP 403 Forbidden",
                ("Forbidden", "403 Forbidden"),
            ),
            (
                500,
                &format!("<html>{secret}</html>"),
                "500 Internal Server Error",
                "HTTP 500 Internal Server Error",
                ("ServerError", "500 Internal Server Error"),
            ),
            (
                403,
                forbidden,
                "403 Forbidden: configmaps is forbidden: User \"x\" cannot list",
                "HTTP 403: configmaps is forbidden: User \"x\" cannot list",
                (
                    "Forbidden",
                    "403 configmaps is forbidden: User \"x\" cannot list",
                ),
            ),
            (
                500,
                readyz,
                "500 Internal Server Error",
                "HTTP 500 Internal Server Error: failed checks: etcd",
                ("ServerError", "500 Internal Server Error"),
            ),
            (
                404,
                r#"{"secret":"hunter2"}"#,
                "unknown status",
                "HTTP unknown status",
                ("ApiError", "unknown status"),
            ),
        ];
        for (code, body, sync, probe, (reason, action)) in cases {
            let err = answer(code, body);
            assert_eq!(sync_reason(&err).1, sync, "{body}");
            assert_eq!(probe_failure(&err).1, probe, "{body}");
            assert_eq!(
                action_failure(&err),
                (reason.into(), action.into()),
                "{body}"
            );
        }
        let (_, message) = sync_reason(&answer(403, &long));
        assert!(message.chars().count() <= "403 Forbidden: ".len() + MAX_SHOWN_CHARS + 1);
        assert!(
            message.ends_with(" a…") && !message.contains('\u{7}'),
            "{message}"
        );
    }

    #[test]
    fn shown_text_is_one_bounded_line() {
        assert_eq!(shown("  a\n\tb\u{1b}[31mc  "), "a b [31mc");
        assert_eq!(shown(&"x".repeat(500)).chars().count(), MAX_SHOWN_CHARS + 1);
        assert_eq!(shown(""), "");
        let readyz_like = "[+]ping ok\n[-]etcd failed: reason withheld\nINTERNAL-SECRET\n";
        assert_eq!(
            failed_checks(readyz_like),
            None,
            "one foreign line: not the format"
        );
        assert_eq!(
            failed_checks("[-]etcd failed: x\n[-]informer-sync failed: y\nreadyz check failed"),
            Some("etcd, informer-sync".into())
        );
    }
}
