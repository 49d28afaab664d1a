//! Logging setup: `RUST_LOG` (default `info`) and pretty or JSON output,
//! on stderr. Colours only when stderr is a terminal (and `NO_COLOR` is
//! unset), so a file, a pipe or a log collector never gets escape codes.
//!
//! Field names are stable (docs/RUNBOOK.md, "Logs"): `cluster`, `resource`
//! (`apps/v1/deployments`), `namespace`, `app`, `topic`, `task`, `session`,
//! `cause` (an error), and on state transitions `kind`, `from`, `to`,
//! `reason`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Output format of the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Compact human-readable lines (coloured on a terminal; the default).
    Pretty,
    /// One JSON object per event, for log collectors.
    Json,
}

/// Whether log lines may carry ANSI colour codes: only on a terminal, and
/// not when `NO_COLOR` is set (<https://no-color.org>).
fn colours(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// The filter without `RUST_LOG`. kube-client logs answers' bodies and
/// kube-runtime's watcher each failed list or watch with the member's whole
/// answer: neither reaches the log by default, as a member's answer may be
/// another service's page holding secrets. The same failures reach the log
/// as the engine's transition lines, with a short reason.
const DEFAULT_FILTER: &str =
    "info,kube_client=off,kube_runtime=warn,kube_runtime::watcher=error,hyper=warn";

/// Installs the global subscriber; logs go to stderr.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let ansi = colours(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR"),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Pretty => builder.compact().with_ansi(ansi).try_init(),
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .flatten_event(true)
            .try_init(),
    };
    // A second init (tests) keeps the first subscriber.
    let _ = result;
}

#[cfg(test)]
mod tests {
    use super::colours;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colours(true, None));
        assert!(colours(true, Some("".into())));
        assert!(!colours(true, Some("1".into())));
        assert!(!colours(false, None));
    }
}
