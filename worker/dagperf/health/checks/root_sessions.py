"""Root sessions: how many ran at once against the concurrency limit, and how fast they arrived
against the requested rate. Both read one tally, each root session's span over its own requests.

A root session's span is [first start, last end] of the root conversation's own requests:
children run inside their root's slot, and may outlive it. A root is open from its first record
until as many of its own records as it has turns (`turn_count`) were read, then folds into two
8-byte columns for the overlap sweep; records from older versions, without the count, keep
every root open until the end.

Concurrency without a limit set is the engine's default of one root at a time, unless roots
arrive by rate or schedule (`root_limit`, the rule the engine follows). Root arrivals are
Poisson (or gaps of the run's `arrival_cv`), so a rate measured from n arrivals is only good to
about cv/sqrt(n): with too few of them the rate check says so (skipped) rather than pass or fail
on noise.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

import numpy as np

from dagperf.health.checks.figures import ms
from dagperf.health.checks.run import Record, Run, compact_id
from dagperf.health.report import CheckResult, Status
from dagperf.vocabulary.config import root_limit

CONCURRENCY, RATE = "session_concurrency", "request_rate"


class Roots:
    """Each root session's span, [first start, last end], over the root conversation's own
    requests (children run inside their root's slot, and may outlive it)."""

    def __init__(self, run: Run) -> None:
        self._load = run.load
        self._tolerance = run.options.rate_tolerance
        self._open: dict[bytes | str, list[int]] = {}  # root -> [start, end, records read]
        self._starts = array("q")  # closed spans, for the overlap sweep
        self._ends = array("q")
        self._first = self._last = 0  # earliest and latest root start, for the rate

    @property
    def retained(self) -> int:
        """Root sessions still open: what this check's memory grows with, besides the
        16 bytes per closed span."""
        return len(self._open)

    def add(self, record: Record) -> None:
        meta = record.metadata
        root = meta.root_correlation_id
        start = meta.request_start_ns
        if root is None or meta.x_correlation_id != root or start is None:
            return
        end = start if meta.request_end_ns is None else meta.request_end_ns
        key = compact_id(root)
        span = self._open.get(key)
        if span is None:
            span = self._open[key] = [start, end, 0]
        else:
            span[0] = min(span[0], start)
            span[1] = max(span[1], end)
        span[2] += 1
        if span[2] == meta.turn_count:
            del self._open[key]
            self._close(span)

    def _close(self, span: list[int]) -> None:
        start = span[0]
        if not self._starts:
            self._first = self._last = start
        self._first, self._last = min(self._first, start), max(self._last, start)
        self._starts.append(start)
        self._ends.append(span[1])

    def _close_all(self) -> None:
        """Roots whose every turn was not read (failed, skipped, or an older file)."""
        for span in self._open.values():
            self._close(span)
        self._open.clear()

    def concurrency(self) -> CheckResult:
        load = self._load
        target = root_limit(load.concurrency, load.request_rate, load.fixed_schedule)
        source = "concurrency" if load.concurrency else "default"
        if target is None:
            return CheckResult(
                name=CONCURRENCY,
                status=Status.SKIPPED,
                summary="no concurrency limit set (arrivals by rate or schedule)",
            )
        self._close_all()
        roots = len(self._starts)
        if not roots:
            return CheckResult(
                name=CONCURRENCY,
                status=Status.SKIPPED,
                summary="no request of a root conversation recorded",
                details={"target": target, "target_source": source, "roots": 0},
            )
        starts = np.frombuffer(self._starts, dtype=np.int64)
        ends = np.frombuffer(self._ends, dtype=np.int64)
        peak, peak_at, over_ns = _overlap(starts, ends, target)
        details = {
            "target": target,
            "target_source": source,
            "roots": roots,
            "max_observed": peak,
            "peak_at_ms": ms(peak_at - self._first),
            "time_over_target_ms": ms(over_ns),
        }
        limit = f"limit {target}" + (" by default" if source == "default" else "")
        if peak > target:
            summary = (
                f"{peak} root sessions overlapped ({limit}), "
                f"over the limit for {over_ns / 1e6:.1f} ms"
            )
            status = Status.FAIL
        else:
            summary = f"at most {peak} of {roots} root sessions overlapped ({limit})"
            status = Status.PASS
        return CheckResult(name=CONCURRENCY, status=status, summary=summary, details=details)

    def rate(self) -> CheckResult:
        load, tolerance = self._load, self._tolerance
        target = load.request_rate
        if not target:
            return CheckResult(
                name=RATE, status=Status.SKIPPED, summary="not a rate run (no request_rate)"
            )
        self._close_all()
        n = len(self._starts)
        cv = load.arrival_cv or 1.0  # the measured rate's relative noise is cv / sqrt(n)
        needed = math.ceil((3 * cv / tolerance) ** 2)
        details: dict[str, Any] = {
            "target_per_s": target,
            "arrivals": n,
            "tolerance": tolerance,
            "arrivals_needed": needed,
        }
        if n < 2:
            summary = f"{n} root arrival(s): too few to measure a rate"
            return CheckResult(name=RATE, status=Status.SKIPPED, summary=summary, details=details)
        window_ns = self._last - self._first
        if window_ns <= 0:
            summary = f"all {n} roots arrived at the same instant"
            return CheckResult(name=RATE, status=Status.SKIPPED, summary=summary, details=details)
        measured = (n - 1) / (window_ns / 1e9)
        error = measured / target - 1
        details |= {
            "measured_per_s": round(measured, 6),
            "relative_error": round(error, 6),
            "window_s": round(window_ns / 1e9, 6),
        }
        figure = f"{measured:.4g}/s against {target:g}/s ({error:+.1%}) from {n} arrivals"
        if 3 * cv / math.sqrt(n) > tolerance:
            noise = "Poisson noise" if cv == 1.0 else f"the noise of gaps with cv {cv:g}"
            summary = f"{figure}: {noise} needs {needed} arrivals for a {tolerance:.0%} verdict"
            return CheckResult(name=RATE, status=Status.SKIPPED, summary=summary, details=details)
        passed = abs(error) <= tolerance
        summary = f"{figure}, tolerance {tolerance:.0%}"
        status = Status.PASS if passed else Status.FAIL
        return CheckResult(name=RATE, status=status, summary=summary, details=details)


def _overlap(starts: np.ndarray, ends: np.ndarray, target: int) -> tuple[int, int, int]:
    """Most spans open at once, when first reached, and the time spent above `target`.
    A span ending at the instant another starts does not overlap it. Sorts the two columns
    in place and works on them apart, so the sweep needs no merged copy of both.

    Open at t: (starts <= t) - (ends <= t). It peaks at a start. It exceeds `target` from
    the (j + target)-th start to the j-th end, in the stretch where exactly j spans ended."""
    starts.sort()
    ends.sort()
    open_at_starts = np.arange(1, len(starts) + 1) - np.searchsorted(ends, starts, "right")
    top = int(open_at_starts.argmax())
    over_ns = 0
    if target < len(starts):
        j = np.arange(len(starts) - target)
        after = np.maximum(starts[j + target], np.concatenate([[starts[0]], ends[j[1:] - 1]]))
        over_ns = int(np.clip(ends[j] - after, 0, None).sum())
    return int(open_at_starts[top]), int(starts[top]), over_ns
