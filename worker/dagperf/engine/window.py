"""When a profiling phase measures, and, under objectives, when it has measured enough.

The window opens once the load is at its level: at the profiling phase's start, or when
`--concurrency-ramp-up` has opened every slot. It closes when sending stops (the duration, a
count, a stop, an interrupt). The requests sent and the sessions started while it is open are
the run's observations for its verdicts (`Flight.measured`, `TreeRun.measured`); the warm-up
phases and the ramp are not.

Under `Until` (a search step judged on objectives) the duration is a floor, not the end: from
then on the dispatcher asks, every `every_s`, whether what was measured decides every objective
(counting what is still in flight as unknown, so the answer cannot change once it is yes), and
closes when it does, or at `ceiling_s`, whichever comes first. Without a duration the floor is
0: the phase runs until it has decided.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dagperf.vocabulary.config import LoadConfig

CHECK_EVERY_S = 0.5


@dataclass(frozen=True)
class Until:
    """Measure until `decided(requests in flight, tree runs open)` says so, or `ceiling_s`
    after the phase's start."""

    decided: Callable[[int, int], bool]
    ceiling_s: float
    every_s: float = CHECK_EVERY_S


class Window:
    def __init__(self, load: LoadConfig, until: Until | None):
        self._floor_s = load.benchmark_duration
        self._ramp_s = load.concurrency_ramp_up if load.concurrency else None
        self.until = until
        self.start: float | None = None  # the profiling phase's start (the clock's time)
        self.level_at: float | None = None  # the load at its level: the window opens
        self.closed_at: float | None = None

    def begin(self, now: float) -> float | None:
        """The profiling phase starts: when its duration (or its floor) is due, if ever."""
        self.start = now
        self.level_at = now + (self._ramp_s or 0.0)
        if self.until is not None:
            return now + (self._floor_s or 0.0)
        return None if self._floor_s is None else now + self._floor_s

    def open(self, now: float) -> bool:
        return self.closed_at is None and self.level_at is not None and now >= self.level_at

    def close(self, now: float) -> None:
        if self.closed_at is None and self.start is not None:
            self.closed_at = now

    def due(self, now: float, in_flight: int, open_runs: int) -> tuple[str, float | None]:
        """The duration (or a later check) is due: why the phase closes now, and None; or
        when to look again."""
        if self.until is None:
            return "benchmark duration reached", None
        assert self.start is not None
        ceiling = self.start + self.until.ceiling_s
        if now >= ceiling:
            return f"the step's longest duration ({self.until.ceiling_s:g} s) reached", None
        if self.until.decided(in_flight, open_runs):
            return "every objective decided", None
        return "", min(now + self.until.every_s, ceiling)
