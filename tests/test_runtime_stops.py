"""Load shapes and stop conditions end to end, with the `aiperf profile` flag names."""

from __future__ import annotations

import json

import pytest

from dagperf.simulator import SimConfig, running_simulator

from dagfile import conv, stats, turn
from runs import RECORDING, Run, check_dependencies_finished_first, profile

FORKING = [
    conv("root", turn(forks=["a", "b"])),
    conv("a", turn(), turn()),
    conv("b", turn(), turn()),
]


@pytest.fixture
async def sim():
    async with running_simulator(RECORDING) as running:
        yield running


def overlap(run: Run, names: set[str] | None = None) -> int:
    """Most requests the server had in progress at once."""
    edges = []
    for r in run.records:
        if names is None or r["metadata"]["conversation_id"] in names:
            served = run.served[r["metadata"]["x_request_id"]]
            edges += [(served.received_ns, 1), (served.end_ns, -1)]
    most = current = 0
    for _, step in sorted(edges):
        current += step
        most = max(most, current)
    return most


async def test_without_a_stop_condition_each_root_runs_once(sim, tmp_path):
    lines = [conv("r1", turn(forks=["c"])), conv("c"), conv("r2")]
    run = await profile(sim, tmp_path, lines, "--log-level", "INFO")
    assert run.returncode == 0, run.stderr
    assert sorted(run.sent_order()) == ["c:0", "r1:0", "r2:0"]
    assert "defaulting --num-conversations to 2" in run.stderr
    assert run.summary["request_count"]["avg"] == 3


async def test_num_conversations_cycles_roots_and_never_cuts_children(sim, tmp_path):
    run = await profile(sim, tmp_path, FORKING, "--num-conversations", "3", "--concurrency", "2")
    assert run.returncode == 0, run.stderr
    assert len(run.named("root:0")) == 3 and len(run.records) == 15
    assert run.branch_stats == stats(children_spawned=6, children_completed=6)
    assert len({r["metadata"]["root_correlation_id"] for r in run.records}) == 3


async def test_request_count_is_a_literal_cap_that_truncates_mid_tree(sim, tmp_path):
    lines = [conv("p", turn(spawns=["c"]), turn()), conv("c", turn(), turn(), turn())]
    run = await profile(sim, tmp_path, lines, "--request-count", "3")
    assert run.returncode == 0, run.stderr
    assert run.sent_order() == ["p:0", "c:0", "c:1"]
    assert len(sim.simulator.records) == 3  # the cap is on the wire, children included
    assert run.branch_stats == stats(
        children_spawned=1, children_truncated=1, parents_suspended=1, joins_suppressed=1
    )
    assert run.summary["is_complete"] is True


async def test_concurrency_counts_root_slots(tmp_path):
    lines = [conv(f"r{i}", turn(forks=[f"c{i}"])) for i in range(4)]
    lines += [conv(f"c{i}", turn(), turn()) for i in range(4)]
    # 100 ms a request: a child's two turns overlap the next roots by a margin no busy
    # machine's delays close (at 2 ms a request, they could run one after another).
    async with running_simulator(RECORDING.model_copy(update={"ttft_ms": 100})) as sim:
        run = await profile(sim, tmp_path, lines, "--concurrency", "2", "--workers", "2")
    assert run.returncode == 0, run.stderr
    roots = {f"r{i}" for i in range(4)}
    assert overlap(run, roots) <= 2
    assert overlap(run) > 2  # children run in their root's slot, beside the next roots
    check_dependencies_finished_first(run)


async def test_max_inflight_caps_every_request(tmp_path):
    config = RECORDING.model_copy(update={"ttft_ms": 20})
    lines = [conv("r", turn(forks=[f"c{i}" for i in range(6)]))] + [conv(f"c{i}") for i in range(6)]
    async with running_simulator(config) as sim:
        capped = await profile(sim, tmp_path / "capped", lines, "--max-inflight", "2")
    async with running_simulator(config) as sim:
        free = await profile(sim, tmp_path / "free", lines)
    assert capped.returncode == free.returncode == 0
    assert overlap(capped) <= 2 < overlap(free)


HEALTH_FLAGS = {  # profile's --health-* flags, each a value unlike its default
    "arrival_slack_ms": 75.0, "early_tolerance_ms": 3.0, "rate_tolerance": 0.2,
    "osl_tolerance_pct": 7.0, "osl_tolerance_max_tokens": 9,
}  # fmt: skip


async def test_request_rate_holds_within_the_health_checks_tolerance(sim, tmp_path):
    """400 Poisson arrivals at 200/s: the measured rate is within 20% of the target both ways
    (3 sigma of the arrival noise at this count), and every --health-* flag reaches the report."""
    flags = [f"--health-{k.replace('_', '-')}={v}" for k, v in HEALTH_FLAGS.items()]
    lines = [conv(f"r{i}") for i in range(3)]
    run = await profile(
        sim, tmp_path, lines, "--request-rate", "200", "--request-count", "400",
        "--random-seed", "4", *flags,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert len(run.records) == 400
    report = json.loads((run.directory / "health_check.json").read_text())
    assert report["options"] == HEALTH_FLAGS
    (rate,) = [c for c in report["checks"] if c["name"] == "request_rate"]
    assert rate["status"] == "pass", rate
    assert rate["details"]["tolerance"] == 0.2 and rate["details"]["arrivals"] == 400
    assert 0.8 <= rate["details"]["measured_per_s"] / 200 <= 1.2


async def test_duration_stops_sending_and_waits_for_what_is_in_flight(sim, tmp_path):
    run = await profile(sim, tmp_path, FORKING, "--benchmark-duration", "0.5", "--concurrency", "2")
    assert run.returncode == 0, run.stderr
    starts = [r["metadata"]["request_start_ns"] for r in run.records]
    assert (max(starts) - min(starts)) / 1e9 < 0.5 + 0.05
    assert all(r["error"] is None for r in run.records)
    assert len(run.records) == len(sim.simulator.records)
    b = run.branch_stats
    assert b["children_spawned"] == b["children_completed"] + b["children_truncated"]


async def test_grace_period_ends_in_cancellation(tmp_path):
    slow = SimConfig(ttft_ms=5, itl_ms=100, output_tokens=50, record_bodies=True)
    async with running_simulator(slow) as sim:
        run = await profile(
            sim,
            tmp_path,
            FORKING,
            "--streaming",
            "--benchmark-duration",
            "0.3",
            "--benchmark-grace-period",
            "0.2",
        )
    assert run.returncode == 0, run.stderr
    cancelled = [r for r in run.records if r["metadata"]["was_cancelled"]]
    assert cancelled
    for r in cancelled:
        assert r["error"]["code"] == 499 and r["error"]["type"] == "RequestCancellationError"
        assert r["metadata"]["cancellation_time_ns"] >= r["metadata"]["request_start_ns"]


async def test_warmup_runs_first_and_is_left_out(sim, tmp_path):
    run = await profile(sim, tmp_path, FORKING, "--warmup-request-count", "2")
    assert run.returncode == 0, run.stderr
    assert len(sim.simulator.records) == 2 + 5
    assert len(run.records) == 5
    assert {r["metadata"]["benchmark_phase"] for r in run.records} == {"profiling"}
    assert run.branch_stats == stats(children_spawned=2, children_completed=2)
    measured = {r["metadata"]["x_request_id"] for r in run.records}
    warmup = [s for s in sim.simulator.records if s.request_id not in measured]
    first_measured = min(r["metadata"]["request_start_ns"] for r in run.records)
    assert len(warmup) == 2 and all(s.end_ns <= first_measured for s in warmup)
