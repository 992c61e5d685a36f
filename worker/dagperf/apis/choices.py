"""OpenAI's `choices` shape, which chat and completions share: the reply read from chunks or a
body, and the simulator's reply written in it.

Stream chunks and whole bodies decode into one tolerant shape (unknown fields are ignored;
`reasoning_content` and `reasoning` both count as reasoning), straight from bytes with msgspec.
Cached prompt tokens come from `usage.prompt_tokens_details.cached_tokens` (OpenAI, vLLM,
SGLang, llama.cpp) or, where a server reports them only there, from llama.cpp's own
`timings.cache_n`.

The simulator's chunks are built as bytes from a prebuilt prefix, without a JSON encoder per
chunk, so it stays cheap next to the client it is measuring.
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec

from dagperf.apis.reply import ErrorFields, Reply, Usage, decoded, finish
from dagperf.apis.served import Generation, Served


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


class _Timings(msgspec.Struct):
    """llama.cpp's per-request figures (in the last chunk, or the body)."""

    cache_n: int | None = None


class _Body(ErrorFields):
    choices: list[_Choice] | None = None
    usage: Usage | None = None
    timings: _Timings | None = None


_decode = msgspec.json.Decoder(_Body).decode


def _parse(raw: bytes) -> _Body:
    body = decoded(_decode, raw, "an OpenAI response object")
    if body.failed():
        raise body.server_error()
    return body


class ChoicesReply(Reply):
    """A chat or completions reply: deltas, messages or texts of the first choice."""

    __slots__ = ()

    def add_chunk(self, raw: bytes) -> bool:
        try:  # (`_parse` inlined: this runs once per token)
            body = _decode(raw)
        except msgspec.DecodeError:
            body = _parse(raw)  # raises, saying what the chunk is not
        if body.failed():
            raise body.server_error()
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
        body = _parse(raw)
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


# --- the simulator's side ----------------------------------------------------------------------


class ChoicesServed(Served):
    """The simulator's chat (`chat`) or completions reply, or a chat tool call (`tool`)."""

    def __init__(
        self, generation: Generation, body: dict[str, Any], chat: bool, tool: str | None = None
    ):
        super().__init__(generation, body)
        self.chat = chat
        self.tool = tool  # a function to call instead of answering in text
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{generation.number:x}"
        self.finish = "tool_calls" if tool else generation.finish
        options = body.get("stream_options")
        asked = isinstance(options, dict) and options.get("include_usage") is True
        self.include_usage = generation.usage is not None and asked

    def _kind(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def _prefix(self) -> str:
        return (
            f'data: {{"id":"{self.id}","object":"{self._kind()}","created":{int(time.time())},'
            f'"model":{json.dumps(self.generation.model)},"choices":[{{"index":0,'
        )

    def _arguments(self) -> list[str]:
        """A tool call's JSON arguments, one piece per content token."""
        pieces = list(self.generation.texts()[1]) or [""]
        pieces[0] = '{"query": "' + pieces[0]
        pieces[-1] += '"}'
        return pieces

    def tool_call(self) -> dict[str, Any] | None:
        if self.tool is None:
            return None
        function = {"name": self.tool, "arguments": "".join(self._arguments())}
        return {"id": f"call-{self.id}", "type": "function", "function": function}

    def text(self) -> str:
        return "" if self.tool is not None else super().text()

    def chunks(self) -> list[bytes]:
        prefix = self._prefix()
        thinking, content = self.generation.texts()
        if self.tool is not None:
            content = self._arguments()
        return [
            f'{prefix}{self._delta(i, text)},"logprobs":null,"finish_reason":null}}]}}\n\n'.encode()
            for i, text in enumerate(thinking + content)
        ]

    def _delta(self, i: int, text: str) -> str:
        """Token `i`'s part of its chunk: a completion's text, or a chat delta."""
        reasoning = self.generation.reasoning
        role = '"role":"assistant",' if i == 0 else ""
        if not self.chat:
            return f'"text":{json.dumps(text)}'
        if i < reasoning:
            return f'"delta":{{{role}"reasoning_content":{json.dumps(text)}}}'
        if self.tool is not None:
            call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
            if i == reasoning:  # the first fragment names the call
                call |= {"id": f"call-{self.id}", "type": "function"}
                call["function"]["name"] = self.tool
            return f'"delta":{{{role}"tool_calls":[{json.dumps(call)}]}}'
        return f'"delta":{{{role}"content":{json.dumps(text)}}}'

    def tail(self) -> bytes:
        """The finish reason, the usage if asked, [DONE]."""
        delta = '"delta":{}' if self.chat else '"text":""'
        final = f'{self._prefix()}{delta},"finish_reason":"{self.finish}"}}]}}\n\n'.encode()
        return final + (self._usage_chunk() if self.include_usage else b"") + b"data: [DONE]\n\n"

    def _usage_chunk(self) -> bytes:
        chunk = {
            "id": self.id,
            "object": self._kind(),
            "created": int(time.time()),
            "model": self.generation.model,
            "choices": [],
            "usage": self.generation.usage,
        }
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    def whole(self) -> dict[str, Any]:
        thinking, content = self.generation.texts()
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
            if self.tool is not None:
                message |= {"content": None, "tool_calls": [self.tool_call()]}
            if thinking:
                message["reasoning_content"] = "".join(thinking)
            choice = {"index": 0, "message": message, "finish_reason": self.finish}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": "".join(content), "finish_reason": self.finish}
            kind = "text_completion"
        usage = self.generation.usage
        body = {
            "id": self.id,
            "object": kind,
            "created": int(time.time()),
            "model": self.generation.model,
            "choices": [choice],
        }
        return body | ({"usage": usage} if usage is not None else {})
