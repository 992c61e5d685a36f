"""A TraceLab file's rows, read as AIPerf reads them, grouped into sessions of timed rounds.

A row is one LLM round and carries some forty fields; the models name only the dozen that
AIPerf's conversion reads and ignore the rest (`extra="ignore"`), so a corpus that adds a field
still loads. What they name must have its JSON type: a count given as a string, or a time given
as a number, is refused with its path, where AIPerf would convert the one and stop on the other.

Lines are numbered as AIPerf's text-mode read numbers them (a lone CR ends a line, a byte-order
mark is not stripped), so a problem's line is the line AIPerf would name, and a file AIPerf cannot
read is refused here too: a line that is not a JSON object among them (AIPerf's count of the
file's sessions stops on it). What AIPerf passes over without a word (a row without a
`session_id`, a round without a time) is passed over here and reported, never refused: a corpus
of half a million rows holds a few.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, NamedTuple

import msgspec
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from dagperf.dataset.limits import MAX_PROMPT_TOKENS, MAX_TOKENS, line_problem
from dagperf.dataset.loader import Problems, describe

Passed = list[tuple[int, str]]  # the lines AIPerf passes over, and why

INPUTS = frozenset({"user_message", "tool_result"})  # what a round is sent after
OUTPUTS = frozenset({"text", "reasoning", "tool_call"})  # what the model sends back


def instant(value: object) -> float | None:
    """An ISO 8601 time in POSIX seconds (UTC when it names no zone); null or "" is none, as
    AIPerf reads it."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError("Input should be an ISO 8601 time string or null")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    except (ValueError, OverflowError):
        raise ValueError(f"not an ISO 8601 time: {value!r}") from None


Instant = Annotated[float | None, BeforeValidator(instant)]
Count = Annotated[StrictInt, Field(ge=0)]
_READ = ConfigDict(extra="ignore", frozen=True)  # a row's other fields are not read


class Event(BaseModel):
    model_config = _READ

    event_type: StrictStr | None = Field(None, description="user_message, text, tool_call, ...")
    timestamp: Instant = Field(None, description="When it happened.")


class Tool(BaseModel):
    model_config = _READ

    tool_name: StrictStr | None = Field(None, description="Agent and Task spawn a sub-agent.")
    emitted_at: Instant = Field(None, description="When the model called it.")
    result_at: Instant = Field(None, description="When its result came back.")
    tool_wall_latency_ms: StrictInt | StrictFloat | None = Field(
        None, description="How long it took: a spawning call of 10 s or more holds a sub-agent."
    )


class Row(BaseModel):
    model_config = _READ

    session_id: StrictStr | None = Field(None, description="The session it is a round of.")
    round_index: StrictInt | None = Field(None, description="Breaks ties between send times.")
    provider: StrictStr | None = Field(None, description="codex: its sessions spawn their way.")
    user: StrictStr | None = Field(None, description="A sub-agent has its parent's user ...")
    project: StrictStr | None = Field(None, description="... and project.")
    model: StrictStr | None = Field(None, description="The model it went to.")
    input_tokens_total: Annotated[Count, Field(le=MAX_PROMPT_TOKENS)] | None = Field(
        None, description="Prompt tokens."
    )
    prefix_tokens: Count | None = Field(None, description="Of them, the prefix cached before.")
    output_tokens: Count | None = Field(None, description="Reply tokens ...")
    reasoning_output_tokens: Count | None = Field(None, description="... and reasoning tokens.")
    first_input_event_type: StrictStr | None = Field(None, description="tool_result, or not.")
    timing_events: list[Event] | None = Field(None, description="The round's events, timed.")
    tools: list[Tool] | None = Field(None, description="The tools it called.")


class Round(NamedTuple):
    sent: float  # POSIX seconds
    api: float | None  # seconds from then to its last output; None: it has none
    row: Row


@dataclass
class Session:
    sid: str
    line: int  # its first row's: where a problem of the session is named
    rows: list[tuple[int, Row]] = field(default_factory=list)  # with their lines, in file order
    rounds: list[Round] = field(default_factory=list)  # those with a time, in the order sent


def sessions_of(lines: Iterable[bytes], problems: Problems, passed: Passed) -> dict[str, Session]:
    """The rows grouped by session, sessions in the order of their first row; what AIPerf passes
    over goes to `passed`, with its line and why."""
    sessions: dict[str, Session] = {}
    for lineno, raw in _numbered(lines, problems):
        if (unsafe := line_problem(raw)) is not None:
            problems.add(lineno, unsafe)
            continue
        try:
            row = Row.model_validate_json(raw)
        except ValidationError as e:
            if reason := _passed_over(raw):
                passed.append((lineno, reason))
            else:
                for message in describe(e, raw, unit="one round per line"):
                    problems.add(lineno, message)
            continue
        if not row.session_id:
            passed.append((lineno, "no session_id"))
            continue
        if (row.output_tokens or 0) + (row.reasoning_output_tokens or 0) > MAX_TOKENS:
            problems.add(lineno, f"output_tokens: with reasoning_output_tokens, over {MAX_TOKENS}")
        session = sessions.setdefault(row.session_id, Session(row.session_id, lineno))
        session.rows.append((lineno, row))
    for session in sessions.values():
        session.rounds = _rounds(session, passed)
    return sessions


def _numbered(lines: Iterable[bytes], problems: Problems) -> Iterator[tuple[int, bytes]]:
    """Non-blank lines, stripped, numbered as AIPerf reads the file: as text, where a lone CR
    ends a line too, and a byte-order mark is no whitespace but the start of invalid JSON."""
    lineno = 0
    for chunk in lines:
        body = chunk.removesuffix(b"\n").removesuffix(b"\r")
        for raw in body.split(b"\r") if b"\r" in body else (body,):
            lineno += 1
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                message = "invalid JSON: a byte-order mark opens the file, which AIPerf refuses"
                problems.add(1, message + ": save it as UTF-8 without one")
            elif raw := raw.strip():
                yield lineno, raw


def _passed_over(raw: bytes) -> str | None:
    """Why AIPerf passes over an object that does not validate, or None: it reads it (and
    fails). A line that is no object it refuses, before it reads a row."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    return "no session_id" if isinstance(value, dict) and not value.get("session_id") else None


def _rounds(session: Session, passed: Passed) -> list[Round]:
    """The session's rounds with a time, in the order they were sent (then by `round_index`,
    then in the file's order). A round is sent at its last input, else at its first output."""
    rounds = []
    for lineno, row in session.rows:
        events = row.timing_events or ()
        ins = [e.timestamp for e in events if e.event_type in INPUTS and e.timestamp is not None]
        outs = [e.timestamp for e in events if e.event_type in OUTPUTS and e.timestamp is not None]
        if not ins and not outs:
            passed.append((lineno, "no input or output event with a time"))
            continue
        sent = max(ins) if ins else min(outs)
        rounds.append(Round(sent, max(max(outs) - sent, 0.0) if outs else None, row))
    rounds.sort(key=lambda r: (r.sent, r.row.round_index or 0))
    return rounds
