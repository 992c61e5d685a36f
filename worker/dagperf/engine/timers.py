"""Timers for a state machine with an injected clock: due times in order, ties in the order set."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Timers(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, T | None, int]] = []
        self._seq = 0

    def at(self, due: float, kind: int, subject: T | None = None, index: int = -1) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, kind, subject, index))

    def due(self, now: float) -> Iterator[tuple[float, int, T | None, int]]:
        """Pop every timer due by `now`, including those set while iterating."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, _, kind, subject, index = heapq.heappop(heap)
            yield due, kind, subject, index

    def next_due(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def clear(self) -> None:
        self._heap.clear()
