"""AIPerf's custom dataset type `multi_turn`, with AIPerf 0.13's file shape: one conversation
per line, its turns single_turn rows (without their own session_id).

    {"session_id": "c1", "turns": [{"text": "Hello"}, {"text": "More", "delay": 20}]}

multi_turn conversations accumulate (`deltas_without_responses`): each turn continues the previous
turn's context and its live reply; entries sharing a `session_id` are one conversation. A leading
text-only system turn (one, not two in a row) is not a request: its text leads every request's
messages, as AIPerf hoists it. A conversation may set its own `context_mode`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from dagperf.dataset.formats.rows import Rows, Turn, conversations_of
from dagperf.dataset.loader import Problems, validated_lines
from dagperf.dataset.specs import ContextMode, TraceDataset
from dagperf.runtime.gcpause import gc_paused


class Conversation(BaseModel):
    """One multi_turn line."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["multi_turn"] | None = None
    session_id: StrictStr | None = Field(default=None, min_length=1)
    turns: list[Turn] = Field(min_length=1)
    context_mode: ContextMode | None = None


def read_multi_turn(lines: Iterable[bytes], source: str) -> TraceDataset:
    with gc_paused():
        return conversations_of(_multi_turn_rows(lines, source), source, single=False)


def _multi_turn_rows(lines: Iterable[bytes], source: str) -> Rows:
    problems = Problems(source)
    for lineno, _, conv in validated_lines(lines, Conversation, problems, "one conversation"):
        if conv is not None and (nested := [t for t in conv.turns if t.session_id]):
            problems.add(
                lineno,
                f"turns: a turn's session_id ('{nested[0].session_id}') is "
                "not read; give the conversation's session_id instead",
            )
            conv = None
        turns = [] if conv is None else list(conv.turns)
        mode = None if conv is None else conv.context_mode
        yield problems, lineno, None if conv is None else conv.session_id, turns, mode
