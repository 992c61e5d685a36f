"""Sessions as the unit a user waits for: one root with its FORK tree and SPAWNed children.

For every tree run of the profiling phase: its duration from the first request issued to the
last reply, its requests and errors, whether every request was good (no error, and within each
`--goodput` objective: a session with one bad turn is not good), and its critical path
(`critical_path`). Each becomes a line of `session_export.jsonl` when the run ends; a run cut
short by a stop is written too, marked incomplete, and left out of the statistics, as is one a
failed request cancelled (--cancel-session-on-failure), marked cancelled with the number of its
requests never sent: sent and cancelled add up to the tree, so no request goes unaccounted for.

A run is held only while it is in flight (`per_run`): a few numbers per request sent.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any, NamedTuple

from dagperf.engine import Flight, NodeState, SessionState, TreeRun
from dagperf.metrics.critical_path import CriticalPath, Timing, critical_path
from dagperf.metrics.per_run import PerRun
from dagperf.metrics.summary import Distribution
from dagperf.metrics.window import WindowSample
from dagperf.transport.protocol import Result
from dagperf.vocabulary import catalog

SLOWEST_LISTED = 10


class _Request(NamedTuple):
    node: int
    timing: Timing
    error: bool  # the endpoint failed it
    cut: bool  # the run cut it short
    bad: bool  # failed, cut, or missed an objective


class SessionMetrics:
    def __init__(
        self,
        is_good: Callable[[Result], bool],
        write: Callable[[dict[str, Any]], None],
        window: WindowSample | None = None,
    ):
        """`window`: where the sessions started in the window go, for its verdicts."""
        self._is_good = is_good
        self._write = write
        self._window = window
        self._runs: PerRun[_Request] = PerRun(self._close)
        self.duration = Distribution()  # ms, complete sessions only
        self.count = 0
        self.good = 0
        self.incomplete = 0
        self.cancelled = 0
        self.cancelled_requests = 0  # never sent: their session was cancelled
        self._server = self._dispatch = self._delay = self._join_wait = 0
        self._slowest: list[tuple[float, int, dict[str, Any]]] = []  # a min-heap of the slowest

    def add(self, flight: Flight, result: Result, issued_ns: int) -> None:
        timing = Timing(issued_ns, result.start_ns, result.end_ns)
        request = _Request(
            flight.node, timing, result.failed, result.cut is not None, not self._is_good(result)
        )
        self._runs.add(flight.run, request)

    def retire(self, run: TreeRun) -> None:
        """The run is over: its session is written once every result sent is in."""
        self._runs.retire(run)

    @property
    def pending(self) -> int:
        """Sessions over whose last results are still on their way."""
        return self._runs.pending

    def finish(self) -> None:
        """The run ended: write what is still open (its missing results will not come)."""
        self._runs.finish()

    def _close(self, run: TreeRun, requests: list[_Request], retired: bool) -> None:
        if len(requests) == 1:  # most sessions of most runs: no generators to set up
            (only,) = requests
            times = {only.node: only.timing}
            start, end = only.timing.issued_ns, only.timing.end_ns
            errors, cuts, bad = int(only.error), int(only.cut), only.bad
        else:
            times = {r.node: r.timing for r in requests}
            start = min(t.issued_ns for t in times.values())
            end = max(t.end_ns for t in times.values())
            errors, cuts = sum(r.error for r in requests), sum(r.cut for r in requests)
            bad = any(r.bad for r in requests)
        complete = retired and not run.cancelled and SessionState.TRUNCATED not in run.sessions
        complete = complete and min(run.nodes) >= NodeState.OK  # every node ended
        status = "cancelled" if run.cancelled else "complete" if complete else "incomplete"
        cancelled = run.unsent() if run.cancelled else 0
        path = critical_path(run.tree, times, start, run.waived)
        good = complete and not bad
        duration_ms = (end - start) / 1e6
        line: dict[str, Any] = {
            "root_correlation_id": run.correlation[0],
            "conversation_id": run.tree.root.conversation_id,
            "start_ns": start,
            "end_ns": end,
            "duration_ms": duration_ms,
            "request_count": len(times),
            "error_count": errors,
            "cut_count": cuts,
            "good": good,
            "complete": complete,
            "status": status,
            "cancelled_count": cancelled,
            "critical_path": None if path is None else path.as_dict(),
        }
        self._write(line)
        if self._window is not None and run.measured and not run.cancelled:
            self._window.add_session(duration_ms, complete)  # incomplete: cut by the run
        if run.cancelled:
            self.cancelled += 1
            self.cancelled_requests += cancelled
            return
        if not complete:
            self.incomplete += 1
            return
        self.count += 1
        self.good += good
        self.duration.add(duration_ms)
        if path is not None:
            self._account(path)
        item = (duration_ms, run.id, line)
        if len(self._slowest) < SLOWEST_LISTED:
            heapq.heappush(self._slowest, item)
        elif item[:2] > self._slowest[0][:2]:
            heapq.heapreplace(self._slowest, item)

    def _account(self, path: CriticalPath) -> None:
        self._server += path.server_ns
        self._dispatch += path.dispatch_ns
        self._delay += path.delay_ns
        self._join_wait += path.join_wait_ns

    def report(self, duration_s: float) -> dict[str, Any]:
        """The figures for `profile_export_aiperf.json`: `duration_s` is the phase's."""
        out: dict[str, Any] = {
            **_scalar(catalog.SESSION_COUNT, self.count),
            **_scalar(catalog.GOOD_SESSION_COUNT, self.good),
            **_scalar(catalog.SESSION_GOODPUT, self.good / duration_s if duration_s else 0.0),
        }
        if self.duration.count:
            duration = catalog.SESSION_DURATION
            out[duration.name] = {"unit": duration.unit, **self.duration.stats()}
        total = self._server + self._dispatch + self._delay
        if total:
            out["critical_path"] = {
                "sessions": self.count,
                "server_ms": self._server / 1e6,
                "dispatch_ms": self._dispatch / 1e6,
                "delay_ms": self._delay / 1e6,
                "join_wait_ms": self._join_wait / 1e6,
                "server_share": self._server / total,
                "dispatch_share": self._dispatch / total,
                "delay_share": self._delay / total,
                "slowest": [line for *_, line in sorted(self._slowest, key=_by_duration)],
            }
        if self.incomplete:
            out |= _scalar(catalog.INCOMPLETE_SESSION_COUNT, self.incomplete)
        if self.cancelled:
            out |= _scalar(catalog.CANCELLED_SESSION_COUNT, self.cancelled)
            out |= _scalar(catalog.CANCELLED_REQUEST_COUNT, self.cancelled_requests)
        return out


def _scalar(metric: catalog.Metric, value: float) -> dict[str, dict[str, Any]]:
    """One figure of the summary, as AIPerf writes a scalar: `{name: {unit, avg}}`."""
    return {metric.name: {"unit": metric.unit, "avg": value}}


def _by_duration(item: tuple[float, int, dict[str, Any]]) -> tuple[float, int]:
    return -item[0], item[1]
