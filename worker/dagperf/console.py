"""What a person watching the run sees: progress while it runs, a summary table at the end.

On a terminal the progress line is redrawn in place; elsewhere (CI logs, pods) it is logged
every few seconds instead, through the same logger as everything else, so the JSON-lines log
mode covers it. `quiet` keeps only the summary.
"""

from __future__ import annotations

import itertools
import logging
import sys
import time
from typing import Any, TextIO

from dagperf.engine import Progress
from dagperf.metrics.dag_report import LATENCY_MS, TTFT_MS
from dagperf.vocabulary import catalog

log = logging.getLogger("dagperf.progress")

TABLE_METRICS = (
    catalog.TIME_TO_FIRST_TOKEN,
    catalog.TIME_TO_SECOND_TOKEN,
    catalog.REQUEST_LATENCY,
    catalog.INTER_TOKEN_LATENCY,
    catalog.OUTPUT_TOKEN_THROUGHPUT_PER_USER,
    catalog.OUTPUT_SEQUENCE_LENGTH,
    catalog.INPUT_SEQUENCE_LENGTH,
)
TABLE_STATS = ("avg", "min", "max", "p99", "p90", "p50", "std")
LOG_EVERY_S = 5.0
LINE_GROUPS = 4  # groups a summary line names before it counts the rest


class Console:
    def __init__(self, stream: TextIO = sys.stderr, quiet: bool = False, live: bool | None = None):
        self.stream = stream
        self.quiet = quiet
        self.live = stream.isatty() if live is None else live
        self._last: tuple[float, int] | None = None
        self._last_log = 0.0
        self._drawn = False

    @classmethod
    def for_output(cls, quiet: bool, log_format: str, stream: TextIO = sys.stderr) -> Console:
        """Redrawn in place only on a terminal showing text logs: JSON logs stay one object per
        line, progress included."""
        return cls(stream, quiet, live=stream.isatty() and log_format == "text")

    def progress(self, p: Progress, ttft_p50_ms: float | None = None) -> None:
        """`ttft_p50_ms`: the run's time to first token so far, when it has one."""
        if self.quiet:
            return
        now = time.monotonic()
        rate = 0.0
        if self._last is not None and now > self._last[0]:
            rate = (p.completed - self._last[1]) / (now - self._last[0])
        self._last = (now, p.completed)
        line = f"[{p.phase.label}] {p.completed}"
        if p.expected:
            line += f"/{p.expected} requests ({100 * p.completed / p.expected:.0f}%)"
            if rate > 0 and p.expected > p.completed:
                line += f"  ETA {_duration((p.expected - p.completed) / rate)}"
        else:
            line += " requests"
        line += f"  {rate:,.1f} req/s  errors {p.errors}"
        line += f"  cut {p.cut}" if p.cut else ""
        line += f"  in flight {p.in_flight}"
        if ttft_p50_ms is not None:
            line += f"  TTFT p50 {ttft_p50_ms:,.1f} ms"
        if self.live:
            self.stream.write("\r\x1b[2K" + line)
            self.stream.flush()
            self._drawn = True
        elif now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            log.info("%s", line)

    def done(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def summary(
        self, document: dict[str, Any], artifact_dir: str, out: TextIO = sys.stdout
    ) -> None:
        self.done()
        out.write(render_summary(document, artifact_dir))
        out.flush()


def render_summary(document: dict[str, Any], artifact_dir: str) -> str:
    if not _count(document, catalog.REQUEST_COUNT):
        return _nothing_succeeded(document, artifact_dir)  # a table of zeros would say nothing
    rows: list[tuple[str, ...]] = [("Metric", *TABLE_STATS)]
    for metric in TABLE_METRICS:
        stats = document.get(metric.name)
        if stats:
            label = f"{metric.label} ({stats['unit']})"
            rows.append((label, *(_number(stats[s]) for s in TABLE_STATS)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["", "dagperf | LLM metrics"]
    for row in rows:
        first = row[0].ljust(widths[0])
        lines.append(
            "  ".join(
                [first, *(cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True))]
            )
        )
    lines.append("")
    for name, metric in catalog.SCALARS.items():
        if name in document:
            lines.append(f"{metric.label} ({metric.unit}): {_number(document[name]['avg'])}")
    estimated = (document.get("token_count_source") or {}).get("estimate", 0)
    if estimated:
        lines.append(
            f"Token counts of {estimated} request(s) are estimates: the server reported no usage "
            "and no --tokenizer was given."
        )
    lines.extend(_cut_lines(document))
    lines.extend(_session_lines(document))
    lines.extend(_locality_lines(document.get("backend_locality")))
    lines.extend(_reuse_lines(document.get("fork_reuse")))
    lines.extend(_server_lines(document.get("server_metrics")))
    branch = document.get("branch_stats") or {}
    if branch.get("children_spawned") or branch.get("parents_suspended"):
        lines.append("BranchStats: " + ", ".join(f"{k} {v}" for k, v in branch.items()))
    lines.extend(_dag_lines(document.get("dag_report") or {}))
    lines.extend(_error_lines(document))
    lines.append(f"Artifacts: {artifact_dir}")
    return "\n".join(lines) + "\n"


def _nothing_succeeded(document: dict[str, Any], artifact_dir: str) -> str:
    failed = _count(document, catalog.ERROR_REQUEST_COUNT)
    cut = _count(document, catalog.CUT_REQUEST_COUNT)
    lines = ["", f"dagperf | no request succeeded: {failed:,} failed, {cut:,} cut short by the run"]
    lines += _cut_lines(document) + _error_lines(document) + [f"Artifacts: {artifact_dir}"]
    return "\n".join(lines) + "\n"


def _count(document: dict[str, Any], metric: catalog.Metric) -> int:
    """A count the summary holds (0 when it holds none)."""
    return int((document.get(metric.name) or {}).get("avg", 0))


def _error_lines(document: dict[str, Any]) -> list[str]:
    lines = []
    for entry in document.get("error_summary") or []:
        details = entry["error_details"]
        code = f"{details['code']} " if details["code"] is not None else ""
        lines.append(f"Errors: {entry['count']} x {code}{details['type']}: {details['message']}")
    return lines


def _cut_lines(document: dict[str, Any]) -> list[str]:
    """Requests the run cut short: how many, and what they leave the window's figures at."""
    window = document.get("window") or {}
    requests = window.get("requests") or {}
    cut = _count(document, catalog.CUT_REQUEST_COUNT)
    if not cut:
        return []
    waiting = requests.get("cut_before_first_token", 0)
    line = (
        f"Cut short by the run: {cut:,} request(s), {waiting:,} before a first token; not "
        "errors but censored values (a cut request waited at least that long), not in the "
        "table above"
    )
    bounds = window.get("bounds") or {}
    metric = catalog.TIME_TO_FIRST_TOKEN
    if metric.name not in bounds:
        metric = catalog.REQUEST_LATENCY
    p90 = (bounds.get(metric.name) or {}).get("p90")
    if p90:
        low, high = p90
        if high is None:
            span = f"{_number(low)} ms or more"
        elif high == low:  # the cut requests' own first tokens came: nothing left open
            span = f"{_number(low)} ms"
        else:
            span = f"{_number(low)}..{_number(high)} ms"
        line += f"; with them, the window's {metric.label.lower()} p90 is {span}"
    return [line]


def _dag_lines(report: dict[str, Any]) -> list[str]:
    """The DAG report in a few lines: by depth, by branch mode, first FORK sibling vs others."""
    lines = []

    def view(name: str, v: dict[str, Any]) -> str:
        speed = v.get(TTFT_MS) or v.get(LATENCY_MS)
        label = "TTFT" if TTFT_MS in v else "latency"
        text = f"{name}: {v['requests']} req"
        if speed:
            text += f", {label} p50 {_number(speed['p50'])} ms p99 {_number(speed['p99'])} ms"
        if "cached_token_share" in v:
            text += f", cached {100 * v['cached_token_share']:.0f}%"
        return text

    depths = report.get("by_depth") or {}
    if len(depths) > 1:
        lines.append("By agent depth: " + _bounded(depths, view, "depths"))
        modes = report.get("by_branch_mode") or {}
        lines.append("By branch mode: " + _bounded(modes, view, "branch modes"))
    siblings = report.get("fork_siblings") or {}
    if siblings.get("groups") and "others_ms" in siblings:
        metric = "TTFT" if siblings["metric"] == catalog.TIME_TO_FIRST_TOKEN.name else "latency"
        text = (
            f"FORK siblings ({siblings['groups']} groups): first {metric} p50 "
            f"{_number(siblings['first_ms']['p50'])} ms, others "
            f"{_number(siblings['others_ms']['p50'])} ms"
        )
        if "others_cached_share" in siblings and "first_cached_share" in siblings:
            text += (
                f"; cached share first {100 * siblings['first_cached_share']:.0f}%, others "
                f"{100 * siblings['others_cached_share']:.0f}%"
            )
        lines.append(text)
    return lines


def _bounded(groups: dict[str, dict[str, Any]], view: Any, noun: str) -> str:
    """One line however many groups the dataset makes (a 600-deep FORK chain has 600 depths):
    the first few, then a count of the rest and where they all are."""
    shown = [view(k, v) for k, v in itertools.islice(groups.items(), LINE_GROUPS)]
    rest = list(groups.values())[LINE_GROUPS:]
    if rest:
        requests = sum(v["requests"] for v in rest)
        shown.append(
            f"{len(rest)} more {noun} ({requests} req): see dag_report in "
            "profile_export_aiperf.json"
        )
    return " | ".join(shown)


def _session_lines(document: dict[str, Any]) -> list[str]:
    """Session duration and where the sessions' time went along their critical paths."""
    lines = []
    duration = document.get(catalog.SESSION_DURATION.name)
    if duration:
        lines.append(
            f"Session duration (ms): p50 {_number(duration['p50'])}, p90 "
            f"{_number(duration['p90'])}, p99 {_number(duration['p99'])}"
        )
    path = document.get("critical_path")
    if path:
        lines.append(
            f"Critical path: server {100 * path['server_share']:.0f}%, dispatch "
            f"{100 * path['dispatch_share']:.0f}%, authored delays {100 * path['delay_share']:.0f}%"
            f" of session time; joins waited {_number(path['join_wait_ms'])} ms in all"
        )
    return lines


def _locality_lines(locality: dict[str, Any] | None) -> list[str]:
    """Did FORK trees stay on one backend, and what did leaving home cost?"""
    if not locality:
        return []
    if locality["trees_on_one_backend"] is None:
        trees, reason = locality["trees"], locality["reason"]
        return [f"Backend locality: unknown for {trees} FORK trees; {reason}"]
    lines = [
        f"Backend locality ({locality['method']}): {locality['trees_on_one_backend']} of "
        f"{locality['trees']} FORK trees on one backend, {locality['requests_off_home_backend']}"
        " request(s) off their home; by backend: "
        + ", ".join(f"{b} {n}" for b, n in locality["by_backend"].items())
    ]
    home, away = locality.get("home_backend_ms"), locality.get("off_home_backend_ms")
    if home and away:
        lines.append(
            f"  later requests at home avg {_number(home['avg'])} ms (p99 "
            f"{_number(home['p99'])}), away avg {_number(away['avg'])} ms (p99 "
            f"{_number(away['p99'])})"
        )
    return lines


def _reuse_lines(reuse: dict[str, Any] | None) -> list[str]:
    """How much of the FORK children's prompts the server found cached."""
    if not reuse:
        return []
    requests = reuse["requests"]
    if reuse["share"] is None:
        hint = "vLLM needs --enable-prompt-tokens-details, SGLang --enable-cache-report"
        return [
            f"FORK-child prefix reuse: unknown; none of {requests} replies reported cached "
            f"prompt tokens ({hint})"
        ]
    text = (
        f"FORK-child prefix reuse: {100 * reuse['share']:.0f}% of prompt tokens cached "
        f"({reuse['cached_tokens']:,} of {reuse['prompt_tokens']:,} over {requests} requests"
    )
    tree = reuse.get("per_tree")
    if tree:
        text += f"; per tree p50 {100 * tree['p50']:.0f}%, min {100 * tree['min']:.0f}%"
    if reuse["unreported"]:
        text += f"; {reuse['unreported']} without a cached count"
    return [text + ")"]


MAX_SERVER_LINES = 8  # a line per scraped backend, then a count of the rest


def _server_lines(metrics: dict[str, Any] | None) -> list[str]:
    """What each scraped backend counted itself: its prompt cache and its queue."""
    by_url = (metrics or {}).get("by_url") or {}
    lines = []
    for url, entry in list(by_url.items())[:MAX_SERVER_LINES]:
        parts = []
        if entry.get("cached_prompt_share") is not None:
            parts.append(
                f"cached {100 * entry['cached_prompt_share']:.0f}% of "
                f"{entry['prompt_tokens']:,.0f} prompt tokens"
            )
        for name, key, label in (
            ("requests_running", "avg", "running avg"),
            ("requests_waiting", "max", "waiting max"),
        ):
            if name in entry:
                parts.append(f"{label} {_number(entry[name][key])}")
        if entry.get("failures"):
            parts.append(f"{entry['failures']} failed scrapes")
        lines.append(f"Server {url}: " + (", ".join(parts) or "no known figures"))
    if len(by_url) > MAX_SERVER_LINES:
        lines.append(f"  ... and {len(by_url) - MAX_SERVER_LINES} more in server_metrics")
    return lines


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def _number(value: float) -> str:
    return f"{value:,.2f}"
