"""A search's steps as it reports them: each step's record in `search_results.json`, its line
while the search runs, and the table at the end.

A step's verdict comes from its window (`metrics.window`): missed when any objective was
missed, met when every one was met, undecided otherwise, with the reason. Its record keeps the
window's span, its completed, failed and cut requests and sessions, and each objective's
judgement (the figure, or its bounds when cut requests leave it open).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dagperf.verdict import Verdict
from dagperf.vocabulary import catalog

# What each step reports beside its objectives: (metric, statistic).
HEADLINES = (
    (catalog.REQUEST_THROUGHPUT, "avg"),
    (catalog.SESSION_GOODPUT, "avg"),
    (catalog.TIME_TO_FIRST_TOKEN, "p50"),
    (catalog.TIME_TO_FIRST_TOKEN, "p99"),
    (catalog.REQUEST_ERROR_RATE, "avg"),
    (catalog.CUT_REQUEST_COUNT, "avg"),
)


def step_record(value: float, document: dict[str, Any], directory: Path) -> dict[str, Any]:
    """The step at load `value`, judged on its window."""
    window = document.get("window") or {}
    judgements: list[dict[str, Any]] = window.get("objectives") or []
    verdicts = {j["verdict"] for j in judgements}
    if Verdict.MISSES in verdicts:
        verdict = Verdict.MISSES
    elif verdicts == {Verdict.MEETS}:
        verdict = Verdict.MEETS
    else:
        verdict = Verdict.UNDECIDED
    why = "; ".join(
        f"{j['objective']}: {j['why']}" for j in judgements if j["verdict"] == Verdict.UNDECIDED
    )
    return {
        "value": value,
        "verdict": verdict.value,
        "meets_slo": verdict is Verdict.MEETS,
        "why": why or None,
        "window": {k: window.get(k) for k in ("start_ns", "end_ns", "duration_s")},
        "requests": window.get("requests") or {},
        "sessions": window.get("sessions") or {},
        "objectives": judgements,
        "metrics": {j["objective"]: j["figure"] for j in judgements} | _headlines(document),
        "artifact_dir": str(directory),
    }


def _headlines(document: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for metric, stat in HEADLINES:
        figure = (document.get(metric.name) or {}).get(stat)
        if figure is not None:
            out[f"{metric.name}:{stat}"] = figure
    return out


def step_line(step: dict[str, Any]) -> str:
    """How a step went, in a line: its verdict, each objective's figure, its window."""
    figures = ", ".join(f"{j['objective']} = {judged(j)}" for j in step["objectives"])
    requests, span = step["requests"], step["window"].get("duration_s")
    window = f"{span:.1f} s window: " if span is not None else ""
    counts = f"{requests.get('completed', 0)} completed, {requests.get('failed', 0)} failed, "
    counts += f"{requests.get('cut', 0)} cut"
    line = f"  {step['verdict']}: {figures} ({window}{counts})"
    if step["why"]:
        line += f"\n    undecided: {step['why']}"
    return line


def judged(judgement: dict[str, Any]) -> str:
    """An objective's figure, or the bounds cut requests leave it within."""
    if judgement["figure"] is not None:
        return figure(judgement["figure"])
    low, high = judgement["low"], judgement["high"]
    if low is None:
        return "-"
    return f">= {figure(low)}" if high is None else f"{figure(low)}..{figure(high)}"


def table(results: dict[str, Any]) -> str:
    """The steps in the order tried, and the answer."""
    objectives = results["slo"]
    header = [results["parameter"], "verdict", "completed", "cut", *objectives]
    rows = [header]
    for s in results["steps"]:
        by_name = {j["objective"]: j for j in s["objectives"]}
        requests = s["requests"]
        rows.append(
            [
                str(s["value"]),
                s["verdict"],
                str(requests.get("completed", "-")),
                str(requests.get("cut", "-")),
                *(judged(by_name[o]) if o in by_name else "-" for o in objectives),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["", "dagperf | search"]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    for s in results["steps"]:
        if s["verdict"] == Verdict.UNDECIDED:
            lines.append(f"{results['parameter']} {s['value']} undecided: {s['why']}")
    lines.append(answer(results))
    return "\n".join(lines) + "\n"


def answer(results: dict[str, Any]) -> str:
    parameter, best, span = results["parameter"], results["best"], results.get("best_range")
    if best is None:
        return f"No {parameter} tried met every objective."
    line = f"Highest {parameter} meeting every objective: {best}"
    if span is not None:
        line += f" (or up to {span[1]}: the steps above it up to there decided nothing)"
    return line


def figure(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.3g}" if abs(value) < 1 else f"{value:,.2f}"
