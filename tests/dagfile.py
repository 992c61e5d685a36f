"""Helpers shared by the test modules: build dag_jsonl lines and read them back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dagperf.dataset import DatasetError, Problem
from dagperf.dataset.formats.dag_jsonl import DagDataset, read_dag_jsonl


def user(text: str = "hi") -> dict[str, str]:
    return {"role": "user", "content": text}


def turn(*, messages: list[dict] | None = None, **fields: Any) -> dict[str, Any]:
    return {"messages": messages or [user()], **fields}


def conv(session_id: str, *turns: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"session_id": session_id, "turns": list(turns) or [turn()], **fields}


def encode(*lines: dict[str, Any] | str) -> list[bytes]:
    """Lines of a file; a str is taken verbatim, a dict is JSON-encoded."""
    return [
        (line if isinstance(line, str) else json.dumps(line)).encode() + b"\n" for line in lines
    ]


def load(*lines: dict[str, Any] | str) -> DagDataset:
    return read_dag_jsonl(encode(*lines), "test.jsonl")


def line_numbers(dataset: DagDataset) -> dict[str, int]:
    """Each session's line in the file."""
    return {sid: dataset.line_of(sid) for sid in dataset.ids}


def problems(*lines: dict[str, Any] | str) -> list[Problem]:
    with pytest.raises(DatasetError) as caught:
        load(*lines)
    return caught.value.problems


def only_problem(*lines: dict[str, Any] | str) -> Problem:
    found = problems(*lines)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


def refusal(*lines: dict[str, Any] | str) -> tuple[int | None, str]:
    """The (line, message) of the one problem a file has."""
    problem = only_problem(*lines)
    return problem.line, problem.message


def check_tree(tree) -> None:
    """Invariants every compiled tree must keep, whatever built it."""
    nodes = tree.nodes
    inverse: list[list[int]] = [[] for _ in nodes]
    for j, node in enumerate(nodes):
        assert not set(node.deps) & set(node.join_deps)
        for d in (*node.deps, *node.join_deps):
            inverse[d].append(j)
    for i, node in enumerate(nodes):
        assert node.history is None or node.history in node.deps, (i, node)
        assert all(0 <= d < len(nodes) for d in (*node.deps, *node.join_deps))
        assert sorted(node.dependents) == inverse[i]
        session = tree.sessions[node.session]
        assert session.first_node + node.turn == i
    assert set(tree.entry) == {i for i, n in enumerate(nodes) if not n.deps and not n.join_deps}
    # Kahn's algorithm visits every node exactly when the dependencies are acyclic.
    waiting = [len(n.deps) + len(n.join_deps) for n in nodes]
    ready, visited = list(tree.entry), 0
    while ready:
        visited += 1
        for j in nodes[ready.pop()].dependents:
            waiting[j] -= 1
            if not waiting[j]:
                ready.append(j)
    assert visited == len(nodes)
    for s, session in enumerate(tree.sessions):
        assert tree.sessions[session.route].route == session.route  # routes name a lineage root
        if session.parent is not None:
            assert session.depth == tree.sessions[session.parent].depth + 1
        assert session.route == s or session.kind == "fork"
    # The records: what each request names as waited for (requests only, each once), and how
    # many records name each request, which the health check counts off.
    sent = [i for i, node in enumerate(nodes) if node.gate is None]
    named = dict.fromkeys(sent, 0)
    for i in sent:
        waited = tree.waited(i)
        assert len(set(waited)) == len(waited) and set(waited) <= named.keys(), (i, waited)
        for d in waited:
            named[d] += 1
    assert named == {i: tree.named_by(i) for i in sent}


def stats(**nonzero: int) -> dict[str, int]:
    """BranchStats with every counter zero but those given."""
    names = (
        "children_spawned children_completed children_errored children_truncated "
        "parents_suspended parents_resumed parents_failed_due_to_child_error joins_suppressed"
    ).split()
    return dict.fromkeys(names, 0) | nonzero


def fork_trees(roots: int = 20):
    """Roots whose one turn forks three children of two turns: one FORK tree per root."""
    lines = []
    for r in range(roots):
        kids = [f"r{r}k{k}" for k in range(3)]
        lines.append(conv(f"r{r}", turn(messages=[user(f"root {r} " * 20)], forks=kids)))
        lines += [conv(kid, turn(), turn()) for kid in kids]
    return lines
