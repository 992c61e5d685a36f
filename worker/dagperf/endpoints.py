"""Request bodies for each API, and the reply a turn leaves in its history.

A body is `params` (model, max_tokens, tools, stream, the run's extra inputs, then the turn's own
`extra`, which wins) plus the conversation: the history followed by the turn's messages. The
scheduler computes `params` once per authored turn; the worker adds the history it holds. Chat
sends the messages as they are; completions renders them as one prompt text; Responses sends
them as input messages (the whole history each time, never `previous_response_id`); Messages
moves system messages to `system` and sends the rest as user and assistant turns, with the
`max_tokens` that API requires.

History is pure append: a turn's context is its history parent's context, then the captured
reply, then its own messages. The reply keeps the content and the tool calls and drops reasoning,
which chat templates do not send back to the model; when there is no content, the reasoning
text stands in, so the next turn still sees what the model said.
"""

from __future__ import annotations

import json
from typing import Any

from dagperf.graph import Payload
from dagperf.vocabulary.config import MESSAGES_MAX_TOKENS, EndpointConfig

Message = dict[str, Any]
# The body field that caps a reply's length, as each API names it (chat's newer name too).
MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def request_params(payload: Payload, endpoint: EndpointConfig) -> dict[str, Any]:
    """Every body field of one authored turn except the conversation."""
    if payload.verbatim:  # raw_payload: the body as written
        return dict(payload.extra or {})
    api = endpoint.endpoint_type
    params: dict[str, Any] = {"model": payload.model or endpoint.model}
    if api in ("chat", "completions"):  # said either way, as AIPerf does
        params["stream"] = endpoint.streaming
    if endpoint.streaming:
        params["stream"] = True
        if api in ("chat", "completions"):  # the others report usage in their last events
            params["stream_options"] = {"include_usage": True}
    if api == "responses":
        if payload.max_tokens is not None:
            params["max_output_tokens"] = payload.max_tokens
    elif api == "messages":
        params["max_tokens"] = payload.max_tokens or MESSAGES_MAX_TOKENS
    elif payload.max_tokens is not None:
        params["max_tokens"] = payload.max_tokens
    if payload.tools is not None:
        params["tools"] = payload.tools
    params.update(endpoint.extra_inputs)
    if payload.extra:
        params.update(payload.extra)
    return params


def request_body(
    endpoint_type: str, params: dict[str, Any], messages: list[Message]
) -> dict[str, Any]:
    if endpoint_type == "chat":
        return {"messages": messages, **params}
    if endpoint_type == "responses":
        return {"input": [_as_input(m) for m in messages], **params}
    if endpoint_type == "messages":
        system = "\n".join(message_text(m) for m in messages if m.get("role") == "system")
        turns = [_as_turn(m) for m in messages if m.get("role") != "system"]
        return {**({"system": system} if system else {}), "messages": turns, **params}
    return {"prompt": prompt_text(messages), **params}


def _as_input(message: Message) -> Message:
    """A chat message as a Responses input item: a message with its role and text (a tool's
    result, or a call, as text: the full history is sent, never `previous_response_id`).
    `type` is optional in OpenAI's API, but servers that check items (llama.cpp's) refuse an
    assistant item without it."""
    role = message.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        role = "user"
    return {"type": "message", "role": role, "content": message_text(message)}


def _as_turn(message: Message) -> Message:
    """A chat message as a Messages turn: user or assistant, with its text."""
    role = "assistant" if message.get("role") == "assistant" else "user"
    return {"role": role, "content": message_text(message) or "(empty)"}


def prompt_text(messages: list[Message]) -> str:
    """The conversation as one completions prompt: each message's text, one per line."""
    return "\n".join(message_text(m) for m in messages)


def message_text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: their text
        return "".join(p["text"] for p in content if isinstance(p, dict) and "text" in p)
    if message.get("tool_calls"):
        return json.dumps(message["tool_calls"])
    return ""


def captured_reply(
    content: str, reasoning: str, tool_calls: list[dict[str, Any]] | None
) -> Message:
    """The assistant message a turn appends to its history."""
    reply: Message = {"role": "assistant", "content": content or reasoning}
    if tool_calls:
        reply["tool_calls"] = tool_calls
        if not content:
            reply["content"] = None  # a pure tool call carries no text
    return reply
