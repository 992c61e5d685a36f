"""Veeksha's shared_prefix and rag trace flavours, run by `dagperf profile` against a recording
simulator: what the server received (prefixes shared by hash id, documents warmed first and left
out of the exports), the same through a Veeksha config, and bad rows refused by line."""

from __future__ import annotations

import csv
import io
import itertools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from dagperf.dataset import DatasetError
from dagperf.dataset.text import text_tokens
from dagperf.simulator import SimRecord, running_simulator
from dagperf.sources import compiler

from runs import RECORDING, Run, finish, profile, spawn

ROOT = Path(__file__).resolve().parent.parent
SHARED_PREFIX = ROOT / "examples" / "traces" / "shared_prefix.jsonl"
RAG = ROOT / "examples" / "traces" / "rag.jsonl"
RAG_CONFIG = ROOT / "examples" / "veeksha" / "rag.yaml"


@pytest.fixture
async def sim():
    async with running_simulator(RECORDING) as running:
        yield running


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def user_texts(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


async def run_config(sim, tmp_path: Path, config: Path, *flags: str) -> Run:
    directory = tmp_path / "artifacts"
    process = await spawn(
        "profile", "--session-config", str(config), "--url", sim.url,
        "--artifact-dir", str(directory), "--quiet", *flags,
    )  # fmt: skip
    return await finish(process, directory, sim)


def served_in_order(run: Run, sim) -> tuple[list[SimRecord], list[SimRecord]]:
    """What the server received, in order: requests left out of the exports, then the rest."""
    measured = {r["metadata"]["x_request_id"] for r in run.records}
    received = sorted(sim.simulator.records, key=lambda s: s.received_ns)
    return (
        [s for s in received if s.request_id not in measured],
        [s for s in received if s.request_id in measured],
    )


# shared_prefix


def check_shared_prefixes(run: Run, block: int) -> None:
    """The example's sessions 1 and 2 start with ids [7, 8], 3 with [7, 10, 11], 4 with [13]."""
    first = {sid: text_tokens(user_texts(run.body(f"{sid}:0"))[0]) for sid in "1234"}
    assert [len(first[sid]) for sid in "1234"] == [2 * block, 2 * block, 3 * block, block]
    assert first["1"] == first["2"]  # the same ids, the same prompt
    assert common_prefix(first["1"], first["3"]) == block  # id 7 shared, then 8 against 10
    assert common_prefix(first["1"], first["4"]) == 0
    assert common_prefix(first["3"], first["4"]) == 0


async def test_equal_leading_hash_ids_send_equal_prefixes_and_later_turns_continue(sim, tmp_path):
    lines = SHARED_PREFIX.read_text().splitlines()
    run = await profile(sim, tmp_path, lines, "--custom-dataset-type", "shared_prefix")
    assert run.returncode == 0, run.stderr
    assert sorted(run.sent_order()) == ["1:0", "1:1", "2:0", "3:0", "3:1", "4:0"]
    check_shared_prefixes(run, 512)
    # A later turn: the first turn, its live reply, then new_input_length tokens of new text.
    later = run.body("1:1")["messages"]
    assert later[:2] == [run.body("1:0")["messages"][0], run.reply("1:0")]
    assert len(later) == 3 and len(text_tokens(later[2]["content"])) == 512
    assert len(text_tokens(run.body("3:1")["messages"][2]["content"])) == 200
    waited = run.server("1:1").received_ns - run.server("1:0").end_ns
    assert waited >= 0.2e9  # wait_after_previous_response_s
    assert [run.body(n)["max_tokens"] for n in ("1:0", "1:1", "4:0")] == [64, 32, 16]
    # The server saw the sharing: session 2 read its whole prompt from the cache, session 3 one
    # block (sessions run one after another: concurrency 1).
    assert run.server("2:0").cached_tokens == 1024
    assert run.server("3:0").cached_tokens == 512


async def test_a_veeksha_shared_prefix_config_uses_its_block_size(sim, tmp_path):
    config = tmp_path / "veeksha.yaml"
    config.write_text(yaml.safe_dump({"session_generator": {
        "type": "trace", "trace_file": str(SHARED_PREFIX),
        "flavor": {"type": "shared_prefix", "block_size": 40, "corpus_file": "traces/c.txt"},
    }}))  # fmt: skip
    run = await run_config(sim, tmp_path, config)
    assert run.returncode == 0, run.stderr
    check_shared_prefixes(run, 40)


# rag


def check_rag_run(run: Run, sim, documents: list[str], kept: list[dict]) -> None:
    """The first row of each document in `documents` was sent first, one at a time and before
    anything measured, and is not in the exports; then each row of `kept` was one measured
    session of one request, its prompt as written."""
    assert run.returncode == 0, run.stderr
    warmup, measured = served_in_order(run, sim)
    every = rows(RAG)
    firsts = [next(r for r in every if r["doc_id"] == doc) for doc in documents]
    assert [user_texts(s.body) for s in warmup] == [[r["prompt_text"]] for r in firsts]
    for earlier, later in itertools.pairwise(warmup):
        assert earlier.end_ns <= later.received_ns  # one at a time
    assert all(w.end_ns <= m.received_ns for w in warmup for m in measured)
    assert {r["metadata"]["benchmark_phase"] for r in run.records} == {"profiling"}
    assert run.summary is not None and run.summary["request_count"]["avg"] == len(kept)
    assert len(run.records) == len(measured) == len(kept)
    assert len({r["metadata"]["conversation_id"] for r in run.records}) == len(kept)
    assert {r["metadata"]["turn_count"] for r in run.records} == {1}
    sent = Counter((m.body["messages"][0]["content"], m.body["max_tokens"]) for m in measured)
    assert all(len(m.body["messages"]) == 1 for m in measured)
    assert sent == Counter((r["prompt_text"], r["output_length"]) for r in kept)
    # Warmed, every measured request found its document in the server's prefix cache.
    assert all(m.cached_tokens >= 16 for m in measured)


async def test_rag_warms_the_most_asked_documents_first_and_measures_every_row(sim, tmp_path):
    lines = RAG.read_text().splitlines()
    run = await profile(sim, tmp_path, lines, "--custom-dataset-type", "rag", "--concurrency", "3")
    # Three questions on the handbook, two on pricing, one on the runbook: warmed in that order.
    check_rag_run(run, sim, ["handbook", "pricing", "runbook"], rows(RAG))


async def test_a_veeksha_rag_config_keeps_its_top_documents_only(sim, tmp_path):
    run = await run_config(sim, tmp_path, RAG_CONFIG, "--concurrency", "2")
    kept = [r for r in rows(RAG) if r["doc_id"] != "runbook"]  # num_documents: 2
    check_rag_run(run, sim, ["handbook", "pricing"], kept)


async def test_rag_warm_up_comes_before_a_requested_warm_up_and_once_over_repeated_runs(
    sim, tmp_path
):
    lines = RAG.read_text().splitlines()
    flags = ["--custom-dataset-type", "rag", "--warmup-request-count", "2"]
    run = await profile(sim, tmp_path, lines, *flags, "--num-profile-runs", "2")
    assert run.returncode == 0, run.stderr
    received = sorted(sim.simulator.records, key=lambda s: s.received_ns)
    assert len(received) == 3 + 2 + 2 * 6  # the warm-ups before the first run only
    firsts = [next(r for r in rows(RAG) if r["doc_id"] == d) for d in ("handbook", "pricing")]
    assert [user_texts(s.body)[0] for s in received[:2]] == [r["prompt_text"] for r in firsts]
    measured = []
    for label in ("run_0001", "run_0002"):
        records = run.directory / "profile_runs" / label / "profile_export.jsonl"
        measured += [json.loads(line)["metadata"]["x_request_id"] for line in records.open()]
    assert len(measured) == 12
    assert not {s.request_id for s in received[:5]} & set(measured)


# bad rows


def problems_of(kind: str, *lines: str) -> list[str]:
    with pytest.raises(DatasetError) as caught:
        compiler(kind)([line.encode() + b"\n" for line in lines], "t.jsonl")
    return [str(p) for p in caught.value.problems]


def test_bad_shared_prefix_rows_are_refused_with_their_lines_all_at_once():
    assert problems_of(
        "shared_prefix",
        '{"session_id": 1, "output_length": 8, "hash_ids": [1, 2]}',
        '{"session_id": 1, "output_length": 8}',
        '{"session_id": 2, "output_length": 8, "hash_ids": []}',
        '{"session_id": 3, "output_length": 8, "hash_ids": [1, -2]}',
        '{"session_id": 4, "hash_ids": [1], "wait_after_previous_response_s": -1}',
        '{"output_length": 8, "hash_ids": [1]}',
        "[1, 2]",
        json.dumps({"session_id": 5, "output_length": 8, "hash_ids": list(range(20_000))}),
    ) == [
        "t.jsonl:2: new_input_length: required on a later row of a session (its new tokens)",
        "t.jsonl:3: hash_ids: a session's first row needs at least one id (its prompt's blocks)",
        "t.jsonl:4: hash_ids.1: Input should be greater than or equal to 0",
        "t.jsonl:5: output_length: Field required",
        "t.jsonl:5: wait_after_previous_response_s: Input should be greater than or equal to 0",
        "t.jsonl:6: session_id: Field required",
        "t.jsonl:7: expected a JSON object (one request per line), got an array",
        "t.jsonl:8: hash_ids: 20,000 blocks of 512 tokens make a prompt longer than 10,000,000 "
        "tokens",
    ]


def test_bad_rag_rows_are_refused_with_their_lines_all_at_once():
    assert problems_of(
        "rag",
        '{"doc_id": "d", "prompt_text": "q", "output_length": 4}',
        '{"doc_id": 1.5, "prompt_text": "q", "output_length": 4}',
        '{"doc_id": "d", "prompt_text": "", "output_length": 4}',
        '{"doc_id": "d", "prompt_text": "q", "output_length": 0, "input_length": "x"}',
        "not json",
    ) == [
        "t.jsonl:2: doc_id: must be a string or an integer, got float",
        "t.jsonl:3: prompt_text: String should have at least 1 character",
        "t.jsonl:4: output_length: Input should be greater than or equal to 1",
        "t.jsonl:4: input_length: Input should be a valid integer",
        "t.jsonl:5: invalid JSON: Expecting value: line 1 column 1 (char 0)",
    ]
    assert problems_of("rag", "") == ["t.jsonl: empty file: a rag trace needs at least one request"]


def test_rag_ranks_documents_by_rows_then_first_appearance_and_shuffles_by_its_seed():
    from dagperf.dataset.formats.rag import read_rag

    order = ["b", "a", "c", 1, "1", "b", "c", "a", "a", "c", "b", "1"]  # b, a, c: three rows
    lines = [
        json.dumps({"doc_id": d, "prompt_text": f"{d}@{i}", "output_length": 1}).encode()
        for i, d in enumerate(order)
    ]

    def read(**options):
        dataset = read_rag(lines, "t.jsonl", **options)
        texts = [[s.nodes[0].payload.messages[0]["content"] for s in specs]
                 for specs in (dataset.warmup, dataset.specs)]  # fmt: skip
        return texts, [s.session_id for s in dataset.specs]

    (warmup, measured), ids = read(num_documents=2)
    assert warmup == ["b@0", "a@1"]  # ties go to the first to appear; its first row
    assert sorted(measured) == ["a@1", "a@7", "a@8", "b@0", "b@10", "b@5"]  # c, 1, "1" left out
    assert len(set(ids)) == 6
    (warmup, measured), _ = read(num_documents=5)
    assert warmup == ["b@0", "a@1", "c@2", "1@4", "1@3"]  # "1" (two rows) before 1 (one)
    assert len(measured) == len(order)
    assert read(num_documents=0)[0][0] == ["b@0"]  # at least one, as Veeksha clamps it
    assert read(seed=3) == read(seed=3) and read(seed=3)[0][1] != read(seed=4)[0][1]


def test_dagperf_validate_names_every_bad_row_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"doc_id": "d", "prompt_text": "q"}\n{"doc_id": [], "prompt_text": "q", '
                   '"output_length": 2}\n')  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "dagperf", "validate", str(bad), "--custom-dataset-type", "rag"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    assert f"{bad}:1: output_length: Field required" in result.stdout + result.stderr
    assert f"{bad}:2: doc_id: must be a string or an integer, got list" in (
        result.stdout + result.stderr
    )


def test_a_rag_trace_in_csv_reads_as_its_json_lines_do():
    """Veeksha reads a trace as CSV too: a quoted prompt may span lines and hold commas, each
    row is numbered by the line it starts on, and cells are typed as pandas types them."""
    from dagperf.dataset.formats.rag import read_rag

    rows = [
        {"doc_id": "handbook", "prompt_text": "Context: a\n\nQuestion: b?", "output_length": 5},
        {"doc_id": 7, "prompt_text": "q, with a comma", "output_length": 3},
        {"doc_id": "handbook", "prompt_text": "again", "output_length": 2},
    ]
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["doc_id", "prompt_text", "output_length", "input_length"])
    writer.writerows([r["doc_id"], r["prompt_text"], r["output_length"], ""] for r in rows)
    as_csv = read_rag(text.getvalue().encode().splitlines(keepends=True), "t.csv", seed=1)
    as_json = read_rag([json.dumps(r).encode() for r in rows], "t.jsonl", seed=1)

    def sent(dataset):
        return [
            [(n.payload.messages, n.payload.max_tokens) for n in spec.nodes]
            for spec in (*dataset.warmup, *dataset.specs)
        ]

    assert sent(as_csv) == sent(as_json)
    assert sorted(s.session_id for s in as_csv.specs) == [
        "line-000002",
        "line-000005",
        "line-000006",
    ]
    bad = 'doc_id,prompt_text,output_length\nd,"two\nlines",4\nd,q,x\n'
    assert problems_of("rag", bad) == ["t.jsonl:4: output_length: Input should be a valid integer"]


def test_a_request_log_in_csv_may_name_its_lengths_as_veeksha_renames_them():
    from dagperf.dataset.formats.request_log import read_request_log

    log = read_request_log(
        [b"num_prefill_tokens,num_decode_tokens,arrived_at\n", b"30,5,0.5\n"], "t.csv"
    )
    (spec,) = log.specs
    (node,) = spec.nodes
    assert (len(text_tokens(node.payload.messages[0]["content"])), node.payload.max_tokens) == (
        30,
        5,
    )
