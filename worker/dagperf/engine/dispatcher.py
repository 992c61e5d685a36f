"""The dispatcher: which request is sent where and when, as a state machine fed events.

Inputs are events (a result came back, a timer is due, a worker joined or was lost, the user
interrupted); outputs are `orders` the caller drains: flights to send, flights to cancel, and tree
runs that are over. The clock is injected, so every rule here is tested without sockets or sleeping.

It knows nodes and edges, not FORK or SPAWN: a node is ready when its dependencies have ended
(`deps` successfully, `join_deps` in any way), waits its delay, then goes out when the run is open
and `max_inflight` allows. A failed node skips every node that needs it. A gate (an orchestrator's
spine) sends nothing: once its delay is over it ends, releasing what waits for it, while the phase
is open; it counts as no request. A gate that ends its root frees the root's slot at once, so
fire-and-forget orchestrators start one after another as fast as the loop turns (a batch per
event, then a tick due at once: the loop is never held).

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

The parts it drives are pure too: `phase` (a phase's limits and counts), `pacing` (when roots
may start, and when the clock ends a phase), `outgoing` (what a phase sends: delays, the send
queue, the flights on the wire), `runs` (one tree run's node and session states, and what ending
a node releases) and `flights` (credits, routing pins and arming). The dispatcher holds the
sequence of phases and how one stops, and turns each event into calls on them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from dagperf.dataset.loader import DatasetError
from dagperf.engine.flights import Flight, Flights, armed_in, armed_under
from dagperf.engine.ids import new_uuid4
from dagperf.engine.orders import Orders
from dagperf.engine.outgoing import Outgoing
from dagperf.engine.pacing import Pacing
from dagperf.engine.phase import Phase, PhasePlan, Progress, Rotation, Stage, stages
from dagperf.engine.routing import RendezvousRouter
from dagperf.engine.runs import NodeState, TreeRun
from dagperf.engine.window import Until, Window
from dagperf.graph import RequestGraph
from dagperf.vocabulary.config import LoadConfig

_GATE_BATCHES = 64  # rounds of gates passed per event before the loop gets a turn


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
        self._pacing = Pacing(graph, load, until)
        self.router = RendezvousRouter()
        self._flights = Flights(self.router, new_id)
        self._run_ids = 0
        self._gates_left = False  # gates still passing when the last event's batch ran out
        self.failure: str | None = None  # why the run failed, when it did
        self.finished = False
        self.orders = Orders()  # what the caller is to carry out, drained after each event
        self._stages = stages(graph, load)
        self._start_phase(self._stages.popleft())
        self._begun = False

    # --- events -----------------------------------------------------------------------------

    def begin(self) -> None:
        """Start sending; call once workers are registered."""
        self._begun = True
        self._pacing.begin(self._plan, self._clock())
        self._advance()

    def add_worker(self, worker: str) -> None:
        self.router.add(worker)
        self._advance()

    def remove_worker(self, worker: str) -> list[Flight]:
        """A worker is gone: its requests in flight failed, and the history it held is lost,
        so every session routed to it ends. Returns the lost flights, for error records."""
        self.router.remove(worker)
        lost = [f for f in self._out.wire.values() if f.worker == worker]
        for flight in lost:
            self._out.land(flight, ok=False, cut=True)  # the run's loss, not the endpoint's error
            self._out.settle(flight, (), self._measuring)
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
        flight = self._out.wire.get(credit)
        if flight is None:
            return None
        self._out.land(flight, ok, cancelled)
        self._out.settle(flight, started if ok else (), self._measuring)
        self._end(flight.run, flight.node, NodeState.OK if ok else NodeState.FAILED, cancelled)
        self._advance()
        return flight

    def tick(self) -> None:
        """Fire every timer that is due."""
        now = self._clock()
        self._out.due(now, self._runs)
        due = self._pacing.due(now, len(self._out.wire), len(self._runs))
        if due.close_reason is not None:
            self._close(due.close_reason)
        if due.grace_over:
            self._out.cancel_all()
        self._advance()

    def interrupt(self, reason: str) -> None:
        """Stop sending and cancel everything in flight (Ctrl-C)."""
        if not self.finished:
            self._close(reason)
            self._out.cancel_all()
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
            self._pacing.grace(self._clock())
            self._advance()

    # --- outputs ----------------------------------------------------------------------------

    def drain_cancels(self) -> list[Flight]:
        """The cancels ordered (`orders`) whose requests are still in flight."""
        return self.orders.drain_cancels(self._out.wire)

    def next_deadline(self) -> float | None:
        if self._gates_left:
            return self._clock()
        delay, pace = self._out.next_due(), self._pacing.next_due()
        if delay is None or pace is None:
            return pace if delay is None else delay
        return min(delay, pace)

    @property
    def phase(self) -> Phase:
        return self._plan.phase

    @property
    def closed_reason(self) -> str | None:
        return self._closed

    @property
    def window(self) -> Window:
        """When the profiling measures, and until when."""
        return self._pacing.window

    def progress(self) -> Progress:
        return self._plan.progress(len(self._out.wire))

    def in_flight(self) -> list[Flight]:
        return list(self._out.wire.values())

    # --- phases -----------------------------------------------------------------------------

    def _start_phase(self, stage: Stage) -> None:
        trees = self._warmups if stage.dataset_warmup else self._trees
        open_ended = self.window.until is not None
        self._plan = PhasePlan(stage, self._graph, self._load, trees, open_ended)
        self.branch_stats = self._plan.branch_stats
        self._closed: str | None = None
        self._runs: dict[int, TreeRun] = {}
        self._out = Outgoing(
            self._plan, self._flights, self.orders, self._load.max_inflight, self._load.random_seed
        )

    def _advance(self) -> None:
        """Start what may start, send what may go, and notice when the phase is over."""
        if not self._begun or self.finished:
            return
        self._start_roots()
        # (most graphs have no gates: no loop to set up)
        self._gates_left = bool(self._out.passed) and self._pass_gates()
        if not self._closed:
            self._out.send(self._measuring)
            if self._plan.capped:
                self._close("request count reached")
        if self._out.wire or not self._phase_over():
            return
        self._finalize_phase()
        if self._stages and self.failure is None:
            self._start_phase(self._stages.popleft())
            self._pacing.begin(self._plan, self._clock())
            self._advance()
        else:
            self.finished = True

    def _phase_over(self) -> bool:
        return bool(self._closed) or (self._plan.roots_done and not self._runs)

    def _finalize_phase(self) -> None:
        """Whatever is still open was cut short by a stop: account for it."""
        for run in self._runs.values():
            run.truncate(self._plan.branch_stats)
            self.orders.retire(run)
        self._runs.clear()
        self._out.clear()
        self._pacing.clear()

    def _close(self, reason: str) -> None:
        if not self._closed:
            self._closed = reason
            self._pacing.close(self._clock())
            for flight in self._out.wire.values():  # nothing new goes out, armed or not
                self.orders.disarm(armed_under(flight))

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
        self._close(reason)
        self._out.cancel_all()

    # --- roots and endings ------------------------------------------------------------------

    def _start_roots(self) -> None:
        while not self._closed and self._pacing.admit():
            self._run_ids += 1
            cancel = bool(self._load.cancel_session_on_failure)
            plan = self._plan
            try:  # a tree is read from the dataset's file when first run
                run = TreeRun(self._run_ids, *plan.trees.take(), plan.phase, cancel)
                run.measured = self._measuring()
            except DatasetError as e:  # the file changed since it was loaded
                return self._fail(str(e))
            self._runs[run.id] = run
            for node in run.tree.entry:
                self._out.ready(run, node, self._clock())

    def _pass_gates(self) -> bool:
        """End the gates whose wait is over, while the phase is open, in up to `_GATE_BATCHES`
        rounds (a gate that ended its root frees a slot for the next); whether some are left."""
        for _ in range(_GATE_BATCHES):
            passed = self._out.passed
            if self._closed or not passed:
                return False
            self._out.passed = []
            for run, i in passed:
                if run.id in self._runs and run.nodes[i] == NodeState.READY:
                    self._flights.name(run, run.tree.nodes[i].session)
                    run.start(i, self._plan.branch_stats)
                    self._end(run, i, NodeState.OK)
            self._start_roots()
        return bool(self._out.passed)

    def _end(self, run: TreeRun, first: int, state: NodeState, cancelled: bool = False) -> None:
        ending = run.end(first, state, cancelled, self._plan.branch_stats)
        if ending.cancelled and NodeState.ARMED in run.nodes:  # with its other flights
            self.orders.disarm(armed_in(run, self._out.wire.values()))
        self._plan.skipped += ending.skipped
        self._plan.active_roots -= ending.root_ended
        if ending.failed_child is not None and self._load.fail_fast and self.failure is None:
            where = run.fail_child(*ending.failed_child, self.branch_stats)
            self._fail(f"--fail-fast: child {where} failed; cancelling the run")
        for j in ending.ready:
            self._out.ready(run, j, self._clock())
        if not run.open and run.id in self._runs:
            del self._runs[run.id]
            self.orders.retire(run)

    def _measuring(self) -> bool:
        """Whether what starts now is an observation of the profiling's window."""
        return self._plan.phase is Phase.PROFILING and self.window.open(self._clock())
