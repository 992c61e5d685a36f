"""Compile a validated dag_jsonl dataset into request trees.

Each root conversation is expanded breadth-first into the sessions it starts, following its
branches, and every branch becomes edges:

- FORK: the child's turn 0 depends on the forking turn and takes it as history parent; the
  child routes with the parent. No join: a bare FORK ends the parent, a background one does not
  wait for it.
- SPAWN: the child's turn 0 depends on the spawning turn, starts a fresh history and routes by
  itself; the parent's `join_at` turn join-depends on the child's last turn, so it waits for the
  child to end however it ends (several branches may gate one turn: fan-in). A bare SPAWN on the
  last turn gates nothing (fire-and-forget).
- pre-session SPAWN: the child depends on what the spawning session's turn 0 depends on, so it
  is released with it and sent first; it has no parent and gates nothing.
- an orchestrator: its turns are gates that send nothing, each spawning a round and waiting its
  think time; the gate after a round joins on its children, so rounds run one after another.

A conversation's `context_mode` says what its turns continue: the previous turn and its live
reply (the default), the previous turn without the reply (`deltas_with_responses`: the
dataset's own assistant turns stand in), or nothing (`message_array_with_responses`: each turn
as written). Tools belong to the conversation: a turn that declares none sends those of the
latest turn of its history that did, a FORK child its parent's.

Expansion duplicates SPAWN templates that several parents reference, so a file can describe far
more requests than it has lines; `max_tree_requests` turns a runaway expansion into a clear error.

Trees are built when the run reads them, not before: the graph's shape (requests per tree,
depths, children) is counted over the conversations instead, once each, so a file of a million
conversations starts without compiling a million trees, and the run holds only the trees it
is running.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from dagperf.dataset.formats.dag_jsonl.edges import BACKGROUND
from dagperf.dataset.formats.dag_jsonl.lines import Conversation, Interned
from dagperf.dataset.formats.dag_jsonl.reader import DagDataset, DagLines
from dagperf.dataset.formats.dag_jsonl.records import BranchMode
from dagperf.dataset.lazy import BuiltOnRead
from dagperf.dataset.loader import DatasetError, Problem
from dagperf.dataset.specs import ContextMode
from dagperf.graph.model import (
    ConversationInput,
    Node,
    RequestGraph,
    Session,
    SessionKind,
    Shape,
    Tree,
    with_tools_of,
)

MAX_TREE_REQUESTS = 1_000_000
# Turns sent as written: no history between them (only a SPAWN child or a root may be one).
_AS_WRITTEN = (ContextMode.MESSAGE_ARRAY_WITH_RESPONSES,)


def compile_dag_jsonl(
    dataset: DagDataset, max_tree_requests: int = MAX_TREE_REQUESTS
) -> RequestGraph:
    shape = _shape(dataset)
    if (over := np.flatnonzero(np.asarray(shape.sizes) > max_tree_requests)).size:
        root = dataset.roots[int(over[0])]
        message = (
            f"session '{root}' expands to more than {max_tree_requests:,} requests per run "
            "(SPAWN targets referenced by several parents are sent once per reference)"
        )
        raise DatasetError([Problem(dataset.source, dataset.line_of(root), message)])
    return RequestGraph(
        dataset.source, _Trees(dataset), known=shape, listed=partial(_listed, dataset.lines)
    )


def _listed(lines: DagLines) -> Iterator[ConversationInput]:
    """Every conversation in file order, read in one pass without building a tree."""
    for sid, payloads in lines.payloads(Interned()):
        if payloads:  # an orchestrator sends nothing
            yield ConversationInput(sid, payloads)


class _Trees(BuiltOnRead[Tree]):
    """A dataset's trees, each built when it is read (and not kept: the reader keeps what it
    needs), from its conversations read back from the file."""

    def __init__(self, dataset: DagDataset):
        self._roots = dataset.roots
        self._lines = dataset.lines  # not the dataset: its branches are counted, then let go
        self._intern = Interned()

    def __len__(self) -> int:
        return len(self._roots)

    def _build(self, index: int) -> Tree:
        read: dict[str, Conversation] = {}

        def conversation(sid: str) -> Conversation:
            found = read.get(sid)
            if found is None:
                found = read[sid] = self._lines.conversation(sid, self._intern)
            return found

        return _expand(self._roots[index], conversation)


class _Count(NamedTuple):
    """One conversation's expansion: what it and everything it starts add to a tree."""

    requests: int
    height: int  # the depth of its deepest descendant below it
    forks: int
    spawns: int


def _shape(dataset: DagDataset) -> Shape:
    """The shape of every tree. What each conversation's children that start nothing add is
    summed over every edge at once; only a conversation with a child that starts others is
    counted one by one (the loader refused cycles). A conversation reached from two parents
    is counted once and added twice, as expansion sends it twice."""
    edges = dataset.edges
    turns = np.frombuffer(dataset.turns, np.int64)
    count = len(turns)
    starters = edges.starters(count)
    leaf = ~starters[edges.child]
    parents, fork = edges.parent[leaf], edges.kind[leaf] <= BACKGROUND
    own = _Own(
        turns + np.bincount(parents, turns[edges.child[leaf]], count).astype(np.int64),
        np.bincount(parents, minlength=count) > 0,
        np.bincount(parents[fork], minlength=count),
        np.bincount(parents[~fork], minlength=count),
    )
    deep: dict[int, list[tuple[int, bool]]] = {}
    for i in np.flatnonzero(~leaf).tolist():
        deep.setdefault(int(edges.parent[i]), []).append(
            (int(edges.child[i]), bool(edges.kind[i] <= BACKGROUND))
        )
    roots = dataset.root_numbers
    sizes, heights = own.requests[roots], own.height[roots].astype(np.int64)
    forks, spawns = own.forks[roots], own.spawns[roots]
    counts: dict[int, _Count] = {}
    for at, root in enumerate(roots.tolist()):
        if root in deep:
            sizes[at], heights[at], forks[at], spawns[at] = _count(root, own, deep, counts)
    return Shape(
        sizes.tolist(),
        count,
        int(heights.max(initial=0)),
        int(forks.sum()),
        int(spawns.sum()),
        dataset.models,
    )


class _Own(NamedTuple):
    """By conversation number, what it and its children that start nothing add to a tree."""

    requests: NDArray[np.int64]
    height: NDArray[np.bool_]
    forks: NDArray[np.int64]
    spawns: NDArray[np.int64]


def _count(
    number: int, own: _Own, deep: dict[int, list[tuple[int, bool]]], counts: dict[int, _Count]
) -> _Count:
    """A conversation with children that start others, those counted first: iteratively, as
    FORK chains run deep."""
    stack = [number]
    while stack:
        top = stack[-1]
        if top in counts:
            stack.pop()
            continue
        below = [child for child, _ in deep[top] if child in deep and child not in counts]
        if below:
            stack.extend(below)
            continue
        stack.pop()
        requests, height = int(own.requests[top]), int(own.height[top])
        forks, spawns = int(own.forks[top]), int(own.spawns[top])
        for child, fork in deep[top]:
            below_count = counts.get(child) or _Count(
                int(own.requests[child]),
                int(own.height[child]),
                int(own.forks[child]),
                int(own.spawns[child]),
            )
            requests += below_count.requests
            height = max(height, below_count.height + 1)
            forks += below_count.forks + fork
            spawns += below_count.spawns + (not fork)
        counts[top] = _Count(requests, height, forks, spawns)
    return counts[number]


@dataclass(slots=True)
class _Start:
    """A session waiting to be laid out, with the edges its parent gives it."""

    conversation_id: str
    kind: SessionKind
    branch_id: str | None
    parent: int | None
    depth: int
    route: int | None  # None: route by itself
    trigger: tuple[int, ...]  # what its turn 0 depends on
    history: int | None  # its turn 0's history parent
    join: int | None  # the parent node that waits for its last turn
    pre_session: bool = False


@dataclass(slots=True)
class _Draft:
    session: int
    turn: int
    deps: list[int]
    history: int | None
    join_deps: list[int] = field(default_factory=list)


def _expand(root: str, templates: Callable[[str], Conversation]) -> Tree:
    sessions: list[Session] = []
    drafts: list[_Draft] = []
    sent_first: set[int] = set()  # turn 0 of pre-session spawns: sent before their siblings
    queue = deque([_Start(root, SessionKind.ROOT, None, None, 0, None, (), None, None)])
    while queue:
        start = queue.popleft()
        template = templates(start.conversation_id)
        s, first, n = len(sessions), len(drafts), len(template.payloads)
        route = s if start.route is None else start.route
        sessions.append(
            Session(
                start.conversation_id,
                start.kind,
                start.branch_id,
                start.parent,
                start.depth,
                route,
                first,
                n,
            )
        )
        accumulates = template.gate is None and template.mode not in _AS_WRITTEN
        drafts.append(_Draft(s, 0, list(start.trigger), start.history if accumulates else None))
        drafts.extend(
            _Draft(s, k, [first + k - 1], first + k - 1 if accumulates else None)
            for k in range(1, n)
        )
        if start.join is not None:
            drafts[start.join].join_deps.append(first + n - 1)
        if start.pre_session:
            sent_first.add(first)
        for branch in template.branches:
            pre = branch.turn is None
            spawner = None if branch.turn is None else first + branch.turn
            join = None if branch.join_at is None else first + branch.join_at
            fork = branch.mode is BranchMode.FORK
            for child in branch.children:
                queue.append(
                    _Start(
                        child,
                        SessionKind.FORK if fork else SessionKind.SPAWN,
                        branch.branch_id,
                        None if pre else s,
                        start.depth + 1,
                        route if fork else None,
                        start.trigger if spawner is None else (spawner,),
                        spawner if fork else None,
                        join,
                        pre_session=pre,
                    )
                )

    return _tree(sessions, drafts, templates, sent_first)


def _tree(
    sessions: list[Session],
    drafts: list[_Draft],
    templates: Callable[[str], Conversation],
    sent_first: set[int],
) -> Tree:
    """The laid-out sessions and drafts as a tree: each node's dependents, in send order (a
    pre-session spawn's turn 0 before its siblings), and what each sends."""

    def send_order(released: list[int]) -> tuple[int, ...]:
        if sent_first and len(released) > 1:
            released.sort(key=lambda i: i not in sent_first)  # stable: otherwise by index
        return tuple(released)

    dependents: list[list[int]] = [[] for _ in drafts]
    for i, draft in enumerate(drafts):
        for dep in (*draft.deps, *draft.join_deps):
            dependents[dep].append(i)
    nodes: list[Node] = []
    for i, d in enumerate(drafts):
        template = templates(sessions[d.session].conversation_id)
        history = None if d.history is None else nodes[d.history].payload
        nodes.append(
            Node(
                d.session,
                d.turn,
                with_tools_of(template.payloads[d.turn], history),
                template.delays[d.turn],
                tuple(d.deps),
                tuple(d.join_deps),
                d.history,
                send_order(dependents[i]),
                template.mode is not ContextMode.DELTAS_WITH_RESPONSES,
                template.gate,
            )
        )
    entry = send_order([i for i, d in enumerate(drafts) if not d.deps and not d.join_deps])
    return Tree(tuple(sessions), tuple(nodes), entry)
