"""A fifth endpoint type, written for the tests as a new API is written: llama.cpp's own
`/completion` endpoint (not its OpenAI `/v1/completions`), one module that tests/test_apis.py
registers with one line.

Sent: the conversation as one prompt text, the reply's cap as `n_predict`. Read: a stream of
`data: {"content": ..., "stop": false}` events with no `[DONE]`, ended by one with `"stop": true`
that carries the counts (`tokens_evaluated`, `tokens_predicted`), why it stopped (`stop_type`:
`limit` is chat's `length`) and llama.cpp's `timings.cache_n`; a whole body is that last object
with all the content. The key goes as a bearer token, as llama-server's `--api-key` wants it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec

from dagperf.apis.api import Api, Body, Params, Simulated
from dagperf.apis.conversation import Message, prompt_text
from dagperf.apis.reply import LENGTH, STOP, ErrorFields, Reply, Usage, decoded, finish
from dagperf.apis.served import SAMPLING, BadRequest, Served
from dagperf.dataset.text import text_tokens

NAME = "llama_native"
TESTS = Path(__file__).resolve().parent
# The registration a new API's author writes in dagperf/apis/__init__.py, made in each process
# of a run (the scheduler and the workers `dagperf profile` starts, `dagperf_operator.crd`) as
# Python starts, from the site's customization module.
REGISTRATION = f"""
import dagperf.apis, llama_native
dagperf.apis.APIS[{NAME!r}] = llama_native.API
"""


def registered_in(site: Path) -> dict[str, str]:
    """The environment of processes that know this API: `site`, a new directory, gets the
    registration."""
    site.mkdir(parents=True)
    (site / "sitecustomize.py").write_text(REGISTRATION)
    path = [str(site), str(TESTS), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ) | {"PYTHONPATH": os.pathsep.join(p for p in path if p)}


def body(params: Params, messages: list[Message]) -> Body:
    return {"prompt": prompt_text(messages), **params}


# --- the reply ---------------------------------------------------------------------------------

_STOPPED = {"limit": LENGTH, "eos": STOP, "word": STOP}  # `stop_type` in chat's words


class _Timings(msgspec.Struct):
    cache_n: int | None = None


class _Event(ErrorFields):
    content: str | None = None
    stop: bool = False
    tokens_evaluated: int | None = None
    tokens_predicted: int | None = None
    stop_type: str | None = None
    timings: _Timings | None = None


_decode = msgspec.json.Decoder(_Event).decode


def _parse(raw: bytes) -> _Event:
    event = decoded(_decode, raw, "a llama.cpp completion")
    if event.failed():
        raise event.server_error()
    return event


class LlamaReply(Reply):
    __slots__ = ()

    def add_chunk(self, raw: bytes) -> bool:
        event = _parse(raw)
        self._read(event)
        if event.content:
            self.content.append(event.content)
            return True
        return False

    def add_body(self, raw: bytes) -> None:
        event = _parse(raw)
        self._read(event)
        self.content.append(event.content or "")

    def _read(self, event: _Event) -> None:
        self.completion = self.completion or event.content is not None or event.stop
        if event.stop:
            self.usage = Usage(
                prompt_tokens=event.tokens_evaluated, completion_tokens=event.tokens_predicted
            )
            self.finish = finish(event.stop_type, _STOPPED)
        if event.timings is not None:
            self.cache_n = event.timings.cache_n


# --- the simulator's side ----------------------------------------------------------------------

FIELDS = SAMPLING | {"prompt", "n_predict", "cache_prompt", "top_k", "min_p"}


def prompt(body: Body) -> list[str]:
    given = body.get("prompt")
    if not isinstance(given, str) or not given:
        raise BadRequest("'prompt' must be a non-empty string")
    return text_tokens(given)


class LlamaServed(Served):
    def chunks(self) -> list[bytes]:
        return [_data({"content": text, "stop": False}) for text in self.generation.texts()[1]]

    def tail(self) -> bytes:
        return _data(self._last(""))

    def whole(self) -> dict[str, Any]:
        return self._last(self.text())

    def _last(self, content: str) -> dict[str, Any]:
        generation = self.generation
        last: dict[str, Any] = {"content": content, "stop": True, "model": generation.model}
        last["stop_type"] = "limit" if generation.finish == LENGTH else "eos"
        usage = generation.usage
        if usage is not None:
            last["tokens_evaluated"] = usage["prompt_tokens"]
            last["tokens_predicted"] = usage["completion_tokens"]
            last["timings"] = {"cache_n": usage["prompt_tokens_details"]["cached_tokens"]}
        return last


def _data(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


API = Api(
    title="llama.cpp's own /completion, for the tests",
    path="/completion",
    body=body,
    reply=LlamaReply,
    simulated=Simulated(FIELDS, prompt, LlamaServed, reasoning=False),
    max_tokens_fields=("n_predict",),
)
