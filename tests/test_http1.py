"""The request path's HTTP/1.1 client against a loopback server that writes exactly the bytes
each test scripts: framing, kept connections, and every way a server can fail it."""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from dagperf.transport.client import Exchange, exchange
from dagperf.transport.http1 import (
    BadResponse,
    ConnectError,
    Disconnected,
    Pool,
    Response,
    connection_limit,
)

from runs import free_port

Answer = Callable[[asyncio.StreamWriter], Awaitable[bool]]  # True: keep the connection open


def reply(raw: bytes, keep: bool = True) -> Answer:
    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(raw)
        await writer.drain()
        return keep

    return answer


async def hang_up(writer: asyncio.StreamWriter) -> bool:
    return False


def json_reply(body: bytes, extra: bytes = b"") -> Answer:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
    return reply(head % len(body) + extra + b"\r\n" + body)


class Script:
    """A loopback server answering each request, on whatever connection, with the next answer;
    it keeps what it read."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append((head, await reader.readexactly(length)))
                if not await self.answers.pop(0)(writer):
                    return
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def serving(script: Script) -> AsyncIterator[str]:
    server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    finally:
        server.close()


async def post(pool: Pool, body: bytes = b"{}") -> tuple[Response, bytes]:
    async with pool.post(body, {"X-Request-ID": "r1"}, lambda: None) as response:
        return response, await response.read()


async def test_a_request_is_one_well_formed_message_and_connections_are_kept():
    script = Script(json_reply(b'{"a": 1}'), json_reply(b'{"b": 2}'), json_reply(b"{}"))
    async with serving(script) as url:
        pool = Pool(url + "?x=1", {"Content-Type": "application/json", "User-Agent": "t"})
        bodies = [(await post(pool, b'{"n": %d}' % i))[1] for i in range(3)]
        pool.close()
    assert bodies == [b'{"a": 1}', b'{"b": 2}', b"{}"]
    assert script.connections == 1
    head, body = script.requests[1]
    port = url.split(":")[2].split("/")[0]
    assert head.split(b"\r\n") == [
        b"POST /v1/chat/completions?x=1 HTTP/1.1",
        f"Host: 127.0.0.1:{port}".encode(),
        b"Content-Type: application/json",
        b"User-Agent: t",
        b"X-Request-ID: r1",
        b"Content-Length: 8",
        b"",
        b"",
    ]
    assert body == b'{"n": 1}'


def held_stream(first: bytes, rest: bytes, release: asyncio.Event) -> Answer:
    """A chunked event stream: `first` (chunk-framed) goes out at once, `rest` once released."""

    async def answer(writer: asyncio.StreamWriter) -> bool:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
        writer.write(head + b"Transfer-Encoding: chunked\r\n\r\n" + first)
        await writer.drain()
        await release.wait()
        writer.write(rest)
        return True

    return answer


async def test_a_chunked_stream_arrives_as_it_is_written():
    release = asyncio.Event()
    stream = held_stream(b"5\r\nfirst\r\n", b"6\r\nsecond\r\n0\r\n\r\n", release)
    script = Script(stream, json_reply(b"{}"))
    async with serving(script) as url:
        pool = Pool(url, {})
        async with pool.post(b"{}", {}, lambda: None) as response:
            assert (response.status, response.reason) == (200, "OK")
            assert response.content_type == "text/event-stream"
            assert await response.chunk() == b"first"
            release.set()
            assert await response.chunk() == b"second"
            assert await response.chunk() == b""
        assert (await post(pool))[1] == b"{}"
        pool.close()
    assert script.connections == 1


async def test_leaving_before_the_last_chunk_keeps_the_connection_once_it_comes():
    """A stream read up to its [DONE] event is left before the chunked body's terminator."""
    release = asyncio.Event()
    stream = held_stream(b"e\r\ndata: [DONE]\n\n\r\n", b"0\r\n\r\n", release)
    script = Script(stream, json_reply(b"{}"))
    async with serving(script) as url:
        pool = Pool(url, {})
        async with pool.post(b"{}", {}, lambda: None) as response:
            assert await response.chunk() == b"data: [DONE]\n\n"
        release.set()
        async with asyncio.timeout(60):
            while not pool._idle:  # the terminator's arrival puts the connection back
                await asyncio.sleep(0.001)
        assert (await post(pool))[1] == b"{}"
        pool.close()
    assert script.connections == 1


async def test_a_body_without_length_ends_with_its_connection():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
    script = Script(reply(head + b'{"until": "close"}', keep=False), json_reply(b"{}"))
    async with serving(script) as url:
        pool = Pool(url, {})
        assert (await post(pool))[1] == b'{"until": "close"}'
        assert (await post(pool))[1] == b"{}"
        pool.close()
    assert script.connections == 2


async def test_connection_close_is_honoured():
    script = Script(json_reply(b"{}", b"Connection: close\r\n"), json_reply(b"{}"))
    async with serving(script) as url:
        pool = Pool(url, {})
        await post(pool)
        await post(pool)
        pool.close()
    assert script.connections == 2


async def test_a_kept_connection_closed_while_idle_is_resent_once_on_a_new_one():
    script = Script(json_reply(b'{"first": 1}'), hang_up, json_reply(b'{"again": 2}'))
    sends = []
    async with serving(script) as url:
        pool = Pool(url, {})
        await post(pool)
        async with pool.post(b'{"n": 2}', {}, lambda: sends.append(1)) as response:
            assert await response.read() == b'{"again": 2}'
        pool.close()
    assert script.connections == 2 and len(sends) == 2  # stamped again when resent
    assert [body for _, body in script.requests] == [b"{}", b'{"n": 2}', b'{"n": 2}']


CUT = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"cut'


@pytest.mark.parametrize(
    ("answer", "error", "match"),
    [
        (hang_up, Disconnected, "before responding"),  # a new connection: not resent
        (reply(CUT, keep=False), Disconnected, "during the response"),
        (reply(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"), BadResponse, "invalid HTTP response"),
    ],
    ids=["dropped unanswered", "dropped mid-body", "not HTTP"],
)
async def test_a_broken_answer_is_an_error_naming_how(answer, error, match):
    script = Script(answer)
    async with serving(script) as url:
        pool = Pool(url, {})
        with pytest.raises(error, match=match):
            await post(pool)
        pool.close()
    assert len(script.requests) == 1


async def test_a_refused_connection_names_where():
    port = free_port()
    pool = Pool(f"http://127.0.0.1:{port}/v1/completions", {})
    with pytest.raises(ConnectError, match=f"cannot connect to 127.0.0.1:{port}"):
        await post(pool)


async def test_a_large_body_is_read_whole_through_flow_control():
    body = bytes(range(256)) * (12 * 1024)  # 3 MiB: past the point where reading pauses
    script = Script(json_reply(body))
    async with serving(script) as url:
        pool = Pool(url, {})
        async with pool.post(b"{}", {}, lambda: None) as response:
            parts = []
            while chunk := await response.chunk():
                parts.append(chunk)
                await asyncio.sleep(0)  # a slow reader
        pool.close()
    assert b"".join(parts) == body


async def test_a_cancelled_exchange_does_not_leave_its_connection_for_reuse():
    async def half(writer: asyncio.StreamWriter) -> bool:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 999\r\n\r\n"
        writer.write(head + b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n')
        return True

    script = Script(half, json_reply(b"{}"))
    async with serving(script) as url:
        pool = Pool(url, {})
        first = Exchange()
        task = asyncio.ensure_future(exchange(pool, b"{}", {}, None, first))
        async with asyncio.timeout(60):
            while not first.output_perf:  # the first token is in: the reply is under way
                await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await post(pool))[1] == b"{}"
        pool.close()
    assert script.connections == 2


async def test_exchange_turns_every_failure_into_an_error():
    port = free_port()
    refused = Exchange()
    await exchange(Pool(f"http://127.0.0.1:{port}/", {}), b"{}", {}, 5, refused)
    assert refused.error is not None and refused.error.type == "ConnectionError"

    dropped = Exchange()
    async with serving(Script(hang_up)) as url:
        pool = Pool(url, {})
        await exchange(pool, b"{}", {}, 5, dropped)
        pool.close()
    assert dropped.error is not None and dropped.error.type == "ServerDisconnectedError"
    assert dropped.start_ns and dropped.end_ns >= dropped.start_ns

    broken = Exchange()
    await exchange(Pool(f"http://127.0.0.1:{port}/", {}), b"{}", {"X-Key": "a\r\nb"}, 5, broken)
    assert broken.error is not None and broken.error.type == "InvalidRequest"


def test_line_breaks_in_headers_are_refused():
    with pytest.raises(ValueError, match="line breaks"):
        Pool("http://127.0.0.1:1/", {"Authorization": "Bearer key\n"})
    with pytest.raises(ValueError, match="not an http"):
        Pool("ftp://127.0.0.1/", {})


async def test_requests_past_the_connection_limit_wait_for_a_free_connection():
    """Past the cap (below the descriptor limit), requests queue for a connection instead of
    failing with "too many open files"."""
    script = Script(*[json_reply(b'{"n": 1}') for _ in range(30)])
    async with serving(script) as url:
        pool = Pool(url, {}, max_connections=3)
        answers = await asyncio.gather(*(post(pool) for _ in range(30)))
        pool.close()
    assert [body for _, body in answers] == [b'{"n": 1}'] * 30
    assert script.connections == 3


async def test_a_request_cancelled_while_queued_gives_up_its_turn():
    release = asyncio.Event()

    async def held(writer: asyncio.StreamWriter) -> bool:
        await release.wait()
        return await json_reply(b"{}")(writer)

    script = Script(held, *[json_reply(b"{}") for _ in range(3)])
    async with serving(script) as url:
        pool = Pool(url, {}, max_connections=1)
        tasks = [asyncio.ensure_future(post(pool)) for _ in range(4)]
        while len(pool._waiting) < 3:  # one holds the only connection, three wait for it
            await asyncio.sleep(0)
        tasks[1].cancel()
        release.set()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        pool.close()
    assert isinstance(done[1], asyncio.CancelledError)
    assert [done[i][1] for i in (0, 2, 3)] == [b"{}"] * 3
    assert script.connections == 1


def test_the_connection_limit_leaves_room_below_the_descriptor_limit():
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_limit() == max(16, soft - 256)
