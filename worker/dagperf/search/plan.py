"""Which load to try next: pure, so the method is tested without running anything.

Each step is met, missed or undecided (`metrics.censored`). From `low`, the load doubles until a
step misses or `high` is reached (the bracket); then the gap between the highest load met and
the lowest missed is halved until it is within the precision: 1 for a concurrency, a share of
the met value for a rate (5% by default). An undecided step is neither: it splits the gap
around it, and the halving goes on in the widest part left, so the answer is exact when the
steps around the knee decided, and otherwise a range from the highest load met to the highest
undecided one below the lowest miss. A load met above one missed is not expected (latency grows
with load); were it to happen, the answer stays below the lowest miss, so a noisy step cannot
push the answer past a load seen to fail. With a sweep, the listed values are tried in order
and the answer is the highest met.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from dagperf.verdict import Verdict
from dagperf.vocabulary.config import LoadConfig

DEFAULT_MAX_STEP_S = 600.0  # the longest a step measures, by default

# A search parameter -> the LoadConfig field it sets (a session rate is dagperf's request rate).
PARAMETERS = {
    "concurrency": "concurrency",
    "request_rate": "request_rate",
    "session_rate": "request_rate",
}


def search_load_problem(
    parameter: str, load: LoadConfig, max_step_s: float
) -> tuple[str, str] | None:
    """The LoadConfig field that a search of `parameter` cannot take as `load` gives it, and
    why: the CLI names the field by its flag, a Benchmark by its own name."""
    field = PARAMETERS[parameter]
    if getattr(load, field) is not None:
        return field, "the search sets it; leave it out"
    if field == "request_rate" and load.fixed_schedule and load.concurrency is None:
        return "fixed_schedule", "a rate search sets when roots arrive; leave it out"
    if load.benchmark_duration and load.benchmark_duration > max_step_s:
        why = f"the shortest a step runs, above the longest a step measures ({max_step_s:g} s)"
        return "benchmark_duration", why
    return None


@dataclass
class SearchPlan:
    low: float
    high: float
    integer: bool  # a concurrency: whole values, precision 1
    precision: float  # relative for a rate; an absolute step for a concurrency
    sweep: list[float] | None = None
    tried: list[tuple[float, Verdict]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 < self.low <= self.high:
            raise ValueError(f"need 0 < --search-min <= --search-max, got {self.low}, {self.high}")
        if self.precision <= 0:
            raise ValueError(f"--search-precision must be above 0, got {self.precision}")

    def record(self, value: float, verdict: Verdict | bool) -> None:
        """A step's verdict (True: met, False: missed)."""
        if isinstance(verdict, bool):
            verdict = Verdict.MEETS if verdict else Verdict.MISSES
        self.tried.append((value, verdict))

    @property
    def _ceiling(self) -> float:
        """The lowest load missed (no ceiling for a sweep, whose values are all tried)."""
        missed = [value for value, v in self.tried if v is Verdict.MISSES]
        return min(missed) if missed and self.sweep is None else math.inf

    @property
    def best(self) -> float | None:
        """The highest load that met the objectives below the lowest that missed them."""
        ceiling = self._ceiling
        met = [value for value, v in self.tried if v is Verdict.MEETS and value < ceiling]
        return max(met) if met else None

    @property
    def undecided(self) -> list[float]:
        """Loads whose steps decided nothing, above the best and below the lowest miss: the
        answer may lie up to the highest of them."""
        best, ceiling = self.best, self._ceiling
        floor = -math.inf if best is None else best
        return sorted(
            value for value, v in self.tried if v is Verdict.UNDECIDED and floor < value < ceiling
        )

    def next_value(self) -> float | None:
        """The next load to try, or None when the answer is known."""
        if self.sweep is not None:
            return self.sweep[len(self.tried)] if len(self.tried) < len(self.sweep) else None
        if not self.tried:
            return self._whole(self.low)
        best = self.best
        if best is None:
            return None  # the lowest load missed, or decided nothing: no load is known to meet
        ceiling = self._ceiling
        if math.isinf(ceiling):  # still bracketing: double past the highest tried
            top = max(value for value, _ in self.tried)
            return None if top >= self.high else self._whole(min(top * 2, self.high))
        points = [best, *self.undecided, ceiling]
        gaps = [(a, b) for a, b in itertools.pairwise(points) if not self._close_enough(a, b)]
        for a, b in sorted(gaps, key=lambda gap: gap[0] - gap[1]):  # the widest first
            middle = self._whole((a + b) / 2)
            if middle not in (a, b):
                return middle
        return None

    def _close_enough(self, passed: float, failed: float) -> bool:
        if self.integer:
            return failed - passed <= self.precision
        return (failed - passed) / passed <= self.precision

    def _whole(self, value: float) -> float:
        return float(math.floor(value)) if self.integer else value
