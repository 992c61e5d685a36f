"""What a phase sends: ready nodes waiting out their delay or for room, then flights on the wire
until their results return.

A node whose dependencies are met waits out its delay on a timer, if it has one (a gate's may be
drawn now: `think`; a join that waited for its children past its own turn goes without it, as
AIPerf sends it: the delay counts from the turn before, long passed); a gate then passes
(`passed`, for the dispatcher to end), anything else joins the send queue, which goes out in
order while `max_inflight` allows and the phase's cap on requests is not reached. Each node
sent is a `Flight` on the worker its route is pinned to (`flights`), carrying the nodes armed
with it, unless a cap on requests or on what is in flight needs every
request sent from here. A flight stays on the wire, by credit, until its result lands it or its
worker is lost; the phase counts what was sent, completed, failed and cut (`PhasePlan`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Container

from dagperf.engine.flights import Flight, Flights, settle_armed
from dagperf.engine.orders import Orders
from dagperf.engine.phase import PhasePlan
from dagperf.engine.runs import NodeState, TreeRun
from dagperf.engine.think import ThinkTimes
from dagperf.engine.timers import Timers

_DELAY = 0


class Outgoing:
    def __init__(
        self,
        plan: PhasePlan,
        flights: Flights,
        orders: Orders,
        max_inflight: int | None,
        seed: int | None,
    ):
        self._plan = plan
        self._think = ThinkTimes(seed)  # a gate's drawn wait (the same draw for the same seed)
        self._flights = flights
        self._orders = orders
        self._max_inflight = max_inflight
        self._arming = plan.cap is None and max_inflight is None  # they count every request
        self.wire: dict[int, Flight] = {}  # the flights on the wire, by credit
        self.cancelling = False  # what a worker starts from now on is cancelled at once
        self._queue: deque[tuple[TreeRun, int]] = deque()
        self._delays: Timers[TreeRun] = Timers()
        self.passed: list[tuple[TreeRun, int]] = []  # gates whose wait is over, to be ended

    def ready(self, run: TreeRun, node: int, now: float) -> None:
        """The node's dependencies are met: it goes out (or, a gate, passes) after its delay,
        if it has one."""
        run.nodes[node] = NodeState.READY
        spec = run.tree.nodes[node]
        delay = spec.delay_s
        if spec.gate is not None:
            delay = run.drawn[node] = self._think.draw(spec.gate, delay, run.id - 1, spec.turn)
        elif delay and node in run.suspended:
            delay = 0.0  # a join its children held up goes as they end, as AIPerf sends it
            run.waived.add(node)
        if delay > 0:
            self._delays.at(now + delay, _DELAY, run, node)
        elif spec.gate is None:
            self._queue.append((run, node))
        else:
            self.passed.append((run, node))

    def due(self, now: float, open_runs: Container[int]) -> None:
        """Queue the nodes whose delay is over, of the runs still open."""
        for _, _, run, node in self._delays.due(now):
            assert run is not None
            if run.id in open_runs and run.nodes[node] == NodeState.READY:
                self._go(run, node)

    def _go(self, run: TreeRun, node: int) -> None:
        if run.tree.nodes[node].gate is None:
            self._queue.append((run, node))
        else:
            self.passed.append((run, node))

    def next_due(self) -> float | None:
        return self._delays.next_due()

    def send(self, measuring: Callable[[], bool]) -> None:
        """Send what is queued while there is room, until the phase's cap on requests;
        `measuring`: whether what starts now is measured."""
        phase = self._plan.phase
        while self._queue and not self._plan.capped:
            if self._max_inflight is not None and len(self.wire) >= self._max_inflight:
                return
            run, node = self._queue.popleft()
            if run.nodes[node] != NodeState.READY:
                continue  # skipped since it was queued
            flight = self._flights.make(run, node, phase)
            self._orders.send(flight)
            self.launched(flight, measuring())
            if self._arming:
                flight.armed = self._flights.arm(run, node, phase)

    def launched(self, flight: Flight, measured: bool) -> None:
        """The request is on the wire (sent from here, or started by its worker)."""
        flight.run.start(flight.node, self._plan.branch_stats, flight.worker)
        flight.request_num = self._plan.sent
        flight.measured = measured
        self.wire[flight.credit] = flight
        self._plan.sent += 1

    def settle(
        self, flight: Flight, started: Collection[int], measuring: Callable[[], bool]
    ) -> None:
        """Its worker started the flight's armed flights in `started`: they are on the wire."""
        for armed in settle_armed(flight, started):
            self.launched(armed, measuring())
            if self.cancelling:
                self._orders.cancel((armed,))

    def land(self, flight: Flight, ok: bool, cut: bool = False) -> None:
        """Its result came back, or (`cut`) the run lost it: the run's loss, not an error."""
        del self.wire[flight.credit]
        self._plan.completed += 1
        self._plan.errors += not ok and not cut
        self._plan.cut += cut

    def cancel_all(self) -> None:
        """Cancel what is on the wire, and from now on what a worker starts before it hears."""
        self.cancelling = True
        self._orders.cancel(self.wire.values())

    def clear(self) -> None:
        """The phase is over: what still waits will not go."""
        self._queue.clear()
        self._delays.clear()
        self.passed.clear()
