"""`profile_export_aiperf.json` and `profile_export_aiperf.csv`: the phase, summed up.

The JSON puts each metric at the top level as `{unit, avg, p1..p99, min, max, std, count, sum}`
(aggregates as `{unit, avg}`), next to `input_config` (AIPerf's configuration shape; dagperf's
own is `dagperf_config`), `branch_stats`, `error_summary` and the
run's times, as AIPerf writes it. The CSV holds the same numbers: a table of per-request metrics
sorted by label, a blank line, then a `Metric,Value` table of aggregates.
"""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dagperf import __version__
from dagperf.exports.aiperf_config import aiperf_input_config
from dagperf.exports.files import whole_or_nothing
from dagperf.metrics.summary import PhaseSummary
from dagperf.vocabulary.catalog import PERCENTILES, RECORD, SCALARS, SESSION, SESSION_DURATION

STAT_COLUMNS = ("avg", "min", "max", "sum", *(f"p{p}" for p in PERCENTILES), "std")


def summary_document(
    summary: PhaseSummary,
    branch_stats: dict[str, int],
    input_config: dict[str, Any],
    run_info: dict[str, Any],
    complete: bool,
    cancelled: bool,
) -> dict[str, Any]:
    def iso(ns: int | None) -> str | None:
        return None if ns is None else datetime.fromtimestamp(ns / 1e9, UTC).isoformat()

    document: dict[str, Any] = {"schema_version": "1.4", "dagperf_version": __version__}
    document["benchmark_id"] = run_info.get("benchmark_id")
    document.update(summary.metric_stats())
    for name, value in summary.aggregates().items():
        document[name] = {"unit": SCALARS[name].unit, "avg": value}
    document["token_count_source"] = dict(summary.token_sources)
    if summary.goodput:
        document["goodput_objectives"] = summary.goodput
    document |= {
        "input_config": aiperf_input_config(input_config),  # AIPerf's shape, for its tools
        "dagperf_config": input_config,
        "run_info": run_info,
        "was_cancelled": cancelled,
        "is_complete": complete,
        "error_summary": summary.error_summary(),
        "start_time": iso(summary.first_start_ns),
        "end_time": iso(summary.last_end_ns),
        "branch_stats": branch_stats,
    }
    return document


def write_summary_json(path: Path, document: dict[str, Any]) -> None:
    with whole_or_nothing(path) as f:
        f.write(json.dumps(document, indent=2) + "\n")


def write_summary_csv(
    path: Path, summary: PhaseSummary, sessions: dict[str, Any] | None = None
) -> None:
    """`sessions`: the session figures (`SessionMetrics.report`), in both tables."""
    sessions = sessions or {}
    labels = {name: metric.label for name, metric in (RECORD | SESSION).items()}
    stats = summary.metric_stats()
    if SESSION_DURATION.name in sessions:
        stats[SESSION_DURATION.name] = sessions[SESSION_DURATION.name]
    rows = sorted((f"{labels[name]} ({s['unit']})", s) for name, s in stats.items())
    with whole_or_nothing(path, newline="") as f:
        out = csv.writer(f)
        out.writerow(["Metric", *STAT_COLUMNS])
        for label, s in rows:
            out.writerow([label, *(f"{s[c]:.2f}" for c in STAT_COLUMNS)])
        out.writerow([])
        out.writerow(["Metric", "Value"])
        scalars = summary.aggregates() | {
            name: figure["avg"] for name, figure in sessions.items() if name in SCALARS
        }
        aggregates = sorted(
            (f"{SCALARS[name].label} ({SCALARS[name].unit})", value)
            for name, value in scalars.items()
        )
        for label, value in aggregates:
            out.writerow([label, f"{value:.2f}"])
