"""dagperf's verdicts on a real engine (llama.cpp's llama-server, one request slot, the tiny
random-weight llama): requests a short run cuts are censored, not the engine's errors, and the
output-length check runs without `ignore_eos`, on the replies that ended at `max_tokens`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dagfile import conv, encode, turn, user
from engine_stack import Engines

pytestmark = pytest.mark.engine


def profile(url: str, directory: Path, lines: list[dict[str, Any]], *flags: str):
    directory.mkdir(parents=True, exist_ok=True)
    dataset = directory / "data.dag.jsonl"
    dataset.write_bytes(b"".join(encode(*lines)))
    artifacts = directory / "artifacts"
    command = [sys.executable, "-m", "dagperf", "profile", "--input-file", str(dataset)]
    command += ["--url", url, "--artifact-dir", str(artifacts), "--workers", "1", "--streaming"]
    command += flags
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    summary = artifacts / "profile_export_aiperf.json"
    records = artifacts / "profile_export.jsonl"
    health = artifacts / "health_check.json"
    return (
        done,
        json.loads(summary.read_text()) if summary.exists() else None,
        [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else [],
        {c["name"]: c for c in json.loads(health.read_text())["checks"]} if health.exists() else {},
    )


def test_a_run_cut_short_on_a_real_engine_counts_its_cut_requests_apart(engines: Engines, tmp_path):
    """Three long replies at once on one slot, the run stopped 1 s in with 0.5 s of grace: the
    one decoding is cut after its first token, the ones waiting for the slot before theirs.
    The engine failed nothing: the error rate is 0 and the run passes."""
    long = turn(messages=[user("tell a long story")], max_tokens=3500)
    lines = [conv(f"s{i}", long) for i in range(3)]
    done, summary, records, checks = profile(
        engines.urls[0], tmp_path / "cut", lines, "--concurrency", "3",
        "--benchmark-duration", "1", "--benchmark-grace-period", "0.5",
        "--extra-inputs", "ignore_eos:true",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary is not None and summary["request_error_rate"]["avg"] == 0
    cut = [r for r in records if r["metadata"]["cut"] is not None]
    assert cut and summary["cut_request_count"]["avg"] == len(cut)
    assert all(r["error"]["type"] == "RequestCancellationError" for r in cut)
    assert any(r["metadata"]["cut"]["first_token"] is False for r in cut)  # queued for the slot
    assert checks["request_errors"]["status"] != "fail"  # cut ones are not the engine's
    assert "Cut short by the run:" in done.stdout and "Health: passed" in done.stdout


def test_the_output_length_check_runs_on_a_real_engine_without_ignore_eos(
    engines: Engines, tmp_path
):
    """No ignore_eos: replies the engine ended at max_tokens (finish_reason "length") are
    checked on its own usage count; those the model ended itself are early stops, reported."""
    lines = [conv(f"q{i}", turn(messages=[user(f"question {i}")], max_tokens=12))
             for i in range(12)]  # fmt: skip
    done, _, records, checks = profile(engines.urls[0], tmp_path / "lengths", lines)
    assert done.returncode == 0, done.stdout + done.stderr
    reasons = [r["metadata"]["finish_reason"] for r in records]
    assert set(reasons) <= {"length", "stop"} and "length" in reasons, reasons
    lengths = checks["output_length"]
    assert lengths["status"] == "pass", lengths
    assert lengths["details"]["ended_at_max_tokens"] == reasons.count("length")
    assert lengths["details"]["ignore_eos"] == 0
    assert checks["early_stop"]["details"]["early_stops"] == reasons.count("stop")
