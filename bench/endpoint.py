"""The server the tools are measured against: a bare OpenAI-style streaming endpoint in a process
of its own, cheap enough that the client is what gets measured.

    python bench/endpoint.py [--ttft-ms 20 --itl-ms 2]   # prints its URL, serves until killed

Every POST gets the same streamed chat completion (16 tokens, a usage chunk, [DONE]) from an
asyncio protocol on uvloop: no framework, no JSON decoding. With no delays it writes the whole
reply at once (the zero-cost endpoint). With `--ttft-ms`, the first token goes out that long
after the request's first byte arrived, then one token every `--itl-ms`, and each request is
recorded by its X-Request-ID: first byte read, first token written, last byte written (epoch
ns). Those stamps are taken at the socket, not after a framework has parsed the request, so a
tool's TTFT can be checked against them to the tenth of a millisecond.

GET /stats gives {requests, first_ns} (first_ns: the first request since the last POST /reset),
GET /records the recorded requests. `ceiling()` measures its own requests/s from two bare client
processes, to show it is far above what the tools in front of it reach.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

TOKENS = 16
BACKLOG = 4096


def _event(body: dict) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return _event({"id": "z", "object": "chat.completion.chunk", "model": "m", "choices": [choice]})


FIRST = _chunk({"role": "assistant", "content": " t0"})
NEXT = [_chunk({"content": f" t{i}"}) for i in range(1, TOKENS)]
USAGE = {"prompt_tokens": 8, "completion_tokens": TOKENS, "total_tokens": 8 + TOKENS}
TAIL = (
    _chunk({}, "length")
    + _event(
        {"id": "z", "object": "chat.completion.chunk", "model": "m", "choices": [], "usage": USAGE}
    )
    + b"data: [DONE]\n\n"
)
BODY = FIRST + b"".join(NEXT) + TAIL
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"


def _json(value: object) -> bytes:
    body = json.dumps(value).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % len(body) + body


@dataclass(slots=True)
class Record:
    request_id: str
    received_ns: int
    first_ns: int = 0
    end_ns: int = 0


class Endpoint:
    def __init__(self, ttft_ms: float, itl_ms: float):
        self.ttft = ttft_ms / 1000
        self.itl = itl_ms / 1000
        self.requests = 0
        self.first_ns: int | None = None
        self.records: list[Record] = []


class _Protocol(asyncio.Protocol):
    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self.buffer = b""
        self.arrived_ns = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.buffer:
            self.arrived_ns = time.time_ns()  # the request's first byte
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            length = _header_int(head, b"content-length:")
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self._answer(head)
            self.arrived_ns = time.time_ns() if self.buffer else 0

    def _answer(self, head: bytes) -> None:
        e = self.endpoint
        if head.startswith(b"get /stats"):
            self.transport.write(_json({"requests": e.requests, "first_ns": e.first_ns}))
        elif head.startswith(b"get /records"):
            self.transport.write(_json([asdict(r) for r in e.records]))
        elif head.startswith(b"post /reset"):
            e.requests, e.first_ns, e.records = 0, None, []
            self.transport.write(_json({}))
        elif head.startswith(b"get"):
            self.transport.write(_json({"object": "list", "data": [{"id": "m"}]}))
        else:
            e.requests += 1
            if e.first_ns is None:
                e.first_ns = self.arrived_ns
            if not e.ttft and not e.itl:
                self.transport.write(HEAD % len(BODY) + BODY)
                return
            record = Record(_header(head, b"x-request-id:"), self.arrived_ns)
            e.records.append(record)
            loop = asyncio.get_running_loop()
            start = loop.time() - (time.time_ns() - self.arrived_ns) / 1e9
            loop.call_at(start + e.ttft, self._token, record, start, 0)

    def _token(self, record: Record, start: float, i: int) -> None:
        e = self.endpoint
        if self.transport.is_closing():  # the client went away mid-reply (a run's end)
            return
        if i == 0:
            self.transport.write(HEAD % len(BODY) + FIRST)
            record.first_ns = time.time_ns()
        elif i < TOKENS:
            self.transport.write(NEXT[i - 1])
        if i + 1 < TOKENS:
            asyncio.get_running_loop().call_at(
                start + e.ttft + (i + 1) * e.itl, self._token, record, start, i + 1
            )
        else:
            self.transport.write(TAIL)
            record.end_ns = time.time_ns()


def _header(head: bytes, name: bytes) -> str:
    at = head.find(name)
    if at < 0:
        return ""
    end = head.find(b"\r\n", at)
    return head[at + len(name) : end if end >= 0 else len(head)].strip().decode()


def _header_int(head: bytes, name: bytes) -> int:
    value = _header(head, name)
    return int(value) if value else 0


async def _serve(ttft_ms: float, itl_ms: float) -> None:
    endpoint = Endpoint(ttft_ms, itl_ms)
    loop = asyncio.get_running_loop()
    # A client opening hundreds of connections at once must not overflow the accept queue
    # (asyncio's default holds 100): a dropped SYN is retried a whole second later.
    server = await loop.create_server(lambda: _Protocol(endpoint), "127.0.0.1", 0, backlog=BACKLOG)
    print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


class Running:
    """An endpoint process, and what the bench asks of it."""

    def __init__(self, process: subprocess.Popen, url: str):
        self.process = process
        self.url = url

    @classmethod
    def start(cls, ttft_ms: float = 0, itl_ms: float = 0) -> Running:
        process = subprocess.Popen(
            [sys.executable, __file__, "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)],
            stdout=subprocess.PIPE,
            text=True,
        )
        return cls(process, process.stdout.readline().strip())  # type: ignore[union-attr]

    def ask(self, path: str, method: str = "GET") -> object:
        import urllib.request

        request = urllib.request.Request(self.url + path, method=method)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


_CLIENT = """
import asyncio, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
request = (b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\n"
           b"Content-Length: 2\\r\\n\\r\\n{}")
done = 0
async def one():
    global done
    reader, writer = await asyncio.open_connection(host, port)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        writer.write(request)
        head = (await reader.readuntil(b"\\r\\n\\r\\n")).lower()
        at = head.find(b"content-length:")
        await reader.readexactly(int(head[at + 15:head.find(b"\\r\\n", at)]))
        done += 1
    writer.close()
async def main():
    await asyncio.gather(*[one() for _ in range(32)])
asyncio.run(main())
print(done / seconds)
"""


def ceiling(url: str, seconds: float = 2.0, clients: int = 2) -> float:
    """Requests/s under `clients` bare client processes of 32 connections each."""
    host, port = url.removeprefix("http://").split(":")
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _CLIENT, host, port, str(seconds)], stdout=subprocess.PIPE
        )
        for _ in range(clients)
    ]
    return sum(float(p.communicate()[0]) for p in processes)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.run(_serve(args.ttft_ms, args.itl_ms))
    except ImportError:
        asyncio.run(_serve(args.ttft_ms, args.itl_ms))
    except KeyboardInterrupt:
        pass
