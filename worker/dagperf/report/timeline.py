"""The DAG timeline: each drawn tree a swim lane (slowest first), each conversation of the
tree a row in it, each request a bar from sent to last token with its time to first token
shaded, and the edges that released requests drawn between rows.

Times are milliseconds since the tree's first request, so lanes line up and the longest lane
is the slowest tree. Edges: FORK and SPAWN from the parent's request to the child's first,
join from a child's last request to the parent's join turn; a join wait is drawn on the
parent's row from its previous turn's end to the release, an authored delay from the
dependency's end for `delay_ms`. The critical path (from the session export) is drawn in its
own colour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import Any

from dagperf.report.runs import Request, Run

BAR = 0.6
COLORS = {"request": "#9ecae1", "critical": "#fd8d3c", "error": "#d62728", "ttft": "#3182bd"}
EDGES: dict[str, dict[str, Any]] = {
    "fork": {"color": "#31a354", "dash": "solid"},
    "spawn": {"color": "#756bb1", "dash": "dash"},
    "join": {"color": "#636363", "dash": "dot"},
}


@dataclass
class _Traces:
    """Columns of the figure's traces, filled lane by lane."""

    bars: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    lines: dict[str, tuple[list[float | None], list[float | None]]] = field(default_factory=dict)
    ticks: list[float] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    lanes: list[tuple[float, float]] = field(default_factory=list)

    def bar(self, kind: str, y: float, start: float, length: float, text: str) -> None:
        cols = self.bars.setdefault(kind, {"y": [], "base": [], "x": [], "text": []})
        cols["y"].append(y)
        cols["base"].append(round(start, 3))
        cols["x"].append(round(max(length, 0.01), 3))
        cols["text"].append(text)

    def line(self, kind: str, x0: float, y0: float, x1: float, y1: float) -> None:
        xs, ys = self.lines.setdefault(kind, ([], []))
        xs += [round(x0, 3), round(x1, 3), None]
        ys += [y0, y1, None]


def figure(run: Run) -> dict[str, Any] | None:
    """The timeline of the run's drawn trees, or None when there is none to draw."""
    t = _Traces()
    row = 0
    by_root = {s["root_correlation_id"]: s for s in run.sessions}
    for root, requests in run.trees.items():
        if requests:
            row = _lane(t, by_root.get(root, {}), requests, row)
    if not row:
        return None
    return {"data": _data(t), "layout": _layout(t, row)}


def _lane(t: _Traces, session: dict[str, Any], requests: list[Request], row: int) -> int:
    instances = sorted(
        {r.instance for r in requests},
        key=lambda i: min(r.start_ns for r in requests if r.instance == i),
    )
    rows = {instance: row + k for k, instance in enumerate(instances)}
    origin = min(r.start_ns for r in requests)
    critical = set((session.get("critical_path") or {}).get("path", []))
    by_id = {r.request_id: r for r in requests}
    name = {r.instance: r.conversation for r in requests}
    root_name = session.get("conversation_id") or name[instances[0]]
    for instance in instances:
        y = rows[instance]
        t.ticks.append(y)
        label = f"{root_name} · {instance[:8]}" if y == row else f"  {name[instance]}"
        t.labels.append(escape(label))  # Plotly reads its labels as (a subset of) HTML
    t.lanes.append((row - 0.5, row + len(instances) - 0.5))
    for r in requests:
        y, start = rows[r.instance], (r.start_ns - origin) / 1e6
        length = (r.end_ns - r.start_ns) / 1e6
        kind = (
            "error"
            if r.error
            else "critical"
            if f"{r.conversation}:{r.turn}" in critical
            else "request"
        )
        t.bar(kind, y, start, length, _hover(r, root_name))
        if r.ttft_ms is not None and not r.error:
            t.bar("ttft", y, start, r.ttft_ms, _hover(r, root_name))
        _edges(t, r, by_id, rows, origin)
    return row + len(instances)


def _edges(
    t: _Traces, r: Request, by_id: dict[str, Request], rows: dict[str, int], origin: int
) -> None:
    y, start = rows[r.instance], (r.start_ns - origin) / 1e6
    deps = [by_id[d] for d in r.depends_on if d in by_id]
    for dep in deps:
        dep_end = (dep.end_ns - origin) / 1e6
        if dep.instance == r.instance:
            kind = ""
        elif r.parent == dep.instance:
            kind = r.mode or "fork"
        else:
            kind = "join"
        if kind:
            t.line(kind, dep_end, rows[dep.instance], start, y)
        if r.delay_ms > 0 and dep is max(deps, key=lambda d: d.end_ns):
            t.line("delay", dep_end, y, dep_end + r.delay_ms, y)
    own = [d for d in deps if d.instance == r.instance]
    joined = [d for d in deps if d.instance != r.instance and r.parent != d.instance]
    if own and joined:
        waited_from = (own[0].end_ns - origin) / 1e6
        released = (max(d.end_ns for d in joined) - origin) / 1e6
        t.line("join wait", waited_from, y, released, y)


def _hover(r: Request, root: str) -> str:
    parts = [escape(f"{root} / {r.conversation} turn {r.turn}")]
    if r.latency_ms is not None:
        parts.append(f"latency {r.latency_ms:,.1f} ms")
    if r.ttft_ms is not None:
        parts.append(f"TTFT {r.ttft_ms:,.1f} ms")
    if r.delay_ms:
        parts.append(f"authored delay {r.delay_ms:,.0f} ms")
    if r.backend:
        parts.append(escape(f"backend {r.backend}"))
    if r.error:
        parts.append(escape(f"error {r.error}"))
    return "<br>".join(parts)


BAR_NAMES = {
    "request": "request (sent → last token)",
    "critical": "on the critical path",
    "error": "failed request",
    "ttft": "time to first token",
}
LINE_STYLES: dict[str, dict[str, Any]] = {
    **EDGES,
    "delay": {"color": "#bdbdbd", "dash": "solid", "width": 6},
    "join wait": {"color": "#e6550d", "dash": "dot", "width": 3},
}


def _data(t: _Traces) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = []
    for kind in ("request", "critical", "error", "ttft"):
        if cols := t.bars.get(kind):
            data.append(
                {
                    "type": "bar",
                    "orientation": "h",
                    "name": BAR_NAMES[kind],
                    **cols,
                    "width": BAR if kind != "ttft" else BAR / 2,
                    "marker": {"color": COLORS[kind]},
                    "textposition": "none",
                    "hovertemplate": "%{text}<extra></extra>",
                }
            )
    for kind, style in LINE_STYLES.items():
        if kind in t.lines:
            xs, ys = t.lines[kind]
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": kind,
                    "x": xs,
                    "y": ys,
                    "line": {"width": 1.5, **style},
                    "hoverinfo": "skip",
                }
            )
    return data


def _layout(t: _Traces, rows: int) -> dict[str, Any]:
    shading = [
        {
            "type": "rect",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "y0": a,
            "y1": b,
            "layer": "below",
            "line": {"width": 0},
            "fillcolor": "#f4f4f4" if k % 2 == 0 else "#ffffff",
        }
        for k, (a, b) in enumerate(t.lanes)
    ]
    return {
        "title": {"text": "DAG timeline (slowest trees first)", "y": 0.995, "yanchor": "top"},
        "barmode": "overlay",
        "height": min(180 + 22 * rows, 8000),
        "margin": {"l": 220, "r": 20, "t": 90, "b": 50},
        "xaxis": {"title": {"text": "ms since the tree's first request"}, "zeroline": False},
        "yaxis": {
            "tickmode": "array",
            "tickvals": t.ticks,
            "ticktext": t.labels,
            "autorange": "reversed",
            "zeroline": False,
            "automargin": True,
        },
        "shapes": shading,
        "legend": {"orientation": "h", "x": 0, "y": 1, "yanchor": "bottom"},
        "dragmode": "pan",
    }
