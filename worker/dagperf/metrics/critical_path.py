"""The critical path of one tree run: the chain of requests that decided when it ended.

Walking back from the request that ended last, each step goes to the dependency (`deps` or
`join_deps`) that ended last, the one that released it, until a request that waited for none.
Along that chain the session's time splits exactly into

- server time: each request's start to its end;
- authored delays: the part of each wait between a dependency's end and the next start that the
  dataset asked for (`delay_ms`);
- dispatch gaps: the rest of those waits, the benchmark's own overhead (routing, queueing for a
  concurrency slot or `max_inflight`, the wire).

Join waits are reported beside them, not in the sum: where the chain reaches a join turn
through a child, the parent waited from its own previous turn's end until that child ended.
That time is already in the child's share; it says how much of the session the agent spent
waiting on its sub-agents.

Times come from the workers' clocks (start, end) and the scheduler's (issue); a negative wait
(clocks of different hosts) counts as zero.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any, NamedTuple

from dagperf.graph import Node, Tree, Waits


class Timing(NamedTuple):  # (not a frozen dataclass: one is made per request, quicker so)
    """One request's times, in ns."""

    issued_ns: int
    start_ns: int
    end_ns: int


class CriticalPath(NamedTuple):
    nodes: tuple[int, ...]  # in order, first to last
    names: tuple[str, ...]  # each as "conversation_id:turn"
    server_ns: int
    delay_ns: int
    dispatch_ns: int
    join_wait_ns: int

    @property
    def total_ns(self) -> int:
        return self.server_ns + self.delay_ns + self.dispatch_ns

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": list(self.names),
            "server_ms": self.server_ns / 1e6,
            "dispatch_ms": self.dispatch_ns / 1e6,
            "delay_ms": self.delay_ns / 1e6,
            "join_wait_ms": self.join_wait_ns / 1e6,
        }


def critical_path(
    tree: Tree, times: dict[int, Timing], start_ns: int, waived: Container[int] = ()
) -> CriticalPath | None:
    """The critical path through the requests in `times` (by node), for a session that began
    at `start_ns`; None when no request has times. `waived`: joins sent without their delay."""
    if not times:
        return None
    nodes = tree.nodes
    # What each request waited for: its own dependencies, or what the gates between (an
    # orchestrator's) stand for.
    waits: Sequence[Node | Waits] = tree.waits if tree.gates else nodes
    chain = list(times)  # one request (most sessions): no dependency of it has times
    if len(chain) > 1:
        chain = [max(times, key=lambda i: times[i].end_ns)]
        while True:
            last = waits[chain[-1]]
            ended = [d for d in (*last.deps, *last.join_deps) if d in times]
            if not ended:
                break
            chain.append(max(ended, key=lambda d: times[d].end_ns))
        chain.reverse()
    server = delay = dispatch = join_wait = 0
    previous_end = start_ns
    for position, i in enumerate(chain):
        span = times[i]
        server += max(0, span.end_ns - span.start_ns)
        wait = max(0, span.start_ns - previous_end)
        asked = 0.0 if i in waived else nodes[i].delay_s
        if tree.gates:
            asked += tree.waits[i].gate_delay_s
        authored = min(wait, int(asked * 1e9))
        delay += authored
        dispatch += wait - authored
        if position and chain[position - 1] in waits[i].join_deps:
            own = [times[d].end_ns for d in waits[i].deps if d in times]
            if own:
                join_wait += max(0, times[chain[position - 1]].end_ns - max(own))
        previous_end = span.end_ns
    names = tuple(
        [f"{tree.sessions[nodes[i].session].conversation_id}:{nodes[i].turn}" for i in chain]
    )
    return CriticalPath(tuple(chain), names, server, delay, dispatch, join_wait)
