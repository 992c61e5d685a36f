"""A session with the sub-agents it starts (an agent trace's), as one request tree.

The session is the tree's root; each `Spawn` lays out its sub-agent after it as a SPAWN child: a
session of its own (routed by itself, its history fresh), at depth one below its parent, whose
first nodes wait for the parent's node `after` and then their own `wait_s` (the sub-agent's
recorded start). The parent's node `join`, if any, waits for the sub-agent's last nodes however
they end; without one the sub-agent runs in the background and its root's load slot frees with
the root's own last node, as a fire-and-forget SPAWN does. Sub-agents may start sub-agents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dagperf.dataset.specs import ContextMode, SessionSpec
from dagperf.graph.model import Node, Session, SessionKind, Tree, with_tools_of


@dataclass(slots=True)
class _Draft:
    session: int
    turn: int
    spec_index: int  # the node's index in its session's spec
    deps: list[int]
    history: int | None
    join_deps: list[int] = field(default_factory=list)


@dataclass(slots=True)
class _Layout:
    mode_of: Callable[[SessionSpec], ContextMode]
    sessions: list[Session] = field(default_factory=list)
    specs: list[SessionSpec] = field(default_factory=list)
    modes: list[ContextMode] = field(default_factory=list)
    drafts: list[_Draft] = field(default_factory=list)

    def add(
        self,
        spec: SessionSpec,
        kind: SessionKind,
        parent: int | None,
        depth: int,
        branch: str | None,
        after: int | None,
    ) -> list[int]:
        """Lay out a session and what it spawns; returns its last nodes (those no other node
        of it waits for), which a join waits for."""
        mode = self.mode_of(spec)
        s, first = len(self.sessions), len(self.drafts)
        self.sessions.append(
            Session(spec.session_id, kind, branch, parent, depth, s, first, len(spec.nodes))
        )
        self.specs.append(spec)
        self.modes.append(mode)
        keeps = mode is not ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
        waited_for: set[int] = set()
        for k, node in enumerate(spec.nodes):
            deps = [first + p for p in node.parents]
            if not deps and after is not None:
                deps = [after]
            history = first + node.history if keeps and node.history is not None else None
            self.drafts.append(_Draft(s, k, k, deps, history))
            waited_for.update(node.parents)
        for spawn in spec.spawns:
            ends = self.add(
                spawn.session, SessionKind.SPAWN, s, depth + 1, spawn.branch_id, first + spawn.after
            )
            if spawn.join is not None:
                self.drafts[first + spawn.join].join_deps.extend(ends)
        return [first + k for k in range(len(spec.nodes)) if k not in waited_for]

    def tree(self, start_s: float | None) -> Tree:
        dependents: list[list[int]] = [[] for _ in self.drafts]
        for i, draft in enumerate(self.drafts):
            for dep in (*draft.deps, *draft.join_deps):
                dependents[dep].append(i)
        nodes: list[Node] = []
        for i, d in enumerate(self.drafts):
            spec_node = self.specs[d.session].nodes[d.spec_index]
            history = None if d.history is None else nodes[d.history].payload
            nodes.append(
                Node(
                    d.session,
                    d.turn,
                    with_tools_of(spec_node.payload, history),
                    spec_node.wait_s,
                    tuple(d.deps),
                    tuple(d.join_deps),
                    d.history,
                    tuple(dependents[i]),
                    self.modes[d.session] is not ContextMode.DELTAS_WITH_RESPONSES,
                )
            )
        entry = tuple(i for i, d in enumerate(self.drafts) if not d.deps and not d.join_deps)
        return Tree(tuple(self.sessions), tuple(nodes), entry, start_s)


def agent_tree(spec: SessionSpec, mode_of: Callable[[SessionSpec], ContextMode]) -> Tree:
    """The tree of a session and its sub-agents; `mode_of` gives a session's context mode."""
    layout = _Layout(mode_of)
    layout.add(spec, SessionKind.ROOT, None, 0, None, None)
    return layout.tree(spec.start_s)
