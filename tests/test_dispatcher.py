"""The dispatcher's rules, driven event by event with a fake clock: no sockets, no sleeping."""

from __future__ import annotations

import itertools

import pytest

from dagperf.engine import Flight, Phase, Until
from dagperf.graph import Payload
from dagperf.graph.sessions import GraphNode, SessionSpec, compile_sessions
from dagperf.vocabulary.config import LoadConfig

from dagfile import conv, stats, turn
from dispatch_harness import Clock, Harness

EXAMPLE = (
    conv("root", turn(forks=["a", "b"])),
    conv("a", turn(), turn()),
    conv("b", turn(), turn()),
)


def test_fork_children_go_out_when_the_parent_returns_and_stay_on_its_worker():
    h = Harness(*EXAMPLE, workers=("w1", "w2", "w3", "w4"))
    assert h.sent() == ["root:0"]
    assert h.finish("root:0") == ["a:0", "b:0"]
    assert h.finish("a:0") == ["a:1"]
    assert h.finish("b:0") == ["b:1"]
    h.drain()
    assert h.d.finished
    assert len({f.worker for f in h.flights}) == 1
    assert h.stats == stats(children_spawned=2, children_completed=2)


def test_a_fork_lineage_is_pinned_and_spawns_spread():
    lines = [conv(f"r{i}", turn(forks=[f"f{i}"], spawns=[f"s{i}"])) for i in range(40)]
    lines += [conv(f"f{i}", turn(), turn()) for i in range(40)]
    lines += [conv(f"s{i}") for i in range(40)]
    h = Harness(*lines, workers=("w1", "w2", "w3"), concurrency=40)
    flights: list[Flight] = []
    while not h.d.finished:
        batch = h.d.orders.drain_sends()
        flights += batch
        for f in batch:
            h.d.complete(f.credit, True)
    by_run: dict[int, dict[str, str]] = {}
    for f in flights:
        session = f.run.tree.sessions[f.run.tree.nodes[f.node].session]
        by_run.setdefault(f.run.id, {}).setdefault(session.kind, set()).add(f.worker)
    for kinds in by_run.values():
        assert kinds["fork"] == kinds["root"]  # the FORK child (both turns) on its root's worker
    assert len({w for kinds in by_run.values() for w in kinds["spawn"]}) == 3
    assert len({w for kinds in by_run.values() for w in kinds["root"]}) == 3


def test_metadata_ids():
    h = Harness(*EXAMPLE)
    h.sent()
    h.finish("root:0")
    root, a0 = h.log.index("root:0"), h.log.index("a:0")
    flights = {h.name(f): f for f in [h.flying["a:0"], h.flying["b:0"]]}
    run = flights["a:0"].run
    assert run.correlation[0] == "id1"  # the root session's id, made when it was first sent
    assert flights["a:0"].request_num == 1 and flights["b:0"].request_num == 2
    assert (root, a0) == (0, 1)
    assert run.correlation[1] != run.correlation[2]


def test_bare_spawn_suspends_the_parent_until_the_child_drains():
    h = Harness(conv("p", turn(spawns=["c"]), turn()), conv("c", turn(), turn()))
    assert h.sent() == ["p:0"]
    assert h.finish("p:0") == ["c:0"]  # p:1 waits: the parent is suspended at its join
    assert h.stats["parents_suspended"] == 1
    assert h.finish("c:0") == ["c:1"]
    assert h.finish("c:1") == ["p:1"]
    h.drain()
    assert h.stats == stats(
        children_spawned=1, children_completed=1, parents_suspended=1, parents_resumed=1
    )


def test_join_at_lets_the_parent_run_the_turns_between():
    h = Harness(
        conv("p", turn(spawns=[{"children": ["c"], "join_at": 2}]), turn(), turn()),
        conv("c", turn(), turn()),
    )
    h.sent()
    assert h.finish("p:0") == ["p:1", "c:0"]
    assert h.finish("p:1") == []  # p:2 waits for c
    assert h.finish("c:0") == ["c:1"]
    assert h.finish("c:1") == ["p:2"]
    h.drain()
    assert h.stats["parents_suspended"] == h.stats["parents_resumed"] == 1


def test_children_that_finish_before_the_join_do_not_suspend_the_parent():
    h = Harness(
        conv("p", turn(spawns=[{"children": ["c"], "join_at": 2}]), turn(), turn()), conv("c")
    )
    h.sent()
    h.finish("p:0")
    assert h.finish("c:0") == []
    assert h.finish("p:1") == ["p:2"]
    h.drain()
    assert h.stats == stats(children_spawned=1, children_completed=1)


def test_fan_in_waits_for_every_branch():
    h = Harness(
        conv("p", turn(spawns=[{"children": ["a"], "join_at": 2}]), turn(spawns=["b"]), turn()),
        conv("a"),
        conv("b"),
    )
    h.sent()
    assert h.finish("p:0") == ["p:1", "a:0"]
    assert h.finish("p:1") == ["b:0"]
    assert h.finish("b:0") == []
    assert h.finish("a:0") == ["p:2"]


def test_background_fork_runs_beside_the_parent():
    h = Harness(
        conv("p", turn(forks=[{"child": "c", "background": True}]), turn()),
        conv("c", turn(), turn()),
    )
    h.sent()
    assert h.finish("p:0") == ["p:1", "c:0"]
    assert h.finish("p:1") == []  # the parent ended; the child goes on
    assert h.finish("c:0") == ["c:1"]
    h.drain()
    assert h.stats == stats(children_spawned=1, children_completed=1)


def test_pre_session_spawns_go_out_before_turn_0_and_gate_nothing():
    h = Harness(conv("r", turn(), turn(), pre_session_spawns=["x"]), conv("x", turn(), turn()))
    assert h.sent() == ["x:0", "r:0"]
    assert h.finish("r:0") == ["r:1"]
    assert h.finish("r:1") == []
    h.drain()
    assert h.log == ["x:0", "r:0", "r:1", "x:1"]
    assert h.stats == stats(children_spawned=1, children_completed=1)


def test_delay_holds_a_turn_back():
    h = Harness(conv("p", turn(), turn(delay=250)))
    h.sent()
    assert h.finish("p:0") == []
    assert h.d.next_deadline() == pytest.approx(h.clock.now + 0.25)
    assert h.advance(0.2) == []
    assert h.advance(0.05) == ["p:1"]


def test_concurrency_slot_frees_when_the_roots_last_turn_returns():
    h = Harness(
        conv("r1", turn(forks=["c1"])), conv("c1", turn(), turn()), conv("r2"), concurrency=1
    )
    assert h.sent() == ["r1:0"]
    assert h.finish("r1:0") == ["c1:0", "r2:0"]  # c1 still runs in r1's slot
    h.drain()
    assert h.log == ["r1:0", "c1:0", "r2:0", "c1:1"]


def test_a_ramp_up_opens_one_more_slot_at_each_even_step_until_all():
    # 4 slots over 3 s: one at the start, then one more each second
    h = Harness(*[conv(f"r{i}") for i in range(6)], concurrency=4, concurrency_ramp_up=3.0,
                num_conversations=6)  # fmt: skip
    assert h.sent() == ["r0:0"]
    assert h.advance(0.99) == []
    assert h.advance(0.01) == ["r1:0"]
    assert h.d.next_deadline() == pytest.approx(h.clock.now + 1.0)
    assert h.advance(1.0) == ["r2:0"]
    assert h.advance(1.0) == ["r3:0"]
    assert h.d.next_deadline() is None  # all four slots open: no more steps
    assert h.advance(5.0) == []  # four in flight: the fifth waits for a slot
    assert h.finish("r0:0") == ["r4:0"]


def test_max_inflight_caps_everything_in_flight():
    lines = [conv("r", turn(forks=[f"c{i}" for i in range(5)]))] + [conv(f"c{i}") for i in range(5)]
    h = Harness(*lines, max_inflight=2)
    h.sent()
    assert h.finish("r:0") == ["c0:0", "c1:0"]
    assert h.finish("c0:0") == ["c2:0"]
    assert h.d.progress().in_flight == 2


def test_request_count_is_a_literal_cap_that_truncates_children():
    h = Harness(
        conv("p", turn(spawns=["c"]), turn()), conv("c", turn(), turn(), turn()), request_count=3
    )
    h.sent()
    h.finish("p:0")  # sends c:0
    h.finish("c:0")  # sends c:1, the third request: the cap
    assert h.d.closed_reason == "request count reached"
    assert h.finish("c:1") == []
    assert h.d.finished
    assert h.log == ["p:0", "c:0", "c:1"]
    assert h.stats == stats(
        children_spawned=1, children_truncated=1, parents_suspended=1, joins_suppressed=1
    )


def test_num_conversations_counts_roots_and_never_truncates_children():
    h = Harness(*EXAMPLE, num_conversations=2)
    h.drain()
    assert h.d.finished
    assert h.log.count("root:0") == 2 and len(h.log) == 10
    assert h.d.progress().expected == 10
    assert h.stats == stats(children_spawned=4, children_completed=4)


def test_default_runs_each_root_once():
    h = Harness(conv("r1"), conv("r2", turn(spawns=["c"])), conv("c"))
    assert h.d.progress().expected == 3
    h.drain()
    assert sorted(h.log) == ["c:0", "r1:0", "r2:0"]


def test_duration_stops_sending_then_cancels_after_the_grace_period():
    h = Harness(conv("r", turn(), turn()), benchmark_duration=10, benchmark_grace_period=5)
    h.sent()
    for _ in range(3):  # roots are unlimited: the duration is the stop
        h.finish(next(iter(h.flying)))
    assert list(h.flying) == ["r:1"]
    assert h.advance(10) == []
    assert h.d.closed_reason == "benchmark duration reached"
    assert h.cancels() == []
    h.advance(5)
    (cancel,) = h.cancels()
    h.finish(cancel, ok=False, cancelled=True)
    assert h.d.finished


class Judge:
    """What the dispatcher asks under `Until`: whether the objectives are decided, given what
    is in flight; the answer set by the test."""

    def __init__(self) -> None:
        self.decided = False
        self.asked: list[tuple[float, int, int]] = []  # (when, in flight, open runs)
        self.clock: Clock | None = None

    def __call__(self, in_flight: int, open_runs: int) -> bool:
        assert self.clock is not None
        self.asked.append((self.clock.now, in_flight, open_runs))
        return self.decided


def judged(*lines, judge: Judge, ceiling_s: float = 60.0, **load) -> Harness:
    h = Harness(*lines, until=Until(judge, ceiling_s, every_s=0.5), **load)
    judge.clock = h.clock
    return h


def test_under_objectives_the_duration_is_a_floor_and_the_phase_closes_once_decided():
    judge = Judge()
    h = judged(conv("r"), judge=judge, concurrency=2, benchmark_duration=10,
               benchmark_grace_period=5)  # fmt: skip
    assert h.sent() == ["r:0", "r:0"]
    h.advance(10)
    assert h.d.closed_reason is None  # the floor passed, nothing decided: it goes on
    assert judge.asked == [(1010.0, 2, 2)]  # what is in flight counts as unknown
    h.finish(next(iter(h.flying)))
    h.advance(0.5)
    assert h.d.closed_reason is None and len(judge.asked) == 2
    judge.decided = True
    h.advance(0.5)
    assert h.d.closed_reason == "every objective decided"
    h.advance(5)  # then the grace period, as after a duration
    assert len(h.cancels()) == 2


def test_under_objectives_a_phase_ends_at_its_ceiling_undecided():
    judge = Judge()
    h = judged(conv("r"), judge=judge, ceiling_s=3, concurrency=1, benchmark_grace_period=1)
    h.sent()
    for _ in range(6):
        h.advance(0.5)
    assert h.d.closed_reason == "the step's longest duration (3 s) reached"
    assert [when for when, _, _ in judge.asked] == [1000.5, 1001.0, 1001.5, 1002.0, 1002.5]


def test_under_objectives_roots_are_not_limited_to_each_once():
    judge = Judge()
    h = judged(conv("a"), conv("b"), judge=judge, concurrency=1)
    h.sent()
    for _ in range(5):
        h.finish(next(iter(h.flying)))
    assert h.log == ["a:0", "b:0", "a:0", "b:0", "a:0", "b:0"]  # it runs until decided


def test_the_window_opens_when_the_ramp_has_opened_every_slot_and_closes_with_sending():
    """With three slots opened over 2 s, what starts during the ramp is not measured; what
    starts once all are open (the third root, the moment its slot opens) is."""
    h = Harness(conv("r", turn(), turn()), concurrency=3, concurrency_ramp_up=2,
                benchmark_duration=10)  # fmt: skip
    h.sent()
    h.advance(1)
    h.advance(1)  # the third slot opens: the load is at its level
    h.finish(next(iter(h.flying)))
    measured = {f.credit: f.measured for f in h.flights}
    runs = {f.run.id: f.run.measured for f in h.flights}
    assert list(measured.values()) == [False, False] + [True] * (len(measured) - 2)
    assert list(runs.values()) == [False, False] + [True] * (len(runs) - 2)
    assert h.d.window.level_at == 1002.0 and h.d.window.closed_at is None
    h.advance(8)
    assert h.d.window.closed_at == 1010.0


def test_request_rate_is_poisson_and_seeded():
    def arrivals(seed):
        h = Harness(conv("r"), request_rate=100, request_count=400, random_seed=seed)
        times = []
        while not h.d.closed_reason:
            for _ in h.sent():
                times.append(h.clock.now)
            h.clock.now = h.d.next_deadline()
            h.d.tick()
        return times

    first = arrivals(7)
    assert first == arrivals(7) and first != arrivals(8)
    gaps = [b - a for a, b in itertools.pairwise(first)]
    assert 0.008 < sum(gaps) / len(gaps) < 0.012  # mean 1/100 s, 400 samples


def test_warmup_runs_first_and_is_not_counted():
    h = Harness(*EXAMPLE, warmup_request_count=2)
    assert h.d.phase is Phase.WARMUP
    h.sent()
    h.finish("root:0")  # sends a:0, the warmup cap; b:0 is elided
    assert h.d.phase is Phase.WARMUP
    h.finish("a:0")
    assert h.d.phase is Phase.PROFILING
    h.drain()
    assert h.d.finished
    assert h.d.progress().sent == 5
    assert h.stats == stats(children_spawned=2, children_completed=2)


def with_warmup(*names: str, warmup: tuple[str, ...]):
    """Single-request sessions, and the dataset's own warm-up sessions (a rag trace's)."""

    def one(name: str) -> SessionSpec:
        return SessionSpec(name, (GraphNode("0", Payload([{"role": "user", "content": name}])),))

    return compile_sessions("t", [one(n) for n in names], warmup=[one(n) for n in warmup])


def test_a_dataset_warmup_goes_first_one_at_a_time_then_a_requested_warmup_then_profiling():
    h = Harness(graph=with_warmup("a", "b", warmup=("w1", "w2")), concurrency=4,
                warmup_request_count=1)  # fmt: skip
    assert h.d.phase is Phase.WARMUP
    assert h.sent() == ["w1:0"]  # one at a time, whatever the concurrency
    assert h.d.progress().expected == 2
    assert h.finish("w1:0") == ["w2:0"]
    assert h.finish("w2:0") == ["a:0"]  # the requested warm-up: one request of the dataset
    assert h.d.phase is Phase.WARMUP
    assert sorted(h.finish("a:0")) == ["a:0", "b:0"]  # then the profiling, measured
    assert h.d.phase is Phase.PROFILING and h.d.progress().expected == 2
    h.drain()
    assert h.d.finished and h.d.progress().sent == 2


def test_a_dataset_warmup_does_not_wait_for_arrivals_and_a_failure_does_not_stop_it():
    h = Harness(graph=with_warmup("a", warmup=("w1", "w2")), request_rate=1.0)
    assert h.sent() == ["w1:0"]  # no tick: roots of the warm-up do not arrive, they go
    assert h.finish("w1:0", ok=False) == ["w2:0"]
    assert h.finish("w2:0") == []  # the profiling's first root waits for its arrival
    assert h.d.phase is Phase.PROFILING
    assert h.advance(0) == ["a:0"]


def test_a_failed_turn_skips_what_needs_it_and_releases_its_parent():
    h = Harness(
        conv("p", turn(spawns=["c"]), turn()),
        conv("c", turn(forks=[{"child": "g", "background": True}]), turn()),
        conv("g"),
    )
    h.sent()
    assert h.d.progress().expected == 5
    h.finish("p:0")
    assert h.finish("c:0", ok=False) == ["p:1"]  # c:1 and g are skipped; the join is released
    h.drain()
    assert h.log == ["p:0", "c:0", "p:1"]
    progress = h.d.progress()
    assert progress.errors == 1
    assert progress.completed == progress.expected == 3  # what was skipped is not still to come
    assert h.stats == stats(
        children_spawned=1, children_errored=1, parents_suspended=1, parents_resumed=1
    )


def test_fail_fast_cancels_everything_on_the_first_child_error():
    h = Harness(conv("p", turn(spawns=["a", "b"]), turn()), conv("a"), conv("b"), fail_fast=True)
    h.sent()
    h.finish("p:0")
    h.finish("a:0", ok=False)
    assert h.d.failure.startswith("--fail-fast: child 'a' turn 0 failed")
    assert h.cancels() == ["b:0"]
    h.finish("b:0", ok=False, cancelled=True)
    assert h.d.finished
    assert h.stats == stats(
        children_spawned=2,
        children_errored=1,
        children_truncated=1,
        parents_suspended=1,
        parents_failed_due_to_child_error=1,
    )


def test_losing_a_worker_fails_its_flights_and_ends_the_sessions_it_held():
    lines = [conv(f"r{i}", turn(forks=[f"c{i}"])) for i in range(6)]
    lines += [conv(f"c{i}", turn(), turn()) for i in range(6)]
    h = Harness(*lines, workers=("w1", "w2"), concurrency=6)
    h.sent()
    for i in range(6):
        h.finish(f"r{i}:0")
    on_w1 = sorted(n for n, f in h.flying.items() if f.worker == "w1")
    assert on_w1
    lost = h.d.remove_worker("w1")
    assert sorted(h.name(f) for f in lost) == on_w1
    for name in on_w1:
        del h.flying[name]
    h.drain()
    assert h.d.finished and h.d.failure is None
    progress = h.d.progress()  # lost by the run, not failed by the endpoint: cut
    assert (progress.errors, progress.cut) == (0, len(on_w1))
    assert h.stats["children_errored"] == len(on_w1)
    assert h.stats["children_completed"] == 6 - len(on_w1)
    assert "w1" not in h.d.router


def test_losing_every_worker_fails_the_run():
    h = Harness(conv("r", turn(), turn()))
    h.sent()
    h.d.remove_worker("w1")
    assert h.d.finished
    assert h.d.failure == "every worker was lost"


def test_interrupt_cancels_what_is_in_flight():
    h = Harness(*EXAMPLE)
    h.sent()
    h.finish("root:0")
    h.d.interrupt("interrupted")
    assert sorted(h.cancels()) == ["a:0", "b:0"]
    assert h.disarmed == {"a:1", "b:1"}  # armed with them: their worker must not start them
    h.finish("a:0", ok=False, cancelled=True)
    h.finish("b:0", ok=False, cancelled=True)
    assert h.d.finished
    assert h.stats == stats(children_spawned=2, children_truncated=2)


def test_a_stop_lets_what_is_in_flight_finish_within_the_grace_period():
    h = Harness(*EXAMPLE, benchmark_grace_period=5)
    h.sent()
    h.finish("root:0")
    h.d.stop("stopped on request")
    assert h.d.closed_reason == "stopped on request"
    assert h.finish("a:0") == []  # answered in time, and nothing new is sent, armed or not
    assert h.disarmed == {"a:1", "b:1"}
    assert h.cancels() == [] and not h.d.finished
    h.advance(5)
    assert h.cancels() == ["b:0"]
    h.finish("b:0", ok=False, cancelled=True)
    assert h.d.finished


def armed_names(h: Harness, flight: Flight) -> list[str]:
    return [f"{h.name(a)}>{'+'.join(armed_names(h, a))}" if a.armed else h.name(a)
            for a in flight.armed]  # fmt: skip


def test_what_needs_only_its_parent_and_continues_it_goes_out_armed_with_it():
    forks = [{"child": child, "background": True} for child in ("a", "bg")]
    h = Harness(
        conv("root", turn(forks=forks, spawns=["s"]), turn()),
        conv("a", turn(), turn(), turn(delay=5)),
        conv("bg"),
        conv("s"),
    )
    assert h.sent() == ["root:0"]
    # FORK children and their next turns, down the chain; not the SPAWN child (a fresh
    # history), the parent's joining turn (it waits on a child too) or a delayed turn
    assert armed_names(h, h.flying["root:0"]) == ["a:0>a:1", "bg:0"]
    assert sorted(h.finish("root:0")) == ["a:0", "bg:0", "s:0"]  # s:0 from here, as ever
    assert h.finish("a:0") == ["a:1"]  # started by its worker
    assert h.finish("a:1") == []  # a:2 waits its delay here
    assert h.advance(5) == ["a:2"]
    h.drain()
    assert h.d.finished and h.d.progress().completed == 7
    assert h.stats["children_spawned"] == 3 and h.stats["children_completed"] == 3


def test_an_armed_node_its_worker_did_not_start_goes_out_from_here():
    h = Harness(conv("root", turn(forks=["a"])), conv("a", turn(), turn()))
    h.sent()
    assert h.finish("root:0", start_armed=False) == ["a:0"]  # sent the usual way
    assert armed_names(h, h.flying["a:0"]) == ["a:1"]  # and armed with what follows it
    h.drain()
    assert h.log == ["root:0", "a:0", "a:1"] and h.d.finished


def test_a_failed_parent_skips_the_chain_armed_with_it():
    h = Harness(conv("root", turn(forks=["a"])), conv("a", turn(), turn(), turn()))
    h.sent()
    assert h.finish("root:0", ok=False) == []
    assert h.d.finished
    assert h.d.progress().expected == h.d.progress().completed == 1
    assert h.stats == stats()


def test_nothing_is_armed_under_a_request_cap_or_an_in_flight_cap():
    for limit in ({"request_count": 10}, {"max_inflight": 4}):
        h = Harness(conv("root", turn(forks=["a"])), conv("a", turn(), turn()), **limit)
        h.sent()
        assert h.flying["root:0"].armed == []
        assert "a:0" in h.finish("root:0")  # sent from here


def test_unknown_credits_are_ignored():
    h = Harness(*EXAMPLE)
    h.sent()
    assert h.d.complete(999, True) is None


# --- session graphs and fixed schedules ------------------------------------------------------


def sessions(*specs):
    return compile_sessions("test", list(specs))


def spec(sid, *nodes, start_s=None):
    return SessionSpec(sid, tuple(nodes), start_s=start_s)


def gnode(key, parents=(), history=None, wait_s=0.0):
    return GraphNode(key, Payload([{"role": "user", "content": key}]), parents, history, wait_s)


def test_a_diamond_node_waits_for_every_parent_then_its_wait():
    graph = sessions(
        spec("d", gnode("top"), gnode("a", (0,), 0), gnode("b", (0,)), gnode("m", (1, 2), 1, 0.5))
    )
    h = Harness(graph=graph)
    assert h.sent() == ["d:0"]
    assert sorted(h.finish("d:0")) == ["d:1", "d:2"]
    assert h.finish("d:1") == []  # b still runs
    assert h.finish("d:2") == []  # both done: the wait starts
    assert h.advance(0.49) == []
    assert h.advance(0.01) == ["d:3"]
    assert h.flying["d:3"].armed == []


def test_a_failed_parent_skips_the_diamonds_join():
    graph = sessions(spec("d", gnode("a"), gnode("b"), gnode("m", (0, 1), 0)))
    h = Harness(graph=graph)
    assert h.sent() == ["d:0", "d:1"]
    h.finish("d:0", ok=False)
    assert h.finish("d:1") == []
    assert h.d.finished and h.d.progress().expected == 2


def test_a_fixed_schedule_starts_each_root_at_its_own_time():
    starts = (5.0, 5.0, 6.5, 9.0)
    graph = sessions(*(spec(f"s{i}", gnode("x"), start_s=t) for i, t in enumerate(starts)))
    h = Harness(graph=graph, fixed_schedule=True)
    assert h.advance(0) == ["s0:0", "s1:0"]  # the first at once, one at the same time with it
    assert h.advance(1.49) == []
    assert h.advance(0.01) == ["s2:0"]  # no concurrency limit: s0, s1 still in flight
    assert h.advance(2.0) == []
    assert h.advance(0.5) == ["s3:0"]
    h.drain()
    assert h.d.finished and h.d.progress().sent == 4


def test_a_fixed_schedule_needs_times_and_excludes_a_rate():
    with pytest.raises(ValueError, match="start time"):
        Harness(graph=sessions(spec("s", gnode("x"))), fixed_schedule=True)
    with pytest.raises(ValueError, match="--fixed-schedule and --request-rate"):
        LoadConfig(fixed_schedule=True, request_rate=5)


def test_a_graph_sessions_slot_frees_with_its_last_node_to_end_not_its_last_listed():
    graph = sessions(
        spec("s", gnode("top"), gnode("a", (0,), 0), gnode("b", (0,))), spec("t", gnode("x"))
    )
    h = Harness(graph=graph, concurrency=1)
    assert h.sent() == ["s:0"]
    assert h.finish("s:0") == ["s:1", "s:2"]
    assert h.finish("s:2") == []  # the last listed node ended; "a" still runs in the slot
    assert h.finish("s:1") == ["t:0"]
    h.drain()
    assert h.d.finished


# --- --cancel-session-on-failure ---------------------------------------------------------------

CANCELLED_TREE = (
    conv("p", turn(spawns=["a", "b", "c"]), turn(), turn(spawns=["late"])),
    conv("a", turn(), turn()),
    conv("b", turn(delay=5000)),
    conv("c", turn(forks=["f"])),
    conv("f", turn(), turn()),
    conv("late"),
)


def test_a_failure_cancels_the_rest_of_its_tree_while_what_flies_finishes():
    h = Harness(*CANCELLED_TREE, cancel_session_on_failure=True)
    assert h.sent() == ["p:0"]
    assert h.finish("p:0") == ["a:0", "c:0"]  # b:0 waits its delay; p:1 is the join
    assert armed_names(h, h.flying["c:0"]) == ["f:0>f:1"]  # the FORK child, armed with c:0
    assert h.finish("a:0", ok=False) == []
    assert h.cancels() == []  # what is in flight is left to finish
    assert h.disarmed == {"f:0", "f:1"}  # taken back: c:0's worker must not start them
    assert h.advance(5) == []  # b:0's delay is over: it was dropped
    assert h.finish("c:0") == []  # the sibling in flight finishes; its FORK never starts
    assert h.d.finished
    assert h.log == ["p:0", "a:0", "c:0"]
    (run,) = h.d.orders.drain_retired()
    assert run.cancelled and run.unsent() == 7  # a:1, b:0, f:0, f:1, p:1, p:2, late:0
    progress = h.d.progress()
    assert (progress.completed, progress.errors, progress.expected) == (3, 1, 3)
    assert h.stats == stats(
        children_spawned=2,  # a and c: b, f and late never started
        children_errored=1,
        children_completed=1,
        parents_suspended=1,
        parents_failed_due_to_child_error=1,  # p waited at its join for a
    )


def test_without_the_option_a_failure_only_skips_what_needs_it():
    for option in ({}, {"cancel_session_on_failure": False}):
        h = Harness(*CANCELLED_TREE, **option)
        h.sent()
        h.finish("p:0")
        assert h.finish("a:0", ok=False) == []  # a:1 is skipped, nothing else
        assert h.advance(5) == ["b:0"]
        assert h.finish("c:0") == ["f:0"]  # started by its worker
        h.drain()
        assert h.d.finished
        assert sorted(h.log) == ["a:0", "b:0", "c:0", "f:0", "f:1", "late:0", "p:0", "p:1", "p:2"]
        assert h.stats == stats(
            children_spawned=5, children_errored=1, children_completed=4,
            parents_suspended=1, parents_resumed=1,
        )  # fmt: skip


def test_an_armed_node_started_before_its_disarm_arrived_finishes_and_nothing_follows_it():
    h = Harness(*CANCELLED_TREE, cancel_session_on_failure=True)
    h.sent()
    h.finish("p:0")
    h.finish("a:0", ok=False)
    c0 = h.flying.pop("c:0")
    (f0,) = c0.armed
    assert h.d.complete(c0.credit, True, started=[f0.credit]) is c0  # it raced the disarm
    assert h.d.orders.drain_sends() == []
    assert h.d.complete(f0.credit, True) is f0  # in flight, so finished and recorded
    assert h.d.finished  # f:1, armed with f:0 and not started, is dropped
    assert h.d.progress().completed == 4
    assert h.stats["children_spawned"] == 3 and h.stats["children_truncated"] == 1  # f


def test_queued_requests_of_a_cancelled_tree_are_dropped():
    h = Harness(
        conv("p", turn(spawns=["a", "b", "c"]), turn()), conv("a"), conv("b"), conv("c"),
        max_inflight=1, cancel_session_on_failure=True,
    )  # fmt: skip
    h.sent()
    assert h.finish("p:0") == ["a:0"]  # b:0 and c:0 wait in the queue for room in flight
    assert h.finish("a:0", ok=False) == []
    assert h.d.finished and h.log == ["p:0", "a:0"]


def test_a_cancelled_tree_frees_its_slot_for_the_next_root():
    lines = (
        conv("r1", turn(spawns=[{"children": ["s"], "join_at": 2}]), turn(), turn()),
        conv("s", turn(), turn()),
        conv("r2"),
    )
    h = Harness(*lines, concurrency=1, cancel_session_on_failure=True)
    h.sent()
    assert h.finish("r1:0") == ["r1:1", "s:0"]
    assert h.finish("s:0", ok=False) == []  # r1:1 still flies in the slot
    assert h.finish("r1:1") == ["r2:0"]  # the root has nothing left to send: the slot frees
    h.drain()
    assert h.d.finished and h.log == ["r1:0", "r1:1", "s:0", "r2:0"]
    # without the option, the join is released and the slot waits for it
    h = Harness(*lines, concurrency=1)
    h.sent()
    h.finish("r1:0")
    assert h.finish("s:0", ok=False) == []
    assert h.finish("r1:1") == ["r1:2"]
    assert h.finish("r1:2") == ["r2:0"]


def test_a_cancelled_session_graph_drops_the_branch_waiting_out_its_wait():
    """A Veeksha session is one tree: a failed branch stops the branches beside it that have not
    gone out, even one already released and waiting out its wait_after_ready."""
    graph = sessions(
        spec("d", gnode("top"), gnode("a", (0,), 0), gnode("b", (0,), None, 1.0),
             gnode("c", (0,)), gnode("m", (1, 3), 1))
    )  # fmt: skip
    for cancel, sent in ((True, ["d:0", "d:1", "d:3"]), (False, ["d:0", "d:1", "d:3", "d:2"])):
        h = Harness(graph=graph, cancel_session_on_failure=cancel)
        h.sent()
        assert h.finish("d:0") == ["d:1", "d:3"]  # d:2 waits its second
        assert h.finish("d:1", ok=False) == []
        assert h.finish("d:3") == []  # m needs a: skipped either way
        h.advance(1.0)
        h.drain()
        assert h.d.finished and h.log == sent


def test_with_fail_fast_too_the_run_fails_and_the_parent_is_counted_once():
    lines = (conv("p", turn(spawns=["a", "b"]), turn()), conv("a"), conv("b"))
    h = Harness(*lines, fail_fast=True, cancel_session_on_failure=True)
    h.sent()
    h.finish("p:0")
    h.finish("a:0", ok=False)
    assert h.d.failure.startswith("--fail-fast: child 'a' turn 0 failed")
    assert h.cancels() == ["b:0"]
    h.finish("b:0", ok=False, cancelled=True)
    assert h.d.finished
    assert h.stats == stats(
        children_spawned=2, children_errored=1, children_truncated=1, parents_suspended=1,
        parents_failed_due_to_child_error=1,
    )  # fmt: skip
