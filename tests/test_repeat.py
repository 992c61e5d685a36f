"""Repeated runs (--num-profile-runs): Student's t, the aggregate's arithmetic on summaries
written by hand, and three real runs on the built-in simulator."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from dagperf.exports.aggregate import aggregate, t_critical

from emulator import ROOT

DATASET = ROOT / "examples" / "dag_jsonl" / "three-roots.dag.jsonl"


@pytest.mark.parametrize(
    ("confidence", "df", "table"),
    [(0.95, 1, 12.706), (0.95, 4, 2.776), (0.95, 9, 2.262), (0.99, 4, 4.604), (0.90, 30, 1.697)],
)
def test_t_critical_values_match_the_tables(confidence, df, table):
    assert t_critical(confidence, df) == pytest.approx(table, abs=5e-4)


def summary(throughput: float, ttft_p50: float) -> dict:
    return {
        "request_throughput": {"unit": "requests/sec", "avg": throughput},
        "time_to_first_token": {"unit": "ms", "p50": ttft_p50, "std": throughput / 10},
    }


def test_the_aggregate_gives_mean_spread_and_interval_and_flags_what_disagrees():
    runs = [summary(10, 100), summary(12, 100), summary(14, 100)]
    result = aggregate(runs, ["run_0001", "run_0002", "run_0003"], [], 0.95)
    throughput = result["metrics"]["request_throughput_avg"]
    se = 2 / math.sqrt(3)
    assert (throughput["mean"], throughput["std"], throughput["min"], throughput["max"]) == (
        12,
        2,
        10,
        14,
    )
    assert throughput["se"] == pytest.approx(se)
    assert throughput["ci_low"] == pytest.approx(12 - 4.3027 * se, abs=1e-3)
    assert throughput["ci_high"] == pytest.approx(12 + 4.3027 * se, abs=1e-3)
    assert throughput["cv"] == pytest.approx(1 / 6) and throughput["unstable"] is True
    ttft = result["metrics"]["time_to_first_token_p50"]
    assert (ttft["std"], ttft["cv"], ttft["unstable"], ttft["unit"]) == (0, 0, False, "ms")
    spread = result["metrics"]["time_to_first_token_std"]
    assert spread["cv"] > 0.1 and spread["unstable"] is False  # a spread is not judged
    assert result["metadata"]["num_successful_runs"] == 3
    with pytest.raises(ValueError, match="needs 2"):
        aggregate(runs[:1], ["run_0001"], [{"label": "run_0002", "error": "x"}], 0.95)


def profile(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "dagperf", "profile", "--input-file", str(DATASET),
        "--artifact-dir", str(tmp_path / "runs"), "--workers", "1", "--log-level", "WARNING",
        *flags,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


def test_three_runs_share_a_workload_warm_up_once_and_are_aggregated(tmp_path):
    done = profile(tmp_path, "--num-profile-runs", "3", "--warmup-request-count", "2",
                   "--streaming", "--confidence-level", "0.9")  # fmt: skip
    assert done.returncode == 0, done.stderr
    runs = tmp_path / "runs" / "profile_runs"
    summaries = [json.loads((runs / f"run_000{k}" / "profile_export_aiperf.json").read_text())
                 for k in (1, 2, 3)]  # fmt: skip
    loads = [s["dagperf_config"]["load"] for s in summaries]
    assert [load["warmup_request_count"] for load in loads] == [2, 0, 0]
    assert {load["random_seed"] for load in loads} == {42}
    result = json.loads(
        (tmp_path / "runs" / "aggregate" / "profile_export_aiperf_aggregate.json").read_text()
    )
    meta = result["metadata"]
    assert (meta["num_successful_runs"], meta["confidence_level"]) == (3, 0.9)
    assert meta["run_labels"] == ["run_0001", "run_0002", "run_0003"]
    count = result["metrics"]["request_count_avg"]
    assert (count["mean"], count["std"]) == (9, 0)  # every run sent the whole dataset
    ttft = result["metrics"]["time_to_first_token_p50"]
    values = [s["time_to_first_token"]["p50"] for s in summaries]
    assert ttft["mean"] == pytest.approx(sum(values) / 3)
    assert ttft["min"] == min(values) and ttft["max"] == max(values)
    assert "3 runs, mean and 90% interval" in done.stdout
    assert (tmp_path / "runs" / "aggregate" / "profile_export_aiperf_aggregate.csv").exists()


def test_when_too_few_runs_finish_there_is_no_aggregate_and_the_exit_says_so(tmp_path):
    done = profile(tmp_path, "--num-profile-runs", "2", "--sim-error-rate", "1")
    assert done.returncode == 1
    assert "run_0001: failed: every request failed" in done.stdout
    assert "no aggregate: 0 run(s) finished" in done.stdout
    assert not (tmp_path / "runs" / "aggregate").exists()


@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (
            ["--num-profile-runs", "0"],
            "--num-profile-runs: Input should be greater than or equal to 1",
        ),
        (["--num-profile-runs", "3", "--confidence-level", "1.5"], "--confidence-level"),
    ],
)
def test_bad_repeat_flags_are_refused_before_a_run(tmp_path, flags, complaint):
    done = profile(tmp_path, *flags)
    assert done.returncode == 2 and complaint in done.stderr
    assert not (tmp_path / "runs").exists()
