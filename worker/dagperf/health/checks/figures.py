"""How the checks report what they found, the same way in every verdict: the few worst offenders
(kept in a bounded heap, so a run with a million of them costs five entries), a distribution as
its count, min, p50, p90, p99 and max, and nanoseconds as milliseconds to the microsecond.
"""

from __future__ import annotations

import heapq
from typing import Any

from dagperf.metrics.summary import Distribution

WORST = 5  # offenders listed per check


class Worst:
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


def distribution(values: Distribution) -> dict[str, Any]:
    if not values.count:
        return {"count": 0}
    p50, p90, p99 = values.percentiles((50, 90, 99))
    figures = {"min": values.min, "p50": p50, "p90": p90, "p99": p99, "max": values.max}
    return {"count": values.count, **{k: round(float(v), 3) for k, v in figures.items()}}


def ms(ns: float) -> float:
    return round(ns / 1e6, 3)
