"""The scheduler role: the imperative shell around the dispatcher.

It binds a ROUTER socket, registers workers (Hello / Welcome), watches their heartbeats, feeds
the dispatcher every result and timer, and turns the dispatcher's decisions into batched Credits,
Cancels and Forgets. Every profiling result becomes a line of `profile_export.jsonl` as it
arrives and a sample of the phase summary; the summary files are written when the run ends.

A worker that stops heartbeating for `worker_timeout_s` (or whose process the local driver sees
exit) is lost: its requests in flight become error records and the sessions it held end. After
a cancellation, results get `cancel_timeout_s` to come back before the requests still missing
are recorded as cancelled by the scheduler itself, so a hung worker cannot hold a run open.

Only workers holding the benchmark's worker key get through the CURVE handshake (`dagperf.keys`);
a worker configured for another server than this run's is refused at Hello.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from dagperf import contract
from dagperf.config import EndpointConfig, LoadConfig
from dagperf.contract import FinalReport, RunState, StatusReport, Workers
from dagperf.endpoints import request_params
from dagperf.engine import Dispatcher, Flight, Phase, Progress, armed_under
from dagperf.exports.run import Artifacts, RunOutput
from dagperf.graph import Payload, RequestGraph
from dagperf.keys import Gate, SchedulerKeys, secure_server
from dagperf.metrics.live import LiveMetrics
from dagperf.status import StatusServer, metrics_summary
from dagperf.transport import protocol
from dagperf.transport.channel import Channel, receive
from dagperf.verdict import rejection

log = logging.getLogger(__name__)

__all__ = ["Artifacts", "Outcome", "Scheduler", "SchedulerError", "SchedulerOptions"]


class SchedulerError(Exception):
    """The run could not start or could not go on; the message says why."""


@dataclass
class Outcome:
    """How a run ended and what it measured."""

    document: dict[str, Any]
    failure: str | None
    stop_reason: str | None
    interrupted: bool
    stopped: bool = False  # interrupted on request (POST /stop), which is not a failure
    rejected: str | None = None  # why the endpoint failed the run (see dagperf.verdict)

    @property
    def state(self) -> RunState:
        if self.failure is not None or self.rejected is not None:
            return RunState.FAILED
        if self.stopped:
            return RunState.STOPPED
        return RunState.CANCELLED if self.interrupted else RunState.SUCCEEDED


@dataclass
class _Peer:
    incarnation: str
    last_seen: float


@dataclass(frozen=True)
class SchedulerOptions:
    """How a scheduler listens, waits for workers, reports and judges its run."""

    keys: SchedulerKeys
    bind: str  # the ZeroMQ address workers connect to
    expected_workers: int
    heartbeat_s: float = 1.0
    worker_timeout_s: float = 10.0  # a worker silent this long is lost
    registration_timeout_s: float = 60.0
    cancel_timeout_s: float = 10.0  # for results of cancelled requests to come back
    goodput: dict[str, float] | None = None
    tokenizer_json: str | None = None  # sent to every worker
    benchmark: str = "dagperf"  # the name in metrics and reports
    metrics_port: int | None = None  # /metrics and /status; None: not served
    metrics_host: str = "0.0.0.0"
    metrics_linger_s: float = 0.0  # keep serving this long after the end, for a last scrape
    summary_file: Path | None = None  # the final report, for the operator
    max_error_rate: float = 1.0


class Scheduler:
    def __init__(
        self,
        graph: RequestGraph,
        endpoint: EndpointConfig,
        load: LoadConfig,
        artifacts: Artifacts,
        options: SchedulerOptions,
        on_progress: Callable[[Progress], None] | None = None,
    ):
        self.graph = graph
        self.endpoint = endpoint
        self.artifacts = artifacts
        self.options = options
        self.on_progress = on_progress
        self.dispatcher = Dispatcher(graph, load, time.monotonic)
        self.live = LiveMetrics(options.benchmark) if options.metrics_port is not None else None
        self.output = RunOutput(artifacts, options.goodput, self.live)
        self.status_server: StatusServer | None = None
        self._state = RunState.WAITING
        self.endpoint_url: str | None = None  # the address really bound, once listening
        self._peers: dict[str, _Peer] = {}
        self._params: dict[int, dict[str, Any]] = {}
        self._issued: dict[int, int] = {}
        self._settings = protocol.WorkerSettings(
            endpoint.endpoint_type,
            endpoint.streaming,
            endpoint.request_timeout_seconds,
            endpoint.session_affinity_header,
            options.tokenizer_json,
        )
        self._interrupted = False
        self._stop_requested = False
        self._registration_failure: str | None = None
        self._done = asyncio.Event()
        self._enough = asyncio.Event()
        self._stopped = asyncio.Event()  # a stop request: also ends the metrics linger
        self._timer: asyncio.Handle | None = None
        self._timer_due: float | None = None
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
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        gate = Gate(context, self.options.keys)
        socket = context.socket(zmq.ROUTER)
        secure_server(socket, self.options.keys)
        options = {zmq.ROUTER_HANDOVER: 1, zmq.LINGER: 0, zmq.SNDHWM: 0, zmq.RCVHWM: 0}
        options[zmq.MAXMSGSIZE] = protocol.MAX_TO_SCHEDULER
        for option, value in options.items():
            socket.setsockopt(option, value)
        try:
            socket.bind(self.options.bind)
        except zmq.ZMQError as e:
            socket.close(linger=0)
            gate.close()
            raise SchedulerError(f"cannot listen on {self.options.bind}: {e}") from None
        self.endpoint_url = socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._channel = Channel(socket, self._on_message, self._flush)
        self.artifacts.run_info.setdefault("benchmark_id", secrets.token_hex(6))
        self._watchdog = loop.call_later(self.options.heartbeat_s, self._watch)
        try:
            if self.options.metrics_port is not None:
                self.status_server = StatusServer(
                    self.status,
                    self.live.registry if self.live else None,
                    self.stop,
                    self.options.keys.token_matches,
                )
                await self.status_server.start(self.options.metrics_host, self.options.metrics_port)
                log.info("serving /metrics and /status on port %d", self.status_server.port)
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
            for handle in (self._watchdog, self._timer, self._cancel_deadline):
                if handle is not None:
                    handle.cancel()
            self.output.close()
            self._channel.close()
            gate.close()
        outcome = self._write_summary()
        self._state = outcome.state
        if self.status_server is not None:
            if self.live is not None:
                self._update_live()
            with contextlib.suppress(TimeoutError):  # let Prometheus take a last scrape
                await asyncio.wait_for(self._stopped.wait(), self.options.metrics_linger_s)
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
            self._peers.pop(worker, None)  # it was told to shut down: nothing is lost
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
            peer = self._peers.get(message.worker_id)
            if peer is not None and peer.incarnation == message.incarnation:
                peer.last_seen = time.monotonic()
            return
        peer = self._peers.get(worker)
        if peer is None:
            log.debug("ignored a %s from unregistered worker %s", type(message).__name__, worker)
            return
        peer.last_seen = time.monotonic()
        if isinstance(message, protocol.Results):
            # What these results release goes out first; the bookkeeping can wait.
            done = [(self._complete(result), result) for result in message.items]
            self._flush()
            for flight, result in done:
                if flight is not None:
                    self._record(flight, result)
            self._check_writes()

    def _hello(self, worker: str, hello: protocol.Hello) -> None:
        if hello.url != self.endpoint.url:
            log.error(
                "refused worker %s: it sends to %s, this run measures %s",
                worker, hello.url[:200], self.endpoint.url,
            )  # fmt: skip
            reason = f"this worker sends to {hello.url[:200]}, the run measures {self.endpoint.url}"
            self._send(worker, protocol.Shutdown(reason))
            return
        peer = self._peers.get(worker)
        if peer is not None and peer.incarnation != hello.incarnation:
            self._lose(worker, "it restarted")  # same name, new process: its histories are gone
            peer = None
        if peer is None:
            if self.dispatcher.finished:
                self._send(worker, protocol.Shutdown(self._end_reason()))
                return
            self._peers[worker] = _Peer(hello.incarnation, time.monotonic())
            self.dispatcher.add_worker(worker)
            log.info("worker %s registered (pid %d)", worker, hello.pid)
        else:
            peer.last_seen = time.monotonic()
        self._send(worker, protocol.Welcome(self._settings, self.options.heartbeat_s))
        if len(self._peers) >= self.options.expected_workers:
            self._enough.set()

    def _complete(self, result: protocol.Result) -> Flight | None:
        ok = result.error is None
        cancelled = result.cancelled_ns is not None
        return self.dispatcher.complete(result.credit, ok, cancelled, result.started)

    def _record(self, flight: Flight, result: protocol.Result) -> None:
        issued = self._issued.pop(flight.credit, 0)
        if flight.phase is Phase.PROFILING:
            params = self._params_of(flight.run.tree.nodes[flight.node].payload)
            self.output.add(flight, result, issued, params)

    # --- workers ----------------------------------------------------------------------------

    def _watch(self) -> None:
        """Every heartbeat: tell workers we live, and lose the ones that went silent."""
        self._channel.drain()  # a busy loop may not have read heartbeats that did arrive
        now = time.monotonic()
        for worker, peer in list(self._peers.items()):
            if now - peer.last_seen > self.options.worker_timeout_s:
                self._lose(worker, f"no heartbeat for {now - peer.last_seen:.1f} s")
            else:
                self._send(worker, protocol.Heartbeat())
        if self.on_progress is not None and self._enough.is_set():
            self.on_progress(self.dispatcher.progress())
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
        d = self.dispatcher
        if d.phase is Phase.PROFILING:
            self.live.update(d.progress(), len(self._peers), d.branch_stats)

    def status(self) -> StatusReport:
        """The run as the operator reads it from /status."""
        d = self.dispatcher
        p = d.progress()
        return StatusReport(
            state=self._state,
            phase=p.phase.label,
            workers=Workers(desired=self.options.expected_workers, registered=len(self._peers)),
            progress=contract.Progress(
                requests_sent=p.sent,
                requests_completed=p.completed,
                requests_total=p.expected,
                errors=p.errors,
                in_flight=p.in_flight,
            ),
            branch_stats=d.branch_stats.as_dict(),
            summary=metrics_summary(self.output.summary),
            failure=d.failure,
        )

    def _lose(self, worker: str, why: str) -> None:
        del self._peers[worker]
        lost = self.dispatcher.remove_worker(worker)
        log.warning(
            "lost worker %s (%s); %d request(s) in flight on it failed", worker, why, len(lost)
        )
        now = time.time_ns()
        for flight in lost:
            issued = self._issued.get(flight.credit, now)
            error = protocol.ErrorInfo(None, "WorkerLost", f"worker {worker} was lost: {why}")
            self._record(flight, protocol.Result(flight.credit, issued, None, now, {}, error))
        self._flush()

    # --- output -----------------------------------------------------------------------------

    def _flush(self) -> None:
        """Send what the dispatcher decided, batched per worker, and re-arm its timer."""
        d = self.dispatcher
        batches: dict[str, list[protocol.Credit]] = {}
        now = time.time_ns()
        for flight in d.drain_sends():
            self._issued[flight.credit] = now
            for armed in armed_under(flight):  # issued now, started by the worker later
                self._issued[armed.credit] = now
            batches.setdefault(flight.worker, []).append(self._credit(flight))
        for worker, credits in batches.items():
            identity = worker.encode()
            for frames in protocol.encode_batches(
                protocol.Credits, credits, protocol.MAX_TO_WORKER
            ):
                self._channel.send([identity, *frames])
        cancels: dict[str, list[int]] = {}
        for flight in d.drain_cancels():
            cancels.setdefault(flight.worker, []).append(flight.credit)
        for worker, ids in cancels.items():
            self._send(worker, protocol.Cancel(ids))
        disarms: dict[str, list[int]] = {}
        for flight in d.drain_disarms():
            disarms.setdefault(flight.worker, []).append(flight.credit)
        for worker, ids in disarms.items():
            self._send(worker, protocol.Disarm(ids))
        if cancels and self._cancel_deadline is None:
            loop = asyncio.get_running_loop()
            self._cancel_deadline = loop.call_later(self.options.cancel_timeout_s, self._abandon)
        forgets: dict[str, list[int]] = {}
        for run in d.drain_retired():
            for worker in run.workers:
                forgets.setdefault(worker, []).append(run.id)
        for worker, runs in forgets.items():
            if worker in self._peers:
                self._send(worker, protocol.Forget(runs))
        self._arm_timer()
        if d.finished:
            self._done.set()

    def _credit(self, flight: Flight) -> protocol.Credit:
        """The credit for a flight, carrying its armed flights flat (see `protocol.Credit`)."""
        after = {id(a): f.credit for f in (flight, *armed_under(flight)) for a in f.armed}
        then = tuple(self._one_credit(a, after[id(a)]) for a in armed_under(flight))
        return self._one_credit(flight, -1, then)

    def _one_credit(
        self, flight: Flight, after: int, then: tuple[protocol.Credit, ...] = ()
    ) -> protocol.Credit:
        run = flight.run
        node = run.tree.nodes[flight.node]
        session = run.tree.sessions[node.session]
        params = self._params_of(node.payload)
        correlation, route = run.correlation[node.session], run.correlation[session.route]
        assert correlation is not None and route is not None  # named when first dispatched
        return protocol.Credit(
            flight.credit,
            run.id,
            flight.node,
            -1 if node.history is None else node.history,
            run.template.keep[flight.node],
            node.payload.messages,
            params,
            flight.request_id,
            correlation,
            route,
            then,
            node.keep_reply,
            after,
        )

    def _params_of(self, payload: Payload) -> dict[str, Any]:
        params = self._params.get(id(payload))
        if params is None:
            params = self._params[id(payload)] = request_params(payload, self.endpoint)
        return params

    def _arm_timer(self) -> None:
        deadline = self.dispatcher.next_deadline()
        if self._timer is not None:
            if deadline == self._timer_due:
                return
            self._timer.cancel()
            self._timer = None
        if deadline is not None:
            # (uvloop's handle for a time already past cannot say when it was due)
            self._timer_due = deadline
            self._timer = asyncio.get_running_loop().call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.dispatcher.tick()
        self._flush()

    def _abandon(self) -> None:
        """Cancelled requests whose results never came back: record them as cancelled here."""
        self._cancel_deadline = None
        now = time.time_ns()
        for flight in self.dispatcher.in_flight():
            if self.dispatcher.complete(flight.credit, ok=False, cancelled=True) is None:
                continue
            issued = self._issued.get(flight.credit, now)
            message = f"no result within {self.options.cancel_timeout_s:.0f} s of cancelling"
            error = protocol.ErrorInfo(499, protocol.CANCELLED, message)
            self._record(flight, protocol.Result(flight.credit, issued, None, now, {}, error, now))
        self._flush()

    def _send(self, worker: str, message: protocol.Message) -> None:
        self._channel.send([worker.encode(), *protocol.encode(message)])

    def _write_summary(self) -> Outcome:
        d = self.dispatcher
        document, write_failure = self.output.write_summary(
            d.branch_stats.as_dict(),
            complete=d.finished and d.failure is None and not self._cut_short,
            cancelled=self._cut_short or d.failure is not None,
        )
        failure = d.failure or write_failure
        outcome = Outcome(
            document, failure, d.closed_reason, self._interrupted, self._stop_requested
        )
        if failure is None and not self._cut_short:
            outcome.rejected = rejection(
                self.output.summary.ok, self.output.summary.errors, self.options.max_error_rate
            )
        if self.options.summary_file is not None:
            status = self.status()
            final = FinalReport(
                outcome=outcome.state,
                reason=failure or outcome.rejected or d.closed_reason,
                benchmark=self.options.benchmark,
                progress=status.progress,
                duration_seconds=round(self.output.summary.duration_s, 3),
                summary=status.summary,
                branch_stats=status.branch_stats,
                results_path=str(self.artifacts.directory),
            )
            try:
                self.options.summary_file.write_bytes(final.compact())
            except OSError as e:
                log.error("cannot write the summary file %s: %s", self.options.summary_file, e)
        return outcome
