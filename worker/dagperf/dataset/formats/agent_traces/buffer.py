"""The messages a coding-agent trace's request sends, rebuilt from its block ids as AIPerf 0.13
rebuilds them, so both tools put the same structure on the wire.

A trace records, per request, the ids of the KV-cache blocks of its prompt (`hash_ids`, one per
`block_size` tokens), its length (`in`) and its reply's (`out`); never the text. A conversation
is a buffer of role segments, each a run of blocks, the last maybe followed by synthetic tokens
(the prompt's part past its recorded blocks, keyed by conversation and turn). Turn 0 is the
system prefix (the trace's tool and system tokens, rounded up to blocks) and a user segment.
Each later turn cuts the buffer back to the blocks it shares with the turn before (their longest
common prefix; a cut inside a segment keeps its whole blocks, a cut at a segment's end drops its
synthetic tail), then appends the new blocks: as many as the previous reply's length fills go to
an assistant segment (the reply is never sent back: it is synthetic text standing in for it),
the rest and the new tail to a user segment. A turn always ends on a user message when it adds
anything; a plan made before the first turn (`assistant_caps`) keeps a later pull-back that
lands on a block boundary from ending on an assistant one. Request k sends the buffer as it is
after turn k, so requests of one conversation share exactly their common blocks of prefix.

Segments name their blocks by the turn whose hash list holds them and a range in it (a cut keeps
a prefix every later list shares), so a turn's messages are a few small tuples until sent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

SYSTEM, USER, ASSISTANT = "system", "user", "assistant"


class Segment(NamedTuple):
    """One message: blocks `start` to `start + blocks` of turn `turn`'s hash list, then `tail`
    synthetic tokens keyed by `turn` (the turn that appended them)."""

    role: str
    turn: int
    start: int
    blocks: int
    tail: int = 0


class Request(NamedTuple):
    """What the buffer needs of one recorded request."""

    hash_ids: Sequence[int]
    tokens_in: int
    tokens_out: int


def token_count(segments: Sequence[Segment], block_size: int) -> int:
    return sum(s.blocks * block_size + s.tail for s in segments)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class _Geometry(NamedTuple):
    lcp: int  # blocks shared with the turn before
    covered: int  # blocks of this turn with a recorded id
    new: int  # blocks appended after the cut
    tail: int  # synthetic tokens after them: the partial block, and any blocks without an id


def _geometry(previous: Sequence[int], request: Request, block_size: int) -> _Geometry:
    whole = request.tokens_in // block_size
    covered = min(len(request.hash_ids), whole)
    missing = max(0, (whole - len(request.hash_ids)) * block_size)
    lcp = common_prefix(previous, request.hash_ids)
    return _Geometry(lcp, covered, max(0, covered - lcp), request.tokens_in % block_size + missing)


def conversation_messages(
    requests: Sequence[Request], block_size: int, prefix_tokens: int
) -> list[tuple[Segment, ...]]:
    """Each request's messages as segments; `prefix_tokens`: the trace's tool and system
    tokens, which turn 0 opens with as one system message. A ValueError when turn 0's hash
    list cannot hold that prefix (AIPerf refuses to fake it)."""
    caps = assistant_caps(requests, block_size)
    out: list[tuple[Segment, ...]] = []
    buffer: list[Segment] = []
    for k, request in enumerate(requests):
        if k == 0:
            buffer = _first(request, block_size, prefix_tokens)
        else:
            _advance(buffer, k, requests[k - 1], request, block_size, caps[k])
        out.append(tuple(buffer))
    return out


def _first(request: Request, block_size: int, prefix_tokens: int) -> list[Segment]:
    whole = request.tokens_in // block_size
    covered = min(whole, len(request.hash_ids))
    tail = (whole - covered) * block_size + request.tokens_in % block_size
    segments = []
    cursor = 0
    if prefix_tokens > 0:
        blocks = math.ceil(prefix_tokens / block_size)
        if blocks > len(request.hash_ids):
            raise ValueError(
                f"the first request's system prefix (tool_tokens + system_tokens = "
                f"{prefix_tokens}) needs {blocks} blocks of {block_size} tokens, but its "
                f"hash_ids record {len(request.hash_ids)}: too few to rebuild the prefix"
            )
        blocks = min(blocks, covered)
        if blocks:
            segments.append(Segment(SYSTEM, 0, 0, blocks))
            cursor = blocks
    user = covered - cursor
    if user or tail or not segments:
        segments.append(Segment(USER, 0, cursor, user, tail))
    return segments


def _advance(
    buffer: list[Segment],
    k: int,
    previous: Request,
    request: Request,
    block_size: int,
    cap: int | None,
) -> None:
    shape = _geometry(previous.hash_ids, request, block_size)
    _cut(buffer, shape.lcp)
    assistant = math.ceil(previous.tokens_out / block_size) if previous.tokens_out > 0 else 0
    if not any(s.role == USER for s in buffer):
        assistant = 0  # nothing left of the user's side: the conversation resumes with it
    assistant = min(assistant, shape.new)
    if cap is not None:
        assistant = min(assistant, cap)
    if not shape.tail and assistant == shape.new and assistant:
        assistant -= 1  # a request must end on a user message: the last block is the user's
    if assistant:
        buffer.append(Segment(ASSISTANT, k, shape.lcp, assistant))
    user = shape.new - assistant
    if user or shape.tail:
        buffer.append(Segment(USER, k, shape.lcp + assistant, user, shape.tail))


def _cut(buffer: list[Segment], blocks: int) -> None:
    """Keep the buffer's first `blocks` blocks: a segment cut inside keeps its whole blocks, one
    cut at its end loses its synthetic tail, the later ones go."""
    if blocks <= 0:
        buffer.clear()
        return
    cursor = 0
    for i, segment in enumerate(buffer):
        end = cursor + segment.blocks
        if end < blocks:
            cursor = end
            continue
        if end == blocks:
            buffer[i] = segment._replace(tail=0)
        elif cursor == blocks:
            del buffer[i:]
            return
        else:
            buffer[i] = segment._replace(blocks=blocks - cursor, tail=0)
        del buffer[i + 1 :]
        return


def assistant_caps(requests: Sequence[Request], block_size: int) -> list[int | None]:
    """Per turn, the most blocks its assistant segment may take, so that a later turn that
    only pulls back (appends nothing) to a block boundary cuts onto a user block, not an
    assistant one. Planned from the block ids alone, before any turn is built, as AIPerf
    plans it."""
    caps: list[int | None] = [None] * len(requests)
    owners: list[int] = []  # which turn appended each block of the buffer
    cut_at = [0] * len(requests)
    for k, request in enumerate(requests):
        previous = requests[k - 1].hash_ids if k else ()
        shape = _geometry(previous, request, block_size)
        if k == 0:
            owners = [0] * shape.covered
            continue
        lcp = min(shape.lcp, len(owners))
        cut_at[k] = lcp
        new = max(0, shape.covered - lcp)
        if not new and not shape.tail and lcp >= 1:
            owner = owners[lcp - 1]
            bound = (lcp - 1) - cut_at[owner]
            if owner != 0 and bound >= 0:
                held = caps[owner]
                caps[owner] = bound if held is None else min(held, bound)
        del owners[lcp:]
        owners.extend([k] * new)
    return caps
