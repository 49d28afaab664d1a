//! The two output formats of the health endpoints (`checks ──Outcome──▶
//! [format] ──▶ /livez, /readyz, /healthz`): Karpor's and the Kubernetes
//! apiserver's. Pure text rendering; it knows the checks only by name.

use std::sync::Once;

use axum::http::StatusCode;
use serde::de::{Deserialize, Deserializer, Error as _};

/// How `/livez` and `/readyz` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Karpor's output (the seed's): `OK`; `[+] Ping ok` … `health check
    /// passed`; 503 on failure. `seed` is its former, deprecated name.
    #[default]
    #[value(alias = "seed")]
    Karpor,
    /// k8s.io/apiserver's healthz output, byte for byte; 500 on failure.
    Kubernetes,
}

/// The names `health.format` takes, for error messages.
const NAMES: &[&str] = &["karpor", "kubernetes"];

impl Format {
    /// The format a configured name means, and whether the name is a
    /// deprecated alias (`seed`, Karpor's format's first name).
    pub fn from_name(name: &str) -> Option<(Format, bool)> {
        match name {
            "karpor" => Some((Format::Karpor, false)),
            "kubernetes" => Some((Format::Kubernetes, false)),
            "seed" => Some((Format::Karpor, true)),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Format {
    /// Reads `health.format`; a deprecated name works and is logged once.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        let (format, deprecated) =
            Format::from_name(&name).ok_or_else(|| D::Error::unknown_variant(&name, NAMES))?;
        if deprecated {
            static WARNED: Once = Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    format = %name,
                    replacement = "karpor",
                    "health.format `seed` is deprecated; write `karpor` (the same output)"
                );
            });
        }
        Ok(format)
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The check's name, as [`super::Check::name`] gives it.
    pub name: String,
    /// Ok, or the reason of the failure (a timeout included).
    pub result: Result<(), String>,
}

/// Query parameters of a health request.
#[derive(Debug, Default)]
pub struct Query {
    pub verbose: bool,
    /// `?exclude=a&exclude=b` (Kubernetes) and `?excludes=a,b` (Karpor), lower-cased.
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
    /// Status and body for `endpoint` (`livez`, `readyz`, `healthz`), given
    /// the names of all its `checks` and the outcomes of those that ran.
    /// `karpor_verbose`: whether Karpor's format lists checks without `?verbose`.
    pub fn render(
        self,
        endpoint: &str,
        checks: &[&str],
        outcomes: &[Outcome],
        query: &Query,
        karpor_verbose: bool,
    ) -> (StatusCode, String) {
        let failed = outcomes.iter().any(|o| o.result.is_err());
        match self {
            Format::Karpor => {
                if !(failed || karpor_verbose || query.verbose) {
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
                    .filter(|e| !checks.iter().any(|c| c.eq_ignore_ascii_case(e)))
                    .collect();
                unmatched.sort();
                unmatched.dedup();
                for &check in checks {
                    let name = check.to_ascii_lowercase();
                    if query.excludes(self, check) {
                        body.push_str(&format!("[+]{name} excluded: ok\n"));
                        continue;
                    }
                    let outcome = outcomes.iter().find(|o| o.name == check);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Settings {
        format: Format,
    }

    fn parse(yaml: &str) -> Result<Format, String> {
        serde_yaml_ng::from_str::<Settings>(yaml)
            .map(|s| s.format)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn names_and_the_deprecated_alias() {
        let cases = [
            ("karpor", Some((Format::Karpor, false))),
            ("kubernetes", Some((Format::Kubernetes, false))),
            ("seed", Some((Format::Karpor, true))),
            ("Karpor", None),
            ("pretty", None),
        ];
        for (name, want) in cases {
            assert_eq!(Format::from_name(name), want, "{name}");
        }
        assert_eq!(parse("format: karpor"), Ok(Format::Karpor));
        assert_eq!(parse("format: seed"), Ok(Format::Karpor));
        assert_eq!(parse("format: kubernetes"), Ok(Format::Kubernetes));
        let err = parse("format: pretty").unwrap_err();
        assert!(err.contains("unknown variant `pretty`"), "{err}");
        assert!(err.contains("`karpor` or `kubernetes`"), "{err}");
        assert_eq!(Format::default(), Format::Karpor);
    }

    #[test]
    fn the_deprecated_name_renders_karpors_output() {
        let (format, _) = Format::from_name("seed").unwrap();
        let outcomes = [Outcome {
            name: "Ping".into(),
            result: Ok(()),
        }];
        let q = Query::default();
        assert_eq!(
            format.render("livez", &["Ping"], &outcomes, &q, false),
            (StatusCode::OK, "OK".into())
        );
        assert_eq!(
            format.render("readyz", &["Ping"], &outcomes, &q, true),
            (StatusCode::OK, "[+] Ping ok\nhealth check passed\n".into())
        );
    }
}
