"""Several runs side by side: each metric's value per run, and its change against the first run
marked better or worse by the metric's direction."""

from __future__ import annotations

from html import escape

from dagperf.report.runs import Run
from dagperf.report.tables import Raw, stat, table
from dagperf.vocabulary.catalog import HIGHER_IS_BETTER, LOWER_IS_BETTER, RECORD, SCALARS, SESSION

DISTRIBUTION_STATS = ("avg", "p50", "p90", "p99")
COMPARED_RECORD = (
    "time_to_first_token",
    "inter_token_latency",
    "request_latency",
    "output_token_throughput_per_user",
    "output_sequence_length",
    "input_sequence_length",
)
COMPARED_SCALARS = (
    "request_throughput",
    "output_token_throughput",
    "request_count",
    "error_request_count",
    "request_error_rate",
    "goodput",
    "session_goodput",
    "good_session_count",
    "session_count",
    "benchmark_duration",
)


def rows_compared(runs: list[Run]) -> list[tuple[str, str, str, list[float | None]]]:
    """(metric, label with stat, unit, value per run) for each metric some run reports."""
    out = []
    for name in (*COMPARED_RECORD, "session_duration"):
        metric = RECORD.get(name) or SESSION[name]
        for key in DISTRIBUTION_STATS:
            values = [stat(run.summary, name, key) for run in runs]
            if any(v is not None for v in values):
                out.append((name, f"{metric.label} {key}", metric.unit, values))
    for name in COMPARED_SCALARS:
        values = [stat(run.summary, name) for run in runs]
        if any(v is not None for v in values):
            out.append((name, SCALARS[name].label, SCALARS[name].unit, values))
    return out


#: A relative change smaller than this is called no change: two runs of one workload on one
#: server differ by about this much.
NOISE = 0.01


def verdict(metric: str, base: float | None, value: float | None) -> tuple[str, str]:
    """(change, css class): "+12.0%" and "better", "worse" or "" (no direction, or a change
    within the noise)."""
    if base is None or value is None:
        return "—", ""
    change = f"{100 * (value - base) / base:+.1f}%" if base else f"{value - base:+.3g}"
    if abs(value - base) <= NOISE * abs(base):
        return change, ""
    if metric in LOWER_IS_BETTER:
        return change, "better" if value < base else "worse"
    if metric in HIGHER_IS_BETTER:
        return change, "better" if value > base else "worse"
    return change, ""


def deltas(runs: list[Run]) -> str:
    headers = ["Metric", "Unit", *(run.label for run in runs)]
    headers += [f"{run.label} vs {runs[0].label}" for run in runs[1:]]
    rows = []
    for metric, label, unit, values in rows_compared(runs):
        row: list[object] = [label, unit, *values]
        for value in values[1:]:
            change, css = verdict(metric, values[0], value)
            mark = {"better": " ✓ better", "worse": " ✗ worse"}.get(css, "")
            row.append(Raw(f'<span class="{css}">{escape(change + mark)}</span>'))
        rows.append(row)
    return table(headers, rows, "deltas")
