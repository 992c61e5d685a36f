"""The APIs dagperf calls: one module per `--endpoint-type`, named for it, and `APIS`, the table
of them. The CLI's choices and help, `EndpointConfig`'s check, the Benchmark CRD's enum and the
simulator's routes all take the types from this table.

An API's module holds all that dagperf knows of it, for every process that speaks it: its path,
the body it is sent (`Api.params` from a turn, then the conversation), how its events and
bodies are read (a `Reply`: text, reasoning, tool calls, usage and why it ended, in chat's
words), how the key is sent, and the simulator's side (what it accepts, how it answers). What
the APIs share is beside them: `api.py` (the entry), `conversation.py` (messages and the reply a
history keeps), `reply.py` (what a reply holds, errors), `served.py` (the simulator's reply) and
`choices.py` (OpenAI's `choices` shape, chat's and completions'); `endpoint_config.py` holds
`EndpointConfig`, the server under test, whose type is a key of the table.

The package sits below the roles and the transport and beside the graph: it knows bodies,
events and a turn's payload (`dagperf.dataset.specs`), never the graph or the wire.

A new endpoint type is a module here and an entry in `APIS`.
"""

from __future__ import annotations

from dagperf.apis import chat, completions, messages, responses
from dagperf.apis.api import Api

APIS: dict[str, Api] = {
    "chat": chat.API,
    "completions": completions.API,
    "responses": responses.API,
    "messages": messages.API,
}


def described() -> str:
    """Each type with what it is, for help texts: "chat (OpenAI Chat Completions), ..."."""
    return ", ".join(f"{name} ({api.title})" for name, api in APIS.items())


def unknown(name: str) -> str:
    """Why `name` is no endpoint type, naming those there are."""
    return f"unknown endpoint type {name!r}: one of {', '.join(APIS)}"


__all__ = ["APIS", "Api", "described", "unknown"]
