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
from dataclasses import asdict, dataclass, field
from itertools import count
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dagperf.dataset.text import chat_prompt_tokens, reply_words, text_tokens
from dagperf.simulator.backends import BACKEND_HEADER, Backend, Router
from dagperf.simulator.config import SimConfig
from dagperf.simulator.dialects import DialectReply
from dagperf.simulator.engine import Sequence, Timed


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

_SAMPLING = {"model", "stream", "temperature", "top_p", "seed", "user", "metadata", "stop"}
# What each API defines (OpenAI's and Anthropic's references): with `strict_fields`, anything
# else in a body is refused, as servers that validate bodies strictly do.
FIELDS = {
    "chat": _SAMPLING | {
        "messages", "stream_options", "max_tokens", "max_completion_tokens", "n", "tools",
        "tool_choice", "parallel_tool_calls", "presence_penalty", "frequency_penalty",
        "logit_bias", "logprobs", "top_logprobs", "response_format", "store", "modalities",
        "reasoning_effort", "service_tier", "prediction", "audio",
    },
    "completions": _SAMPLING | {
        "prompt", "stream_options", "max_tokens", "n", "presence_penalty", "frequency_penalty",
        "logit_bias", "logprobs", "echo", "best_of", "suffix",
    },
    "responses": _SAMPLING | {
        "input", "instructions", "max_output_tokens", "tools", "tool_choice",
        "parallel_tool_calls", "previous_response_id", "store", "reasoning", "text",
        "truncation", "include", "background", "service_tier",
    },
    "messages": _SAMPLING | {
        "messages", "system", "max_tokens", "top_k", "stop_sequences", "tools", "tool_choice",
        "thinking", "service_tier",
    },
}  # fmt: skip


async def _name_backend(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer to a model request says which backend gave it, as a router's pods do."""
    backend = request.get(BACKEND)
    if backend is not None:
        response.headers[BACKEND_HEADER] = backend


class BadRequest(Exception):
    pass


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
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/sim/records", self._records)
        app.router.add_get("/backends/{index}/metrics", self._metrics)
        app.on_response_prepare.append(_name_backend)
        return app

    @web.middleware
    async def _authorize(self, request: web.Request, handler: Any) -> web.StreamResponse:
        expected = f"Bearer {self.config.api_key}"
        keyed = request.headers.get("x-api-key") == self.config.api_key  # Anthropic's scheme
        if (
            request.path.startswith("/v1/")
            and not keyed
            and (request.headers.get("Authorization") != expected)
        ):
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

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "chat")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "completions")

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "responses")

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "messages")

    async def _serve(self, request: web.Request, api: str) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        start = loop.time()
        record = SimRecord(
            request_id=request.headers.get("X-Request-ID"),
            correlation_id=request.headers.get("X-Correlation-ID"),
            endpoint=api,
            stream=False,
            status=200,
            received_ns=time.time_ns(),
        )
        if self.config.record_limit:
            self.records.append(record)
        try:
            body = await self._body(request)
            if self.config.strict_fields and (unknown := sorted(set(body) - FIELDS[api])):
                return self._finish(record, _unprocessable(unknown))
            record.stream = body.get("stream") is True
            if self.config.record_bodies:
                record.body = body
                record.headers = dict(request.headers)
            prompt = _prompt_tokens(body, api)
            length, finish = self._reply_length(body)
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
        self, request: web.Request, record: SimRecord, body: dict[str, Any], prompt: list[str],
        length: int, finish: str, api: str, backend: Backend, start: float, queued_s: float,
    ) -> web.StreamResponse:  # fmt: skip
        """The reply, timed from `start` (arrival, plus any wait for a slot)."""
        cfg = self.config
        cached = backend.admit(prompt)
        backend.metrics.generation_tokens.inc(length)
        backend.metrics.success.inc()
        ttft_ms = cfg.ttft_ms + cfg.prefill_ms_per_token * (len(prompt) - cached)
        chat = api == "chat"
        reasoning = min(cfg.reasoning_tokens, length) if api != "completions" else 0
        words = reply_words(cfg.seed, prompt, length)
        record.intended_ttft_ms = queued_s * 1000 + ttft_ms
        record.prompt_tokens = len(prompt)
        record.cached_tokens = cached
        record.completion_tokens = length
        record.reasoning_tokens = reasoning
        tool = _forced_tool(body) if chat else None
        usage = _usage(len(prompt), cached, length, reasoning) if cfg.usage else None
        model = body["model"] if isinstance(body.get("model"), str) else cfg.model
        if api in ("responses", "messages"):
            reply: _Reply | DialectReply = DialectReply(
                api, f"{api[:4]}-{next(self._ids):x}", model, words, reasoning, finish, usage
            )
            include_usage = True
        else:
            reply = _Reply(
                id=f"{'chatcmpl' if chat else 'cmpl'}-{next(self._ids):x}",
                model=model,
                chat=chat,
                words=words,
                reasoning=reasoning,
                finish="tool_calls" if tool else finish,
                usage=usage,
                tool=tool,
            )
            record.tool_call = reply.tool_call() if cfg.record_bodies else None
            include_usage = cfg.usage and _include_usage(body)
        if backend.engine is None:
            pace = Timed(start + ttft_ms / 1000, cfg.itl_ms / 1000)
            return await self._send(request, record, reply, pace, include_usage)
        prefill_s = cfg.prefill_ms_per_token * (len(prompt) - cached) / 1000
        sequence = backend.engine.submit(len(words), cfg.ttft_ms / 1000, prefill_s)
        try:
            return await self._send(request, record, reply, sequence, include_usage)
        finally:  # done, or its client went away: its slot frees
            backend.engine.leave(sequence)
            if sequence.first_token_at is not None:
                record.intended_ttft_ms = (sequence.first_token_at - start) * 1000

    async def _send(
        self, request: web.Request, record: SimRecord, reply: _Reply | DialectReply,
        pace: Timed | Sequence, include_usage: bool,
    ) -> web.StreamResponse:  # fmt: skip
        """The reply, whole once its last token is out, or streamed token by token."""
        if self.config.record_bodies:
            record.reply = "" if record.tool_call else "".join(reply.texts()[1])
        if not record.stream:
            await pace.ready(len(reply.words), len(reply.words))
            return self._finish(record, web.json_response(reply.whole()))
        return await self._stream(request, record, reply, pace, include_usage)

    async def _stream(
        self,
        request: web.Request,
        record: SimRecord,
        reply: _Reply | DialectReply,
        pace: Timed | Sequence,
        include_usage: bool,
    ) -> web.StreamResponse:
        chunks = reply.chunks()
        tail = reply.tail(include_usage)
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

    def _reply_length(self, body: dict[str, Any]) -> tuple[int, str]:
        """Tokens to generate and the finish reason, as a server with EOS would decide."""
        limit = body.get("max_completion_tokens", body.get("max_output_tokens",
                                                           body.get("max_tokens")))  # fmt: skip
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


@dataclass(frozen=True, slots=True)
class _Reply:
    id: str
    model: str
    chat: bool
    words: list[str]
    reasoning: int
    finish: str
    usage: dict[str, Any] | None  # None: the server reports no usage
    tool: str | None = None  # a function to call instead of answering in text

    def texts(self) -> tuple[list[str], list[str]]:
        """Token texts, reasoning then content; each content run starts without a space."""
        texts = [w if i in (0, self.reasoning) else " " + w for i, w in enumerate(self.words)]
        return texts[: self.reasoning], texts[self.reasoning :]

    def _prefix(self) -> str:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return (
            f'data: {{"id":"{self.id}","object":"{kind}","created":{int(time.time())},'
            f'"model":{json.dumps(self.model)},"choices":[{{"index":0,'
        )

    def _arguments(self) -> list[str]:
        """A tool call's JSON arguments, one piece per content token."""
        pieces = list(self.texts()[1]) or [""]
        pieces[0] = '{"query": "' + pieces[0]
        pieces[-1] += '"}'
        return pieces

    def tool_call(self) -> dict[str, Any] | None:
        if self.tool is None:
            return None
        arguments = "".join(self._arguments())
        return {"id": f"call-{self.id}", "type": "function",
                "function": {"name": self.tool, "arguments": arguments}}  # fmt: skip

    def chunks(self) -> list[bytes]:
        prefix = self._prefix()
        thinking, content = self.texts()
        if self.tool is not None:
            content = self._arguments()
        out = []
        for i, text in enumerate(thinking + content):
            role = '"role":"assistant",' if i == 0 else ""
            if not self.chat:
                delta = f'"text":{json.dumps(text)}'
            elif i < self.reasoning:
                delta = f'"delta":{{{role}"reasoning_content":{json.dumps(text)}}}'
            elif self.tool is not None:
                call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
                if i == self.reasoning:  # the first fragment names the call
                    call |= {"id": f"call-{self.id}", "type": "function"}
                    call["function"]["name"] = self.tool
                delta = f'"delta":{{{role}"tool_calls":[{json.dumps(call)}]}}'
            else:
                delta = f'"delta":{{{role}"content":{json.dumps(text)}}}'
            out.append(f'{prefix}{delta},"logprobs":null,"finish_reason":null}}]}}\n\n'.encode())
        return out

    def tail(self, include_usage: bool) -> bytes:
        """What follows the last token: the finish reason, the usage if asked, [DONE]."""
        usage = self.usage_chunk() if include_usage else b""
        return self.final_chunk() + usage + b"data: [DONE]\n\n"

    def final_chunk(self) -> bytes:
        delta = '"delta":{}' if self.chat else '"text":""'
        return f'{self._prefix()}{delta},"finish_reason":"{self.finish}"}}]}}\n\n'.encode()

    def usage_chunk(self) -> bytes:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        chunk = {"id": self.id, "object": kind, "created": int(time.time()), "model": self.model}
        chunk |= {"choices": [], "usage": self.usage}
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    def whole(self) -> dict[str, Any]:
        thinking, content = self.texts()
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
            if self.tool is not None:
                message |= {"content": None, "tool_calls": [self.tool_call()]}
            if thinking:
                message["reasoning_content"] = "".join(thinking)
            choice = {"index": 0, "message": message, "finish_reason": self.finish}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": "".join(content), "finish_reason": self.finish}
            kind = "text_completion"
        return {
            "id": self.id,
            "object": kind,
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
        } | ({"usage": self.usage} if self.usage is not None else {})


def _prompt_tokens(body: dict[str, Any], api: str) -> list[str]:
    if api == "responses":
        given = body.get("input")
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else given
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'input' must be a string or a non-empty array")
        return chat_prompt_tokens(messages, body.get("tools"))
    if api == "messages":
        if not isinstance(body.get("max_tokens"), int):
            raise BadRequest("max_tokens: Field required")  # as Anthropic's API answers
        system = body.get("system")
        head = [{"role": "system", "content": system}] if isinstance(system, str) else []
        return _prompt_tokens({"messages": head + (body.get("messages") or [])}, "chat")
    if api == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty array")
        if not all(isinstance(m, dict) for m in messages):
            raise BadRequest("each entry of 'messages' must be an object")
        return chat_prompt_tokens(messages, body.get("tools"))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if isinstance(prompt, str):
        return text_tokens(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return [str(t) for t in prompt]  # token ids
    raise BadRequest("'prompt' must be a string, one string in an array, or token ids")


def _forced_tool(body: dict[str, Any]) -> str | None:
    """The function a request makes the model call: `tool_choice` "required" calls the first
    tool, a named choice calls that one; anything else answers in text."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if not isinstance(tools, list) or not tools:
        return None
    if choice == "required":
        first = tools[0] if isinstance(tools[0], dict) else {}
        name = (first.get("function") or {}).get("name")
        return name if isinstance(name, str) else "tool"
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return name if isinstance(name, str) else None
    return None


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _usage(prompt: int, cached: int, completion: int, reasoning: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


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
