"""A ZeroMQ socket driven by the asyncio event loop, without a future per message.

The socket is an ordinary (blocking-API) pyzmq socket used only with NOBLOCK; the loop watches
its file descriptor and, when it signals, every waiting message is drained in one go and handed
to a callback, followed by one `on_drained` call in which the owner flushes its replies as one
batch. ZeroMQ's descriptor is edge-triggered and a send can consume the edge, so after each
send the socket is checked again and a drain is scheduled if messages are waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

import zmq

from dagperf.transport import protocol

log = logging.getLogger(__name__)

# Plain ints: pyzmq's flags are enum members, and every `|` or `&` on one makes a new member.
_NOBLOCK, _SNDMORE = int(zmq.NOBLOCK), int(zmq.SNDMORE)
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)


def _readable(socket: zmq.Socket[bytes]) -> bool:
    return bool(cast(int, socket.getsockopt(_EVENTS)) & _POLLIN)


class Channel:
    def __init__(
        self,
        socket: zmq.Socket[bytes],
        on_message: Callable[[list[bytes]], None],
        on_drained: Callable[[], None] = lambda: None,
    ):
        self.socket = socket
        self._on_message = on_message
        self._on_drained = on_drained
        self._loop = asyncio.get_running_loop()
        self._scheduled = False
        self._closed = False
        self._fd = int(socket.getsockopt(zmq.FD))
        self._loop.add_reader(self._fd, self._drain)
        self._loop.call_soon(self._drain)  # messages may have arrived before we watched

    def send(self, frames: list[bytes]) -> None:
        socket = self.socket
        try:  # (send_multipart's loop, without its enum flags: the first frame decides)
            for frame in frames[:-1]:
                socket.send(frame, _NOBLOCK | _SNDMORE)
            socket.send(frames[-1], _NOBLOCK)
        except zmq.Again:
            log.warning("dropped a message: the peer is not reading (send queue full)")
        self._recheck()

    def drain(self) -> None:
        """Handle every message waiting now, even if the loop has not yet run our reader (a
        busy loop: what was sent may be there long before it is read)."""
        if not self._closed:
            self._drain()

    def _recheck(self) -> None:
        if not self._scheduled and _readable(self.socket):
            self._scheduled = True
            self._loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        if self._closed:
            return
        received = False
        socket = self.socket
        # Asking first costs less than the exception a receive raises when nothing is waiting.
        while _readable(socket):
            try:
                frames = socket.recv_multipart(_NOBLOCK)
            except zmq.Again:
                break
            received = True
            try:
                self._on_message(frames)
            except Exception:  # a bug in handling one message must not stall the channel
                log.exception("failed to handle a message; going on with the next")
            if self._closed:
                return
        if received:
            self._on_drained()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._loop.remove_reader(self._fd)
            self.socket.close(linger=0)


def receive(frames: list[bytes]) -> protocol.Message | None:
    """Decode a message, or log why not and return None: a bad message is never fatal."""
    try:
        return protocol.decode(frames)
    except protocol.BadMessage as e:
        log.warning("dropped a malformed message: %s", e)
        return None
