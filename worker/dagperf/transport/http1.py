"""HTTP/1.1 to the server under test: kept-alive connections, each request one write.

The request path is the client's share of every latency a run reports, and a FORK child pays it
right after its parent's reply. aiohttp spent ~60 us of Python on a request before its first
byte went out, and ~300 us when the worker had been idle through a reply's wait (cold caches on
a small machine); here a request is formatted into one bytes object and written at once
(~20 us and ~75 us). Responses are parsed by llhttp through httptools, the parser uvicorn uses:
Content-Length, chunked and read-until-close bodies, and whether the connection can be kept.

Only what a benchmark of one endpoint needs: POST to one origin, no redirects, cookies, proxies
or compression (no Accept-Encoding is sent, so servers answer in identity). A kept connection
the server closed while idle is noticed when the request gets no byte back, and the request is
sent once more on a new connection, as browsers and urllib3 do.

Connections are capped below the process's file-descriptor limit: past it, a request waits for
a connection to come free instead of failing with "too many open files" (a FORK fan-out of
100,000 children from one turn). Its clock starts when it is written, so the wait is the
client's, not the server's, as for any request queued behind a busy connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import resource
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import httptools

_PAUSE_AT = 1 << 20  # buffered body bytes: past this, stop reading until the reader catches up
_SPARE_FDS = 256  # descriptors left for everything else a worker opens (sockets, files)


class HTTPError(Exception):
    """The exchange failed below HTTP: `kind` names how, for error records."""

    kind = "HTTPError"


class ConnectError(HTTPError):
    kind = "ConnectionError"


class Disconnected(HTTPError):
    kind = "ServerDisconnectedError"


class BadResponse(HTTPError):
    kind = "BadHTTPResponse"


class Response:
    """Status and headers, then the body as it arrives (by `chunk`, or all at once by `read`)."""

    def __init__(self, connection: _Connection, status: int, reason: str) -> None:
        self._connection = connection
        self.status = status
        self.reason = reason
        self.headers: dict[str, str] = {}  # lower-case names; a repeated header keeps its last
        self.peer = connection.peer  # the address that answered, "host:port"

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").partition(";")[0].strip().lower()

    async def chunk(self) -> bytes:
        """The body bytes that arrived since the last call, waiting for some; b"" at the end."""
        connection = self._connection
        while True:
            if connection.body:
                return connection.take()
            if connection.complete:
                return b""
            if connection.error is not None:
                raise connection.error
            await connection.readable()

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.chunk():
            parts.append(chunk)
        return b"".join(parts)


class _Connection(asyncio.Protocol):
    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.used = False  # served a request before: may have been closed while idle
        self.response: Response | None = None
        self.answered = False  # a byte of the current response arrived
        self.body: list[bytes] = []
        self._buffered = 0
        self.complete = False
        self.error: HTTPError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._headers: asyncio.Future[Response] | None = None
        self._paused = False
        self._release_on_complete = False
        self._until_close = False  # a body with no length: it ends when the connection does

    # --- one exchange -------------------------------------------------------------------------

    def send(self, data: bytes) -> asyncio.Future[Response]:
        self.response, self.answered, self.complete = None, False, False
        self._release_on_complete = self._until_close = False
        self._headers = self._loop.create_future()
        assert self.transport is not None
        self.transport.write(data)
        return self._headers

    def take(self) -> bytes:
        body = self.body
        data = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def readable(self) -> None:
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def done(self, keep: bool) -> None:
        """The caller is finished with the response: keep the connection for the next request
        once the response has been read to its end, or close it."""
        if keep and self.error is None and self.transport is not None:
            if self.complete:
                self._idle()
            else:  # e.g. [DONE] read, the chunked body's last bytes still on their way
                self._release_on_complete = True
        else:
            self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _idle(self) -> None:
        self.used = True
        self.body.clear()
        self._pool.idle(self)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"

    def data_received(self, data: bytes) -> None:
        self.answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(BadResponse(f"invalid HTTP response: {e}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._pool.lost(self)
        if self.response is not None and self._until_close and not self.complete:
            self.on_message_complete()
        elif not self.complete:
            why = f": {exc}" if exc else ""
            moment = "during the response" if self.answered else "before responding"
            self._fail(Disconnected(f"server closed the connection {moment}{why}"))

    def _fail(self, error: HTTPError) -> None:
        if self.error is None:
            self.error = error
        if self._headers is not None and not self._headers.done():
            self._headers.set_exception(error)
        self._wake()

    # --- httptools callbacks ------------------------------------------------------------------

    def on_status(self, reason: bytes) -> None:
        self.response = Response(
            self, self._parser.get_status_code(), reason.decode("latin-1").strip()
        )

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.response is not None:
            self.response.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        response = self.response
        if response is None:  # no reason phrase: llhttp skips on_status
            response = self.response = Response(self, self._parser.get_status_code(), "")
        headers = response.headers
        self._until_close = "content-length" not in headers and "chunked" not in headers.get(
            "transfer-encoding", ""
        )
        if self._headers is not None and not self._headers.done():
            self._headers.set_result(response)

    def on_body(self, data: bytes) -> None:
        self.body.append(data)
        self._buffered += len(data)
        if self._buffered > _PAUSE_AT and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()
        if not self._parser.should_keep_alive():
            self._release_on_complete = False
            self.close()
        elif self._release_on_complete:
            self._idle()


class Pool:
    """Connections to the origin of `url`, each carrying one request at a time; POSTs go to
    its path with `headers` on every request."""

    def __init__(
        self, url: str, headers: dict[str, str], max_connections: int | None = None
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"POST {target} HTTP/1.1", f"Host: {parts.netloc.rpartition('@')[2]}"]
        lines += [_header(name, value) for name, value in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._limit = max_connections or connection_limit()
        self._opening = 0  # connections being made: they count against the limit already
        self._waiting: deque[asyncio.Future[None]] = deque()  # requests waiting for room
        # The host's addresses, resolved once: a name with several (a headless Service's pods)
        # has its connections spread over them in turn, so each pod gets its share and the
        # address that answered names the pod (see `Response.peer`).
        self._addresses: list[str] | None = None
        self._fallback: list[str] = []  # other families' addresses, tried when those fail
        self._turn = 0

    @contextlib.asynccontextmanager
    async def post(
        self, body: bytes, headers: dict[str, str], sent: Callable[[], None]
    ) -> AsyncIterator[Response]:
        """Send one request and yield its response once the headers are in; `sent` is called
        as the request is written (again if it is resent on a new connection)."""
        extra = "".join(f"{_header(name, value)}\r\n" for name, value in headers.items())
        data = b"%b%bContent-Length: %d\r\n\r\n%b" % (
            self._head,
            extra.encode("latin-1"),
            len(body),
            body,
        )
        connection = await self._connect()
        try:
            sent()
            try:
                response = await connection.send(data)
            except Disconnected:
                if not connection.used or connection.answered:
                    raise
                connection = await self._connect(fresh=True)  # closed while idle: once more
                sent()
                response = await connection.send(data)
            yield response
        except BaseException:
            connection.done(keep=False)
            raise
        connection.done(keep=True)

    async def _connect(self, fresh: bool = False) -> _Connection:
        loop = asyncio.get_running_loop()
        while True:
            while self._idle and not fresh:
                connection = self._idle.pop()
                if connection.transport is not None and not connection.transport.is_closing():
                    return connection
            if len(self._all) + self._opening < self._limit:
                break
            waiter = loop.create_future()
            self._waiting.append(waiter)
            try:
                await waiter  # a connection came free or went away: look again
            except asyncio.CancelledError:
                if not waiter.done():
                    self._waiting.remove(waiter)
                else:
                    self._wake()  # pass the turn it was given on
                raise
        self._opening += 1
        try:
            connection = await self._open(loop)
        finally:
            self._opening -= 1
        self._all.add(connection)
        return connection

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        """A new connection, to the host's next address in turn (then to the others)."""
        try:
            if self._addresses is None:
                self._addresses, self._fallback = await self._resolve(loop)
            start, count = self._turn, len(self._addresses)
            order = [self._addresses[(start + k) % count] for k in range(count)]
            last: OSError | None = None
            for k, address in enumerate([*order, *self._fallback]):
                try:
                    _, connection = await loop.create_connection(
                        lambda: _Connection(self),
                        address,
                        self._port,
                        ssl=self._ssl,
                        server_hostname=self._host if self._ssl else None,
                    )
                except OSError as e:
                    last = e
                    continue
                self._turn = (start + k + 1) % count if k < count else start
                return connection
            self._addresses = None  # resolve again next time: the pods may have moved
            assert last is not None
            raise last
        except OSError as e:  # refused, unreachable, no such host, TLS handshake
            raise ConnectError(f"cannot connect to {self._host}:{self._port}: {e}") from None

    async def _resolve(self, loop: asyncio.AbstractEventLoop) -> tuple[list[str], list[str]]:
        """The addresses of the first family the resolver gives, and the others' after."""
        # The system resolver, in a thread as asyncio's own loop does (uvloop's would skip
        # what the process configured for it); once per pool.
        infos = await loop.run_in_executor(
            None,
            functools.partial(socket.getaddrinfo, self._host, self._port, type=socket.SOCK_STREAM),
        )
        if not infos:
            raise OSError(f"{self._host} has no address")
        first = infos[0][0]
        same = [str(i[4][0]) for i in infos if i[0] == first]
        other = [str(i[4][0]) for i in infos if i[0] != first]
        return list(dict.fromkeys(same)), list(dict.fromkeys(other))

    def _wake(self) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def idle(self, connection: _Connection) -> None:
        self._idle.append(connection)
        self._wake()

    def lost(self, connection: _Connection) -> None:
        self._all.discard(connection)
        with contextlib.suppress(ValueError):
            self._idle.remove(connection)
        self._wake()

    def close(self) -> None:
        for connection in list(self._all):
            connection.close()
        self._idle.clear()


def connection_limit() -> int:
    """How many connections this process can hold open, leaving room for the rest."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(16, soft - _SPARE_FDS)


def _header(name: str, value: str) -> str:
    if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
        raise ValueError(f"header {name!r}: line breaks are not allowed in HTTP headers")
    return f"{name}: {value}"
