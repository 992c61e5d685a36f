"""Routing policies side by side: one column per run directory, as Markdown.

    python3 examples/routing/table.py RUN_DIR [RUN_DIR ...]

Reads each run's profile_export_aiperf.json and, when compare.sh left it beside the run, the
engines' own counters scraped after it (RUN_DIR.engines.prom; the engines started with the run).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

CACHED = "llamacpp:prompt_tokens_cached_total"


def engines_cached(run: Path) -> float | None:
    """The engines' cached prompt tokens, summed over engines."""
    path = run.with_name(f"{run.name}.engines.prom")
    if not path.exists():
        return None
    lines = path.read_text().splitlines()
    return sum(float(x.split()[-1]) for x in lines if x.startswith(CACHED + " "))


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def ms(stats: dict[str, Any] | None, key: str = "avg") -> str:
    return "-" if not stats else f"{stats[key]:.0f} ms"


def rows(summary: dict[str, Any], run: Path) -> dict[str, str]:
    locality = summary.get("backend_locality") or {}
    dag = summary["dag_report"]
    fork = dag["by_branch_mode"].get("fork", {})
    reuse = summary.get("fork_reuse") or {}
    siblings = dag["fork_siblings"]
    ttft = summary.get("time_to_first_token", {})
    engines = engines_cached(run)
    reported = summary["usage_prompt_cache_read_tokens"]["sum"]
    on_one = locality.get("trees_on_one_backend")
    return {
        "requests (errors)": (
            f"{summary['request_count']['avg']:.0f} ({summary['error_request_count']['avg']:.0f})"
        ),
        "FORK trees on one engine": f"{on_one} of {locality.get('trees', '-')}",
        "requests off their tree's home": str(locality.get("requests_off_home_backend", "-")),
        "FORK children's first requests: prompt cached (tree min)": (
            f"{percent(reuse.get('share'))} ({percent(reuse.get('per_tree', {}).get('min'))})"
        ),
        "all FORK requests: prompt cached": percent(fork.get("cached_token_share")),
        "first sibling / later siblings cached": (
            f"{percent(siblings.get('first_cached_share'))} / "
            f"{percent(siblings.get('others_cached_share'))}"
        ),
        "TTFT p50, all requests": ms(ttft or None, "p50"),
        "TTFT avg, later requests at home": ms(locality.get("home_backend_ms")),
        "TTFT avg, later requests away": ms(locality.get("off_home_backend_ms")),
        "requests per engine": " / ".join(
            str(n) for _, n in sorted(locality.get("by_backend", {}).items())
        ),
        "each engine's cached share (its /metrics)": " / ".join(
            percent(m.get("cached_prompt_share"))
            for m in summary.get("server_metrics", {}).get("by_url", {}).values()
        ),
        "cached tokens: dagperf / engines' /metrics": (
            f"{reported:.0f} / {'-' if engines is None else f'{engines:.0f}'}"
        ),
    }


def table(runs: list[Path], label: Callable[[Path], str] = lambda p: p.name) -> str:
    columns = []
    for run in runs:
        summary = json.loads((run / "profile_export_aiperf.json").read_text())
        columns.append(rows(summary, run))
    lines = ["| | " + " | ".join(label(r) for r in runs) + " |"]
    lines.append("|---" * (len(runs) + 1) + "|")
    for name in columns[0]:
        lines.append(f"| {name} | " + " | ".join(c[name] for c in columns) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(table([Path(a) for a in sys.argv[1:]]))
