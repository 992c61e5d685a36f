"""Every branch a dag_jsonl file declares, as flat arrays with one entry per (branch, child).

The whole-file rules (`rules.file_problems`) and the graph's shape (`graph.dag_compiler`) need
each parent's children, not the conversations: held as conversation numbers, an edge costs a
few bytes where a branch object costs hundreds, and the checks that touch every edge of a
million-conversation file run in numpy.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from dagperf.dataset.dag_records import Branch, BranchMode

# Edge kinds, ordered so that `kind <= BACKGROUND` means a FORK.
FORK, BACKGROUND, SPAWN, PRE_SESSION = 0, 1, 2, 3
NO_TURN = -1  # the spawning turn of a pre-session spawn


class EdgeList:
    """Edges in the order the loader meets their parents, children still named."""

    def __init__(self) -> None:
        self.parents = array("q")
        self.kinds = array("b")
        self.turns = array("q")
        self.children: list[str] = []

    def add(self, parent: int, branches: list[Branch]) -> None:
        for branch in branches:
            if branch.turn is None:
                kind = PRE_SESSION
            elif branch.mode is BranchMode.SPAWN:
                kind = SPAWN
            else:
                kind = BACKGROUND if branch.background else FORK
            count = len(branch.children)
            self.children += branch.children
            self.parents.extend(itertools.repeat(parent, count))
            self.kinds.extend(itertools.repeat(kind, count))
            self.turns.extend(
                itertools.repeat(NO_TURN if branch.turn is None else branch.turn, count)
            )

    def add_forks(self, parents: list[int], children: list[list[str]]) -> None:
        """Bare FORK children of each parent's only turn (what `add` makes of that branch)."""
        counts = np.fromiter(map(len, children), np.int64, len(children))
        total = int(counts.sum())
        self.children += itertools.chain.from_iterable(children)
        self.parents.frombytes(np.repeat(np.asarray(parents, np.int64), counts).tobytes())
        self.kinds.extend(itertools.repeat(FORK, total))
        self.turns.extend(itertools.repeat(0, total))

    def extend(self, other: EdgeList, offset: int) -> None:
        """Another list's edges, their parents numbered from `offset`."""
        parents = np.frombuffer(other.parents, np.int64) + offset
        self.parents.frombytes(parents.tobytes())
        self.kinds.extend(other.kinds)
        self.turns.extend(other.turns)
        self.children += other.children

    def resolve(self, ids: Mapping[str, int]) -> Edges:
        """The edges in the file order of their parents (the order the whole-file rules name
        first ones by), children numbered; a child no line declares is numbered -1 and named in
        `undeclared`."""
        children = self.children
        numbers = np.fromiter(
            map(ids.get, children, itertools.repeat(-1)), np.int64, count=len(children)
        )
        parents = np.frombuffer(self.parents, np.int64)
        kinds, turns = np.frombuffer(self.kinds, np.int8), np.frombuffer(self.turns, np.int64)
        if (parents[1:] < parents[:-1]).any():  # bulk-filed lines came before their block's
            order = np.argsort(parents, kind="stable")
            parents, numbers, kinds, turns = (
                parents[order],
                numbers[order],
                kinds[order],
                turns[order],
            )
            children = [children[i] for i in order.tolist()]
        missing = np.flatnonzero(numbers < 0).tolist()
        return Edges(parents, numbers, kinds, turns, {i: children[i] for i in missing})


@dataclass(frozen=True)
class Edges:
    parent: NDArray[np.int64]  # conversation numbers
    child: NDArray[np.int64]  # -1 where no line declares the child
    kind: NDArray[np.int8]
    turn: NDArray[np.int64]  # the spawning turn, NO_TURN for a pre-session spawn
    undeclared: dict[int, str]  # by edge index, the child named where none is declared

    def starters(self, count: int) -> NDArray[np.bool_]:
        """Which of `count` conversations start others."""
        mask = np.zeros(count, bool)
        mask[self.parent] = True
        return mask

    def first_fork_parents(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The FORK edges ordered by child, file order kept among a child's (so the first of a
        child's edges is its first parent), and for each, the index of that first edge."""
        forks = np.flatnonzero((self.kind <= BACKGROUND) & (self.child >= 0))
        by_child = forks[np.argsort(self.child[forks], kind="stable")]
        children = self.child[by_child]
        starts = np.ones(len(children), bool)
        starts[1:] = children[1:] != children[:-1]
        first = by_child[np.maximum.accumulate(np.where(starts, np.arange(len(children)), 0))]
        return by_child, first
