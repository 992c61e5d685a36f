"""AIPerf's `bailian_trace`: Alibaba Bailian's Qwen serving traces, one request per line.

    {"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 521,
     "output_length": 132, "type": "text", "turn": 1, "hash_ids": [1089, 1090, 1091]}
    {"chat_id": 160, "parent_chat_id": 159, "timestamp": 75.2, "input_length": 610, ...}

A row's prompt is `input_length` tokens of synthetic text: one keyed block of 16 tokens per hash
id (the trace's SipHash block size, AIPerf's default for it), so rows sharing leading ids share a
prefix; the last id may be a partial block, and tokens past the ids are fresh text. A row
without ids gets a passage seeded by its line. As AIPerf builds the blocks it refuses ids that
cannot be laid out so: more ids than the length fills (each id but the last is a whole block),
or one id at two sizes; so does dagperf, naming both lines. An `input_length` of 0 without ids
is a one-token prompt, as AIPerf sends it.

Chains: a row whose `parent_chat_id` is another row's `chat_id` is a later turn of that row's
conversation. A conversation is everything that reaches one first turn by its parents: a row
with `parent_chat_id` -1, or one whose parent is not in the file (a trace cut from a longer one),
as AIPerf groups them. Its turns are sent in `turn` order (file order on ties), each continuing
the one before it with its live reply (`deltas_without_responses`, AIPerf's default: the
history grows by the reply and the next turn's whole prompt, as in AIPerf). A chain that loops
has no first turn and is refused, where AIPerf would group it arbitrarily.

Timing: `timestamp` is seconds. A conversation arrives at its first turn's timestamp on a fixed
schedule. AIPerf sends a later turn at its own timestamp, or when the turn before it is
answered if that is later; the graph times a later turn only from the answer before it, so it
waits the recorded gap between the two turns' timestamps (the user's think time and the
recorded service time): a conversation keeps its rhythm, each turn late by the replayed
service time of the one before. Without a fixed schedule AIPerf sends it at once.

Unknown keys are refused, as are values of the wrong JSON type (a number in quotes), where
AIPerf ignores or converts them: a typo such as `output_lenght` should fail the load.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from dagperf.dataset.limits import MAX_PROMPT_TOKENS, ArrivalSeconds, OutputTokens
from dagperf.dataset.loader import Problems, load_file, validated_lines
from dagperf.dataset.prompts import blocks_prompt, passage
from dagperf.dataset.specs import ContextMode, GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.runtime.gcpause import gc_paused

BLOCK_SIZE = 16  # tokens per hash id: Bailian's SipHash blocks, AIPerf's default for the format
ROOT = -1  # parent_chat_id of a conversation's first turn

InputTokens = Annotated[int, Field(ge=0, le=MAX_PROMPT_TOKENS, strict=True)]


class BailianRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    chat_id: StrictInt = Field(description="The request's id in the trace.")
    parent_chat_id: StrictInt = Field(
        default=ROOT, description="The chat_id of the turn before; -1 for a first turn."
    )
    timestamp: ArrivalSeconds = Field(description="Arrival in seconds since the trace began.")
    input_length: InputTokens = Field(description="Prompt length in tokens (synthetic text).")
    output_length: OutputTokens = Field(description="Reply length in tokens, sent as the limit.")
    type: StrictStr = Field(
        default="", description="The request's kind in the trace (text, search, ...); not read."
    )
    turn: StrictInt = Field(default=1, description="The turn's place in its conversation.")
    hash_ids: list[StrictInt] = Field(
        default_factory=list, description="One id per block of 16 tokens; equal ids, equal text."
    )


Row = tuple[int, BailianRow]  # with its line


def load_bailian_trace(path: str | Path, block_size: int = BLOCK_SIZE) -> TraceDataset:
    return load_file(path, lambda lines, source: read_bailian_trace(lines, source, block_size))


def read_bailian_trace(
    lines: Iterable[bytes], source: str, block_size: int = BLOCK_SIZE
) -> TraceDataset:
    """Validate a Bailian trace given as byte lines; `source` names it in messages."""
    with gc_paused():
        problems = Problems(source)
        rows: dict[int, Row] = {}
        blocks: dict[int, tuple[int, int]] = {}  # hash id: (its size, the line that set it)
        seen_a_line = False
        for lineno, _, row in validated_lines(lines, BailianRow, problems, "one request per line"):
            seen_a_line = True
            if row is None:
                continue
            if row.chat_id in rows:
                first = rows[row.chat_id][0]
                problems.add(
                    lineno, f"chat_id: {row.chat_id} is also line {first}'s: one request each"
                )
                continue
            for message in _block_problems(row, lineno, block_size, blocks):
                problems.add(lineno, message)
            rows[row.chat_id] = (lineno, row)
        if not seen_a_line:
            problems.add(None, "empty file: a bailian_trace file needs at least one request line")
        conversations = _conversations(rows, problems)
        problems.raise_any()
    return _dataset(conversations, block_size)


def _block_problems(
    row: BailianRow, lineno: int, block_size: int, blocks: dict[int, tuple[int, int]]
) -> Iterator[str]:
    """Whether the row's ids lay out as AIPerf lays them: each but the last a whole block, the
    last what remains of the length (whole, if the length reaches past the ids), and an id the
    same size wherever it appears."""
    count, length = len(row.hash_ids), row.input_length
    if not count:
        return
    if length <= (count - 1) * block_size:
        yield (
            f"hash_ids: {count} ids of {block_size}-token blocks need an input_length over "
            f"{(count - 1) * block_size}, got {length}: every id but the last is a whole block"
        )
        return
    last = min(block_size, length - (count - 1) * block_size)
    for k, key in enumerate(row.hash_ids):
        size = last if k == count - 1 else block_size
        known = blocks.setdefault(key, (size, lineno))
        if known[0] != size:
            yield (
                f"hash_ids: id {key} is a block of {size} tokens here but of {known[0]} on line "
                f"{known[1]}: an id is one block of one size"
            )


def _conversations(rows: dict[int, Row], problems: Problems) -> dict[int, list[Row]]:
    """The rows grouped by their chain's first turn (in the order each group's first row comes
    in the file), each group in turn order; rows on a loop of parents are refused."""
    first_turn = _first_turns(rows)
    groups: dict[int, list[Row]] = {}
    for chat_id, (lineno, row) in rows.items():  # in file order
        root = first_turn[chat_id]
        if root is None:
            problems.add(
                lineno,
                f"parent_chat_id: following the parents of chat_id {chat_id} loops back "
                "without reaching a first turn (parent_chat_id -1, or a parent not in the file)",
            )
            continue
        groups.setdefault(root, []).append((lineno, row))
    for turns in groups.values():
        turns.sort(key=lambda item: item[1].turn)  # stable: ties keep file order
    return groups


def _first_turns(rows: dict[int, Row]) -> dict[int, int | None]:
    """Each chat id's first turn, found by following parents (None: they loop), each chain
    walked once."""
    found: dict[int, int | None] = {}
    for start in rows:
        path: list[int] = []
        on_path: set[int] = set()
        current = start
        while current not in found:
            parent = rows[current][1].parent_chat_id
            if parent == ROOT or parent not in rows:
                found[current] = current
                break
            if current in on_path:
                found[current] = None
                break
            path.append(current)
            on_path.add(current)
            current = parent
        for chat_id in path:
            found[chat_id] = found[current]
    return found


def _dataset(conversations: dict[int, list[Row]], block_size: int) -> TraceDataset:
    specs = []
    for root, turns in conversations.items():
        nodes = tuple(
            GraphNode(
                key=str(row.chat_id),
                payload=Payload.of(
                    [{"role": "user", "content": _prompt(lineno, row, block_size)}],
                    max_tokens=row.output_length,
                ),
                parents=(k - 1,) if k else (),
                history=k - 1 if k else None,
                wait_s=max(0.0, row.timestamp - turns[k - 1][1].timestamp) if k else 0.0,
            )
            for k, (lineno, row) in enumerate(turns)
        )
        specs.append(SessionSpec(str(root), nodes, start_s=turns[0][1].timestamp))
    specs.sort(key=lambda spec: spec.start_s or 0.0)  # stable: ties keep file order
    return TraceDataset(specs, ContextMode.DELTAS_WITHOUT_RESPONSES, timed=True)


def _prompt(lineno: int, row: BailianRow, block_size: int) -> str:
    if row.hash_ids:
        return blocks_prompt(row.hash_ids, row.input_length, block_size)
    return passage(max(1, row.input_length), random.Random(lineno))


__all__ = ["BLOCK_SIZE", "BailianRow", "load_bailian_trace", "read_bailian_trace"]
