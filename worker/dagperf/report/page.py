"""The report as one HTML page that opens offline: Plotly's JavaScript bundle (from the plotly
package) and the figures' data inlined, no request to anywhere."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from html import escape
from importlib import resources
from typing import Any

from dagperf import __version__
from dagperf.report import compare, figures, tables, timeline
from dagperf.report.runs import Run

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1400px; padding: 0 24px;
       color: #222; }
h1 { margin: 24px 0 4px; } h2 { margin-top: 36px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f4f4f4; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 8px; }
.better { color: #2ca02c; font-weight: 600; } .worse { color: #d62728; font-weight: 600; }
.pass { color: #2ca02c; } .fail { color: #d62728; } .skipped { color: #888; }
.warn, .undecided { color: #ff7f0e; } .meets { color: #2ca02c; } .misses { color: #d62728; }
.muted { color: #666; } pre { background: #f8f8f8; padding: 12px; overflow: auto; }
"""

SCRIPT = """
const figures = JSON.parse(document.getElementById('figures').textContent);
for (const el of document.querySelectorAll('[data-figure]')) {
  const f = figures[el.dataset.figure];
  Plotly.newPlot(el, f.data, f.layout,
                 {responsive: true, displaylogo: false, scrollZoom: true,
                  modeBarButtonsToRemove: ['select2d', 'lasso2d', 'autoScale2d']});
}
"""


class Page:
    """Sections and figures, in order; figures are referenced by index from their divs."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.figures: list[dict[str, Any]] = []

    def section(self, title: str, *html: str) -> None:
        self.parts.append(f"<h2>{escape(title)}</h2>" + "".join(html))

    def figure(self, fig: dict[str, Any] | None) -> str:
        if fig is None:
            return ""
        self.figures.append(fig)
        return f'<div class="figure" data-figure="{len(self.figures) - 1}"></div>'

    def grid(self, figs: list[dict[str, Any]]) -> str:
        return '<div class="grid">' + "".join(self.figure(f) for f in figs) + "</div>"

    def html(self, title: str, subtitle: str) -> str:
        # no "<" at all inside the script element: a name holding "</script>" or "<!--" cannot
        # end it early
        data = json.dumps(self.figures, separators=(",", ":")).replace("<", "\\u003c")
        bundle = resources.files("plotly").joinpath("package_data/plotly.min.js").read_text()
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(title)}</title><style>{STYLE}</style>"
            "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>"
            f"<script>{bundle}</script></head><body>"
            f'<h1>{escape(title)}</h1><p class="muted">{escape(subtitle)}</p>'
            + "".join(self.parts)
            + f'<script type="application/json" id="figures">{data}</script>'
            f"<script>{SCRIPT}</script></body></html>\n"
        )


def _generated() -> str:
    return f"dagperf {__version__}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"


def _run_subtitle(run: Run) -> str:
    summary = run.summary
    span = f"{summary.get('start_time', '?')} to {summary.get('end_time', '?')}"
    drawn, count = sum(1 for r in run.trees.values() if r), len(run.sessions)
    if count == 1:
        sessions = "1 session"
    elif drawn == count:
        sessions = f"{count} sessions, all drawn"
    else:
        sessions = f"{count} sessions, the {drawn} slowest drawn"
    return f"{run.directory} · {span} · {sessions} · {_generated()}"


def single(run: Run) -> str:
    page = Page()
    page.section("At a glance", tables.glance(run))
    page.section(
        "Slowest trees",
        "<p>Each tree's critical path: the chain of requests that decided when it ended, and "
        "what its time went to.</p>",
        tables.slowest_trees(run),
        page.figure(timeline.figure(run)),
        page.figure(figures.critical_split([run])),
    )
    page.section("Latency distributions", page.grid(figures.distributions([run])))
    page.section("Throughput", page.figure(figures.throughput([run])))
    _dag_sections(page, [run])
    page.section("Window and verdicts", tables.window(run))
    page.section("Errors by type", tables.errors(run))
    page.section("Health checks", tables.health(run))
    page.section("Configuration", tables.configuration(run))
    return page.html(f"dagperf report: {run.label}", _run_subtitle(run))


def _dag_sections(page: Page, runs: list[Run]) -> None:
    prefix = [page.figure(figures.sibling_effect(runs))]
    for run in runs:
        label = f"<h3>{escape(run.label)}</h3>" if len(runs) > 1 else ""
        prefix.append(
            label + "".join(f"<h4>{escape(t)}</h4>{h}" for t, h in tables.dag_tables(run))
        )
    page.section("Prefix cache and DAG structure", *prefix)
    for run in runs:
        found = (tables.branch_stats(run), tables.locality(run), tables.server_metrics(run))
        parts = [x for x in found if x]
        if parts:
            title = "BranchStats and backends"
            page.section(title + (f": {run.label}" if len(runs) > 1 else ""), *parts)


def comparison(runs: list[Run]) -> str:
    page = Page()
    listing = tables.table(
        ("Run", "Directory", "Sessions", "Started"),
        [
            (run.label, str(run.directory), len(run.sessions), run.summary.get("start_time"))
            for run in runs
        ],
    )
    page.section("Runs", listing)
    page.section(
        f"Each metric, and its change against {runs[0].label}",
        '<p class="muted">✓ better, ✗ worse, by the metric\'s direction, beyond 1% either way; '
        "sequence lengths "
        "and counts of requests have none.</p>",
        compare.deltas(runs),
    )
    page.section("Critical path", page.figure(figures.critical_split(runs)))
    page.section("Latency distributions", page.grid(figures.distributions(runs)))
    page.section("Throughput", page.figure(figures.throughput(runs)))
    _dag_sections(page, runs)
    for run in runs:
        page.section(
            f"Slowest trees: {run.label}",
            tables.slowest_trees(run, limit=5),
            page.figure(timeline.figure(run)),
        )
        page.section(f"Window and verdicts: {run.label}", tables.window(run))
        page.section(f"Errors and health: {run.label}", tables.errors(run), tables.health(run))
    labels = " vs ".join(run.label for run in runs)
    return page.html(f"dagperf comparison: {labels}", _generated())
