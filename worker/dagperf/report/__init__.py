"""`dagperf report`: one self-contained HTML page from one run directory, or a comparison of
several, that a reader who was not at the run can answer from: which tree was slowest and why,
whether FORK siblings were faster than the first child, which run is better on each metric.

- `runs`: a run directory read for the report (one streaming pass over the records);
- `figures`, `timeline`: Plotly figure specs built in Python;
- `tables`, `compare`: the tables, and the deltas between runs;
- `page`: the HTML, with the charting bundle inlined.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dagperf.report import page
from dagperf.report.runs import ReportError, load_run

__all__ = ["REPORT_FILE", "ReportError", "write_report"]

REPORT_FILE = "report.html"


def write_report(
    directories: Sequence[Path], output: Path | None = None, labels: Sequence[str] = ()
) -> Path:
    """Write the report of these run directories and return its path: into the run directory
    for one run, else into `output` (a file, or a directory to put report.html in) or the
    current directory."""
    if not directories:
        raise ReportError("no run directory given")
    if labels and len(labels) != len(directories):
        raise ReportError(f"{len(labels)} labels for {len(directories)} run directories")
    names = list(labels) or [d.resolve().name for d in directories]
    if len(set(names)) < len(names):
        raise ReportError("two runs have the same label: name them with --label")
    runs = [load_run(d, name) for d, name in zip(directories, names, strict=True)]
    html = page.single(runs[0]) if len(runs) == 1 else page.comparison(runs)
    target = output or (directories[0] if len(runs) == 1 else Path.cwd())
    if target.is_dir():
        target = target / REPORT_FILE
    try:
        target.write_text(html, encoding="utf-8")
    except OSError as e:
        raise ReportError(f"{target}: cannot write: {e.strerror or e}") from None
    return target
