#!/usr/bin/env bash
# Measures what kube-pulse writes onto Karpor's objects in steady state with
# Karpor's default sync registry, whose policy/v1beta1 PodDisruptionBudgets
# no simulated member serves: `kube-pulse demo --karpor --no-scenario` with
# CLUSTERS members, SETTLE seconds to settle, then WINDOW seconds counted.
# Prints the Cluster and SyncRegistry status writes the simulated Karpor
# received (PUT and PATCH of /status) and the transitions the members'
# policy/v1beta1 sync documents gained, each per minute
# (docs/BENCHMARKS.md §10).
#
#   scripts/measure-karpor-writes.sh BINARY [CLUSTERS=10] [WINDOW=300] [SETTLE=60]
#
# Loopback only; the demo is stopped (by its own process id) on exit.
set -euo pipefail

bin=${1:?usage: $0 BINARY [CLUSTERS] [WINDOW] [SETTLE]}
clusters=${2:-10}
window=${3:-300}
settle=${4:-60}

out=$(mktemp)
RUST_LOG=warn "$bin" demo --listen 127.0.0.1:0 --clusters "$clusters" --karpor --no-scenario \
  >"$out" 2>/dev/null &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$out"' EXIT

gateway="" karpor=""
for _ in $(seq 1 120); do
  gateway=$(grep -o 'http://[0-9.:]*' "$out" | head -n 1 || true)
  karpor=$(grep 'Karpor' "$out" | grep -o 'http://[0-9.:]*' | head -n 1 || true)
  [ -n "$gateway" ] && [ -n "$karpor" ] && break
  sleep 1
done
[ -n "$karpor" ] || { echo "the demo printed no Karpor URL" >&2; exit 1; }

# "cluster_writes registry_writes pdb_transitions"
sample() {
  local stats clusters_json
  stats=$(curl -sf "$karpor/_sim/stats")
  clusters_json=$(curl -sf "$gateway/api/v1/clusters")
  local transitions=0 name sync
  for name in $(printf '%s' "$clusters_json" | python3 -c 'import json,sys; print(" ".join(c["name"] for c in json.load(sys.stdin)["items"]))'); do
    sync=$(curl -sf "$gateway/api/v1/clusters/$name/sync")
    transitions=$((transitions + $(printf '%s' "$sync" | python3 -c '
import json, sys
docs = json.load(sys.stdin)["items"]
pdb = [d for d in docs if d["resource"]["group"] == "policy" and d["resource"]["version"] == "v1beta1"]
print(max((int(k) for d in pdb for k in d.get("history", {})), default=0))')))
  done
  printf '%s' "$stats" | python3 -c '
import json, sys
requests = json.load(sys.stdin)["requests"]
count = lambda r: sum(requests.get(r, {}).get(v, 0) for v in ("update", "patch"))
print(count("cluster.karpor.io/clusters"), count("search.karpor.io/syncclusterresources"), sys.argv[1])' "$transitions"
}

sleep "$settle"
read -r c0 r0 t0 < <(sample)
sleep "$window"
read -r c1 r1 t1 < <(sample)
python3 - "$clusters" "$window" "$c0" "$r0" "$t0" "$c1" "$r1" "$t1" <<'EOF'
import sys
clusters, window, c0, r0, t0, c1, r1, t1 = map(int, sys.argv[1:])
minutes = window / 60
print(f"{clusters} members, {window} s counted after settling:")
print(f"  Cluster status writes:      {c1 - c0:5d} ({(c1 - c0) / minutes:.1f}/min)")
print(f"  SyncRegistry status writes: {r1 - r0:5d} ({(r1 - r0) / minutes:.1f}/min)")
print(f"  policy/v1beta1 sync transitions, all members: {t1 - t0} ({(t1 - t0) / minutes:.1f}/min)")
EOF
