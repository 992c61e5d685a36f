"""The other APIs users call, read into the same `Reply` as chat: OpenAI's Responses API and
Anthropic's Messages API, streamed (typed server-sent events) or whole.

Only what a benchmark measures is read: output text and reasoning (each delta is an output
event, for time to first token and inter-token latency), tool calls (kept in the history as chat
keeps them) and usage, mapped to the chat names: Responses' `input_tokens`,
`input_tokens_details.cached_tokens`, `output_tokens`, `output_tokens_details.reasoning_tokens`;
Messages' `input_tokens` plus its cache reads and writes as the prompt, `cache_read_input_tokens`
as the cached part, and the running `output_tokens` of `message_delta`. Why a reply ended is
read in chat's words (`replies.finish`): a Responses reply `completed` stopped by itself, one
`incomplete` for `max_output_tokens` hit its limit (`length`), as did a Messages reply whose
`stop_reason` is `max_tokens`. An `error` event, a
`response.failed`, or an error body is a `ServerError`, as for chat.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from dagperf.transport.replies import STOP, MalformedResponse, Reply, ServerError, Usage, finish


class _Event(msgspec.Struct):
    """Any event or body of either API; what is not read is ignored."""

    type: str | None = None
    delta: Any = None
    response: Any = None  # Responses: the response object (created, completed, failed)
    message: Any = None  # Messages: message_start's message
    usage: Any = None
    error: Any = None
    content_block: Any = None
    index: int | None = None
    output: Any = None  # a whole Responses body
    content: Any = None  # a whole Messages body
    item: Any = None  # Responses: output_item.added / done
    code: Any = None  # Responses: an error event's own fields
    status: Any = None  # a whole Responses body: completed, incomplete
    incomplete_details: Any = None  # ... and why, when incomplete
    stop_reason: Any = None  # a whole Messages body: why it ended


_decode = msgspec.json.Decoder(_Event).decode


def reply_for(api: str) -> Reply:
    """An empty reply that reads `api`'s events and bodies."""
    if api == "responses":
        return Reply(_responses_event, _responses_body)
    if api == "messages":
        return Reply(_messages_event, _messages_body)
    return Reply()


def _parse(raw: bytes) -> _Event:
    try:
        event = _decode(raw)
    except msgspec.DecodeError as e:
        raise MalformedResponse(f"not a response event: {e}: {raw[:200]!r}") from None
    if event.type in ("error", "response.failed") or event.error is not None:
        raise _error(event)
    return event


def _error(event: _Event) -> ServerError:
    detail = event.error
    if detail is None and isinstance(event.response, dict):
        detail = event.response.get("error")
    if detail is None and event.type == "error":  # Responses: the fields are the event's own
        detail = {"code": event.code, "message": event.message}
    detail = detail if isinstance(detail, dict) else {"message": str(detail or "error")}
    code = detail.get("code")
    kind = detail.get("type") or (code if isinstance(code, str) else None) or "ServerError"
    return ServerError(
        code if isinstance(code, int) else None, str(kind), str(detail.get("message"))
    )


# --- OpenAI Responses -----------------------------------------------------------------------


def _responses_event(reply: Reply, raw: bytes) -> bool:
    event = _parse(raw)
    kind = event.type or ""
    if kind in ("response.output_text.delta", "response.refusal.delta"):
        reply.completion = True
        reply.content.append(str(event.delta or ""))
        return True
    if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
        reply.completion = True
        reply.reasoning.append(str(event.delta or ""))
        return True
    if kind == "response.function_call_arguments.delta":
        reply.completion = True
        return True
    if kind == "response.output_item.done" and isinstance(event.item, dict):
        _responses_item(reply, event.item, streamed=True)
    elif kind in ("response.created", "response.in_progress"):
        reply.completion = True
    elif kind in ("response.completed", "response.incomplete") and isinstance(event.response, dict):
        reply.completion = True
        reply.usage = _responses_usage(event.response.get("usage"))
        reply.finish = _responses_finish(event.response)
    return False


def _responses_body(reply: Reply, raw: bytes) -> None:
    body = _parse(raw)
    reply.completion = isinstance(body.output, list) or body.usage is not None
    reply.usage = _responses_usage(body.usage)
    reply.finish = _responses_finish({"status": body.status,
                                      "incomplete_details": body.incomplete_details})  # fmt: skip
    for item in body.output or ():
        if isinstance(item, dict):
            _responses_item(reply, item, streamed=False)


def _responses_item(reply: Reply, item: dict[str, Any], streamed: bool) -> None:
    """An output item: its text (whole bodies only; a stream sent it as deltas) or a call."""
    kind = item.get("type")
    if kind == "function_call":
        function = {"name": item.get("name"), "arguments": item.get("arguments", "")}
        call = {"id": item.get("call_id") or item.get("id"), "type": "function",
                "function": function}  # fmt: skip
        reply.tool_calls[len(reply.tool_calls)] = call
    elif kind == "message" and not streamed:
        for part in item.get("content") or ():
            if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                reply.content.append(str(part.get("text") or part.get("refusal") or ""))
    elif kind == "reasoning" and not streamed:
        for part in item.get("summary") or item.get("content") or ():
            if isinstance(part, dict):
                reply.reasoning.append(str(part.get("text") or ""))


def _responses_finish(response: dict[str, Any]) -> str | None:
    """A completed reply stopped by itself; an incomplete one says why (its token limit:
    `max_output_tokens`)."""
    status = response.get("status")
    if status == "completed":
        return STOP
    if status == "incomplete":
        details = response.get("incomplete_details")
        return finish(details.get("reason") if isinstance(details, dict) else None) or status
    return None


def _responses_usage(usage: Any) -> Usage | None:
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


# --- Anthropic Messages ---------------------------------------------------------------------


def _messages_event(reply: Reply, raw: bytes) -> bool:
    event = _parse(raw)
    kind = event.type
    if kind == "message_start" and isinstance(event.message, dict):
        reply.completion = True
        reply.usage = _messages_usage(event.message.get("usage"))
    elif kind == "content_block_start" and isinstance(event.content_block, dict):
        block = event.content_block
        if block.get("type") == "tool_use":
            reply.tool_calls[event.index or 0] = {
                "id": block.get("id"), "type": "function",
                "function": {"name": block.get("name"), "arguments": ""},
            }  # fmt: skip
    elif kind == "content_block_delta" and isinstance(event.delta, dict):
        delta = event.delta
        if delta.get("type") == "text_delta":
            reply.content.append(str(delta.get("text") or ""))
        elif delta.get("type") == "thinking_delta":
            reply.reasoning.append(str(delta.get("thinking") or ""))
        elif delta.get("type") == "input_json_delta":
            call = reply.tool_calls.get(event.index or 0)
            if call is not None:
                call["function"]["arguments"] += str(delta.get("partial_json") or "")
        else:
            return False  # a signature, a citation: not output the model generated as tokens
        return True
    elif kind == "message_delta":
        if isinstance(event.delta, dict):
            reply.finish = finish(event.delta.get("stop_reason")) or reply.finish
        output = event.usage.get("output_tokens") if isinstance(event.usage, dict) else None
        if isinstance(output, int) and reply.usage is not None:
            reply.usage = msgspec.structs.replace(reply.usage, completion_tokens=output)
    return False


def _messages_body(reply: Reply, raw: bytes) -> None:
    body = _parse(raw)
    reply.completion = isinstance(body.content, list)
    reply.usage = _messages_usage(body.usage)
    reply.finish = finish(body.stop_reason)
    for block in body.content or ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            reply.content.append(str(block.get("text") or ""))
        elif block.get("type") == "thinking":
            reply.reasoning.append(str(block.get("thinking") or ""))
        elif block.get("type") == "tool_use":
            arguments = json.dumps(block.get("input") or {})
            reply.tool_calls[len(reply.tool_calls)] = {
                "id": block.get("id"), "type": "function",
                "function": {"name": block.get("name"), "arguments": arguments},
            }  # fmt: skip


def _messages_usage(usage: Any) -> Usage | None:
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
