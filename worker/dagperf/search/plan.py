"""Which load to try next: pure, so the method is tested without running anything.

From `low`, the load doubles until a step fails its objectives or `high` is reached (the
bracket); then the gap between the highest load that passed and the lowest that failed is
halved until it is within the precision: 1 for a concurrency, a share of the passing value for
a rate (5% by default). A load that passes after one that failed is not expected (latency grows
with load); were it to happen, the answer stays the highest passing load below the lowest
failure, so a noisy step cannot push the answer past a load seen to fail. With a sweep, the
listed values are tried in order and the answer is the highest that passed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# A search parameter -> the LoadConfig field it sets (a session rate is dagperf's request rate).
PARAMETERS = {
    "concurrency": "concurrency",
    "request_rate": "request_rate",
    "session_rate": "request_rate",
}


@dataclass
class SearchPlan:
    low: float
    high: float
    integer: bool  # a concurrency: whole values, precision 1
    precision: float  # relative for a rate; an absolute step for a concurrency
    sweep: list[float] | None = None
    tried: list[tuple[float, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 < self.low <= self.high:
            raise ValueError(f"need 0 < --search-min <= --search-max, got {self.low}, {self.high}")
        if self.precision <= 0:
            raise ValueError(f"--search-precision must be above 0, got {self.precision}")

    @property
    def best(self) -> float | None:
        """The highest load that met the objectives below the lowest that did not."""
        failed = [value for value, ok in self.tried if not ok]
        ceiling = min(failed) if failed and self.sweep is None else math.inf
        passed = [value for value, ok in self.tried if ok and value < ceiling]
        return max(passed) if passed else None

    def record(self, value: float, ok: bool) -> None:
        self.tried.append((value, ok))

    def next_value(self) -> float | None:
        """The next load to try, or None when the answer is known."""
        if self.sweep is not None:
            return self.sweep[len(self.tried)] if len(self.tried) < len(self.sweep) else None
        if not self.tried:
            return self._whole(self.low)
        failed = [value for value, ok in self.tried if not ok]
        best = self.best
        if best is None:
            return None  # even the lowest load failed
        if not failed:  # still bracketing
            return None if best >= self.high else self._whole(min(best * 2, self.high))
        ceiling = min(failed)
        if self._close_enough(best, ceiling):
            return None
        middle = self._whole((best + ceiling) / 2)
        return None if middle in (best, ceiling) else middle

    def _close_enough(self, passed: float, failed: float) -> bool:
        if self.integer:
            return failed - passed <= self.precision
        return (failed - passed) / passed <= self.precision

    def _whole(self, value: float) -> float:
        return float(math.floor(value)) if self.integer else value
