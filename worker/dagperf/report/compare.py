"""Several runs side by side: each metric's value per run, and its change against the first run
marked better or worse by the metric's direction."""

from __future__ import annotations

from html import escape

from dagperf.report.runs import Run
from dagperf.report.tables import Raw, stat, table
from dagperf.vocabulary import catalog

DISTRIBUTION_STATS = ("avg", "p50", "p90", "p99")
COMPARED_DISTRIBUTIONS = (
    catalog.TIME_TO_FIRST_TOKEN,
    catalog.INTER_TOKEN_LATENCY,
    catalog.REQUEST_LATENCY,
    catalog.OUTPUT_TOKEN_THROUGHPUT_PER_USER,
    catalog.OUTPUT_SEQUENCE_LENGTH,
    catalog.INPUT_SEQUENCE_LENGTH,
    catalog.SESSION_DURATION,
)
COMPARED_SCALARS = (
    catalog.REQUEST_THROUGHPUT,
    catalog.OUTPUT_TOKEN_THROUGHPUT,
    catalog.REQUEST_COUNT,
    catalog.ERROR_REQUEST_COUNT,
    catalog.REQUEST_ERROR_RATE,
    catalog.GOODPUT,
    catalog.SESSION_GOODPUT,
    catalog.GOOD_SESSION_COUNT,
    catalog.SESSION_COUNT,
    catalog.BENCHMARK_DURATION,
)


def rows_compared(runs: list[Run]) -> list[tuple[catalog.Metric, str, list[float | None]]]:
    """(metric, label with stat, value per run) for each metric some run reports."""
    out = []
    for metric in COMPARED_DISTRIBUTIONS:
        for key in DISTRIBUTION_STATS:
            values = [stat(run.summary, metric.name, key) for run in runs]
            if any(v is not None for v in values):
                out.append((metric, f"{metric.label} {key}", values))
    for metric in COMPARED_SCALARS:
        values = [stat(run.summary, metric.name) for run in runs]
        if any(v is not None for v in values):
            out.append((metric, metric.label, values))
    return out


#: A relative change smaller than this is called no change: two runs of one workload on one
#: server differ by about this much.
NOISE = 0.01


def verdict(metric: catalog.Metric, base: float | None, value: float | None) -> tuple[str, str]:
    """(change, css class): "+12.0%" and "better", "worse" or "" (no direction, or a change
    within the noise)."""
    if base is None or value is None:
        return "—", ""
    change = f"{100 * (value - base) / base:+.1f}%" if base else f"{value - base:+.3g}"
    if abs(value - base) <= NOISE * abs(base):
        return change, ""
    if metric.better == "lower":
        return change, "better" if value < base else "worse"
    if metric.better == "higher":
        return change, "better" if value > base else "worse"
    return change, ""


def deltas(runs: list[Run]) -> str:
    headers = ["Metric", "Unit", *(run.label for run in runs)]
    headers += [f"{run.label} vs {runs[0].label}" for run in runs[1:]]
    rows = []
    for metric, label, values in rows_compared(runs):
        row: list[object] = [label, metric.unit, *values]
        for value in values[1:]:
            change, css = verdict(metric, values[0], value)
            mark = {"better": " ✓ better", "worse": " ✗ worse"}.get(css, "")
            row.append(Raw(f'<span class="{css}">{escape(change + mark)}</span>'))
        rows.append(row)
    return table(headers, rows, "deltas")
