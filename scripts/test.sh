#!/usr/bin/env bash
# Runs the whole kube-pulse test suite. Installs what the tests need first
# (idempotent: kubectl, Chromium, Pushpin and Nginx + Nchan from apt,
# kubernetes-validate from PyPI, playwright-core from npm), then checks
# formatting and lints, then runs the Rust tests, the web client's unit
# tests, a smoke run of the benchmark harness and the browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*"; }

apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    sudo apt-get update -qq && sudo apt-get install -y -qq "$@"
  else
    apt-get update -qq && apt-get install -y -qq "$@"
  fi
}

# kubectl: tests/kubectl.rs drives the real client against the simulator.
if ! command -v kubectl >/dev/null 2>&1; then
  log "installing kubectl"
  apt_install kubectl || apt_install kubernetes-client || {
    echo "error: kubectl is required by tests/kubectl.rs and could not be installed" >&2
    exit 1
  }
fi

# kubernetes-validate: tests/deploy.rs checks the manifests against the
# Kubernetes schemas offline (the package ships them).
PY_SCRIPTS="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)"
if [ -n "$PY_SCRIPTS" ]; then
  export PATH="$PY_SCRIPTS:$PATH"
fi
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  log "installing kubernetes-validate (PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate || {
    echo "error: kubernetes-validate is required by tests/deploy.rs and could not be installed" >&2
    exit 1
  }
  command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
fi

# Node.js + npm for the web client's tests; Debian's Chromium for the
# browser tests (playwright-core drives it; it never downloads a browser).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  log "installing Node.js and npm"
  apt_install nodejs npm || {
    echo "error: node and npm are required by the web client's tests" >&2
    exit 1
  }
fi
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  log "installing chromium"
  apt_install chromium || {
    echo "error: $CHROMIUM is required by the browser tests and could not be installed" >&2
    exit 1
  }
fi
export CHROMIUM

if cargo fmt --version >/dev/null 2>&1; then
  log "cargo fmt --check"
  cargo fmt --all -- --check
else
  echo "warning: rustfmt is not installed; skipping the format check" >&2
fi

if cargo clippy --version >/dev/null 2>&1; then
  log "cargo clippy"
  cargo clippy --locked --all-targets -- -D warnings
else
  echo "warning: clippy is not installed; skipping lints" >&2
fi

log "cargo test"
cargo test --locked --no-fail-fast "$@"

log "web client unit tests"
(cd web-demo && npm ci --no-audit --no-fund --loglevel=error && npm test)

log "benchmark harness smoke run (small sizes; measures nothing)"
./scripts/install-peers.sh
cargo run --locked --quiet --bin pulse-bench -- --smoke --out target/bench-smoke

log "browser tests (headless Chromium against kube-pulse demo)"
cargo build --locked
export KUBE_PULSE_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/kube-pulse"
(cd web-demo && npm run test:browser)
