"""The checks, each an accumulator fed one record at a time, then asked for its verdict.

Memory follows what is in flight, not the size of the run. Records arrive as msgspec structs
holding only the fields read here (the decoder skips the rest without building it). A request's
end time is kept only while requests that name it are still to be read: each record says how
many will (`dependents`), and the entry goes with the last of them. A child is judged as it is
read when its dependencies came first (as the engine writes them), and held back only
otherwise. A root session is open from its first record until as many of its own records as it
has turns (`turn_count`) were read, then folds into two 8-byte columns for the overlap sweep.
Lateness goes into the same bounded distribution as the run's metrics (exact up to 65,536
values, then 0.1% buckets). Records from older versions, without the two counts, are checked
the same way, keeping every end and every root open until the end.

Timestamps are wall-clock nanoseconds stamped in the workers. On one host they compare exactly;
when workers span hosts, clock offsets show up as lateness, which `early_tolerance_ms` forgives.
Requests that failed without any response (worker lost, abandoned after a cancel, connection
refused) are left out of the arrival check: their recorded start may be when the credit was
issued, not when bytes went out. Root arrivals are Poisson, so a rate measured from n arrivals
is only good to about 1/sqrt(n); the rate check says so (skipped) rather than pass or fail on
noise. Concurrency without a limit set is the engine's default of one root at a time, unless
roots arrive by rate or schedule.
"""

from __future__ import annotations

import heapq
import math
import uuid
from array import array
from typing import Any

import msgspec
import numpy as np

from dagperf.apis.reply import LENGTH, STOP
from dagperf.health.report import (
    ARRIVAL,
    CONCURRENCY,
    EARLY_STOP,
    ERRORS,
    OUTPUT_LENGTH,
    RATE,
    CheckResult,
    HealthOptions,
    Status,
)
from dagperf.metrics.summary import Distribution
from dagperf.transport.protocol import CANCELLED
from dagperf.verdict import describe_error, rejection, unmeasured
from dagperf.vocabulary.config import root_limit

WORST = 5  # offenders listed per check


class Value(msgspec.Struct):
    value: float | None = None


class Metrics(msgspec.Struct):
    output_sequence_length: Value | None = None


class Metadata(msgspec.Struct):
    x_request_id: str
    request_start_ns: int | None = None
    request_ack_ns: int | None = None
    request_end_ns: int | None = None
    x_correlation_id: str | None = None
    root_correlation_id: str | None = None
    turn_count: int | None = None  # turns of its conversation
    depends_on: list[str] = []
    dependents: int | None = None  # requests naming this one in their depends_on
    delay_ms: float = 0.0
    max_tokens: Any = None  # whatever the body carried; only a positive number is used
    ignore_eos: bool = False
    was_cancelled: bool = False
    token_count_source: str | None = None
    finish_reason: str | None = None  # why the reply ended, in chat's words
    cut: dict[str, Any] | None = None  # cut short by the run: what was seen of it


class Record(msgspec.Struct):
    metadata: Metadata
    metrics: Metrics | None = None
    error: dict[str, Any] | None = None


class Load(msgspec.Struct):
    """The part of the run's LoadConfig the checks need; other fields are ignored, so
    directories written by other versions still read."""

    concurrency: int | None = None
    request_rate: float | None = None
    arrival_cv: float | None = None  # gaps' coefficient of variation; None: Poisson (1)
    fixed_schedule: bool = False
    max_inflight: int | None = None


def _key(ident: str) -> bytes | str:
    """A compact dict key: the 16 bytes of a uuid, or the string itself."""
    try:
        return uuid.UUID(ident).bytes
    except ValueError:
        return ident


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


class _Worst:
    """The `WORST` largest entries by score, as (score, tiebreak, payload)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, dict[str, Any]]] = []
        self._seen = 0

    def add(self, score: float, payload: dict[str, Any]) -> None:
        self._seen += 1
        entry = (score, -self._seen, payload)  # earlier entries win ties
        if len(self._heap) < WORST:
            heapq.heappush(self._heap, entry)
        elif entry > self._heap[0]:
            heapq.heapreplace(self._heap, entry)

    def listed(self) -> list[dict[str, Any]]:
        return [payload for _, _, payload in sorted(self._heap, reverse=True)]


# --- checks -----------------------------------------------------------------------------------


class Arrivals:
    """Each dependent request against the moment it became due: the last of its
    dependencies' ends plus its delay."""

    def __init__(self, options: HealthOptions) -> None:
        self._slack = options.arrival_slack_ms
        self._tolerance = options.early_tolerance_ms
        # request -> (end ns, dependents still to be read; -1 when the record did not say)
        self._ends: dict[bytes | str, tuple[int, int]] = {}
        self._held: list[tuple[str, int, float, list[bytes | str]]] = []
        self._lateness = Distribution()  # ms, one per judged request
        self._worst = _Worst()
        self._early = self._late = 0
        self._no_response = 0  # failed with no response: the start may not be a send
        self._missing = 0  # dependency references with no record
        self._unverifiable = 0  # requests left out for it

    @property
    def retained(self) -> int:
        """End times still kept: what this check's memory grows with."""
        return len(self._ends) + len(self._held)

    def add(self, meta: Metadata, failed: bool) -> None:
        if meta.request_end_ns is not None and meta.dependents != 0:
            left = -1 if meta.dependents is None else meta.dependents
            self._ends[_key(meta.x_request_id)] = (meta.request_end_ns, left)
        if not meta.depends_on:
            return
        deps = [_key(d) for d in meta.depends_on]
        ready = self._ready(deps)
        start = meta.request_start_ns
        if start is None or (failed and meta.request_ack_ns is None):
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

    def result(self, load: Load) -> CheckResult:
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
            "lateness_ms": _distribution(lateness),
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
            return CheckResult(name=ARRIVAL, status=Status.SKIPPED, summary=why, details=details)
        notes = f"; {self._missing} dependencies not in the file" if self._missing else ""
        dist = details["lateness_ms"]
        if self._early or self._late:
            worst = details["worst"][0]
            hint = " (max_inflight held requests back)" if load.max_inflight else ""
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
        return CheckResult(name=ARRIVAL, status=status, summary=summary, details=details)


def _distribution(values: Distribution) -> dict[str, Any]:
    if not values.count:
        return {"count": 0}
    p50, p90, p99 = values.percentiles((50, 90, 99))
    figures = {"min": values.min, "p50": p50, "p90": p90, "p99": p99, "max": values.max}
    return {"count": values.count, **{k: round(float(v), 3) for k, v in figures.items()}}


class Roots:
    """Each root session's span, [first start, last end], over the root conversation's own
    requests (children run inside their root's slot, and may outlive it)."""

    def __init__(self) -> None:
        self._open: dict[bytes | str, list[int]] = {}  # root -> [start, end, records read]
        self._starts = array("q")  # closed spans, for the overlap sweep
        self._ends = array("q")
        self._first = self._last = 0  # earliest and latest root start, for the rate

    @property
    def retained(self) -> int:
        """Root sessions still open: what this check's memory grows with, besides the
        16 bytes per closed span."""
        return len(self._open)

    def add(self, meta: Metadata) -> None:
        root = meta.root_correlation_id
        start = meta.request_start_ns
        if root is None or meta.x_correlation_id != root or start is None:
            return
        end = start if meta.request_end_ns is None else meta.request_end_ns
        key = _key(root)
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

    def concurrency(self, load: Load) -> CheckResult:
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
            "peak_at_ms": _ms(peak_at - self._first),
            "time_over_target_ms": _ms(over_ns),
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

    def rate(self, load: Load, tolerance: float) -> CheckResult:
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


class OutputLengths:
    """Successful replies against the `max_tokens` they were sent with.

    A reply sent with `ignore_eos` must be that long. So must one that ended at its limit
    (`finish_reason` "length"): the server's own count of what it generated, which is how a
    server that refuses `ignore_eos` (transformers serve answers 422) is checked. A reply that
    ended by itself before the limit (`finish_reason` "stop") is an early stop: not the
    server's error, but its length is the model's, not the dataset's, which is a finding of its
    own (`early_stops`)."""

    def __init__(self, options: HealthOptions) -> None:
        self._options = options
        self._checked = self._short = self._long = self._estimated = 0
        self._by_kind = {"ignore_eos": 0, "length": 0}
        self._worst = _Worst()
        self._early = 0
        self._ended = 0  # replies with max_tokens whose finish reason was given
        self._early_share = Distribution()  # an early stop's length over its max_tokens
        self._shortest = _Worst()

    def add(self, record: Record) -> None:
        meta = record.metadata
        if record.error is not None or meta.was_cancelled or meta.cut is not None:
            return
        asked = meta.max_tokens
        if isinstance(asked, bool) or not isinstance(asked, int | float) or asked <= 0:
            return
        found = record.metrics.output_sequence_length if record.metrics else None
        osl = found.value if found else None
        self._ended += meta.finish_reason is not None
        if meta.ignore_eos or meta.finish_reason == LENGTH:
            self._judge(meta, asked, osl, "ignore_eos" if meta.ignore_eos else "length")
        elif meta.finish_reason == STOP and (osl is None or osl < asked):
            self._early += 1
            share = 0.0 if osl is None else osl / asked
            self._early_share.add(share)
            entry = {"request_id": meta.x_request_id, "max_tokens": asked, "output_tokens": osl}
            self._shortest.add(1 - share, entry)

    def _judge(self, meta: Metadata, asked: float, osl: float | None, kind: str) -> None:
        self._checked += 1
        self._by_kind[kind] += 1
        if osl is not None and abs(osl - asked) <= self._options.osl_allowance(asked):
            return
        if osl is None or osl < asked:
            self._short += 1
        else:
            self._long += 1
        self._estimated += meta.token_count_source == "estimate"
        miss = asked if osl is None else abs(osl - asked)
        entry = {"request_id": meta.x_request_id, "max_tokens": asked, "output_tokens": osl}
        self._worst.add(miss, entry | {"why": kind})

    def result(self) -> CheckResult:
        options = self._options
        failed = self._short + self._long
        details: dict[str, Any] = {
            "checked": self._checked,
            "ignore_eos": self._by_kind["ignore_eos"],
            "ended_at_max_tokens": self._by_kind["length"],
            "failed": failed,
            "short": self._short,
            "long": self._long,
            "failed_with_estimated_counts": self._estimated,
            "tolerance_pct": options.osl_tolerance_pct,
            "tolerance_max_tokens": options.osl_tolerance_max_tokens,
            "worst": self._worst.listed(),
        }
        if not self._checked:
            summary = (
                "no successful reply with max_tokens was sent with ignore_eos or ended at its "
                "limit (finish_reason length)"
            )
            return CheckResult(
                name=OUTPUT_LENGTH, status=Status.SKIPPED, summary=summary, details=details
            )
        tolerance = (
            f"min({options.osl_tolerance_pct:g}%, {options.osl_tolerance_max_tokens}) tokens"
        )
        which = " and ".join(
            f"{n} {label}"
            for n, label in (
                (self._by_kind["ignore_eos"], "ignore_eos"),
                (self._by_kind["length"], "ended at the limit"),
            )
            if n
        )
        if failed:
            worst = details["worst"][0]
            got = "no" if worst["output_tokens"] is None else f"{worst['output_tokens']:g}"
            estimated = (
                f"; {self._estimated} counted by estimate (give --tokenizer)"
                if self._estimated
                else ""
            )
            summary = (
                f"{failed} of {self._checked} replies ({which}) off max_tokens by more than "
                f"{tolerance} ({self._short} short, {self._long} long); worst "
                f"{worst['request_id']}: {got} tokens for {worst['max_tokens']:g}{estimated}"
            )
            status = Status.FAIL
        else:
            summary = f"{self._checked} replies ({which}) within {tolerance} of max_tokens"
            status = Status.PASS
        return CheckResult(name=OUTPUT_LENGTH, status=status, summary=summary, details=details)

    def early_stops(self) -> CheckResult:
        """Replies that ended by themselves before max_tokens: a warning, not a failure."""
        details: dict[str, Any] = {
            "replies_with_finish_reason": self._ended,
            "early_stops": self._early,
            "share_of_max_tokens": _distribution(self._early_share),
            "shortest": self._shortest.listed(),
        }
        if not self._ended:
            summary = "no successful reply with max_tokens said why it ended (finish_reason)"
            return CheckResult(
                name=EARLY_STOP, status=Status.SKIPPED, summary=summary, details=details
            )
        if not self._early:
            summary = f"none of {self._ended} replies ended before max_tokens by itself"
            return CheckResult(
                name=EARLY_STOP, status=Status.PASS, summary=summary, details=details
            )
        share = details["share_of_max_tokens"]
        summary = (
            f"{self._early} of {self._ended} replies ended by themselves (finish_reason stop) "
            f"before max_tokens, at a median {share['p50']:.0%} of it: their lengths are the "
            "model's, not the dataset's (ignore_eos, or a model without an end-of-sequence "
            "token, gives exact lengths)"
        )
        return CheckResult(name=EARLY_STOP, status=Status.WARN, summary=summary, details=details)


class RequestErrors:
    """The endpoint's failures against the run's --max-error-rate, as its exit code judged
    them (`dagperf.verdict`); requests the run cut short are not errors."""

    def __init__(self) -> None:
        self.ok = self.failed = self.cut = self.unseen = 0
        self._errors: dict[tuple[Any, Any, str], int] = {}

    def add(self, record: Record) -> None:
        meta, error = record.metadata, record.error
        if error is None:
            self.ok += 1
        elif meta.cut is not None or (meta.was_cancelled and error.get("type") == CANCELLED):
            self.cut += 1
            self.unseen += meta.cut is not None and meta.cut.get("first_token") is None
        else:
            self.failed += 1
            key = (error.get("code"), error.get("type"), str(error.get("message"))[:200])
            if key in self._errors or len(self._errors) < 100:
                self._errors[key] = self._errors.get(key, 0) + 1

    def _most_common(self) -> str | None:
        if not self._errors:
            return None
        code, kind, message = max(self._errors, key=self._errors.__getitem__)
        return describe_error(code if isinstance(code, int) else None, str(kind), message)

    def result(self, max_error_rate: float) -> CheckResult:
        details = {
            "succeeded": self.ok,
            "failed": self.failed,
            "cut": self.cut,
            "max_error_rate": max_error_rate,
        }
        cut = f"; {self.cut} cut short by the run, not errors" if self.cut else ""
        if (nothing := unmeasured(self.ok, self.failed, self.cut, self.unseen)) is not None:
            return CheckResult(name=ERRORS, status=Status.FAIL, summary=nothing, details=details)
        if not self.ok + self.failed:
            summary = f"no request was answered or failed{cut}"
            return CheckResult(name=ERRORS, status=Status.SKIPPED, summary=summary, details=details)
        rejected = rejection(self.ok, self.failed, max_error_rate, self._most_common(), self.cut)
        if rejected is not None:
            return CheckResult(name=ERRORS, status=Status.FAIL, summary=rejected, details=details)
        total = self.ok + self.failed
        summary = (
            f"{self.failed} of {total} requests failed ({self.failed / total:.1%}), within "
            f"--max-error-rate {max_error_rate:g}{cut}"
        )
        return CheckResult(name=ERRORS, status=Status.PASS, summary=summary, details=details)
