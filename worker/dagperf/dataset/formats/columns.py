"""The columns several formats' rows share, and how they are read; each format reads its own
rows and imports what it shares from here (or from `rows`), never from another format.

- a session's id (`Id`): a string or an integer, the same session either way; `session_id_of`
  finds it on a line that failed, so its session is not checked again (timed_synthetic_session,
  shared_prefix);
- a prompt's block ids (`BlockId`) and their `BLOCK_SIZE`, Mooncake's, where no config says
  otherwise (mooncake_trace, shared_prefix, Veeksha's configs);
- the keys of a recorded conversation (`Keys`) and its answered turns (`turn_pairs`), skipped as
  Veeksha skips (untimed_content_multi_turn, sharegpt, Veeksha's configs);
- `LIMIT_FIELD`, the body field a reply's limit is sent in where AIPerf sends it so.

Nothing here builds a model, so a format that imports it pays nothing for the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from dagperf.dataset.limits import too_deep

LIMIT_FIELD = "max_completion_tokens"  # a reply's limit in the body, as AIPerf sends it on chat


def _id_text(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ValueError(f"must be a string or an integer, got {json.dumps(value)}")
    return value


Id = Annotated[str, BeforeValidator(_id_text), Field(min_length=1)]


def session_id_of(raw: bytes) -> str | None:
    """The session of a line that failed, so its session's graph is not checked again."""
    if too_deep(raw):  # json.loads would recurse past the stack
        return None
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    sid = obj.get("session_id") if isinstance(obj, dict) else None
    try:
        return _id_text(sid) or None
    except ValueError:
        return None


BLOCK_SIZE = 512  # tokens per hash id, as in the published Mooncake traces
BlockId = Annotated[int, Field(ge=0, strict=True)]


@dataclass(frozen=True, slots=True)
class Keys:
    """Where a row keeps its messages and how they name roles; Veeksha's flavour config names
    them conversation_column, role_key, content_key, user_role_value, assistant_role_value."""

    column: str = "conversations"
    role: str = "from"
    content: str = "value"
    user: str = "human"
    assistant: str = "gpt"


DEFAULT_KEYS = Keys()


def turn_pairs(messages: list[Any], keys: Keys = DEFAULT_KEYS) -> Iterator[tuple[str, str]]:
    """(user, assistant) contents of each answered user message, skipped as Veeksha skips."""
    i = 0
    while i < len(messages):
        message = messages[i]
        answer = messages[i + 1] if i + 1 < len(messages) else None
        if (
            _role(message, keys) == keys.user
            and answer is not None
            and _role(answer, keys) == keys.assistant
        ):
            yield str(message.get(keys.content, "")), str(answer.get(keys.content, ""))
            i += 2
        else:
            i += 1


def _role(message: Any, keys: Keys) -> Any:
    return message.get(keys.role) if isinstance(message, dict) else None


__all__ = [
    "BLOCK_SIZE",
    "DEFAULT_KEYS",
    "LIMIT_FIELD",
    "BlockId",
    "Id",
    "Keys",
    "session_id_of",
    "turn_pairs",
]
