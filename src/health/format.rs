//! The two output formats of the health endpoints.

use std::sync::Arc;

use axum::http::StatusCode;

use super::{Check, Outcome};

/// How `/livez` and `/readyz` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// The seed's output: `OK`; `[+] Ping ok` … `health check passed`; 503 on failure.
    #[default]
    Seed,
    /// k8s.io/apiserver's healthz output, byte for byte; 500 on failure.
    Kubernetes,
}

/// Query parameters of a health request.
#[derive(Debug, Default)]
pub struct Query {
    pub verbose: bool,
    /// `?exclude=a&exclude=b` (Kubernetes) and `?excludes=a,b` (seed), lower-cased.
    pub exclude: Vec<String>,
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Self {
        let pairs: Vec<(String, String)> =
            serde_urlencoded::from_str(raw.unwrap_or("")).unwrap_or_default();
        let mut q = Query::default();
        for (key, value) in pairs {
            match key.as_str() {
                "verbose" => q.verbose = value != "false" && value != "0",
                "exclude" => q.exclude.push(value.to_ascii_lowercase()),
                "excludes" => q.exclude.extend(
                    value
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(|s| s.trim().to_ascii_lowercase()),
                ),
                _ => {}
            }
        }
        q
    }

    pub fn excludes(&self, _format: Format, name: &str) -> bool {
        self.exclude.iter().any(|e| e.eq_ignore_ascii_case(name))
    }
}

impl Format {
    /// Status and body for `endpoint` (`livez`, `readyz`, `healthz`).
    /// `seed_verbose`: whether the seed format lists checks without `?verbose`.
    pub fn render(
        self,
        endpoint: &str,
        checks: &[Arc<dyn Check>],
        outcomes: &[Outcome],
        query: &Query,
        seed_verbose: bool,
    ) -> (StatusCode, String) {
        let failed = outcomes.iter().any(|o| o.result.is_err());
        match self {
            Format::Seed => {
                if !(failed || seed_verbose || query.verbose) {
                    return (StatusCode::OK, "OK".into());
                }
                let mut body = String::new();
                for o in outcomes {
                    match o.result {
                        Ok(()) => body.push_str(&format!("[+] {} ok\n", o.name)),
                        Err(_) => body.push_str(&format!("[-] {} fail\n", o.name)),
                    }
                }
                if failed {
                    body.push_str("health check failed\n");
                    (StatusCode::SERVICE_UNAVAILABLE, body)
                } else {
                    body.push_str("health check passed\n");
                    (StatusCode::OK, body)
                }
            }
            Format::Kubernetes => {
                let mut body = String::new();
                let mut unmatched: Vec<&String> = query
                    .exclude
                    .iter()
                    .filter(|e| !checks.iter().any(|c| c.name().eq_ignore_ascii_case(e)))
                    .collect();
                unmatched.sort();
                unmatched.dedup();
                for check in checks {
                    let name = check.name().to_ascii_lowercase();
                    if query.excludes(self, check.name()) {
                        body.push_str(&format!("[+]{name} excluded: ok\n"));
                        continue;
                    }
                    let outcome = outcomes.iter().find(|o| o.name == check.name());
                    match outcome.map(|o| &o.result) {
                        Some(Err(_)) => {
                            body.push_str(&format!("[-]{name} failed: reason withheld\n"))
                        }
                        _ => body.push_str(&format!("[+]{name} ok\n")),
                    }
                }
                if !unmatched.is_empty() {
                    let quoted: Vec<String> = unmatched.iter().map(|e| format!("{e:?}")).collect();
                    body.push_str(&format!(
                        "warn: some health checks cannot be excluded: no matches for {}\n",
                        quoted.join(", ")
                    ));
                }
                if failed {
                    body.push_str(&format!("{endpoint} check failed\n"));
                    (StatusCode::INTERNAL_SERVER_ERROR, body)
                } else if query.verbose {
                    body.push_str(&format!("{endpoint} check passed\n"));
                    (StatusCode::OK, body)
                } else {
                    (StatusCode::OK, "ok".into())
                }
            }
        }
    }
}
