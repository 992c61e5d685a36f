"""Verdicts that hold against an engine-like server, end to end: real `dagperf` processes (the
driver, its workers, the built-in simulator as a `dagperf simulate` child) against the
simulator's engine mode: two sequence slots, later requests waiting in line for their first
token, replies of 600 ms.

The issue's reproduction, scaled down: with the step cut short while requests still wait for a
slot, a search used to answer the highest load tried (their TTFTs were dropped) and a profile
counted the run's own cut as the endpoint's errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from emulator import ROOT

SINGLE_TURN = ROOT / "examples" / "search" / "single-turn.dag.jsonl"
ENGINE = ["--sim-slots", "2", "--sim-ttft-ms", "50", "--sim-itl-ms", "50",
          "--sim-output-tokens", "12", "--sim-prefill-ms-per-token", "0"]  # fmt: skip
REPLY_MS = 50 + 11 * 50  # a reply holds its slot this long; the third request waits for it


def dagperf(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dagperf", *args, "--workers", "1", "--log-level", "WARNING"]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def lines(directory: Path, name: str = "profile_export.jsonl") -> list[dict]:
    return [json.loads(line) for line in (directory / name).read_text().splitlines()]


def test_a_search_over_an_engine_with_two_slots_answers_two(tmp_path):
    """Concurrency 2 never queues (TTFT: a prefill); 3 and 4 make a request wait a whole reply
    for its first token. Each step is cut 0.2 s after its floor, with requests still in line:
    they are censored, so the steps above 2 miss whatever their TTFTs would have been."""
    out = tmp_path / "search"
    slo = f"time_to_first_token:p90:{REPLY_MS * 2 // 3}"
    done = dagperf(
        "search", "--input-file", str(SINGLE_TURN), "--streaming", *ENGINE, "--slo", slo,
        "--search-min", "2", "--search-max", "8", "--benchmark-duration", "1",
        "--benchmark-grace-period", "0.2", "--artifact-dir", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((out / "search_results.json").read_text())
    assert results["best"] == 2 and results["best_range"] is None
    verdicts = {s["value"]: s["verdict"] for s in results["steps"]}
    assert verdicts == {2: "meets", 4: "misses", 3: "misses"}
    for step in results["steps"]:
        requests = step["requests"]
        summary = json.loads((Path(step["artifact_dir"]) / "profile_export_aiperf.json")
                             .read_text())  # fmt: skip
        assert requests == summary["window"]["requests"]
        assert requests["failed"] == 0 and summary["request_error_rate"]["avg"] == 0
        assert step["window"]["duration_s"] >= 1  # the duration is a floor
        (judgement,) = step["objectives"]
        assert judgement["values"] == requests["completed"] + requests["cut"]
    met = next(s for s in results["steps"] if s["value"] == 2)
    assert met["requests"]["completed"] >= 29  # a p90 met with 95% confidence
    assert "Highest concurrency meeting every objective: 2" in done.stdout


def test_a_profile_cut_short_reports_no_error_and_counts_its_cut_requests_apart(tmp_path):
    """Concurrency 4 on two slots, stopped 1.2 s in with 0.4 s of grace: the requests still
    waiting or decoding are cut. They are not the endpoint's errors."""
    out = tmp_path / "profile"
    done = dagperf(
        "profile", "--input-file", str(SINGLE_TURN), "--streaming", *ENGINE,
        "--concurrency", "4", "--benchmark-duration", "1.2", "--benchmark-grace-period", "0.4",
        "--artifact-dir", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "profile_export_aiperf.json").read_text())
    assert summary["request_error_rate"]["avg"] == 0.0
    assert summary["error_request_count"]["avg"] == 0 and summary["error_summary"] == []
    cut = summary["cut_request_count"]["avg"]
    assert cut >= 1
    records = lines(out)
    cut_records = [r for r in records if r["metadata"]["cut"] is not None]
    assert len(cut_records) == cut == summary["window"]["requests"]["cut"]
    for r in cut_records:  # as AIPerf's readers expect a cancelled request, and what was seen
        assert r["error"]["type"] == "RequestCancellationError" and r["error"]["code"] == 499
        assert r["metadata"]["was_cancelled"] is True
        seen = r["metadata"]["cut"]
        assert seen["waited_ms"] > 0 and seen["first_token"] is not None
        assert seen["first_token"] == (seen["time_to_first_token_ms"] is not None)
    assert all(s["error_count"] == 0 for s in lines(out, "session_export.jsonl"))
    assert "Request Error Rate (%): 0.00" in done.stdout
    assert "Cut short by the run:" in done.stdout and "Health: passed" in done.stdout


def test_a_run_where_every_request_failed_says_so_without_a_table_and_exits_3(tmp_path):
    out = tmp_path / "failed"
    done = dagperf("profile", "--input-file", str(SINGLE_TURN), "--sim-error-rate", "1",
                   "--artifact-dir", str(out))  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    assert "dagperf | LLM metrics" not in done.stdout  # no table of zeros
    assert "no request succeeded: 20 failed" in done.stdout
    assert "FAIL  endpoint errors        every request failed (20)" in done.stdout
    assert "Health: failed: endpoint errors" in done.stdout and "Health: passed" not in done.stdout
    assert "the endpoint failed the run: every request failed (20)" in done.stderr


def test_the_output_length_check_runs_on_a_server_that_refuses_ignore_eos(tmp_path):
    """The simulator refusing unknown body fields with 422, as transformers serve does: with
    ignore_eos every request fails; without it, replies that end at max_tokens are checked on
    the server's usage, and replies that end before it by themselves are reported apart."""
    dataset = tmp_path / "capped.dag.jsonl"  # every turn asks for 16 tokens at most
    turn = {"messages": [{"role": "user", "content": "a question"}], "max_tokens": 16}
    dataset.write_text("".join(json.dumps({"session_id": f"q{i}", "turns": [turn]}) + "\n"
                               for i in range(20)))  # fmt: skip
    strict = ["--input-file", str(dataset), "--sim-strict-fields", "--sim-ttft-ms", "1",
              "--sim-itl-ms", "0"]  # fmt: skip
    refused = dagperf("profile", *strict, "--extra-inputs", "ignore_eos:true",
                      "--artifact-dir", str(tmp_path / "refused"))  # fmt: skip
    assert refused.returncode == 3 and "422" in refused.stderr, refused.stderr
    for api in ("chat", "completions", "messages", "responses"):
        out = tmp_path / api
        done = dagperf("profile", *strict, "--streaming", "--endpoint-type", api,
                       "--sim-output-tokens", "64", "--artifact-dir", str(out))  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert {r["metadata"]["finish_reason"] for r in lines(out)} == {"length"}
        assert "PASS  output length          20 replies (20 ended at the limit)" in done.stdout
    early_dir = tmp_path / "early"
    early = dagperf("profile", *strict, "--streaming", "--sim-output-tokens", "8",
                    "--artifact-dir", str(early_dir))  # fmt: skip
    assert early.returncode == 0, early.stdout + early.stderr
    assert "WARN  early stops" in early.stdout
    assert "20 of 20 replies ended by themselves" in early.stdout
    assert "Health: passed" in early.stdout  # a finding, not a failure


def test_a_session_objective_with_no_completed_session_is_never_met(tmp_path):
    """Sessions of three 600 ms turns, and steps that may measure at most 1 s: no session ends
    within a step, so the objective is undecided (never met) and the search has no answer."""
    dataset = tmp_path / "three-turns.dag.jsonl"
    turn = {"messages": [{"role": "user", "content": "next"}]}
    dataset.write_text("".join(json.dumps({"session_id": f"s{i}", "turns": [turn] * 3}) + "\n"
                               for i in range(4)))  # fmt: skip
    out = tmp_path / "search"
    done = dagperf(
        "search", "--input-file", str(dataset), "--streaming", *ENGINE,
        "--slo", "session_duration:p50:60000", "--sweep", "1", "--max-step-duration", "1",
        "--benchmark-grace-period", "0.1", "--artifact-dir", str(out),
    )  # fmt: skip
    assert done.returncode == 4, done.stdout + done.stderr
    results = json.loads((out / "search_results.json").read_text())
    (step,) = results["steps"]
    assert step["verdict"] == "undecided" and results["best"] is None
    assert step["sessions"]["completed"] == 0 and step["sessions"]["cut"] >= 1
    assert "session_duration:p50:60000" in step["why"]
    assert "undecided" in done.stdout
