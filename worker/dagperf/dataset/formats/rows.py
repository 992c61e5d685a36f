"""The rows AIPerf's text formats share, and the conversations they make: a single_turn row is a
`Turn`, a multi_turn line a list of them, and a random_pool row is a `TextRow` (a turn's text
alone); single_turn and multi_turn put their conversations together here (`conversations_of`).
What the fields mean is single_turn's to say (its module, and docs/formats.md).

The models are built when this is imported (about 13 ms), so only those three formats import
it; what other formats share is in `columns`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, model_validator

from dagperf.dataset.formats.columns import LIMIT_FIELD
from dagperf.dataset.limits import ArrivalMs, OutputTokens, WaitMs
from dagperf.dataset.loader import Problems
from dagperf.dataset.specs import ContextMode, GraphNode, Payload, SessionSpec, TraceDataset

MEDIA = ("image", "images", "image_uuids", "audio", "audios", "video", "videos")


class NamedText(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: StrictStr = "text"
    contents: list[StrictStr] = Field(min_length=1)


def text_content(contents: list[str]) -> Any:
    """A message's content as AIPerf renders texts: one text as a string, several as text parts
    (empty ones left out, and no parts at all as an empty string)."""
    if len(contents) == 1:
        return contents[0]
    return [{"type": "text", "text": c} for c in contents if c] or ""


class TextRow(BaseModel):
    """What a single_turn row and a random_pool row share: the text of one message."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    text: StrictStr | None = None
    texts: list[StrictStr] | list[NamedText] | None = None
    image: Any = None
    images: Any = None
    image_uuids: Any = None
    audio: Any = None
    audios: Any = None
    video: Any = None
    videos: Any = None

    @model_validator(mode="after")
    def _text_only(self) -> TextRow:
        if media := [name for name in MEDIA if getattr(self, name) is not None]:
            raise ValueError(f"{media[0]}: images, audio and video are not supported (text only)")
        if self.text and self.texts:
            raise ValueError("text and texts cannot be set together")
        if not self.contents:
            raise ValueError("a turn needs text: give text or texts")
        return self

    @property
    def contents(self) -> list[str]:
        if self.texts is None:
            return [self.text] if self.text else []
        return [c for t in self.texts for c in ((t,) if isinstance(t, str) else t.contents)]


class Turn(TextRow):
    """One row of single_turn, or one turn of multi_turn."""

    type: Literal["single_turn"] | None = None
    session_id: StrictStr | None = Field(default=None, min_length=1)
    role: StrictStr | None = Field(default=None, min_length=1)
    timestamp: ArrivalMs | None = None
    delay: WaitMs | None = None
    output_length: OutputTokens | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_schedule(self) -> Turn:
        if self.timestamp and self.delay:
            raise ValueError("timestamp and delay cannot be set together")
        return self

    def message(self) -> dict[str, Any]:
        return {"role": self.role or "user", "content": text_content(self.contents)}

    def payload(self, lead: list[dict[str, Any]] | None = None) -> Payload:
        extra = {} if self.output_length is None else {LIMIT_FIELD: self.output_length}
        extra |= self.extra or {}
        return Payload.of([*(lead or []), self.message()], extra=extra or None)


# Per line: its file's problems, the line, the session_id, its turns and its context_mode.
Rows = Iterator[tuple[Problems, int, str | None, list[Turn], ContextMode | None]]


class _Conversation:
    def __init__(self, line: int, mode: ContextMode | None):
        self.line, self.mode = line, mode
        self.turns: list[Turn] = []


def conversations_of(rows: Rows, source: str, single: bool) -> TraceDataset:
    """The conversations of single_turn rows (`single`) or of multi_turn lines: rows sharing a
    session_id are one conversation, the others get an id from their line."""
    conversations: dict[str, _Conversation] = {}
    generated: dict[str, int] = {}  # ids given to conversations without one, by line
    problems: Problems | None = None
    for problems, lineno, sid, turns, mode in rows:
        if not turns:
            continue
        if sid in generated:
            problems.add(
                lineno,
                f"session_id: '{sid}' is the id given to the conversation "
                f"without one on line {generated[sid]}; choose another",
            )
            continue
        key = sid if sid is not None else f"line-{lineno:06d}"
        if sid is None:
            if key in conversations:
                problems.add(
                    lineno,
                    f"session_id: missing, and the id '{key}' it would get is "
                    "taken; give it a session_id",
                )
                continue
            generated[key] = lineno
        found = conversations.setdefault(key, _Conversation(lineno, mode))
        if mode is not None and found.mode not in (None, mode):
            problems.add(lineno, f"context_mode: '{mode}' differs from line {found.line}'s")
        found.turns.extend(turns)
    if problems is None:
        problems = Problems(source)
        problems.add(None, "empty file: it needs at least one line")
    timed = [c for c in conversations.values() if c.turns[0].timestamp is not None]
    if timed and len(timed) < len(conversations):
        untimed = next(c for c in conversations.values() if c.turns[0].timestamp is None)
        problems.add(
            untimed.line,
            f"timestamp: missing, but line {timed[0].line} has one: "
            "give every conversation a timestamp or none",
        )
    problems.raise_any()
    default = ContextMode.MESSAGE_ARRAY_WITH_RESPONSES if single else None
    specs = [_spec(key, c, default, single) for key, c in conversations.items()]
    if timed:
        specs.sort(key=lambda s: s.start_s or 0.0)
    return TraceDataset(specs, None, bool(timed))


def _spec(key: str, conv: _Conversation, default: ContextMode | None, single: bool) -> SessionSpec:
    turns, lead = conv.turns, None
    if not single and _hoisted(turns):
        lead, turns = [turns[0].message()], turns[1:]
    as_written = (conv.mode or default) is ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
    nodes = tuple(
        GraphNode(
            key=str(k),
            payload=turn.payload(lead if k == 0 or as_written else None),
            parents=(k - 1,) if k else (),
            history=k - 1 if k and not as_written else None,
            wait_s=(turn.delay or 0.0) / 1000,
        )
        for k, turn in enumerate(turns)
    )
    start = conv.turns[0].timestamp
    mode = conv.mode or (default if single and len(turns) > 1 else None)
    return SessionSpec(key, nodes, mode, None if start is None else start / 1000)


def _hoisted(turns: list[Turn]) -> bool:
    """A leading system turn that AIPerf sends as the system message of every request: one
    text-only system turn before another turn that is not a system turn."""
    return (
        len(turns) > 1
        and turns[0].role == "system"
        and turns[1].role != "system"
        and turns[0].output_length is None
        and not turns[0].extra
    )


__all__ = ["NamedText", "Rows", "TextRow", "Turn", "conversations_of", "text_content"]
