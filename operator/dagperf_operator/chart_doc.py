"""The chart's values reference, generated from the operator's settings: which values key sets
which setting, its default in values.yaml, and what it does.

`python -m dagperf_operator.chart_doc > charts/dagperf/README.md` writes it; a test checks the
committed file is current and that each key really reaches its setting through a helm render.
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from dagperf_operator.settings import OperatorSettings

VALUES = Path(__file__).resolve().parents[2] / "charts" / "dagperf" / "values.yaml"

INTRO = """\
# dagperf Helm chart

Installs the dagperf operator, which runs `Benchmark` resources (the CRD in `crds/`), with the
RBAC it needs, and optionally a PodMonitor and the Grafana dashboard. Every key of `values.yaml`
is checked by `values.schema.json` and commented where it is set.

## Values that reach the operator's settings

Generated from `operator/dagperf_operator/settings.py` by `python -m dagperf_operator.chart_doc`.
The chart passes each to the operator as the environment variable shown.

| Values key | Default | Environment | What it sets |
|---|---|---|---|
"""


def values_key(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        node = node[part]
    return node


def reference(values: dict[str, Any]) -> str:
    rows = []
    for setting in fields(OperatorSettings):
        chart = setting.metadata["chart"]
        if chart is None:
            continue
        keys = [key.strip() for key in chart.split(",")]
        default = ", ".join(json.dumps(values_key(values, key)) for key in keys)
        env = f"`DAGPERF_{setting.name.upper()}`"
        names = ", ".join(f"`{key}`" for key in keys)
        rows.append(f"| {names} | `{default}` | {env} | {setting.metadata['doc']} |")
    others = [
        f"- `{s.name}`: {s.metadata['doc']}"
        for s in fields(OperatorSettings)
        if s.metadata["chart"] is None
    ]
    tail = "\nSettings the chart does not expose:\n\n" + "\n".join(others) + "\n"
    return INTRO + "\n".join(rows) + "\n" + tail


if __name__ == "__main__":
    sys.stdout.write(reference(yaml.safe_load(VALUES.read_text())))
