"""The dispatcher: which request is sent where and when, as a state machine fed events.

Inputs are events (a result came back, a timer is due, a worker joined or was lost, the user
interrupted); outputs are `orders` the caller drains: flights to send, flights to cancel, and tree
runs that are over. The clock is injected, so every rule here is tested without sockets or sleeping.

It knows nodes and edges, not FORK or SPAWN: a node is ready when its dependencies have ended
(`deps` successfully, `join_deps` in any way), waits its delay, then goes out when the run is open
and `max_inflight` allows. A failed node skips every node that needs it.

A node that needs nothing but one other node, continues that node's history on the same worker
and has no delay (a FORK child, a conversation's next turn) is armed: it goes out along with that
node, and the worker starts it the moment that node succeeds, with no round trip through here.
The result says which armed nodes the worker started; a stop disarms the rest. Arming is off
under a request cap (`request_count`, a warmup's count) and `max_inflight`, whose accounting
needs every request sent from here.

Sessions only matter for three things: the correlation id each request carries, routing (a
session uses the worker pinned to its route session, picked by rendezvous hash the first time),
and BranchStats.

Load (`phase`): `concurrency` root slots (a slot frees when the root's last turn ends; children
run in it; with `concurrency_ramp_up`, from one slot at the phase's start to all of them after
that many seconds, one more at each even step), Poisson root arrivals at `request_rate`, or each
root at its tree's `start_s` (`fixed_schedule`, relative to the first root of the phase); either
optionally capped by `concurrency`.

Stops: a literal cap on sent requests, a number of roots, a duration or a stop request (then a
grace period for what is in flight, then cancellation), an interrupt, or --fail-fast on a child
error; under objectives (`window.Until`), the duration is a floor and the phase goes on until
they are decided. What starts while the profiling's load is at its level is marked measured
(`window`). Warm-up phases run first, are waited for, and are not measured: the dataset's own (its
graph's warm-up trees, one at a time) and one of `warmup_request_count` requests (`phase.stages`).
A failure can also stop one tree only (--cancel-session-on-failure: `runs`); the armed nodes its
other flights carry are disarmed here.

The parts it drives are pure too: `phase` (a phase's limits, counts and root arrivals), `runs`
(one tree run's node and session states, and what ending a node releases), `flights` (credits,
routing pins and arming) and `timers`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection

from dagperf.config import LoadConfig
from dagperf.dataset.loader import DatasetError
from dagperf.engine.flights import Flight, Flights, armed_in, armed_under, settle_armed
from dagperf.engine.ids import new_uuid4
from dagperf.engine.orders import Orders
from dagperf.engine.phase import (
    Arrivals,
    Phase,
    PhasePlan,
    Progress,
    Rotation,
    Slots,
    Stage,
    stages,
)
from dagperf.engine.routing import RendezvousRouter
from dagperf.engine.runs import NodeState, TreeRun
from dagperf.engine.timers import Timers
from dagperf.engine.window import Until, Window
from dagperf.graph import RequestGraph

_DUE, _ARRIVAL, _DURATION, _GRACE, _RAMP = range(5)


class Dispatcher:
    def __init__(
        self,
        graph: RequestGraph,
        load: LoadConfig,
        clock: Callable[[], float],
        new_id: Callable[[], str] = new_uuid4,
        until: Until | None = None,
    ):
        """`until`: measure past the duration until the objectives are decided (`window`)."""
        if not graph.trees:
            raise ValueError("the graph has no trees to run")
        self._graph = graph
        self._load = load
        self._clock = clock
        self._trees, self._warmups = Rotation(graph.trees), Rotation(graph.warmup)
        self._arrivals = Arrivals(graph, load)
        concurrency = load.concurrency or (None if self._arrivals.on else 1)
        self._slots = Slots(concurrency, load.concurrency_ramp_up)
        self.router = RendezvousRouter()
        self._flights = Flights(self.router, new_id)
        self._run_ids = 0
        self.failure: str | None = None  # why the run failed, when it did
        self.finished = False
        self.orders = Orders()  # what the caller is to carry out, drained after each event
        self.window = Window(load, until)  # when the profiling measures, and until when
        self._stages = stages(graph, load)
        self._start_phase(self._stages.popleft())
        self._begun = False

    # --- events -----------------------------------------------------------------------------

    def begin(self) -> None:
        """Start sending; call once workers are registered."""
        self._begun = True
        self._arm_phase()
        self._advance()

    def add_worker(self, worker: str) -> None:
        self.router.add(worker)
        self._advance()

    def remove_worker(self, worker: str) -> list[Flight]:
        """A worker is gone: its requests in flight failed, and the history it held is lost,
        so every session routed to it ends. Returns the lost flights, for error records."""
        self.router.remove(worker)
        lost = [f for f in self._inflight.values() if f.worker == worker]
        for flight in lost:
            self._account(flight, ok=False, cut=True)  # the run's loss, not the endpoint's error
            self._settle_armed(flight, ())
            self._end(flight.run, flight.node, NodeState.FAILED)
        for run in list(self._runs.values()):
            for i in run.unpin(worker):
                if run.nodes[i] < NodeState.SENT:  # not skipped since, by an earlier one
                    self._end(run, i, NodeState.SKIPPED)
        if not self.router and self._begun and not self.finished:  # else others may register
            self._fail("every worker was lost")
        self._advance()
        return lost

    def complete(
        self, credit: int, ok: bool, cancelled: bool = False, started: Collection[int] = ()
    ) -> Flight | None:
        """A result came back (`cancelled`: cut short by the run itself, neither a success nor
        an error), naming the armed credits its worker started; returns its flight, or None for
        an unknown or stale credit."""
        flight = self._inflight.get(credit)
        if flight is None:
            return None
        self._account(flight, ok, cancelled)
        self._settle_armed(flight, started if ok else ())
        self._end(flight.run, flight.node, NodeState.OK if ok else NodeState.FAILED, cancelled)
        self._advance()
        return flight

    def tick(self) -> None:
        """Fire every timer that is due."""
        now = self._clock()
        for due, kind, run, node in self._timers.due(now):
            if kind == _DUE:
                assert run is not None  # a due timer belongs to a run; an arrival has none yet
                if run.id in self._runs and run.nodes[node] == NodeState.READY:
                    self._queue.append((run, node))
            elif kind == _ARRIVAL and not self._closed:
                if self._p.arrive():
                    self._at(self._arrivals.after(due), _ARRIVAL)
            elif kind == _DURATION:
                reason, again = self.window.due(now, len(self._inflight), len(self._runs))
                if again is not None and not self._closed:  # not decided yet: look again
                    self._at(again, _DURATION)
                else:
                    self._close(reason or "benchmark duration reached")
                    self._at(now + self._load.benchmark_grace_period, _GRACE)
            elif kind == _GRACE:
                self._cancel_everything()
            elif kind == _RAMP and (step := self._slots.grow(due)) is not None:
                self._at(step, _RAMP)
        self._advance()

    def interrupt(self, reason: str) -> None:
        """Stop sending and cancel everything in flight (Ctrl-C)."""
        if not self.finished:
            self._close(reason)
            self._cancel_everything()
            self._advance()

    def fail(self, reason: str) -> None:
        """The run cannot go on (say, its records cannot be written): fail it and cancel
        everything in flight."""
        if not self.finished:
            self._fail(reason)
            self._advance()

    def stop(self, reason: str) -> None:
        """Stop sending; what is in flight gets the grace period, as at the end of a duration,
        so a stop asked for (a suspended Benchmark) keeps every answer it can."""
        if not self.finished and not self._closed:
            self._close(reason)
            self._at(self._clock() + self._load.benchmark_grace_period, _GRACE)
            self._advance()

    # --- outputs ----------------------------------------------------------------------------

    def drain_cancels(self) -> list[Flight]:
        """The cancels ordered (`orders`) whose requests are still in flight."""
        return self.orders.drain_cancels(self._inflight)

    def next_deadline(self) -> float | None:
        return self._timers.next_due()

    @property
    def phase(self) -> Phase:
        return self._p.phase

    @property
    def closed_reason(self) -> str | None:
        return self._closed

    def progress(self) -> Progress:
        return self._p.progress(len(self._inflight))

    def in_flight(self) -> list[Flight]:
        return list(self._inflight.values())

    # --- phases -----------------------------------------------------------------------------

    def _start_phase(self, stage: Stage) -> None:
        trees = self._warmups if stage.dataset_warmup else self._trees
        self._p = PhasePlan(stage, self._graph, self._load, trees, self.window.until is not None)
        self.branch_stats = self._p.branch_stats
        self._closed: str | None = None
        self._cancelling = False
        self._runs: dict[int, TreeRun] = {}
        self._inflight: dict[int, Flight] = {}
        self._queue: deque[tuple[TreeRun, int]] = deque()
        self._timers: Timers[TreeRun] = Timers()

    def _arm_phase(self) -> None:
        now = self._clock()
        if (step := self._slots.begin(now)) is not None:
            self._at(step, _RAMP)
        if self._p.phase is Phase.PROFILING and (due := self.window.begin(now)) is not None:
            self._at(due, _DURATION)
        if self._arrivals.on and not self._p.one_at_a_time:
            self._arrivals.begin(now, self._p.trees.next)
            self._at(now, _ARRIVAL)

    def _advance(self) -> None:
        """Start what may start, send what may go, and notice when the phase is over."""
        if not self._begun or self.finished:
            return
        self._start_roots()
        self._pump()
        if self._inflight or not self._phase_over():
            return
        self._finalize_phase()
        if self._stages and self.failure is None:
            self._start_phase(self._stages.popleft())
            self._arm_phase()
            self._advance()
        else:
            self.finished = True

    def _phase_over(self) -> bool:
        return bool(self._closed) or (self._p.roots_done and not self._runs)

    def _finalize_phase(self) -> None:
        """Whatever is still open was cut short by a stop: account for it."""
        for run in self._runs.values():
            run.truncate(self._p.branch_stats)
            self.orders.retire(run)
        self._runs.clear()
        self._queue.clear()
        self._timers.clear()

    def _close(self, reason: str) -> None:
        if not self._closed:
            self._closed = reason
            if self._p.phase is Phase.PROFILING:
                self.window.close(self._clock())
            for flight in self._inflight.values():  # nothing new goes out, armed or not
                self.orders.disarm(armed_under(flight))

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
        self._close(reason)
        self._cancel_everything()

    def _cancel_everything(self) -> None:
        """Cancel what is in flight, and from now on what a worker starts before it hears."""
        self._cancelling = True
        self.orders.cancel(self._inflight.values())

    # --- roots and sending ------------------------------------------------------------------

    def _start_roots(self) -> None:
        while not self._closed and self._p.admit(self._slots.limit, self._arrivals.on):
            self._run_ids += 1
            cancel = bool(self._load.cancel_session_on_failure)
            try:  # a tree is read from the dataset's file when first run
                run = TreeRun(self._run_ids, *self._p.trees.take(), self._p.phase, cancel)
                run.measured = self._measuring()
            except DatasetError as e:  # the file changed since it was loaded
                return self._fail(str(e))
            self._runs[run.id] = run
            for node in run.tree.entry:
                self._make_ready(run, node)

    def _make_ready(self, run: TreeRun, node: int) -> None:
        run.nodes[node] = NodeState.READY
        delay = run.tree.nodes[node].delay_s
        if delay > 0:
            self._at(self._clock() + delay, _DUE, run, node)
        else:
            self._queue.append((run, node))

    def _pump(self) -> None:
        cap = self._load.max_inflight
        while self._queue and not self._closed:
            if cap is not None and len(self._inflight) >= cap:
                return
            run, node = self._queue.popleft()
            if run.nodes[node] == NodeState.READY:
                self._send(run, node)

    def _send(self, run: TreeRun, i: int) -> None:
        flight = self._flights.make(run, i, self._p.phase)
        self.orders.send(flight)
        self._launched(flight)
        if self._p.cap is None and self._load.max_inflight is None and not self._closed:
            flight.armed = self._flights.arm(run, i, self._p.phase)

    def _launched(self, flight: Flight) -> None:
        """The request is on the wire (sent from here, or started by its worker)."""
        flight.run.launch(flight.node, flight.worker, self._p.branch_stats)
        flight.request_num = self._p.sent
        flight.measured = self._measuring()
        self._inflight[flight.credit] = flight
        self._p.sent += 1
        if self._p.capped:
            self._close("request count reached")

    def _settle_armed(self, flight: Flight, started: Collection[int]) -> None:
        for armed in settle_armed(flight, started):
            self._launched(armed)
            if self._cancelling:
                self.orders.cancel((armed,))

    # --- endings ----------------------------------------------------------------------------

    def _account(self, flight: Flight, ok: bool, cut: bool = False) -> None:
        del self._inflight[flight.credit]
        self._p.completed += 1
        self._p.errors += not ok and not cut
        self._p.cut += cut

    def _end(self, run: TreeRun, first: int, state: NodeState, cancelled: bool = False) -> None:
        ending = run.end(first, state, cancelled, self._p.branch_stats)
        if ending.cancelled and NodeState.ARMED in run.nodes:  # with its other flights
            self.orders.disarm(armed_in(run, self._inflight.values()))
        self._p.skipped += ending.skipped
        self._p.active_roots -= ending.root_ended
        if ending.failed_child is not None and self._load.fail_fast and self.failure is None:
            where = run.fail_child(*ending.failed_child, self.branch_stats)
            self._fail(f"--fail-fast: child {where} failed; cancelling the run")
        for j in ending.ready:
            self._make_ready(run, j)
        if not run.open and run.id in self._runs:
            del self._runs[run.id]
            self.orders.retire(run)

    def _measuring(self) -> bool:
        """Whether what starts now is an observation of the profiling's window."""
        return self._p.phase is Phase.PROFILING and self.window.open(self._clock())

    def _at(self, due: float, kind: int, run: TreeRun | None = None, node: int = -1) -> None:
        self._timers.at(due, kind, run, node)
