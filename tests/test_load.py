"""The effective load: one decision (dagperf.load, LoadConfig.root_limit) that the CLI, the
engine, the health checks and the exports all read, so none of them can drift from another.
The operator's preflight uses it too: tests/test_operator.py."""

from __future__ import annotations

import msgspec
import pytest

from dagperf.engine.pacing import Pacing
from dagperf.exports.aiperf_config import aiperf_input_config
from dagperf.graph import Payload
from dagperf.graph.sessions import GraphNode, SessionSpec, compile_sessions
from dagperf.health.checks import Load, Roots, Run
from dagperf.load import LoadError, resolve_load
from dagperf.vocabulary.config import LoadConfig


def graph(*starts: float | None):
    node = GraphNode("x", Payload([{"role": "user", "content": "x"}]), (), None, 0.0)
    specs = [SessionSpec(f"r{i}", (node,), start_s=s) for i, s in enumerate(starts)]
    return compile_sessions("test", specs)


TIMED, UNTIMED = graph(0.0, 1.5, 3.0), graph(None, None)


def test_a_timed_dataset_runs_on_its_schedule_unless_a_concurrency_or_rate_is_asked_for():
    assert resolve_load(LoadConfig(), TIMED).fixed_schedule is True
    assert resolve_load(LoadConfig(), UNTIMED).fixed_schedule is False
    assert resolve_load(LoadConfig(concurrency=2), TIMED).fixed_schedule is False
    assert resolve_load(LoadConfig(request_rate=2.0), TIMED).fixed_schedule is False
    assert resolve_load(LoadConfig(fixed_schedule=False), TIMED).fixed_schedule is False
    asked = LoadConfig(fixed_schedule=True, concurrency=2)
    assert resolve_load(asked, TIMED).fixed_schedule is True


def test_a_fixed_schedule_without_timestamps_cannot_run_and_says_so_in_the_clis_terms():
    with pytest.raises(LoadError, match=r"^--fixed-schedule needs a start time for every session"):
        resolve_load(LoadConfig(fixed_schedule=True), UNTIMED)
    with pytest.raises(LoadError):  # one root without a time is enough
        resolve_load(LoadConfig(fixed_schedule=True), graph(0.0, None))


def test_without_a_stop_condition_each_root_runs_once():
    assert resolve_load(LoadConfig(), TIMED).num_conversations == 3
    for given in ({"request_count": 5}, {"num_conversations": 7}, {"benchmark_duration": 2.0}):
        resolved = resolve_load(LoadConfig(**given), TIMED)
        assert resolved.model_dump(include=set(given)) == given
        assert resolved.num_conversations == given.get("num_conversations")


@pytest.mark.parametrize(
    ("given", "limit"),
    [
        ({}, 1),  # a root at a time by default
        ({"concurrency": 4}, 4),
        ({"request_rate": 5.0}, None),  # roots start as they arrive
        ({"request_rate": 5.0, "concurrency": 3}, 3),
        ({"fixed_schedule": True}, None),
        ({"fixed_schedule": True, "concurrency": 2}, 2),
    ],
)
def test_the_engine_the_health_check_and_the_export_agree_on_how_many_roots_run_at_once(
    given, limit
):
    runs_on = TIMED if given.get("fixed_schedule") else UNTIMED
    load = resolve_load(LoadConfig(**given), runs_on)
    assert load.root_limit == limit
    assert Pacing(runs_on, load, None).slots.full == limit
    recorded = load.model_dump(mode="json")  # what the exports write and the checks read
    check = Roots(Run(load=msgspec.convert(recorded, Load))).concurrency()
    assert check.details.get("target") == limit or (limit is None and check.status == "skipped")
    (phase,) = aiperf_input_config({"load": recorded})["phases"]
    assert phase.get("concurrency") == limit
