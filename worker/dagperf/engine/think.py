"""Think times drawn at run time: an orchestrator's wait before each round, as AIPerf draws it.

A gate with a `sigma` waits a lognormal time whose median is its node's authored delay: the
median times exp(N(0, sigma)), clamped to the gate's bounds. Each (run, turn) gets its own
draw, never past a day (`MAX_WAIT_S`, the longest wait a dataset may author). Under
`--random-seed` the draw is AIPerf's own: its stream is seeded from the SHA-256 of
"<seed>:dag_think:<ordinal>:<turn>", the ordinal being the run's place among the roots started
(from 0), so the same file and seed wait the same times in both tools. Without a seed, draws
are fresh.
"""

from __future__ import annotations

import hashlib
import math
import random

from dagperf.dataset.limits import MAX_WAIT_S
from dagperf.graph import Gate

_EXPONENT_CAP = 700.0  # exp() overflows past ~709: a pathological sigma still gives a number


class ThinkTimes:
    def __init__(self, seed: int | None):
        self._seed = seed
        self._fresh = random.Random()

    def draw(self, gate: Gate, median_s: float, ordinal: int, turn: int) -> float:
        """The seconds a gate waits in run `ordinal` (0 for the first root started)."""
        if gate.sigma is None or median_s <= 0:
            return median_s
        if self._seed is None:
            normal = self._fresh.gauss(0.0, gate.sigma)
        else:
            normal = _seeded_normal(f"{self._seed}:dag_think:{ordinal}:{turn}", gate.sigma)
        drawn = median_s * math.exp(min(normal, _EXPONENT_CAP))
        if not math.isfinite(drawn):
            drawn = median_s
        if gate.min_s is not None:
            drawn = max(drawn, gate.min_s)
        if gate.max_s is not None:
            drawn = min(drawn, gate.max_s)
        return min(drawn, MAX_WAIT_S)


def _seeded_normal(key: str, sigma: float) -> float:
    import numpy as np  # only a seeded spine with a sampled think time needs it

    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return float(np.random.default_rng(seed).normal(0.0, sigma))
