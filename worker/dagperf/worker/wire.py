"""The worker's sockets to its scheduler, and the thread that heartbeats on its own socket.

Heartbeats go from a thread: a loop starting 100,000 FORK children at once would send them late,
and the scheduler would count a busy worker as lost. The wire is CURVE-encrypted and
authenticated both ways (`dagperf.vocabulary.keys`).
"""

from __future__ import annotations

import contextlib
import threading

import zmq

from dagperf.transport import protocol
from dagperf.vocabulary.keys import secure_client
from dagperf.worker.options import WorkerConfig


class Heartbeat(threading.Thread):
    """Sends this worker's heartbeats while `beating` is set, every `interval_s`, from its own
    thread and socket. The GIL changes hands every few milliseconds however busy the event
    loop is, so a worker heard from is a worker alive; one stopped or dead falls silent."""

    def __init__(self, config: WorkerConfig, incarnation: str) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self._config = config
        self._frames = protocol.encode(protocol.Heartbeat(config.worker_id, incarnation))
        self.interval_s = 1.0
        self.beating = threading.Event()
        self._stopped = threading.Event()

    def run(self) -> None:
        socket = connect(self._config, f"{self._config.worker_id}/heartbeat", 1 << 16)
        socket.setsockopt(zmq.SNDHWM, 4)  # a heartbeat nobody reads is not worth queueing
        try:
            while not self._stopped.wait(self.interval_s):
                if self.beating.is_set():
                    with contextlib.suppress(zmq.Again):
                        socket.send_multipart(self._frames, zmq.NOBLOCK)
        finally:
            socket.close(linger=0)

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join()


def connect(config: WorkerConfig, identity: str, max_message: int) -> zmq.Socket[bytes]:
    """A DEALER socket to the scheduler, authenticated and encrypted by CURVE."""
    socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    secure_client(socket, config.keys)
    socket.setsockopt(zmq.IDENTITY, identity.encode())
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SNDHWM, 0)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.setsockopt(zmq.MAXMSGSIZE, max_message)
    socket.connect(config.scheduler)
    return socket
