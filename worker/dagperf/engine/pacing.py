"""When a phase's roots may start, and when the clock ends it.

Roots start as slots free (a closed loop), arrive as a Poisson process at `request_rate` (gamma
gaps with `arrival_cv`), or each at its tree's `start_s` (`fixed_schedule`, relative to the
phase's first root); `concurrency` slots bound either, growing from one to all of them over
`concurrency_ramp_up`. The profiling's duration closes it (under objectives, the moment they are
decided: `window`), and the grace period after a close ends in cancelling what is still in
flight.

Its timers are its own, on the dispatcher's clock; what they decide for the phase comes back as
a `Due`, which the dispatcher carries out: the pacing knows the phase's counts, not its flights.
"""

from __future__ import annotations

import random
from typing import NamedTuple

from dagperf.engine.phase import Phase, PhasePlan
from dagperf.engine.timers import Timers
from dagperf.engine.window import Until, Window
from dagperf.graph import RequestGraph
from dagperf.vocabulary.config import LoadConfig

_ARRIVAL, _DURATION, _GRACE, _RAMP = range(4)


class Due(NamedTuple):
    """What the timers that were due decided."""

    close_reason: str | None = None  # the phase closes: nothing more is sent
    grace_over: bool = False  # cancel what is still in flight


class Pacing:
    def __init__(self, graph: RequestGraph, load: LoadConfig, until: Until | None):
        self.arrivals = Arrivals(graph, load)
        self.slots = Slots(load.root_limit, load.concurrency_ramp_up)
        self.window = Window(load, until)  # when the profiling measures, and until when
        self._grace_s = load.benchmark_grace_period
        self._timers: Timers[None] = Timers()
        self._plan: PhasePlan | None = None
        self._closed = False

    def begin(self, plan: PhasePlan, now: float) -> None:
        """A phase starts: the ramp of its slots, its duration (the profiling's), its arrivals."""
        self._plan, self._closed = plan, False
        self._timers.clear()
        if (step := self.slots.begin(now)) is not None:
            self._timers.at(step, _RAMP)
        if plan.phase is Phase.PROFILING and (due := self.window.begin(now)) is not None:
            self._timers.at(due, _DURATION)
        if self.arrivals.on and not plan.one_at_a_time:
            self.arrivals.begin(now, plan.trees.next)
            self._timers.at(now, _ARRIVAL)

    def admit(self) -> bool:
        """Whether a root may start now (`PhasePlan.admit`)."""
        assert self._plan is not None
        return self._plan.admit(self.slots.limit, self.arrivals.on)

    def close(self, now: float) -> None:
        """The phase closed, for whatever reason: no more arrivals; the window closes."""
        assert self._plan is not None
        if not self._closed:
            self._closed = True
            if self._plan.phase is Phase.PROFILING:
                self.window.close(now)

    def grace(self, now: float) -> None:
        """What is in flight gets the grace period from now."""
        self._timers.at(now + self._grace_s, _GRACE)

    def due(self, now: float, in_flight: int, open_runs: int) -> Due:
        """Fire every timer due by `now`: arrivals, one more slot, the duration (or a look at
        the objectives), the end of the grace period."""
        assert self._plan is not None
        close_reason, grace_over = None, False
        for due, kind, _, _ in self._timers.due(now):
            if kind == _ARRIVAL and not self._closed:
                if self._plan.arrive():
                    self._timers.at(self.arrivals.after(due), _ARRIVAL)
            elif kind == _DURATION:
                reason, again = self.window.due(now, in_flight, open_runs)
                if again is not None and not self._closed:  # not decided yet: look again
                    self._timers.at(again, _DURATION)
                else:
                    close_reason = close_reason or reason or "benchmark duration reached"
                    self.close(now)
                    self.grace(now)
            elif kind == _GRACE:
                grace_over = True
            elif kind == _RAMP and (step := self.slots.grow(due)) is not None:
                self._timers.at(step, _RAMP)
        return Due(close_reason, grace_over)

    def next_due(self) -> float | None:
        return self._timers.next_due()

    def clear(self) -> None:
        self._timers.clear()


class Arrivals:
    """When roots arrive: Poisson at `request_rate` (gamma gaps of the same mean when
    `arrival_cv` is set: shape 1/cv^2), or on the trees' fixed schedule, which starts over past
    the last tree (never earlier than the arrival before)."""

    def __init__(self, graph: RequestGraph, load: LoadConfig):
        # Only a fixed schedule reads the trees' times: reading them builds every tree.
        starts = [tree.start_s for tree in graph.trees] if load.fixed_schedule else []
        self._starts = [start for start in starts if start is not None]
        if len(self._starts) < len(starts):
            raise ValueError("a fixed schedule needs a start time on every tree")
        self._rate = load.request_rate
        self._shape = None if load.arrival_cv is None else 1 / load.arrival_cv**2
        self._fixed = load.fixed_schedule
        self._rng = random.Random(load.random_seed)
        self._first = self._count = 0
        self._t0 = 0.0

    @property
    def on(self) -> bool:
        """Whether roots wait for arrivals at all (else they start as slots allow)."""
        return bool(self._rate or self._fixed)

    def begin(self, now: float, first_tree: int) -> None:
        self._first, self._count, self._t0 = first_tree, 0, now

    def after(self, due: float) -> float:
        """When the next root arrives, given that one arrived at `due`."""
        if not self._fixed:
            assert self._rate is not None
            if self._shape is None:
                return due + self._rng.expovariate(self._rate)
            return due + self._rng.gammavariate(self._shape, 1 / (self._rate * self._shape))
        self._count += 1
        starts, first = self._starts, self._first
        return max(due, self._t0 + starts[(first + self._count) % len(starts)] - starts[first])


class Slots:
    """How many roots may run at once: `concurrency`, or with `concurrency_ramp_up` one at a
    phase's start and one more at each even step until all (None: no limit)."""

    def __init__(self, concurrency: int | None, ramp_up_s: float | None):
        self.full = concurrency
        self.limit = concurrency
        self._step: float | None = None
        if ramp_up_s is not None and concurrency is not None and concurrency > 1:
            self._step = ramp_up_s / (concurrency - 1)

    def begin(self, now: float) -> float | None:
        """A phase starts: when the next slot opens, if any is held back."""
        if self._step is None:
            return None
        self.limit = 1
        return now + self._step

    def grow(self, due: float) -> float | None:
        """One more slot opens at `due`: when the next one does, if any is left."""
        assert self._step is not None and self.limit is not None and self.full is not None
        self.limit = min(self.limit + 1, self.full)
        return due + self._step if self.limit < self.full else None
