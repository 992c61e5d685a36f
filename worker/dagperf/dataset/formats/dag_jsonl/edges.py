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

import msgspec
import numpy as np
from numpy.typing import NDArray

from dagperf.dataset.formats.dag_jsonl.records import Branch, BranchMode

# Edge kinds, ordered so that `kind <= BACKGROUND` means a FORK.
FORK, BACKGROUND, SPAWN, PRE_SESSION = 0, 1, 2, 3
NO_TURN = -1  # the spawning turn of a pre-session spawn


class EdgeList:
    """Edges in the order the loader meets their parents, children named and, once a pass has
    looked them up among its own sessions (`number`), numbered."""

    def __init__(self) -> None:
        self.parents = array("q")
        self.kinds = array("b")
        self.turns = array("q")
        self.children: list[str] = []
        self.numbers = array("q")  # of the first len(numbers) edges' children; -1: not found

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

    def number(self, ids: Mapping[str, int]) -> None:
        """Number the children not numbered yet by `ids` (-1 for one it lacks). A pass over
        part of a file numbers its own (in the process that read it) before the parts merge."""
        fresh = self.children[len(self.numbers) :]
        self.numbers.frombytes(_numbered(fresh, ids).tobytes())

    def extend(self, other: EdgeList, offset: int) -> None:
        """Another list's edges, their parents (and children, where numbered) numbered from
        `offset`."""
        parents = np.frombuffer(other.parents, np.int64) + offset
        self.parents.frombytes(parents.tobytes())
        self.kinds.extend(other.kinds)
        self.turns.extend(other.turns)
        if len(self.numbers) == len(self.children):  # else numbered at the end
            numbers = np.frombuffer(other.numbers, np.int64)
            self.numbers.frombytes(np.where(numbers >= 0, numbers + offset, -1).tobytes())
        self.children += other.children

    def resolve(self, ids: Mapping[str, int]) -> Edges:
        """The edges in the file order of their parents (the order the whole-file rules name
        first ones by), children numbered; a child no line declares is numbered -1 and named in
        `undeclared`. Children a pass did not find among its own sessions are looked up again
        in `ids`, the whole file's."""
        children, numbered = self.children, len(self.numbers)
        numbers = np.concatenate(
            (np.frombuffer(self.numbers, np.int64), _numbered(children[numbered:], ids))
        )
        again = np.flatnonzero(numbers[:numbered] < 0)
        numbers[again] = _numbered([children[i] for i in again.tolist()], ids)
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
        undeclared = np.flatnonzero(numbers < 0).tolist()
        return Edges(parents, numbers, kinds, turns, {i: children[i] for i in undeclared})

    def name_numbered(self, sids: list[str], offset: int) -> None:
        """Name again the children that travelled numbered only (`__getstate__`), by their
        numbers, from `offset`, into `sids`: what numbering them over needs."""
        children, numbers = self.children, self.numbers
        for i in [i for i, name in enumerate(children) if not name]:
            children[i] = sids[numbers[i] - offset]

    def __getstate__(self) -> tuple[bytes, ...]:
        """As it travels between processes: a child numbered among the sender's sessions goes
        without its name ("" in its place: no session id is empty), which the receiver has by
        number; the others as one msgpack list (pickling names one by one costs twenty times
        as long, and sending them all twice what it costs to send the rest)."""
        arrays = (self.parents, self.kinds, self.turns, self.numbers)
        unnumbered = np.frombuffer(self.numbers, np.int64) < 0
        named = np.concatenate(
            (np.flatnonzero(unnumbered), np.arange(len(self.numbers), len(self.children)))
        )
        names = [self.children[i] for i in named.tolist()]
        head = np.array([len(self.children)], np.int64).tobytes()
        return (
            *(a.tobytes() for a in arrays),
            head + named.tobytes(),
            msgspec.msgpack.encode(names),
        )

    def __setstate__(self, state: tuple[bytes, ...]) -> None:
        parents, kinds, turns, numbers, named, names = state
        self.parents, self.kinds = array("q", parents), array("b", kinds)
        self.turns, self.numbers = array("q", turns), array("q", numbers)
        count, *where = np.frombuffer(named, np.int64).tolist()
        self.children = [""] * count
        for i, name in zip(where, msgspec.msgpack.decode(names, type=list[str]), strict=True):
            self.children[i] = name


def _numbered(names: list[str], ids: Mapping[str, int]) -> NDArray[np.int64]:
    return np.fromiter(map(ids.get, names, itertools.repeat(-1)), np.int64, count=len(names))


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
