"""OpenAI's Responses API (`--endpoint-type responses`).

Sent: the whole history as typed input messages each time, never `previous_response_id` (a tool's
result, or a call, as text); the reply's cap as `max_output_tokens`.

Read, from typed server-sent events or a whole body: output text and reasoning (each delta an
output event, for time to first token and inter-token latency), function calls (kept in the
history as chat keeps them) and usage, mapped to chat's names (`input_tokens`,
`input_tokens_details.cached_tokens`, `output_tokens`, `output_tokens_details.reasoning_tokens`).
A reply `completed` stopped by itself; one `incomplete` for `max_output_tokens` hit its limit
(`length`). An `error` event, a `response.failed` or an error body is a `ServerError`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from dagperf.apis.api import Api, Body, Params, Simulated
from dagperf.apis.conversation import Message, message_text
from dagperf.apis.reply import (
    LENGTH,
    STOP,
    Reply,
    ServerError,
    Usage,
    decoded,
    event_error,
    finish,
)
from dagperf.apis.served import SAMPLING, BadRequest, Generation, Served, named_event
from dagperf.dataset.text import chat_prompt_tokens


def body(params: Params, messages: list[Message]) -> Body:
    return {"input": [_as_input(m) for m in messages], **params}


def _as_input(message: Message) -> Message:
    """A chat message as an input item: a message with its role and text. `type` is optional in
    OpenAI's API, but servers that check items (llama.cpp's) refuse an assistant item without
    it."""
    role = message.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        role = "user"
    return {"type": "message", "role": role, "content": message_text(message)}


# --- the reply ---------------------------------------------------------------------------------

_ENDED = {"max_output_tokens": LENGTH}  # why a reply is incomplete, in chat's words
_ENDED_EVENTS = ("response.completed", "response.incomplete")  # with the usage


class _Event(msgspec.Struct):
    """Any event, or a whole body; what is not read is ignored."""

    type: str | None = None
    delta: Any = None
    response: Any = None  # the response object (created, completed, failed)
    usage: Any = None
    error: Any = None
    output: Any = None  # a whole body's output items
    item: Any = None  # output_item.added / done
    code: Any = None  # an error event's own fields
    message: Any = None
    status: Any = None  # a whole body: completed, incomplete
    incomplete_details: Any = None  # ... and why, when incomplete


_decode = msgspec.json.Decoder(_Event).decode


def _parse(raw: bytes) -> _Event:
    event = decoded(_decode, raw, "a response event")
    if event.type in ("error", "response.failed") or event.error is not None:
        raise _error(event)
    return event


def _error(event: _Event) -> ServerError:
    detail = event.error
    if detail is None and isinstance(event.response, dict):
        detail = event.response.get("error")
    if detail is None and event.type == "error":  # the fields are the event's own
        detail = {"code": event.code, "message": event.message}
    return event_error(detail)


class ResponsesReply(Reply):
    __slots__ = ()

    def add_chunk(self, raw: bytes) -> bool:
        event = _parse(raw)
        kind = event.type or ""
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            self.completion = True
            self.content.append(str(event.delta or ""))
            return True
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            self.completion = True
            self.reasoning.append(str(event.delta or ""))
            return True
        if kind == "response.function_call_arguments.delta":
            self.completion = True
            return True
        if kind == "response.output_item.done" and isinstance(event.item, dict):
            self._item(event.item, streamed=True)
        elif kind in ("response.created", "response.in_progress"):
            self.completion = True
        elif kind in _ENDED_EVENTS and isinstance(event.response, dict):
            self.completion = True
            self.usage = _usage(event.response.get("usage"))
            self.finish = _finish(event.response)
        return False

    def add_body(self, raw: bytes) -> None:
        body = _parse(raw)
        self.completion = isinstance(body.output, list) or body.usage is not None
        self.usage = _usage(body.usage)
        self.finish = _finish(
            {"status": body.status, "incomplete_details": body.incomplete_details}
        )
        for item in body.output or ():
            if isinstance(item, dict):
                self._item(item, streamed=False)

    def _item(self, item: dict[str, Any], streamed: bool) -> None:
        """An output item: its text (whole bodies only; a stream sent it as deltas) or a
        call."""
        kind = item.get("type")
        if kind == "function_call":
            function = {"name": item.get("name"), "arguments": item.get("arguments", "")}
            call_id = item.get("call_id") or item.get("id")
            self.tool_calls[len(self.tool_calls)] = {
                "id": call_id,
                "type": "function",
                "function": function,
            }
        elif kind == "message" and not streamed:
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                    self.content.append(str(part.get("text") or part.get("refusal") or ""))
        elif kind == "reasoning" and not streamed:
            for part in item.get("summary") or item.get("content") or ():
                if isinstance(part, dict):
                    self.reasoning.append(str(part.get("text") or ""))


def _finish(response: dict[str, Any]) -> str | None:
    """A completed reply stopped by itself; an incomplete one says why (its token limit:
    `max_output_tokens`)."""
    status = response.get("status")
    if status == "completed":
        return STOP
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return finish(reason, _ENDED) or status
    return None


def _usage(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
    reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
    return Usage(
        prompt_tokens=usage.get("input_tokens"),
        completion_tokens=usage.get("output_tokens"),
        prompt_tokens_details=None if cached is None else {"cached_tokens": cached},
        completion_tokens_details=None if reasoning is None else {"reasoning_tokens": reasoning},
    )


# --- the simulator's side ----------------------------------------------------------------------

FIELDS = SAMPLING | {
    "input",
    "instructions",
    "max_output_tokens",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "previous_response_id",
    "store",
    "reasoning",
    "text",
    "truncation",
    "include",
    "background",
    "service_tier",
}


def prompt(body: Body) -> list[str]:
    given = body.get("input")
    messages = [{"role": "user", "content": given}] if isinstance(given, str) else given
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'input' must be a string or a non-empty array")
    return chat_prompt_tokens(messages, body.get("tools"))


class ResponsesServed(Served):
    """The simulator's reply: the same tokens, timing and usage as its chat answers, in the
    Responses event sequence and body. A reply cut at its limit is `incomplete`, as OpenAI's
    is."""

    def __init__(self, generation: Generation, body: Body):
        super().__init__(generation, body)
        self.id = f"resp-{generation.number:x}"

    def _ended(self) -> str:
        return "incomplete" if self.generation.finish == LENGTH else "completed"

    def chunks(self) -> list[bytes]:
        thinking, content = self.generation.texts()
        created = {"type": "response.created", "response": self._response("in_progress")}
        opening = named_event("response.created", created)
        out = []
        for i, text in enumerate(thinking + content):
            kind = "reasoning_summary_text" if i < self.generation.reasoning else "output_text"
            delta = {
                "type": f"response.{kind}.delta",
                "item_id": f"msg_{self.id}",
                "output_index": 0,
                "content_index": 0,
                "delta": text,
            }
            event = named_event(f"response.{kind}.delta", delta)
            out.append(opening + event if i == 0 else event)
        return out

    def tail(self) -> bytes:
        kind = f"response.{self._ended()}"
        return named_event(kind, {"type": kind, "response": self._response(self._ended())})

    def whole(self) -> dict[str, Any]:
        return self._response(self._ended())

    def _response(self, status: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "status": status,
            "model": self.generation.model,
            "output": [] if status == "in_progress" else self._output(status),
            "usage": None if status == "in_progress" else self._usage(),
            "error": None,
        }
        if status == "incomplete":  # it reached max_output_tokens
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        return body

    def _output(self, status: str) -> list[dict[str, Any]]:
        thinking, content = self.generation.texts()
        output: list[dict[str, Any]] = []
        if thinking:
            summary = [{"type": "summary_text", "text": "".join(thinking)}]
            output.append({"id": f"rs_{self.id}", "type": "reasoning", "summary": summary})
        text = {"type": "output_text", "text": "".join(content), "annotations": []}
        message = {"id": f"msg_{self.id}", "type": "message", "status": status}
        output.append(message | {"role": "assistant", "content": [text]})
        return output

    def _usage(self) -> dict[str, Any] | None:
        usage = self.generation.usage
        if usage is None:
            return None
        return {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": usage["prompt_tokens_details"],
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": usage["completion_tokens_details"],
            "total_tokens": usage["total_tokens"],
        }


API = Api(
    title="OpenAI Responses",
    path="/v1/responses",
    body=body,
    reply=ResponsesReply,
    simulated=Simulated(FIELDS, prompt, ResponsesServed),
    max_tokens_fields=("max_output_tokens",),
)
