#!/usr/bin/env python3
"""Renders and lints a Helm chart with Helm's own library, for the tests.

tests/gateway/helm.rs runs it with the Python of the tests' virtualenv
(scripts/test.sh installs PyPI's helm-python-sdk there: Helm 4's Go SDK
behind a C ABI, no helm binary). It reads one JSON request on stdin and
writes one JSON answer on stdout:

  {"chart": PATH,
   "renders": [{"values": {...}, "name": RELEASE, "namespace": NS}, ...],
   "lints": [{"values": {...}, "namespace": NS}, ...]}
->
  {"helm": HELM_VERSION,
   "renders": [{"ok": true, "manifests": YAML, "notes": TEXT}
               | {"ok": false, "error": MESSAGE}, ...],
   "lints": [{"total_charts_linted": N, "messages": [...], "errors": [...]}, ...]}

A render is what `helm template NAME CHART -n NS --values …` prints: every
template's manifest in template order as one YAML stream (Helm checks the
values against the chart's values.schema.json first, as an install does);
NOTES.txt apart. With `--check` it only imports the SDK and prints
its version (exit 1 when it is missing).
"""

import json
import sys


def render(chart, request):
    import helm_python

    values = request.get("values") or {}
    try:
        # Helm checks the values, coalesced with the chart's defaults,
        # against values.schema.json before it renders.
        manifests = chart.render(
            values,
            name=request["name"],
            namespace=request["namespace"],
            is_install=True,
        )
    except helm_python.HelmError as error:
        return {"ok": False, "error": str(error)}
    stream, notes = [], ""
    for path in sorted(manifests):
        text = manifests[path]
        if path.endswith("NOTES.txt"):
            notes = text
        elif text.strip():
            stream.append(f"---\n# Source: {path}\n{text.strip()}\n")
    return {"ok": True, "manifests": "".join(stream), "notes": notes}


def main():
    try:
        import helm_python
    except ImportError as error:
        print(f"helm-python-sdk is not installed: {error}", file=sys.stderr)
        return 1
    if sys.argv[1:] == ["--check"]:
        print(helm_python.helm_sdk_version())
        return 0
    request = json.load(sys.stdin)
    answer = {"helm": helm_python.helm_sdk_version(), "renders": [], "lints": []}
    with helm_python.Chart.load(request["chart"]) as chart:
        for job in request.get("renders", []):
            answer["renders"].append(render(chart, job))
    for job in request.get("lints", []):
        answer["lints"].append(
            helm_python.lint(
                request["chart"],
                job.get("values") or {},
                strict=True,
                namespace=job.get("namespace"),
            )
        )
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
