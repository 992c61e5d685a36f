"""AIPerf 0.13's flat trace families: bailian_trace, baseten_trace, burst_gpt_trace,
sagemaker_data_capture and inputs_json. Each example compiles into the sessions and requests
AIPerf sends for it (bodies, limits, arrivals, waits, history edges), each refusal names its
FILE:LINE (a table's row), all in one pass, and the examples run end to end against the
simulator with the bodies on the wire that AIPerf sent for them."""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from dagperf.apis import APIS
from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.dataset.formats.bailian_trace import load_bailian_trace, read_bailian_trace
from dagperf.dataset.formats.baseten_trace import read_baseten_trace
from dagperf.dataset.formats.burst_gpt_trace import read_burst_gpt_trace
from dagperf.dataset.formats.inputs_json import read_inputs_json
from dagperf.dataset.formats.sagemaker_data_capture import (
    load_sagemaker_dir,
    read_sagemaker_data_capture,
)
from dagperf.dataset.loader import DatasetError
from dagperf.dataset.specs import ContextMode, GraphNode, Payload, TraceDataset
from dagperf.dataset.text import text_tokens
from dagperf.exports.inputs import write_inputs
from dagperf.graph.sessions import compile_sessions
from dagperf.simulator import SimConfig, running_simulator
from dagperf.sources import load_graph

from dagfile import check_tree, encode
from runs import finish, spawn

ROOT = Path(__file__).resolve().parent.parent
TRACES, AIPERF = ROOT / "examples" / "traces", ROOT / "examples" / "aiperf"
CAPTURES = TRACES / "sagemaker_data_capture"
SOURCE = "trace.jsonl"


def refusals(read, lines: list[bytes], source: str = SOURCE) -> list[str]:
    with pytest.raises(DatasetError) as caught:
        read(lines, source)
    return [str(problem) for problem in caught.value.problems]


def prompt(node: GraphNode) -> list[str]:
    (message,) = node.payload.messages
    assert message["role"] == "user"
    return text_tokens(message["content"])


def shared(a: list[str], b: list[str]) -> int:
    """How many leading tokens two prompts share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def wire(payload: Payload, endpoint_type: str = "chat", **settings: Any) -> dict[str, Any]:
    """The body dagperf sends for a payload, before any history."""
    api = APIS[endpoint_type]
    endpoint = EndpointConfig(url="http://127.0.0.1:1", model="m", endpoint_type=endpoint_type)
    endpoint = endpoint.model_copy(update=settings)
    return api.body(api.params(payload, endpoint), payload.messages)


def compiled(dataset: TraceDataset):
    graph = compile_sessions(SOURCE, dataset.specs, dataset.loader_mode)
    for tree in graph.trees:
        check_tree(tree)
    return list(graph.trees)


def bailian(**fields: Any) -> dict[str, Any]:
    return {"chat_id": 1, "timestamp": 0.0, "input_length": 16, "output_length": 4, **fields}


# bailian_trace


def test_the_bailian_example_is_its_conversations_with_shared_blocks_and_gaps():
    dataset = load_bailian_trace(TRACES / "bailian.jsonl")
    assert dataset.timed and dataset.loader_mode is ContextMode.DELTAS_WITHOUT_RESPONSES
    assert [s.session_id for s in dataset.specs] == ["100", "200", "300", "400"]
    assert [s.start_s for s in dataset.specs] == [0.0, 0.4, 1.5, 2.8]
    chat, other, untagged, orphan = dataset.specs
    assert [n.key for n in chat.nodes] == ["100", "101", "102"]
    assert [n.payload.max_tokens for n in chat.nodes] == [12, 8, 6]
    assert [n.parents for n in chat.nodes] == [(), (0,), (1,)]
    assert [n.history for n in chat.nodes] == [None, 0, 1]
    assert [round(n.wait_s, 6) for n in chat.nodes] == [0.0, 1.1, 1.2]  # the recorded gaps
    first, second, third = (prompt(n) for n in chat.nodes)
    assert [len(first), len(second), len(third)] == [48, 70, 90]  # input_length tokens
    # blocks of 16: ids [1,2,3], [1,2,3,4,5], [1,2,3,4,11,12] and [1,2,7] share their leading ids
    assert shared(first, second) == 48 and shared(second, third) == 64
    assert shared(first, prompt(other.nodes[0])) == 32
    assert len(prompt(untagged.nodes[0])) == 24 and shared(first, prompt(untagged.nodes[0])) == 0
    assert [n.key for n in orphan.nodes] == ["400"]  # its parent 399 is not in the file
    trees = compiled(dataset)
    assert [n.history for n in trees[0].nodes] == [None, 0, 1]
    assert all(n.keep_reply for n in trees[0].nodes)  # each turn continues the live reply
    assert [t.start_s for t in trees] == [0.0, 0.4, 1.5, 2.8]


def test_bailian_blocks_lay_out_as_aiperf_lays_them():
    dataset = read_bailian_trace(
        encode(
            bailian(chat_id=1, input_length=20, hash_ids=[5, 6]),  # 6 is a partial block of 4
            bailian(chat_id=2, input_length=40, hash_ids=[5, 7]),  # past the ids: fresh text
            bailian(chat_id=3, input_length=0),  # no ids, no length: one token, as AIPerf
        ),
        SOURCE,
    )
    a, b, c = (prompt(s.nodes[0]) for s in dataset.specs)
    assert [len(a), len(b), len(c)] == [20, 40, 1]
    assert shared(a, b) == 16 and b[16] != a[16]


def test_bailian_turns_follow_turn_numbers_and_reach_a_first_turn():
    dataset = read_bailian_trace(
        encode(
            bailian(chat_id=12, parent_chat_id=11, turn=3, timestamp=9.0),
            bailian(chat_id=10, turn=1, timestamp=2.0),
            bailian(chat_id=11, parent_chat_id=10, turn=2, timestamp=5.0),
            bailian(chat_id=21, parent_chat_id=20, turn=2, timestamp=1.0),  # 20 was cut off
        ),
        SOURCE,
    )
    cut, chat = dataset.specs  # by arrival
    assert (cut.session_id, cut.start_s, [n.key for n in cut.nodes]) == ("21", 1.0, ["21"])
    assert chat.session_id == "10" and [n.key for n in chat.nodes] == ["10", "11", "12"]
    assert [n.wait_s for n in chat.nodes] == [0.0, 3.0, 4.0]


def test_bailian_refusals_name_every_line_at_once():
    found = refusals(
        read_bailian_trace,
        encode(
            bailian(chat_id=1, hash_ids=[1, 2]),  # 16 tokens: 2 ids need more than 16
            bailian(chat_id=2, input_length=20, hash_ids=[3, 4]),  # 4 is a block of 4 here
            bailian(chat_id=3, input_length=40, hash_ids=[3, 4, 5]),  # ... and of 16 here
            bailian(chat_id=2),
            bailian(chat_id=4, output_length=0),
            bailian(chat_id=5, output_lenght=3),
            bailian(chat_id="6"),
            bailian(chat_id=7, input_length=-1),
            {"chat_id": 8, "input_length": 3, "output_length": 1},
            "{not json",
            bailian(chat_id=9, parent_chat_id=10),
            bailian(chat_id=10, parent_chat_id=9),
            bailian(chat_id=11, parent_chat_id=11),
        ),
    )
    assert found == [
        "trace.jsonl:1: hash_ids: 2 ids of 16-token blocks need an input_length over 16, got "
        "16: every id but the last is a whole block",
        "trace.jsonl:3: hash_ids: id 4 is a block of 16 tokens here but of 4 on line 2: an "
        "id is one block of one size",
        "trace.jsonl:4: chat_id: 2 is also line 2's: one request each",
        "trace.jsonl:5: output_length: Input should be greater than or equal to 1",
        "trace.jsonl:6: output_lenght: Extra inputs are not permitted",
        "trace.jsonl:7: chat_id: Input should be a valid integer",
        "trace.jsonl:8: input_length: Input should be greater than or equal to 0",
        "trace.jsonl:9: timestamp: Field required",
        "trace.jsonl:10: invalid JSON: key must be a string at line 1 column 2",
        *(
            f"trace.jsonl:{line}: parent_chat_id: following the parents of chat_id {cid} "
            "loops back without reaching a first turn (parent_chat_id -1, or a parent not in "
            "the file)"
            for line, cid in ((11, 9), (12, 10), (13, 11))
        ),
    ]
    assert refusals(read_bailian_trace, []) == [
        "trace.jsonl: empty file: a bailian_trace file needs at least one request line"
    ]


def test_a_gzipped_bailian_trace_reads_as_the_plain_one(tmp_path):
    packed = tmp_path / "bailian.jsonl.gz"
    packed.write_bytes(gzip.compress((TRACES / "bailian.jsonl").read_bytes()))
    plain, unpacked = (load_graph(p, "bailian_trace") for p in (TRACES / "bailian.jsonl", packed))
    assert [[n.payload for n in t.nodes] for t in unpacked.trees] == [
        [n.payload for n in t.nodes] for t in plain.trees
    ]


# burst_gpt_trace


def test_the_burst_gpt_example_is_one_request_a_row_on_its_schedule():
    dataset = load_graph(TRACES / "burst_gpt.csv", "burst_gpt_trace")
    assert [t.start_s for t in dataset.trees] == [0.0, 1.0, 1.0, 3.0, 6.0]
    nodes = [t.nodes[0] for t in dataset.trees]
    assert [n.payload.max_tokens for n in nodes] == [35, 20, 18, 64, 12]
    lengths = [len(text_tokens(n.payload.messages[0]["content"])) for n in nodes]
    assert lengths == [212, 96, 472, 30, 150]
    assert all(len(t.nodes) == 1 for t in dataset.trees) and all(n.delay_s == 0 for n in nodes)
    body = wire(nodes[0].payload)
    assert sorted(body) == ["max_tokens", "messages", "model", "stream"] and not body["stream"]


def test_burst_gpt_reads_its_three_columns_wherever_they_are():
    dataset = read_burst_gpt_trace(
        encode(
            "",
            "Log Type,Response tokens,Model,Request tokens,Timestamp",
            "Conversation log,7,GPT-4,0,120.5",
            "API log,9,ChatGPT,5,100",
        ),
        "b.csv",
    )
    late, early = (s for s in sorted(dataset.specs, key=lambda s: s.session_id))
    assert (early.start_s, late.start_s) == (0.0, 20.5)  # from the first request
    assert [s.session_id for s in dataset.specs] == ["row-000004", "row-000003"]
    assert len(prompt(late.nodes[0])) == 1  # 0 request tokens: one token, as AIPerf sends
    assert late.nodes[0].payload.max_tokens == 7


def test_burst_gpt_refuses_rows_aiperf_would_drop_or_stop_on():
    header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
    found = refusals(
        read_burst_gpt_trace,
        encode(
            header,
            "0,ChatGPT,10,5,15,Conversation log",
            "1,ChatGPT,ten,5,15,Conversation log",
            "2,ChatGPT,12.0,5,17,Conversation log",
            "3,ChatGPT,10,0,10,Conversation log",
            "nan,ChatGPT,10,5",
            "5,ChatGPT",
            "6,ChatGPT,-3,5,2,API log",
            "700000,ChatGPT,3,5,8,API log",
        ),
        "b.csv",
    )
    assert found == [
        "b.csv:3: Request tokens: expected a whole number of tokens, got 'ten'",
        "b.csv:4: Request tokens: expected a whole number of tokens, got '12.0'",
        "b.csv:5: Response tokens: a reply's limit must be between 1 and 2,147,483,647, got 0 "
        "(a failed request: drop the row)",
        "b.csv:6: Timestamp: 'nan' is not a finite number",
        "b.csv:7: Request tokens: missing (the row is shorter than the header)",
        "b.csv:7: Response tokens: missing (the row is shorter than the header)",
        "b.csv:8: Request tokens: must be between 0 and 10,000,000, got -3",
        "b.csv:9: Timestamp: 700000 s is 700000 s after the first request; a trace spans at "
        "most a week (604800 s): cut a window of it",
    ]
    assert refusals(read_burst_gpt_trace, encode("Timestamp,Request tokens", "1,2"), "b.csv") == [
        "b.csv:1: the CSV header needs the columns 'Response tokens' (it has 'Timestamp', "
        "'Request tokens')"
    ]
    assert refusals(read_burst_gpt_trace, encode(header), "b.csv") == [
        "b.csv: no requests: a burst_gpt_trace file needs a header and a row"
    ]


# sagemaker_data_capture


def capture(
    request: Any,
    time: str = "2026-04-29T00:00:00Z",
    encoding: str = "JSON",
    output: Any = None,
    **record: Any,
) -> dict[str, Any]:
    def entry(body: Any) -> dict[str, Any]:
        data = body if isinstance(body, str) else json.dumps(body)
        if encoding == "BASE64" and not isinstance(body, str):
            data = base64.b64encode(data.encode()).decode()
        return {"data": data, "encoding": encoding}

    data: dict[str, Any] = {"endpointInput": entry(request)}
    if output is not None:
        data["endpointOutput"] = entry(output)
    return {"captureData": data, "eventMetadata": {"inferenceTime": time}, **record}


def ask(text: str = "hi", **body: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **body}


def test_the_capture_example_replays_its_requests_in_time_order():
    dataset = load_graph(CAPTURES, "sagemaker_data_capture")
    assert [t.root.conversation_id for t in dataset.trees] == [
        "7f0c9a1e-0001", "7f0c9a1e-0002", "7f0c9a1e-0003", "7f0c9a1e-0004",
    ]  # fmt: skip
    assert [t.start_s for t in dataset.trees] == [0.0, 1.5, 2.0, 3.0]
    bodies = [wire(t.nodes[0].payload) for t in dataset.trees]
    assert bodies[0] == {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is a KV cache?"},
        ],
        "model": "m",
        "stream": False,
        "max_completion_tokens": 24,  # the captured max_tokens; its temperature is not sent
    }
    assert bodies[1]["max_completion_tokens"] == 16  # BASE64, max_completion_tokens
    assert bodies[1]["tools"][0]["function"]["name"] == "lookup"
    assert [m["role"] for m in bodies[2]["messages"]] == ["user", "assistant", "user"]
    assert bodies[3] == {  # no limit captured, and its stream flag is the run's
        "messages": [{"role": "user", "content": "Name three KV-cache eviction policies."}],
        "model": "m",
        "stream": False,
    }


def test_one_capture_file_reads_alone_and_names_records_by_position_without_ids():
    dataset = read_sagemaker_data_capture(
        encode(
            capture(ask("b"), "2026-04-29T00:00:02+00:00"),
            capture(ask("a"), "2026-04-29T00:00:00.250"),  # no zone: UTC
        ),
        "c.jsonl",
    )
    assert [s.session_id for s in dataset.specs] == ["capture-000000", "capture-000001"]
    assert [s.start_s for s in dataset.specs] == [0.0, 1.75]
    assert [s.nodes[0].payload.messages[0]["content"] for s in dataset.specs] == ["a", "b"]


def test_capture_refusals_name_every_line_at_once():
    fine = capture(ask(max_tokens=5), output={"usage": {"prompt_tokens": 3}})
    found = refusals(
        read_sagemaker_data_capture,
        encode(
            fine,
            {"captureData": fine["captureData"]},
            capture(ask(), time="yesterday"),
            {"eventMetadata": {"inferenceTime": "2026-04-29T00:00:00Z"}},
            capture("a,b,c", encoding="CSV"),
            capture("not base64!", encoding="BASE64"),
            capture("{nope"),
            capture({"prompt": "completions, not chat"}),
            capture({"messages": [{"content": "no role"}]}),
            capture(ask(max_tokens=0)),
            capture(ask(max_completion_tokens="many")),
            capture(ask(), output={"usage": {"prompt_tokens": "some"}}),
            {**fine, "captureData": {**fine["captureData"], "endpointOutput": None}},
            "[1, 2]",
        ),
        "c.jsonl",
    )
    head = "c.jsonl:{}: captureData.endpoint{}"
    assert found == [
        "c.jsonl:2: eventMetadata.inferenceTime: required, the request's ISO 8601 time",
        "c.jsonl:3: eventMetadata.inferenceTime: not an ISO 8601 time: 'yesterday'",
        "c.jsonl:4: captureData.endpointInput: required, an object with the request",
        head.format(5, "Input: the captured request has no 'messages' (encoding 'CSV'): only "
                    "OpenAI chat requests can be replayed"),
        head.format(6, "Input.data: not BASE64 text: Invalid base64-encoded string: number of "
                    "data characters (9) cannot be 1 more than a multiple of 4"),
        head.format(7, "Input.data: the decoded payload is not JSON: Expecting property name "
                    "enclosed in double quotes: line 1 column 2 (char 1)"),
        head.format(8, "Input: the captured request has no 'messages' (encoding 'JSON'): only "
                    "OpenAI chat requests can be replayed"),
        head.format(9, "Input.data: messages: each message must have a 'role' string, but "
                    "message at index 0 does not"),
        head.format(10, "Input.data: max_tokens: a reply's limit must be a count between 1 "
                    "and 2,147,483,647, got 0"),
        head.format(11, "Input.data: max_completion_tokens: a reply's limit must be a count "
                    "between 1 and 2,147,483,647, got 'many'"),
        head.format(12, "Output.data: usage.prompt_tokens: a count, got 'some'"),
        head.format(13, "Output: expected an object"),
        "c.jsonl:14: expected a JSON object (one capture record per line)",
    ]  # fmt: skip


def test_a_capture_directory_is_every_jsonl_below_it_and_its_problems_name_their_files(
    tmp_path,
):
    hour = tmp_path / "ep" / "AllTraffic" / "2026" / "04" / "29" / "00"
    hour.mkdir(parents=True)
    (hour / "b.jsonl").write_text(json.dumps(capture(ask("second"), "2026-04-29T00:00:05Z")))
    (tmp_path / "a.jsonl").write_text(json.dumps(capture(ask("first"), "2026-04-29T00:00:01Z")))
    (tmp_path / "notes.txt").write_text("not a capture")
    dataset = load_sagemaker_dir(tmp_path)
    assert [s.nodes[0].payload.messages[0]["content"] for s in dataset.specs] == [
        "first", "second",
    ]  # fmt: skip
    assert [s.start_s for s in dataset.specs] == [0.0, 4.0]
    (hour / "c.jsonl").write_text("\n" + json.dumps(capture(ask(), time="soon")))
    with pytest.raises(DatasetError) as caught:
        load_graph(tmp_path, "sagemaker_data_capture")
    assert [str(p) for p in caught.value.problems] == [
        f"{hour / 'c.jsonl'}:2: eventMetadata.inferenceTime: not an ISO 8601 time: 'soon'"
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match=r"a directory without \*\.jsonl files"):
        load_graph(empty, "sagemaker_data_capture")


# inputs_json


def test_the_inputs_example_sends_each_payload_as_written_in_its_sessions():
    dataset = read_inputs_json((AIPERF / "inputs.json").read_bytes().splitlines(True), "i.json")
    assert dataset.loader_mode is ContextMode.MESSAGE_ARRAY_WITH_RESPONSES and not dataset.timed
    assert [(s.session_id, len(s.nodes)) for s in dataset.specs] == [("chat-1", 2), ("chat-2", 1)]
    written = json.loads((AIPERF / "inputs.json").read_text())["data"]
    for spec, session in zip(dataset.specs, written, strict=True):
        # as written, whatever the run's model, streaming or extra inputs
        sent = [
            wire(n.payload, model="other", streaming=True, extra_inputs={"top_k": 1})
            for n in spec.nodes
        ]
        assert sent == session["payloads"]
    trees = compiled(dataset)
    assert [n.history for n in trees[0].nodes] == [None, None] and trees[0].nodes[1].deps == (0,)


def test_a_completions_payload_is_sent_whole():
    body = {"prompt": "Once upon a time", "model": "m", "max_tokens": 9, "stream": False}
    doc = json.dumps({"data": [{"session_id": "c", "payloads": [body]}]})
    (spec,) = read_inputs_json([doc.encode()], "i.json").specs
    assert wire(spec.nodes[0].payload, "completions") == body


def test_dagperf_replays_its_own_inputs_json(tmp_path):
    graph = load_graph(AIPERF / "multi_turn.jsonl", "multi_turn")
    endpoint = EndpointConfig(url="http://127.0.0.1:1", model="m")
    write_inputs(tmp_path / "inputs.json", graph, endpoint)
    written = json.loads((tmp_path / "inputs.json").read_text())["data"]
    replay = load_graph(tmp_path / "inputs.json", "inputs_json")
    assert [t.root.conversation_id for t in replay.trees] == [s["session_id"] for s in written]
    assert [[wire(n.payload) for n in t.nodes] for t in replay.trees] == [
        s["payloads"] for s in written
    ]


def test_inputs_json_refusals_name_the_session_s_line():
    doc = """{
  "data": [
    {"session_id": "a", "payloads": [{"messages": [{"role": "user", "content": "x"}]}]},
    {"session_id": "a", "payloads": [{"prompt": "y"}]},
    {"session_id": 7, "payloads": [{}]},
    {"session_id": "b", "payloads": []},
    {"session_id": "c"},
    {"session_id": "d", "payloads": [{"messages": [{"content": "no role"}]}], "note": 1},
    {"session_id": "e", "payloads": ["not an object"]},
    "no session"
  ],
  "version": 2
}"""
    found = refusals(read_inputs_json, doc.encode().splitlines(True), "i.json")
    assert found == [
        "i.json:4: session_id: 'a' is also the session on line 3: each session_id once",
        "i.json:5: session_id: Input should be a valid string",
        "i.json:6: payloads: List should have at least 1 item after validation, not 0",
        "i.json:7: payloads: Field required",
        "i.json:8: payloads: payload 0: each message must have a 'role' string, but message "
        "at index 0 does not",
        "i.json:8: note: Extra inputs are not permitted",
        "i.json:9: payloads.0: Input should be a valid dictionary",
        "i.json:10: expected a session object with session_id and payloads",
        "i.json:12: version: not a key of inputs.json (only data)",
    ]
    assert refusals(read_inputs_json, [b'{"data": [\n  {"session_id": }\n]}'], "i.json") == [
        "i.json:2: invalid JSON: Expecting value"
    ]
    assert refusals(read_inputs_json, [b'{"data": {}}'], "i.json") == [
        "i.json:1: data: required, a list of sessions ({'session_id': ..., 'payloads': [...]})"
    ]
    assert refusals(read_inputs_json, [b'{"data": []}'], "i.json") == [
        "i.json: no sessions: 'data' needs at least one session"
    ]


# baseten_trace


T0 = 1_767_225_600_000


def table(**columns: list[Any]) -> pa.Table:
    rows = len(next(iter(columns.values())))
    base = {
        "timestamp_start_unix_ms": [T0 + 1000 * k for k in range(rows)],
        "prompt": [f"prompt {k}" for k in range(rows)],
        "input_tokens": [2] * rows,
        "output_tokens": [4] * rows,
    }
    return pa.table(base | columns)


def parquet(data: pa.Table) -> list[bytes]:
    sink = pa.BufferOutputStream()
    pq.write_table(data, sink)
    return [sink.getvalue().to_pybytes()]


def test_the_baseten_example_replays_recorded_prompts_with_their_hints():
    dataset = load_graph(TRACES / "baseten.parquet", "baseten_trace")
    assert [t.root.conversation_id for t in dataset.trees] == ["s1", "s2", "row-000003"]
    assert [t.start_s for t in dataset.trees] == [0.0, 0.3, 1.2]
    s1 = dataset.trees[0]
    assert [n.history for n in s1.nodes] == [None, None]  # each turn is its whole prompt
    assert s1.nodes[1].deps == (0,) and s1.nodes[1].delay_s == 1.7  # 2.5 s gap less 0.8 s e2e
    bodies = [wire(n.payload, "completions") for t in dataset.trees for n in t.nodes]
    assert bodies[0]["prompt"].startswith("System: you are a helpful assistant.")
    assert bodies[1]["prompt"].startswith(bodies[0]["prompt"])
    assert [{k: v for k, v in b.items() if k != "prompt"} for b in bodies] == [
        {"model": "m", "stream": False, "max_tokens": 24, "min_tokens": 24,
         "hash_ids": [11, 12], "block_size": 64},
        {"model": "m", "stream": False, "max_tokens": 32, "min_tokens": 32,
         "hash_ids": [11, 12, 13], "block_size": 64},
        {"model": "m", "stream": False, "max_tokens": 8, "min_tokens": 8},
        {"model": "m", "stream": False, "max_tokens": 1, "min_tokens": 1,  # a recorded 0
         "hash_ids": [40], "block_size": 64},
    ]  # fmt: skip


def test_an_arrow_ipc_table_reads_as_the_parquet_one_when_named_so(tmp_path):
    data = pq.read_table(TRACES / "baseten.parquet")
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, data.schema) as writer:
        writer.write_table(data)
    arrow = sink.getvalue().to_pybytes()
    from_parquet = load_graph(TRACES / "baseten.parquet", "baseten_trace")
    for name in ("t.arrow", "t.IPC"):
        (tmp_path / name).write_bytes(arrow)
        from_arrow = load_graph(tmp_path / name, "baseten_trace")
        assert [[n.payload for n in t.nodes] for t in from_arrow.trees] == [
            [n.payload for n in t.nodes] for t in from_parquet.trees
        ]
    assert refusals(read_baseten_trace, [arrow], "t.parquet") == [
        "t.parquet: holds an Arrow IPC file: name it .arrow or .ipc (a name says which it is)"
    ]
    parquet_bytes = (TRACES / "baseten.parquet").read_bytes()
    assert refusals(read_baseten_trace, [parquet_bytes], "t.arrow") == [
        "t.arrow: named as Arrow IPC (.arrow, .ipc) but holds Parquet: name it .parquet"
    ]


def test_baseten_sessions_come_from_aiperf_s_column_of_choice():
    poor = read_baseten_trace(parquet(table(poor_man_session_id=[7, None, 7])), "t.parquet")
    assert [(s.session_id, len(s.nodes)) for s in poor.specs] == [("7", 2), ("row-000002", 1)]
    both = table(provided_session_id=["a", "b", "b"], poor_man_session_id=[1, 1, 1])
    assert [s.session_id for s in read_baseten_trace(parquet(both), "t.parquet").specs] == [
        "a", "b",
    ]  # fmt: skip
    late_first = table(provided_session_id=["x", "x"], timestamp_start_unix_ms=[T0 + 900, T0 + 100])
    (spec,) = read_baseten_trace(parquet(late_first), "t.parquet").specs
    assert [n.key for n in spec.nodes] == ["2", "1"]  # in time order
    assert spec.nodes[1].wait_s == 0.8  # no recorded duration: the whole gap


def test_baseten_refusals_name_every_row_at_once():
    bad = table(
        output_tokens=[4, -1, 4, 4, 4],
        prompt=["p", "p", "", "p", "p"],
        total_hashes=[[1], [2], [3], [-4], None],
        block_size=[64, 64, 64, 64, 0],
    )
    assert refusals(read_baseten_trace, parquet(bad), "t.parquet") == [
        "t.parquet:2: output_tokens: Input should be greater than or equal to 0",
        "t.parquet:3: prompt: String should have at least 1 character",
        "t.parquet:4: total_hashes: Input should be greater than or equal to 0",
        "t.parquet:5: block_size: Input should be greater than 0",
    ]
    late = table(timestamp_start_unix_ms=[T0, T0 + 700_000_000])
    assert refusals(read_baseten_trace, parquet(late), "t.parquet") == [
        "t.parquet:2: timestamp_start_unix_ms: more than a week after the table's first "
        "request; a trace spans at most a week (604800 s): replay a window of it"
    ]
    missing = pa.table({"prompt": ["p"], "output_tokens": [3]})
    assert refusals(read_baseten_trace, parquet(missing), "t.parquet") == [
        "t.parquet: the table needs the columns timestamp_start_unix_ms, input_tokens "
        "(AIPerf's required four)"
    ]
    (garbage,) = refusals(read_baseten_trace, [b"timestamp,prompt\n1,p\n"], "t.parquet")
    assert garbage.startswith("t.parquet: not a Parquet file: ")
    assert refusals(read_baseten_trace, [], "t.parquet") == [
        "t.parquet: empty file: a Parquet or Arrow IPC table"
    ]


def test_without_pyarrow_a_baseten_table_is_refused_naming_it():
    probe = (
        "import sys; sys.modules['pyarrow'] = None\n"
        "from dagperf.sources import load_graph\n"
        "from dagperf.dataset.loader import DatasetError\n"
        "try:\n"
        f"    load_graph({str(TRACES / 'baseten.parquet')!r}, 'baseten_trace')\n"
        "except DatasetError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "needs pyarrow, which is not installed: pip install 'dagperf[parquet]'" in done.stdout


# end to end: the examples on the wire

RUNS = {  # type, input, endpoint type, the requests AIPerf 0.13 sent for it
    "bailian_trace": (TRACES / "bailian.jsonl", "chat", 6),
    "baseten_trace": (TRACES / "baseten.parquet", "completions", 4),
    "burst_gpt_trace": (TRACES / "burst_gpt.csv", "chat", 5),
    "sagemaker_data_capture": (CAPTURES, "chat", 4),
    "inputs_json": (AIPERF / "inputs.json", "chat", 3),
}


@pytest.mark.parametrize("kind", sorted(RUNS))
async def test_each_example_runs_against_the_simulator(kind, tmp_path):
    data, endpoint_type, count = RUNS[kind]
    async with running_simulator(SimConfig(model="m", record_bodies=True)) as sim:
        directory = tmp_path / "artifacts"
        process = await spawn(
            "profile", "--input-file", str(data), "--custom-dataset-type", kind,
            "--url", sim.url, "--model", "m", "--endpoint-type", endpoint_type,
            "--concurrency", "1", "--artifact-dir", str(directory), "--quiet",
        )  # fmt: skip
        run = await finish(process, directory, sim)
        assert run.returncode == 0, run.stderr
        served = sorted(
            (r for r in sim.simulator.records if r.body is not None), key=lambda r: r.received_ns
        )
    assert len(served) == count
    graph = load_graph(data, kind)
    if kind == "bailian_trace":  # later turns carry the history and the live replies
        third = served[2].body["messages"]
        assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
        assert [third[1]["content"], third[3]["content"]] == [served[0].reply, served[1].reply]
        return
    expected = [wire(node.payload, endpoint_type) for tree in graph.trees for node in tree.nodes]
    assert [r.body for r in served] == expected
