"""One run of a tree: the mutable state the dispatcher keeps while a root's requests are sent.

The tree itself is shared and immutable; a run copies one dependency counter per node and keeps
one state byte per node and per session, so starting a run costs a list copy, not a rebuild.

A failed request skips what needs it, and a join waits for its children however they end. Under
--cancel-session-on-failure (Veeksha's `cancel_session_on_failure`, where a session is what
dagperf calls a tree) the first failed request cancels its whole run instead: every node not yet
on the wire is skipped at once, wherever it waits (dependencies, its delay, the send queue), so
no join fires and no child starts; what is in flight still ends and is recorded, and nodes armed
with it are taken back by the dispatcher. The run ends when its last flight does, and its root's
load slot frees when the root has nothing left in flight.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from enum import IntEnum
from typing import NamedTuple

from dagperf.engine.branch_stats import BranchStats
from dagperf.graph import SessionKind, Tree


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

    __slots__ = ("armable", "keep", "keeps_history", "sizes", "tree", "waiting")

    def __init__(self, tree: Tree):
        self.tree = tree
        self.waiting = [len(n.deps) + len(n.join_deps) for n in tree.nodes]
        keep = [0] * len(tree.nodes)
        for node in tree.nodes:
            if node.history is not None:
                keep[node.history] += 1
        self.keep = keep  # how many nodes continue each node's history
        self.keeps_history = any(keep)  # a worker holds some of a run's context while it runs
        self.sizes = [s.turn_count for s in tree.sessions]
        self.armable = [_armable(tree, i) for i in range(len(tree.nodes))]


class Templates:
    """Each tree's template, built when a run of it first starts and kept for later runs, up to
    `limit` trees (the least recently started go first): a graph whose trees are built when
    read then costs memory for the trees in use, not for the dataset."""

    def __init__(self, trees: Sequence[Tree], limit: int = 8192):
        self._trees = trees
        self._limit = limit
        self._kept: OrderedDict[int, TreeTemplate] = OrderedDict()

    def __len__(self) -> int:
        return len(self._trees)

    def __getitem__(self, index: int) -> TreeTemplate:
        template = self._kept.get(index)
        if template is not None:
            self._kept.move_to_end(index)
            return template
        template = self._kept[index] = TreeTemplate(self._trees[index])
        if len(self._kept) > self._limit:
            self._kept.popitem(last=False)
        return template


def _armable(tree: Tree, i: int) -> tuple[int, ...]:
    """The nodes that node i alone releases, continuing its history on its route with no
    delay: they can go out with it, armed, and start on its worker when it succeeds."""
    route = tree.sessions[tree.nodes[i].session].route
    return tuple(
        j
        for j in tree.nodes[i].dependents
        if (node := tree.nodes[j]).deps == (i,)
        and not node.join_deps
        and node.history == i
        and node.delay_s == 0
        and node.gate is None
        and tree.sessions[node.session].route == route
    )


class Ending(NamedTuple):
    """What ending a node led to within its run."""

    ready: list[int]  # nodes whose dependencies are now met, in the order they became so
    skipped: int  # nodes skipped because what they needed failed
    root_ended: bool  # the root session's last node ended: its load slot frees
    failed_child: tuple[int, int] | None  # (session, node) of a child that failed: --fail-fast
    cancelled: bool  # this ending cancelled the run: its armed nodes must be taken back


class TreeRun:
    __slots__ = (
        "cancel_on_failure",
        "cancelled",
        "correlation",
        "drawn",
        "id",
        "index",
        "measured",
        "nodes",
        "open",
        "phase",
        "pins",
        "request_ids",
        "session_open",
        "sessions",
        "suspended",
        "template",
        "tree",
        "waiting",
        "waived",
        "workers",
    )

    def __init__(
        self,
        run_id: int,
        index: int,
        template: TreeTemplate,
        phase: int,
        cancel_on_failure: bool = False,
    ):
        tree = template.tree
        self.id = run_id
        self.index = index  # which tree of the graph
        self.template = template
        self.tree = tree  # the template's, read for every result
        self.phase = phase
        self.cancel_on_failure = cancel_on_failure
        self.cancelled = False  # a failed request cancelled the rest (cancel_on_failure)
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
        self.waived: set[int] = set()  # joins sent without their delay (`Outgoing.ready`)
        self.drawn: dict[int, float] = {}  # gate -> the seconds it waited, as drawn (`ready`)
        self.workers: set[str] = set()  # every worker that was sent a request of this run
        self.measured = False  # started while the profiling's window was open (`window`)

    def settle_session(
        self, s: int, state: NodeState, cancelled: bool, ended: bool, stats: BranchStats
    ) -> bool:
        """A node of session s ended in `state`; `ended` when it was the session's last.
        Returns True when a child session failed (not skipped, not cancelled): --fail-fast's
        cue."""
        current = self.sessions[s]
        if current >= SessionState.COMPLETED or current == SessionState.IDLE:
            return False  # already settled, or never started (a branch never spawned)
        child = self.tree.sessions[s].kind is not SessionKind.ROOT
        if state == NodeState.OK:
            if ended:
                self.sessions[s] = SessionState.COMPLETED
                stats.children_completed += child
        elif cancelled:
            self.sessions[s] = SessionState.TRUNCATED
            stats.children_truncated += child
        else:
            self.sessions[s] = SessionState.ERRORED
            stats.children_errored += child
            return child and state == NodeState.FAILED
        return False

    def truncate(self, stats: BranchStats) -> None:
        """The phase ended with this run still open: what runs was cut short."""
        for s, state in enumerate(self.sessions):
            if state == SessionState.RUNNING:
                self.sessions[s] = SessionState.TRUNCATED
                stats.children_truncated += self.tree.sessions[s].kind is not SessionKind.ROOT
        stats.joins_suppressed += len(self.suspended)
        self.suspended.clear()

    def fail_child(self, s: int, i: int, stats: BranchStats) -> str:
        """Session s failed at node i and fails the run (--fail-fast): its parent's join will
        never fire, so it counts as failed, not suppressed (unless this failure cancelled the
        run, whose `_cancel` counts it). Returns where, for the message."""
        session = self.tree.sessions[s]
        stats.parents_failed_due_to_child_error += not self.cancelled
        if session.parent is not None:
            parent = self.tree.sessions[session.parent]
            self.suspended -= set(range(parent.first_node, parent.last_node + 1))
        return f"'{session.conversation_id}' turn {i - session.first_node}"

    def start(self, i: int, stats: BranchStats, worker: str | None = None) -> None:
        """Node i is on the wire, on `worker`, or is a gate whose wait is over: its session
        runs, a suspended parent resumes."""
        s = self.tree.nodes[i].session
        if self.sessions[s] == SessionState.IDLE:
            self.sessions[s] = SessionState.RUNNING
            stats.children_spawned += self.tree.sessions[s].kind is not SessionKind.ROOT
        if i in self.suspended:
            self.suspended.discard(i)
            stats.parents_resumed += 1
        self.nodes[i] = NodeState.SENT
        if worker is not None:
            self.workers.add(worker)

    def end(self, first: int, state: NodeState, cancelled: bool, stats: BranchStats) -> Ending:
        """End a node, release or skip what depends on it, and settle the sessions that ends.
        A join waits for its `join_deps` however they end; other dependencies must succeed."""
        tree = self.tree
        ready: list[int] = []
        skipped = 0
        root_ended = False
        failed_child = None
        cancelling = state == NodeState.FAILED and self.cancel_on_failure and not cancelled
        cancelling = cancelling and not self.cancelled
        stack = self._cancel(first, stats) if cancelling else []
        stack.append((first, state))  # on top: the failed session settles as errored first
        while stack:
            i, state = stack.pop()
            self.nodes[i] = state
            self.open -= 1
            self.suspended.discard(i)
            node = tree.nodes[i]
            skipped += state == NodeState.SKIPPED and node.gate is None
            self.session_open[node.session] -= 1
            ended = not self.session_open[node.session]
            cut = cancelled or (self.cancelled and i != first)  # cut short, not errored
            if self.settle_session(node.session, state, cut, ended, stats):
                failed_child = failed_child or (node.session, i)
            root_ended = root_ended or (node.session == 0 and ended)
            for j in node.dependents:
                if self.nodes[j] != NodeState.PENDING:
                    continue
                waiter = tree.nodes[j]
                if self.cancelled or (state != NodeState.OK and i not in waiter.join_deps):
                    self.nodes[j] = NodeState.SKIPPED  # now: a later path to it must not add it
                    stack.append((j, NodeState.SKIPPED))
                    continue
                self.waiting[j] -= 1
                if not self.waiting[j]:
                    ready.append(j)
                elif state == NodeState.OK and waiter.session == node.session and waiter.join_deps:
                    self.suspended.add(j)  # the parent reached its join; children still running
                    stats.parents_suspended += 1
        return Ending(ready, skipped, root_ended, failed_child, cancelling)

    def _cancel(self, failed: int, stats: BranchStats) -> list[tuple[int, NodeState]]:
        """Node `failed` failed and cancels the run: every node waiting to be sent (pending,
        or ready behind its delay or in the send queue) is skipped, marked now so a queue or a
        timer that still holds it passes it by. No join fires: the failed child's parent, if
        it had more to send, fails with it; any other parent waiting at a join is suppressed."""
        self.cancelled = True
        sessions = self.tree.sessions
        parent = sessions[self.tree.nodes[failed].session].parent
        if parent is not None and self.session_open[parent]:
            stats.parents_failed_due_to_child_error += 1
            self.suspended -= set(
                range(sessions[parent].first_node, sessions[parent].last_node + 1)
            )
        stats.joins_suppressed += len(self.suspended)
        self.suspended.clear()
        waiting = [i for i, s in enumerate(self.nodes) if s <= NodeState.READY]
        for i in waiting:
            self.nodes[i] = NodeState.SKIPPED
        return [(i, NodeState.SKIPPED) for i in waiting]

    def unsent(self) -> int:
        """Requests that ended without being sent (a dependency failed, or the run was
        cancelled)."""
        skipped = self.nodes.count(NodeState.SKIPPED)
        if skipped and self.tree.gates:
            nodes = self.tree.nodes
            skipped -= sum(
                s == NodeState.SKIPPED and nodes[i].gate is not None
                for i, s in enumerate(self.nodes)
            )
        return skipped

    def unpin(self, worker: str) -> list[int]:
        """`worker` is lost, and the histories it held: unpin its routes and return the nodes
        not yet sent that would have needed them."""
        routes = {route for route, held_by in self.pins.items() if held_by == worker}
        if not routes:
            return []
        for route in routes:
            del self.pins[route]
        sessions = self.tree.sessions
        return [
            i
            for i, node in enumerate(self.tree.nodes)
            if sessions[node.session].route in routes and self.nodes[i] < NodeState.SENT
        ]
