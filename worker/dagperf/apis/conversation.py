"""The conversation a request carries, as every API shares it: chat messages, their text, and
the reply a turn leaves in its history.

History is pure append: a turn's context is its history parent's context, then the captured
reply, then its own messages. The reply keeps the content and the tool calls and drops reasoning,
which chat templates do not send back to the model; when there is no content, the reasoning
text stands in, so the next turn still sees what the model said.
"""

from __future__ import annotations

import json
from typing import Any

Message = dict[str, Any]


def message_text(message: Message) -> str:
    """A message's text: its content, the text parts of a multimodal one, or a call's JSON."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: their text
        return "".join(p["text"] for p in content if isinstance(p, dict) and "text" in p)
    if message.get("tool_calls"):
        return json.dumps(message["tool_calls"])
    return ""


def prompt_text(messages: list[Message]) -> str:
    """The conversation as one text: each message's text, one per line (the completions prompt,
    and what token counts are estimated from)."""
    return "\n".join(message_text(m) for m in messages)


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
