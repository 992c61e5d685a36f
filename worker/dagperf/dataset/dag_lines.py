"""dag_jsonl lines read fast, into the compact form a large dataset is held in.

A line becomes a `ConversationRecord` (msgspec, one C pass) with each turn's messages left as
JSON bytes, decoded a second time for their roles alone: a prompt never becomes Python objects
on the scheduler. What is kept of the line is a `Conversation`: payloads (messages as those
bytes), delays, branches, and where its opening turn has system messages. Strings that repeat
(model names) are held once.
"""

from __future__ import annotations

from typing import Annotated, NamedTuple

import msgspec
from msgspec import Meta, Struct

from dagperf.dataset.dag_records import Branch, ConversationRecord, Text, conversation_branches
from dagperf.dataset.specs import Payload


class _Role(Struct, frozen=True):
    role: Text


_decode_line = msgspec.json.Decoder(ConversationRecord).decode
_decode_roles = msgspec.json.Decoder(Annotated[list[_Role], Meta(min_length=1)]).decode
_SYSTEM = b'"system"'
_NO_DELAYS: dict[int, tuple[float, ...]] = {}


class Conversation(NamedTuple):
    """What a run needs of one conversation line."""

    payloads: tuple[Payload, ...]
    delays: tuple[float, ...]  # seconds, per turn
    branches: tuple[Branch, ...]
    opening_system: tuple[int, ...]  # positions of system messages in turn 0


class Read(NamedTuple):
    """One line read: the record (for the per-line rules), the kept form, per turn the positions
    of its system messages, and whether the per-line rules have anything to check."""

    record: ConversationRecord
    conversation: Conversation
    system: tuple[tuple[int, ...], ...]
    checks: bool


class Interned:
    """One string object per distinct model name, however often it repeats."""

    def __init__(self) -> None:
        self._strings: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        return self._strings.setdefault(text, text)


def read_line(raw: bytes, intern: Interned) -> Read | None:
    """The line, or None when the structs refuse it (the caller describes why)."""
    try:
        record = _decode_line(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    payloads = []
    delays = []
    system = []
    branched = bool(record.pre_session_spawns)
    for turn in record.turns:  # one plain loop: this runs once per turn of a million lines
        messages = bytes(turn.messages)
        try:
            roles = _decode_roles(messages)  # every message an object with a role, or refused
        except msgspec.ValidationError:
            return None
        if _SYSTEM in messages or b"\\u" in messages:  # else no message can be a system one
            system.append(tuple(i for i, m in enumerate(roles) if m.role == "system"))
        else:
            system.append(())
        extra = turn.extra
        if extra and "messages" in extra:
            return None  # the models' rule, in their words
        model = turn.model
        payloads.append(
            Payload(messages, model and intern(model), turn.max_tokens, turn.tools, extra)
        )
        delays.append(turn.delay / 1000.0)
        branched = branched or bool(turn.forks or turn.spawns)
    branches = tuple(conversation_branches(record)) if branched else ()
    kept = Conversation(tuple(payloads), _shared(tuple(delays)), branches, system[0])
    return Read(record, kept, tuple(system), branched or len(system) > 1)


def _shared(delays: tuple[float, ...]) -> tuple[float, ...]:
    """Delays of no wait, one tuple per turn count: most conversations have them."""
    if any(delays):
        return delays
    return _NO_DELAYS.setdefault(len(delays), delays)
