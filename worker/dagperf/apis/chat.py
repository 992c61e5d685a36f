"""OpenAI's Chat Completions API (`--endpoint-type chat`): the conversation sent as it is, as
`messages`; replies in OpenAI's `choices` shape (`choices.py`, shared with completions), with
reasoning (`reasoning_content` or `reasoning`), tool calls and llama.cpp's cache count.

The simulator answers with a tool call when the request forces one (`tool_choice`), and in text
otherwise.
"""

from __future__ import annotations

from typing import Any

from dagperf.apis.api import Api, Body, Params, Simulated
from dagperf.apis.choices import ChoicesReply, ChoicesServed
from dagperf.apis.conversation import Message
from dagperf.apis.served import SAMPLING, Generation, Served, messages_tokens


def body(params: Params, messages: list[Message]) -> Body:
    return {"messages": messages, **params}


# --- the simulator's side ----------------------------------------------------------------------

# What OpenAI's reference defines: with --strict-fields, anything else in a body is refused.
FIELDS = SAMPLING | {
    "messages",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "response_format",
    "store",
    "modalities",
    "reasoning_effort",
    "service_tier",
    "prediction",
    "audio",
}


def prompt(body: Body) -> list[str]:
    return messages_tokens(body.get("messages"), body.get("tools"))


def serve(generation: Generation, body: Body) -> Served:
    return ChoicesServed(generation, body, chat=True, tool=forced_tool(body))


def forced_tool(body: Body) -> str | None:
    """The function a request makes the model call: `tool_choice` "required" calls the first
    tool, a named choice calls that one; anything else answers in text."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if not isinstance(tools, list) or not tools:
        return None
    if choice == "required":
        first: Any = tools[0] if isinstance(tools[0], dict) else {}
        name = (first.get("function") or {}).get("name")
        return name if isinstance(name, str) else "tool"
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return name if isinstance(name, str) else None
    return None


API = Api(
    title="OpenAI Chat Completions",
    path="/v1/chat/completions",
    body=body,
    reply=ChoicesReply,
    simulated=Simulated(FIELDS, prompt, serve),
    max_tokens_fields=("max_tokens", "max_completion_tokens"),
    stream_options=True,
)
