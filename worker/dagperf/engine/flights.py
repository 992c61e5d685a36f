"""Flights: requests on the wire, each a credit for one node of a tree run, on one worker.

A node that needs nothing but one other node, continues that node's history on the same worker
and has no delay (a FORK child, a conversation's next turn) can be armed: it goes out with that
node, and the worker starts it the moment that node succeeds, with no round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from dagperf.engine.phase import Phase
from dagperf.engine.routing import RendezvousRouter
from dagperf.engine.runs import NodeState, TreeRun


@dataclass(slots=True)
class Flight:
    """A request on the wire: what was sent, where, and as which request of its phase."""

    credit: int
    run: TreeRun
    node: int
    worker: str
    phase: Phase
    request_num: int  # sequential within the phase (AIPerf's session_num); -1 until sent
    request_id: str
    armed: list[Flight] = field(default_factory=list)  # started by its worker when this succeeds
    measured: bool = False  # sent while the profiling's window was open (`window`)


class Flights:
    """Makes flights: names each session once, pins each route to a worker the first time it
    is used (by rendezvous hash of its name), and numbers credits."""

    def __init__(self, router: RendezvousRouter, new_id: Callable[[], str]):
        self._router = router
        self._new_id = new_id
        self._credits = 0

    def name(self, run: TreeRun, s: int) -> None:
        """Session s of the run gets its correlation id, if it has none yet."""
        if run.correlation[s] is None:
            run.correlation[s] = self._new_id()

    def make(self, run: TreeRun, i: int, phase: Phase) -> Flight:
        """A credit for node i, on the worker its route is pinned to (pinned now if need be)."""
        tree = run.tree
        s = tree.nodes[i].session
        if run.correlation[s] is None:
            run.correlation[s] = self._new_id()
        route = tree.sessions[s].route
        worker = run.pins.get(route)
        if worker is None:
            key = run.correlation[route]
            assert key is not None  # the route's own session went first and was named
            worker = run.pins[route] = self._router.pick(key)
        self._credits += 1
        request_id = run.request_ids[i] = self._new_id()
        return Flight(self._credits, run, i, worker, phase, -1, request_id)

    def arm(self, run: TreeRun, i: int, phase: Phase) -> list[Flight]:
        """Flights for the nodes armed with node i (`TreeTemplate.armable`), each with its own
        armed nodes: a conversation's turns all go out at once. Depth first, in dependents'
        order, without recursion: a chain can be any length."""
        armable = run.template.armable
        armed: list[Flight] = []
        stack = [(iter(armable[i]), armed)]
        while stack:
            nodes, into = stack[-1]
            j = next(nodes, None)
            if j is None:
                stack.pop()
                continue
            run.nodes[j] = NodeState.ARMED
            flight = self.make(run, j, phase)
            into.append(flight)
            stack.append((iter(armable[j]), flight.armed))
        return armed


def settle_armed(flight: Flight, started: Collection[int]) -> list[Flight]:
    """Its worker reported which of the flight's armed flights it started: those are on the
    wire (returned, with their own armed flights still armed); the others wait as if never
    armed, so the dependency's ending releases or skips them."""
    launched = []
    for armed in flight.armed:
        if armed.credit in started:
            launched.append(armed)
        else:
            disarm(armed)
    flight.armed = []
    return launched


def disarm(flight: Flight) -> None:
    """The flight and those armed under it will not start: they wait as if never armed."""
    for f in (flight, *armed_under(flight)):
        f.run.nodes[f.node] = NodeState.PENDING
        f.armed = []


def armed_under(flight: Flight) -> list[Flight]:
    """Every flight armed with this one, and with those, down the chain, depth first."""
    out: list[Flight] = []
    stack = flight.armed[::-1]
    while stack:
        armed = stack.pop()
        out.append(armed)
        stack.extend(reversed(armed.armed))
    return out


def armed_in(run: TreeRun, flights: Iterable[Flight]) -> list[Flight]:
    """Every flight armed under those of `flights` that belong to `run`."""
    return [armed for flight in flights if flight.run is run for armed in armed_under(flight)]
