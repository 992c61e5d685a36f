"""Per-run state is handed on once a run has retired and its results are in, in either order,
so nothing is held for a run after both (a one-request run retires before its result is
recorded: it used to stay held until the end of the whole run)."""

from __future__ import annotations

from dagperf.engine import Flight, NodeState, Phase, TreeRun
from dagperf.engine.runs import TreeTemplate
from dagperf.graph import compile_dag_jsonl
from dagperf.metrics.fork_reuse import ForkReuse
from dagperf.metrics.locality import Locality
from dagperf.metrics.per_run import PerRun
from dagperf.transport.protocol import ErrorInfo, Result

from dagfile import conv, load, turn


def runs(turns: int, count: int, phase: Phase = Phase.PROFILING) -> list[TreeRun]:
    (tree,) = compile_dag_jsonl(load(conv("a", *[turn() for _ in range(turns)]))).trees
    template = TreeTemplate(tree)
    out = []
    for i in range(count):
        run = TreeRun(i + 1, 0, template, phase)
        run.nodes[:] = bytes([NodeState.OK] * turns)
        out.append(run)
    return out


def test_a_run_retired_before_its_result_is_handed_on_when_the_result_comes():
    closed = []
    per_run: PerRun[str] = PerRun(
        lambda run, items, retired: closed.append((run.id, items, retired))
    )
    for run in runs(turns=1, count=1000):
        per_run.retire(run)  # the scheduler's order: what a result releases goes out first
        per_run.add(run, f"result of {run.id}")
    assert len(closed) == 1000 and not per_run._open and not per_run._retired
    assert closed[0] == (1, ["result of 1"], True)


def test_a_run_retired_after_its_results_and_one_never_retired():
    closed = []
    per_run: PerRun[int] = PerRun(
        lambda run, items, retired: closed.append((run.id, items, retired))
    )
    first, second = runs(turns=2, count=2)
    per_run.add(first, 1)
    per_run.add(first, 2)
    assert closed == []  # all in, not retired
    per_run.retire(first)
    per_run.add(second, 1)
    per_run.finish()
    assert closed == [(1, [1, 2], True), (2, [1], False)]


def test_warm_up_runs_and_runs_that_sent_nothing_are_not_held():
    per_run: PerRun[int] = PerRun(lambda *_: None)
    (warm,) = runs(turns=1, count=1, phase=Phase.WARMUP)
    per_run.retire(warm)
    per_run.add(warm, 1)
    (skipped,) = runs(turns=1, count=1)
    skipped.nodes[0] = NodeState.SKIPPED
    per_run.retire(skipped)
    assert not per_run._open and not per_run._retired


def test_one_request_runs_are_never_held_and_no_tree_of_one_is_judged():
    """A lone request has nothing to stay on one backend with: counting it would fill the
    locality verdict with trees trivially kept home (or, without a header, ask for one)."""
    locality, reuse = Locality(), ForkReuse()
    header = {"backend": "pod-a", "backend_source": "header:x-backend"}
    ttft = {"time_to_first_token": 1.0}
    for run in runs(turns=1, count=300):
        locality.retire(run)  # the scheduler's order, as above
        reuse.retire(run)
        flight = Flight(run.id, run, 0, "local-1", Phase.PROFILING, run.id, f"r{run.id}")
        if run.id % 3 == 0:
            result = Result(run.id, run.id, None, run.id + 5, {}, ErrorInfo(500, "X", "boom"))
        elif run.id % 3 == 1:
            result = Result(run.id, run.id, None, run.id + 5, ttft, **header)
        else:
            result = Result(run.id, run.id, None, run.id + 5, ttft)
        locality.add(flight, result)
        reuse.add(flight, result)
    assert (locality.trees, locality.unattributed, locality.trees_on_one) == (0, 0, 0)
    assert locality.report() is None and not locality.by_backend and not locality.by_address
    assert reuse.report() is None  # no FORK child was sent
    for tracker in (locality, reuse):
        assert not tracker._runs._open and not tracker._runs._retired


def test_locality_judges_the_routes_with_two_requests_served():
    """A root forking one child (one route, two requests) is a tree; its one-turn SPAWNed
    sub-agent (a route of its own, one request) is not; nor is a tree whose other request
    failed."""
    graph = compile_dag_jsonl(
        load(
            conv("root", turn(forks=["kid"], spawns=["agent"])),
            conv("kid", turn()),
            conv("agent", turn()),
        )
    )
    (tree,) = graph.trees
    header = {"backend": "pod-a", "backend_source": "header:x-backend"}
    locality = Locality()
    names = [tree.sessions[node.session].conversation_id for node in tree.nodes]
    for run_id, failing in ((1, None), (2, names.index("kid"))):
        run = TreeRun(run_id, 0, TreeTemplate(tree), Phase.PROFILING)
        run.nodes[:] = bytes([NodeState.OK] * len(tree.nodes))
        for node in range(len(tree.nodes)):
            flight = Flight(node, run, node, "local-1", Phase.PROFILING, node, f"r{node}")
            error = ErrorInfo(500, "X", "boom") if node == failing else None
            locality.add(flight, Result(node, node, None, node + 5, {}, error, **header))
        locality.retire(run)
    assert (locality.trees, locality.trees_on_one, locality.by_backend) == (1, 1, {"pod-a": 2})
