//! Turning kube-rs errors into the reasons status documents show. Below the
//! data flow's stages that meet such errors: sources (probe and watch
//! failures), tasks (failed writes) and health (a failed storage check) all
//! classify here, so none of them imports another for it.

use crate::status::cluster::ProbeFailure;

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
            (
                reason,
                format!("{} {}: {}", status.code, status.reason, status.message),
            )
        }
        other => {
            let text = describe(other);
            (transport_reason(&text), text)
        }
    }
}

/// Reason and message for a failed write by a task: the apiserver's own
/// reason (`Forbidden`, `NotFound`, `AlreadyExists`, …) when it gave one.
pub(crate) fn action_failure(err: &kube::Error) -> (String, String) {
    match err {
        kube::Error::Api(status) => {
            let reason = if status.reason.is_empty() {
                sync_reason(err).0.to_string()
            } else {
                status.reason.clone()
            };
            (reason, format!("{} {}", status.code, status.message))
        }
        other => {
            let text = describe(other);
            (transport_reason(&text).to_string(), text)
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
            let message = if status.message.is_empty() {
                format!("HTTP {}", status.code)
            } else {
                format!("HTTP {}: {}", status.code, status.message.trim())
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
            (failure, text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

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
}
