"""The export files, in the layouts AIPerf users parse, and consistent with each other."""

from __future__ import annotations

import asyncio
import csv
import json

import numpy as np
import pytest

from dagperf.simulator import running_simulator
from dagperf.vocabulary.catalog import PERCENTILES

from dagfile import conv, stats, turn, user
from runs import RECORDING, profile

LINES = [
    conv("root", turn(messages=[user("plan")], max_tokens=8, forks=["a", "b"])),
    conv("a", turn(messages=[user("a")]), turn(messages=[user("a2")])),
    conv("b", turn(messages=[user("b")])),
]
SECRET = "sk-test-do-not-leak-1234"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run shared by the tests below; they only read its files."""

    async def go():
        async with running_simulator(RECORDING) as sim:
            flags = ("--streaming", "--num-conversations", "4", "--concurrency", "2")
            flags += ("--api-key", SECRET, "--log-level", "DEBUG")
            result = await profile(sim, tmp_path_factory.mktemp("exports"), LINES, *flags)
            result.authorization = {r.headers.get("Authorization") for r in sim.simulator.records}
        return result

    result = asyncio.run(go())
    assert result.returncode == 0, result.stderr
    return result


def test_summary_json_shape(run):
    doc = run.summary
    ttft = doc["time_to_first_token"]
    assert list(ttft) == [
        "unit",
        "avg",
        *(f"p{p}" for p in PERCENTILES),
        "min",
        "max",
        "std",
        "count",
        "sum",
    ]
    assert ttft["unit"] == "ms" and ttft["count"] == 16
    assert doc["request_throughput"]["unit"] == "requests/sec"
    assert doc["request_count"] == {"unit": "requests", "avg": 16.0}
    assert set(doc["branch_stats"]) == set(stats())
    assert doc["branch_stats"]["children_completed"] == 8
    assert doc["was_cancelled"] is False and doc["is_complete"] is True
    assert doc["error_summary"] == []
    assert doc["start_time"] < doc["end_time"]
    assert doc["dagperf_config"]["load"]["num_conversations"] == 4
    assert doc["dagperf_config"]["endpoint"]["api_key"] == "<redacted>"
    assert doc["dagperf_config"]["dataset"]["type"] == "dag_jsonl"
    aiperf = doc["input_config"]  # AIPerf's configuration shape, for its tools
    assert aiperf["datasets"] == [{"name": "default", "type": "file",
                                   "path": doc["dagperf_config"]["dataset"]["path"],
                                   "format": "dag_jsonl"}]  # fmt: skip
    assert aiperf["phases"] == [{"name": "profiling", "type": "concurrency", "concurrency": 2,
                                 "sessions": 4}]  # fmt: skip
    assert "api_key" not in aiperf["endpoint"]


@pytest.mark.parametrize(
    "name",
    [
        "time_to_first_token",
        "request_latency",
        "inter_chunk_latency",
        "output_sequence_length",
        "inter_token_latency",
    ],
)
def test_summary_agrees_with_the_records(run, name):
    values = []
    for r in run.records:
        value = r["metrics"][name]["value"]
        values += value if isinstance(value, list) else [value]
    stats = run.summary[name]
    assert stats["count"] == len(values)
    assert stats["avg"] == pytest.approx(np.mean(values))
    assert stats["std"] == pytest.approx(np.std(values))
    for p in PERCENTILES:
        assert stats[f"p{p}"] == pytest.approx(np.percentile(values, p))


def test_summary_csv_layout(run):
    rows = list(csv.reader((run.directory / "profile_export_aiperf.csv").read_text().splitlines()))
    assert rows[0] == [
        "Metric",
        "avg",
        "min",
        "max",
        "sum",
        "p1",
        "p5",
        "p10",
        "p25",
        "p50",
        "p75",
        "p90",
        "p95",
        "p99",
        "std",
    ]
    blank = rows.index([])
    metric_rows = rows[1:blank]
    labels = [r[0] for r in metric_rows]
    assert labels == sorted(labels)
    assert "Time to First Token (ms)" in labels
    ttft_row = next(r for r in metric_rows if r[0] == "Time to First Token (ms)")
    ttft = dict(zip(rows[0], ttft_row, strict=True))
    assert float(ttft["avg"]) == pytest.approx(run.summary["time_to_first_token"]["avg"], abs=0.005)
    assert rows[blank + 1] == ["Metric", "Value"]
    aggregates = dict(rows[blank + 2 :])
    assert float(aggregates["Request Count (requests)"]) == 16


def test_inputs_json(run):
    inputs = json.loads((run.directory / "inputs.json").read_text())
    by_session = {entry["session_id"]: entry["payloads"] for entry in inputs["data"]}
    assert list(by_session) == ["root", "a", "b"]
    assert by_session["root"] == [
        {
            "messages": [user("plan")],
            "model": "dagperf-sim",
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 8,
        }
    ]
    assert [p["messages"] for p in by_session["a"]] == [[user("a")], [user("a2")]]


def test_records_are_one_per_request_with_units(run):
    assert len(run.records) == 16
    assert len({r["metadata"]["x_request_id"] for r in run.records}) == 16
    for r in run.records:
        assert r["error"] is None
        assert all(set(m) == {"value", "unit"} for m in r["metrics"].values())
        assert r["metadata"]["benchmark_phase"] == "profiling"


def test_the_api_key_reaches_the_server_and_nothing_else(run):
    assert run.authorization == {f"Bearer {SECRET}"}
    for path in run.directory.iterdir():
        assert SECRET not in path.read_text(), path
    assert SECRET not in run.stdout + run.stderr
