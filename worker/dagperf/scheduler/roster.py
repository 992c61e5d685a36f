"""The registered workers: each one's process incarnation and when it was last heard from.

Workers must send to the server the run measures. A worker is known by its ZeroMQ identity;
a Hello under a known identity from a new incarnation is a restarted process, whose histories
are gone. Heartbeats come on a socket of their own, so they name the worker and incarnation they
prove alive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

from dagperf.transport import protocol


class Greeting(Enum):
    REFUSED = "refused"  # it sends to another server than the run measures
    NEW = "new"  # not registered yet
    KNOWN = "known"  # registered, same process: it said Hello again
    RESTARTED = "restarted"  # registered under this name, but a new process


@dataclass
class _Peer:
    incarnation: str
    last_seen: float


class Roster:
    def __init__(self, url: str, clock: Callable[[], float]):
        self._url = url
        self._clock = clock
        self._peers: dict[str, _Peer] = {}

    def __len__(self) -> int:
        return len(self._peers)

    def __contains__(self, worker: object) -> bool:
        return worker in self._peers

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._peers))

    def greet(self, worker: str, hello: protocol.Hello) -> Greeting:
        if hello.url != self._url:
            return Greeting.REFUSED
        peer = self._peers.get(worker)
        if peer is None:
            return Greeting.NEW
        if peer.incarnation != hello.incarnation:
            return Greeting.RESTARTED
        peer.last_seen = self._clock()
        return Greeting.KNOWN

    def add(self, worker: str, incarnation: str) -> None:
        self._peers[worker] = _Peer(incarnation, self._clock())

    def remove(self, worker: str) -> None:
        self._peers.pop(worker, None)

    def beat(self, heartbeat: protocol.Heartbeat) -> None:
        peer = self._peers.get(heartbeat.worker_id)
        if peer is not None and peer.incarnation == heartbeat.incarnation:
            peer.last_seen = self._clock()

    def heard(self, worker: str) -> bool:
        """A message from `worker`: True if it is registered (and now counts as alive)."""
        peer = self._peers.get(worker)
        if peer is None:
            return False
        peer.last_seen = self._clock()
        return True

    def silent(self, timeout_s: float) -> list[tuple[str, float]]:
        """The workers not heard from for longer than `timeout_s`, with how long."""
        now = self._clock()
        return [
            (w, now - p.last_seen) for w, p in self._peers.items() if now - p.last_seen > timeout_s
        ]
