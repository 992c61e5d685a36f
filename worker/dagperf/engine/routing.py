"""Rendezvous (highest random weight) hashing of routing keys over the live workers.

Each (key, worker) pair gets a pseudo-random score and a key goes to its highest-scoring worker.
When a worker joins or leaves, only the keys whose winner changed move: those it wins or those it
held. The key and worker names are hashed once with BLAKE2 (stable across processes and runs, so
a key lands on the same worker every time); each pair is then scored by mixing two integers,
which is cheap enough to score every worker of a large fleet per new key.

The router only decides where a new key goes. The scheduler pins a key to its worker for as long
as the key's sessions live, since their history is held there.
"""

from __future__ import annotations

import hashlib

_MASK = (1 << 64) - 1


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _mix(a: int, b: int) -> int:
    """splitmix64's finalizer over the two halves: a well-spread 64-bit score."""
    z = (a ^ (b * 0x9E3779B97F4A7C15)) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


class RendezvousRouter:
    def __init__(self) -> None:
        self._workers: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._workers)

    def __contains__(self, worker: str) -> bool:
        return worker in self._workers

    @property
    def workers(self) -> list[str]:
        return list(self._workers)

    def add(self, worker: str) -> None:
        self._workers[worker] = _digest(worker)

    def remove(self, worker: str) -> None:
        self._workers.pop(worker, None)

    def pick(self, key: str) -> str:
        """The worker for `key`; raises LookupError when there is none."""
        if not self._workers:
            raise LookupError("no live workers")
        k = _digest(key)
        return max(self._workers.items(), key=lambda item: _mix(k, item[1]))[0]
