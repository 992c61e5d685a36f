"""AIPerf's own dataset types: the same file sends the same requests as AIPerf 0.13 sent for it
(fixtures recorded by bench/aiperf_fixtures.py against the same simulator), and bad rows are
refused with FILE:LINE, all in one pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dagperf.dataset import DatasetError
from dagperf.simulator import SimConfig, running_simulator
from dagperf.sources import compiler, load_graph

from runs import finish, spawn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from aiperf_fixtures import (
    CASES,
    FIXTURES,
    INPUTS,
    conversations_in,
    tokenizer_json,
    without_replies,
)


@pytest.mark.parametrize("name", sorted(CASES))
async def test_the_same_input_sends_what_aiperf_sent(name, tmp_path):
    fixture = json.loads((FIXTURES / f"{name}.json").read_text())
    kind, input_name = CASES[name]
    assert (fixture["type"], fixture["input"]) == (kind, input_name)
    data = INPUTS / input_name
    # ShareGPT's lengths: the tokenizer AIPerf counted with (and the records it dropped mean
    # the kept ones run again to make up the count, in both tools)
    counted = ["--tokenizer", str(tokenizer_json(tmp_path))] if kind == "sharegpt" else []
    async with running_simulator(SimConfig(model="m", record_bodies=True)) as sim:
        directory = tmp_path / "artifacts"
        process = await spawn(
            "profile", "--input-file", str(data), "--custom-dataset-type", kind,
            "--url", sim.url, "--model", "m", "--concurrency", "1",
            "--num-conversations", str(conversations_in(kind, data)), *counted,
            "--artifact-dir", str(directory), "--quiet",
        )  # fmt: skip
        run = await finish(process, directory, sim)
        assert run.returncode == 0, run.stderr
        records = [
            {"body": r.body, "reply": r.reply} for r in sim.simulator.records if r.body is not None
        ]
    assert without_replies(records) == fixture["requests"]


def problems_of(kind: str, *rows: str) -> list[str]:
    with pytest.raises(DatasetError) as caught:
        compiler(kind)([row.encode() + b"\n" for row in rows], "/nonexistent")
    return [str(p) for p in caught.value.problems]


def test_bad_rows_are_refused_with_their_lines_all_at_once():
    found = problems_of(
        "single_turn",
        '{"text": "fine"}',
        '{"text": "a", "texts": ["b"]}',
        '{"text": "a", "image": "/x.png"}',
        '{"text": "a", "output_lenght": 3}',
        '{"role": "user"}',
        '{"text": "a", "timestamp": 5, "delay": 3}',
    )
    assert found == [
        "/nonexistent:2: text and texts cannot be set together",
        "/nonexistent:3: image: images, audio and video are not supported (text only)",
        "/nonexistent:4: output_lenght: Extra inputs are not permitted",
        "/nonexistent:5: a turn needs text: give text or texts",
        "/nonexistent:6: timestamp and delay cannot be set together",
    ]


def test_multi_turn_refusals_name_the_conversation_s_line():
    found = problems_of(
        "multi_turn",
        '{"session_id": "a", "turns": []}',
        '{"turns": [{"text": "x", "session_id": "inner"}]}',
        '{"session_id": "b", "turns": [{"text": "x", "timestamp": 10}]}',
        '{"session_id": "c", "turns": [{"text": "y"}]}',
    )
    assert found == [
        "/nonexistent:1: turns: List should have at least 1 item after validation, not 0",
        "/nonexistent:2: turns: a turn's session_id ('inner') is not read; give the "
        "conversation's session_id instead",
        "/nonexistent:4: timestamp: missing, but line 3 has one: give every conversation a "
        "timestamp or none",
    ]


def test_raw_payload_rows_need_messages_with_roles_and_a_chat_endpoint(tmp_path):
    found = problems_of(
        "raw_payload",
        '{"model": "m", "messages": [{"role": "user", "content": "fine"}]}',
        '{"model": "m"}',
        '{"messages": [{"content": "no role"}]}',
        "[1, 2]",
    )
    assert [p.split(": ", 1)[0] for p in found] == [f"/nonexistent:{n}" for n in (2, 3, 4)]
    assert found[0].endswith("messages: Field required")
    assert "role" in found[1] and "expected a JSON object" in found[2]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match=r"a directory without \*\.jsonl files"):
        load_graph(empty, "raw_payload")
    with pytest.raises(DatasetError, match="a directory; only raw_payload, random_pool, "):
        load_graph(INPUTS / "raw_payload_dir", "dag_jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "dagperf", "profile", "--input-file",
         str(INPUTS / "raw_payload.jsonl"), "--custom-dataset-type", "raw_payload",
         "--endpoint-type", "completions"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "its lines are chat request bodies" in done.stderr


def test_timestamps_are_arrivals_and_sessions_group_rows(tmp_path):
    data = tmp_path / "timed.jsonl"
    data.write_text(
        '{"session_id": "late", "timestamp": 2000, "text": "b"}\n'
        '{"session_id": "early", "timestamp": 500, "text": "a"}\n'
        '{"session_id": "late", "timestamp": 2500, "text": "c"}\n'
    )
    graph = load_graph(data, "single_turn")
    roots = [(t.sessions[0].conversation_id, len(t.nodes)) for t in graph.trees]
    assert roots == [("early", 1), ("late", 2)]
    assert [t.start_s for t in graph.trees] == [0.5, 2.0]
