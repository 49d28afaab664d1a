//! The real kubectl: commands against a (simulated) apiserver, and
//! kustomize renders of the deployment manifests.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::Receiver;

use serde_json::Value;

/// Runs kubectl against `server` and returns its output (blocking call on a worker thread).
pub async fn kubectl(server: &str, args: &[&str]) -> Output {
    let mut full = vec![
        "--server".to_string(),
        server.to_string(),
        "--request-timeout=20s".into(),
    ];
    full.extend(args.iter().map(|s| s.to_string()));
    tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .args(&full)
            .env("KUBECONFIG", "/dev/null")
            .env("HOME", std::env::temp_dir())
            .output()
            .expect("kubectl is installed (scripts/test.sh installs it)")
    })
    .await
    .unwrap()
}

/// Starts kubectl against `server` with `args` (a watch, say): the process,
/// and its stdout lines as they come.
pub fn kubectl_lines(server: &str, args: &[&str]) -> (Child, Receiver<String>) {
    let mut child = Command::new("kubectl")
        .args(["--server", server])
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is installed (scripts/test.sh installs it)");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// Asserts kubectl succeeded without anything on stderr and returns stdout.
pub fn ok(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(
        output.status.success(),
        "kubectl failed: {stderr}\n{stdout}"
    );
    assert!(
        stderr.trim().is_empty(),
        "kubectl wrote to stderr: {stderr}"
    );
    stdout
}

/// `kubectl kustomize dir`, as text and as documents; asserts it succeeded.
pub fn kustomize(dir: &Path) -> (String, Vec<Value>) {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl is installed (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let docs = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    (text, docs)
}

/// Writes, in the directory `at` (made if missing, outside `base`: kustomize
/// refuses an overlay inside the base's directory), an overlay of `base`
/// with `components` (directories of `base`); returns `at`.
pub fn overlay(at: &Path, base: &Path, components: &[&str]) -> PathBuf {
    std::fs::create_dir_all(at).unwrap();
    let base = relative(at, base);
    let components: String = components
        .iter()
        .map(|c| format!("  - {}/{c}\n", base.display()))
        .collect();
    std::fs::write(
        at.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources:\n  - {}\ncomponents:\n{components}",
            base.display()
        ),
    )
    .unwrap();
    at.to_path_buf()
}

/// `to` relative to `from` (both existing), for kustomize, which takes
/// only relative paths.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let (from, to) = (from.canonicalize().unwrap(), to.canonicalize().unwrap());
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut path = PathBuf::new();
    for _ in from.components().skip(common) {
        path.push("..");
    }
    to.components().skip(common).for_each(|c| path.push(c));
    path
}
