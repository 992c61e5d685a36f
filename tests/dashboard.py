"""The Grafana dashboard the chart ships, read as Grafana reads it: its panels and their
queries, with the dashboard's variables substituted as Grafana would."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[1] / "charts/dagperf/dashboards/dagperf.json"


@dataclass(frozen=True)
class Query:
    """One target of one panel."""

    panel_id: int
    panel: str
    ref: str
    expr: str  # as the dashboard writes it, variables and all
    legend: str

    def expand(self, variables: dict[str, str]) -> str:
        """The expression as Grafana sends it to Prometheus, with these variables' values."""

        def value(match: re.Match[str]) -> str:
            name = match[1] or match[2]
            assert name in variables, f"{self}: unknown variable ${name}"
            return variables[name]

        return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, self.expr)

    def __str__(self) -> str:
        return f"panel {self.panel!r} target {self.ref}: {self.expr}"


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def all_panels(panels: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, rows included, with the panels a collapsed row keeps inside it."""
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", ()))


def shown_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels that query something: all but the rows."""
    return [p for p in all_panels(dashboard["panels"]) if p["type"] != "row"]


def queries(dashboard: dict[str, Any]) -> list[Query]:
    return [
        Query(p["id"], p["title"], t["refId"], t["expr"], t.get("legendFormat", ""))
        for p in shown_panels(dashboard)
        for t in p["targets"]
    ]
