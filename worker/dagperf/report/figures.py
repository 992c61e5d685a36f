"""The report's charts as Plotly figure specs (plain dicts: `data` and `layout`), one run or
several overlaid. What is drawn is thinned to a fixed number of points; the statistics beside
it come from every value."""

from __future__ import annotations

from html import escape
from typing import Any

import numpy as np

from dagperf.metrics.catalog import RECORD
from dagperf.report.runs import DRAWN_METRICS, Run

Figure = dict[str, Any]

CDF_POINTS = 400
HISTOGRAM_BINS = 60
THROUGHPUT_BUCKETS = 300
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")


def layout(title: str, x: str, y: str, **more: Any) -> dict[str, Any]:
    return {
        "title": {"text": title},
        "xaxis": {"title": {"text": x}},
        "yaxis": {"title": {"text": y}},
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
        "legend": {"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
        "height": 400,
        **more,
    }


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _thinned_cdf(values: np.ndarray) -> tuple[list[float], list[float]]:
    """(value, cumulative share) at up to CDF_POINTS evenly spaced ranks, ends included."""
    ordered = np.sort(values)
    n = len(ordered)
    ranks = np.unique(np.linspace(0, n - 1, min(n, CDF_POINTS)).round().astype(int))
    return ordered[ranks].round(4).tolist(), ((ranks + 1) / n).round(5).tolist()


def distributions(runs: list[Run]) -> list[Figure]:
    """A CDF and a histogram per latency metric, and per session duration; a metric no run has
    (TTFT without streaming) is left out."""
    out = []
    for name in DRAWN_METRICS:
        series = [(run, run.values[name]) for run in runs if name in run.values]
        if series:
            out.extend(_pair(RECORD[name].label, series))
    durations = [
        (run, np.asarray([s["duration_ms"] for s in run.sessions], dtype=float))
        for run in runs
        if run.sessions
    ]
    if durations:
        out.extend(_pair("Session Duration", durations))
    return out


def _pair(label: str, series: list[tuple[Run, np.ndarray]]) -> list[Figure]:
    cdf, hist = [], []
    low = min(float(v.min()) for _, v in series)
    high = max(float(v.max()) for _, v in series)
    edges = np.linspace(low, high if high > low else low + 1, HISTOGRAM_BINS + 1)
    for i, (run, values) in enumerate(series):
        x, y = _thinned_cdf(values)
        line = {"color": _color(i)}
        cdf.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": escape(run.label),
                "x": x,
                "y": y,
                "line": line,
            }
        )
        counts, _ = np.histogram(values, edges)
        hist.append(
            {
                "type": "bar",
                "name": escape(run.label),
                "x": edges[:-1].round(4).tolist(),
                "y": counts.tolist(),
                "width": float(edges[1] - edges[0]),
                "offset": 0,
                "opacity": 0.6,
                "marker": line,
            }
        )
    return [
        {
            "data": cdf,
            "layout": layout(
                f"{label}: CDF",
                f"{label} (ms)",
                "share of requests" if label != "Session Duration" else "share of sessions",
            ),
        },
        {
            "data": hist,
            "layout": layout(f"{label}: histogram", f"{label} (ms)", "count", barmode="overlay"),
        },
    ]


def throughput(runs: list[Run]) -> Figure:
    """Requests and output tokens completed per second over the run, in equal buckets."""
    data = []
    for i, run in enumerate(runs):
        if not len(run.ends_s):
            continue
        span = max(float(run.ends_s.max()), 1e-3)
        buckets = min(THROUGHPUT_BUCKETS, max(10, int(span)))
        edges = np.linspace(0.0, span, buckets + 1)
        width = float(edges[1] - edges[0])
        done, _ = np.histogram(run.ends_s, edges)
        tokens, _ = np.histogram(run.ends_s, edges, weights=run.output_tokens)
        mid = ((edges[:-1] + edges[1:]) / 2).round(3).tolist()
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{escape(run.label)}: requests/s",
                "x": mid,
                "y": (done / width).round(3).tolist(),
                "line": {"color": _color(i)},
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{escape(run.label)}: tokens/s",
                "x": mid,
                "y": (tokens / width).round(2).tolist(),
                "yaxis": "y2",
                "line": {"color": _color(i), "dash": "dot"},
            }
        )
    return {
        "data": data,
        "layout": layout(
            "Throughput over time",
            "seconds since the first request",
            "requests/s",
            yaxis2={"title": {"text": "output tokens/s"}, "overlaying": "y", "side": "right"},
        ),
    }


CRITICAL_PARTS = (
    ("server_share", "server", "#1f77b4"),
    ("dispatch_share", "dispatch (the benchmark)", "#ff7f0e"),
    ("delay_share", "authored delays", "#7f7f7f"),
)


def critical_split(runs: list[Run]) -> Figure | None:
    """Where session time went along the critical paths, per run."""
    shares = [(run, run.summary.get("critical_path") or {}) for run in runs]
    shares = [(run, s) for run, s in shares if s.get("sessions")]
    if not shares:
        return None
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": name,
            "marker": {"color": color},
            "y": [escape(run.label) for run, _ in shares],
            "x": [round(100 * float(s.get(key, 0.0)), 2) for _, s in shares],
        }
        for key, name, color in CRITICAL_PARTS
    ]
    return {
        "data": data,
        "layout": layout(
            "Critical path: share of session time",
            "% of session time",
            "",
            barmode="stack",
            height=140 + 40 * len(shares),
        ),
    }


def sibling_effect(runs: list[Run]) -> Figure | None:
    """The prefix cache's effect: each FORK group's first child against its later siblings,
    which the server can answer from the cached shared prefix."""
    data = []
    for i, run in enumerate(runs):
        if not run.siblings:
            continue
        first = [round(a, 3) for a, _ in run.siblings]
        others = [round(b, 3) for _, b in run.siblings]
        for name, values, dim in (("first child", first, 1.0), ("later siblings", others, 0.5)):
            data.append(
                {
                    "type": "box",
                    "name": f"{escape(run.label)}: {name}",
                    "y": values,
                    "marker": {"color": _color(i)},
                    "opacity": dim,
                    "boxmean": True,
                }
            )
    if not data:
        return None
    metric = RECORD[runs[0].sibling_metric].label
    return {"data": data, "layout": layout(f"FORK siblings: {metric}", "", f"{metric} (ms)")}
