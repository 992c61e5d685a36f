"""Rendezvous (highest random weight) hashing of routing keys over the live workers.

A key falls in one of BUCKETS buckets by its hash; each (bucket, worker) pair gets a
pseudo-random score and a bucket goes to its highest-scoring worker. When a worker joins or
leaves, only the buckets whose winner changed move: those it wins or those it held. Names are
hashed with BLAKE2 (stable across processes and runs, so a key lands on the same worker every
time). A bucket's winner is found on its first key after a change of workers, together with
the winners of the other buckets of its block of 1,024, by scoring every (bucket, worker) pair
of the block in one numpy expression, and kept: a new key then costs one hash and a list
lookup, however many workers there are, and the first keys of a run share the scoring instead
of paying a numpy call each (most keys of a run's first tens of thousands fall in a bucket not
seen yet). 65,536 buckets keep the shares within a few percent of even for hundreds of workers.

The router only decides where a new key goes. The scheduler pins a key to its worker for as long
as the key's sessions live, since their history is held there.
"""

from __future__ import annotations

import hashlib

import numpy as np

BUCKETS = 1 << 16
BLOCK = 1 << 10  # buckets whose winners are found at once


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _scores(buckets: np.ndarray, workers: np.ndarray) -> np.ndarray:
    """Each worker's score for each bucket, one row per bucket: splitmix64's finalizer over the
    two, for every pair at once (uint64 arithmetic wraps at 2**64)."""
    z = buckets[:, np.newaxis] ^ (workers * np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class RendezvousRouter:
    def __init__(self) -> None:
        self._workers: dict[str, int] = {}
        self._names: list[str] = []
        self._digests = np.empty(0, dtype=np.uint64)
        self._owners: list[str | None] = [None] * BUCKETS  # each bucket's winner, once found

    def _changed(self) -> None:
        self._names = list(self._workers)
        self._digests = np.fromiter(self._workers.values(), dtype=np.uint64)
        self._owners = [None] * BUCKETS

    def __len__(self) -> int:
        return len(self._workers)

    def __contains__(self, worker: str) -> bool:
        return worker in self._workers

    @property
    def workers(self) -> list[str]:
        return list(self._workers)

    def add(self, worker: str) -> None:
        self._workers[worker] = _digest(worker)
        self._changed()

    def remove(self, worker: str) -> None:
        if self._workers.pop(worker, None) is not None:
            self._changed()

    def pick(self, key: str) -> str:
        """The worker for `key`; raises LookupError when there is none."""
        bucket = _digest(key) % BUCKETS
        owner = self._owners[bucket]
        if owner is None:
            if not self._workers:
                raise LookupError("no live workers")
            first = bucket - bucket % BLOCK
            buckets = np.arange(first, first + BLOCK, dtype=np.uint64)
            winners = np.argmax(_scores(buckets, self._digests), axis=1).tolist()
            names = self._names
            self._owners[first : first + BLOCK] = [names[w] for w in winners]
            owner = self._owners[bucket]
            assert owner is not None
        return owner
