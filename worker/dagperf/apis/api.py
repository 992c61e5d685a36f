"""`Api`: what dagperf knows of one API, the entry each API's module registers in `APIS`.

Data where the APIs differ only in a name (their path, the body field that caps a reply, how the
key is sent), functions where they differ in shape (the conversation in a body, the events and
bodies read back, the simulator's side). The functions are looked up once per process part that
uses them (the scheduler's outbox, a worker's welcome), never per request or per event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dagperf.apis.conversation import Message
from dagperf.apis.reply import Reply
from dagperf.apis.served import Generation, Served
from dagperf.dataset.specs import Payload

Params = dict[str, Any]
Body = dict[str, Any]


class EndpointSettings(Protocol):
    """What a request's parameters take from the run's endpoint (`EndpointConfig` has it)."""

    @property
    def model(self) -> str: ...

    @property
    def streaming(self) -> bool: ...

    @property
    def extra_inputs(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Simulated:
    """How the built-in simulator speaks an API."""

    fields: frozenset[str]  # what the API defines: with --strict-fields, others are refused
    prompt: Callable[[Body], list[str]]  # a request's prompt as tokens, or a BadRequest
    serve: Callable[[Generation, Body], Served]  # the reply to that request
    reasoning: bool = True  # its replies may carry reasoning (--reasoning-tokens)


@dataclass(frozen=True)
class Api:
    """One `--endpoint-type`."""

    title: str  # what it is, in --endpoint-type's help and the Benchmark CRD's description
    path: str  # the request path, unless --endpoint gives another
    body: Callable[[Params, list[Message]], Body]  # the parameters and the conversation
    reply: Callable[[], Reply]  # an empty reply that reads this API's events and bodies
    simulated: Simulated
    # The body fields that cap a reply's length: a turn's max_tokens is sent as the first; of
    # a body that carries several (a raw payload's), the last listed wins, as servers read them
    # (chat's max_completion_tokens over the older max_tokens).
    max_tokens_fields: tuple[str, ...] = ("max_tokens",)
    max_tokens_default: int | None = None  # sent when a turn sets none: the API needs one
    # OpenAI's: `stream` said either way, and usage asked for in a stream's last chunk (the
    # typed-event APIs report it in their last events unasked).
    stream_options: bool = False
    key_header: str = "Authorization"  # the API key is sent in this header ...
    key_format: str = "Bearer {key}"  # ... written so
    headers: tuple[tuple[str, str], ...] = ()  # sent with every request (a version, say)

    def params(self, payload: Payload, endpoint: EndpointSettings) -> Params:
        """Every body field of one authored turn but the conversation: the model, stream, the
        reply's cap, tools, the run's extra inputs, then the turn's own `extra`, which wins.
        The scheduler computes them once per turn; the worker adds the conversation (`body`)."""
        if payload.verbatim:  # raw_payload: the body as written
            return dict(payload.extra or {})
        params: Params = {"model": payload.model or endpoint.model}
        if self.stream_options:  # said either way, as AIPerf does
            params["stream"] = endpoint.streaming
            if endpoint.streaming:
                params["stream_options"] = {"include_usage": True}
        elif endpoint.streaming:
            params["stream"] = True
        limit = payload.max_tokens
        if self.max_tokens_default is not None:
            limit = limit or self.max_tokens_default
        if limit is not None:
            params[self.max_tokens_fields[0]] = limit
        if payload.tools is not None:
            params["tools"] = payload.tools
        params.update(endpoint.extra_inputs)
        if payload.extra:
            params.update(payload.extra)
        return params

    def request_headers(self, api_key: str | None) -> dict[str, str]:
        """The headers every request carries for this API: its key, as the API wants it."""
        headers = dict(self.headers)
        if api_key:
            headers[self.key_header] = self.key_format.format(key=api_key)
        return headers

    def max_tokens(self, params: Params) -> Any:
        """The cap a request's body carried, whatever this API calls it (None: none)."""
        given = (params[k] for k in reversed(self.max_tokens_fields) if k in params)
        return next(given, None)
