"""The installed `dagperf` command, run as a user runs it."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dagperf.cli import build_parser, main
from dagperf.cli.reference import reference

ROOT = Path(__file__).resolve().parents[1]

EXAMPLE = "examples/dag_jsonl/example.dag.jsonl"
DAGPERF = shutil.which("dagperf")


def run(*args: str) -> subprocess.CompletedProcess:
    assert DAGPERF, "the dagperf console script is not installed (pip install -e .)"
    return subprocess.run([DAGPERF, *args], capture_output=True, text=True, timeout=60)


def test_validate_summarizes_a_valid_file():
    result = run("validate", EXAMPLE)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{EXAMPLE}: valid dag_jsonl"
    figures = {line[:20].strip(): int(line[20:].replace(",", "")) for line in lines[1:]}
    assert figures == {
        "conversations": 3,
        "roots": 1,
        "requests per run": 5,
        "max agent depth": 1,
        "FORK children": 2,
        "SPAWN children": 0,
    }


def test_validate_json_summary():
    result = run("validate", "examples/dag_jsonl/three-roots.dag.jsonl", "--json")
    summary = json.loads(result.stdout)
    assert (summary["roots"], summary["requests_per_run"], summary["fork_children"]) == (3, 9, 6)


def test_validate_lists_every_problem_as_file_line_message(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"session_id":"root","turns":[{"messages":[{"role":"user"}],"forks":["brnch-a"]}]}\n'
        '{"session_id":"branch-a","turns":[{"messages":[{"role":"user"}]}]}\n'
        "{oops\n"
    )
    result = run("validate", str(bad))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{bad}:1: session 'root' turn 0: branch target 'brnch-a' not declared. Known sessions: "
        "['branch-a', 'root'] (did you mean 'branch-a'?)",
        f"{bad}:3: invalid JSON: key must be a string at line 1 column 2",
        f"{bad}: invalid dag_jsonl, 2 problem(s)",
    ]
    assert result.stderr == ""


@pytest.mark.parametrize("content", [b"", b"\x00\xff\xfe garbage \x80", b"\n\n\n"])
def test_validate_refuses_junk_without_a_traceback(tmp_path, content):
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(content)
    result = run("validate", str(junk))
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.endswith("problem(s)\n")


def test_validate_a_missing_file():
    result = run("validate", "no/such/file.jsonl")
    assert result.returncode == 1
    assert result.stdout == "dagperf: no such file: no/such/file.jsonl\n"


def test_usage_errors_exit_2_with_a_message():
    result = run("validate")
    assert result.returncode == 2 and "give a dataset file or --session-config" in result.stderr
    result = run("simulate", "--error-rate", "2")
    assert result.returncode == 2
    assert "--error-rate: Input should be less than or equal to 1" in result.stderr


def test_simulate_flags_come_from_the_config_model():
    from dagperf.simulator import SimConfig

    help_text = run("simulate", "--help").stdout
    for name in SimConfig.model_fields:
        assert "--" + name.replace("_", "-") in help_text


def test_session_rate_is_the_request_rate_under_its_other_name():
    from dagperf.cli import build_parser
    from dagperf.cli.flags import model_from_flags
    from dagperf.vocabulary.config import LoadConfig

    parser = build_parser()
    by_session = parser.parse_args(["profile", "--session-rate", "2.5"])
    by_request = parser.parse_args(["profile", "--request-rate", "2.5"])
    assert model_from_flags(parser, by_session, LoadConfig) == LoadConfig(request_rate=2.5)
    assert model_from_flags(parser, by_request, LoadConfig) == LoadConfig(request_rate=2.5)
    result = run("profile", "--session-rate", "0")
    assert (
        result.returncode == 2 and "--request-rate: Input should be greater than 0" in result.stderr
    )


def test_a_slice_duration_must_be_a_positive_number_of_seconds(tmp_path):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(
        '{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}]}]}\n'
    )
    for bad in ("0", "-1", "inf"):
        result = run("profile", "--input-file", str(dataset), "--slice-duration", bad)
        assert result.returncode == 2 and "--slice-duration: Input should be" in result.stderr


def test_a_run_works_when_the_temporary_directory_is_too_deep_for_a_socket(tmp_path):
    """The local run's Unix socket path must fit in 107 bytes: a deep TMPDIR (a pod's scratch
    volume under a kubelet's directory, say) falls back to /tmp instead of failing."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    env = dict(os.environ) | {"TMPDIR": str(deep)}
    result = subprocess.run(
        [DAGPERF, "profile", "--input-file", EXAMPLE, "--artifact-dir", str(tmp_path / "a"),
         "--workers", "1", "--quiet"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "a" / "profile_export_aiperf.json").exists()


EXAMPLE_TYPES = {  # every example dataset, by the flags that read it
    "examples/dag_jsonl/example.dag.jsonl": ["--custom-dataset-type", "dag_jsonl"],
    "examples/dag_jsonl/three-roots.dag.jsonl": ["--custom-dataset-type", "dag_jsonl"],
    "examples/search/single-turn.dag.jsonl": ["--custom-dataset-type", "dag_jsonl"],
    "examples/backends/fork-heavy.dag.jsonl": ["--custom-dataset-type", "dag_jsonl"],
    "examples/report/agent-tree.dag.jsonl": ["--custom-dataset-type", "dag_jsonl"],
    "examples/routing/agent-forks.dag.jsonl": ["--custom-dataset-type", "dag_jsonl"],
    "examples/aiperf/single_turn.jsonl": ["--custom-dataset-type", "single_turn"],
    "examples/aiperf/multi_turn.jsonl": ["--custom-dataset-type", "multi_turn"],
    "examples/aiperf/raw_payload.jsonl": ["--custom-dataset-type", "raw_payload"],
    "examples/aiperf/raw_payload_dir/agent-a.jsonl": ["--custom-dataset-type", "raw_payload"],
    "examples/aiperf/raw_payload_dir/agent-b.jsonl": ["--custom-dataset-type", "raw_payload"],
    "examples/aiperf/random_pool.jsonl": ["--custom-dataset-type", "random_pool"],
    "examples/aiperf/random_pool_dir/context.jsonl": ["--custom-dataset-type", "random_pool"],
    "examples/aiperf/random_pool_dir/question.jsonl": ["--custom-dataset-type", "random_pool"],
    "examples/aiperf/sharegpt.json": ["--custom-dataset-type", "sharegpt"],
    "examples/traces/mooncake.jsonl": ["--custom-dataset-type", "mooncake_trace"],
    "examples/traces/timed_sessions.jsonl": ["--custom-dataset-type", "timed_synthetic_session"],
    "examples/traces/request_log.csv": ["--custom-dataset-type", "request_log"],
    "examples/traces/conversations.jsonl": ["--custom-dataset-type", "untimed_content_multi_turn"],
    "examples/traces/shared_prefix.jsonl": ["--custom-dataset-type", "shared_prefix"],
    "examples/traces/rag.jsonl": ["--custom-dataset-type", "rag"],
    "examples/traces/bailian.jsonl": ["--custom-dataset-type", "bailian_trace"],
    "examples/traces/baseten.parquet": ["--custom-dataset-type", "baseten_trace"],
    "examples/traces/burst_gpt.csv": ["--custom-dataset-type", "burst_gpt_trace"],
    "examples/traces/tracelab.jsonl": ["--custom-dataset-type", "tracelab"],
    "examples/traces/sagemaker_data_capture/my-endpoint/AllTraffic/2026/04/29/00/03-18-112-4a1d.jsonl": [  # noqa: E501
        "--custom-dataset-type",
        "sagemaker_data_capture",
    ],
    "examples/traces/sagemaker_data_capture/my-endpoint/AllTraffic/2026/04/29/00/03-20-004-9c2e.jsonl": [  # noqa: E501
        "--custom-dataset-type",
        "sagemaker_data_capture",
    ],
    "examples/aiperf/inputs.json": ["--custom-dataset-type", "inputs_json"],
    "examples/agentic/spine.dag.jsonl": ["--custom-dataset-type", "dag_jsonl"],
    "examples/agentic/coding-agent/coding-agent-00000.json": [
        "--custom-dataset-type",
        "weka_trace",
    ],
    "examples/agentic/coding-agent/coding-agent-00001.json": [
        "--custom-dataset-type",
        "weka_trace",
    ],
    "examples/session_configs/linear.yaml": ["--session-config"],
    "examples/session_configs/branching.yaml": ["--session-config"],
    "examples/veeksha/synthetic.yaml": ["--session-config"],
    "examples/veeksha/trace.yaml": ["--session-config"],
    "examples/veeksha/rag.yaml": ["--session-config"],
    "examples/veeksha/lmeval.yaml": ["--session-config"],
}
# lm-eval-harness's own files, which an example names: the local task examples/veeksha/lmeval.yaml
# reads (it needs the lmeval extra; without it, validating says how to install it).
LMEVAL_TASK = {"examples/lmeval/arith.yaml", "examples/lmeval/arith.jsonl"}
NEEDS_LM_EVAL = {"examples/veeksha/lmeval.yaml"}
# What runs an example rather than being one: the routing comparison's script and its table.
EXAMPLE_SCRIPTS = {
    "examples/routing/compare.sh",
    "examples/routing/table.py",
    "examples/routing/agent_trace.sh",
    "examples/routing/agent_table.py",
    "examples/routing/char_tokenizer.py",
}


def test_every_example_dataset_is_valid(capsys):
    """In this process (`main`), not one `dagperf validate` each: 37 interpreters' start took
    most of its 30 s; the console script's own behaviour is the other tests'. lm-eval's tasks
    are read in a process of their own: lm-eval leaves threads running (tqdm's monitors), and
    a process with threads never forks a dataset reader (test_dataset_store's, after this)."""
    found = {
        str(p)
        for p in Path("examples").rglob("*")
        if p.is_file() and p.parent.name != "examples" and "__pycache__" not in p.parts
    }  # (the examples' scripts, imported by tests, leave bytecode beside them)
    assert found == set(EXAMPLE_TYPES) | LMEVAL_TASK | EXAMPLE_SCRIPTS, (
        "a new example needs its type here"
    )
    lm_eval = importlib.util.find_spec("lm_eval") is not None
    for path, flags in EXAMPLE_TYPES.items():
        args = [*flags, path] if flags == ["--session-config"] else [path, *flags]
        if path in NEEDS_LM_EVAL:
            done = run("validate", *args)
            code, out, err = done.returncode, done.stdout, done.stderr
        else:
            code = main(["validate", *args])
            out, err = capsys.readouterr()
        if path in NEEDS_LM_EVAL and not lm_eval:
            assert "pip install 'dagperf[lmeval]'" in out, out + err
            continue
        assert code == 0, out + err


def test_a_bad_backend_header_is_named_by_its_flag():
    result = run("profile", "--input-file", EXAMPLE, "--backend-header", "bad header")
    assert result.returncode == 2
    assert "--backend-header: not a header name: 'bad header'" in result.stderr


def test_the_flag_reference_is_the_parsers_own():
    """docs/cli.md is generated from the parser; a flag added, renamed or re-documented without
    regenerating it fails here. Every visible flag of every command is in it."""
    parser = build_parser()
    committed = (ROOT / "docs" / "cli.md").read_text()
    assert committed == reference(parser), (
        "docs/cli.md is stale: python -m dagperf.cli.reference > docs/cli.md"
    )
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command in commands.choices.values():
        for action in command._actions:
            if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
                assert all(f"`{o}`" in committed for o in action.option_strings)


def test_a_log_level_is_read_in_either_case():
    parser = build_parser()
    assert parser.parse_args(["profile", "--log-level", "debug"]).log_level == "DEBUG"
    with pytest.raises(SystemExit):
        parser.parse_args(["profile", "--log-level", "loud"])
