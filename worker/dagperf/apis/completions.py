"""OpenAI's Completions API (`--endpoint-type completions`): the conversation rendered as one
prompt text (each message's text, one per line); replies in OpenAI's `choices` shape
(`choices.py`, shared with chat), as texts. No reasoning, no tool calls.
"""

from __future__ import annotations

from dagperf.apis.api import Api, Body, Params, Simulated
from dagperf.apis.choices import ChoicesReply, ChoicesServed
from dagperf.apis.conversation import Message, prompt_text
from dagperf.apis.served import SAMPLING, BadRequest, Generation, Served
from dagperf.dataset.text import text_tokens


def body(params: Params, messages: list[Message]) -> Body:
    return {"prompt": prompt_text(messages), **params}


# --- the simulator's side ----------------------------------------------------------------------

FIELDS = SAMPLING | {
    "prompt",
    "stream_options",
    "max_tokens",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "echo",
    "best_of",
    "suffix",
}


def prompt(body: Body) -> list[str]:
    given = body.get("prompt")
    if isinstance(given, list) and len(given) == 1:
        given = given[0]
    if isinstance(given, str):
        return text_tokens(given)
    if isinstance(given, list) and all(isinstance(t, int) for t in given):
        return [str(t) for t in given]  # token ids
    raise BadRequest("'prompt' must be a string, one string in an array, or token ids")


def serve(generation: Generation, body: Body) -> Served:
    return ChoicesServed(generation, body, chat=False)


API = Api(
    title="OpenAI Completions",
    path="/v1/completions",
    body=body,
    reply=ChoicesReply,
    simulated=Simulated(FIELDS, prompt, serve, reasoning=False),
    stream_options=True,
)
