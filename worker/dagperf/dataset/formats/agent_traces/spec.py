"""A planned trace as the session graph the run sends: the main agent's conversation with its
sub-agents as spawns, each request's messages built from its block ids when it is sent.

Every conversation's requests are sent as written (`message_array_with_responses`): each holds
the whole buffer of its turn (`buffer`), so nothing is accumulated on a worker and the server's
replies are measured, not kept. A request asks for its recorded reply length (`max_tokens`, at
least 1). Blocks are keyed by the trace's id, so its agents share text where they share ids and
two traces never do; a turn's synthetic tail is keyed by its conversation and turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import msgspec

from dagperf.dataset.coding_corpus import Blocks
from dagperf.dataset.formats.agent_traces.buffer import Request, Segment, conversation_messages
from dagperf.dataset.formats.agent_traces.plan import Conversation, Plan, waits
from dagperf.dataset.specs import ContextMode, GraphNode, Payload, SessionSpec, Spawn

AS_WRITTEN = ContextMode.MESSAGE_ARRAY_WITH_RESPONSES


def session(plan: Plan, blocks: Blocks, block_size: int, think_time_only: bool) -> SessionSpec:
    """The trace's root session, its sub-agents spawned from it."""
    spawns = [
        Spawn(
            branch.after,
            _conversation(
                child,
                plan.trace_id,
                blocks,
                block_size,
                think_time_only,
                max(0.0, child.calls[0][1].t - branch.start_s),
            ),
            branch.join,
            branch.branch_id,
        )
        for branch in plan.branches
        for child in branch.children
    ]
    root = _conversation(plan.main, plan.trace_id, blocks, block_size, think_time_only, 0.0)
    return root._replace(spawns=tuple(spawns))


def _conversation(
    conversation: Conversation,
    scope: str,
    blocks: Blocks,
    block_size: int,
    think_time_only: bool,
    first_wait_s: float,
) -> SessionSpec:
    calls = [call for _, call in conversation.calls]
    requests = [Request(c.hash_ids, c.tokens_in, c.tokens_out) for c in calls]
    messages = conversation_messages(requests, block_size, conversation.prefix_tokens)
    ids = [c.hash_ids for c in calls]
    render = partial(_render, blocks, scope, conversation.session_id, ids, block_size)
    waited = waits(conversation.calls, think_time_only)
    waited[0] = first_wait_s
    nodes = tuple(
        GraphNode(
            str(k),
            Payload(b"", max_tokens=max(call.tokens_out, 1), render=partial(render, segments)),
            parents=(k - 1,) if k else (),
            wait_s=waited[k],
        )
        for k, (call, segments) in enumerate(zip(calls, messages, strict=True))
    )
    return SessionSpec(conversation.session_id, nodes, AS_WRITTEN)


def _render(
    blocks: Blocks,
    scope: str,
    name: str,
    ids: Sequence[Sequence[int]],
    block_size: int,
    segments: Sequence[Segment],
) -> bytes:
    """The messages of one request: each segment's blocks, then its synthetic tail."""
    messages = []
    for segment in segments:
        units: list[object] = []
        for key in ids[segment.turn][segment.start : segment.start + segment.blocks]:
            units.extend(blocks.block(scope, key, block_size))
        if segment.tail:
            units.extend(blocks.tail(f"{name}:turn_{segment.turn}", segment.tail))
        messages.append({"role": segment.role, "content": blocks.text(units)})
    return msgspec.json.encode(messages)
