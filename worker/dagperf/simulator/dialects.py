"""The simulator's answers in OpenAI's Responses API and Anthropic's Messages API: the same
tokens, timing and usage as its chat answers, in those APIs' event sequences and body shapes.

Streams are lists of events, one per token (the first also carries the opening events), then a
tail that closes the output and reports usage; each event is written at its token's due time,
as chat chunks are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


@dataclass(frozen=True, slots=True)
class DialectReply:
    api: str  # "responses" or "messages"
    id: str
    model: str
    words: list[str]
    reasoning: int  # the first `reasoning` words are reasoning
    finish: str
    usage: dict[str, Any] | None  # chat-shaped; None: the server reports no usage

    def texts(self) -> tuple[list[str], list[str]]:
        texts = [w if i in (0, self.reasoning) else " " + w for i, w in enumerate(self.words)]
        return texts[: self.reasoning], texts[self.reasoning :]

    def chunks(self) -> list[bytes]:
        if self.api == "responses":
            return self._responses_chunks()
        return self._messages_chunks()

    def tail(self, include_usage: bool) -> bytes:
        if self.api == "responses":  # a reply cut at its limit is `incomplete`, as OpenAI's is
            kind = "response.incomplete" if self.finish == "length" else "response.completed"
            done = {"type": kind, "response": self._response(self._ended())}
            return _event(kind, done)
        output = (self.usage or {}).get("completion_tokens", len(self.words))
        last = 1 if self.reasoning and self.reasoning < len(self.words) else 0
        stop = _event("content_block_stop", {"type": "content_block_stop", "index": last})
        delta = {
            "type": "message_delta",
            "usage": {"output_tokens": output},
            "delta": {"stop_reason": self._stop_reason(), "stop_sequence": None},
        }
        ending = _event("message_delta", delta) + _event("message_stop", {"type": "message_stop"})
        return stop + ending

    def whole(self) -> dict[str, Any]:
        if self.api == "responses":
            return self._response(self._ended())
        thinking, content = self.texts()
        blocks: list[dict[str, Any]] = []
        if thinking:
            blocks.append({"type": "thinking", "thinking": "".join(thinking), "signature": "x"})
        blocks.append({"type": "text", "text": "".join(content)})
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": blocks,
            "stop_reason": self._stop_reason(),
            "stop_sequence": None,
            "usage": self._messages_usage(),
        }

    # --- Responses ----------------------------------------------------------------------------

    def _ended(self) -> str:
        return "incomplete" if self.finish == "length" else "completed"

    def _response(self, status: str) -> dict[str, Any]:
        thinking, content = self.texts()
        output: list[dict[str, Any]] = []
        if thinking:
            output.append(
                {
                    "id": f"rs_{self.id}",
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": "".join(thinking)}],
                }
            )
        output.append(
            {
                "id": f"msg_{self.id}",
                "type": "message",
                "status": status,
                "role": "assistant",
                "content": [{"type": "output_text", "text": "".join(content), "annotations": []}],
            }
        )
        usage = None
        if self.usage is not None and status != "in_progress":
            u = self.usage
            usage = {
                "input_tokens": u["prompt_tokens"],
                "input_tokens_details": u["prompt_tokens_details"],
                "output_tokens": u["completion_tokens"],
                "output_tokens_details": u["completion_tokens_details"],
                "total_tokens": u["total_tokens"],
            }
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "status": status,
            "model": self.model,
            "output": [] if status == "in_progress" else output,
            "usage": usage,
            "error": None,
        }
        if status == "incomplete":  # it reached max_output_tokens
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        return body

    def _responses_chunks(self) -> list[bytes]:
        thinking, content = self.texts()
        opening = _event(
            "response.created",
            {"type": "response.created", "response": self._response("in_progress")},
        )
        out = []
        for i, text in enumerate(thinking + content):
            kind = "reasoning_summary_text" if i < self.reasoning else "output_text"
            event = _event(
                f"response.{kind}.delta",
                {
                    "type": f"response.{kind}.delta",
                    "item_id": f"msg_{self.id}",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": text,
                },
            )
            out.append(opening + event if i == 0 else event)
        return out

    # --- Messages -----------------------------------------------------------------------------

    def _stop_reason(self) -> str:
        return "max_tokens" if self.finish == "length" else "end_turn"

    def _messages_usage(self) -> dict[str, Any]:
        u = self.usage or {}
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return {
            "input_tokens": u.get("prompt_tokens", 0) - cached,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": u.get("completion_tokens", 0),
        }

    def _messages_chunks(self) -> list[bytes]:
        thinking, content = self.texts()
        start: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._messages_usage() | {"output_tokens": 1},
        }
        opening = _event("message_start", {"type": "message_start", "message": start})
        out = []
        for i, text in enumerate(thinking + content):
            index = 0 if i < self.reasoning else (1 if thinking else 0)
            head = b""
            if i in (0, self.reasoning):  # a block starts: thinking, then text
                block = (
                    {"type": "thinking", "thinking": ""}
                    if i < self.reasoning
                    else {"type": "text", "text": ""}
                )
                if i == self.reasoning and thinking:
                    head += _event("content_block_stop", {"type": "content_block_stop", "index": 0})
                head += _event(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": block},
                )
            kind = ("thinking_delta", "thinking") if i < self.reasoning else ("text_delta", "text")
            delta = {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": kind[0], kind[1]: text},
            }
            out.append((opening if i == 0 else b"") + head + _event("content_block_delta", delta))
        return out
