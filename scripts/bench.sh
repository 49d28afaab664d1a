#!/usr/bin/env bash
# Runs the benchmark suite (docs/BENCHMARKS.md): installs the peers
# (Pushpin, Nginx + Nchan) from Debian's packages when missing, builds
# kube-pulse and pulse-bench in release mode, and runs every scenario.
# Results: target/bench/results.{json,md}, latency.svg and the cost curves
# (connections.svg, objects-rss.svg, objects-sync.svg, pods-rss.svg,
# cpu-per-delivery.svg).
# `./scripts/bench.sh --smoke` runs the small version CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
"$(dirname "$0")/install-peers.sh"
profile=release
if [ "${1:-}" = "--smoke" ]; then profile=debug; fi
if [ "$profile" = release ]; then
  cargo build --locked --release --workspace --bins
else
  cargo build --locked --workspace --bins
fi
exec "target/$profile/pulse-bench" "$@"
