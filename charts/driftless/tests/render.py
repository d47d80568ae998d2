#!/usr/bin/env python3
"""Lints and renders the driftless chart with Helm's own engine (the PyPI package
helm-python-sdk, which carries Helm's Go SDK; no helm binary), for tests/chart.rs.

Usage: render.py [VALUES.yaml] [--set-json JSON]
Prints one JSON object: {"lint": <helm lint report, strict>, "schema_error": str|null,
"render_error": str|null, "manifests": {template path: rendered text}}.
Exit status 0 unless the SDK itself cannot be loaded (exit 3, with the install hint).
"""
import json
import os
import sys

try:
    import helm_python as helm
except ImportError as e:  # pragma: no cover - the message is the point
    print(f"helm-python-sdk is not installed ({e}): pip install helm-python-sdk", file=sys.stderr)
    sys.exit(3)

CHART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main(argv):
    values = {}
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--set-json":
            values.update(json.loads(args.pop(0)))
        else:
            with open(a, encoding="utf-8") as f:
                values.update(helm.values_from_yaml(f.read()))
    out = {"lint": None, "schema_error": None, "render_error": None, "manifests": {}}
    out["lint"] = helm.lint(CHART, values, strict=True)
    chart = helm.Chart.load(CHART)
    try:
        chart.validate_schema(values)
    except helm.HelmError as e:
        out["schema_error"] = str(e)
    try:
        out["manifests"] = chart.render(values, name="rel", namespace="gitops", is_install=True)
    except helm.HelmError as e:
        out["render_error"] = str(e)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
