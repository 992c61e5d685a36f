"""The `Scheduler`: sockets, timers and heartbeats around the dispatcher.

A worker that stops heartbeating for `worker_timeout_s` (or whose process the local driver sees
exit) is lost: its requests in flight become error records and the sessions it held end. After
a cancellation, results get `cancel_timeout_s` to come back before the requests still missing
are recorded as cancelled by the scheduler itself, so a hung worker cannot hold a run open.

Only workers holding the benchmark's worker key get through the CURVE handshake
(`dagperf.vocabulary.keys`); a worker configured for another server than this run's is refused at
Hello.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable

import zmq

from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.engine import Dispatcher, Flight, Phase, Progress, Until
from dagperf.exports.run import Artifacts, RunOutput
from dagperf.graph import RequestGraph
from dagperf.metrics.live import LiveMetrics
from dagperf.metrics.window import WindowSample, sampled
from dagperf.scheduler.deadline import DeadlineTimer
from dagperf.scheduler.options import SchedulerError, SchedulerOptions, worker_settings
from dagperf.scheduler.outbox import Outbox
from dagperf.scheduler.outcome import Outcome, conclude, write_final_report
from dagperf.scheduler.roster import Greeting, Roster
from dagperf.scheduler.status import StatusServer, status_report
from dagperf.transport import protocol
from dagperf.transport.channel import Channel, receive
from dagperf.vocabulary.config import LoadConfig
from dagperf.vocabulary.contract import RunState, StatusReport, Workers
from dagperf.vocabulary.keys import Gate, secure_server

log = logging.getLogger("dagperf.scheduler")


class Scheduler:
    def __init__(
        self,
        graph: RequestGraph,
        endpoint: EndpointConfig,
        load: LoadConfig,
        artifacts: Artifacts,
        options: SchedulerOptions,
        on_progress: Callable[[Progress, float | None], None] | None = None,
    ):
        self.graph = graph
        self.endpoint = endpoint
        self.artifacts = artifacts
        self.options = options
        self.on_progress = on_progress
        self.live = LiveMetrics(options.benchmark) if options.metrics_port is not None else None
        o = options
        window = WindowSample(sampled(endpoint.streaming), o.objectives, o.confidence)
        self.output = RunOutput(
            artifacts, o.goodput, self.live, o.slice_duration_s, o.scrape, window
        )
        until = None
        if o.objectives and o.max_duration_s is not None:
            until = Until(self.output.decided, o.max_duration_s)
        self.dispatcher = Dispatcher(graph, load, time.monotonic, until=until)
        self.status_server: StatusServer | None = None
        self._state = RunState.WAITING
        self.endpoint_url: str | None = None  # the address really bound, once listening
        self._peers = Roster(endpoint.url, time.monotonic)
        self._outbox = Outbox(endpoint)
        self._settings = worker_settings(endpoint, options.tokenizer_json)
        self._interrupted = False
        self._stop_requested = False
        self._registration_failure: str | None = None
        self._done = asyncio.Event()
        self._enough = asyncio.Event()
        self._stopped = asyncio.Event()  # a stop request: also ends the metrics linger
        self._timer = DeadlineTimer(self._on_timer)
        self._cancel_deadline: asyncio.TimerHandle | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    # --- the run ----------------------------------------------------------------------------

    async def run(self) -> Outcome:
        loop = asyncio.get_running_loop()
        try:
            self.output.open(self.graph, self.endpoint)
        except OSError as e:
            where = e.filename or self.artifacts.directory
            raise SchedulerError(f"cannot write {where}: {e.strerror or e}") from None
        socket, gate = _listen(self.options)
        self.endpoint_url = socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._channel = Channel(socket, self._on_message, self._flush)
        self.artifacts.run_info.setdefault("benchmark_id", secrets.token_hex(6))
        self._watchdog = loop.call_later(self.options.heartbeat_s, self._watch)
        try:
            if self.options.metrics_port is not None:
                registry = self.live.registry if self.live else None
                token = self.options.keys.token_matches
                self.status_server = StatusServer(self.status, registry, self.stop, token)
                await self.status_server.start(self.options.metrics_host, self.options.metrics_port)
            await self._await_workers()
            if not self._cut_short:
                log.info("%d worker(s) registered; starting", len(self._peers))
                self._state = RunState.RUNNING
                self.dispatcher.begin()
                self._flush()
                await self._done.wait()
            for worker in self._peers:
                self._send(worker, protocol.Shutdown(self._end_reason()))
        finally:
            self._timer.cancel()
            for handle in (self._watchdog, self._cancel_deadline):
                if handle is not None:
                    handle.cancel()
            await self.output.close()
            self._channel.close()
            gate.close()
        outcome = self._write_summary()
        self._state = outcome.state
        if self.status_server is not None:
            if self.live is not None:
                self._update_live()
            await self.status_server.linger(self._stopped, self.options.metrics_linger_s)
            await self.status_server.stop()
        return outcome

    async def _await_workers(self) -> None:
        try:
            await asyncio.wait_for(self._enough.wait(), self.options.registration_timeout_s)
            if self._registration_failure is not None:
                raise SchedulerError(self._registration_failure)
        except TimeoutError:
            o = self.options
            raise SchedulerError(
                f"only {len(self._peers)} of {o.expected_workers} worker(s) registered within "
                f"{o.registration_timeout_s:.0f} s at {self.endpoint_url}"
            ) from None

    def interrupt(self, reason: str) -> None:
        """Stop sending, cancel what is in flight, and end the run with what it has."""
        self._interrupted = self._interrupted or not self.dispatcher.finished
        self.dispatcher.interrupt(reason)
        self._wind_down()

    def stop(self, reason: str) -> None:
        """A stop asked for (POST /stop): stop sending, give what is in flight the grace period,
        and end the run as "stopped", which is a success."""
        self._stop_requested = self._stop_requested or not self.dispatcher.finished
        self.dispatcher.stop(reason)
        self._wind_down()

    @property
    def _cut_short(self) -> bool:
        return self._interrupted or self._stop_requested

    def _wind_down(self) -> None:
        self._stopped.set()
        self._enough.set()  # stop waiting for workers, if still waiting
        if self.endpoint_url is not None:
            self._flush()

    def worker_exited(self, worker: str, why: str) -> None:
        """The local driver saw a worker process end. It starts no replacement: before the run
        begins, the expected number can no longer be reached, so waiting would be in vain."""
        if self.dispatcher.finished:
            self._peers.remove(worker)  # it was told to shut down: nothing is lost
            return
        if worker in self._peers:
            self._lose(worker, why)
        if self._state is RunState.WAITING and self._registration_failure is None:
            self._registration_failure = f"worker {worker} ended before the run began: {why}"
            self._enough.set()

    def _end_reason(self) -> str:
        return self.dispatcher.failure or self.dispatcher.closed_reason or "the run is complete"

    # --- messages ---------------------------------------------------------------------------

    def _on_message(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            return
        worker = frames[0].decode("utf-8", "replace")
        message = receive(frames[1:])
        if message is None:
            return
        if isinstance(message, protocol.Hello):
            self._hello(worker, message)
            return
        if isinstance(message, protocol.Heartbeat):  # from the worker's heartbeat socket
            self._peers.beat(message)
            return
        if not self._peers.heard(worker):
            log.debug("ignored a %s from unregistered worker %s", type(message).__name__, worker)
            return
        if isinstance(message, protocol.Results):
            # What these results release goes out first; the bookkeeping can wait.
            complete = self.dispatcher.complete
            done = [
                (complete(r.credit, r.error is None, r.cut is not None, r.started), r)
                for r in message.items
            ]
            self._flush()
            for flight, result in done:
                if flight is not None:
                    self._record(flight, result)
            self._check_writes()

    def _hello(self, worker: str, hello: protocol.Hello) -> None:
        greeting = self._peers.greet(worker, hello)
        if greeting is Greeting.REFUSED:
            log.error("refused worker %s: it sends to %s, this run measures %s", worker,
                      hello.url[:200], self.endpoint.url)  # fmt: skip
            reason = f"this worker sends to {hello.url[:200]}, the run measures {self.endpoint.url}"
            self._send(worker, protocol.Shutdown(reason))
            return
        if greeting is Greeting.RESTARTED:
            self._lose(worker, "it restarted")  # same name, new process: its histories are gone
        if greeting is not Greeting.KNOWN:
            if self.dispatcher.finished:
                self._send(worker, protocol.Shutdown(self._end_reason()))
                return
            self._peers.add(worker, hello.incarnation)
            self.dispatcher.add_worker(worker)
            log.info("worker %s registered (pid %d)", worker, hello.pid)
        self._send(worker, protocol.Welcome(self._settings, self.options.heartbeat_s))
        if len(self._peers) >= self.options.expected_workers:
            self._enough.set()

    def _record(self, flight: Flight, result: protocol.Result) -> None:
        issued = self._outbox.settle(flight.credit)
        if flight.phase is Phase.PROFILING:
            params = self._outbox.params(flight.run.tree.nodes[flight.node].payload)
            self.output.add(flight, result, issued, params)

    # --- workers ----------------------------------------------------------------------------

    def _watch(self) -> None:
        """Every heartbeat: tell workers we live, and lose the ones that went silent."""
        self._channel.drain()  # a busy loop may not have read heartbeats that did arrive
        for worker, silence in self._peers.silent(self.options.worker_timeout_s):
            self._lose(worker, f"no heartbeat for {silence:.1f} s")
        for worker in self._peers:
            self._send(worker, protocol.Heartbeat())
        if self.on_progress is not None and self._enough.is_set():
            self.on_progress(self.dispatcher.progress(), self.output.ttft_p50_ms())
        if self.live is not None:
            self._update_live()
        self.output.flush()
        self._check_writes()
        self._watchdog = asyncio.get_running_loop().call_later(
            self.options.heartbeat_s, self._watch
        )

    def _check_writes(self) -> None:
        """A record that cannot be written ends the run: measuring on would measure for nothing."""
        failure = self.output.write_error()
        if failure is not None and self.dispatcher.failure is None:
            self.dispatcher.fail(failure)
            self._flush()

    def _update_live(self) -> None:
        assert self.live is not None
        self.live.update(self.dispatcher.progress(), len(self._peers), self.dispatcher.branch_stats)

    def status(self) -> StatusReport:
        """The run as the operator reads it from /status."""
        workers = Workers(desired=self.options.expected_workers, registered=len(self._peers))
        return status_report(self._state, self.dispatcher, workers, self.output.summary)

    def _lose(self, worker: str, why: str) -> None:
        self._peers.remove(worker)
        lost = self.dispatcher.remove_worker(worker)
        log.warning(
            "lost worker %s (%s); %d request(s) in flight on it are lost", worker, why, len(lost)
        )
        now = time.time_ns()
        for flight in lost:  # the run lost them, not the endpoint: cut, nothing seen of them
            issued = self._outbox.issued(flight.credit, now)
            error = protocol.ErrorInfo(None, "WorkerLost", f"worker {worker} was lost: {why}")
            cut = protocol.Cut((now - issued) / 1e6, None)
            self._record(flight, protocol.Result(
                flight.credit, issued, None, now, {}, error, cut=cut
            ))  # fmt: skip
        self._flush()

    # --- output -----------------------------------------------------------------------------

    def _flush(self) -> None:
        """Send what the dispatcher decided, batched per worker, and re-arm its timer."""
        mail = self._outbox.collect(self.dispatcher, time.time_ns(), self._peers)
        for worker, frames in mail.items:
            self._channel.send([worker.encode(), *frames])
        self.output.retire(mail.retired)
        if mail.cancelled and self._cancel_deadline is None:
            loop = asyncio.get_running_loop()
            self._cancel_deadline = loop.call_later(self.options.cancel_timeout_s, self._abandon)
        self._timer.set(self.dispatcher.next_deadline())
        if self.dispatcher.finished:
            self._done.set()

    def _on_timer(self) -> None:
        self.dispatcher.tick()
        self._flush()

    def _abandon(self) -> None:
        """Cancelled requests whose results never came back: record them as cancelled here."""
        self._cancel_deadline = None
        now = time.time_ns()
        for flight in self.dispatcher.in_flight():
            if self.dispatcher.complete(flight.credit, ok=False, cancelled=True) is None:
                continue
            issued = self._outbox.issued(flight.credit, now)
            message = f"no result within {self.options.cancel_timeout_s:.0f} s of cancelling"
            error = protocol.ErrorInfo(499, protocol.CANCELLED, message)
            cut = protocol.Cut((now - issued) / 1e6, None)  # what it saw is lost with it
            self._record(flight, protocol.Result(
                flight.credit, issued, None, now, {}, error, now, cut=cut
            ))  # fmt: skip
        self._flush()

    def _send(self, worker: str, message: protocol.Message) -> None:
        self._channel.send([worker.encode(), *protocol.encode(message)])

    def _write_summary(self) -> Outcome:
        outcome = conclude(
            self.dispatcher, self.output, self._interrupted, self._stop_requested,
            self.options.max_error_rate,
        )  # fmt: skip
        if self.options.summary_file is not None:
            write_final_report(
                self.options.summary_file, outcome, self.status(), self.options.benchmark,
                self.output.summary.duration_s, self.artifacts.directory,
            )  # fmt: skip
        return outcome


def _listen(options: SchedulerOptions) -> tuple[zmq.Socket[bytes], Gate]:
    """The ROUTER socket workers connect to, behind the CURVE gate that admits them."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    gate = Gate(context, options.keys)
    socket = context.socket(zmq.ROUTER)
    secure_server(socket, options.keys)
    settings = {zmq.ROUTER_HANDOVER: 1, zmq.LINGER: 0, zmq.SNDHWM: 0, zmq.RCVHWM: 0}
    settings[zmq.MAXMSGSIZE] = protocol.MAX_TO_SCHEDULER
    for option, value in settings.items():
        socket.setsockopt(option, value)
    try:
        socket.bind(options.bind)
    except zmq.ZMQError as e:
        socket.close(linger=0)
        gate.close()
        raise SchedulerError(f"cannot listen on {options.bind}: {e}") from None
    return socket, gate
