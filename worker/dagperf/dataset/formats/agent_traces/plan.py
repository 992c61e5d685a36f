"""One coding-agent trace as the conversations AIPerf 0.13 replays: the main agent, a child per
sub-agent, and a child per agent its flat requests turn out to hold (`chains`).

- The main agent is the root, its requests in the trace's order (in time order when other
  agents were split off). A sub-agent's requests (their times made absolute) are split the same
  way: its first agent is `<trace>::sa:<agent_id>`, any other `<trace>::sa:<agent_id>:<kind>`.
- A sub-agent starts after the last main request before its entry in the list, its first
  request its recorded offset from the entry's `t` after that request ends (a flat agent, the
  offset from its own first request: none). The first later main request whose `t` is at or
  after the sub-agent's recorded end waits for it; with none, it runs in the background.
  Sub-agents (flat agents) with the same start and join are one branch. A sub-agent entry
  before any main request has nothing to start it and is dropped, as AIPerf drops it.
- A request waits, after the one before it in its conversation ends, the idle gap of the
  recording: its `t` less the previous one's `t` and `api_time` (or its own `think_time`, with
  `--use-think-time-only`). A join that finds its children still running goes out when they
  end, its own wait dropped (the engine's rule for a suspended join).

What a trace holds that no replay can have is refused with its path: no requests, two kept
sub-agents of one `agent_id`, or a first request too short in blocks for its system prefix.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from dagperf.dataset.formats.agent_traces import chains
from dagperf.dataset.formats.agent_traces.chains import Indexed
from dagperf.dataset.formats.agent_traces.schema import Call, Subagent, Trace

_EPSILON = 1e-6


class Conversation(NamedTuple):
    session_id: str
    calls: list[Indexed]  # (index in the trace's list, or in its sub-agent's), in turn order
    prefix_tokens: int  # turn 0's system message: tool and system tokens
    path: tuple[str | int, ...]  # where it is in the document, for a problem


class Branch(NamedTuple):
    after: int  # the main turn it starts after
    join: int | None  # the main turn that waits for it
    start_s: float  # its recorded start, which its children's offsets count from
    children: list[Conversation]
    branch_id: str


class Plan(NamedTuple):
    trace_id: str
    main: Conversation
    branches: list[Branch]

    @property
    def conversations(self) -> list[Conversation]:
        return [self.main, *(c for b in self.branches for c in b.children)]


class PlanError(ValueError):
    def __init__(self, path: tuple[str | int, ...], message: str):
        super().__init__(message)
        self.path = path


def plan(trace: Trace) -> Plan:
    """The trace's conversations and branches; a PlanError for what cannot be replayed."""
    if not trace.requests:
        raise PlanError(("requests",), "a trace needs at least one request")
    normals: list[Indexed] = []
    entries: list[tuple[int, Subagent]] = []
    for index, request in enumerate(trace.requests):
        if isinstance(request, Subagent):
            entries.append((index, request))
        else:
            normals.append((index, request))
    prefix = trace.tool_tokens + trace.system_tokens
    main, flats = _split(f"{trace.id}::", normals, prefix, trace.block_size, ("requests",), True)
    main_conversation = Conversation(trace.id, main, prefix, ("requests",))
    position = {index: k for k, (index, _) in enumerate(main)}
    kept = [(i, e) for i, e in entries if any(index < i for index in position)]
    seen: dict[str, int] = {}
    for index, entry in kept:
        if entry.agent_id in seen:
            raise PlanError(
                ("requests", index, "agent_id"),
                f"agent_id '{entry.agent_id}' is also the sub-agent's at "
                f"requests[{seen[entry.agent_id]}]: each sub-agent of a trace has its own",
            )
        seen[entry.agent_id] = index
    branches = _sub_agent_branches(trace, kept, main, position)
    branches += _flat_branches(trace.id, flats, main, position)
    result = Plan(trace.id, main_conversation, branches)
    for conversation in result.conversations:
        _check_prefix(conversation, trace.block_size)
    return result


def _split(
    prefix_of_names: str,
    calls: list[Indexed],
    prefix: int,
    block_size: int,
    path: tuple[str | int, ...],
    keep_order: bool,
) -> tuple[list[Indexed], list[Conversation]]:
    """The main agent's calls and the other agents' conversations, named `<prefix_of_names>
    <kind>:<n>`. With `keep_order` (the trace's own list), a main agent alone keeps the list's
    order; otherwise its calls come in the order detection took them (time order)."""
    if keep_order and len(calls) < 2:
        return calls, []
    preamble, rest = chains.set_aside_preamble(calls)
    found = chains.detect(rest)
    if keep_order and not found.workers:
        return calls, []
    detected = found.agents[found.main].requests if found.agents else []
    main = list(detected)
    if preamble:
        main = sorted(preamble + main, key=lambda item: (item[1].t, item[0]))
    main_first = next((c.hash_ids for _, c in detected if c.hash_ids), [])
    peak = max((c.tokens_in for _, c in detected), default=0)
    model = detected[0][1].model if detected else None
    groups = chains.fan_out_groups(found)
    others = []
    for n, a in enumerate(found.workers):
        calls_of = found.agents[a].requests
        own = [c for _, c in calls_of]
        if chains.is_aux(own, peak, model) or chains.is_reduction(own):
            kind = f"aux:{n:03d}"
        elif a in groups:
            kind = "wg:{:03d}_{:03d}".format(*groups[a])
        else:
            kind = f"fa:{n:03d}"
        opens = _shares_prefix(prefix, block_size, main_first, calls_of[0][1].hash_ids)
        others.append(Conversation(f"{prefix_of_names}{kind}", list(calls_of), opens, path))
    return main, others


def _shares_prefix(prefix: int, block_size: int, base: Sequence[int], first: Sequence[int]) -> int:
    """A split-off agent opens with the declared system prefix only when its first request
    provably starts with the same blocks as the main agent's."""
    blocks = -(-prefix // block_size)
    if blocks and len(first) >= blocks and len(base) >= blocks and first[:blocks] == base[:blocks]:
        return prefix
    return 0


def _sub_agent_branches(
    trace: Trace, kept: list[tuple[int, Subagent]], main: list[Indexed], position: dict[int, int]
) -> list[Branch]:
    grouped: dict[tuple[int, int | None], list[tuple[Subagent, list[Conversation]]]] = {}
    for index, entry in kept:
        after = max(k for i, k in position.items() if i < index)
        join = _join(main, index, _sub_agent_end(entry))
        children = _sub_agent_conversations(trace, index, entry)
        grouped.setdefault((after, join), []).append((entry, children))
    return [
        Branch(
            after,
            join,
            min(entry.t for entry, _ in members),
            [c for _, children in members for c in children if c.calls],
            f"{trace.id}:spawn:{members[0][0].agent_id}",
        )
        for (after, join), members in grouped.items()
    ]


def _sub_agent_conversations(trace: Trace, index: int, entry: Subagent) -> list[Conversation]:
    calls: list[Indexed] = [(k, _absolute(entry, call)) for k, call in enumerate(entry.requests)]
    name = f"{trace.id}::sa:{entry.agent_id}"
    prefix = entry.tool_tokens + entry.system_tokens
    path: tuple[str | int, ...] = ("requests", index, "requests")
    main, others = _split(f"{name}:", calls, prefix, trace.block_size, path, False)
    return [Conversation(name, main, prefix, path), *others]


def _absolute(entry: Subagent, call: Call) -> Call:
    """A sub-agent's call in the trace's time: given before its entry, it counts from it."""
    if call.t + _EPSILON < entry.t:
        return msgspec.structs.replace(call, t=entry.t + call.t)
    return call


def _sub_agent_end(entry: Subagent) -> float:
    if entry.duration_ms is not None:
        return entry.t + max(0.0, entry.duration_ms / 1000.0)
    if entry.requests:
        return max(chains.ends_at(_absolute(entry, call)) for call in entry.requests)
    return entry.t


def _flat_branches(
    trace_id: str, flats: list[Conversation], main: list[Indexed], position: dict[int, int]
) -> list[Branch]:
    grouped: dict[tuple[int, int | None], list[tuple[int, Conversation]]] = {}
    for n, flat in enumerate(flats):
        first = flat.calls[0][0]
        after = max((k for i, k in position.items() if i < first), default=0)
        end = max(chains.ends_at(call) for _, call in flat.calls)
        grouped.setdefault((after, _join(main, first, end)), []).append((n, flat))
    return [
        Branch(
            after,
            join,
            min(flat.calls[0][1].t for _, flat in members),
            [flat for _, flat in members],
            f"{trace_id}:flatspawn:{members[0][0]}",
        )
        for (after, join), members in grouped.items()
    ]


def _join(main: list[Indexed], index: int, end: float) -> int | None:
    """The first main turn after list position `index` that starts at or after `end`."""
    for k, (i, call) in sorted(enumerate(main), key=lambda item: item[1][0]):
        if i > index and call.t + _EPSILON >= end:
            return k
    return None


def _check_prefix(conversation: Conversation, block_size: int) -> None:
    if not conversation.calls or conversation.prefix_tokens <= 0:
        return
    index, first = conversation.calls[0]
    blocks = -(-conversation.prefix_tokens // block_size)
    if blocks > len(first.hash_ids):
        raise PlanError(
            (*conversation.path, index, "hash_ids"),
            f"{len(first.hash_ids)} block ids cannot hold the system prefix of "
            f"{conversation.prefix_tokens} tool and system tokens ({blocks} blocks of "
            f"{block_size}): a replay would fake the prefix the trace measures",
        )


def waits(calls: list[Indexed], think_time_only: bool) -> list[float]:
    """Each call's wait in seconds after the one before it ends (0 for the first): the idle gap
    of the recording, or the call's own think time."""
    out = [0.0]
    for (_, previous), (_, call) in itertools.pairwise(calls):
        if think_time_only and call.think_time is not None:
            out.append(max(0.0, call.think_time))
        else:
            out.append(max(0.0, call.t - previous.t - (previous.api_time or 0.0)))
    return out
