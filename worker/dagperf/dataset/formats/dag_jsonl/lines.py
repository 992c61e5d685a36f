"""One dag_jsonl line, decoded twice in a run's life: checked when the file is loaded, and read
for the wire when a tree that holds it is built.

The check decodes the line with the `Checked` structs (msgspec, one C pass; each message read
for its role alone). The second read decodes it with the `Sendable` structs, keeping each turn's
messages as the JSON bytes of the line: a prompt never becomes Python objects on the scheduler,
and between the two reads the prompts stay in the file, not in memory (`line_store`). A line
the structs refuse is parsed again by the pydantic models, which word its problems. Both reads
try the plain structs first, which leave out the fields a conversation sets of its own (an
orchestrator's, a context mode): most files set none, and those lines decode a fifth faster.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import NamedTuple

import msgspec
from pydantic import ValidationError

from dagperf.dataset.formats.dag_jsonl.records import (
    Branch,
    Checked,
    ConversationRecord,
    PlainChecked,
    PlainSendable,
    Sendable,
    conversation_branches,
    spine,
)
from dagperf.dataset.formats.dag_jsonl.schema import DagConversation
from dagperf.dataset.limits import line_problem, too_deep
from dagperf.dataset.loader import describe
from dagperf.dataset.specs import SENDS_NOTHING, ContextMode, Gate, Payload

_check = msgspec.json.Decoder(Checked)
_check_plain = msgspec.json.Decoder(PlainChecked)
_send = msgspec.json.Decoder(Sendable)
_send_plain = msgspec.json.Decoder(PlainSendable)
_NO_DELAYS: dict[int, tuple[float, ...]] = {}
_SESSION_ID = re.compile(rb'"session_id"\s*:\s*"([^"\\]{1,200})"')


class Conversation(NamedTuple):
    """What a tree needs of one conversation line."""

    payloads: tuple[Payload, ...]
    delays: tuple[float, ...]  # seconds, per turn
    branches: tuple[Branch, ...]
    mode: ContextMode | None = None  # its own context mode; None: the format's
    gate: Gate | None = None  # an orchestrator: each turn is a gate of this kind


NO_REQUEST = Payload(b"[]")  # an orchestrator's turns send nothing


def check_lines(data: bytes) -> Sequence[PlainChecked]:
    """Every line of a block at once, or msgspec's error at the first line the structs refuse:
    as plain records, unless a line sets its conversation's own fields."""
    try:
        return _check_plain.decode_lines(data)
    except msgspec.ValidationError:
        return _check.decode_lines(data)


def check_line(raw: bytes) -> Checked | None:
    """The line, or None when the structs refuse it (the models then say why)."""
    try:
        record = _check.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return None if sets_messages(record) else record


def sets_messages(record: PlainChecked) -> bool:
    """The models' one rule the structs cannot state: `extra` may not replace the history."""
    return any(turn.extra and "messages" in turn.extra for turn in record.turns)


def system_positions(record: PlainChecked) -> tuple[tuple[int, ...], ...]:
    """Per turn, the positions of its system messages."""
    return tuple(
        tuple(i for i, message in enumerate(turn.messages) if message.role == "system")
        for turn in record.turns
    )


class Interned:
    """One string object per distinct model name, however often it repeats."""

    def __init__(self) -> None:
        self._strings: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        return self._strings.setdefault(text, text)


def sendable(raw: bytes, plain: bool) -> PlainSendable:
    """A line the loader accepted, decoded for the wire (msgspec's errors if it no longer
    decodes: the caller says the file changed); `plain` when no line of the file sets its
    conversation's own fields."""
    return (_send_plain if plain else _send).decode(raw)


def conversation(record: PlainSendable, intern: Interned) -> Conversation:
    mode = None
    if isinstance(record, ConversationRecord):
        if record.orchestrator:
            return _orchestrator(record)
        mode = record.context_mode
    payloads, delays = _turns(record, intern)
    branched = record.pre_session_spawns or any(t.forks or t.spawns for t in record.turns)
    branches = tuple(conversation_branches(record)) if branched else ()
    return Conversation(tuple(payloads), _shared(tuple(delays)), branches, mode)


def _orchestrator(record: Sendable) -> Conversation:
    """A spine of gates, each waiting its round's think time (a drawn one's median)."""
    gates = spine(record)
    gate = SENDS_NOTHING
    if record.think_time_sigma is not None:
        low, high = record.think_time_min_ms, record.think_time_max_ms
        gate = Gate(
            record.think_time_sigma,
            None if low is None else low / 1000.0,
            None if high is None else high / 1000.0,
        )
    return Conversation(
        (NO_REQUEST,) * len(gates),
        tuple(g.think_ms / 1000.0 for g in gates),
        tuple(conversation_branches(record)),
        record.context_mode,
        gate,
    )


def payloads(record: PlainSendable, intern: Interned) -> tuple[Payload, ...]:
    """What each turn sends, before any history (an orchestrator's: nothing)."""
    return tuple(_turns(record, intern)[0])


def _turns(record: PlainSendable, intern: Interned) -> tuple[list[Payload], list[float]]:
    """Each turn's payload and delay (s). One plain loop: this runs once per turn of every
    tree built."""
    payloads = []
    delays = []
    for turn in record.turns:
        model = turn.model
        payloads.append(
            Payload(
                bytes(turn.messages),
                model and intern(model),
                turn.max_tokens,
                turn.tools,
                turn.extra,
            )
        )
        delays.append(turn.delay / 1000.0)
    return payloads, delays


def _shared(delays: tuple[float, ...]) -> tuple[float, ...]:
    """Delays of no wait, one tuple per turn count: most conversations have them."""
    if any(delays):
        return delays
    return _NO_DELAYS.setdefault(len(delays), delays)


def read_slowly(raw: bytes) -> tuple[Checked, bytes] | list[str]:
    """A line the fast reader refused, or that may hold numbers a server cannot read: its
    problems in the models' words, or, when the models accept it after all (a key written
    twice, the last value good, which the structs refuse), the line as the models read it and
    those bytes, which a run then reads instead of the file's."""
    if (unsafe := line_problem(raw)) is not None:
        return [unsafe]
    try:
        model = DagConversation.model_validate_json(raw)
    except ValidationError as e:
        return list(describe(e, raw))
    canonical = msgspec.json.encode(model.model_dump(exclude_defaults=True))
    record = check_line(canonical)
    return ["cannot be read as the models read it"] if record is None else (record, canonical)


def session_id_of(raw: bytes) -> str | None:
    if too_deep(raw):  # json.loads would recurse past the stack: the first one named will do
        found = _SESSION_ID.search(raw)
        return found.group(1).decode("utf-8", "replace") if found else None
    try:
        obj = json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        return None
    sid = obj.get("session_id") if isinstance(obj, dict) else None
    return sid if isinstance(sid, str) and sid else None
