"""The session_graph file format: one session per line, its requests as nodes and edges.

    {"session_id": "s1",
     "nodes": [{"id": "plan", "messages": [...]},
               {"id": "a", "messages": [...]}, {"id": "b", "messages": [...]},
               {"id": "merge", "messages": [...], "wait_after_ready": 0.5}],
     "edges": [{"src": "plan", "dst": "a", "is_history_parent": true},
               {"src": "plan", "dst": "b"},
               {"src": "a", "dst": "merge", "is_history_parent": true},
               {"src": "b", "dst": "merge"}]}

A node waits for every node with an edge into it, then `wait_after_ready` seconds; at most one of
those edges may be its history parent, whose context and reply its messages continue. A node
carries the request fields of a dag_jsonl turn (messages, model, max_tokens, tools, extra).
`context_mode` overrides the default (`deltas_without_responses`) for the session. Nodes may be
listed in any order; they are sent parents first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from dagperf.dataset.content import RequestContent
from dagperf.dataset.limits import WaitSeconds
from dagperf.dataset.loader import DatasetError, Problems, load_file, validated_lines
from dagperf.dataset.specs import (
    REFUSED_CONTEXT_MODE,
    ContextMode,
    GraphNode,
    Payload,
    SessionSpec,
    TraceDataset,
    parents_first,
)

NodeId = Annotated[str, Field(min_length=1)]


class GraphNodeLine(RequestContent):
    id: NodeId = Field(description="Unique within the session.")
    wait_after_ready: WaitSeconds = Field(
        default=0.0,
        description="Seconds to wait after the last parent finished, before sending.",
    )


class GraphEdge(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    src: NodeId
    dst: NodeId
    is_history_parent: StrictBool = Field(
        default=False, description="dst continues src's context and reply."
    )


class SessionGraphLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: NodeId = Field(description="Unique across the file.")
    nodes: list[GraphNodeLine] = Field(min_length=1)
    edges: list[GraphEdge] = Field(default_factory=list)
    context_mode: ContextMode | None = None


def load_session_graph(path: str) -> TraceDataset:
    return load_file(path, read_session_graph)


def read_session_graph(lines: Iterable[bytes], source: str) -> TraceDataset:
    problems = Problems(source)
    sessions: list[SessionSpec] = []
    first_line: dict[str, int] = {}
    for lineno, _, line in validated_lines(
        lines, SessionGraphLine, problems, "one session per line"
    ):
        if line is None:
            continue
        sid = line.session_id
        if sid in first_line:
            problems.add(lineno, f"duplicate session_id '{sid}' (first on line {first_line[sid]})")
            continue
        first_line[sid] = lineno
        errors = list(session_problems(line))
        for message in errors:
            problems.add(lineno, f"session '{sid}': {message}")
        if not errors:
            sessions.append(to_spec(line))
    if not first_line and not problems.items:
        problems.add(None, "empty file: a session_graph file needs at least one session line")
    problems.raise_any()
    return TraceDataset(sessions, None, timed=False)


def session_problems(line: SessionGraphLine) -> Iterable[str]:
    if line.context_mode is ContextMode.MESSAGE_ARRAY_WITHOUT_RESPONSES:
        yield REFUSED_CONTEXT_MODE
    ids: set[str] = set()
    for node in line.nodes:
        if node.id in ids:
            yield f"duplicate node id '{node.id}'"
        ids.add(node.id)
    seen: set[tuple[str, str]] = set()
    history_of: dict[str, str] = {}
    for k, edge in enumerate(line.edges):
        where = f"edges.{k}"
        for end in (edge.src, edge.dst):
            if end not in ids:
                yield f"{where}: no node '{end}'"
        if edge.src == edge.dst:
            yield f"{where}: node '{edge.src}' cannot depend on itself"
        if (edge.src, edge.dst) in seen:
            yield f"{where}: edge '{edge.src}' -> '{edge.dst}' given twice"
        seen.add((edge.src, edge.dst))
        if edge.is_history_parent:
            if edge.dst in history_of:
                yield (
                    f"{where}: node '{edge.dst}' has two history parents, "
                    f"'{history_of[edge.dst]}' and '{edge.src}' (at most one)"
                )
            history_of[edge.dst] = edge.src
    edges_ok = all(e.src in ids and e.dst in ids and e.src != e.dst for e in line.edges)
    if edges_ok and _order(line) is None:  # a self-edge is reported above, not as a cycle
        yield "the edges form a cycle: a session graph must be acyclic"


def to_spec(line: SessionGraphLine) -> SessionSpec:
    order = _order(line)
    assert order is not None, "validated first"
    index = {line.nodes[i].id: k for k, i in enumerate(order)}
    parents: dict[str, list[int]] = {n.id: [] for n in line.nodes}
    history: dict[str, int] = {}
    for edge in line.edges:
        parents[edge.dst].append(index[edge.src])
        if edge.is_history_parent:
            history[edge.dst] = index[edge.src]
    nodes = []
    for i in order:
        node = line.nodes[i]
        payload = Payload.of(node.messages, node.model, node.max_tokens, node.tools, node.extra)
        deps = tuple(sorted(parents[node.id]))
        nodes.append(GraphNode(node.id, payload, deps, history.get(node.id), node.wait_after_ready))
    return SessionSpec(line.session_id, tuple(nodes), line.context_mode)


def _order(line: SessionGraphLine) -> list[int] | None:
    """Node positions parents first, otherwise in file order; None if there is a cycle."""
    position = {n.id: i for i, n in enumerate(line.nodes)}
    edges = {(position[e.src], position[e.dst]) for e in line.edges}
    order = parents_first(len(line.nodes), edges)
    return order if len(order) == len(line.nodes) else None


__all__ = ["DatasetError", "load_session_graph", "read_session_graph"]
