"""Session graphs: the form every format but dag_jsonl hands to the compiler.

A session is one user's (or one agent's) requests as a DAG: each node waits for all its
`parents`, then `wait_s` more, and at most one parent is its `history` parent, whose context and
reply this node's messages continue. Diamonds are fine. The session graph file format, the
synthetic generators and the traces all build `SessionSpec`s; `compile_sessions` turns them into
request trees, one per session, so the scheduler learns nothing about any of them.

A session compiles into one tree of one conversation whose turns are its nodes in the order
given (parents first), routed together: a history parent's context lives on the worker that
sent it, so the whole session goes to that worker.

Context modes decide what a node's history is (see `ContextMode`); the mode comes from the
session, else from the format's loader, else `deltas_without_responses`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from enum import StrEnum
from typing import NamedTuple

from dagperf.gcpause import gc_paused
from dagperf.graph.model import Node, Payload, RequestGraph, Session, SessionKind, Tree


class ContextMode(StrEnum):
    """How a turn's history is built.

    - deltas_without_responses: each node sends its history parent's context, that parent's live
      reply, then its own messages (a chat that accumulates).
    - deltas_with_responses: the same, but the live reply is measured and discarded: the
      dataset's own assistant turns, in the nodes' messages, stand in for it.
    - message_array_with_responses: each node's messages are the whole request, sent as written.
    - message_array_without_responses: would merge live replies into full message arrays; no
      format defines how, so it is refused.
    """

    DELTAS_WITHOUT_RESPONSES = "deltas_without_responses"
    DELTAS_WITH_RESPONSES = "deltas_with_responses"
    MESSAGE_ARRAY_WITH_RESPONSES = "message_array_with_responses"
    MESSAGE_ARRAY_WITHOUT_RESPONSES = "message_array_without_responses"


DEFAULT_CONTEXT_MODE = ContextMode.DELTAS_WITHOUT_RESPONSES
REFUSED_CONTEXT_MODE = (
    "context mode 'message_array_without_responses' is not supported: it would need live replies "
    "merged into each turn's full message array, which no format defines; use "
    "'message_array_with_responses' (turns sent as written) or a deltas mode"
)


class GraphNode(NamedTuple):
    key: str  # the node's id in its source, for messages and records
    payload: Payload
    parents: tuple[int, ...] = ()  # indices of earlier nodes of the same session
    history: int | None = None  # one of `parents`, or None for a fresh context
    wait_s: float = 0.0  # after the last parent finished


class SessionSpec(NamedTuple):
    session_id: str
    nodes: tuple[GraphNode, ...]  # parents before children
    context_mode: ContextMode | None = None  # this session's override
    start_s: float | None = None  # arrival on a fixed schedule, from the first session's


class SpecError(ValueError):
    """A session that breaks the rules above: a loader bug, since loaders validate first."""


def compile_sessions(
    source: str,
    sessions: Iterable[SessionSpec],
    loader_mode: ContextMode | None = None,
) -> RequestGraph:
    """One tree per session, in order. `loader_mode` is the format's default context mode."""
    with gc_paused():
        trees = tuple(_tree(spec, loader_mode) for spec in sessions)
    if not trees:
        raise SpecError(f"{source}: no sessions")
    return RequestGraph(source, trees)


def resolve_mode(spec: SessionSpec, loader_mode: ContextMode | None) -> ContextMode:
    mode = spec.context_mode or loader_mode or DEFAULT_CONTEXT_MODE
    if mode is ContextMode.MESSAGE_ARRAY_WITHOUT_RESPONSES:
        raise SpecError(f"session '{spec.session_id}': {REFUSED_CONTEXT_MODE}")
    return mode


def _tree(spec: SessionSpec, loader_mode: ContextMode | None) -> Tree:
    mode = resolve_mode(spec, loader_mode)
    if not spec.nodes:
        raise SpecError(f"session '{spec.session_id}' has no nodes")
    with_history = mode is not ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
    keep_reply = mode is not ContextMode.DELTAS_WITH_RESPONSES
    dependents: list[list[int]] = [[] for _ in spec.nodes]
    for i, node in enumerate(spec.nodes):
        if any(not 0 <= p < i for p in node.parents) or len(set(node.parents)) < len(node.parents):
            raise SpecError(f"session '{spec.session_id}' node '{node.key}': bad parents")
        if node.history is not None and node.history not in node.parents:
            raise SpecError(
                f"session '{spec.session_id}' node '{node.key}': history is not a parent"
            )
        for p in node.parents:
            dependents[p].append(i)
    nodes = tuple(
        Node(
            session=0,
            turn=i,
            payload=node.payload,
            delay_s=node.wait_s,
            deps=node.parents,
            join_deps=(),
            history=node.history if with_history else None,
            dependents=tuple(dependents[i]),
            keep_reply=keep_reply,
        )
        for i, node in enumerate(spec.nodes)
    )
    session = Session(spec.session_id, SessionKind.ROOT, None, None, 0, 0, 0, len(nodes))
    entry = tuple(i for i, node in enumerate(spec.nodes) if not node.parents)
    return Tree((session,), nodes, entry, spec.start_s)


def parents_first(count: int, edges: Iterable[tuple[int, int]]) -> list[int]:
    """Positions 0..count-1 ordered parents first, otherwise in their own order, for edges
    (parent, child); shorter than `count` when some positions lie on a cycle."""
    waiting = [0] * count
    children: list[list[int]] = [[] for _ in range(count)]
    for parent, child in edges:
        children[parent].append(child)
        waiting[child] += 1
    ready = [i for i, w in enumerate(waiting) if not w]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for child in children[i]:
            waiting[child] -= 1
            if not waiting[child]:
                heapq.heappush(ready, child)
    return order
