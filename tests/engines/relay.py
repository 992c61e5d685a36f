"""A relay in front of one engine: the ground truth of which engine served each request.

llama-server and vLLM Router put nothing in a response that names the engine behind it, so a
test (or the routing example) puts one of these between the router and each engine. It passes
every request through unchanged, streams the answer back as it comes, adds one response header
naming its engine (what a pod-name header does in a real deployment), and logs each request as
it arrives, before the engine sees it: one JSON line (`"event": "received"`) with the engine's
name, the path and the request's headers (minus credentials). That line is therefore on disk
before any reply reaches the client, so reading the log after a run has ended cannot miss a
request. Once the answer has been passed on, a second line (`"event": "answered"`) carries
llama.cpp's own `timings` from the answer (the body, or the last streamed event that has them),
for comparing a client's clock with the engine's (bench/engine_clock.py), and whether all of
it reached the client.

    python tests/engines/relay.py --port 8101 --target http://127.0.0.1:8001 \
        --name engine-0 --log engine-0.requests.jsonl

Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import IO, Any

import aiohttp
from aiohttp import web

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length",
}  # fmt: skip
NOT_LOGGED = {"authorization", "x-api-key", "cookie"}
TAIL_BYTES = 64 * 1024  # where an answer's timings are: its end


def timings(tail: bytes) -> dict[str, Any] | None:
    """llama.cpp's `timings` in the end of an answer: a JSON body, or the last SSE event
    that carries them."""
    if b'"timings"' not in tail:
        return None
    candidates = [tail] + [
        line[5:] for line in reversed(tail.splitlines()) if line.startswith(b"data:")
    ]
    for candidate in candidates:
        if b'"timings"' in candidate:
            try:
                found = json.loads(candidate).get("timings")
            except (ValueError, AttributeError):
                continue
            if isinstance(found, dict):
                return found
    return None


class Relay:
    def __init__(self, target: str, name: str, header: str, log: IO[str]) -> None:
        self.target = target.rstrip("/")
        self.name = name
        self.header = header
        self.log = log
        self.session: aiohttp.ClientSession | None = None

    async def start(self, app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        # A connection per request: llama-server closes one idle for 5 s, and a pooled one it
        # closed would fail the next request (a 500 the client would count as the engine's).
        connector = aiohttp.TCPConnector(force_close=True)
        self.session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False
        )

    async def stop(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    def _write(self, line: dict[str, Any]) -> None:
        self.log.write(json.dumps({"engine": self.name, "time_ns": time.time_ns()} | line) + "\n")
        self.log.flush()

    def _received(self, request: web.Request) -> None:
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in NOT_LOGGED}
        line = {"event": "received", "method": request.method, "path": request.path_qs}
        self._write(line | {"headers": headers})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        body = await request.read()
        logged = request.method == "POST"
        if logged:
            self._received(request)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        async with self.session.request(
            request.method, self.target + request.path_qs, headers=headers, data=body
        ) as upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    response.headers.add(key, value)
            response.headers[self.header] = self.name
            await response.prepare(request)
            tail, delivered = await self._pass_on(upstream, response)
        if logged:
            request_id = request.headers.get("x-request-id")
            answer = {"status": upstream.status, "delivered": delivered, "timings": timings(tail)}
            self._write({"event": "answered", "request_id": request_id} | answer)
        return response

    async def _pass_on(
        self, upstream: aiohttp.ClientResponse, response: web.StreamResponse
    ) -> tuple[bytes, bool]:
        """Stream the answer on, and its end back: a client may hang up once it has read its
        last event, before the engine's last bytes, so those are read (not sent) all the same."""
        tail, delivered = b"", True
        async for chunk in upstream.content.iter_any():
            tail = (tail + chunk)[-TAIL_BYTES:]
            if delivered:
                try:
                    await response.write(chunk)
                except ConnectionError:
                    delivered = False
        if delivered:
            try:
                await response.write_eof()
            except ConnectionError:
                delivered = False
        return tail, delivered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--target", required=True, help="the engine's base URL")
    parser.add_argument("--name", required=True, help="the engine's name, in the header")
    parser.add_argument("--header", default="x-engine", help="the response header naming it")
    parser.add_argument("--log", required=True, help="JSON lines, one per request")
    args = parser.parse_args()
    with open(args.log, "a", encoding="utf-8") as log:
        relay = Relay(args.target, args.name, args.header, log)
        app = web.Application(client_max_size=64 * 1024**2)
        app.on_startup.append(relay.start)
        app.on_cleanup.append(relay.stop)
        app.router.add_route("*", "/{tail:.*}", relay.handle)
        web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
