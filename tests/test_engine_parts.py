"""The dispatcher's parts on their own: timers and root arrivals (the rest is driven through the
dispatcher in tests/test_dispatcher.py)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import pytest

from dagperf.dataset.formats.dag_jsonl import read_dag_jsonl
from dagperf.engine import Dispatcher
from dagperf.engine.pacing import Arrivals
from dagperf.engine.timers import Timers
from dagperf.graph import Payload, Tree, compile_dag_jsonl
from dagperf.graph.sessions import GraphNode, SessionSpec, compile_sessions
from dagperf.vocabulary.config import LoadConfig


def test_timers_fire_in_due_order_ties_in_the_order_set_and_include_ones_set_while_firing():
    timers: Timers[str] = Timers()
    timers.at(5.0, 1, "late")
    timers.at(2.0, 2, "first")
    timers.at(2.0, 3, "second")
    fired = []
    for due, kind, subject, _ in timers.due(4.0):
        fired.append((due, kind, subject))
        if subject == "first":
            timers.at(3.0, 4, "set while firing")
    assert fired == [(2.0, 2, "first"), (2.0, 3, "second"), (3.0, 4, "set while firing")]
    assert timers.next_due() == 5.0
    timers.clear()
    assert timers.next_due() is None and list(timers.due(10.0)) == []


def graph_with_starts(*starts: float):
    node = GraphNode("x", Payload([{"role": "user", "content": "x"}]), (), None, 0.0)
    specs = [SessionSpec(f"r{i}", (node,), start_s=s) for i, s in enumerate(starts)]
    return compile_sessions("test", specs)


def test_a_fixed_schedule_follows_the_trees_start_times_and_starts_over_never_earlier():
    arrivals = Arrivals(graph_with_starts(10.0, 10.5, 12.0), LoadConfig(fixed_schedule=True))
    assert arrivals.on
    arrivals.begin(100.0, first_tree=0)
    assert arrivals.after(100.0) == 100.5
    assert arrivals.after(100.5) == 102.0
    assert arrivals.after(102.0) == 102.0  # past the last tree: the first again, not earlier


def test_poisson_arrivals_are_seeded_and_a_closed_loop_has_none():
    graph = graph_with_starts(0.0)
    a, b = (Arrivals(graph, LoadConfig(request_rate=10, random_seed=7)) for _ in range(2))
    gaps = [a.after(0.0) for _ in range(200)]
    assert gaps == [b.after(0.0) for _ in range(200)]
    assert sum(gaps) / len(gaps) == pytest.approx(0.1, rel=0.25)
    assert not Arrivals(graph, LoadConfig(concurrency=2)).on


@pytest.mark.parametrize("cv", [0.25, 1.0, 3.0])
def test_gamma_arrivals_keep_the_rate_and_take_the_spread_asked(cv):
    arrivals = Arrivals(graph_with_starts(0.0), LoadConfig(request_rate=10, arrival_cv=cv,
                                                           random_seed=3))  # fmt: skip
    gaps = [arrivals.after(0.0) for _ in range(20_000)]
    mean = sum(gaps) / len(gaps)
    spread = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    assert mean == pytest.approx(0.1, rel=0.05)
    assert spread / mean == pytest.approx(cv, rel=0.1)


def test_an_arrival_spread_needs_a_rate():
    with pytest.raises(ValueError, match="--arrival-cv shapes the gaps of --request-rate"):
        LoadConfig(concurrency=2, arrival_cv=2.0)


class CountedTrees(Sequence[Tree]):
    """A graph's trees, noting which are read: a dag_jsonl graph builds a tree when read."""

    def __init__(self, trees: Sequence[Tree]):
        self.trees, self.read = trees, []

    def __len__(self) -> int:
        return len(self.trees)

    def __getitem__(self, index):
        self.read.append(index)
        return self.trees[index]


@pytest.mark.parametrize("rate", [None, 100.0])
def test_a_run_reads_only_the_trees_it_starts(rate):
    lines = [json.dumps({"session_id": f"r{i}", "turns": [{"messages": [{"role": "user"}]}]})
             for i in range(50)]  # fmt: skip
    graph = compile_dag_jsonl(read_dag_jsonl([line.encode() for line in lines], "f.jsonl"))
    counted = CountedTrees(graph.trees)
    load = LoadConfig(concurrency=2, request_rate=rate, random_seed=1)
    d = Dispatcher(dataclasses.replace(graph, trees=counted), load, lambda: 0.0)
    d.add_worker("w")
    d.begin()
    assert sorted(set(counted.read)) == ([0, 1] if rate is None else [])  # arrivals come later
