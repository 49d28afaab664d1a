#!/usr/bin/env bash
# Checks deploy/monitoring/ with promtool (Debian's `prometheus` package,
# installed when missing):
#
# - `promtool check rules` on the alert rules;
# - `promtool test rules` on their unit tests (a firing and a non-firing
#   case per alert; tests/gateway/monitoring.rs checks every alert has both);
# - every query of the Grafana dashboard parses as PromQL (each becomes a
#   recording rule in a scratch file for `promtool check rules`, with
#   Grafana's variables replaced by values).
#
# That every metric the rules and the dashboard name is one the binary
# exports is checked by tests/gateway/monitoring.rs against a running demo.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null 2>&1; then
  echo "==> installing promtool (Debian package prometheus)"
  sudo_=""
  [ "$(id -u)" -ne 0 ] && sudo_=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo_ apt-get install -y -qq prometheus >/dev/null 2>&1 || {
    $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq prometheus
  } || {
    echo "error: promtool is required by the monitoring checks and could not be installed" >&2
    exit 1
  }
fi

dir=deploy/monitoring
promtool check rules "$dir/kube-pulse.rules.yaml"
(cd "$dir" && promtool test rules kube-pulse.rules.test.yaml)

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
python3 - "$dir/grafana-dashboard.json" "$scratch/dashboard-queries.rules.yaml" <<'PY'
import json, sys

dashboard = json.load(open(sys.argv[1]))
queries = []

def walk(node, title):
    if isinstance(node, dict):
        title = node.get("title", title)
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                queries.append((title, value))
            else:
                walk(value, title)
    elif isinstance(node, list):
        for item in node:
            walk(item, title)

walk(dashboard, "")
if not queries:
    sys.exit("no queries found in the dashboard")
variables = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
             "$cluster": ".*", "$instance": ".*"}
with open(sys.argv[2], "w") as out:
    out.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, (title, expr) in enumerate(queries):
        for name, value in variables.items():
            expr = expr.replace(name, value)
        if "$" in expr:
            sys.exit(f"panel {title!r}: unknown variable in {expr!r}")
        out.write(f"      - record: dashboard:query_{i}\n        expr: {json.dumps(expr)}\n")
print(f"{len(queries)} dashboard queries")
PY
promtool check rules "$scratch/dashboard-queries.rules.yaml"
echo "monitoring checks passed"
