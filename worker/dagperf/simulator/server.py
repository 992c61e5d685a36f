"""A simulated OpenAI-compatible LLM server (aiohttp), the embedded default and the test server.

Timing model: the first token is due `ttft_ms + prefill_ms_per_token * uncached prompt tokens`
after the request arrives, and each further token `itl_ms` after the previous one. Deadlines are
absolute (from the arrival), so sleep overshoot never accumulates; when the event loop falls
behind, every chunk already due goes out in one write. The server is honest about what it did:
each request's log entry holds the time its first chunk was really written, next to the time the
model intended, so a client's measurement can be checked against the server's own.

Chunks are built as bytes from prebuilt prefixes, without a JSON encoder per chunk, so the
simulator stays cheap next to the client it is measuring.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from itertools import count
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dagperf.apis import APIS, Api
from dagperf.apis.served import BadRequest, Generation, Served, chat_usage
from dagperf.dataset.text import reply_words
from dagperf.simulator.backends import BACKEND_HEADER, Backend, Router
from dagperf.simulator.config import SimConfig
from dagperf.simulator.engine import Sequence, Timed

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class SimRecord:
    """What the simulator received and did for one request; times are epoch nanoseconds."""

    request_id: str | None
    correlation_id: str | None
    endpoint: str
    stream: bool
    status: int
    received_ns: int
    # Streaming: when the writes of the first and of the last token began. Stamped before the
    # write, so a client can never have read a token before its stamp, however busy the machine.
    first_chunk_ns: int | None = None
    last_chunk_ns: int | None = None
    end_ns: int | None = None
    intended_ttft_ms: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    backend: str | None = None  # which simulated backend served it
    body: Any = None
    headers: dict[str, str] | None = None
    reply: str | None = None  # the content sent, when bodies are recorded
    tool_call: dict[str, Any] | None = None  # the tool call sent instead, when recorded
    done: bool = field(default=False, repr=False)


BACKEND = web.RequestKey("backend", str)


async def _name_backend(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer to a model request says which backend gave it, as a router's pods do."""
    backend = request.get(BACKEND)
    if backend is not None:
        response.headers[BACKEND_HEADER] = backend


class Simulator:
    """The simulated model: its prefix cache, its request log, and the HTTP handlers."""

    def __init__(self, config: SimConfig | None = None):
        self.config = config or SimConfig()
        self.backends = [Backend(i, self.config) for i in range(self.config.backends)]
        self.cache = self.backends[0].cache  # the only one, unless there are several backends
        self._router = Router(self.backends, self.config)
        self.records: deque[SimRecord] = deque(maxlen=self.config.record_limit)
        self._errors = random.Random(self.config.seed)
        self._ids = count()

    def app(self) -> web.Application:
        middlewares = [self._authorize] if self.config.api_key else []
        app = web.Application(client_max_size=64 * 1024**2, middlewares=middlewares)
        for name, api in APIS.items():  # each API at its path
            app.router.add_post(api.path, self._handler(name, api))
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/sim/records", self._records)
        app.router.add_get("/backends/{index}/metrics", self._metrics)
        app.on_response_prepare.append(_name_backend)
        return app

    def _handler(self, name: str, api: Api) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._serve(request, name, api)

        return handle

    @web.middleware
    async def _authorize(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """The key, in any API's way of sending it (a bearer token, Anthropic's x-api-key)."""
        key = self.config.api_key
        keyed = any(
            request.headers.get(api.key_header) == api.key_format.format(key=key)
            for api in APIS.values()
        )
        if request.path.startswith("/v1/") and not keyed:
            return _error(401, "authentication_error", "a valid API key is required")
        response: web.StreamResponse = await handler(request)
        return response

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def _models(self, request: web.Request) -> web.Response:
        model = {"id": self.config.model, "object": "model", "owned_by": "dagperf"}
        return web.json_response({"object": "list", "data": [model]})

    async def _metrics(self, request: web.Request) -> web.Response:
        """A backend's metrics, in Prometheus' text format, as a vLLM pod serves them."""
        try:
            backend = self.backends[int(request.match_info["index"])]
        except (ValueError, IndexError):
            raise web.HTTPNotFound(text="no such backend") from None
        body = generate_latest(backend.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _records(self, request: web.Request) -> web.Response:
        return web.json_response([_public(r) for r in self.records if r.done])

    async def _serve(self, request: web.Request, name: str, api: Api) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        start = loop.time()
        record = SimRecord(
            request_id=request.headers.get("X-Request-ID"),
            correlation_id=request.headers.get("X-Correlation-ID"),
            endpoint=name,
            stream=False,
            status=200,
            received_ns=time.time_ns(),
        )
        if self.config.record_limit:
            self.records.append(record)
        try:
            body = await self._body(request)
            defined = api.simulated.fields
            if self.config.strict_fields and (unknown := sorted(set(body) - defined)):
                return self._finish(record, _unprocessable(unknown))
            record.stream = body.get("stream") is True
            if self.config.record_bodies:
                record.body = body
                record.headers = dict(request.headers)
            prompt = api.simulated.prompt(body)
            length, finish = self._reply_length(body, api)
        except BadRequest as e:
            return self._finish(record, _error(400, "invalid_request_error", str(e)))
        if self.config.error_rate and self._errors.random() < self.config.error_rate:
            return self._finish(record, _error(500, "server_error", "simulated server error"))
        backend = self._router.pick(request.headers)
        request[BACKEND] = record.backend = backend.name
        reply = (request, record, body, prompt, length, finish, api, backend)
        metrics = backend.metrics
        if backend.engine is not None:  # it keeps its own gauges, and the time
            return await self._respond(*reply, start, 0.0)
        if backend.slots is None:
            with metrics.running.track_inprogress():
                return await self._respond(*reply, start, 0.0)
        waiting = loop.time()
        with metrics.waiting.track_inprogress():
            await backend.slots.acquire()  # a request waits its turn for a slot, as for a seat
        try:
            with metrics.running.track_inprogress():
                queued = loop.time() - waiting  # its timing starts over from here
                return await self._respond(*reply, start + queued, queued)
        finally:
            backend.slots.release()

    async def _respond(
        self,
        request: web.Request,
        record: SimRecord,
        body: dict[str, Any],
        prompt: list[str],
        length: int,
        finish: str,
        api: Api,
        backend: Backend,
        start: float,
        queued_s: float,
    ) -> web.StreamResponse:
        """The reply, timed from `start` (arrival, plus any wait for a slot)."""
        cfg = self.config
        cached = backend.admit(prompt)
        backend.metrics.generation_tokens.inc(length)
        backend.metrics.success.inc()
        ttft_ms = cfg.ttft_ms + cfg.prefill_ms_per_token * (len(prompt) - cached)
        reasoning = min(cfg.reasoning_tokens, length) if api.simulated.reasoning else 0
        words = reply_words(cfg.seed, prompt, length)
        record.intended_ttft_ms = queued_s * 1000 + ttft_ms
        record.prompt_tokens = len(prompt)
        record.cached_tokens = cached
        record.completion_tokens = length
        record.reasoning_tokens = reasoning
        usage = chat_usage(len(prompt), cached, length, reasoning) if cfg.usage else None
        model = body["model"] if isinstance(body.get("model"), str) else cfg.model
        generation = Generation(next(self._ids), model, words, reasoning, finish, usage)
        reply = api.simulated.serve(generation, body)
        if cfg.record_bodies:
            record.tool_call = reply.tool_call()
            record.reply = reply.text()
        if backend.engine is None:
            pace = Timed(start + ttft_ms / 1000, cfg.itl_ms / 1000)
            return await self._send(request, record, reply, len(words), pace)
        prefill_s = cfg.prefill_ms_per_token * (len(prompt) - cached) / 1000
        sequence = backend.engine.submit(len(words), cfg.ttft_ms / 1000, prefill_s)
        try:
            return await self._send(request, record, reply, len(words), sequence)
        finally:  # done, or its client went away: its slot frees
            backend.engine.leave(sequence)
            if sequence.first_token_at is not None:
                record.intended_ttft_ms = (sequence.first_token_at - start) * 1000

    async def _send(
        self,
        request: web.Request,
        record: SimRecord,
        reply: Served,
        tokens: int,
        pace: Timed | Sequence,
    ) -> web.StreamResponse:
        """The reply, whole once its last token is out, or streamed token by token."""
        if not record.stream:
            await pace.ready(tokens, tokens)
            return self._finish(record, web.json_response(reply.whole()))
        return await self._stream(request, record, reply, pace)

    async def _stream(
        self, request: web.Request, record: SimRecord, reply: Served, pace: Timed | Sequence
    ) -> web.StreamResponse:
        chunks = reply.chunks()
        tail = reply.tail()
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        try:
            await response.prepare(request)
            sent = 0
            while sent < len(chunks):
                due = await pace.ready(sent + 1, len(chunks))
                batch = b"".join(chunks[sent:due])
                stamp = time.time_ns()
                if sent == 0:
                    record.first_chunk_ns = stamp
                if due == len(chunks):
                    record.last_chunk_ns = stamp
                await response.write(batch + tail if due == len(chunks) else batch)
                sent = due
            await response.write_eof()
        except ConnectionResetError:
            record.status = 499  # the client went away mid-stream
        except asyncio.CancelledError:
            record.status = 499
            record.end_ns = time.time_ns()
            record.done = True
            raise
        else:
            record.status = response.status
        record.end_ns = time.time_ns()
        record.done = True
        return response

    @staticmethod
    def _finish(record: SimRecord, response: web.StreamResponse) -> web.StreamResponse:
        record.status = response.status
        record.end_ns = time.time_ns()
        record.done = True
        return response

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.read())
        except ValueError as e:
            raise BadRequest(f"request body is not valid JSON: {e}") from None
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        return body

    def _reply_length(self, body: dict[str, Any], api: Api) -> tuple[int, str]:
        """Tokens to generate and the finish reason, as a server with EOS would decide: the
        API's cap (`Api.max_tokens_fields`), vLLM's `min_tokens` and `ignore_eos`."""
        limit = api.max_tokens(body)
        floor = body.get("min_tokens") or 0
        for name, value in (("max_tokens", limit), ("min_tokens", floor)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise BadRequest(f"{name} must be an integer, got {value!r}")
        if limit is not None and limit < 1:
            raise BadRequest(f"max_tokens must be at least 1, got {limit}")
        natural = self.config.output_tokens + self.config.reasoning_tokens
        if limit is None:
            return max(natural, floor), "stop"
        length = limit if body.get("ignore_eos") else min(max(natural, floor), limit)
        return length, "length" if length >= limit else "stop"


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "code": status}}, status=status
    )


def _unprocessable(fields: list[str]) -> web.Response:
    """A 422 naming each field the API does not define, as a FastAPI server (transformers
    serve) words it."""
    detail = [
        {"type": "extra_forbidden", "loc": ["body", name], "msg": "Extra inputs are not permitted"}
        for name in fields
    ]
    return web.json_response({"detail": detail}, status=422)


def _public(record: SimRecord) -> dict[str, Any]:
    out = asdict(record)
    del out["done"]
    return out
