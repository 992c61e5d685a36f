"""The request graph: the one internal model every dataset format compiles into.

A `Tree` is everything one root conversation sends in one full run: its sessions (conversation
instances) and its nodes (one request each). The scheduler runs a tree by counting finished
dependencies; it needs nothing else to get FORK, SPAWN, joins, fan-in or diamonds right, because
the compiler has already turned each of them into edges:

- `deps`: the nodes that must succeed before this one can be sent (the previous turn, the turn
  that spawned this session, or the parents of a general graph); if one fails, this node is not
  sent, and neither is anything that needs it;
- `join_deps`: the nodes that must end, however they end, before this one can be sent (the last
  turns of the children a join waits for): a failed or cut-short child releases its parent;
- `history`: at most one of `deps`, whose context plus captured reply this node's messages are
  appended to (the previous turn, or the FORK parent's turn); None starts a fresh history;
  `keep_reply` False leaves the reply out (the dataset carries its own assistant turns);
- `Session.route`: the session whose routing key this one uses. A FORK child takes its parent's,
  so a whole FORK lineage lands on one worker; roots and SPAWN children route by their own;
- `gate`: set on a node that sends nothing (an orchestrator's spine, AIPerf's request-free
  turns): it waits for its dependencies and its delay like any node, then ends at once, so
  rounds of children can start together and wait for each other without a request between.

Indices are local to a tree, so the scheduler instantiates a tree for each run of its root by
copying one counter per node. A SPAWN target referenced by two parents appears as two sessions:
the file describes a template, the tree what is actually sent. Records are NamedTuples: immutable,
compact, and cheap to build by the hundred thousand.

A graph's `trees` may be built on first use (dag_jsonl's are: a million roots need not be
compiled before the first request); what the run must know of every tree up front is its
`Shape`, which such a compiler gives without building them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import NamedTuple

from dagperf.dataset.specs import SENDS_NOTHING, Gate, Payload

__all__ = [
    "SENDS_NOTHING",
    "Gate",
    "Node",
    "Payload",
    "RequestGraph",
    "Session",
    "SessionKind",
    "Shape",
    "Tree",
]


def with_tools_of(payload: Payload, history: Payload | None) -> Payload:
    """Tools belong to the conversation: a turn that declares none sends those its history
    parent sent (the latest its history declared; a FORK child's, its parent's), as AIPerf's
    endpoints walk back to the latest turn that declared them."""
    if payload.tools is not None or history is None or history.tools is None:
        return payload
    return payload._replace(tools=history.tools)


class SessionKind(StrEnum):
    """How a session began: as a root, or as a FORK or SPAWN child of another session."""

    ROOT = "root"
    FORK = "fork"
    SPAWN = "spawn"


class Session(NamedTuple):
    """One conversation instance within a tree; its nodes are contiguous, one per turn."""

    conversation_id: str
    kind: SessionKind
    branch_id: str | None  # the branch that started it; None for the root
    parent: int | None  # the spawning session; None for the root and pre-session spawns
    depth: int  # agent depth: 0 for the root, parent's + 1 for a child
    route: int  # the session whose routing key this one uses (itself unless FORK)
    first_node: int
    turn_count: int

    @property
    def last_node(self) -> int:
        return self.first_node + self.turn_count - 1


class Node(NamedTuple):
    """One request (or, with `gate`, a point the tree passes without one): who it belongs to,
    what it sends, and what it waits for."""

    session: int
    turn: int
    payload: Payload
    delay_s: float  # waited after the node is ready, before it is sent
    deps: tuple[int, ...]
    join_deps: tuple[int, ...]
    history: int | None
    dependents: tuple[int, ...]  # inverse of both kinds; nodes released together in send order
    keep_reply: bool = True  # False: the live reply is measured, not kept in the history
    gate: Gate | None = None  # set: nothing is sent; the node ends once its delay is over


class Waits(NamedTuple):
    """What a request waited for (`Tree.waits_for`)."""

    deps: tuple[int, ...]
    join_deps: tuple[int, ...]
    gate_delay_s: float  # think times of the gates between, at their median


@dataclass(frozen=True, slots=True)
class Tree:
    """All requests one root sends in a full run; session 0 is the root."""

    sessions: tuple[Session, ...]
    nodes: tuple[Node, ...]
    entry: tuple[int, ...]  # nodes with no dependencies of either kind, in send order
    start_s: float | None = None  # when its root is due on a fixed schedule (trace timestamps)
    gates: int = field(init=False)  # nodes that send nothing
    # With gates, per node: what it waits for seen through them (`waits_for`), and how many
    # requests' records name it as waited for (`named_by`). Without, both follow from the
    # nodes, and nothing is held.
    waits: tuple[Waits, ...] = field(init=False, repr=False, compare=False)
    _named: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        gates = sum(node.gate is not None for node in self.nodes) if self.nodes else 0
        object.__setattr__(self, "gates", gates)
        waits = tuple(self._through_gates(i) for i in range(len(self.nodes))) if gates else ()
        object.__setattr__(self, "waits", waits)
        named = [0] * len(self.nodes) if gates else []
        for i, node in enumerate(self.nodes if gates else ()):
            if node.gate is None:
                for d in self.waited(i):
                    named[d] += 1
        object.__setattr__(self, "_named", tuple(named))

    @property
    def root(self) -> Session:
        return self.sessions[0]

    @property
    def requests(self) -> int:
        """The requests one run of it sends: its nodes but its gates."""
        return len(self.nodes) - self.gates

    def waits_for(self, i: int) -> Waits:
        """The requests node i waits for, seen through the gates between (a gate stands for
        the requests it joined on, or, joining none, for what it waited for itself), and the
        delays of those gates."""
        if self.gates:
            return self.waits[i]
        node = self.nodes[i]
        return Waits(node.deps, node.join_deps, 0.0)

    def _through_gates(self, i: int) -> Waits:
        node = self.nodes[i]
        deps, joins = node.deps, node.join_deps
        if not any(self.nodes[d].gate for d in (*deps, *joins)):
            return Waits(deps, joins, 0.0)
        out_deps: list[int] = []
        out_joins: list[int] = []
        delay = 0.0
        stack = [(d, False) for d in deps] + [(d, True) for d in joins]
        while stack:
            d, joined = stack.pop()
            gate = self.nodes[d]
            if gate.gate is None:
                (out_joins if joined else out_deps).append(d)
                continue
            delay += gate.delay_s
            if gate.join_deps:  # (which may be gates in turn: a spine's spine)
                stack.extend((g, True) for g in gate.join_deps)
            else:
                stack.extend((g, joined) for g in gate.deps)
        return Waits(tuple(sorted(out_deps)), tuple(sorted(out_joins)), delay)

    def gate_wait_s(self, i: int, drawn: Mapping[int, float]) -> float:
        """The longest chain of gate waits between node i and the requests it waits for, each
        gate's as `drawn` (its median where not drawn): with node i's own delay, how long after
        the last of those requests ended it is due."""
        longest: dict[int, float] = {}

        def through(d: int) -> float:
            gate = self.nodes[d]
            if gate.gate is None:
                return 0.0
            if d not in longest:
                before = gate.join_deps or gate.deps
                wait = drawn.get(d, gate.delay_s)
                longest[d] = wait + max((through(g) for g in before), default=0.0)
            return longest[d]

        node = self.nodes[i]
        return max((through(d) for d in (*node.deps, *node.join_deps)), default=0.0)

    def waited(self, i: int) -> tuple[int, ...]:
        """The requests node i's record names as waited for. Seen through gates, one request
        may be reached on two paths (a turn's history, and a gate its turn spawned): it is
        named once."""
        node = self.nodes[i]
        if not self.gates:
            return (*node.deps, *node.join_deps)
        waits = self.waits_for(i)
        return tuple(dict.fromkeys((*waits.deps, *waits.join_deps)))

    def named_by(self, i: int) -> int:
        """How many requests' records will name node i in what they waited for (`waited`)."""
        return self._named[i] if self.gates else len(self.nodes[i].dependents)


@dataclass(frozen=True, slots=True)
class Shape:
    """What is known of every tree of a graph before any runs."""

    sizes: Sequence[int]  # requests per tree, in tree order
    conversations: int  # distinct conversations
    max_depth: int
    fork_children: int  # FORK child sessions started in one full run
    spawn_children: int
    models: frozenset[str | None]  # the models turns name; None: a turn that names none

    @classmethod
    def of(cls, trees: Sequence[Tree]) -> Shape:
        """The shape of trees already built."""
        sessions = [s for tree in trees for s in tree.sessions]
        return cls(
            [tree.requests for tree in trees],
            len({s.conversation_id for s in sessions}),
            max((s.depth for s in sessions), default=0),
            sum(s.kind is SessionKind.FORK for s in sessions),
            sum(s.kind is SessionKind.SPAWN for s in sessions),
            frozenset(n.payload.model for tree in trees for n in tree.nodes if n.gate is None),
        )


class ConversationInput(NamedTuple):
    """A conversation as the dataset authors it: what each of its turns sends, before history."""

    conversation_id: str
    payloads: Sequence[Payload]


@dataclass(frozen=True)
class RequestGraph:
    """Every tree of a dataset; running each once is one full run. `warmup`: trees the dataset
    sends before anything is measured, each once and one at a time (a rag trace's most asked-about
    documents, to fill the server's prefix cache); they are not in the exports or the counts."""

    source: str
    trees: Sequence[Tree]  # may build each tree when it is read, and not keep it
    warmup: tuple[Tree, ...] = ()
    known: Shape | None = None  # given by a compiler whose trees are built when read
    # What the workload's own config asks (a Veeksha config's traffic_scheduler says whether a
    # failure cancels the rest of its session); None when it says nothing. The flag wins.
    cancel_session_on_failure: bool | None = None
    # Every conversation once, with its turns' payloads, in the dataset's order, from a
    # compiler that lists them without building the trees (a pass over a million-line file
    # costs a tenth as much); None: `conversations()` walks the trees.
    listed: Callable[[], Iterator[ConversationInput]] | None = None
    # Whether a run lists the conversations in inputs.json: not a dataset whose prompts are
    # built from block ids as they are sent (an agent trace's: gigabytes of synthetic text,
    # which AIPerf does not write either).
    inputs_json: bool = True

    def conversations(self) -> Iterator[ConversationInput]:
        """Each conversation the trees send, once, with what each of its turns authors (no
        history): the dataset as the endpoint receives it, for `inputs.json`."""
        if self.listed is not None:
            yield from self.listed()
            return
        seen: set[str] = set()
        for tree in self.trees:
            for session in tree.sessions:
                if session.conversation_id not in seen:
                    seen.add(session.conversation_id)
                    nodes = tree.nodes[session.first_node : session.last_node + 1]
                    if sent := [n.payload for n in nodes if n.gate is None]:
                        yield ConversationInput(session.conversation_id, sent)

    @cached_property
    def shape(self) -> Shape:
        return self.known or Shape.of(self.trees)

    @property
    def root_count(self) -> int:
        """The default number of conversations to run: each root once."""
        return len(self.trees)

    @property
    def request_count(self) -> int:
        """Requests in one full run, children included."""
        return sum(self.shape.sizes)

    @property
    def max_depth(self) -> int:
        return self.shape.max_depth

    def child_count(self, kind: SessionKind) -> int:
        """Child sessions of one kind started in one full run."""
        return self.shape.fork_children if kind is SessionKind.FORK else self.shape.spawn_children
