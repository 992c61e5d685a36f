"""Timeslice exports (--slice-duration): windows computed from hand-written records, then a real
run whose windows account for every request."""

from __future__ import annotations

import csv
import json

import msgspec

from dagperf.exports.timeslices import timeslices
from dagperf.simulator import SimConfig, running_simulator

from dagfile import conv, turn
from runs import profile

S = 1_000_000_000  # ns


def record(start_s: float, latency_ms: float, error: bool = False) -> dict:
    start = int(start_s * S)
    return {
        "metadata": {"request_start_ns": start, "request_end_ns": start + int(latency_ms * 1e6)},
        "metrics": {} if error else {"request_latency": {"value": latency_ms, "unit": "ms"}},
        "error": {"code": 500, "type": "x", "message": "x"} if error else None,
    }


def test_requests_fall_in_the_window_their_start_falls_in(tmp_path):
    path = tmp_path / "profile_export.jsonl"
    lines = [record(100.0, 10), record(100.4, 30), record(100.5, 50), record(101.7, 70),
             record(101.8, 0, error=True)]  # fmt: skip
    path.write_bytes(b"".join(msgspec.json.encode(line) + b"\n" for line in lines))
    slices = timeslices(path, first_start_ns=100 * S, slice_s=0.5)
    assert [
        (s["timeslice_index"], s["request_count"], s["error_request_count"]) for s in slices
    ] == [
        (0, 2, 0),
        (1, 1, 0),
        (3, 2, 1),
    ]  # fmt: skip  (window 2, 101.0-101.5 s, had none)
    first = slices[0]["request_latency"]
    assert (first["avg"], first["min"], first["max"], first["p50"]) == (20, 10, 30, 20)
    assert slices[0]["request_throughput"]["avg"] == 4.0  # 2 requests in half a second
    assert (slices[2]["start_s"], slices[2]["end_s"]) == (1.5, 2.0)


async def test_a_run_sliced_accounts_for_every_request_in_some_window(tmp_path):
    lines = [conv(f"c{i}", turn(), turn()) for i in range(6)]
    async with running_simulator(SimConfig(ttft_ms=15, itl_ms=1, output_tokens=4)) as sim:
        run = await profile(
            sim, tmp_path, lines, "--slice-duration", "0.02", "--concurrency", "2", "--streaming"
        )
    assert run.returncode == 0, run.stderr
    exported = json.loads((run.directory / "profile_export_aiperf_timeslices.json").read_text())
    slices = exported["timeslices"]
    assert len(slices) >= 2 and sum(s["request_count"] for s in slices) == len(run.records) == 12
    assert exported["dagperf_config"]["load"]["concurrency"] == 2
    with (run.directory / "profile_export_aiperf_timeslices.csv").open() as f:
        rows = list(csv.DictReader(f))
    counts = [int(r["Value"]) for r in rows if r["Metric"] == "Request Count"]
    assert sum(counts) == 12
    assert {r["Stat"] for r in rows if r["Metric"] == "Time to First Token"} == {
        "avg", "min", "max", "p50", "p90", "p95", "p99"
    }  # fmt: skip
