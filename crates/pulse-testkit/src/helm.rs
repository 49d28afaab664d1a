//! Helm's own engine for the chart tests: PyPI's `helm-python-sdk` (Helm
//! 4's Go SDK as a shared library, no helm binary) in the tests' virtualenv,
//! driven by `scripts/helm-render.py`. Without it the tests that need it
//! say so and pass, unless `CI` is set: then they fail.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The workspace's root (this crate is `crates/pulse-testkit`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// The tests' virtualenv: `KUBE_PULSE_TEST_VENV`, else `target/test-venv`
/// in the workspace, where scripts/test.sh makes it.
pub fn test_venv() -> PathBuf {
    std::env::var_os("KUBE_PULSE_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target").join("test-venv"))
}

/// Helm's engine, through the driver script.
#[derive(Debug, Clone)]
pub struct Helm {
    python: PathBuf,
    driver: PathBuf,
    /// The version of Helm's SDK the library was built from (`v4.…`).
    pub version: String,
}

/// One render: values over the chart's defaults, a release name and its
/// namespace (`helm template NAME CHART -n NAMESPACE --values …`).
#[derive(Debug, Clone)]
pub struct Render {
    /// The values given (`--values`), merged over values.yaml.
    pub values: Value,
    /// The release name.
    pub name: String,
    /// The release namespace.
    pub namespace: String,
}

/// What a render gave: the manifests as one YAML stream and NOTES.txt.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// Every template's manifest, in template order, `---` between them.
    pub manifests: String,
    /// The rendered NOTES.txt.
    pub notes: String,
}

impl Helm {
    /// The engine, or None (with a message) when the virtualenv lacks
    /// helm-python-sdk outside CI; with `CI` set a missing one fails the test.
    pub fn find_or_skip() -> Option<Helm> {
        let python = test_venv().join("bin").join("python3");
        let driver = root().join("scripts").join("helm-render.py");
        let check = Command::new(&python).arg(&driver).arg("--check").output();
        match check {
            Ok(out) if out.status.success() => Some(Helm {
                python,
                driver,
                version: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            }),
            other => {
                let why = match other {
                    Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_string(),
                    Err(e) => format!("{}: {e}", python.display()),
                };
                crate::missing(&format!(
                    "helm-python-sdk is not installed in the tests' virtualenv {} ({why}); scripts/test.sh installs it",
                    test_venv().display()
                ));
                None
            }
        }
    }

    fn run(&self, request: &Value) -> Value {
        let mut child = Command::new(&self.python)
            .arg(&self.driver)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the tests' Python runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(request.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "scripts/helm-render.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("the driver answers JSON")
    }

    /// Renders `chart` once per entry of `renders`, in one process: each
    /// the manifests, or Helm's error (a value the schema refuses, a
    /// template's `fail`).
    pub fn render(&self, chart: &Path, renders: &[Render]) -> Vec<Result<Rendered, String>> {
        let jobs: Vec<Value> = renders
            .iter()
            .map(|r| json!({"values": r.values, "name": r.name, "namespace": r.namespace}))
            .collect();
        let answer = self.run(&json!({"chart": chart, "renders": jobs}));
        answer["renders"]
            .as_array()
            .expect("one answer per render")
            .iter()
            .map(|r| {
                if r["ok"] == true {
                    Ok(Rendered {
                        manifests: r["manifests"].as_str().unwrap().to_string(),
                        notes: r["notes"].as_str().unwrap_or_default().to_string(),
                    })
                } else {
                    Err(r["error"].as_str().unwrap_or_default().to_string())
                }
            })
            .collect()
    }

    /// `helm lint --strict` of `chart` with `values` in `namespace`: its
    /// report (`messages` with a `severity`, 1 info, 2 warning, 3 error).
    pub fn lint(&self, chart: &Path, values: &Value, namespace: &str) -> Value {
        let answer = self.run(&json!({
            "chart": chart,
            "lints": [{"values": values, "namespace": namespace}],
        }));
        answer["lints"][0].clone()
    }
}
