#!/usr/bin/env bash
# Checks the production build: `cargo build --no-default-features` gives a
# gateway with no simulator code. Its dependency tree holds neither the
# simulator crate nor what only the benchmark uses, and `kube-pulse demo`
# and `kube-pulse sim` exit 2 with a clear message.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"

tree=$(cargo tree --locked --no-default-features -p kube-pulse -e normal,build --prefix none)
# (tokio-tungstenite is the gateway's own WebSocket framing since the
# handshake moved out of axum, src/transports/ws/upgrade.rs.)
for banned in 'kube-pulse-sim ' 'pulse-bench ' 'tempfile ' 'rlimit '; do
  if grep -q "^$banned" <<<"$tree"; then
    echo "error: the production dependency tree lists ${banned% }" >&2
    exit 1
  fi
done

cargo build --locked --no-default-features -p kube-pulse --bin kube-pulse
bin="$target/debug/kube-pulse"
for sub in demo sim; do
  set +e
  out=$("$bin" "$sub" --listen 127.0.0.1:0 2>&1)
  code=$?
  set -e
  if [ "$code" -ne 2 ] || ! grep -q "built without the simulator" <<<"$out"; then
    echo "error: 'kube-pulse $sub' in the production build exited $code: $out" >&2
    exit 1
  fi
done
if grep -aq 'too old resource version' "$bin"; then  # a string of the simulator's watch cache
  echo "error: the production binary carries the simulator's strings" >&2
  exit 1
fi
echo "production build: no simulator, 'demo' and 'sim' exit 2"
