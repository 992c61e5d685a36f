"""Veeksha's `shared_prefix` trace flavour: sessions whose first prompts share prefixes by id.

    {"session_id": 1, "input_length": 1024, "new_input_length": 1024, "output_length": 128,
     "hash_ids": [101, 102]}
    {"session_id": 1, "input_length": 1536, "new_input_length": 512, "output_length": 128,
     "hash_ids": [101, 102, 103], "wait_after_previous_response_s": 2.5}
    {"session_id": 2, "input_length": 1024, "new_input_length": 1024, "output_length": 128,
     "hash_ids": [101, 102]}

Rows sharing a `session_id` (a string or an integer) are one session's turns in file order;
sessions come in the order they first appear. As Veeksha builds them:

- a session's first row is its `hash_ids` alone: one keyed block of `block_size` tokens per id
  (512 unless a Veeksha config says otherwise), the same text for the same id in any session
  (mooncake_trace's blocks), so sessions whose first rows share leading ids share exactly that
  prefix and differ from the first id that differs. Its length is the blocks', whatever
  `input_length` says (Veeksha does not read it);
- each later row continues the previous turn's context and live reply with `new_input_length`
  tokens of corpus text; its `hash_ids` are not read (only first rows share);
- every row's `output_length` is its token limit, and its `wait_after_previous_response_s` (null
  or absent: none) the seconds waited after the previous turn, or for a first row after the
  session starts.

Other columns are ignored, as Veeksha ignores them. Looping over the trace (wrap_mode), Veeksha
gives every id but the trace's first a new value on each pass; dagperf runs the same sessions
again, so a second pass finds the prefixes the first one left in the cache.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from dagperf.dataset.formats.columns import BLOCK_SIZE, BlockId, Id, session_id_of
from dagperf.dataset.limits import MAX_PROMPT_TOKENS, OutputTokens, PromptTokens, WaitSeconds
from dagperf.dataset.loader import Problems, validated_lines
from dagperf.dataset.prompts import blocks_prompt, passage
from dagperf.dataset.specs import GraphNode, Payload, SessionSpec, TraceDataset
from dagperf.runtime.gcpause import gc_paused


class SharedPrefixRow(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)  # Veeksha reads only its columns

    session_id: Id = Field(description="Rows sharing it are one session's turns, in file order.")
    output_length: OutputTokens = Field(description="Maximum completion tokens (max_tokens).")
    hash_ids: list[BlockId] | None = Field(
        default=None,
        description="A session's first row: one block of block_size tokens per id; equal ids, "
        "equal text. Not read on later rows.",
    )
    new_input_length: PromptTokens | None = Field(
        default=None, description="A later row: the new prompt tokens it adds to the history."
    )
    input_length: PromptTokens | None = Field(
        default=None, description="The whole prompt's length; not read, as Veeksha does not."
    )
    wait_after_previous_response_s: WaitSeconds | None = Field(
        default=None, description="Seconds waited after the previous turn (null: none)."
    )


def read_shared_prefix(
    lines: Iterable[bytes], source: str, block_size: int = BLOCK_SIZE
) -> TraceDataset:
    """Validate a shared_prefix trace given as byte lines; `source` names it in messages."""
    with gc_paused():
        problems = Problems(source)
        sessions: dict[str, list[GraphNode]] = {}
        begun: set[str] = set()  # sessions with a row, valid or not: the next is a later turn
        for lineno, raw, row in validated_lines(
            lines, SharedPrefixRow, problems, "one request per line"
        ):
            sid = row.session_id if row is not None else session_id_of(raw)
            first = sid not in begun
            if sid is not None:
                begun.add(sid)
            if row is None:
                continue
            payload = _payload(lineno, row, first, block_size)
            if isinstance(payload, str):
                problems.add(lineno, payload)
                continue
            turns = sessions.setdefault(row.session_id, [])
            k = len(turns)
            wait = row.wait_after_previous_response_s or 0.0
            turns.append(
                GraphNode(str(k), payload, (k - 1,) if k else (), k - 1 if k else None, wait)
            )
        if not begun and not problems.items:
            problems.add(None, "empty file: a shared_prefix trace needs at least one request")
        problems.raise_any()
    specs = [SessionSpec(sid, tuple(nodes)) for sid, nodes in sessions.items()]
    return TraceDataset(specs, None, timed=False)


def _payload(lineno: int, row: SharedPrefixRow, first: bool, block_size: int) -> Payload | str:
    """The row's request, or what is wrong with it."""
    if first:
        if not row.hash_ids:
            return "hash_ids: a session's first row needs at least one id (its prompt's blocks)"
        tokens = block_size * len(row.hash_ids)
        if tokens > MAX_PROMPT_TOKENS:
            return (
                f"hash_ids: {len(row.hash_ids):,} blocks of {block_size:,} tokens make a "
                f"prompt longer than {MAX_PROMPT_TOKENS:,} tokens"
            )
        text = blocks_prompt(row.hash_ids, tokens, block_size)
    else:
        if row.new_input_length is None:
            return "new_input_length: required on a later row of a session (its new tokens)"
        text = passage(row.new_input_length, random.Random(lineno))
    return Payload.of([{"role": "user", "content": text}], max_tokens=row.output_length)


__all__ = ["SharedPrefixRow", "read_shared_prefix"]
