"""`dagperf search` end to end, against the built-in simulator with a known capacity.

The simulator serves `--sim-max-concurrency` requests at once; past that a request waits a
whole reply for a slot. With single-request sessions and a TTFT objective between one reply
time and two, the answer is known without running anything: the highest concurrency that never
queues is the slot count (this is the README's example search). A rate sweep against one slot
shows the other load parameter: well under the slot's rate the median request does not wait,
far over it every request queues.
"""

from __future__ import annotations

import json
import subprocess
import sys

from emulator import ROOT

SLOTS = 4
REPLY_MS = 60  # one token, no inter-token delay: a reply takes its TTFT


EXAMPLE = ROOT / "examples" / "search" / "single-turn.dag.jsonl"  # the README's search


def search(
    tmp_path, *flags: str, streaming: bool = True
) -> tuple[subprocess.CompletedProcess, dict]:
    directory = tmp_path / "search"
    command = [
        sys.executable, "-m", "dagperf", "search", "--input-file",
        str(EXAMPLE), "--artifact-dir", str(directory),
        *(["--streaming"] if streaming else []),
        "--sim-ttft-ms", str(REPLY_MS), "--sim-itl-ms", "0", "--sim-output-tokens", "1",
        "--workers", "1", "--log-level", "WARNING", *flags,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    results = directory / "search_results.json"
    return done, json.loads(results.read_text()) if results.exists() else {}


def test_a_concurrency_search_finds_the_servers_slot_count(tmp_path):
    slo = f"time_to_first_token:p90:{REPLY_MS * 1.5:g}"  # one reply passes; two do not
    done, results = search(
        tmp_path, "--sim-max-concurrency", str(SLOTS), "--slo", slo, "--search-max", "16"
    )
    assert done.returncode == 0, done.stderr
    assert results["parameter"] == "concurrency" and results["slo"] == [slo]
    assert results["best"] == SLOTS
    steps = results["steps"]
    assert 3 <= len(steps) <= 12
    assert [s["value"] for s in steps][:3] == [1, 2, 4]  # doubling from --search-min
    assert all(s["verdict"] == ("meets" if s["value"] <= SLOTS else "misses") for s in steps)
    for step in steps:
        summary = json.loads((tmp_path / step["artifact_dir"] / "profile_export_aiperf.json")
                             .read_text())  # fmt: skip
        assert summary["dagperf_config"]["load"]["concurrency"] == step["value"]
        window = summary["window"]
        assert step["requests"] == window["requests"] and step["window"]["duration_s"] > 0
        (judgement,) = step["objectives"]
        if step["verdict"] == "meets":  # a p90 met with 95% confidence: 29 values at least
            assert window["requests"]["completed"] >= 29
        if step["requests"]["cut"] == 0:  # nothing censored: the figure is the sample's
            assert step["metrics"][slo] == judgement["figure"]
    assert f"Highest concurrency meeting every objective: {SLOTS}" in done.stdout


def test_a_session_rate_sweep_reports_each_rate_and_the_highest_that_met(tmp_path):
    # One slot of 60 ms: at 3 sessions/s a request rarely queues (its TTFT is the reply's, plus
    # whatever a busy machine adds, well inside 4 replies); at 60/s, 40 requests arrive in two
    # thirds of a second and the median one waits behind some twenty others (about 0.9 s), so
    # even the low end of the median's confidence interval is far above the objective.
    slo = f"time_to_first_token:p50:{REPLY_MS * 4:g}"
    done, results = search(
        tmp_path, "--sim-max-concurrency", "1", "--slo", slo, "--search-parameter",
        "session_rate", "--sweep", "3,60", "--request-count", "40",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [(s["value"], s["verdict"]) for s in results["steps"]] == [(3, "meets"), (60, "misses")]
    assert results["best"] == 3
    first = json.loads((tmp_path / results["steps"][0]["artifact_dir"] /
                        "profile_export_aiperf.json").read_text())  # fmt: skip
    assert first["dagperf_config"]["load"]["request_rate"] == 3


def test_no_load_meeting_the_objectives_exits_4_with_the_steps_written(tmp_path):
    done, results = search(
        tmp_path, "--slo", "time_to_first_token:p50:1", "--search-max", "4",
        "--request-count", "20",
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert results["best"] is None and len(results["steps"]) == 1
    assert "No concurrency tried met every objective." in done.stdout
    assert f"Search results: {tmp_path / 'search' / 'search_results.json'}" in done.stdout


def test_search_flags_are_checked_before_anything_runs(tmp_path):
    for flags, complaint in [
        (["--slo", "time_to_first_token:p99:9", "--concurrency", "2"], "--concurrency: the search"),
        (["--slo", "request_latency:p99:9", "--search-parameter", "session_rate",
          "--fixed-schedule"], "--fixed-schedule: a rate search sets when roots arrive"),
        (["--slo", "request_latency:p99:9", "--search-parameter", "request_rate",
          "--request-rate", "3"], "--request-rate: the search sets it"),
        (["--slo", "request_latency:p99:9", "--benchmark-duration", "20",
          "--max-step-duration", "10"], "--benchmark-duration: the shortest a step runs, above"),
        (["--slo", "ttft:p99:9"], "unknown metric 'ttft'"),
        (["--slo", "request_latency:p99:9", "--sweep", "1,2.5"], "a concurrency is a whole"),
        (["--slo", "request_latency:p99:9", "--search-min", "8", "--search-max", "2"],
         "--search-max: 2 is below the lowest load, 8"),
    ]:  # fmt: skip
        done, results = search(tmp_path, *flags)
        assert done.returncode == 2 and complaint in done.stderr, done.stderr
        assert results == {}
    done, _ = search(tmp_path, "--slo", "time_to_first_token:p99:9", streaming=False)
    assert done.returncode == 2 and "needs --streaming" in done.stderr
