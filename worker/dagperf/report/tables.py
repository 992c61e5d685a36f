"""The report's tables, as escaped HTML, from a run's summary and session export."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from dagperf.report.runs import Run
from dagperf.vocabulary import catalog


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], css: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


class Raw(str):
    """Markup built here, inserted as is."""


def counted(n: Any, noun: str) -> str:
    """'1 session', '3 sessions', '? sessions' for a count the summary lacks."""
    return f"{_cell(n)} {noun}" if n == 1 else f"{_cell(n)} {noun}s"


def _cell(v: Any) -> str:
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, float):
        return f"{v:,.2f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return escape("—" if v is None else str(v))


def stat(summary: dict[str, Any], metric: str, key: str = "avg") -> float | None:
    entry = summary.get(metric)
    value = entry.get(key) if isinstance(entry, dict) else None
    return float(value) if isinstance(value, int | float) else None


GLANCE = (
    ("Requests", catalog.REQUEST_COUNT, "avg", ""),
    ("Failed requests", catalog.ERROR_REQUEST_COUNT, "avg", ""),
    ("Cut short by the run (not errors)", catalog.CUT_REQUEST_COUNT, "avg", ""),
    ("Request throughput", catalog.REQUEST_THROUGHPUT, "avg", "req/s"),
    ("Output token throughput", catalog.OUTPUT_TOKEN_THROUGHPUT, "avg", "tokens/s"),
    ("TTFT p50", catalog.TIME_TO_FIRST_TOKEN, "p50", "ms"),
    ("TTFT p99", catalog.TIME_TO_FIRST_TOKEN, "p99", "ms"),
    ("Request latency p50", catalog.REQUEST_LATENCY, "p50", "ms"),
    ("Request latency p99", catalog.REQUEST_LATENCY, "p99", "ms"),
    ("Sessions", catalog.SESSION_COUNT, "avg", ""),
    ("Good sessions", catalog.GOOD_SESSION_COUNT, "avg", ""),
    ("Session duration p90", catalog.SESSION_DURATION, "p90", "ms"),
    ("Benchmark duration", catalog.BENCHMARK_DURATION, "avg", "s"),
)
LATENCY_MS = f"{catalog.REQUEST_LATENCY.name}_ms"  # a DAG report view's key (metrics.dag_report)


def glance(run: Run) -> str:
    rows = []
    for label, metric, key, unit in GLANCE:
        value = stat(run.summary, metric.name, key)
        if value is not None:  # a count (no unit) is shown as one: 5 requests, not 5.00
            rows.append((label, value if unit else round(value), unit))
    return table(("Metric", "Value", "Unit"), rows, "glance")


PARTS = (
    ("server_ms", "the server"),
    ("dispatch_ms", "the benchmark's dispatch"),
    ("delay_ms", "the dataset's authored delays"),
)


def slowest_trees(run: Run, limit: int = 10) -> str:
    """The slowest trees and what their time went to: the answer to 'why was it slow'."""
    rows = []
    for s in run.sessions[:limit]:
        path = s.get("critical_path") or {}
        total = sum(float(path.get(k, 0.0)) for k, _ in PARTS) or 1.0
        key, what = max(PARTS, key=lambda p: float(path.get(p[0], 0.0)))
        why = f"{100 * float(path.get(key, 0.0)) / total:.0f}% {what}"
        if float(path.get("join_wait_ms", 0.0)) > 0:
            why += f"; waited {float(path['join_wait_ms']):,.1f} ms on sub-agents"
        rows.append(
            (
                Raw(f'<span class="session">{escape(str(s.get("conversation_id")))}</span>'),
                str(s.get("root_correlation_id", ""))[:8],
                s.get("request_count"),
                s.get("error_count"),
                s.get("duration_ms"),
                path.get("server_ms"),
                path.get("dispatch_ms"),
                path.get("delay_ms"),
                path.get("join_wait_ms"),
                " → ".join(path.get("path", [])),
                why,
            )
        )
    return table(
        (
            "Session",
            "Tree",
            "Requests",
            "Errors",
            "Duration ms",
            "Server ms",
            "Dispatch ms",
            "Delays ms",
            "Join wait ms",
            "Critical path",
            "Mostly",
        ),
        rows,
    )


def _groups(entries: dict[str, Any], title: str) -> str:
    rows = [
        (
            key,
            e.get("requests"),
            e.get("errors"),
            (e.get(LATENCY_MS) or {}).get("p50"),
            (e.get(LATENCY_MS) or {}).get("p99"),
            None if e.get("cached_token_share") is None else 100 * e["cached_token_share"],
        )
        for key, e in entries.items()
    ]
    return table(
        (title, "Requests", "Errors", "Latency p50 ms", "Latency p99 ms", "Cached prompt %"), rows
    )


def dag_tables(run: Run) -> list[tuple[str, str]]:
    """(title, table) for the per-depth, per-branch-mode and FORK-sibling figures."""
    report = run.summary.get("dag_report") or {}
    out = []
    if report.get("by_depth"):
        out.append(("By agent depth", _groups(report["by_depth"], "Depth")))
    if report.get("by_branch_mode"):
        out.append(("By branch mode", _groups(report["by_branch_mode"], "Mode")))
    siblings = report.get("fork_siblings") or {}
    if siblings.get("groups"):
        first, others = siblings.get("first_ms") or {}, siblings.get("others_ms") or {}
        rows = [
            (
                "first child",
                first.get("p50"),
                first.get("p99"),
                100 * float(siblings.get("first_cached_share") or 0.0),
            ),
            (
                "later siblings",
                others.get("p50"),
                others.get("p99"),
                100 * float(siblings.get("others_cached_share") or 0.0),
            ),
        ]
        metric = str(siblings.get("metric", catalog.REQUEST_LATENCY.name)).replace("_", " ")
        out.append(
            (
                f"FORK siblings ({siblings['groups']} groups, {metric})",
                table(("", "p50 ms", "p99 ms", "Cached prompt %"), rows),
            )
        )
    reuse = fork_reuse(run)
    if reuse is not None:
        out.append(("FORK-child prefix reuse", reuse))
    return out


def fork_reuse(run: Run) -> str | None:
    """Of the FORK children's first prompts, the share the server reported cached."""
    reuse = run.summary.get("fork_reuse")
    if not isinstance(reuse, dict) or not reuse.get("requests"):
        return None
    share = reuse.get("share")
    tree = reuse.get("per_tree") or {}
    rows = [
        ("FORK children's first requests", reuse.get("requests")),
        ("cached share of their prompt tokens %", None if share is None else 100 * share),
        ("cached / prompt tokens", f"{reuse.get('cached_tokens')} / {reuse.get('prompt_tokens')}"),
        ("trees", tree.get("trees")),
        *((f"per tree {k} %", 100 * tree[k]) for k in ("p50", "min") if k in tree),
        ("replies without a cached count", reuse.get("unreported")),
    ]
    return table(("Prefix reuse", "Value"), rows)


def branch_stats(run: Run) -> str | None:
    stats = run.summary.get("branch_stats")
    if not isinstance(stats, dict) or not stats:
        return None
    return table(("Counter", "Value"), stats.items())


def locality(run: Run) -> str | None:
    loc = run.summary.get("backend_locality")
    if not isinstance(loc, dict) or not loc.get("trees"):
        return None
    if loc.get("trees_on_one_backend") is None:  # no response said which backend served it
        rows = [
            ("attributed by", "unknown"),
            ("FORK trees", loc.get("trees")),
            ("trees on one backend", "unknown"),
            ("how to know", loc.get("reason")),
            *((f"requests answered by {a}", n) for a, n in (loc.get("by_address") or {}).items()),
        ]
        return table(("Backend locality", "Value"), rows)
    rows = [
        ("attributed by", loc.get("method")),
        ("FORK trees", loc.get("trees")),
        ("trees on one backend", loc.get("trees_on_one_backend")),
        ("requests off their home backend", loc.get("requests_off_home_backend")),
        *((f"requests served by {b}", n) for b, n in (loc.get("by_backend") or {}).items()),
    ]
    for key, where in (("home_backend_ms", "on"), ("off_home_backend_ms", "off")):
        if isinstance(speed := loc.get(key), dict):  # FORK children: TTFT, else latency
            rows.append(
                (
                    f"FORK children {where} their home backend: p50 ms (of {speed.get('count')})",
                    speed.get("p50"),
                )
            )
    return table(("Backend locality", "Value"), rows)


def server_metrics(run: Run) -> str | None:
    """Each scraped backend's own figures: the engine's view beside the replies'."""
    by_url = (run.summary.get("server_metrics") or {}).get("by_url")
    if not isinstance(by_url, dict) or not by_url:
        return None

    def gauge(entry: dict[str, Any], name: str, key: str) -> Any:
        return (entry.get(name) or {}).get(key)

    rows = [
        (
            url,
            entry.get("scrapes"),
            entry.get("prompt_tokens"),
            entry.get("cached_prompt_tokens"),
            None
            if entry.get("cached_prompt_share") is None
            else 100 * entry["cached_prompt_share"],
            gauge(entry, "requests_running", "avg"),
            gauge(entry, "requests_waiting", "max"),
            gauge(entry, "kv_cache_usage", "max"),
        )
        for url, entry in by_url.items()
        if isinstance(entry, dict)
    ]
    headers = (
        "Server metrics URL",
        "Scrapes",
        "Prompt tokens",
        "Cached",
        "Cached %",
        "Running avg",
        "Waiting max",
        "KV cache max",
    )
    return table(headers, rows)


def errors(run: Run) -> str:
    rows = [
        (
            (e.get("error_details") or {}).get("type"),
            (e.get("error_details") or {}).get("code"),
            (e.get("error_details") or {}).get("message"),
            e.get("count"),
        )
        for e in run.summary.get("error_summary") or []
    ]
    if not rows:
        return "<p>No failed requests.</p>"
    return table(("Type", "Code", "Message", "Count"), rows)


def window(run: Run) -> str:
    """The requests the verdicts rest on: the window's span and counts, what the cut ones leave
    each figure at, and each objective's verdict (undecided ones with why)."""
    recorded = run.summary.get("window")
    if not isinstance(recorded, dict):
        return "<p>No window in this summary (written by an older dagperf).</p>"
    requests, sessions = recorded.get("requests") or {}, recorded.get("sessions") or {}
    counts = (
        f"<p>{_cell(recorded.get('duration_s'))} s at the load's level: "
        f"{counted(requests.get('completed'), 'request')} completed, "
        f"{_cell(requests.get('failed'))} failed, {_cell(requests.get('cut'))} cut short by "
        f"the run ({_cell(requests.get('cut_before_first_token'))} before a first token); "
        f"{counted(sessions.get('completed'), 'session')} completed, {_cell(sessions.get('cut'))} "
        "cut. A cut request is a censored value: at least as long as it waited.</p>"
    )
    rows = [
        (metric, stat, _bounds(low, high))
        for metric, stats in (recorded.get("bounds") or {}).items()
        for stat, (low, high) in stats.items()
    ]
    parts = [counts, table(("Metric", "Stat", "With the cut requests (ms)"), rows)]
    judged = recorded.get("objectives") or []
    if judged:
        verdicts = [
            (
                j["objective"],
                Raw(f'<span class="{escape(j["verdict"])}">{escape(j["verdict"])}</span>'),
                _bounds(j.get("low"), j.get("high")),
                j.get("values"),
                j.get("why") or "",
            )
            for j in judged
        ]
        parts.append(table(("Objective", "Verdict", "Figure", "Values", "Why"), verdicts))
    return "".join(parts)


def _bounds(low: float | None, high: float | None) -> str:
    if low is None:
        return "—"
    if high is None:
        return f"{low:,.2f} or more"
    return f"{low:,.2f}" if low == high else f"{low:,.2f} to {high:,.2f}"


def health(run: Run) -> str:
    if run.health is None:
        return "<p>No health checks were run (health_check.json is absent).</p>"
    rows = [
        (
            Raw(
                f'<span class="{escape(str(c.get("status")))}">'
                f"{escape(str(c.get('status', '')).upper())}</span>"
            ),
            c.get("name"),
            c.get("summary"),
        )
        for c in run.health.get("checks") or []
    ]
    verdict = "passed" if run.health.get("passed") else "failed"
    return f"<p>Health: {verdict}.</p>" + table(("Status", "Check", "Summary"), rows)


def configuration(run: Run) -> str:
    config = {k: run.summary.get(k) for k in ("input_config", "dagperf_config")}
    return f"<pre>{escape(json.dumps(config, indent=2, default=str))}</pre>"
