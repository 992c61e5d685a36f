"""What the dispatcher decided and its caller has yet to carry out.

The dispatcher is fed events and answers with orders, which the caller drains after each event:
flights to send, flights to cancel, armed flights to take back, and tree runs that are over. A
cancel or a disarm that came too late (the request already ended, the armed one already started)
is dropped as it is drained, so the caller never acts on a stale order.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from dagperf.engine.flights import Flight
from dagperf.engine.runs import NodeState, TreeRun


class Orders:
    def __init__(self) -> None:
        self._sends: list[Flight] = []
        self._cancels: list[Flight] = []
        self._disarms: list[Flight] = []
        self._retired: list[TreeRun] = []

    def send(self, flight: Flight) -> None:
        self._sends.append(flight)

    def cancel(self, flights: Iterable[Flight]) -> None:
        self._cancels.extend(flights)

    def disarm(self, flights: Iterable[Flight]) -> None:
        self._disarms.extend(flights)

    def retire(self, run: TreeRun) -> None:
        self._retired.append(run)

    def drain_sends(self) -> list[Flight]:
        out, self._sends = self._sends, []
        return out

    def drain_cancels(self, in_flight: Container[int]) -> list[Flight]:
        """The flights to cancel that are still in flight (their credits in `in_flight`)."""
        out = [f for f in self._cancels if f.credit in in_flight]
        self._cancels = []
        return out

    def drain_disarms(self) -> list[Flight]:
        """Armed flights their workers must not start: the run stopped."""
        out = [f for f in self._disarms if f.run.nodes[f.node] == NodeState.ARMED]
        self._disarms = []
        return out

    def drain_retired(self) -> list[TreeRun]:
        out, self._retired = self._retired, []
        return out
