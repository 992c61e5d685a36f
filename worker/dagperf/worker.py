"""The worker role: send the requests the scheduler routes here, and hold their histories.

A worker connects a DEALER socket under its identity (a pod name plus a process index, or a
local name), says Hello until the scheduler Welcomes it with the endpoint settings, then serves
credits as they come, each as its own task, and streams results back in batches. The API key is
read from this process's environment, never from the scheduler.

Histories live here (`dagperf.histories`): when a credit says `keep`, the request's full context
(history, its own messages and the captured reply) is kept for that many later requests of the
same tree run, which the scheduler routes to this worker because they share its routing key.

A credit may carry armed credits (`dagperf.armed`): requests that continue its history and need
nothing else. They start here the moment that one succeeds, before its result is even sent, so a
FORK child or a next turn follows its parent without a round trip; the result names the ones
started. Results are held back until the armed requests started before them are on the wire:
sending a batch wakes the scheduler, and on a small machine that costs the children's first bytes
more than the wait costs the results (a four-child fan-out's last child went out ~1 ms later).
This module is the shell around those two: sockets, the HTTP pool, tasks and timers.

If the scheduler stays silent for `scheduler_timeout` seconds, the worker drops everything and
says Hello again, so a worker pod outlives a scheduler restart. Heartbeats go from a thread on a
socket of their own: a loop starting 100,000 FORK children at once would send them late, and the
scheduler would count a busy worker as lost.

The wire is CURVE-encrypted and authenticated both ways (`dagperf.keys`); where requests go and
the API key are this worker's own configuration, never the scheduler's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import msgspec
import zmq

from dagperf import lifeline, loops
from dagperf.armed import ArmedCredits
from dagperf.config import ENDPOINT_PATHS
from dagperf.endpoints import prompt_text, request_body
from dagperf.histories import Histories
from dagperf.keys import WorkerKeys, secure_client
from dagperf.metrics.record import error_metrics, request_metrics
from dagperf.metrics.tokens import TokenCounter, TokenizerError
from dagperf.transport import protocol
from dagperf.transport.channel import Channel, receive
from dagperf.transport.client import Exchange, exchange
from dagperf.transport.http1 import Pool

log = logging.getLogger(__name__)

_json = msgspec.json.Encoder()
WAITING_LOG_S = 5.0  # how often a worker says it is still waiting for its scheduler
HELLO_INTERVAL_S = 0.5


@dataclass(frozen=True, repr=False)
class WorkerConfig:
    """A worker's own configuration: its scheduler, its keys and the server it sends to."""

    scheduler: str
    worker_id: str
    keys: WorkerKeys
    url: str  # the server's base URL (EndpointConfig's normal form)
    endpoint: str | None = None  # the request path, when not the standard one for the type
    scheduler_timeout: float = 30.0
    api_key: str | None = None  # from this process's OPENAI_API_KEY, never from the scheduler


class Worker:
    def __init__(self, config: WorkerConfig):
        self.config = config
        self.scheduler = config.scheduler
        self.worker_id = config.worker_id
        scheduler_timeout = config.scheduler_timeout
        self.scheduler_timeout = scheduler_timeout
        self.incarnation = secrets.token_hex(8)
        self._histories = Histories()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._armed = ArmedCredits()
        self._settings: protocol.WorkerSettings | None = None
        self._pool: Pool | None = None
        self._heard = 0.0
        self._stop = asyncio.Event()
        self._welcomed = asyncio.Event()
        self._heartbeat = _Heartbeat(config, self.incarnation)

    async def run(self) -> None:
        socket = _connect(self.config, self.worker_id, protocol.MAX_TO_WORKER)
        self._channel = Channel(socket, self._on_message, self._flush)
        self._heartbeat.start()
        try:
            while not self._stop.is_set():
                await self._register()
                if self._welcomed.is_set():  # else stopped while waiting for a scheduler
                    await self._serve_until_silent()
        finally:
            self._heartbeat.stop()
            await self._reset()
            self._channel.close()

    async def _register(self) -> None:
        hello = protocol.Hello(self.worker_id, self.incarnation, os.getpid(), self.config.url)
        began = said = time.monotonic()
        while not self._welcomed.is_set() and not self._stop.is_set():
            self._send(hello)
            try:
                await asyncio.wait_for(self._welcomed.wait(), HELLO_INTERVAL_S)
            except TimeoutError:
                now = time.monotonic()
                if now - said >= WAITING_LOG_S:  # silence would look like a hang
                    said = now
                    log.warning(
                        "waiting for the scheduler at %s (no answer for %.0f s); retrying",
                        self.config.scheduler, now - began,
                    )  # fmt: skip

    async def _serve_until_silent(self) -> None:
        assert self._settings is not None
        interval = self._heartbeat_s
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval)
            self._channel.drain()  # a busy loop may not have read what the scheduler sent
            if time.monotonic() - self._heard > self.scheduler_timeout:
                log.warning(
                    "no word from the scheduler for %.0f s: registering again",
                    self.scheduler_timeout,
                )
                await self._reset()
                return

    async def _reset(self) -> None:
        """Forget the current scheduler: cancel its requests and drop every history."""
        self._welcomed.clear()
        self._heartbeat.beating.clear()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._armed.clear()
        self._histories.clear()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # --- messages from the scheduler ---------------------------------------------------------

    def _on_message(self, frames: list[bytes]) -> None:
        message = receive(frames)
        if message is None:
            return
        self._heard = time.monotonic()
        if isinstance(message, protocol.Credits):
            if self._pool is None:
                log.warning(
                    "dropped %d credits that arrived before the Welcome", len(message.items)
                )
                return
            for credit in message.items:
                self._start(credit)
        elif isinstance(message, protocol.Welcome):
            self._welcome(message)
        elif isinstance(message, protocol.Cancel):
            for credit_id in message.credits:
                task = self._tasks.get(credit_id)
                if task is not None:
                    task.cancel()
        elif isinstance(message, protocol.Disarm):
            self._armed.disarm(message.credits)
        elif isinstance(message, protocol.Forget):
            for run in message.runs:
                self._histories.forget(run)
        elif isinstance(message, protocol.Shutdown):
            log.info("scheduler says: %s", message.reason)
            self._stop.set()
        # Heartbeats only prove the scheduler is alive.

    def _welcome(self, message: protocol.Welcome) -> None:
        if self._welcomed.is_set():
            return
        settings = message.settings
        self._settings = settings
        self._heartbeat_s = message.heartbeat_s
        try:
            self._counter = TokenCounter(settings.tokenizer_json, origin="the scheduler's")
        except TokenizerError as e:
            log.error("%s; token counts the server does not give will be estimates", e)
            self._counter = TokenCounter()
        headers = {"Content-Type": "application/json", "User-Agent": "dagperf"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        if settings.streaming:
            headers["Accept"] = "text/event-stream"
        path = self.config.endpoint or ENDPOINT_PATHS.get(settings.endpoint_type, "")
        try:
            self._pool = Pool(self.config.url + path, headers)
        except ValueError as e:  # a key or header with a line break in it
            log.error("cannot send requests: %s", e)
            return
        self._heartbeat.interval_s = message.heartbeat_s
        self._heartbeat.beating.set()
        self._welcomed.set()
        log.info("registered with %s as %s", self.scheduler, self.worker_id)

    # --- requests ---------------------------------------------------------------------------

    def _start(self, credit: protocol.Credit) -> asyncio.Task[None]:
        self._armed.receive(credit)
        task = self._tasks[credit.id] = asyncio.ensure_future(self._serve(credit))
        return task

    def _start_armed(self, credit: protocol.Credit) -> tuple[int, ...]:
        """After `credit` succeeded: start its armed credits that were not disarmed."""
        started = self._armed.succeeded(credit.id)
        for armed in started:
            task = self._start(armed)
            # However it ends (even cancelled before it ran), it no longer holds results.
            task.add_done_callback(functools.partial(self._written, armed.id))
        return tuple(armed.id for armed in started)

    def _written(self, credit: int, _task: object = None) -> None:
        """An armed request is on the wire (or ended without getting there); again is harmless.
        Also a done callback of its task (`_task`, unused)."""
        if self._armed.written(credit):
            asyncio.get_running_loop().call_soon(self._flush)

    async def _serve(self, credit: protocol.Credit) -> None:
        settings = self._settings
        assert settings is not None and self._pool is not None
        ex = Exchange()
        messages = self._context(credit)
        if messages is None:
            where = f"node {credit.history} of run {credit.run}"
            error = protocol.ErrorInfo(None, "MissingHistory", f"no history here for {where}")
            self._finish(credit, ex, {}, error)
            return
        body = request_body(settings.endpoint_type, credit.params, messages)
        raw = _json.encode(body)
        headers = {"X-Request-ID": credit.request_id, "X-Correlation-ID": credit.correlation_id}
        if settings.affinity_header:
            headers[settings.affinity_header] = credit.routing_key
        try:
            armed = self._armed.unsent(credit.id)
            written = (lambda: self._written(credit.id)) if armed else None
            await exchange(
                self._pool, raw, headers, settings.timeout_s, ex, settings.streaming, written
            )
        except asyncio.CancelledError:
            now = time.time_ns()
            began = ex.start_ns or now
            message = f"Request was cancelled after {(now - began) / 1e9:.3f} seconds"
            error = protocol.ErrorInfo(499, protocol.CANCELLED, message)
            metrics = error_metrics(prompt_text(messages), self._counter)
            self._finish(credit, ex, metrics, error, cancelled_ns=now)
            return
        if ex.error is not None:
            self._finish(credit, ex, error_metrics(prompt_text(messages), self._counter), ex.error)
            return
        if credit.keep:
            context = [*messages, ex.reply.message()] if credit.keep_reply else messages
            self._histories.keep(credit.run, credit.node, context, credit.keep)
        started = self._start_armed(credit)
        metrics, source = request_metrics(ex, prompt_text(messages), self._counter)
        self._finish(credit, ex, metrics, None, token_source=source, started=started)

    def _context(self, credit: protocol.Credit) -> list[dict[str, Any]] | None:
        """History followed by this turn's messages; None when the history is not here."""
        if credit.history < 0:
            return list(credit.messages)
        history = self._histories.read(credit.run, credit.history)
        if history is None:
            return None
        return [*history, *credit.messages]

    def _finish(
        self,
        credit: protocol.Credit,
        ex: Exchange,
        metrics: dict[str, Any],
        error: protocol.ErrorInfo | None,
        cancelled_ns: int | None = None,
        token_source: str | None = None,
        started: tuple[int, ...] = (),
    ) -> None:
        self._tasks.pop(credit.id, None)
        self._armed.drop(credit.id)  # failed: they never start (after a success: none left)
        start = ex.start_ns or time.time_ns()
        end = ex.end_ns or time.time_ns()
        result = protocol.Result(
            credit.id, start, ex.ack_ns, end, metrics, error, cancelled_ns, token_source, started
        )
        if self._armed.add_result(result):
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        results = self._armed.take_results()
        if results:
            for frames in protocol.encode_batches(
                protocol.Results, results, protocol.MAX_TO_SCHEDULER
            ):
                self._channel.send(frames)

    def _send(self, message: protocol.Message) -> None:
        self._channel.send(protocol.encode(message))

    def stop(self) -> None:
        self._stop.set()


class _Heartbeat(threading.Thread):
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
        socket = _connect(self._config, f"{self._config.worker_id}/heartbeat", 1 << 16)
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


def _connect(config: WorkerConfig, identity: str, max_message: int) -> zmq.Socket[bytes]:
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


def serve_workers(config: WorkerConfig, keys_dir: str, processes: int, log_flags: list[str]) -> int:
    """The `dagperf worker` command: one worker here, or `processes` child processes named
    `<worker_id>-<index>`. Runs until the scheduler shuts them down or a signal stops them."""
    if processes == 1:
        return loops.run(_serve_one(config))
    stopped_by: set[int] = set()
    children: list[subprocess.Popen[bytes]] = []
    environ = dict(os.environ)

    def forward(sig: int, _frame: object) -> None:
        stopped_by.add(sig)
        for child in children:
            child.send_signal(sig)

    # Forward signals before the first child exists, so none is ever orphaned.
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for index in range(processes):
        if stopped_by:
            break
        command = ["-m", "dagperf", "worker", "--scheduler", config.scheduler, "--processes", "1"]
        command += ["--worker-id", f"{config.worker_id}-{index}", "--keys", keys_dir]
        command += ["--url", config.url]
        if config.endpoint:
            command += ["--endpoint", config.endpoint]
        command += ["--scheduler-timeout", str(config.scheduler_timeout), *log_flags]
        child = subprocess.Popen([sys.executable, *command], env=lifeline.child_env(environ))
        children.append(child)
        for sig in tuple(stopped_by):  # came while it was being started: `forward` missed it
            child.send_signal(sig)
    codes = [child.wait() for child in children]
    # A child still starting up dies of the signal it was sent: that is a clean stop too.
    return max((0 if -code in stopped_by else code for code in codes), default=0)


async def _serve_one(config: WorkerConfig) -> int:
    worker = Worker(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, worker.stop)
    await worker.run()
    return 0
