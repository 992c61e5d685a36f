"""The benchmark script's own promise: without AIPerf it still measures and prints dagperf's
figures (a short real run of the ceilings step against the bench's endpoint)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from compare import Table, ceilings, ratio
from endpoint import Running
from scheduler_path import main as scheduler_path
from tools import Dagperf


def test_ratio_compares_the_first_tool_with_the_second_and_needs_both():
    assert ratio({"dagperf": 600.0, "AIPerf": 200.0}, "higher") == "3.0x"
    assert ratio({"dagperf": 0.5, "AIPerf": 3.0}, "lower") == "6.0x"
    assert ratio({"dagperf": 0.5}, "lower") == ""
    assert ratio({"dagperf": 0.5, "AIPerf": None}, "lower") == ""


@pytest.fixture
def zero():
    server = Running.start()
    yield server
    server.stop()


async def test_dagperf_alone_gets_every_ceiling_row(zero, tmp_path, capsys):
    table = Table(["dagperf"])
    await ceilings([Dagperf()], table, tmp_path, zero, scale=0.25)  # --quick
    names = [name for name, _, _ in table.rows]
    assert names == [
        "launch to first request",
        *[
            row
            for c in (1, 16, 64, 256)
            for row in (f"ceiling, concurrency {c}", f"CPU per request, concurrency {c}")
        ],
        "peak RSS (process tree), concurrency 64",
    ]
    for name, (figure,), ratio_ in table.rows:
        assert figure[0].isdigit() and ratio_ == "", (name, figure)
    table.show()
    assert "ratio" not in capsys.readouterr().out.splitlines()[-len(names) - 1]


@pytest.mark.parametrize("forks", [0, 2])
def test_the_scheduler_path_bench_answers_every_request_it_counts(forks, capsys):
    """It drives the real scheduler by hand (its handler, its flush): a change there must not
    leave the bench measuring a run that stalls or ends early (it exits when one does)."""
    scheduler_path(["--requests", "600", "--forks", str(forks)])
    out = capsys.readouterr().out
    assert out.startswith("600 requests: ") and "us of the scheduler's own per request" in out
