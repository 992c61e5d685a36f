"""Session configs and traces through the installed command, as a user runs them: validated,
then run against the built-in simulator."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

MOONCAKE = "examples/traces/mooncake.jsonl"
TIMED = "examples/traces/timed_sessions.jsonl"
LINEAR = "examples/session_configs/linear.yaml"


def dagperf(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "dagperf", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def records(directory) -> list[dict]:
    lines = (directory / "profile_export.jsonl").read_text().splitlines()
    return [json.loads(line)["metadata"] for line in lines]


def test_validate_summarizes_a_session_config_and_each_trace():
    result = dagperf("validate", "--session-config", LINEAR, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["roots"] == summary["conversations"] == 200
    assert 2 * 200 <= summary["requests_per_run"] <= 6 * 200
    result = dagperf("validate", MOONCAKE, "--custom-dataset-type", "mooncake_trace", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert (summary["roots"], summary["requests_per_run"], summary["timed_sessions"]) == (4, 6, 4)
    result = dagperf("validate", TIMED, "--custom-dataset-type", "timed_synthetic_session")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_bad_session_config_names_the_field_without_a_traceback(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text(
        "session_graph:\n  type: linear\n  num_request_generator: {type: fixed, value: 0}\n"
    )
    result = dagperf("profile", "--session-config", str(config), "--artifact-dir", str(tmp_path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "session_graph.num_request_generator.value" in result.stderr
    assert f"{config}: invalid session config, 1 problem(s)" in result.stderr


def test_a_dataset_file_and_a_session_config_are_one_or_the_other(tmp_path):
    result = dagperf("profile", "--input-file", MOONCAKE, "--session-config", LINEAR)
    assert result.returncode == 2 and "one of them" in result.stderr
    result = dagperf(
        "profile", "--input-file", "examples/dag_jsonl/example.dag.jsonl", "--fixed-schedule"
    )
    assert result.returncode == 2 and "--fixed-schedule needs a start time" in result.stderr


def test_a_timed_trace_runs_on_its_own_schedule(tmp_path):
    out = tmp_path / "run"
    args = ["--input-file", MOONCAKE, "--custom-dataset-type", "mooncake_trace", "--quiet"]
    result = dagperf("profile", *args, "--artifact-dir", str(out), "--sim-ttft-ms", "5")
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "profile_export_aiperf.json").read_text())
    assert summary["dagperf_config"]["load"]["fixed_schedule"] is True
    metas = records(out)
    assert len(metas) == 6
    roots = sorted(
        min(m["request_start_ns"] for m in metas if m["x_correlation_id"] == c)
        for c in {m["x_correlation_id"] for m in metas}
    )
    offsets_s = [(t - roots[0]) / 1e9 for t in roots]
    # The trace's sessions start at 0, 0.35, 1.2 and 2.4 s: each nearer its own time than its
    # neighbours', so neither all at once nor one after another (which would be well under
    # 0.1 s apart against a 5 ms server). The bounds are the trace's own: to the millisecond,
    # on a fake clock, is test_dispatcher's; a busy machine may delay the first request, which
    # these offsets count from.
    dues = (0.0, 0.35, 1.2, 2.4)
    edges = [-1.0, *((a + b) / 2 for a, b in itertools.pairwise(dues)), 3.6]
    for offset, low, high in zip(offsets_s, edges, edges[1:], strict=False):
        assert low < offset < high, offsets_s


BRANCHING_1000 = """
seed: 3
num_sessions: 1000
session_graph:
  type: branching
  num_layers_generator: {type: fixed, value: 3}
  layer_width_generator: {type: uniform, min: 1, max: 3}
  fan_out_generator: {type: fixed, value: 2}
  fan_in_generator: {type: fixed, value: 2}
  request_wait_generator: {type: uniform, min: 0.0, max: 0.02}
  single_root: true
prompt:
  input_length: {type: uniform, min: 8, max: 32}
  output_length: {type: fixed, value: 4}
  ignore_eos: true
"""


def test_a_thousand_branching_sessions_pass_the_health_checks_and_a_rerun_agrees(tmp_path):
    config = tmp_path / "branching.yaml"
    config.write_text(BRANCHING_1000)
    out = tmp_path / "run"
    # Slack for lateness a starved machine adds (a test must hold on one; how punctual the
    # dispatch is, bench/compare.py measures): early is still early, and fails.
    result = dagperf(
        "profile", "--session-config", str(config), "--artifact-dir", str(out),
        "--concurrency", "32", "--workers", "2", "--sim-ttft-ms", "1", "--sim-itl-ms", "0",
        "--health-arrival-slack-ms", "5000", timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Health: passed" in result.stdout, result.stdout
    first = json.loads((out / "health_check.json").read_text())
    checks = {c["name"]: c for c in first["checks"]}
    arrival = checks["intra_session_arrival"]
    assert arrival["status"] == "pass" and arrival["details"]["early"] == 0
    assert arrival["details"]["dependent_requests"] >= 1000  # every session has layers below
    assert checks["session_concurrency"]["details"]["max_observed"] <= 32
    assert checks["output_length"]["status"] == "pass"
    assert len({m["root_correlation_id"] for m in records(out)}) == 1000

    (out / "health_check.json").unlink()
    again = dagperf("health", str(out), "--arrival-slack-ms", "5000")
    assert again.returncode == 0, again.stdout + again.stderr
    second = json.loads((out / "health_check.json").read_text())
    assert second["checks"] == first["checks"] and second["passed"] is True


def test_dagperf_health_fails_a_crafted_early_child_and_says_why(tmp_path):
    out = tmp_path / "run"
    args = ["--input-file", "examples/dag_jsonl/example.dag.jsonl", "--quiet"]
    assert dagperf("profile", *args, "--artifact-dir", str(out)).returncode == 0
    lines = (out / "profile_export.jsonl").read_text().splitlines()
    parsed = [json.loads(line) for line in lines]
    child = next(r for r in parsed if r["metadata"]["depends_on"])
    child["metadata"]["request_start_ns"] -= 10**9  # sent a second before its parent ended
    (out / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in parsed))
    result = dagperf("health", str(out))
    assert result.returncode == 1
    assert "FAIL  intra-session arrival" in result.stdout
    report = json.loads((out / "health_check.json").read_text())
    arrival = next(c for c in report["checks"] if c["name"] == "intra_session_arrival")
    assert report["passed"] is False and arrival["details"]["early"] == 1


def test_a_veeksha_config_cancels_a_failed_session_as_veeksha_does_unless_told_not_to(tmp_path):
    """The built-in simulator fails every request: each session's first turn fails. A Veeksha
    config cancels the rest of its session by default (Veeksha's), and the export says so;
    --no-cancel-session-on-failure overrides it (the later turns are skipped all the same,
    since each needs the failed one, but nothing is cancelled)."""
    config = tmp_path / "veeksha.yaml"
    config.write_text(
        "session_generator:\n  type: synthetic\n  session_graph:\n    type: linear\n"
        "    num_request_generator: {type: fixed, value: 3}\n"
        "traffic_scheduler: {type: concurrent}\nruntime: {max_sessions: 2}\n"
    )
    for flags, cancelled in (([], True), (["--no-cancel-session-on-failure"], False)):
        out = tmp_path / f"run-{cancelled}"
        args = ["--session-config", str(config), "--artifact-dir", str(out), "--quiet"]
        result = dagperf("profile", *args, "--sim-error-rate", "1", "--sim-ttft-ms", "1", *flags)
        assert result.returncode == 3, result.stderr  # every request failed
        summary = json.loads((out / "profile_export_aiperf.json").read_text())
        assert summary["dagperf_config"]["load"]["cancel_session_on_failure"] is cancelled
        lines = (out / "session_export.jsonl").read_text().splitlines()
        sessions = [json.loads(line) for line in lines]
        assert [(s["request_count"], s["error_count"]) for s in sessions] == [(1, 1)] * 2
        if cancelled:
            assert [(s["status"], s["cancelled_count"]) for s in sessions] == [("cancelled", 2)] * 2
            assert summary["cancelled_request_count"]["avg"] == 4
        else:
            assert [(s["status"], s["cancelled_count"]) for s in sessions] == [("complete", 0)] * 2
