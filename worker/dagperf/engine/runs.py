"""One run of a tree: the mutable state the dispatcher keeps while a root's requests are sent.

The tree itself is shared and immutable; a run copies one dependency counter per node and keeps
one state byte per node and per session, so starting a run costs a list copy, not a rebuild.
"""

from __future__ import annotations

from enum import IntEnum

from dagperf.graph import Tree


class NodeState(IntEnum):
    PENDING = 0  # waiting for dependencies
    READY = 1  # dependencies met; waiting for its delay or for room to send
    ARMED = 2  # sent along with its one dependency: its worker starts it when that succeeds
    SENT = 3
    OK = 4
    FAILED = 5
    SKIPPED = 6  # never sent: a dependency failed, its worker was lost, or the run stopped


class SessionState(IntEnum):
    IDLE = 0  # nothing sent yet
    RUNNING = 1
    COMPLETED = 2
    ERRORED = 3
    TRUNCATED = 4


class TreeTemplate:
    """What every run of one tree starts from, computed once per tree."""

    __slots__ = ("keep", "sizes", "tree", "waiting")

    def __init__(self, tree: Tree):
        self.tree = tree
        self.waiting = [len(n.deps) + len(n.join_deps) for n in tree.nodes]
        keep = [0] * len(tree.nodes)
        for node in tree.nodes:
            if node.history is not None:
                keep[node.history] += 1
        self.keep = keep  # how many nodes continue each node's history
        self.sizes = [s.turn_count for s in tree.sessions]


class TreeRun:
    __slots__ = (
        "correlation",
        "id",
        "index",
        "nodes",
        "open",
        "phase",
        "pins",
        "request_ids",
        "session_open",
        "sessions",
        "suspended",
        "template",
        "waiting",
        "workers",
    )

    def __init__(self, run_id: int, index: int, template: TreeTemplate, phase: int):
        tree = template.tree
        self.id = run_id
        self.index = index  # which tree of the graph
        self.template = template
        self.phase = phase
        self.waiting = list(template.waiting)
        self.nodes = bytearray(len(tree.nodes))
        self.sessions = bytearray(len(tree.sessions))
        self.correlation: list[str | None] = [None] * len(tree.sessions)
        self.request_ids: list[str | None] = [None] * len(tree.nodes)  # once sent
        self.pins: dict[int, str] = {}  # route session -> the worker holding its history
        self.open = len(tree.nodes)  # nodes not yet ended
        # Per session: its nodes not yet ended. A session ends with its last node to end, which
        # in a general graph need not be its last listed one.
        self.session_open = list(template.sizes)
        self.suspended: set[int] = set()  # join nodes whose parent waits on children
        self.workers: set[str] = set()  # every worker that was sent a request of this run

    @property
    def tree(self) -> Tree:
        return self.template.tree
