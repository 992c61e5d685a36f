"""The `Scheduler`: the socket and the timers around the dispatcher.

Its workers are `membership`'s (registration, heartbeats, who is lost). A lost worker's requests
in flight become records and the sessions it held end. After a cancellation, results get
`cancel_timeout_s` to come back before the requests still missing are recorded as cancelled by
the scheduler itself, so a hung worker cannot hold a run open.

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
from dagperf.scheduler.membership import Membership
from dagperf.scheduler.options import SchedulerError, SchedulerOptions
from dagperf.scheduler.outbox import Outbox
from dagperf.scheduler.outcome import Outcome, conclude, write_final_report
from dagperf.scheduler.status import LiveStatus, status_report
from dagperf.scheduler.timers import Timers
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
        live = LiveMetrics(options.benchmark) if options.metrics_port is not None else None
        window = WindowSample(sampled(endpoint.streaming), options.objectives, options.confidence)
        self.output = RunOutput(
            artifacts, options.goodput, live, options.slice_duration_s, options.scrape, window
        )
        until = None
        if options.objectives and options.max_duration_s is not None:
            until = Until(self.output.decided, options.max_duration_s)
        self.dispatcher = Dispatcher(graph, load, time.monotonic, until=until)
        self._shown = LiveStatus(live, options, self.dispatcher, self.output, on_progress)
        self._state = RunState.WAITING
        self.endpoint_url: str | None = None  # the address really bound, once listening
        self._members = Membership(
            endpoint, options, self.dispatcher, self._send, self._lose, self._end_reason
        )
        self._outbox = Outbox(endpoint)
        self._interrupted = False
        self._stop_requested = False
        self._done = asyncio.Event()
        self._stopped = asyncio.Event()  # a stop request: also ends the metrics linger
        self._timers = Timers(options, self._on_timer, self._watch, self._abandon)

    # --- the run ----------------------------------------------------------------------------

    async def run(self) -> Outcome:
        try:
            self.output.open(self.graph, self.endpoint)
        except OSError as e:
            where = e.filename or self.artifacts.directory
            raise SchedulerError(f"cannot write {where}: {e.strerror or e}") from None
        socket, gate = _listen(self.options)
        self.endpoint_url = socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._channel = Channel(socket, self._on_message, self._flush)
        self.artifacts.run_info.setdefault("benchmark_id", secrets.token_hex(6))
        self._timers.start()
        try:
            await self._shown.serve(self.status, self.stop)
            await self._members.wait(self.endpoint_url)
            if not self._cut_short:
                log.info("%d worker(s) registered; starting", len(self._members))
                self._state = RunState.RUNNING
                self.dispatcher.begin()
                self._flush()
                await self._done.wait()
            self._members.shut_down(self._end_reason())
        finally:
            self._timers.cancel()
            await self.output.close()
            self._channel.close()
            gate.close()
        outcome = self._write_summary()
        self._state = outcome.state
        await self._shown.close(len(self._members), self._stopped)
        return outcome

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
        self._members.enough.set()  # stop waiting for workers, if still waiting
        if self.endpoint_url is not None:
            self._flush()

    def worker_exited(self, worker: str, why: str) -> None:
        """The local driver saw a worker process end. It starts no replacement: before the run
        begins, the expected number can no longer be reached, so waiting would be in vain."""
        self._members.exited(worker, why, before_the_run=self._state is RunState.WAITING)

    def _end_reason(self) -> str:
        return self.dispatcher.failure or self.dispatcher.closed_reason or "the run is complete"

    # --- messages ---------------------------------------------------------------------------

    def _on_message(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            return
        worker = frames[0].decode("utf-8", "replace")
        message = receive(frames[1:])
        if message is None or not self._members.take(worker, message):
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

    def _record(self, flight: Flight, result: protocol.Result) -> None:
        issued = self._outbox.settle(flight.credit)
        if flight.phase is Phase.PROFILING:
            params = self._outbox.params(flight.run.tree.nodes[flight.node].payload)
            self.output.add(flight, result, issued, params)

    def _lose(self, worker: str, why: str) -> None:
        self._members.roster.remove(worker)
        lost = self.dispatcher.remove_worker(worker)
        log.warning(
            "lost worker %s (%s); %d request(s) in flight on it are lost", worker, why, len(lost)
        )
        now = time.time_ns()
        error = protocol.ErrorInfo(None, "WorkerLost", f"worker {worker} was lost: {why}")
        for flight in lost:  # the run lost them, not the endpoint: cut, nothing seen of them
            self._record(flight, self._outbox.unanswered(flight.credit, error, now))
        self._flush()

    # --- every heartbeat --------------------------------------------------------------------

    def _watch(self) -> None:
        """Every heartbeat: hear the workers out, report progress, write what is pending."""
        self._channel.drain()  # a busy loop may not have read heartbeats that did arrive
        self._members.watch()
        self._shown.refresh(len(self._members), running=self._members.enough.is_set())
        self.output.flush()
        self._check_writes()

    def _check_writes(self) -> None:
        """A record that cannot be written ends the run: measuring on would measure for nothing."""
        failure = self.output.write_error()
        if failure is not None and self.dispatcher.failure is None:
            self.dispatcher.fail(failure)
            self._flush()

    def status(self) -> StatusReport:
        """The run as the operator reads it from /status."""
        workers = Workers(desired=self.options.expected_workers, registered=len(self._members))
        return status_report(self._state, self.dispatcher, workers, self.output.summary)

    # --- output -----------------------------------------------------------------------------

    def _flush(self) -> None:
        """Send what the dispatcher decided, batched per worker, and re-arm its timer."""
        mail = self._outbox.collect(self.dispatcher, time.time_ns(), self._members.roster)
        for worker, frames in mail.items:
            self._channel.send([worker.encode(), *frames])
        self.output.retire(mail.retired)
        if mail.cancelled:
            self._timers.cancelled()
        self._timers.deadline.set(self.dispatcher.next_deadline())
        if self.dispatcher.finished:
            self._done.set()

    def _on_timer(self) -> None:
        self.dispatcher.tick()
        self._flush()

    def _abandon(self) -> None:
        """Cancelled requests whose results never came back: record them as cancelled here."""
        now = time.time_ns()
        message = f"no result within {self.options.cancel_timeout_s:.0f} s of cancelling"
        error = protocol.ErrorInfo(499, protocol.CANCELLED, message)
        for flight in self.dispatcher.in_flight():
            if self.dispatcher.complete(flight.credit, ok=False, cancelled=True) is None:
                continue
            result = self._outbox.unanswered(flight.credit, error, now, cancelled=True)
            self._record(flight, result)  # what it saw is lost with it
        self._flush()

    def _send(self, worker: str, message: protocol.Message) -> None:
        self._channel.send([worker.encode(), *protocol.encode(message)])

    def _write_summary(self) -> Outcome:
        outcome = conclude(
            self.dispatcher,
            self.output,
            self._interrupted,
            self._stop_requested,
            self.options.max_error_rate,
        )
        if self.options.summary_file is not None:
            write_final_report(
                self.options.summary_file,
                outcome,
                self.status(),
                self.options.benchmark,
                self.output.summary.duration_s,
                self.artifacts.directory,
            )
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
