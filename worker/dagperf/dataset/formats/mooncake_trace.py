"""The mooncake_trace file format (AIPerf-compatible): one request per line.

    {"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}
    {"timestamp": 1200, "text_input": "Summarise the report.", "output_length": 40}
    {"session_id": "u1", "timestamp": 1500, "input_length": 300, "output_length": 20}
    {"session_id": "u1", "timestamp": 4000, "delay": 800, "input_length": 120}

A row's prompt is one of three things. `input_length` tokens of synthetic text: with `hash_ids`,
one keyed block of `block_size` tokens per id, so two rows sharing leading ids share a prefix a
cache can reuse; without, a passage drawn with the line number as seed. Or `text_input`, sent as
written. Or `messages`, an OpenAI message array sent as written (with optional `tools`).

Rows sharing a `session_id` are the turns of one conversation, in file order: each waits for the
previous one, then `delay` ms. A turn continues its predecessor's context and live reply
(`deltas_without_responses`), unless the session carries `messages`, whose turns each hold their
whole context (`message_array_with_responses`: sent as written, nothing accumulated). That mode is
the loader default as soon as a file has messages rows; its text sessions then say their own mode.
Any row may set its session's `context_mode` instead (every row that does, the same one).
Other rows are sessions of one request.

A session arrives at its first row's `timestamp`. Only a session's arrival is on the schedule: a
later turn cannot be sent at its own timestamp when it has to wait for a reply, so later
timestamps are only checked to not go backwards. A file is timed when every row has a timestamp;
one where only some do is refused, as it could run neither on its schedule nor without it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dagperf.dataset.content import with_roles
from dagperf.dataset.formats.columns import BLOCK_SIZE, BlockId
from dagperf.dataset.limits import ArrivalMs, OutputTokens, PromptTokens, WaitMs
from dagperf.dataset.loader import Problems, load_file, validated_lines
from dagperf.dataset.prompts import blocks_prompt, passage
from dagperf.dataset.specs import (
    REFUSED_CONTEXT_MODE,
    ContextMode,
    GraphNode,
    Payload,
    SessionSpec,
    TraceDataset,
)
from dagperf.runtime.gcpause import gc_paused


class MooncakeRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    timestamp: ArrivalMs | None = Field(
        default=None,
        description="Arrival in milliseconds; the first row of a session sets its arrival.",
    )
    input_length: PromptTokens | None = Field(
        default=None, description="Prompt length in tokens (synthetic text)."
    )
    hash_ids: list[BlockId] | None = Field(
        default=None,
        description="With input_length: one id per block of block_size tokens; equal ids give "
        "equal text.",
    )
    text_input: str | None = Field(default=None, min_length=1, description="The prompt as is.")
    messages: list[dict[str, Any]] | None = Field(
        default=None,
        min_length=1,
        description="An OpenAI messages array sent as written; each needs a 'role'.",
    )
    tools: list[dict[str, Any]] | None = Field(
        default=None, min_length=1, description="Tool definitions; only with messages."
    )
    output_length: OutputTokens | None = Field(
        default=None, description="Maximum completion tokens (max_tokens)."
    )
    session_id: str | None = Field(
        default=None, min_length=1, description="Rows sharing it are one conversation's turns."
    )
    delay: WaitMs | None = Field(
        default=None,
        description="Milliseconds to wait after the session's previous turn finished.",
    )
    context_mode: ContextMode | None = Field(
        default=None,
        description="The session's context mode, overriding the format's default; rows of one "
        "session that give one give the same.",
    )

    @field_validator("messages")
    @classmethod
    def _each_message_has_a_role(cls, messages: list[dict[str, Any]] | None) -> Any:
        return messages if messages is None else with_roles(messages)


_INPUTS = ("input_length", "text_input", "messages")


def row_problems(row: MooncakeRow) -> Iterable[str]:
    """What is wrong with a row on its own, each as `field: message`."""
    given = [name for name in _INPUTS if getattr(row, name) is not None]
    if not given:
        yield "exactly one of input_length, text_input or messages is required"
    elif len(given) > 1:
        yield f"{' and '.join(given)} are exclusive: give exactly one of {', '.join(_INPUTS)}"
    if row.hash_ids is not None and row.input_length is None:
        yield "hash_ids: only allowed with input_length"
    if row.tools is not None and row.messages is None:
        yield "tools: only allowed with messages"
    if row.context_mode is ContextMode.MESSAGE_ARRAY_WITHOUT_RESPONSES:
        yield f"context_mode: {REFUSED_CONTEXT_MODE}"


@dataclass
class _Turns:
    first_line: int
    rows: list[tuple[int, MooncakeRow]]


def load_mooncake_trace(path: str | Path, block_size: int = BLOCK_SIZE) -> TraceDataset:
    return load_file(path, lambda lines, source: read_mooncake_trace(lines, source, block_size))


def read_mooncake_trace(
    lines: Iterable[bytes], source: str, block_size: int = BLOCK_SIZE
) -> TraceDataset:
    """Validate a mooncake_trace given as byte lines; `source` names it in messages."""
    with gc_paused():
        return _read(lines, source, block_size)


def _read(lines: Iterable[bytes], source: str, block_size: int) -> TraceDataset:
    problems = Problems(source)
    sessions: dict[str, _Turns] = {}
    generated: dict[str, int] = {}  # ids given to session-less rows, by line
    seen_a_line = False
    first_timed: int | None = None  # the first line with a timestamp, and without
    first_untimed: int | None = None
    for lineno, _, row in validated_lines(lines, MooncakeRow, problems, "one request per line"):
        seen_a_line = True
        if row is None:
            continue
        errors = list(row_problems(row))
        for message in errors:
            problems.add(lineno, message)
        if row.timestamp is None:
            first_untimed = first_untimed or lineno
        else:
            first_timed = first_timed or lineno
        if errors:
            continue
        if row.session_id is None:
            sid = f"trace-{lineno:06d}"
            if sid in sessions:
                problems.add(
                    lineno,
                    f"session_id: missing, and the id '{sid}' this request would get is taken "
                    f"by line {sessions[sid].first_line}; give it a session_id",
                )
                continue
            generated[sid] = lineno
            sessions[sid] = _Turns(lineno, [(lineno, row)])
            continue
        sid = row.session_id
        if sid in generated:
            problems.add(
                lineno,
                f"session_id: '{sid}' is the id of the session-less request on line "
                f"{generated[sid]}; choose another",
            )
            continue
        turns = sessions.get(sid)
        if turns is None:
            sessions[sid] = _Turns(lineno, [(lineno, row)])
            continue
        for message in _turn_problems(sid, turns, row):
            problems.add(lineno, message)
        turns.rows.append((lineno, row))
    if not seen_a_line:
        problems.add(None, "empty file: a mooncake_trace file needs at least one request line")
    if first_timed and first_untimed:
        problems.add(
            first_untimed,
            f"timestamp: missing, but line {first_timed} has one: give every row a timestamp "
            "(replayed on its schedule) or none",
        )
    problems.raise_any()
    return _dataset(sessions, block_size, timed=first_untimed is None)


def _turn_problems(sid: str, turns: _Turns, row: MooncakeRow) -> Iterable[str]:
    """A later turn against the session's earlier ones."""
    first_line, first = turns.rows[0]
    if (row.messages is None) != (first.messages is None):
        field = "messages" if row.messages is not None else _input_of(row)
        yield (
            f"{field}: session '{sid}' mixes messages rows with input_length or text_input rows "
            f"(line {first_line} {'has' if first.messages is not None else 'has no'} messages)"
        )
    modes = {(r.context_mode, n) for n, r in turns.rows if r.context_mode is not None}
    if row.context_mode is not None and any(mode != row.context_mode for mode, _ in modes):
        mode, line = next(m for m in sorted(modes, key=lambda m: m[1]) if m[0] != row.context_mode)
        yield (
            f"context_mode: '{row.context_mode}' differs from '{mode}' on line {line}, an earlier "
            f"turn of session '{sid}': one mode per session"
        )
    previous_line, previous = turns.rows[-1]
    if (
        row.timestamp is not None
        and previous.timestamp is not None
        and row.timestamp < previous.timestamp
    ):
        yield (
            f"timestamp: {_ms(row.timestamp)} is earlier than the previous turn of session "
            f"'{sid}' ({_ms(previous.timestamp)} on line {previous_line}): turns go forward in time"
        )


def _input_of(row: MooncakeRow) -> str:
    return next(name for name in _INPUTS if getattr(row, name) is not None)


def _ms(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def _dataset(sessions: dict[str, _Turns], block_size: int, *, timed: bool) -> TraceDataset:
    with_messages = any(turns.rows[0][1].messages is not None for turns in sessions.values())
    loader_mode = (
        ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
        if with_messages
        else ContextMode.DELTAS_WITHOUT_RESPONSES
    )
    specs = []
    for sid, turns in sessions.items():
        given = next((r.context_mode for _, r in turns.rows if r.context_mode is not None), None)
        as_written = (
            given is ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
            if given is not None
            else turns.rows[0][1].messages is not None
        )
        nodes = tuple(
            GraphNode(
                key=str(k),
                payload=_payload(lineno, row, block_size),
                parents=(k - 1,) if k else (),
                history=k - 1 if k and not as_written else None,
                wait_s=(row.delay or 0.0) / 1000,
            )
            for k, (lineno, row) in enumerate(turns.rows)
        )
        mode = given or (
            ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
            if as_written
            else ContextMode.DELTAS_WITHOUT_RESPONSES
        )
        start = turns.rows[0][1].timestamp
        specs.append(
            SessionSpec(
                session_id=sid,
                nodes=nodes,
                context_mode=None if mode is loader_mode else mode,
                start_s=start / 1000 if timed and start is not None else None,
            )
        )
    if timed:
        specs.sort(key=lambda spec: spec.start_s or 0.0)  # stable: ties keep file order
    return TraceDataset(specs, loader_mode, timed)


def _payload(lineno: int, row: MooncakeRow, block_size: int) -> Payload:
    if row.messages is not None:
        return Payload.of(row.messages, max_tokens=row.output_length, tools=row.tools)
    if row.text_input is not None:
        text = row.text_input
    elif row.hash_ids:
        text = blocks_prompt(row.hash_ids, row.input_length, block_size)  # type: ignore[arg-type]
    else:
        text = passage(row.input_length, random.Random(lineno))  # type: ignore[arg-type]
    return Payload.of([{"role": "user", "content": text}], max_tokens=row.output_length)


__all__ = [
    "MooncakeRow",
    "load_mooncake_trace",
    "read_mooncake_trace",
]
