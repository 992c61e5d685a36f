"""The `Worker`: the event loop's side of a worker (socket, HTTP pool, tasks, timers).

Results are held back until the armed requests started before them are on the wire: sending a
batch wakes the scheduler, and on a small machine that costs the children's first bytes more
than the wait costs the results (a four-child fan-out's last child went out ~1 ms later).

If the scheduler stays silent for `scheduler_timeout` seconds, the worker drops everything and
says Hello again, so a worker pod outlives a scheduler restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import time
from typing import Any

import msgspec

from dagperf.apis.conversation import prompt_text
from dagperf.metrics.record import error_metrics, request_metrics
from dagperf.transport import protocol
from dagperf.transport.channel import Channel, receive
from dagperf.transport.client import Exchange
from dagperf.vocabulary.tokens import TokenCounter, TokenizerError
from dagperf.worker.armed import ArmedCredits
from dagperf.worker.endpoint import Endpoint
from dagperf.worker.histories import Histories
from dagperf.worker.options import WorkerConfig
from dagperf.worker.wire import Heartbeat, connect

log = logging.getLogger("dagperf.worker")

# A turn's messages arrive as the JSON text the dataset held; they become objects only here.
_decode_messages = msgspec.json.Decoder(list[dict[str, Any]]).decode
WAITING_LOG_S = 5.0  # how often a worker says it is still waiting for its scheduler
HELLO_INTERVAL_S = 0.5


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
        self._endpoint: Endpoint | None = None
        self._heard = 0.0
        self._stop = asyncio.Event()
        self._welcomed = asyncio.Event()
        self._heartbeat = Heartbeat(config, self.incarnation)

    async def run(self) -> None:
        socket = connect(self.config, self.worker_id, protocol.MAX_TO_WORKER)
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
                        self.config.scheduler,
                        now - began,
                    )

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
        if self._endpoint is not None:
            self._endpoint.close()
            self._endpoint = None

    # --- messages from the scheduler ---------------------------------------------------------

    def _on_message(self, frames: list[bytes]) -> None:
        message = receive(frames)
        if message is None:
            return
        self._heard = time.monotonic()
        if isinstance(message, protocol.Credits):
            if self._endpoint is None:
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
        try:
            self._endpoint = Endpoint(self.config, settings)
        except ValueError as e:
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
        endpoint = self._endpoint
        assert endpoint is not None
        ex = Exchange(reply=endpoint.reply())
        messages = self._context(credit)
        if messages is None:
            where = f"node {credit.history} of run {credit.run}"
            error = protocol.ErrorInfo(None, "MissingHistory", f"no history here for {where}")
            self._finish(credit, ex, {}, error)
            return
        try:
            armed = self._armed.unsent(credit.id)
            written = (lambda: self._written(credit.id)) if armed else None
            await endpoint.send(credit, messages, ex, written)
        except asyncio.CancelledError:  # the run cut it short: say what was seen of it
            now = time.time_ns()
            cut = _cut(ex, time.perf_counter_ns())
            message = f"Request was cancelled after {cut.waited_ms / 1e3:.3f} seconds"
            error = protocol.ErrorInfo(499, protocol.CANCELLED, message)
            metrics = error_metrics(prompt_text(messages), self._counter)
            self._finish(credit, ex, metrics, error, cancelled_ns=now, cut=cut)
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
            return _decode_messages(credit.messages)
        history = self._histories.read(credit.run, credit.history)
        if history is None:
            return None
        return [*history, *_decode_messages(credit.messages)]

    def _finish(
        self,
        credit: protocol.Credit,
        ex: Exchange,
        metrics: dict[str, Any],
        error: protocol.ErrorInfo | None,
        cancelled_ns: int | None = None,
        token_source: str | None = None,
        started: tuple[int, ...] = (),
        cut: protocol.Cut | None = None,
    ) -> None:
        self._tasks.pop(credit.id, None)
        self._armed.drop(credit.id)  # failed: they never start (after a success: none left)
        start = ex.start_ns or time.time_ns()
        end = ex.end_ns or time.time_ns()
        finish = ex.reply.finish if error is None else None
        result = protocol.Result(
            credit.id,
            start,
            ex.ack_ns,
            end,
            metrics,
            error=error,
            cancelled_ns=cancelled_ns,
            token_source=token_source,
            started=started,
            backend=ex.backend,
            backend_source=ex.backend_source,
            cut=cut,
            finish_reason=finish,
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


def _cut(ex: Exchange, now_perf: int) -> protocol.Cut:
    """What was seen of a request cut short: how long it had waited, and when each output event
    came (from its start: the first is its time to first token)."""
    start = ex.start_perf or now_perf
    stamps = tuple((stamp - start) / 1e6 for stamp in ex.output_perf)
    return protocol.Cut((now_perf - start) / 1e6, stamps)
