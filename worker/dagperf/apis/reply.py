"""What a server said, whatever its API: content, reasoning, tool calls, usage and why the reply
ended, or an error.

`Reply` accumulates it; each API's module reads its own events and bodies into it (a subclass's
`add_chunk` and `add_body`), straight from bytes with msgspec, so the request path parses each
event once, in the shape its API gives. Usage is kept in chat's names and the reason a reply
ended in chat's words (`length`, `stop`, `tool_calls`), so records and health checks read every
API alike.

Errors come as `{"error": {...}}` (OpenAI, Anthropic) or `{"object": "error", ...}` (vLLM),
inside a stream or as the body of a failed response; `body_error` reads either, for any API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

from dagperf.apis.conversation import Message, captured_reply
from dagperf.vocabulary import catalog

T = TypeVar("T")
LENGTH = "length"  # the reply ended at its token limit
STOP = "stop"  # it ended by itself (an end of sequence, a stop sequence)


def finish(reason: Any, words: Mapping[str, str] | None = None) -> str | None:
    """Why a reply ended, in chat's words: `reason` as an API gave it, translated by `words`
    (that API's names for chat's reasons) where they differ."""
    if not isinstance(reason, str) or not reason:
        return None
    return words.get(reason, reason) if words else reason


class Usage(msgspec.Struct):
    """Token counts in chat's names (each API's own are mapped to these)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: dict[str, Any] | None = None
    completion_tokens_details: dict[str, Any] | None = None


class ServerError(Exception):
    """The server reported an error in the body or mid-stream."""

    def __init__(self, code: int | None, kind: str, message: str):
        super().__init__(message)
        self.code = code
        self.kind = kind


class MalformedResponse(Exception):
    pass


def decoded(decode: Callable[[bytes], T], raw: bytes, what: str) -> T:
    """`raw` as `decode` reads it (an API's msgspec decoder), or a MalformedResponse saying it
    is not `what`."""
    try:
        return decode(raw)
    except msgspec.DecodeError as e:
        raise MalformedResponse(f"not {what}: {e}: {raw[:200]!r}") from None


class ErrorFields(msgspec.Struct):
    """Where a body reports an error: OpenAI's `error` object, or vLLM's own fields beside
    `"object": "error"`. Bodies that carry more extend it."""

    error: Any = None
    object: str | None = None
    message: str | None = None
    type: str | None = None
    code: Any = None

    def failed(self) -> bool:
        return self.error is not None or self.object == "error"

    def server_error(self) -> ServerError:
        detail = self.error if isinstance(self.error, dict) else {}
        message = detail.get("message") or self.message or str(self.error or "error")
        kind = detail.get("type") or self.type or "ServerError"
        code = detail.get("code", self.code)
        return ServerError(code if isinstance(code, int) else None, str(kind), str(message))


_decode_error = msgspec.json.Decoder(ErrorFields).decode


def body_error(raw: bytes) -> ServerError | None:
    """The error a body or an event reports; None when it reports none or is not JSON."""
    try:
        fields = _decode_error(raw)
    except msgspec.DecodeError:
        return None
    return fields.server_error() if fields.failed() else None


def event_error(detail: Any) -> ServerError:
    """The error a typed event describes (`{"type", "code", "message"}`, or a bare message)."""
    detail = detail if isinstance(detail, dict) else {"message": str(detail or "error")}
    code = detail.get("code")
    kind = detail.get("type") or (code if isinstance(code, str) else None) or "ServerError"
    return ServerError(
        code if isinstance(code, int) else None, str(kind), str(detail.get("message"))
    )


class Reply:
    """Everything one request got back, accumulated event by event or from one body; each API
    reads its own shapes into it (`add_chunk`, `add_body`)."""

    __slots__ = (
        "cache_n",
        "completion",
        "content",
        "finish",
        "reasoning",
        "tool_calls",
        "usage",
    )

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.usage: Usage | None = None
        self.cache_n: int | None = None  # llama.cpp's count of prompt tokens from its cache
        self.completion = False  # a choice or a usage block arrived: this is a completion
        self.finish: str | None = None  # why it ended, in chat's words (`finish`)

    def add_chunk(self, raw: bytes) -> bool:
        """Fold in one stream event; True when it carried output (content, reasoning or a tool
        call): what time to first token and inter-token latency are timed on."""
        raise NotImplementedError

    def add_body(self, raw: bytes) -> None:
        """A whole non-streaming response."""
        raise NotImplementedError

    @property
    def text(self) -> str:
        return "".join(self.content)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    def message(self) -> Message:
        calls = [self.tool_calls[k] for k in sorted(self.tool_calls)] or None
        return captured_reply(self.text, self.reasoning_text, calls)

    def usage_counts(self) -> dict[str, int]:
        """Server-reported token counts, by metric name, where the server gave them."""
        usage = self.usage
        out: dict[str, int] = {}
        if usage is None:
            if self.cache_n is not None:
                out[catalog.USAGE_PROMPT_CACHE_READ_TOKENS.name] = self.cache_n
            return out
        if usage.prompt_tokens is not None:
            out[catalog.USAGE_PROMPT_TOKENS.name] = usage.prompt_tokens
        if usage.completion_tokens is not None:
            out[catalog.USAGE_COMPLETION_TOKENS.name] = usage.completion_tokens
        cached = (usage.prompt_tokens_details or {}).get("cached_tokens", self.cache_n)
        if isinstance(cached, int):
            out[catalog.USAGE_PROMPT_CACHE_READ_TOKENS.name] = cached
        reasoning = (usage.completion_tokens_details or {}).get("reasoning_tokens")
        if isinstance(reasoning, int):
            out[catalog.USAGE_REASONING_TOKENS.name] = reasoning
        return out
