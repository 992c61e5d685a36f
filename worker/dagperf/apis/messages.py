"""Anthropic's Messages API (`--endpoint-type messages`).

Sent: system messages joined as `system`, the rest as user and assistant turns with their text;
`max_tokens`, which the API requires (`MAX_TOKENS` when a turn sets none); the key in
`x-api-key`, with the `anthropic-version` the API asks for.

Read, from typed server-sent events or a whole body: text and thinking (each delta an output
event), tool uses (kept in the history as chat keeps its tool calls) and usage, mapped to chat's
names: `input_tokens` plus the cache's reads and writes as the prompt, `cache_read_input_tokens`
as its cached part, and the running `output_tokens` of `message_delta`. Why a reply ended comes
from `stop_reason` (`max_tokens` is chat's `length`). An `error` event or an error body is a
`ServerError`.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from dagperf.apis.api import Api, Body, Params, Simulated
from dagperf.apis.conversation import Message, message_text
from dagperf.apis.reply import (
    LENGTH,
    STOP,
    Reply,
    Usage,
    decoded,
    event_error,
    finish,
)
from dagperf.apis.served import (
    SAMPLING,
    BadRequest,
    Generation,
    Served,
    messages_tokens,
    named_event,
)

MAX_TOKENS = 4096  # the API needs a limit: a turn that sets none gets this
VERSION = "2023-06-01"  # the `anthropic-version` header


def body(params: Params, messages: list[Message]) -> Body:
    system = "\n".join(message_text(m) for m in messages if m.get("role") == "system")
    turns = [_as_turn(m) for m in messages if m.get("role") != "system"]
    return {**({"system": system} if system else {}), "messages": turns, **params}


def _as_turn(message: Message) -> Message:
    """A chat message as a turn: user or assistant, with its text."""
    role = "assistant" if message.get("role") == "assistant" else "user"
    return {"role": role, "content": message_text(message) or "(empty)"}


# --- the reply ---------------------------------------------------------------------------------

# `stop_reason` in chat's words.
_STOPPED = {
    "max_tokens": LENGTH,
    "end_turn": STOP,
    "stop_sequence": STOP,
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


class _Event(msgspec.Struct):
    """Any event, or a whole body; what is not read is ignored."""

    type: str | None = None
    delta: Any = None
    message: Any = None  # message_start's message
    usage: Any = None
    error: Any = None
    content_block: Any = None
    index: int | None = None
    content: Any = None  # a whole body's content blocks
    stop_reason: Any = None  # a whole body: why it ended


_decode = msgspec.json.Decoder(_Event).decode


def _parse(raw: bytes) -> _Event:
    event = decoded(_decode, raw, "a response event")
    if event.type == "error" or event.error is not None:
        raise event_error(event.error)
    return event


def _call(block: dict[str, Any], arguments: str) -> dict[str, Any]:
    """A tool_use block as a chat tool call."""
    function = {"name": block.get("name"), "arguments": arguments}
    return {"id": block.get("id"), "type": "function", "function": function}


class MessagesReply(Reply):
    __slots__ = ()

    def add_chunk(self, raw: bytes) -> bool:
        event = _parse(raw)
        kind = event.type
        if kind == "content_block_delta" and isinstance(event.delta, dict):
            return self._delta(event.delta, event.index or 0)
        if kind == "message_start" and isinstance(event.message, dict):
            self.completion = True
            self.usage = _usage(event.message.get("usage"))
        elif kind == "content_block_start" and isinstance(event.content_block, dict):
            if event.content_block.get("type") == "tool_use":
                self.tool_calls[event.index or 0] = _call(event.content_block, "")
        elif kind == "message_delta":
            if isinstance(event.delta, dict):
                self.finish = finish(event.delta.get("stop_reason"), _STOPPED) or self.finish
            output = event.usage.get("output_tokens") if isinstance(event.usage, dict) else None
            if isinstance(output, int) and self.usage is not None:
                self.usage = msgspec.structs.replace(self.usage, completion_tokens=output)
        return False

    def _delta(self, delta: dict[str, Any], index: int) -> bool:
        kind = delta.get("type")
        if kind == "text_delta":
            self.content.append(str(delta.get("text") or ""))
        elif kind == "thinking_delta":
            self.reasoning.append(str(delta.get("thinking") or ""))
        elif kind == "input_json_delta":
            call = self.tool_calls.get(index)
            if call is not None:
                call["function"]["arguments"] += str(delta.get("partial_json") or "")
        else:
            return False  # a signature, a citation: not output the model generated as tokens
        return True

    def add_body(self, raw: bytes) -> None:
        body = _parse(raw)
        self.completion = isinstance(body.content, list)
        self.usage = _usage(body.usage)
        self.finish = finish(body.stop_reason, _STOPPED)
        for block in body.content or ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                self.content.append(str(block.get("text") or ""))
            elif block.get("type") == "thinking":
                self.reasoning.append(str(block.get("thinking") or ""))
            elif block.get("type") == "tool_use":
                arguments = json.dumps(block.get("input") or {})
                self.tool_calls[len(self.tool_calls)] = _call(block, arguments)


def _usage(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    read = usage.get("cache_read_input_tokens") or 0
    written = usage.get("cache_creation_input_tokens") or 0
    fresh = usage.get("input_tokens")
    prompt = None if fresh is None else fresh + read + written
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=usage.get("output_tokens"),
        prompt_tokens_details={"cached_tokens": read},
    )


# --- the simulator's side ----------------------------------------------------------------------

FIELDS = SAMPLING | {
    "messages",
    "system",
    "max_tokens",
    "top_k",
    "stop_sequences",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
}


def prompt(body: Body) -> list[str]:
    if not isinstance(body.get("max_tokens"), int):
        raise BadRequest("max_tokens: Field required")  # as Anthropic's API answers
    system = body.get("system")
    head = [{"role": "system", "content": system}] if isinstance(system, str) else []
    turns = body.get("messages") or []
    return messages_tokens(head + turns if isinstance(turns, list) else turns)


class MessagesServed(Served):
    """The simulator's reply: the same tokens, timing and usage as its chat answers, in the
    Messages event sequence (a thinking block, then a text block) and body."""

    def __init__(self, generation: Generation, body: Body):
        super().__init__(generation, body)
        self.id = f"mess-{generation.number:x}"

    def _stop_reason(self) -> str:
        return "max_tokens" if self.generation.finish == LENGTH else "end_turn"

    def _usage(self) -> dict[str, Any]:
        usage = self.generation.usage or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return {
            "input_tokens": usage.get("prompt_tokens", 0) - cached,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": usage.get("completion_tokens", 0),
        }

    def chunks(self) -> list[bytes]:
        thinking, content = self.generation.texts()
        start: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.generation.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage() | {"output_tokens": 1},
        }
        opening = named_event("message_start", {"type": "message_start", "message": start})
        reasoning = self.generation.reasoning
        out = []
        for i, text in enumerate(thinking + content):
            index = 0 if i < reasoning else (1 if thinking else 0)
            head = self._block_start(i, index, bool(thinking)) if i in (0, reasoning) else b""
            kind = ("thinking_delta", "thinking") if i < reasoning else ("text_delta", "text")
            delta = {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": kind[0], kind[1]: text},
            }
            chunk = head + named_event("content_block_delta", delta)
            out.append(opening + chunk if i == 0 else chunk)
        return out

    def _block_start(self, i: int, index: int, thought: bool) -> bytes:
        """Token `i` starts a block (thinking, then text): the previous one stops."""
        thinking = i < self.generation.reasoning
        block = {"type": "thinking", "thinking": ""} if thinking else {"type": "text", "text": ""}
        head = b""
        if not thinking and thought:
            head += named_event("content_block_stop", {"type": "content_block_stop", "index": 0})
        start = {"type": "content_block_start", "index": index, "content_block": block}
        return head + named_event("content_block_start", start)

    def tail(self) -> bytes:
        words = len(self.generation.words)
        output = (self.generation.usage or {}).get("completion_tokens", words)
        reasoning = self.generation.reasoning
        last = 1 if reasoning and reasoning < words else 0
        stop = named_event("content_block_stop", {"type": "content_block_stop", "index": last})
        delta = {
            "type": "message_delta",
            "usage": {"output_tokens": output},
            "delta": {"stop_reason": self._stop_reason(), "stop_sequence": None},
        }
        ending = named_event("message_stop", {"type": "message_stop"})
        return stop + named_event("message_delta", delta) + ending

    def whole(self) -> dict[str, Any]:
        thinking, content = self.generation.texts()
        blocks: list[dict[str, Any]] = []
        if thinking:
            blocks.append({"type": "thinking", "thinking": "".join(thinking), "signature": "x"})
        blocks.append({"type": "text", "text": "".join(content)})
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.generation.model,
            "content": blocks,
            "stop_reason": self._stop_reason(),
            "stop_sequence": None,
            "usage": self._usage(),
        }


API = Api(
    title="Anthropic Messages; the key goes in x-api-key",
    path="/v1/messages",
    body=body,
    reply=MessagesReply,
    simulated=Simulated(FIELDS, prompt, MessagesServed),
    max_tokens_default=MAX_TOKENS,
    key_header="x-api-key",
    key_format="{key}",
    headers=(("anthropic-version", VERSION),),
)
