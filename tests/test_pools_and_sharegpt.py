"""AIPerf's random_pool and ShareGPT inputs beyond the recorded fixtures: a pool run sends only
requests AIPerf sent for the same pools (its draws are its own), drawn with replacement, as many
as the run asks, by the seed; ShareGPT keeps the turns and records AIPerf's source keeps, with
the context a record asks for; bad rows are refused with FILE:LINE, all in one pass."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from dagperf.dataset import DatasetError
from dagperf.dataset.formats import ReadOptions
from dagperf.simulator import SimConfig, running_simulator
from dagperf.sources import compiler, load_graph

from runs import finish, spawn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from aiperf_fixtures import FIXTURES, INPUTS, POOLS, without_replies


async def sent(directory: Path, data: Path, kind: str, *flags: str) -> list[dict]:
    """The bodies one `dagperf profile` run sent, in order, live replies marked."""
    async with running_simulator(SimConfig(model="m", record_bodies=True)) as sim:
        process = await spawn(
            "profile", "--input-file", str(data), "--custom-dataset-type", kind,
            "--url", sim.url, "--model", "m", "--concurrency", "1",
            "--artifact-dir", str(directory), "--quiet", *flags,
        )  # fmt: skip
        run = await finish(process, directory, sim)
        assert run.returncode == 0, run.stderr
        records = [
            {"body": r.body, "reply": r.reply} for r in sim.simulator.records if r.body is not None
        ]
    return without_replies(records)


def key(body: dict) -> str:
    return json.dumps(body, sort_keys=True)


def rows_in(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


@pytest.mark.parametrize("name", sorted(POOLS))
async def test_a_pool_sends_only_what_aiperf_sent_drawn_with_replacement(name, tmp_path):
    kind, input_name = POOLS[name]
    data = INPUTS / input_name
    fixture = json.loads((FIXTURES / f"{name}.json").read_text())
    assert (fixture["type"], fixture["input"]) == (kind, input_name)
    aiperf_sent = {key(b) for b in fixture["requests"]}
    pools = sorted(data.iterdir()) if data.is_dir() else [data]
    # AIPerf sent every combination of one row per pool, so any draw of dagperf's is checkable
    assert len(aiperf_sent) == math.prod(rows_in(pool) for pool in pools)
    draws = ["--num-conversations", "30", "--random-seed", "1"]
    bodies = await sent(tmp_path / "a", data, kind, *draws)
    assert len(bodies) == 30
    assert {key(b) for b in bodies} <= aiperf_sent
    assert 1 < len({key(b) for b in bodies}) < 30  # random, and rows drawn again


async def test_pool_draws_follow_the_seed_and_the_request_count(tmp_path):
    data = INPUTS / "random_pool.jsonl"
    runs = [
        await sent(
            tmp_path / str(i), data, "random_pool", "--request-count", "12", "--random-seed", seed
        )
        for i, seed in enumerate(("3", "3", "4"))
    ]
    assert [len(r) for r in runs] == [12, 12, 12]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_a_pool_draws_100_by_default_as_aiperf_sizes_it():
    data = INPUTS / "random_pool_dir"
    assert load_graph(data, "random_pool").root_count == 100
    assert load_graph(data, "random_pool", options=ReadOptions(draws=7)).root_count == 7


def problems_of(kind: str, *rows: str) -> list[str]:
    with pytest.raises(DatasetError) as caught:
        compiler(kind)([row.encode() + b"\n" for row in rows], "/nonexistent")
    return [str(p) for p in caught.value.problems]


def test_pool_rows_hold_text_only_and_are_refused_all_at_once(tmp_path):
    found = problems_of(
        "random_pool",
        '{"text": "fine"}',
        '{"text": "a", "output_length": 3, "session_id": "s"}',
        '{"type": "single_turn", "text": "a"}',
        '{"text": "a", "image": "/x.png"}',
        '{"texts": []}',
        '{"text": "a", "txt": "b"}',
    )
    assert found == [
        "/nonexistent:2: session_id: a random_pool row holds text only (AIPerf ignores "
        "session_id, output_length there); use single_turn for per-request fields",
        "/nonexistent:3: type: Input should be 'random_pool'",
        "/nonexistent:4: image: images, audio and video are not supported (text only)",
        "/nonexistent:5: a turn needs text: give text or texts",
        "/nonexistent:6: txt: Extra inputs are not permitted",
    ]
    pools = tmp_path / "pools"
    pools.mkdir()
    (pools / "a.jsonl").write_text('{"text": "fine"}\n{"delay": 5, "text": "x"}\n')
    (pools / "b.jsonl").write_text("\n")
    (pools / ".hidden").write_text("not read")
    with pytest.raises(DatasetError) as caught:
        load_graph(pools, "random_pool")
    assert [str(p) for p in caught.value.problems] == [
        f"{pools / 'a.jsonl'}:2: delay: a random_pool row holds text only (AIPerf ignores "
        "delay there); use single_turn for per-request fields",
        f"{pools / 'b.jsonl'}: empty file: a pool needs at least one row",
    ]
    (pools / "a.jsonl").unlink()
    (pools / "b.jsonl").unlink()
    with pytest.raises(DatasetError, match="a directory without files"):
        load_graph(pools, "random_pool")


def record(*messages: tuple[str, str], **fields: object) -> dict:
    return {"conversations": [{"from": r, "value": v} for r, v in messages], **fields}


def words(n: int) -> str:
    return " ".join(["w"] * n)


def test_sharegpt_keeps_the_turns_and_records_aiperf_keeps(tmp_path):
    """Without --tokenizer a text's tokens are its words and marks: the bounds are AIPerf's
    (a prompt of 4 to 1024 tokens, a reply of 4 or more, 2048 together)."""
    records = [
        record(("human", words(3)), ("gpt", words(9)), id="short-prompt"),
        record(("human", words(4)), ("gpt", words(4)), id="smallest"),
        record(("human", words(1024)), ("gpt", words(1024)), id="largest"),
        record(("human", words(1025)), ("gpt", words(9)), id="long-prompt"),
        record(("human", words(1000)), ("gpt", words(1049)), id="long-together"),
        record(("human", words(9)), ("gpt", words(3)), id="short-reply"),
        record(
            ("human", words(9)),
            ("gpt", words(9)),
            ("human", words(2)),
            ("gpt", words(9)),
            id="one-turn-out",
        ),
        record(
            ("system", "Be brief."),
            ("human", "one two three four"),
            ("bing", "x"),
            ("gpt", "five six seven eight nine"),
            id="other-roles-dropped",
        ),
        record(
            ("human", "first asks this"),
            ("human", "then asks that one"),
            ("gpt", "and gets an answer"),
            id="answered-last",
        ),
        record(
            ("human", ""),
            ("gpt", words(5)),
            ("human", words(5)),
            ("gpt", words(6)),
            id="empty-pair-skipped",
        ),
        record(("gpt", words(5)), ("human", words(5)), id="never-answered"),
        {"id": "too-few", "conversations": [{"from": "human", "value": words(5)}]},
        {"id": "no-roles", "conversations": [{"value": words(5)}, {"value": words(7)}]},
    ]
    data = tmp_path / "sharegpt.json"
    data.write_text(json.dumps(records, indent=1))
    kept = load_graph(data, "sharegpt")
    turns = {
        tree.sessions[0].conversation_id: [
            (n.payload.messages[-1]["content"], n.payload.extra["max_completion_tokens"])
            for n in tree.nodes
        ]
        for tree in kept.trees
    }
    assert turns == {
        "smallest": [(words(4), 4)],
        "largest": [(words(1024), 1024)],
        "other-roles-dropped": [("one two three four", 5)],
        "answered-last": [("then asks that one", 4)],
        "empty-pair-skipped": [(words(5), 6)],
        "no-roles": [(words(5), 7)],
    }
    lines = tmp_path / "sharegpt.jsonl"  # JSON lines read the same
    lines.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [t.nodes for t in load_graph(lines, "sharegpt").trees] == [t.nodes for t in kept.trees]


def test_sharegpt_without_a_sendable_record_is_refused(tmp_path):
    data = tmp_path / "sharegpt.json"
    data.write_text(json.dumps([record(("human", "Hi"), ("gpt", "Hello there, how are you?"))]))
    with pytest.raises(DatasetError, match="no conversation to send: none of its 1 records"):
        load_graph(data, "sharegpt")


async def test_a_sharegpt_record_may_set_its_context_mode(tmp_path):
    """Default: the live reply before the next prompt (AIPerf's); deltas_with_responses and
    message_array_with_responses: the recorded reply instead."""
    chat = [
        ("human", "What is a KV cache?"),
        ("gpt", "Cached keys and values of earlier tokens."),
        ("human", "And prefix caching?"),
        ("gpt", "Reusing them for a shared prefix."),
    ]
    modes = ("deltas_with_responses", "message_array_with_responses")
    records = [record(*chat, id="live")] + [record(*chat, id=m, context_mode=m) for m in modes]
    data = tmp_path / "sharegpt.json"
    data.write_text(json.dumps(records))
    bodies = await sent(tmp_path / "a", data, "sharegpt")
    ask = [{"role": "user", "content": chat[0][1]}]
    then = {"role": "user", "content": chat[2][1]}
    answered = [*ask, {"role": "assistant", "content": chat[1][1]}, then]
    live = [*ask, {"role": "assistant", "content": "<live reply>"}, then]
    assert [b["messages"] for b in bodies] == [ask, live, ask, answered, ask, answered]
    assert [b["max_completion_tokens"] for b in bodies] == [8, 7] * 3  # words and marks


def test_bad_sharegpt_records_are_refused_with_their_lines_all_at_once():
    found = problems_of(
        "sharegpt",
        "[",
        ' {"conversations": [{"from": "human", "value": 5}, {"from": "gpt", "value": "x"}]},',
        " [1, 2],",
        ' {"convos": []},',
        ' {"conversations": [{"from": "human", "value": "a b c d"}, "oops"]},',
        ' {"conversations": [], "context_mode": "message_array_without_responses"},',
        ' {"conversations": [], "context_mode": "bogus"}',
        "]",
    )
    assert found == [
        "/nonexistent:2: conversations[0].value: a string, got int",
        "/nonexistent:3: expected a JSON object (one conversation record)",
        "/nonexistent:4: conversations: required, a list of messages with 'from' and 'value'",
        "/nonexistent:5: conversations[1]: expected an object with 'from' and 'value'",
        "/nonexistent:6: context_mode: context mode 'message_array_without_responses' is not "
        "supported: it would need live replies merged into each turn's full message array, "
        "which no format defines; use 'message_array_with_responses' (turns sent as written) "
        "or a deltas mode",
        "/nonexistent:7: context_mode: one of deltas_without_responses, deltas_with_responses, "
        "message_array_with_responses, got 'bogus'",
    ]
    assert problems_of(
        "sharegpt", "[", ' {"conversations": []},', ' {"conversations": [}', "]"
    ) == [
        "/nonexistent:3: invalid JSON: Expecting value"  # past it, records cannot be told apart
    ]
    assert problems_of("sharegpt", '{"conversations": []}', "[1]", '{"conversations": 1}') == [
        "/nonexistent:2: expected a JSON object (one conversation record per line)",
        "/nonexistent:3: conversations: required, a list of messages with 'from' and 'value'",
    ]


def test_a_tokenizer_that_cannot_be_read_is_named_by_its_flag():
    done = subprocess.run(
        [sys.executable, "-m", "dagperf", "profile", "--input-file",
         str(INPUTS / "sharegpt.json"), "--custom-dataset-type", "sharegpt",
         "--tokenizer", "/nonexistent/tokenizer.json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--tokenizer: no tokenizer file at" in done.stderr
