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

from collections.abc import Iterable, Sequence

from dagperf.dataset.lazy import BuiltOnRead
from dagperf.dataset.specs import (
    DEFAULT_CONTEXT_MODE,
    REFUSED_CONTEXT_MODE,
    ContextMode,
    GraphNode,
    Known,
    SessionSpec,
    parents_first,
)
from dagperf.graph.agents import agent_tree
from dagperf.graph.model import (
    Node,
    RequestGraph,
    Session,
    SessionKind,
    Shape,
    Tree,
    with_tools_of,
)
from dagperf.runtime.gcpause import gc_paused

__all__ = [
    "DEFAULT_CONTEXT_MODE",
    "REFUSED_CONTEXT_MODE",
    "ContextMode",
    "GraphNode",
    "SessionSpec",
    "SpecError",
    "compile_sessions",
    "parents_first",
    "resolve_mode",
]


class SpecError(ValueError):
    """A session that breaks the rules above: a loader bug, since loaders validate first."""


def compile_sessions(
    source: str,
    sessions: Sequence[SessionSpec],
    loader_mode: ContextMode | None = None,
    warmup: Iterable[SessionSpec] = (),
    known: Known | None = None,
    inputs_json: bool = True,
) -> RequestGraph:
    """One tree per session, in order. `loader_mode` is the format's default context mode;
    `warmup` the sessions sent before anything is measured (`RequestGraph.warmup`). With
    `known`, `sessions` reads each session when it is taken: each tree is built when the run
    reaches it, from what `known` says of them all."""
    if known is not None:
        if not sessions:
            raise SpecError(f"{source}: no sessions")
        shape = Shape(
            known.sizes, known.conversations, known.depth, 0, known.spawned, frozenset({None})
        )
        built = _Built(sessions, loader_mode)
        return RequestGraph(source, built, known=shape, inputs_json=inputs_json)
    with gc_paused():
        trees = tuple(_tree(spec, loader_mode) for spec in sessions)
        before = tuple(_tree(spec, loader_mode) for spec in warmup)
    if not trees:
        raise SpecError(f"{source}: no sessions")
    return RequestGraph(source, trees, before)


class _Built(BuiltOnRead[Tree]):
    """Trees built from sessions read when taken; none is kept here (the run keeps what it
    runs)."""

    def __init__(self, sessions: Sequence[SessionSpec], loader_mode: ContextMode | None):
        self._sessions = sessions
        self._mode = loader_mode

    def __len__(self) -> int:
        return len(self._sessions)

    def _build(self, index: int) -> Tree:
        return _tree(self._sessions[index], self._mode)


def resolve_mode(spec: SessionSpec, loader_mode: ContextMode | None) -> ContextMode:
    mode = spec.context_mode or loader_mode or DEFAULT_CONTEXT_MODE
    if mode is ContextMode.MESSAGE_ARRAY_WITHOUT_RESPONSES:
        raise SpecError(f"session '{spec.session_id}': {REFUSED_CONTEXT_MODE}")
    return mode


def _tree(spec: SessionSpec, loader_mode: ContextMode | None) -> Tree:
    if spec.spawns:
        return agent_tree(spec, lambda session: resolve_mode(session, loader_mode))
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
    nodes: list[Node] = []
    for i, node in enumerate(spec.nodes):
        history = node.history if with_history else None
        nodes.append(
            Node(
                session=0,
                turn=i,
                payload=with_tools_of(
                    node.payload, None if history is None else nodes[history].payload
                ),
                delay_s=node.wait_s,
                deps=node.parents,
                join_deps=(),
                history=history,
                dependents=tuple(dependents[i]),
                keep_reply=keep_reply,
            )
        )
    session = Session(spec.session_id, SessionKind.ROOT, None, None, 0, 0, 0, len(nodes))
    entry = tuple(i for i, node in enumerate(spec.nodes) if not node.parents)
    return Tree((session,), tuple(nodes), entry, spec.start_s)
