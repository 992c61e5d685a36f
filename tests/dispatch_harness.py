"""A dispatcher driven event by event with a fake clock, its flights read by name: the harness
of the engine's tests (no sockets, no sleeping)."""

from __future__ import annotations

import itertools

from dagperf.engine import Dispatcher, Flight
from dagperf.graph import compile_dag_jsonl
from dagperf.vocabulary.config import LoadConfig

from dagfile import load


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Harness:
    """A dispatcher with fake time, numbered ids, and helpers that read flights by name."""

    def __init__(self, *lines, workers=("w1",), graph=None, until=None, **load):
        self.clock = Clock()
        ids = itertools.count(1)
        graph = graph or compile_dag_jsonl(load_lines(lines))
        self.d = Dispatcher(
            graph, LoadConfig(**load), self.clock, new_id=lambda: f"id{next(ids)}", until=until
        )
        for worker in workers:
            self.d.add_worker(worker)
        self.d.begin()
        self.flying: dict[str, Flight] = {}
        self.disarmed: set[str] = set()  # armed credits a stop took back: never started
        self._cancelled: list[str] = []
        self.log: list[str] = []  # every send, in order, as "conversation:turn"
        self.flights: list[Flight] = []

    def name(self, flight: Flight) -> str:
        node = flight.run.tree.nodes[flight.node]
        session = flight.run.tree.sessions[node.session]
        return f"{session.conversation_id}:{node.turn}"

    def sent(self) -> list[str]:
        """Drain the dispatcher's sends; return their names."""
        return [self._fly(flight) for flight in self.d.orders.drain_sends()]

    def _fly(self, flight: Flight) -> str:
        name = self.name(flight)
        self.flying[name] = flight
        self.log.append(name)
        self.flights.append(flight)
        return name

    def finish(
        self, name: str, ok: bool = True, cancelled: bool = False, start_armed: bool = True
    ) -> list[str]:
        """Complete one in-flight request by name; return what that released. As a worker
        does, a success starts the credits armed with it (unless `start_armed` is off)."""
        self.sent()
        self._take_cancels()  # as the scheduler sends them at once: a disarm comes first
        flight = self.flying.pop(name)
        armed = [a for a in flight.armed if self.name(a) not in self.disarmed]
        armed = armed if ok and start_armed else []
        started = [a.credit for a in armed]
        assert self.d.complete(flight.credit, ok, cancelled, started) is flight
        return [self._fly(a) for a in armed] + self.sent()

    def cancels(self) -> list[str]:
        """The in-flight requests the dispatcher cancelled since the last call, by name."""
        self._take_cancels()
        out, self._cancelled = self._cancelled, []
        return out

    def _take_cancels(self) -> None:
        self._cancelled += [self.name(f) for f in self.d.drain_cancels()]
        self.disarmed.update(self.name(f) for f in self.d.orders.drain_disarms())

    def drain(self) -> None:
        """Complete everything, oldest first, until nothing is in flight."""
        self.sent()
        while self.flying:
            self.finish(next(iter(self.flying)))

    def advance(self, seconds: float) -> list[str]:
        self.clock.now += seconds
        self.d.tick()
        return self.sent()

    @property
    def stats(self) -> dict[str, int]:
        return self.d.branch_stats.as_dict()


def load_lines(lines):
    return load(*lines)
