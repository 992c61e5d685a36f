"""The report's charts as Plotly figure specs (plain dicts: `data` and `layout`), one run or
several overlaid. What is drawn is thinned to a fixed number of points; the statistics beside
it come from every value."""

from __future__ import annotations

from html import escape
from typing import Any

import numpy as np

from dagperf.report.runs import DRAWN_METRICS, Run
from dagperf.vocabulary import catalog

Figure = dict[str, Any]

CDF_POINTS = 400
FEW = 10  # values a box plot also shows one by one: a box of three hides them
HISTOGRAM_BINS = 60
THROUGHPUT_BUCKETS = 300
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
# Runs overlaid in one chart differ in dash and width as well as colour: two runs with the same
# curve (the same load on the same server) still show both lines, the later thinner on top.
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
LABEL_CHARS = 28  # a run's name on an axis; longer ones are shortened, whole in the tooltip
# Where Plotly puts the toolbar it shows on hover: the top strip of a chart. Titles sit below it.
TOOLBAR_PX = 30


def layout(title: str, x: str, y: str, **more: Any) -> dict[str, Any]:
    return {
        "title": {
            "text": title,
            "y": 1,
            "yref": "container",
            "yanchor": "top",
            "pad": {"t": TOOLBAR_PX},
        },
        "xaxis": {"title": {"text": x}, "automargin": True},
        "yaxis": {"title": {"text": y}, "automargin": True},
        "margin": {"l": 60, "r": 30, "t": TOOLBAR_PX + 50, "b": 50},
        "legend": {"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
        "height": 400,
        **more,
    }


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def line_style(i: int) -> dict[str, Any]:
    """The line of the i-th run overlaid in a chart."""
    return {"color": _color(i), "dash": DASHES[i % len(DASHES)], "width": max(1.5, 3.0 - 0.5 * i)}


def short_label(label: str) -> str:
    """A run's name as an axis shows it: whole up to LABEL_CHARS, else its start and end."""
    if len(label) <= LABEL_CHARS:
        return label
    keep = LABEL_CHARS - 1
    return label[: keep - keep // 2] + "…" + label[-(keep // 2) :]


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
    for metric in DRAWN_METRICS:
        series = [(run, run.values[metric.name]) for run in runs if metric.name in run.values]
        if series:
            out.extend(_pair(metric.label, series))
    durations = [
        (run, np.asarray([s["duration_ms"] for s in run.sessions], dtype=float))
        for run in runs
        if run.sessions
    ]
    if durations:
        out.extend(_pair(catalog.SESSION_DURATION.label, durations))
    return out


def _pair(label: str, series: list[tuple[Run, np.ndarray]]) -> list[Figure]:
    noun = "session" if label == catalog.SESSION_DURATION.label else "request"
    cdf, hist = [], []
    low = min(float(v.min()) for _, v in series)
    high = max(float(v.max()) for _, v in series)
    if high > low:
        edges = np.linspace(low, high, HISTOGRAM_BINS + 1)
    else:  # one value, repeated: a single bar around it
        edges = np.linspace(low - 0.5, low + 0.5, 2)
    for i, (run, values) in enumerate(series):
        x, y = _thinned_cdf(values)
        one = len(values) == 1  # a lone point: a line through it would draw nothing
        cdf.append(
            {
                "type": "scatter",
                "mode": "markers" if one else "lines",
                "name": escape(run.label),
                "x": x,
                "y": y,
                "line": line_style(i),
                "marker": {"color": _color(i), "size": 11},
            }
        )
        hist.append(_stem(run, float(values[0]), i) if one else _bars(run, values, edges, i))
    cdf_layout = layout(f"{label}: CDF", f"{label} (ms)", f"share of {noun}s")
    cdf_layout["yaxis"] |= {"range": [0, 1.05]}
    hist_layout = layout(f"{label}: histogram", f"{label} (ms)", "count", barmode="overlay")
    if notes := _lone_notes(noun, series):
        for spec in (cdf_layout, hist_layout):
            spec["annotations"] = notes
            if high == low:  # nothing but lone values: a window around them
                pad = max(1.0, 0.05 * abs(low))
                spec["xaxis"] |= {"range": [low - pad, high + pad]}
    return [{"data": cdf, "layout": cdf_layout}, {"data": hist, "layout": hist_layout}]


def _bars(run: Run, values: np.ndarray, edges: np.ndarray, i: int) -> dict[str, Any]:
    counts, _ = np.histogram(values, edges)
    return {
        "type": "bar",
        "name": escape(run.label),
        "x": edges[:-1].round(4).tolist(),
        "y": counts.tolist(),
        "width": float(edges[1] - edges[0]),
        "offset": 0,
        "opacity": 0.6,
        "marker": {"color": _color(i)},
    }


def _stem(run: Run, value: float, i: int) -> dict[str, Any]:
    """A histogram of one value: a count of one, drawn as a point on a stem."""
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "name": escape(run.label),
        "x": [round(value, 4)] * 2,
        "y": [0, 1],
        "line": {"color": _color(i), "width": 2},
        "marker": {"color": _color(i), "size": [0, 11]},
    }


def _lone_notes(noun: str, series: list[tuple[Run, np.ndarray]]) -> list[dict[str, Any]]:
    """A note on a chart where a run has a single value: a distribution of one is a point."""
    lone = [(run, float(values[0])) for run, values in series if len(values) == 1]
    if not lone:
        return []
    if len(series) == 1:
        text = f"one {noun} ({lone[0][1]:,.2f} ms): a distribution needs more"
    else:
        text = "; ".join(f"{escape(short_label(r.label))}: one {noun}" for r, _ in lone)
    # Above the plot area, under the title: never over what is drawn.
    return [
        {
            "text": text,
            "showarrow": False,
            "xref": "paper",
            "yref": "paper",
            "x": 0.5,
            "y": 1.0,
            "yanchor": "bottom",
            "font": {"color": "#555", "size": 12},
        }
    ]


def throughput(runs: list[Run]) -> Figure:
    """Requests and output tokens completed per second over the run, in equal buckets: one
    panel each, over a shared time axis (on two axes of one panel, the two curves of a run
    with a fixed output length coincide, and one hides the other)."""
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
                "name": escape(run.label),  # one legend entry per run, for both panels
                "legendgroup": str(i),
                "x": mid,
                "y": (done / width).round(3).tolist(),
                "line": line_style(i),
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": escape(run.label),
                "legendgroup": str(i),
                "showlegend": False,
                "x": mid,
                "y": (tokens / width).round(2).tolist(),
                "yaxis": "y2",
                "line": line_style(i),
            }
        )
    spec = layout("Throughput over time", "seconds since the first request", "requests/s")
    spec["height"] = 520
    spec["xaxis"] |= {"anchor": "y2"}
    spec["yaxis"] |= {"domain": [0.56, 1.0], "rangemode": "tozero"}
    spec["yaxis2"] = {
        "title": {"text": "output tokens/s"},
        "domain": [0.0, 0.44],
        "anchor": "x",
        "automargin": True,
        "rangemode": "tozero",
    }
    spec["legend"] |= {"y": -0.14}
    spec["showlegend"] = len(data) > 2  # the panels' titles say what one run's lines are
    return {"data": data, "layout": spec}


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
    names = [escape(run.label) for run, _ in shares]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": name,
            "marker": {"color": color},
            "y": names,
            "x": [round(100 * float(s.get(key, 0.0)), 2) for _, s in shares],
            "customdata": names,  # the whole name, where the axis may show it shortened
            "hovertemplate": f"%{{customdata}}<br>{name}: %{{x}}%<extra></extra>",
        }
        for key, name, color in CRITICAL_PARTS
    ]
    spec = layout(
        "Critical path: share of session time",
        "% of session time",
        "",
        barmode="stack",
        height=170 + 40 * len(shares),
    )
    spec["yaxis"] |= {
        "tickmode": "array",
        "tickvals": names,
        "ticktext": [escape(short_label(run.label)) for run, _ in shares],
    }
    return {"data": data, "layout": spec}


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
                    "boxpoints": "all" if len(values) < FEW else "outliers",
                    "pointpos": 0,
                }
            )
    if not data:
        return None
    metric = runs[0].sibling_metric.label
    return {"data": data, "layout": layout(f"FORK siblings: {metric}", "", f"{metric} (ms)")}
