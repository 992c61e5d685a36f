"""The dispatcher: which request is sent where and when, as a state machine fed events.

Inputs are events (a result came back, a timer is due, a worker joined or was lost, the user
interrupted); outputs are drained by the caller: flights to send, flights to cancel, and tree runs
that are over. The clock is injected, so every rule here is tested without sockets or sleeping.

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

Load: `concurrency` root slots (a slot frees when the root's last turn ends; children run in it),
Poisson root arrivals at `request_rate`, or each root at its tree's `start_s` (`fixed_schedule`,
relative to the first root of the phase); either optionally capped by `concurrency`.

Stops: a literal cap on sent requests, a number of roots, a duration or a stop request (then a
grace period for what is in flight, then cancellation), an interrupt, or --fail-fast on a child
error. An optional warmup phase runs first, is waited for, and is not measured.
"""

from __future__ import annotations

import heapq
import random
import uuid
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from enum import IntEnum

from dagperf.config import LoadConfig
from dagperf.engine.branch_stats import BranchStats
from dagperf.engine.routing import RendezvousRouter
from dagperf.engine.runs import NodeState, SessionState, TreeRun, TreeTemplate
from dagperf.graph import RequestGraph, SessionKind

_DUE, _ARRIVAL, _DURATION, _GRACE = range(4)


class Phase(IntEnum):
    WARMUP = 0
    PROFILING = 1

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(slots=True)
class Flight:
    """A request on the wire: what was sent, where, and as which request of its phase."""

    credit: int
    run: TreeRun
    node: int
    worker: str
    phase: Phase
    request_num: int  # sequential within the phase (AIPerf's session_num); -1 until sent
    request_id: str
    armed: list[Flight] = field(default_factory=list)  # started by its worker when this succeeds


@dataclass(frozen=True, slots=True)
class Progress:
    phase: Phase
    sent: int
    completed: int
    errors: int
    in_flight: int
    expected: int | None  # requests this phase will send, when known
    roots_started: int


class Dispatcher:
    def __init__(
        self,
        graph: RequestGraph,
        load: LoadConfig,
        clock: Callable[[], float],
        new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    ):
        if not graph.trees:
            raise ValueError("the graph has no trees to run")
        self._graph = graph
        self._load = load
        self._clock = clock
        self._new_id = new_id
        self._rng = random.Random(load.random_seed)
        self._templates = [TreeTemplate(tree) for tree in graph.trees]
        if load.fixed_schedule and any(tree.start_s is None for tree in graph.trees):
            raise ValueError("a fixed schedule needs a start time on every tree")
        self._arrive = bool(load.request_rate or load.fixed_schedule)  # roots wait for arrivals
        self._concurrency = load.concurrency or (None if self._arrive else 1)
        self.router = RendezvousRouter()
        self._credits = 0
        self._run_ids = 0
        self._next_tree = 0
        self.failure: str | None = None  # why the run failed, when it did
        self.finished = False
        self._sends: list[Flight] = []
        self._cancels: list[Flight] = []
        self._disarms: list[Flight] = []
        self._retired: list[TreeRun] = []
        self._start_phase(Phase.WARMUP if load.warmup_request_count else Phase.PROFILING)
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
            self._account(flight, ok=False)
            self._settle_armed(flight, ())
            self._end(flight.run, flight.node, NodeState.FAILED)
        for run in list(self._runs.values()):
            routes = {route for route, held_by in run.pins.items() if held_by == worker}
            if not routes:
                continue
            for route in routes:
                del run.pins[route]
            sessions = run.tree.sessions
            for i, node in enumerate(run.tree.nodes):
                if sessions[node.session].route in routes and run.nodes[i] < NodeState.SENT:
                    self._end(run, i, NodeState.SKIPPED)
        if not self.router and self._begun and not self.finished:  # else others may register
            self._fail("every worker was lost")
        self._advance()
        return lost

    def complete(
        self, credit: int, ok: bool, cancelled: bool = False, started: Collection[int] = ()
    ) -> Flight | None:
        """A result came back, naming the armed credits its worker started; returns its flight,
        or None for an unknown or stale credit."""
        flight = self._inflight.get(credit)
        if flight is None:
            return None
        self._account(flight, ok)
        self._settle_armed(flight, started if ok else ())
        self._end(flight.run, flight.node, NodeState.OK if ok else NodeState.FAILED, cancelled)
        self._advance()
        return flight

    def tick(self) -> None:
        """Fire every timer that is due."""
        now = self._clock()
        while self._timers and self._timers[0][0] <= now:
            due, _, kind, run, node = heapq.heappop(self._timers)
            if kind == _DUE:
                assert run is not None  # a due timer belongs to a run; an arrival has none yet
                if run.id in self._runs and run.nodes[node] == NodeState.READY:
                    self._queue.append((run, node))
            elif kind == _ARRIVAL and not self._closed:
                self._arrivals += 1
                limit = self._roots_limit
                if limit is None or self._roots_started + self._arrivals < limit:
                    self._at(self._next_arrival(due), _ARRIVAL)
            elif kind == _DURATION:
                self._close("benchmark duration reached")
                self._at(now + self._load.benchmark_grace_period, _GRACE)
            elif kind == _GRACE:
                self._cancel_everything()
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

    def drain_sends(self) -> list[Flight]:
        out, self._sends = self._sends, []
        return out

    def drain_cancels(self) -> list[Flight]:
        out = [f for f in self._cancels if f.credit in self._inflight]
        self._cancels = []
        return out

    def drain_disarms(self) -> list[Flight]:
        """Armed flights their workers must not start: the run stopped."""
        out = [f for f in self._disarms if f.run.nodes[f.node] == NodeState.ARMED]
        self._disarms = []
        return out

    def drain_retired(self) -> list[TreeRun]:
        out, self._retired = self._retired, []
        return out

    def next_deadline(self) -> float | None:
        return self._timers[0][0] if self._timers else None

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def closed_reason(self) -> str | None:
        return self._closed

    def progress(self) -> Progress:
        return Progress(
            self._phase,
            self._sent,
            self._completed,
            self._errors,
            len(self._inflight),
            self._expected(),
            self._roots_started,
        )

    def in_flight(self) -> list[Flight]:
        return list(self._inflight.values())

    # --- phases -----------------------------------------------------------------------------

    def _start_phase(self, phase: Phase) -> None:
        load = self._load
        self._phase = phase
        self.branch_stats = BranchStats()
        self._closed: str | None = None
        self._cancelling = False
        self._sent = self._completed = self._errors = 0
        self._roots_started = self._active_roots = self._arrivals = 0
        self._runs: dict[int, TreeRun] = {}
        self._inflight: dict[int, Flight] = {}
        self._queue: deque[tuple[TreeRun, int]] = deque()
        self._timers: list[tuple[float, int, int, TreeRun | None, int]] = []
        self._timer_seq = 0
        if phase is Phase.WARMUP:
            self._cap: int | None = load.warmup_request_count
            self._roots_limit: int | None = None
        else:
            self._cap = load.request_count
            self._roots_limit = load.num_conversations
            if self._roots_limit is None and self._cap is None and not load.benchmark_duration:
                self._roots_limit = self._graph.root_count  # each root once
        self._planned = self._planned_requests()
        self._skipped = 0  # requests never sent: what they depended on failed

    def _arm_phase(self) -> None:
        now = self._clock()
        if self._phase is Phase.PROFILING and self._load.benchmark_duration:
            self._at(now + self._load.benchmark_duration, _DURATION)
        if self._arrive:
            self._scheduled = 0
            self._schedule_first = self._next_tree
            self._schedule_t0 = now
            self._at(now, _ARRIVAL)

    def _next_arrival(self, due: float) -> float:
        if not self._load.fixed_schedule:
            return due + self._rng.expovariate(self._load.request_rate)  # type: ignore[arg-type]
        self._scheduled += 1
        trees, first = self._graph.trees, self._schedule_first
        nxt = trees[(first + self._scheduled) % len(trees)]
        # Past the last tree the schedule starts over: never earlier than now.
        return max(due, self._schedule_t0 + nxt.start_s - trees[first].start_s)  # type: ignore[operator]

    def _planned_requests(self) -> int | None:
        """The requests of the roots this phase will start, when it starts a known number."""
        if self._roots_limit is None:
            return None
        sizes = [len(t.nodes) for t in self._graph.trees]
        full, rest = divmod(self._roots_limit, len(sizes))
        start = self._next_tree
        return full * sum(sizes) + sum(sizes[(start + k) % len(sizes)] for k in range(rest))

    def _expected(self) -> int | None:
        """Requests this phase will send: a skipped request lowers a count of roots' requests
        (so progress still ends at 100%), not a cap on the wire (other requests fill it)."""
        if self._planned is None:
            return self._cap
        left = self._planned - self._skipped
        return left if self._cap is None else min(left, self._cap)

    def _advance(self) -> None:
        """Start what may start, send what may go, and notice when the phase is over."""
        if not self._begun or self.finished:
            return
        self._start_roots()
        self._pump()
        if self._inflight or not self._phase_over():
            return
        self._finalize_phase()
        if self._phase is Phase.WARMUP and self.failure is None:
            self._start_phase(Phase.PROFILING)
            self._arm_phase()
            self._advance()
        else:
            self.finished = True

    def _phase_over(self) -> bool:
        if self._closed:
            return True
        roots_done = self._roots_limit is not None and self._roots_started >= self._roots_limit
        return roots_done and not self._runs

    def _finalize_phase(self) -> None:
        """Whatever is still open was cut short by a stop: account for it."""
        stats = self.branch_stats
        for run in self._runs.values():
            for s, state in enumerate(run.sessions):
                if state == SessionState.RUNNING:
                    run.sessions[s] = SessionState.TRUNCATED
                    stats.children_truncated += run.tree.sessions[s].kind is not SessionKind.ROOT
            stats.joins_suppressed += len(run.suspended)
            run.suspended.clear()
            self._retired.append(run)
        self._runs.clear()
        self._queue.clear()
        self._timers.clear()

    def _close(self, reason: str) -> None:
        if not self._closed:
            self._closed = reason
            for flight in self._inflight.values():  # nothing new goes out, armed or not
                self._disarms.extend(armed_under(flight))

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
        self._close(reason)
        self._cancel_everything()

    def _cancel_everything(self) -> None:
        """Cancel what is in flight, and from now on what a worker starts before it hears."""
        self._cancelling = True
        self._cancels.extend(self._inflight.values())

    # --- roots and sending ------------------------------------------------------------------

    def _start_roots(self) -> None:
        while not self._closed:
            if self._roots_limit is not None and self._roots_started >= self._roots_limit:
                return
            if self._concurrency is not None and self._active_roots >= self._concurrency:
                return
            if self._arrive:
                if not self._arrivals:
                    return
                self._arrivals -= 1
            index = self._next_tree
            self._next_tree = (index + 1) % len(self._templates)
            self._run_ids += 1
            run = TreeRun(self._run_ids, index, self._templates[index], self._phase)
            self._runs[run.id] = run
            self._roots_started += 1
            self._active_roots += 1
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
        flight = self._flight(run, i)
        self._sends.append(flight)
        self._launched(flight)
        if self._cap is None and self._load.max_inflight is None and not self._closed:
            flight.armed = self._arm(run, i)

    def _flight(self, run: TreeRun, i: int) -> Flight:
        """A credit for node i, on the worker its route is pinned to (pinned now if need be)."""
        tree = run.tree
        s = tree.nodes[i].session
        if run.correlation[s] is None:
            run.correlation[s] = self._new_id()
        route = tree.sessions[s].route
        worker = run.pins.get(route)
        if worker is None:
            key = run.correlation[route]
            assert key is not None  # the route's own session went first and was named
            worker = run.pins[route] = self.router.pick(key)
        self._credits += 1
        request_id = run.request_ids[i] = self._new_id()
        return Flight(self._credits, run, i, worker, self._phase, -1, request_id)

    def _launched(self, flight: Flight) -> None:
        """The request is on the wire (sent from here, or started by its worker)."""
        run, i = flight.run, flight.node
        s = run.tree.nodes[i].session
        if run.sessions[s] == SessionState.IDLE:
            run.sessions[s] = SessionState.RUNNING
            self.branch_stats.children_spawned += run.tree.sessions[s].kind is not SessionKind.ROOT
        if i in run.suspended:
            run.suspended.discard(i)
            self.branch_stats.parents_resumed += 1
        run.workers.add(flight.worker)
        run.nodes[i] = NodeState.SENT
        flight.request_num = self._sent
        self._inflight[flight.credit] = flight
        self._sent += 1
        if self._cap is not None and self._sent >= self._cap:
            self._close("request count reached")

    def _arm(self, run: TreeRun, i: int) -> list[Flight]:
        """Credits for the nodes node i alone releases and whose history it holds on its
        worker, each with its own armed nodes: a conversation's turns all go out at once.
        Depth first, in dependents' order, without recursion: a chain can be any length."""
        tree = run.tree
        route = tree.sessions[tree.nodes[i].session].route
        armed: list[Flight] = []
        stack = [(i, iter(tree.nodes[i].dependents), armed)]
        while stack:
            parent, dependents, into = stack[-1]
            j = next(dependents, None)
            if j is None:
                stack.pop()
                continue
            node = tree.nodes[j]
            if (
                node.deps == (parent,)
                and not node.join_deps
                and node.history == parent
                and node.delay_s == 0
                and tree.sessions[node.session].route == route
            ):
                run.nodes[j] = NodeState.ARMED
                flight = self._flight(run, j)
                into.append(flight)
                stack.append((j, iter(node.dependents), flight.armed))
        return armed

    def _settle_armed(self, flight: Flight, started: Collection[int]) -> None:
        """The armed nodes its worker started are in flight (with their own armed nodes still
        armed); the others wait as if never armed: the dependency's ending releases or skips
        them."""
        for armed in flight.armed:
            if armed.credit in started:
                self._launched(armed)
                if self._cancelling:
                    self._cancels.append(armed)
            else:
                self._disarm(armed)
        flight.armed = []

    def _disarm(self, flight: Flight) -> None:
        for f in (flight, *armed_under(flight)):
            f.run.nodes[f.node] = NodeState.PENDING
            f.armed = []

    # --- endings ----------------------------------------------------------------------------

    def _account(self, flight: Flight, ok: bool) -> None:
        del self._inflight[flight.credit]
        self._completed += 1
        self._errors += not ok

    def _end(self, run: TreeRun, first: int, state: NodeState, cancelled: bool = False) -> None:
        """End a node, release or skip what depends on it, and settle its session."""
        tree = run.tree
        stack = [(first, state)]
        while stack:
            i, state = stack.pop()
            run.nodes[i] = state
            run.open -= 1
            self._skipped += state == NodeState.SKIPPED
            run.suspended.discard(i)
            node = tree.nodes[i]
            run.session_open[node.session] -= 1
            ended = not run.session_open[node.session]
            self._settle_session(run, node.session, i, state, cancelled, ended)
            if node.session == 0 and ended:
                self._active_roots -= 1  # the root's slot frees with its last node
            for j in node.dependents:
                if run.nodes[j] != NodeState.PENDING:
                    continue
                waiter = tree.nodes[j]
                if state != NodeState.OK and i not in waiter.join_deps:
                    stack.append((j, NodeState.SKIPPED))
                    continue
                run.waiting[j] -= 1
                if not run.waiting[j]:
                    self._make_ready(run, j)
                elif state == NodeState.OK and waiter.session == node.session and waiter.join_deps:
                    run.suspended.add(j)  # the parent reached its join; children still running
                    self.branch_stats.parents_suspended += 1
        if not run.open and run.id in self._runs:
            del self._runs[run.id]
            self._retired.append(run)

    def _settle_session(
        self, run: TreeRun, s: int, i: int, state: NodeState, cancelled: bool, ended: bool
    ) -> None:
        current = run.sessions[s]
        if current >= SessionState.COMPLETED or current == SessionState.IDLE:
            return  # already settled, or never started (a branch that was never spawned)
        session = run.tree.sessions[s]
        child = session.kind is not SessionKind.ROOT
        stats = self.branch_stats
        if state == NodeState.OK:
            if ended:
                run.sessions[s] = SessionState.COMPLETED
                stats.children_completed += child
        elif cancelled:
            run.sessions[s] = SessionState.TRUNCATED
            stats.children_truncated += child
        else:
            run.sessions[s] = SessionState.ERRORED
            stats.children_errored += child
            if child and self._load.fail_fast and state == NodeState.FAILED:
                where = f"'{session.conversation_id}' turn {i - session.first_node}"
                self._fail_fast(run, session.parent, where)

    def _fail_fast(self, run: TreeRun, parent: int | None, where: str) -> None:
        if self.failure is not None:
            return
        self.branch_stats.parents_failed_due_to_child_error += 1
        if parent is not None:  # its join will never fire: failed, not suppressed
            parent_nodes = run.tree.sessions[parent]
            run.suspended -= set(range(parent_nodes.first_node, parent_nodes.last_node + 1))
        self._fail(f"--fail-fast: child {where} failed; cancelling the run")

    def _at(self, due: float, kind: int, run: TreeRun | None = None, node: int = -1) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (due, self._timer_seq, kind, run, node))


def armed_under(flight: Flight) -> list[Flight]:
    """Every flight armed with this one, and with those, down the chain, depth first."""
    out: list[Flight] = []
    stack = flight.armed[::-1]
    while stack:
        armed = stack.pop()
        out.append(armed)
        stack.extend(reversed(armed.armed))
    return out
