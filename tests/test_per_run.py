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


def test_one_request_runs_are_judged_with_their_result_and_never_held():
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
    assert (locality.trees, locality.unattributed, locality.trees_on_one) == (200, 100, 100)
    assert locality.by_backend == {"pod-a": 100} and locality.off_home == 0
    assert reuse.report() is None  # no FORK child was sent
    for tracker in (locality, reuse):
        assert not tracker._runs._open and not tracker._runs._retired
