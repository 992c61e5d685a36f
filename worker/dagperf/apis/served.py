"""The simulator's side of every API: what its model generated for one request (`Generation`),
and the reply an API's module writes from it (`Served`): whole, or as the stream of events that
API sends, one chunk per token.

The simulator times the chunks (each written at its token's due time) and keeps the record; an
API's module only shapes bytes and bodies, so it needs no web server: a worker imports every
API's module, and never the simulator's aiohttp.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from dagperf.dataset.text import chat_prompt_tokens

# The fields every API here takes beside its own; with --strict-fields the simulator refuses a
# body with any field its API does not define, as servers that validate bodies strictly do.
SAMPLING = frozenset(
    {"model", "stream", "temperature", "top_p", "seed", "user", "metadata", "stop"}
)


class BadRequest(Exception):
    """A request its API would refuse (400), with the reason the server gives."""


@dataclass(frozen=True, slots=True)
class Generation:
    """What the simulated model generated for one request, before an API shapes it."""

    number: int  # the simulator's count of requests: a reply's id is made from it
    model: str
    words: list[str]
    reasoning: int  # the first `reasoning` words are reasoning
    finish: str  # in chat's words: "stop" or "length"
    usage: dict[str, Any] | None  # chat-shaped (`chat_usage`); None: the server reports none

    def texts(self) -> tuple[list[str], list[str]]:
        """Token texts, reasoning then content; each run starts without a space."""
        texts = [w if i in (0, self.reasoning) else " " + w for i, w in enumerate(self.words)]
        return texts[: self.reasoning], texts[self.reasoning :]


class Served(ABC):
    """One reply as its API writes it, from what the model generated for a request's body."""

    def __init__(self, generation: Generation, body: dict[str, Any]):
        self.generation = generation

    @abstractmethod
    def chunks(self) -> list[bytes]:
        """The stream's events, one entry per token (the first also carries the opening)."""

    @abstractmethod
    def tail(self) -> bytes:
        """What follows the last token: the end of the output, the usage, the stream's end."""

    @abstractmethod
    def whole(self) -> dict[str, Any]:
        """The reply as one body, without streaming."""

    def text(self) -> str:
        """The content sent (none for a tool call), for the simulator's records."""
        return "".join(self.generation.texts()[1])

    def tool_call(self) -> dict[str, Any] | None:
        """The tool call sent instead of text, in chat's shape."""
        return None


def chat_usage(prompt: int, cached: int, completion: int, reasoning: int) -> dict[str, Any]:
    """A reply's usage in chat's shape, which each API's module maps to its own."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def named_event(name: str, data: dict[str, Any]) -> bytes:
    """A server-sent event with a name (`event:`), as the typed-event APIs send them."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def messages_tokens(messages: Any, tools: Any = None) -> list[str]:
    """A chat-style `messages` array as prompt tokens; BadRequest when it cannot be one."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array")
    if not all(isinstance(m, dict) for m in messages):
        raise BadRequest("each entry of 'messages' must be an object")
    return chat_prompt_tokens(messages, tools)
