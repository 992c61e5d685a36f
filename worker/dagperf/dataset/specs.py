"""What every loader but dag_jsonl's produces: sessions as small DAGs of requests, with the
payload each request authors. The graph compiler (dagperf.graph.sessions) turns them into request
trees; the types live here, with the loaders, so data flows one way: dataset -> graph -> engine.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

import msgspec

Messages = list[dict[str, Any]]
_decode_messages = msgspec.json.Decoder(Messages).decode


class Payload(NamedTuple):
    """What a node authors for the wire; the worker adds the history and the endpoint's fields.

    The messages are kept as the JSON text of their array, as a dataset line holds them: the
    scheduler forwards those bytes to the worker that sends them, so a large dataset is held as
    bytes rather than as Python objects, and is parsed only by the worker that needs it.
    """

    messages_json: bytes
    model: str | None = None
    max_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None
    verbatim: bool = False  # `extra` is the whole body but the messages: nothing is added
    # Builds the messages when they are sent, in place of `messages_json`: a trace's synthetic
    # prompts are too large to hold for every request of a run (`wire_messages`).
    render: Callable[[], bytes] | None = None

    @classmethod
    def of(
        cls,
        messages: Messages,
        model: str | None = None,
        max_tokens: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
        verbatim: bool = False,
    ) -> Payload:
        """A payload of messages given as objects."""
        return cls(msgspec.json.encode(messages), model, max_tokens, tools, extra, verbatim)

    @property
    def messages(self) -> Messages:
        """The messages as objects, parsed on each call."""
        return decode_messages(self.wire_messages())

    def wire_messages(self) -> bytes:
        """The messages' JSON array as sent."""
        return self.messages_json if self.render is None else self.render()


class Gate(NamedTuple):
    """What marks a point of a graph that sends nothing (an orchestrator's spine): it waits
    its node's delay, or, with `sigma`, a lognormal draw around that median per run and turn,
    clamped to `min_s` and `max_s`."""

    sigma: float | None = None
    min_s: float | None = None
    max_s: float | None = None


SENDS_NOTHING = Gate()


def decode_messages(encoded: bytes) -> Messages:
    return _decode_messages(encoded)


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
    spawns: tuple[Spawn, ...] = ()  # sub-agents it starts (an agent trace's)


class Spawn(NamedTuple):
    """A sub-agent a session starts: `session` begins with a fresh history when node `after`
    of its parent ends (its first node's `wait_s` later), and node `join` of the parent, if
    any, waits until it has ended, however it ended."""

    after: int
    session: SessionSpec
    join: int | None
    branch_id: str


class Known(NamedTuple):
    """What a format that reads its sessions when a run reaches them says of them up front:
    per session, the requests it sends with its sub-agents; and how many sub-agents in all,
    how deep they go, and how many conversations there are."""

    sizes: list[int]
    spawned: int
    depth: int
    conversations: int


@dataclass(frozen=True)
class TraceDataset:
    """What every reader but dag_jsonl's returns: the sessions, in arrival order when timed, and
    the format's default context mode, for `compile_sessions(source, specs, loader_mode)`."""

    specs: Sequence[SessionSpec]  # by start time when timed, else in file order
    loader_mode: ContextMode | None  # the format's default context mode; None: the global one
    timed: bool  # every session has a start_s
    warmup: tuple[SessionSpec, ...] = ()  # sent first, one at a time, never measured (rag's)
    # Set when `specs` reads each session when it is taken (a directory of agent traces, whose
    # prompts are built from their block ids): the run then builds each tree when it reaches
    # it, as dag_jsonl's, and holds only the trees in use.
    known: Known | None = None
    inputs_json: bool = True  # a run lists its conversations in inputs.json


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
