"""validate == profile: one set of limits, checked by the loader both use, so whatever `validate`
accepts runs to the end, and whatever it refuses, `profile` refuses with the same FILE:LINE
message before anything starts. Chains of any depth run without recursion."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dagperf.simulator import SimConfig, running_simulator

from dagfile import conv, turn
from runs import profile

FAST = SimConfig(ttft_ms=0, itl_ms=0, output_tokens=2)
HI = [{"role": "user", "content": "hi"}]


def dagperf(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "dagperf", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def dag(**fields) -> str:
    return json.dumps({"session_id": "a", "turns": [{"messages": HI, **fields}]})


REFUSED = [
    ("dag_jsonl", dag(max_tokens=2**70), "turns.0.max_tokens: 1180591620717411303424 does not "
     "fit in 64 bits, as a server reads integers (session 'a')"),
    ("dag_jsonl", dag(max_tokens=2**40), "turns.0.max_tokens: must be at most 2147483647"),
    ("dag_jsonl", dag(delay=1e308), "turns.0.delay: Input should be less than or equal to "
     "86400000"),
    ("dag_jsonl", dag()[:-3] + ', "delay": 1e999}]}', "turns.0.delay: inf is not a finite number"),
    ("dag_jsonl", dag(extra={"seed": 2**64}), "turns.0.extra.seed: 18446744073709551616 does "
     "not fit in 64 bits"),
    ("dag_jsonl", dag()[:-3] + ', "extra": {"temperature": NaN}}]}',
     "turns.0.extra.temperature: nan is not a finite number"),
    ("dag_jsonl", dag()[:-3] + ', "extra": {"x": ' + "[" * 5000 + "]" * 5000 + "}}]}",
     "nested more than 64 levels deep; no request needs that (session 'a')"),
    ("mooncake_trace", json.dumps({"timestamp": 1e308, "input_length": 5}),
     "timestamp: Input should be less than or equal to 604800000"),
    ("mooncake_trace", json.dumps({"input_length": 2**40}),
     "input_length: Input should be less than or equal to 10000000"),
    ("mooncake_trace", json.dumps({"text_input": "hi", "output_length": 2**31}),
     "output_length: Input should be less than or equal to 2147483647"),
    ("timed_synthetic_session", json.dumps({"session_id": "s", "arrived_at": 0,
     "num_prefill_tokens": 5, "num_decode_tokens": 5, "session_context": {"node_id": "n",
     "wait_after_ready": 1e9}}), "wait_after_ready: Input should be less than or equal to 86400"),
    ("session_graph", json.dumps({"session_id": "g", "nodes": [{"id": "n", "messages": HI,
     "wait_after_ready": 1e300}]}), "wait_after_ready: Input should be less than or equal to"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "line", "message"), REFUSED, ids=range(len(REFUSED)))
def test_validate_and_profile_refuse_alike_before_anything_starts(tmp_path, kind, line, message):
    data = tmp_path / "data.jsonl"
    data.write_text(line + "\n")
    out = tmp_path / "out"
    checked = dagperf("validate", str(data), "--custom-dataset-type", kind)
    ran = dagperf("profile", "--input-file", str(data), "--custom-dataset-type", kind,
                  "--artifact-dir", str(out))  # fmt: skip
    assert (checked.returncode, ran.returncode) == (1, 2), ran.stderr
    for result in (checked.stdout, ran.stderr):
        assert f"{data}:1: " in result and message in result, result
        assert "Traceback" not in result
    assert not out.exists()  # refused before the simulator, the workers or the exports


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--request-rate", "inf", "Input should be a finite number"),
        ("--request-rate", "1e300", "less than or equal to 1000000"),
        ("--benchmark-duration", "1e308", "less than or equal to 2592000"),
        ("--request-timeout-seconds", "nan", "Input should be a finite number"),
        ("--benchmark-grace-period", "inf", "Input should be a finite number"),
    ],
)
def test_rates_and_durations_a_clock_cannot_keep_are_usage_errors(tmp_path, flag, value, message):
    result = dagperf("profile", "--input-file", "examples/dag_jsonl/example.dag.jsonl",
                     "--artifact-dir", str(tmp_path / "out"), flag, value)  # fmt: skip
    assert result.returncode == 2
    assert f"{flag}: " in result.stderr and message in result.stderr


def test_a_session_config_past_the_limits_is_refused(tmp_path):
    config = tmp_path / "huge.yaml"
    config.write_text(
        "num_sessions: 100000000000\nsession_graph:\n  type: linear\n"
        "  num_request_generator: {type: fixed, value: 100000000000}\n"
        "  request_wait_generator: {type: fixed, value: 1.0e+300}\n"
    )
    result = dagperf("validate", "--session-config", str(config))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    out = result.stdout
    assert "num_sessions: Input should be less than or equal to 10000000" in out
    assert "num_request_generator.value: a count must be at most 10,000,000" in out
    assert "request_wait_generator.value: seconds must be at most 86,400 (a day)" in out


DEPTH = 1500  # past Python's recursion limit of 1000, as any recursive step would hit it


def long_conversation() -> list:
    return [conv("a", *[turn() for _ in range(DEPTH)])]


def fork_chain() -> list:
    return [conv(f"c{i}", turn(forks=[f"c{i + 1}"] if i < DEPTH - 1 else [])) for i in range(DEPTH)]


def spawn_chain() -> list:
    """Each session spawns the next and waits for it at its second turn."""
    return [
        conv(f"s{i}", turn(spawns=[f"s{i + 1}"]), turn()) if i < DEPTH - 1 else conv(f"s{i}")
        for i in range(DEPTH)
    ]


def fan_out() -> list:
    children = [f"k{i}" for i in range(3000)]
    return [conv("root", turn(forks=children)), *[conv(k) for k in children]]


@pytest.mark.parametrize(
    ("lines", "requests"),
    [(long_conversation, DEPTH), (fork_chain, DEPTH), (spawn_chain, 2 * DEPTH - 1),
     (fan_out, 3001)],
    ids=["1500-turns", "1500-deep-fork", "1500-deep-spawn", "3000-fork-fan-out"],
)  # fmt: skip
async def test_what_validate_accepts_runs_to_the_end(tmp_path, lines, requests):
    data = lines()
    async with running_simulator(FAST) as sim:
        run = await profile(sim, tmp_path, data, "--workers", "2", timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert len(run.records) == requests
    assert [r for r in run.records if r["error"]] == []
    assert run.summary["is_complete"] is True
