"""One phase of a run (a warm-up or the profiling): its limits, its counts and its arrivals.

A phase starts roots until its root limit (each root once when nothing else bounds the run), a
cap on sent requests, or a duration ends it; under `concurrency`, a root holds a slot until its
last request ends. When roots arrive and when the clock ends a phase is `pacing`'s.

A run's phases (`stages`): the dataset's own warm-up when its graph has one (each warm-up tree
once, one at a time, whatever the load: a rag trace's documents, as Veeksha sends them), then a
warm-up of `warmup_request_count` requests, then the profiling; only the last is measured.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from dagperf.engine.branch_stats import BranchStats
from dagperf.engine.runs import Templates, TreeTemplate
from dagperf.graph import RequestGraph, Tree
from dagperf.vocabulary.config import LoadConfig


class Phase(IntEnum):
    WARMUP = 0
    PROFILING = 1

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {phase: phase.name.lower() for phase in Phase}  # (read for every request's record)


class Stage(NamedTuple):
    """A phase as a run goes through it; `dataset_warmup`: the graph's own warm-up trees."""

    phase: Phase
    dataset_warmup: bool = False


def stages(graph: RequestGraph, load: LoadConfig) -> deque[Stage]:
    """The phases a run goes through, in order."""
    out: deque[Stage] = deque()
    if graph.warmup:
        out.append(Stage(Phase.WARMUP, dataset_warmup=True))
    if load.warmup_request_count:
        out.append(Stage(Phase.WARMUP))
    out.append(Stage(Phase.PROFILING))
    return out


class Rotation:
    """Trees taken in turn, wrapping around; `next` carries over from one phase to the next."""

    def __init__(self, trees: Sequence[Tree]):
        self.templates = Templates(trees)
        self._count = len(trees)
        self.next = 0

    def take(self) -> tuple[int, TreeTemplate]:
        index = self.next
        self.next = (index + 1) % self._count
        return index, self.templates[index]


@dataclass(frozen=True, slots=True)
class Progress:
    phase: Phase
    sent: int
    completed: int
    errors: int  # the endpoint's failures
    in_flight: int
    expected: int | None  # requests this phase will send, when known
    roots_started: int
    cut: int = 0  # cut short by the run itself: neither successes nor errors


class PhasePlan:
    """What one phase may start and send, and what it has so far."""

    def __init__(
        self,
        stage: Stage,
        graph: RequestGraph,
        load: LoadConfig,
        trees: Rotation,
        open_ended: bool = False,
    ):
        """`open_ended`: the profiling runs until told to stop (`window.Until`), so it starts
        roots without a limit unless the load sets one."""
        self.phase = stage.phase
        self.trees = trees  # where this phase's roots come from
        self.one_at_a_time = stage.dataset_warmup
        self.branch_stats = BranchStats()
        self.sent = self.completed = self.errors = self.cut = 0
        self.skipped = 0  # requests never sent: what they depended on failed
        self.roots_started = self.active_roots = 0
        self.arrivals = 0  # roots that arrived and wait for a slot
        self.cap: int | None = None
        self.roots_limit: int | None = None
        if stage.dataset_warmup:
            self.roots_limit = len(graph.warmup)
        elif stage.phase is Phase.WARMUP:
            self.cap = load.warmup_request_count
        else:
            self.cap = load.request_count
            self.roots_limit = load.num_conversations
            unbounded = self.cap is None and not load.benchmark_duration and not open_ended
            if self.roots_limit is None and unbounded:
                self.roots_limit = graph.root_count  # each root once
        sizes = [len(t.nodes) for t in graph.warmup] if stage.dataset_warmup else graph.shape.sizes
        self._planned = self._planned_requests(sizes, trees.next)

    def _planned_requests(self, sizes: Sequence[int], first_tree: int) -> int | None:
        """The requests of the roots this phase will start, when it starts a known number."""
        if self.roots_limit is None:
            return None
        full, rest = divmod(self.roots_limit, len(sizes))
        return full * sum(sizes) + sum(sizes[(first_tree + k) % len(sizes)] for k in range(rest))

    def expected(self) -> int | None:
        """Requests this phase will send: a skipped request lowers a count of roots' requests
        (so progress still ends at 100%), not a cap on the wire (other requests fill it)."""
        if self._planned is None:
            return self.cap
        left = self._planned - self.skipped
        return left if self.cap is None else min(left, self.cap)

    def progress(self, in_flight: int) -> Progress:
        return Progress(
            self.phase,
            self.sent,
            self.completed,
            self.errors,
            in_flight,
            self.expected(),
            self.roots_started,
            self.cut,
        )

    @property
    def roots_done(self) -> bool:
        return self.roots_limit is not None and self.roots_started >= self.roots_limit

    @property
    def capped(self) -> bool:
        return self.cap is not None and self.sent >= self.cap

    def admit(self, concurrency: int | None, arrive: bool) -> bool:
        """Whether a root may start now (taking its arrival, when roots arrive); the dataset's
        warm-up starts its roots one at a time, as they come."""
        if self.one_at_a_time:
            concurrency, arrive = 1, False
        if self.roots_done or (concurrency is not None and self.active_roots >= concurrency):
            return False
        if arrive:
            if not self.arrivals:
                return False
            self.arrivals -= 1
        self.roots_started += 1
        self.active_roots += 1
        return True

    def arrive(self) -> bool:
        """A root arrived: whether more may follow."""
        self.arrivals += 1
        return self.roots_limit is None or self.roots_started + self.arrivals < self.roots_limit
