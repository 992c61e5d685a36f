"""A TraceLab session, and the sub-agents found inside it, as the Weka trace AIPerf 0.13 builds:
the form `weka_trace` replays, so both formats put the same requests on the wire.

Every round is a normal call (`"n"`). Its `t` counts from the session's first round (rounded to
the microsecond, as AIPerf rounds it); `think_time` is the gap since the previous round ended.
`in` is `input_tokens_total` and `out` is `output_tokens` plus `reasoning_output_tokens` (the
server generates both), each at least 1. The corpus records no content, only how much of each
prompt the engine had cached (`prefix_tokens`), so the block ids are made up to match: a round's
whole blocks keep as many of the round before's as that prefix covers, and the rest are new.
One counter numbers a trace's blocks, the parent's first, then each sub-agent's in turn; a
sub-agent starts from nothing kept, so parent and child share no block and no prompt text.

A sub-agent's entry goes where its window starts, after the parent's last request that started
by then (its own requests lie inside the window, so none starts before the entry). One with no
such request is not placed, and the caller replays it as a session of its own.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

from dagperf.dataset.formats.agent_traces.schema import Call, Streamed, Subagent, Trace
from dagperf.dataset.formats.tracelab.links import Window
from dagperf.dataset.formats.tracelab.rows import Round, Session

BLOCK_SIZE = 64  # tokens per block id: AIPerf's default (its --isl-block-size changes it)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_id(session_id: str) -> str:
    """A trace or agent id of a session id: each run of other characters one `_`, 150 at most."""
    return _UNSAFE.sub("_", session_id)[:150]


def trace(
    session: Session,
    children: list[tuple[str, Window]],
    sessions: dict[str, Session],
    placed: set[str],
) -> Trace | None:
    """The session's trace with the sub-agents that could be placed in it (added to `placed`);
    None when it has no round with a time."""
    if not session.rounds:
        return None
    t0 = session.rounds[0].sent
    blocks = itertools.count(1)
    calls = _calls(session.rounds, t0, blocks)
    models = list(dict.fromkeys(call.model for call in calls))
    entries: dict[int, list[Subagent]] = {}
    for sid, window in children:
        entry = _sub_agent(sessions[sid], window, t0, blocks)  # numbered, placed or not
        if entry is None:
            continue
        after = max((k for k, call in enumerate(calls) if call.t <= entry.t), default=None)
        if after is None:
            continue
        entries.setdefault(after, []).append(entry)
        placed.add(sid)
        models += [model for model in entry.models if model not in models]
    requests: list[Call | Streamed | Subagent] = []
    for k, call in enumerate(calls):
        requests.append(call)
        requests += sorted(entries.get(k, ()), key=lambda entry: entry.t)
    totals: dict[str, Any] = {
        "rounds": len(calls),
        "subagents": sum(map(len, entries.values())),
        "input_tokens": sum(call.tokens_in for call in calls),
        "output_tokens": sum(call.tokens_out for call in calls),
        "source": "tracelab",
    }
    return Trace(
        id=safe_id(session.sid),
        models=models,
        block_size=BLOCK_SIZE,
        hash_id_scope="local",
        requests=requests,
        totals=totals,
    )


def _sub_agent(child: Session, window: Window, t0: float, blocks: Iterator[int]) -> Subagent | None:
    if not child.rounds:
        return None
    calls = _calls(child.rounds, t0, blocks)
    ended = max(r.sent + (r.api or 0.0) for r in child.rounds)
    return Subagent(
        t=round(window.start - t0, 6),
        agent_id=safe_id(child.sid),
        subagent_type=calls[0].model,  # the call's arguments named it; the corpus strips them
        status="completed" if ended <= window.end else "incomplete",
        requests=calls,
        models=list(dict.fromkeys(call.model for call in calls)),
        duration_ms=window.duration_ms,
        total_tokens=sum(call.tokens_in + call.tokens_out for call in calls),
        tool_use_count=sum(len(row.tools or ()) for _, row in child.rows),
    )


def _calls(rounds: list[Round], t0: float, blocks: Iterator[int]) -> list[Call | Streamed]:
    """The rounds as calls timed from `t0`, their block ids drawn from `blocks`; the first
    waits on nothing (`think_time` None)."""
    calls: list[Call | Streamed] = []
    ids: list[int] = []
    ended: float | None = None
    for sent, api, row in rounds:
        total = row.input_tokens_total or 0
        whole = total // BLOCK_SIZE
        kept = min(min(row.prefix_tokens or 0, total) // BLOCK_SIZE, len(ids), whole)
        ids = ids[:kept] + list(itertools.islice(blocks, whole - kept))
        t = sent - t0
        think = None if ended is None else max(t - ended, 0.0)
        ended = t + (api or 0.0)
        tool_call = any(e.event_type == "tool_call" for e in row.timing_events or ())
        calls.append(
            Call(
                t=round(t, 6),
                model=row.model or "unknown",
                tokens_in=max(total, 1),
                tokens_out=max((row.output_tokens or 0) + (row.reasoning_output_tokens or 0), 1),
                hash_ids=ids,
                input_types=[
                    "tool_result" if row.first_input_event_type == "tool_result" else "text"
                ],
                output_types=["text"],
                stop="tool_use" if tool_call else "end_turn",
                api_time=None if api is None else round(api, 6),
                think_time=None if think is None else round(think, 6),
            )
        )
    return calls
