"""What a run's window measured, and its verdicts.

The window holds the requests sent, and the sessions started, while the load was at its level
(`engine.window`): each request a success, the endpoint's failure, or cut short by the run. A cut
request is a censored observation (`censored`), and what it tells of each metric is decided here,
in one place (`cut_values`):

- time to first token: exact when its first token came, else at least the time it waited;
- request latency: at least the time it waited, always;
- time to second token: exact after two tokens; after one, at least the time since it came;
- inter-chunk latency: each gap it saw, and the one still open at least as long as it was;
- output sequence length: at least the tokens it got; input sequence length: exact;
- inter-token latency and per-user throughput (averages over the whole reply, whose rest
  might have come at any pace), and the server's usage counts: unknown, anything from 0 up.

A session cut short (its run ended before it did) lasted at least as long as it had run. A
request or a session still in flight when the verdict is asked for is unknown. A request the
endpoint failed has no latency to count; the error rate counts it, and a cut request is one
that might have failed or not. Requests of the ramp and the warm-up are not in the window.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from dagperf.metrics.censored import (
    CONFIDENCE,
    MIN_VALUES,
    Censored,
    Judgement,
    Objective,
    decide,
    judge,
)
from dagperf.transport.protocol import Result
from dagperf.verdict import Verdict
from dagperf.vocabulary import catalog

REPORTED = ("p50", "p90", "p99")  # each sampled metric's bounds in the summary
SESSIONS = catalog.SESSION_DURATION.name
ERROR_RATE = catalog.ERROR_RATE.name


def sampled(streaming: bool) -> tuple[str, ...]:
    """The metrics whose bounds every run reports: latency, and with streaming the first
    token's time."""
    latency, ttft = catalog.REQUEST_LATENCY.name, catalog.TIME_TO_FIRST_TOKEN.name
    return (ttft, latency) if streaming else (latency,)


def cut_values(result: Result) -> Iterator[tuple[str, float, bool]]:
    """What a cut request tells of each metric it tells anything of: (metric, value, exact);
    a value not exact is a lower bound. Metrics not named are unknown (at least 0)."""
    assert result.cut is not None
    waited, stamps = result.cut.waited_ms, result.cut.stamps_ms
    if stamps is None:  # its worker never answered: nothing seen but that it was sent
        return
    yield catalog.REQUEST_LATENCY.name, waited, False
    yield catalog.OUTPUT_SEQUENCE_LENGTH.name, float(len(stamps)), False
    isl = result.metrics.get(catalog.ERROR_ISL.name)
    if isl is not None:
        yield catalog.INPUT_SEQUENCE_LENGTH.name, float(isl), True
    ttft, ttst = catalog.TIME_TO_FIRST_TOKEN.name, catalog.TIME_TO_SECOND_TOKEN.name
    if not stamps:
        yield ttft, waited, False
        return
    yield ttft, stamps[0], True
    if len(stamps) > 1:
        yield ttst, stamps[1] - stamps[0], True
    else:
        yield ttst, waited - stamps[0], False
    for before, after in itertools.pairwise(stamps):
        yield catalog.INTER_CHUNK_LATENCY.name, after - before, True
    yield catalog.INTER_CHUNK_LATENCY.name, waited - stamps[-1], False


class WindowSample:
    def __init__(
        self,
        metrics: Iterable[str] = (),
        objectives: Sequence[Objective] = (),
        confidence: float = CONFIDENCE,
    ):
        """`metrics`: those to report bounds of; the objectives' are sampled too."""
        self.objectives = tuple(objectives)
        self.confidence = confidence
        names = {*metrics, *(o.metric for o in self.objectives)} - {SESSIONS, ERROR_RATE}
        self.samples = {name: Censored() for name in sorted(names)}
        self.completed = self.failed = self.cut = 0
        self.cut_waiting = 0  # cut before a first token came
        self.sessions = Censored()  # durations (ms) of the sessions started in the window
        self.sessions_cut = 0

    def add(self, result: Result) -> None:
        if result.cut is not None:
            self.cut += 1
            self.cut_waiting += result.cut.stamps_ms == ()  # (None: not known)
            self._add_cut(result)
        elif result.error is not None:
            self.failed += 1
        else:
            self.completed += 1
            for name, sample in self.samples.items():
                value = result.metrics.get(name)
                for v in value if isinstance(value, list) else () if value is None else (value,):
                    sample.add(v)

    def _add_cut(self, result: Result) -> None:
        told = set()
        for name, value, exact in cut_values(result):
            sample = self.samples.get(name)
            if sample is None:
                continue
            if exact:
                sample.add(value)
            else:
                sample.add_at_least(value)
            told.add(name)
        for name in self.samples.keys() - told:
            self.samples[name].add_at_least(0.0)

    def add_session(self, duration_ms: float, complete: bool) -> None:
        """A session of the window ended (`complete`) or was cut short after `duration_ms`."""
        if complete:
            self.sessions.add(duration_ms)
        else:
            self.sessions.add_at_least(duration_ms)
            self.sessions_cut += 1

    def judgements(self, in_flight: int = 0, open_sessions: int = 0) -> list[Judgement]:
        """Each objective's verdict, with `in_flight` requests and `open_sessions` sessions
        still to come (unknown: anything)."""
        out = []
        for o in self.objectives:
            if o.metric == ERROR_RATE:
                out.append(self._error_rate(o, in_flight))
                continue
            sample, unknown = (
                (self.sessions, open_sessions)
                if o.metric == SESSIONS
                else (self.samples[o.metric], in_flight)
            )
            out.append(judge(o, sample, self.confidence, unknown, str(o)))
        return out

    def decided(self, in_flight: int, open_sessions: int) -> bool:
        """Whether every objective is met or missed whatever is still to come."""
        verdicts = self.judgements(in_flight, open_sessions)
        return all(j.verdict is not Verdict.UNDECIDED for j in verdicts)

    def _error_rate(self, o: Objective, in_flight: int) -> Judgement:
        """The endpoint's failures over the requests answered or failed: at its lowest when
        every cut (or unknown) request would have succeeded, at its highest when each failed."""
        unknown = self.cut + in_flight
        n = self.completed + self.failed + unknown
        if n == 0:
            return Judgement(str(o), Verdict.UNDECIDED, 0.0, 1.0, 0, 0, "nothing was measured")
        low, high = self.failed / n, (self.failed + unknown) / n
        if n < MIN_VALUES:
            why = f"{n} requests measured; an error rate needs {MIN_VALUES}"
            return Judgement(str(o), Verdict.UNDECIDED, low, high, n, unknown, why)
        verdict = decide(o.ceiling, o.value, low, high)
        if verdict is not Verdict.UNDECIDED:
            return Judgement(str(o), verdict, low, high, n, unknown)
        why = f"between {low:.3g} and {high:.3g} as the {unknown} cut or in flight turn out"
        return Judgement(str(o), verdict, low, high, n, unknown, why)

    def report(self, start_ns: int | None, end_ns: int | None) -> dict[str, Any]:
        """The window in the summary: its span, its counts, each sampled metric's bounds and
        each objective's verdict."""
        bounds: dict[str, dict[str, list[float | None]]] = {}
        for name, sample in self.samples.items():
            if sample.count:
                bounds[name] = {}
                for stat in REPORTED:
                    low, high = sample.sample_bounds(stat)
                    bounds[name][stat] = [low, None if math.isinf(high) else high]
        out: dict[str, Any] = {
            "start_ns": start_ns,
            "end_ns": end_ns,
            "duration_s": None if start_ns is None or end_ns is None else (end_ns - start_ns) / 1e9,
            "requests": {
                "completed": self.completed,
                "failed": self.failed,
                "cut": self.cut,
                "cut_before_first_token": self.cut_waiting,
            },
            "sessions": {"completed": self.sessions.exact.count, "cut": self.sessions_cut},
            "bounds": bounds,
        }
        if self.objectives:
            out["confidence"] = self.confidence
            out["objectives"] = [j.as_dict() for j in self.judgements()]
        return out
