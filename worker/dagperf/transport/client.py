"""One timed HTTP exchange with the server under test.

The clock starts as the request is written to its connection, not when it was handed over:
waiting for a connection is the client's time, not the server's. Each network read is stamped
as it arrives, and every event in it that carries output (content, reasoning or a tool call)
takes that stamp. Several events in one read share a stamp, as they arrived together.

Nothing escapes as an exception except cancellation: HTTP errors, error events in a stream,
malformed bodies, timeouts and refused or dropped connections all end up in `error`, with an
HTTP code where there is one. A success is a completion: a body or a stream that held at least one
choice or a usage block. A redirect, an HTML page, a stream with no such event or a `{}` is an
error whose message quotes the body's first bytes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dagperf.apis.choices import ChoicesReply
from dagperf.apis.reply import MalformedResponse, Reply, ServerError, body_error
from dagperf.transport.http1 import HTTPError, Pool, Response
from dagperf.transport.protocol import ErrorInfo
from dagperf.transport.sse import SSEParser

_DONE = b"[DONE]"
_HEAD = 200  # bytes of a body that is not a completion, quoted in its error


@dataclass(slots=True)
class Exchange:
    """Times are epoch nanoseconds (`*_ns`) or perf-counter nanoseconds (`*_perf`)."""

    start_ns: int = 0
    start_perf: int = 0
    ack_ns: int | None = None
    end_ns: int = 0
    end_perf: int = 0
    output_perf: list[int] = field(default_factory=list)  # each output-bearing event
    reply: Reply = field(default_factory=ChoicesReply)  # read as its API's (OpenAI's shape here)
    streamed: bool = False
    error: ErrorInfo | None = None
    backend: str | None = None  # which backend answered, and how that is known:
    backend_source: str | None = None  # "header:<name>" or "connection" (its address)


async def exchange(
    pool: Pool,
    body: bytes,
    headers: dict[str, str],
    timeout_s: float | None,
    out: Exchange,
    streaming: bool = True,
    written: Callable[[], None] | None = None,
    backend_headers: tuple[str, ...] = (),
) -> None:
    """Send one request and fill `out`; `out` keeps what happened so far if cancelled.
    `streaming` says events were asked for, so a body that is not JSON is read as a stream;
    `written` is called as the request goes out (again if it is resent); the first of
    `backend_headers` the response carries names its backend, else the address answering."""

    def stamp() -> None:
        out.start_perf = time.perf_counter_ns()
        out.start_ns = time.time_ns()

    def sent() -> None:
        stamp()
        if written is not None:
            written()

    stamp()  # until the request is written, in case it never is
    try:
        async with asyncio.timeout(timeout_s), pool.post(body, headers, sent) as response:
            out.ack_ns = time.time_ns()
            out.backend, out.backend_source = _backend(response, backend_headers)
            kind = response.content_type
            if response.status >= 400:
                out.error = _http_error(response.status, response.reason, await response.read())
            elif response.status >= 300:
                location = response.headers.get("location", "nowhere")
                message = f"HTTP {response.status} to {location}"
                out.error = _not_a_completion("UnexpectedRedirect", message, await response.read())
            elif kind == "text/html":  # a proxy's or a login page, never a completion
                message = f"HTTP {response.status} text/html"
                out.error = _not_a_completion("InvalidResponse", message, await response.read())
            elif kind == "text/event-stream" or (streaming and kind != "application/json"):
                out.streamed = True  # some servers stream events under another content type
                head = await _read_stream(response, out)
                if not out.reply.completion:
                    message = f"HTTP {response.status} {kind or '(no content type)'}: a stream "
                    message += "with no choice and no usage in any data event"
                    out.error = _not_a_completion("EmptyStream", message, head)
            else:
                raw = await response.read()
                out.reply.add_body(raw)
                if not out.reply.completion:
                    message = f"HTTP {response.status} {kind}: no choices and no usage"
                    out.error = _not_a_completion("InvalidResponse", message, raw)
    except ServerError as e:
        out.error = ErrorInfo(e.code, e.kind, str(e))
    except MalformedResponse as e:
        out.error = ErrorInfo(None, "MalformedResponse", str(e))
    except TimeoutError:
        out.error = ErrorInfo(None, "TimeoutError", f"no complete response within {timeout_s} s")
    except HTTPError as e:  # refused, dropped, not HTTP
        out.error = ErrorInfo(None, e.kind, str(e))
    except ValueError as e:  # a header value no HTTP request can carry (a line break)
        out.error = ErrorInfo(None, "InvalidRequest", str(e))
    finally:
        out.end_perf = time.perf_counter_ns()
        out.end_ns = out.start_ns + (out.end_perf - out.start_perf)


async def _read_stream(response: Response, out: Exchange) -> bytes:
    """Fold the events into `out`; returns the body's first bytes, for an error message."""
    parser = SSEParser()
    reply = out.reply
    stamps = out.output_perf
    head = b""
    while chunk := await response.chunk():
        now = time.perf_counter_ns()
        if len(head) < _HEAD:
            head += chunk[: _HEAD - len(head)]
        for event in parser.feed(chunk):
            if event.data == _DONE:
                return head
            if event.name == b"error":
                raise _event_error(event.data)
            if reply.add_chunk(event.data):
                stamps.append(now)
    for event in parser.close():
        if event.data != _DONE and reply.add_chunk(event.data):
            stamps.append(time.perf_counter_ns())
    return head


def _backend(response: Response, names: tuple[str, ...]) -> tuple[str | None, str | None]:
    for name in names:
        value = response.headers.get(name.lower())
        if value:
            return value[:200], f"header:{name.lower()}"
    return response.peer, "connection" if response.peer else None


def _not_a_completion(kind: str, message: str, body: bytes) -> ErrorInfo:
    """A 2xx or 3xx answer that is not a completion: an error naming what came instead."""
    shown = body[:_HEAD].decode("utf-8", "replace")
    return ErrorInfo(None, kind, f"{message}; the body began {shown!r}" if shown else message)


def _event_error(data: bytes) -> ServerError:
    error = body_error(data)
    return error or ServerError(None, "StreamError", data.decode("utf-8", "replace")[:500])


def _http_error(status: int, reason: str | None, raw: bytes) -> ErrorInfo:
    error = body_error(raw)
    message = str(error) if error is not None else raw.decode("utf-8", "replace")[:500]
    return ErrorInfo(status, reason or "HTTPError", message or reason or f"HTTP {status}")
