"""The run's workers as the scheduler deals with them: who joins, when enough have, who is lost.

A Hello from a worker configured for another server than the run's is refused with a Shutdown
saying why; one under a known name from a new incarnation is a restarted process, whose
histories are gone, so the old one is lost first. A new worker joins the dispatcher's routing and
is welcomed with the run's settings. The run begins once `expected_workers` have joined, and
cannot when they do not within `registration_timeout_s`, or when one exits before it begins (the
local driver starts no replacement: waiting would be in vain). Every heartbeat the scheduler
tells its workers it lives and loses those silent for `worker_timeout_s`.

Losing a worker is the scheduler's (`lose`): its requests in flight become records.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.engine import Dispatcher
from dagperf.scheduler.options import SchedulerError, SchedulerOptions, worker_settings
from dagperf.scheduler.roster import Greeting, Roster
from dagperf.transport import protocol

log = logging.getLogger("dagperf.scheduler")

Send = Callable[[str, protocol.Message], None]


class Membership:
    def __init__(
        self,
        endpoint: EndpointConfig,
        options: SchedulerOptions,
        dispatcher: Dispatcher,
        send: Send,
        lose: Callable[[str, str], None],
        end_reason: Callable[[], str],
    ):
        """`lose(worker, why)`: a worker is gone; `end_reason()`: what a worker that comes
        after the run ended is told."""
        self.roster = Roster(endpoint.url, time.monotonic)
        self._url = endpoint.url
        self._options = options
        settings = worker_settings(endpoint, options.tokenizer_json)
        self._welcome = protocol.Welcome(settings, options.heartbeat_s)
        self._dispatcher = dispatcher
        self._send = send
        self._lose = lose
        self._end_reason = end_reason
        self.enough = asyncio.Event()  # the run may begin (or will not: `failure`)
        self.failure: str | None = None  # why the workers cannot all register

    def __len__(self) -> int:
        return len(self.roster)

    def take(self, worker: str, message: protocol.Message) -> bool:
        """Take a Hello or a heartbeat here; True when `message` is anything else, from a
        registered worker (which now counts as alive)."""
        if isinstance(message, protocol.Hello):
            self._hello(worker, message)
            return False
        if isinstance(message, protocol.Heartbeat):  # from the worker's heartbeat socket
            self.roster.beat(message)
            return False
        if not self.roster.heard(worker):
            log.debug("ignored a %s from unregistered worker %s", type(message).__name__, worker)
            return False
        return True

    def _hello(self, worker: str, hello: protocol.Hello) -> None:
        greeting = self.roster.greet(worker, hello)
        if greeting is Greeting.REFUSED:
            url = hello.url[:200]
            log.error(
                "refused worker %s: it sends to %s, this run measures %s", worker, url, self._url
            )
            reason = f"this worker sends to {url}, the run measures {self._url}"
            self._send(worker, protocol.Shutdown(reason))
            return
        if greeting is Greeting.RESTARTED:
            self._lose(worker, "it restarted")  # same name, new process: its histories are gone
        if greeting is not Greeting.KNOWN:
            if self._dispatcher.finished:
                self._send(worker, protocol.Shutdown(self._end_reason()))
                return
            self.roster.add(worker, hello.incarnation)
            self._dispatcher.add_worker(worker)
            log.info("worker %s registered (pid %d)", worker, hello.pid)
        self._send(worker, self._welcome)
        if len(self.roster) >= self._options.expected_workers:
            self.enough.set()

    async def wait(self, where: str | None) -> None:
        """Until enough workers registered at `where`; a SchedulerError when they cannot."""
        options = self._options
        try:
            await asyncio.wait_for(self.enough.wait(), options.registration_timeout_s)
        except TimeoutError:
            raise SchedulerError(
                f"only {len(self.roster)} of {options.expected_workers} worker(s) registered "
                f"within {options.registration_timeout_s:.0f} s at {where}"
            ) from None
        if self.failure is not None:
            raise SchedulerError(self.failure)

    def exited(self, worker: str, why: str, before_the_run: bool) -> None:
        """The local driver saw a worker process end."""
        if self._dispatcher.finished:
            self.roster.remove(worker)  # it was told to shut down: nothing is lost
            return
        if worker in self.roster:
            self._lose(worker, why)
        if before_the_run and self.failure is None:
            self.failure = f"worker {worker} ended before the run began: {why}"
            self.enough.set()

    def watch(self) -> None:
        """Every heartbeat: lose the workers that went silent, and tell the rest we live."""
        for worker, silence in self.roster.silent(self._options.worker_timeout_s):
            self._lose(worker, f"no heartbeat for {silence:.1f} s")
        for worker in self.roster:
            self._send(worker, protocol.Heartbeat())

    def shut_down(self, reason: str) -> None:
        for worker in self.roster:
            self._send(worker, protocol.Shutdown(reason))
