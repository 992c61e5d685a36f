"""Intra-session arrival: each dependent request against the moment it became due, the last of
its dependencies' ends plus its delay; sent before that (early), or more than the slack after
(late), fails the run, since the load the server saw was not the DAG the dataset described.

Memory follows what is in flight. A request's end time is kept only while requests that name it
are still to be read: each record says how many will (`dependents`), and the entry goes with
the last of them. A child is judged as it is read when its dependencies came first (as the
engine writes them), and held back only otherwise. Lateness goes into the same bounded
distribution as the run's metrics. Records from older versions, without `dependents`, keep every
end until the end.

Timestamps are wall-clock nanoseconds stamped in the workers. On one host they compare exactly;
when workers span hosts, clock offsets show up as lateness, which `early_tolerance_ms` forgives.
Requests that failed without any response (worker lost, abandoned after a cancel, connection
refused) are left out: their recorded start may be when the credit was issued, not when bytes
went out. A dependency with no record (a warmup-phase parent) leaves its children unverifiable,
counted rather than fatal.
"""

from __future__ import annotations

from typing import Any

from dagperf.health.checks.figures import Worst, distribution
from dagperf.health.checks.run import Record, Run, compact_id
from dagperf.health.report import CheckResult, Status
from dagperf.metrics.summary import Distribution

NAME = "intra_session_arrival"


class Arrivals:
    """Each dependent request against the moment it became due: the last of its
    dependencies' ends plus its delay."""

    def __init__(self, run: Run) -> None:
        self._slack = run.options.arrival_slack_ms
        self._tolerance = run.options.early_tolerance_ms
        self._max_inflight = run.load.max_inflight
        # request -> (end ns, dependents still to be read; -1 when the record did not say)
        self._ends: dict[bytes | str, tuple[int, int]] = {}
        self._held: list[tuple[str, int, float, list[bytes | str]]] = []
        self._lateness = Distribution()  # ms, one per judged request
        self._worst = Worst()
        self._early = self._late = 0
        self._no_response = 0  # failed with no response: the start may not be a send
        self._missing = 0  # dependency references with no record
        self._unverifiable = 0  # requests left out for it

    @property
    def retained(self) -> int:
        """End times still kept: what this check's memory grows with."""
        return len(self._ends) + len(self._held)

    def add(self, record: Record) -> None:
        meta = record.metadata
        if meta.request_end_ns is not None and meta.dependents != 0:
            left = -1 if meta.dependents is None else meta.dependents
            self._ends[compact_id(meta.x_request_id)] = (meta.request_end_ns, left)
        if not meta.depends_on:
            return
        deps = [compact_id(d) for d in meta.depends_on]
        ready = self._ready(deps)
        start = meta.request_start_ns
        if start is None or (record.error is not None and meta.request_ack_ns is None):
            self._no_response += 1
        elif ready is None:  # a dependency not read yet, or not in the file at all
            self._held.append((meta.x_request_id, start, meta.delay_ms, deps))
        else:
            self._judge(meta.x_request_id, start, meta.delay_ms, ready)

    def _ready(self, deps: list[bytes | str]) -> int | None:
        """The last of the dependencies' ends, each reference counted off its dependency
        (a child named twice counts twice, as `dependents` does); None while one is unread."""
        ends = self._ends
        if not all(d in ends for d in deps):
            return None
        ready = max(ends[d][0] for d in deps)
        for d in deps:
            end, left = ends[d]
            if left == 1:
                del ends[d]
            elif left > 1:
                ends[d] = (end, left - 1)
        return ready

    def _judge(self, request_id: str, start: int, delay_ms: float, ready: int) -> None:
        lateness = (start - ready) / 1e6 - delay_ms
        self._lateness.add(lateness)
        if lateness < -self._tolerance:
            self._early += 1
            excess = -lateness - self._tolerance
        elif lateness > self._slack:
            self._late += 1
            excess = lateness - self._slack
        else:
            return
        self._worst.add(excess, {"request_id": request_id, "lateness_ms": round(lateness, 3)})

    def result(self) -> CheckResult:
        ends = self._ends
        for request_id, start, delay_ms, deps in self._held:
            missing = sum(d not in ends for d in deps)
            if missing:
                self._missing += missing
                self._unverifiable += 1
            else:
                self._judge(request_id, start, delay_ms, max(ends[d][0] for d in deps))
        self._held.clear()
        lateness = self._lateness
        dependent = lateness.count
        details: dict[str, Any] = {
            "dependent_requests": dependent,
            "early": self._early,
            "late": self._late,
            "slack_ms": self._slack,
            "early_tolerance_ms": self._tolerance,
            "lateness_ms": distribution(lateness),
            "worst": self._worst.listed(),
            "missing_dependencies": self._missing,
            "unverifiable_requests": self._unverifiable,
            "failed_without_response": self._no_response,
        }
        skipped_too = self._unverifiable + self._no_response
        if not dependent:
            why = "no request depends on another"
            if skipped_too:
                why = (
                    f"none of {skipped_too} dependent requests could be timed "
                    f"({self._missing} missing dependencies, "
                    f"{self._no_response} failed without response)"
                )
            return CheckResult(name=NAME, status=Status.SKIPPED, summary=why, details=details)
        notes = f"; {self._missing} dependencies not in the file" if self._missing else ""
        dist = details["lateness_ms"]
        if self._early or self._late:
            worst = details["worst"][0]
            hint = " (max_inflight held requests back)" if self._max_inflight else ""
            summary = (
                f"{self._early} sent early, {self._late} later than {self._slack:g} ms, "
                f"of {dependent} dependent requests; worst {worst['request_id']} at "
                f"{worst['lateness_ms']:+.1f} ms{hint}{notes}"
            )
            status = Status.FAIL
        else:
            summary = (
                f"{dependent} dependent requests on time: lateness p50 {dist['p50']:.1f} ms, "
                f"p99 {dist['p99']:.1f} ms, max {dist['max']:.1f} ms "
                f"(slack {self._slack:g} ms){notes}"
            )
            status = Status.PASS
        return CheckResult(name=NAME, status=status, summary=summary, details=details)
