"""Which agent sent each request of a coding-agent trace, told by block ids as AIPerf 0.13 tells.

A capture may flatten several agents (a workflow's workers, a headerless sub-agent, a one-shot
tool call) into one list of requests. Their prompts say whose they are: an agent's next request
extends its own last prompt. Requests are taken in time order; each one either extends the
agent whose last prompt is a whole prefix of its own, ended by then, on the same model (the
deepest such agent), or starts a new agent forked from the one it shares the longest prefix
with. A request without block ids stays with the main agent. A fork that a context edit made
(a compaction: the same agent, its prompt shorter) is then spliced back: for each request that
is still the last of its agent, the deepest later fork from it on the same model that starts
after it ended continues that agent, unless it starts over an hour later sharing under half of
its blocks. The agent of the earliest request is the main one (a leading title-generation call
that shares no prefix with anything is set aside first, and rejoins the main agent).

The other agents become child conversations named as AIPerf names them: `aux` for a one-shot
side call (on another model, or on a small fresh context, or a large-in short-out reduction),
`wg` for members of a fan-out (three or more forked from one request and running at once),
`fa` for the rest.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from dagperf.dataset.formats.agent_traces.schema import Call

_EPSILON = 1e-6
SEAM_MAX_GAP_S = 3600.0
SEAM_MIN_OVERLAP = 0.5
AUX_MAX_REQUESTS = 1
AUX_ISL_RATIO = 0.10
AUX_ISL_FLOOR = 16384
REDUCTION_OSL_MAX = 4000
REDUCTION_RATIO = 20.0
GROUP_MIN = 3
TITLE_MAX_OUTPUT = 64  # a leading call this short is a title or one-shot, not a turn


Indexed = tuple[int, Call]  # (its index in the trace's request list, the request)


def ends_at(call: Call) -> float:
    duration = call.api_time if call.api_time is not None and math.isfinite(call.api_time) else 0
    return call.t + max(duration, 0.0)


@dataclass(slots=True)
class Fork:
    parent: int | None  # the agent forked from; None: no shared context
    source: int | None  # that agent's last request then (its index in the trace)
    depth: int  # blocks shared with it
    at: float  # when the fork's first request started


@dataclass(slots=True)
class Agent:
    requests: list[Indexed] = field(default_factory=list)
    fork: Fork | None = None
    spliced_into: int | None = None
    tail: int = -1  # its last request with block ids (index in the trace)
    tail_ids: NDArray[np.int64] = field(default_factory=lambda: np.empty(0, np.int64))
    tail_end: float = 0.0
    tail_model: str = ""


@dataclass(slots=True)
class Agents:
    agents: list[Agent]
    main: int
    workers: list[int]  # the other live agents, by their first request


def as_array(ids: list[int]) -> NDArray[np.int64]:
    """Block ids as an array (by way of array('q'): a C loop, three times numpy's own)."""
    return np.frombuffer(array("q", ids), np.int64)


def prefix(a: NDArray[np.int64], b: NDArray[np.int64]) -> int:
    n = min(a.shape[0], b.shape[0])
    if not n:
        return 0
    differ = a[:n] != b[:n]
    i = int(differ.argmax())
    return i if differ[i] else n


def set_aside_preamble(calls: list[Indexed]) -> tuple[list[Indexed], list[Indexed]]:
    """The earliest call, when it shares no prefix with any other and is short or shares no
    block at all (a title generation, a one-shot), apart from the rest (in trace order)."""
    if len(calls) < 2:
        return [], calls
    ordered = sorted(calls, key=lambda item: (item[1].t, item[0]))
    (index, first), rest = ordered[0], ordered[1:]
    if not first.hash_ids:
        return [], calls
    mine = as_array(first.hash_ids)
    for _, other in rest:
        if other.hash_ids and prefix(mine, as_array(other.hash_ids)) > 0:
            return [], calls
    if first.tokens_out > TITLE_MAX_OUTPUT:
        seen = {h for _, other in rest for h in other.hash_ids}
        if not seen.isdisjoint(first.hash_ids):
            return [], calls
    return [(index, first)], sorted(rest, key=lambda item: item[0])


def detect(calls: list[Indexed]) -> Agents:
    """Split requests into agents (phase one in time order, then the seams spliced back)."""
    if not calls:
        return Agents([], 0, [])
    ordered = sorted(calls, key=lambda item: (item[1].t, item[0]))
    state = _Pass()
    for index, call in ordered:
        state.place(index, call)
    agents = state.agents
    _splice_seams(agents, state)
    alias = {i: a.spliced_into for i, a in enumerate(agents) if a.spliced_into is not None}

    def live(i: int) -> int:
        while i in alias:
            i = alias[i]
        return i

    for agent in agents:
        if agent.spliced_into is None and agent.fork is not None and agent.fork.parent is not None:
            agent.fork.parent = live(agent.fork.parent)
    main = live(state.agent_of[ordered[0][0]])
    workers = [i for i, a in enumerate(agents) if a.spliced_into is None and i != main]
    workers.sort(key=lambda i: (agents[i].requests[0][1].t, agents[i].requests[0][0]))
    return Agents(agents, main, workers)


@dataclass(slots=True)
class _Pass:
    agents: list[Agent] = field(default_factory=list)
    agent_of: dict[int, int] = field(default_factory=dict)
    forks_of: dict[int, list[int]] = field(default_factory=dict)  # by source request
    calls: dict[int, Call] = field(default_factory=dict)

    def append(self, a: int, index: int, call: Call, ids: NDArray[np.int64]) -> None:
        agent = self.agents[a]
        agent.requests.append((index, call))
        self.agent_of[index] = a
        if call.hash_ids:
            agent.tail, agent.tail_end, agent.tail_model = index, ends_at(call), call.model
            agent.tail_ids = ids

    def place(self, index: int, call: Call) -> None:
        self.calls[index] = call
        if not self.agents:
            self.agents.append(Agent())
        if not call.hash_ids:  # no evidence: the main agent's, seen by no one
            self.agents[0].requests.append((index, call))
            self.agent_of[index] = 0
            return
        ids = as_array(call.hash_ids)
        if (extended := self._extended(ids, call)) is not None:
            self.append(extended, index, call, ids)
            return
        parent, depth = self._deepest(ids)
        if parent is None and all(a.tail_ids.shape[0] == 0 for a in self.agents):
            self.append(0, index, call, ids)  # the first request with ids is the main agent's
            return
        source = self.agents[parent].tail if parent is not None else None
        self.agents.append(Agent(fork=Fork(parent, source, depth, call.t)))
        self.append(len(self.agents) - 1, index, call, ids)
        if source is not None and depth > 0:
            self.forks_of.setdefault(source, []).append(len(self.agents) - 1)

    def _extended(self, ids: NDArray[np.int64], call: Call) -> int | None:
        best, best_length = None, -1
        for i, agent in enumerate(self.agents):
            length = agent.tail_ids.shape[0]
            if not length or length > ids.shape[0] or length <= best_length:
                continue
            if agent.tail_model != call.model or agent.tail_end > call.t + _EPSILON:
                continue
            if bool((ids[:length] == agent.tail_ids).all()):
                best, best_length = i, length
        return best

    def _deepest(self, ids: NDArray[np.int64]) -> tuple[int | None, int]:
        best, best_key = None, (0, 0)
        for i, agent in enumerate(self.agents):
            if not agent.tail_ids.shape[0]:
                continue
            depth = prefix(agent.tail_ids, ids)
            if depth and (depth, agent.tail_ids.shape[0]) > best_key:
                best, best_key = i, (depth, agent.tail_ids.shape[0])
        return best, best_key[0]


def _last_with_ids(agent: Agent) -> int | None:
    return next((index for index, call in reversed(agent.requests) if call.hash_ids), None)


def _splice_seams(agents: list[Agent], state: _Pass) -> None:
    """Splice each continuation back onto its agent, earliest source request first; a splice
    moves the agent's last request, whose leftover forks are weighed against it again."""
    alias: dict[int, int] = {}

    def live(i: int) -> int:
        while i in alias:
            i = alias[i]
        return i

    sources = sorted(state.forks_of)
    heapq.heapify(sources)
    done: set[int] = set()
    while sources:
        source = heapq.heappop(sources)
        if source in done:
            continue
        done.add(source)
        owner = live(state.agent_of[source])
        if _last_with_ids(agents[owner]) != source:
            continue  # the agent went on past it: its forks are agents of their own
        candidates = [c for c in state.forks_of[source] if agents[c].spliced_into is None]
        chosen = _continuation(agents, candidates, state.calls[source])
        if chosen is None:
            continue
        agents[owner].requests.extend(agents[chosen].requests)
        for index, _ in agents[chosen].requests:
            state.agent_of[index] = owner
        agents[chosen].spliced_into = owner
        alias[chosen] = owner
        new_tail = _last_with_ids(agents[owner])
        if new_tail is not None and _rekey(agents, state, candidates, chosen, owner, new_tail):
            done.discard(new_tail)
            heapq.heappush(sources, new_tail)


def _continuation(agents: list[Agent], candidates: list[int], source: Call) -> int | None:
    end, blocks = ends_at(source), len(source.hash_ids)

    def eligible(c: int) -> bool:
        fork, first = agents[c].fork, agents[c].requests[0][1]
        if fork is None or fork.depth <= 0 or end > first.t + _EPSILON:
            return False
        if first.model != source.model:
            return False
        far = blocks and first.t - end > SEAM_MAX_GAP_S
        return not (far and fork.depth / blocks < SEAM_MIN_OVERLAP)

    eligible_ones = [c for c in candidates if eligible(c)]
    if not eligible_ones:
        return None
    return max(eligible_ones, key=lambda c: (agents[c].fork.depth, -agents[c].fork.at, -c))  # type: ignore[union-attr]


def _rekey(
    agents: list[Agent], state: _Pass, candidates: list[int], chosen: int, owner: int, tail: int
) -> bool:
    tail_ids = as_array(state.calls[tail].hash_ids)
    moved = False
    for c in candidates:
        agent = agents[c]
        if c == chosen or agent.spliced_into is not None or agent.fork is None:
            continue
        depth = prefix(tail_ids, as_array(agent.requests[0][1].hash_ids))
        if depth <= 0:
            continue
        agent.fork.source, agent.fork.depth, agent.fork.parent = tail, depth, owner
        state.forks_of.setdefault(tail, []).append(c)
        moved = True
    return moved


def is_aux(calls: Sequence[Call], main_peak_in: int, main_model: str | None) -> bool:
    """A one-shot side call: one request, on another model or a small fresh context."""
    if not calls or len(calls) > AUX_MAX_REQUESTS:
        return False
    if main_model is not None and calls[0].model != main_model:
        return True
    return calls[0].tokens_in < max(AUX_ISL_FLOOR, int(AUX_ISL_RATIO * main_peak_in))


def is_reduction(calls: Sequence[Call]) -> bool:
    """A one-shot reduction: a large input summarised into a short output."""
    if len(calls) != 1:
        return False
    out, tokens_in = calls[0].tokens_out, calls[0].tokens_in
    if out <= 0 or out >= REDUCTION_OSL_MAX or tokens_in < AUX_ISL_FLOOR:
        return False
    return tokens_in > REDUCTION_RATIO * out


def fan_out_groups(found: Agents) -> dict[int, tuple[int, int]]:
    """Each member of a fan-out (`GROUP_MIN` or more agents forked with shared context from one
    request whose runs overlap) as (group, member), groups by their earliest start."""
    buckets: dict[tuple[int, int], list[tuple[float, float, int, int]]] = {}
    for a in found.workers:
        agent = found.agents[a]
        fork = agent.fork
        if fork is None or fork.depth <= 0 or fork.parent is None or fork.source is None:
            continue
        start = agent.requests[0][1].t
        end = max(ends_at(call) for _, call in agent.requests)
        key = (fork.parent, fork.source)
        buckets.setdefault(key, []).append((start, end, agent.requests[0][0], a))
    components = [c for bucket in buckets.values() for c in _overlapping(bucket)]
    groups = sorted(
        (c for c in components if len(c) >= GROUP_MIN),
        key=lambda c: min((m[0], m[2]) for m in c),
    )
    out = {}
    for g, members in enumerate(groups):
        for m, (_, _, _, a) in enumerate(sorted(members, key=lambda m: (m[0], m[2]))):
            out[a] = (g, m)
    return out


def _overlapping(
    spans: list[tuple[float, float, int, int]],
) -> list[list[tuple[float, float, int, int]]]:
    """The connected components of overlapping [start, end) spans (touching ones do not)."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i][0], spans[i][2]))
    root = list(range(len(spans)))

    def find(x: int) -> int:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    active: list[tuple[float, int]] = []
    for i in order:
        while active and active[0][0] <= spans[i][0]:
            heapq.heappop(active)
        if active:
            root[find(i)] = find(active[0][1])
        heapq.heappush(active, (spans[i][1], i))
    components: dict[int, list[tuple[float, float, int, int]]] = {}
    for i, span in enumerate(spans):
        components.setdefault(find(i), []).append(span)
    return list(components.values())
