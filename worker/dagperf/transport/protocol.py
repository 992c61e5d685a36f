"""The messages between the scheduler and its workers, and how they travel over ZeroMQ.

Every message is two frames after the ROUTER's identity frame: the protocol version, then one
msgspec Struct encoded as MessagePack, told apart by its tag. msgspec decodes straight into typed
structs with no intermediate dicts, which keeps both ends cheap at thousands of requests per
second; the hot messages (credits and results) are batched and encoded as arrays, not maps.

A frame that is not this version, not MessagePack, or not a known message raises `BadMessage`;
the receiver logs it and carries on, so a stray or newer peer can never take a run down.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import msgspec

VERSION = b"dagperf/8"  # 8: a result cut short by the run says what was seen of it
# The largest message each side accepts; libzmq drops a peer that sends more before a byte of it
# is buffered, so no peer can make the other hold a huge frame. Credits carry whole prompts;
# results are a few hundred bytes plus per-chunk timings.
MAX_TO_WORKER = 256 << 20
MAX_TO_SCHEDULER = 32 << 20
BATCH = 1024  # items in one Credits or Results message at most
T = TypeVar("T")


class WorkerSettings(msgspec.Struct, frozen=True):
    """How to send requests. Where to send them, and with which API key, a worker takes from
    its own configuration, never from the scheduler."""

    endpoint_type: str  # the API to speak: a name in `dagperf.apis.APIS`
    streaming: bool
    timeout_s: float
    affinity_headers: tuple[str, ...]  # each carries the routing key; none: send no key
    # the run's tokenizer.json, for counts the server does not give: sent, since a worker may
    # run where the file is not
    tokenizer_json: str | None = None
    backend_headers: tuple[str, ...] = ()  # response headers naming the backend, in order


class Hello(msgspec.Struct, tag="hello", frozen=True):
    worker_id: str
    incarnation: str  # random per process: a restarted worker with the same id is a new one
    pid: int
    url: str  # the server this worker sends to: the scheduler refuses one for another server


class Welcome(msgspec.Struct, tag="welcome", frozen=True):
    settings: WorkerSettings
    heartbeat_s: float


class Heartbeat(msgspec.Struct, tag="heartbeat", frozen=True):
    """Liveness. A worker's come from a thread on a socket of their own, so they name the
    worker they speak for; the scheduler's name nobody."""

    worker_id: str = ""
    incarnation: str = ""


class Credit(msgspec.Struct, array_like=True, frozen=True):
    """One request to send. The body is `params` plus the messages, after the history of node
    `history` of the same tree run, whose context this worker holds."""

    id: int
    run: int
    node: int
    history: int  # -1: a fresh history
    keep: int  # how many later nodes will continue this node's history here
    messages: bytes  # the JSON text of this turn's messages, as the dataset held it
    params: dict[str, Any]
    request_id: str
    correlation_id: str
    routing_key: str
    # Armed credits, every one under this credit depth first and flat, never nested (a chain
    # can be thousands long): each starts the moment the credit named by its `after` succeeds.
    then: tuple[Credit, ...] = ()
    keep_reply: bool = True  # the kept context ends with the live reply (else it is dropped)
    after: int = -1  # an armed credit: the credit whose success starts it


class Credits(msgspec.Struct, tag="credits", frozen=True):
    items: list[Credit]


class ErrorInfo(msgspec.Struct, frozen=True):
    code: int | None
    type: str
    message: str


CANCELLED = "RequestCancellationError"  # the type of a request the run itself cut short (499)


class Cut(msgspec.Struct, array_like=True, frozen=True):
    """What was seen of a request the run itself cut short (its duration's grace period, a
    stop, an interrupt; or lost, with the worker that sent it): a censored observation, neither
    a success nor the endpoint's error."""

    waited_ms: float  # from the request's start to the cut
    # when each output event came, in ms after the start; None: nothing is known of it (its
    # worker never answered the cancel)
    stamps_ms: tuple[float, ...] | None = ()


class Result(msgspec.Struct, array_like=True, frozen=True):
    """What happened to one credit; metric values are in the units of `metrics.catalog`.

    A request the run cut short carries `cut` (and, for AIPerf's readers, a 499
    `RequestCancellationError` and `cancelled_ns`); `error` alone is the endpoint's failure."""

    credit: int
    start_ns: int
    ack_ns: int | None
    end_ns: int
    metrics: dict[str, Any]
    error: ErrorInfo | None = None
    cancelled_ns: int | None = None
    token_source: str | None = None  # "usage", "tokenizer" or "estimate"
    started: tuple[int, ...] = ()  # the armed credits this one's success started
    backend: str | None = None  # which backend served it (see `backend_source`)
    backend_source: str | None = None  # "header:<name>", or "connection" (the peer address)
    cut: Cut | None = None
    finish_reason: str | None = None  # why the reply ended, in chat's words (length, stop, ...)

    @property
    def failed(self) -> bool:
        """The endpoint's failure: an error that is not the run's own cut."""
        return self.error is not None and self.cut is None


class Results(msgspec.Struct, tag="results", frozen=True):
    items: list[Result]


class Cancel(msgspec.Struct, tag="cancel", frozen=True):
    credits: list[int]


class Disarm(msgspec.Struct, tag="disarm", frozen=True):
    """Armed credits not to start after all: the run stopped before their dependency ended."""

    credits: list[int]


class Forget(msgspec.Struct, tag="forget", frozen=True):
    """Tree runs that are over: drop any history kept for them."""

    runs: list[int]


class Shutdown(msgspec.Struct, tag="shutdown", frozen=True):
    reason: str


Message = Hello | Welcome | Heartbeat | Credits | Results | Cancel | Disarm | Forget | Shutdown

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


class BadMessage(ValueError):
    pass


def encode(message: Message) -> list[bytes]:
    return [VERSION, _encoder.encode(message)]


def encode_batches(
    make: Callable[[list[T]], Message], items: list[T], limit: int
) -> Iterator[list[bytes]]:
    """`items` as messages of at most BATCH items and (where one item allows) `limit` bytes,
    in order. A batch over the limit is split in two and tried again."""
    pending = deque(items[i : i + BATCH] for i in range(0, len(items), BATCH))
    while pending:
        chunk = pending.popleft()
        frames = encode(make(chunk))
        if len(frames[1]) > limit and len(chunk) > 1:
            half = len(chunk) // 2
            pending.extendleft((chunk[half:], chunk[:half]))
            continue
        yield frames


def decode(frames: list[bytes]) -> Message:
    if len(frames) != 2:
        raise BadMessage(f"expected 2 frames, got {len(frames)}")
    if frames[0] != VERSION:
        raise BadMessage(f"unsupported protocol {bytes(frames[0])[:32]!r}, expected {VERSION!r}")
    try:
        message: Message = _decoder.decode(frames[1])
        return message
    except msgspec.DecodeError as e:
        raise BadMessage(str(e)) from None
