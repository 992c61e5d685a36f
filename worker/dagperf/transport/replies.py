"""What a server said: content, reasoning, tool calls, usage, or an error, from chunks or a body.

Stream chunks and whole bodies of both APIs decode into one tolerant shape (unknown fields are
ignored; `reasoning_content` and `reasoning` both count as reasoning), straight from bytes with
msgspec. Cached prompt tokens come from `usage.prompt_tokens_details.cached_tokens` (OpenAI,
vLLM, SGLang, llama.cpp) or, where a server reports them only there, from llama.cpp's own
`timings.cache_n`. Errors come as `{"error": {...}}` (OpenAI) or `{"object": "error", ...}`
(vLLM), inside a stream or as the body of a failed response.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from dagperf.endpoints import captured_reply


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    message: _Delta | None = None
    text: str | None = None
    finish_reason: str | None = None


class Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: dict[str, Any] | None = None
    completion_tokens_details: dict[str, Any] | None = None


class _Timings(msgspec.Struct):
    """llama.cpp's per-request figures (in the last chunk, or the body)."""

    cache_n: int | None = None


class _Body(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: Usage | None = None
    timings: _Timings | None = None
    error: Any = None
    object: str | None = None
    message: str | None = None
    type: str | None = None
    code: Any = None


_decode = msgspec.json.Decoder(_Body).decode


class ServerError(Exception):
    """The server reported an error in the body or mid-stream."""

    def __init__(self, code: int | None, kind: str, message: str):
        super().__init__(message)
        self.code = code
        self.kind = kind


class MalformedResponse(Exception):
    pass


LENGTH = "length"  # the reply ended at its token limit
STOP = "stop"  # it ended by itself (an end of sequence, a stop sequence)
# Each API's words for why a reply ended, in chat's: Messages' `stop_reason`, the reason a
# Responses reply is `incomplete` (`incomplete_details.reason`).
_FINISH = {
    "max_tokens": LENGTH, "max_output_tokens": LENGTH, "end_turn": STOP, "stop_sequence": STOP,
    "tool_use": "tool_calls", "refusal": "content_filter",
}  # fmt: skip


def finish(reason: Any) -> str | None:
    """Why a reply ended, in chat's words (`length`, `stop`, `tool_calls`, ...)."""
    return _FINISH.get(reason, reason) if isinstance(reason, str) and reason else None


def decode(raw: bytes) -> _Body:
    try:
        body = _decode(raw)
    except msgspec.DecodeError as e:
        raise MalformedResponse(f"not an OpenAI response object: {e}: {raw[:200]!r}") from None
    if body.error is not None or body.object == "error":
        raise server_error(body)
    return body


def server_error(body: _Body) -> ServerError:
    detail = body.error if isinstance(body.error, dict) else {}
    message = detail.get("message") or body.message or str(body.error or "error")
    kind = detail.get("type") or body.type or "ServerError"
    code = detail.get("code", body.code)
    return ServerError(code if isinstance(code, int) else None, str(kind), str(message))


class Reply:
    """Everything one request got back, accumulated chunk by chunk or from one body."""

    __slots__ = (
        "_body",
        "_chunk",
        "cache_n",
        "completion",
        "content",
        "finish",
        "reasoning",
        "tool_calls",
        "usage",
    )

    def __init__(
        self,
        chunk: Callable[[Reply, bytes], bool] | None = None,
        body: Callable[[Reply, bytes], None] | None = None,
    ) -> None:
        """`chunk` and `body` parse another API's events and bodies into this reply (see
        `dialects`); without them, the OpenAI chat and completions shapes."""
        self._chunk = chunk
        self._body = body
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.usage: Usage | None = None
        self.cache_n: int | None = None  # llama.cpp's count of prompt tokens from its cache
        self.completion = False  # a choice or a usage block arrived: this is a completion
        self.finish: str | None = None  # why it ended, in chat's words (`finish`)

    def add_chunk(self, raw: bytes) -> bool:
        """Fold in one stream chunk; True when it carried output (content or reasoning)."""
        if self._chunk is not None:
            return self._chunk(self, raw)
        body = decode(raw)
        if body.choices or body.usage is not None:
            self.completion = True
        if body.usage is not None:
            self.usage = body.usage
        if body.timings is not None:
            self.cache_n = body.timings.cache_n
        output = False
        for choice in body.choices or ():
            if choice.finish_reason:  # null in every chunk but the last
                self.finish = finish(choice.finish_reason) or self.finish
            delta = choice.delta
            if delta is None:
                if choice.text:
                    self.content.append(choice.text)
                    output = True
                continue
            if delta.content:
                self.content.append(delta.content)
                output = True
            thought = delta.reasoning_content or delta.reasoning
            if thought:
                self.reasoning.append(thought)
                output = True
            if delta.tool_calls:
                self._merge_tool_calls(delta.tool_calls)
                output = True
        return output

    def add_body(self, raw: bytes) -> None:
        """A whole non-streaming response."""
        if self._body is not None:
            self._body(self, raw)
            return
        body = decode(raw)
        self.completion = bool(body.choices) or body.usage is not None
        self.usage = body.usage
        if body.timings is not None:
            self.cache_n = body.timings.cache_n
        for choice in (body.choices or [])[:1]:
            self.finish = finish(choice.finish_reason)
            message = choice.message
            if message is None:
                self.content.append(choice.text or "")
                continue
            self.content.append(message.content or "")
            self.reasoning.append(message.reasoning_content or message.reasoning or "")
            if message.tool_calls:
                self.tool_calls = dict(enumerate(message.tool_calls))

    def _merge_tool_calls(self, deltas: list[dict[str, Any]]) -> None:
        """Stream tool calls arrive as fragments keyed by index; arguments concatenate."""
        for fragment in deltas:
            index = fragment.get("index", len(self.tool_calls))
            call = self.tool_calls.setdefault(index, {"type": "function", "function": {}})
            for key in ("id", "type"):
                if fragment.get(key):
                    call[key] = fragment[key]
            function = fragment.get("function") or {}
            target = call["function"]
            if function.get("name"):
                target["name"] = target.get("name", "") + function["name"]
            if function.get("arguments") is not None:
                target["arguments"] = target.get("arguments", "") + function["arguments"]

    @property
    def text(self) -> str:
        return "".join(self.content)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    def message(self) -> dict[str, Any]:
        calls = [self.tool_calls[k] for k in sorted(self.tool_calls)] or None
        return captured_reply(self.text, self.reasoning_text, calls)

    def usage_counts(self) -> dict[str, int]:
        """Server-reported token counts, by metric name, where the server gave them."""
        usage = self.usage
        if usage is None:
            return {} if self.cache_n is None else {"usage_prompt_cache_read_tokens": self.cache_n}
        out = {}
        if usage.prompt_tokens is not None:
            out["usage_prompt_tokens"] = usage.prompt_tokens
        if usage.completion_tokens is not None:
            out["usage_completion_tokens"] = usage.completion_tokens
        cached = (usage.prompt_tokens_details or {}).get("cached_tokens", self.cache_n)
        if isinstance(cached, int):
            out["usage_prompt_cache_read_tokens"] = cached
        reasoning = (usage.completion_tokens_details or {}).get("reasoning_tokens")
        if isinstance(reasoning, int):
            out["usage_reasoning_tokens"] = reasoning
        return out
