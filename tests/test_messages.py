"""What a newcomer reads when something is off: the installed `dagperf` command, run as a user
runs it, from a directory of its own (the default artifact directory is relative)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dagperf.cli import build_parser
from dagperf_operator.cli import parser as operator_parser

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = str(ROOT / "examples" / "dag_jsonl" / "example.dag.jsonl")
DAGPERF = shutil.which("dagperf")


def dagperf(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    assert DAGPERF, "the dagperf console script is not installed (pip install -e .)"
    return subprocess.run(
        [DAGPERF, *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )  # fmt: skip


def every_action(parser: argparse.ArgumentParser, name: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                yield from every_action(sub, f"{name} {command}")
        else:
            yield name, action


def test_every_flag_and_argument_has_help():
    actions = [*every_action(build_parser(), "dagperf")]
    actions += every_action(operator_parser(), "dagperf-operator")
    assert len(actions) > 200  # every subcommand was walked
    lacking = [f"{name} {a.option_strings or a.dest}" for name, a in actions if not a.help]
    assert lacking == []


def test_a_mistyped_flag_gets_the_commands_usage_and_the_flag_it_meant(tmp_path):
    result = dagperf(tmp_path, "profile", "--input-file", EXAMPLE, "--concurency", "4")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "usage: dagperf profile [options]  (`dagperf profile --help` lists every option)",
        "dagperf profile: error: unrecognized arguments: --concurency 4 "
        "(did you mean --concurrency?)",
    ]
    assert not (tmp_path / "artifacts").exists()
    result = dagperf(tmp_path, "report", "--outptu=x", str(tmp_path))
    assert "dagperf report: error: unrecognized argument: --outptu=x (did you mean --output?)" in (
        result.stderr
    )
    result = dagperf(tmp_path, "validate", EXAMPLE, "--zzzz")  # nothing close: no guess
    assert result.stderr.splitlines()[-1] == (
        "dagperf validate: error: unrecognized argument: --zzzz"
    )


@pytest.mark.parametrize("command", ["profile", "validate"])
def test_a_missing_input_file_is_named_and_nothing_else(tmp_path, command):
    missing = tmp_path / "no" / "such.jsonl"
    args = [str(missing)] if command == "validate" else ["--input-file", str(missing)]
    result = dagperf(tmp_path, command, *args)
    assert result.returncode == (1 if command == "validate" else 2)
    assert (result.stdout + result.stderr).splitlines() == [f"dagperf: no such file: {missing}"]
    config = dagperf(tmp_path, command, "--session-config", "nope.yaml")
    assert (config.stdout + config.stderr).splitlines() == ["dagperf: no such file: nope.yaml"]


def test_a_second_run_goes_to_a_new_default_directory_and_says_so(tmp_path):
    quick = ("--sim-ttft-ms", "0", "--sim-itl-ms", "0", "--quiet")
    first = dagperf(tmp_path, "profile", "--input-file", EXAMPLE, *quick)
    assert first.returncode == 0, first.stderr
    default = Path("artifacts") / "example-chat-concurrency1"
    records = (tmp_path / default / "profile_export.jsonl").read_bytes()
    assert "earlier run" not in first.stderr and f"Artifacts: {default}" in first.stdout
    for number in (2, 3):
        again = dagperf(tmp_path, "profile", "--input-file", EXAMPLE, *quick)
        assert again.returncode == 0, again.stderr
        moved = default.with_name(f"{default.name}-{number}")
        assert (
            f"dagperf: {default} holds an earlier run; this one goes to {moved} "
            "(--artifact-dir DIR to choose)"
        ) in again.stderr
        assert f"Artifacts: {moved}" in again.stdout
        assert (tmp_path / moved / "profile_export_aiperf.json").exists()
    assert (tmp_path / default / "profile_export.jsonl").read_bytes() == records  # untouched


def test_a_named_artifact_directory_that_holds_files_is_written_over_and_said(tmp_path):
    quick = ("--sim-ttft-ms", "0", "--sim-itl-ms", "0", "--quiet")
    named = tmp_path / "mine"
    first = dagperf(tmp_path, "profile", "--input-file", EXAMPLE, "--artifact-dir", str(named),
                    *quick)  # fmt: skip
    assert first.returncode == 0 and "already holds files" not in first.stderr, first.stderr
    second = dagperf(tmp_path, "profile", "--input-file", EXAMPLE, "--artifact-dir", str(named),
                     *quick)  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert (
        f"dagperf: {named} already holds files (--artifact-dir); this run's files replace "
        "those of the same names"
    ) in second.stderr
    assert not (tmp_path / "artifacts").exists()  # as named, no other


def test_a_600_deep_fork_chain_keeps_the_summary_lines_short(tmp_path):
    """Lines that list one entry per depth (or per branch mode) name a few, then count the
    rest: the console's width does not grow with the dataset."""
    chain = tmp_path / "chain.jsonl"
    with chain.open("w") as f:
        for i in range(600):
            turn: dict = {"messages": [{"role": "user", "content": f"step {i}"}]}
            if i < 599:
                turn["forks"] = [f"c{i + 1}"]
            f.write(json.dumps({"session_id": f"c{i}", "turns": [turn]}) + "\n")
    result = dagperf(tmp_path, "profile", "--input-file", str(chain), "--sim-ttft-ms", "0",
                     "--sim-itl-ms", "0", "--quiet")  # fmt: skip
    assert result.returncode == 0, result.stderr
    (depths,) = [line for line in result.stdout.splitlines() if line.startswith("By agent depth")]
    assert depths.count(" req") == 5  # four depths named, then the rest counted
    assert "| 596 more depths (596 req): see dag_report in profile_export_aiperf.json" in depths
    assert max(len(line) for line in result.stdout.splitlines()) < 400


def test_logging_follows_stderr_after_a_command_ran_in_process(monkeypatch):
    """`dagperf profile` run in-process (as the tests and a notebook do) sets up logging while
    stderr is one stream; when that one is closed and another takes its place, later log lines
    (kopf's, say) go to the new one instead of failing as '--- Logging error ---' blocks."""
    import io
    import logging

    from dagperf.runtime.logs import setup_logging

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        first, second = io.StringIO(), io.StringIO()
        monkeypatch.setattr("sys.stderr", first)
        setup_logging()
        logging.getLogger("kopf.activities").info("Initial authentication has been initiated.")
        first.close()
        monkeypatch.setattr("sys.stderr", second)
        logging.getLogger("kopf.activities").info("Initial authentication has finished.")
        assert second.getvalue().endswith(" INFO Initial authentication has finished.\n")
        assert "Logging error" not in second.getvalue()
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
