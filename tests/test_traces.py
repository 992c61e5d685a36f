"""The trace loaders, mooncake_trace and timed_synthetic_session: prompts of the stated lengths,
sessions and their graphs, arrival times, what they compile into, and every refusal by line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from dagperf.dataset.formats.mooncake_trace import load_mooncake_trace, read_mooncake_trace
from dagperf.dataset.formats.timed_synthetic_session import load_timed_sessions, read_timed_sessions
from dagperf.dataset.loader import DatasetError
from dagperf.dataset.specs import TraceDataset
from dagperf.dataset.text import text_tokens
from dagperf.graph.model import Tree
from dagperf.graph.sessions import REFUSED_CONTEXT_MODE, ContextMode, GraphNode, compile_sessions

from dagfile import check_tree, encode

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "traces"
SOURCE = "trace.jsonl"


def moon(*rows: dict[str, Any] | str, block_size: int = 512) -> TraceDataset:
    return read_mooncake_trace(encode(*rows), SOURCE, block_size)


def timed(*rows: dict[str, Any] | str) -> TraceDataset:
    return read_timed_sessions(encode(*rows), SOURCE)


def refusals(read, *rows: dict[str, Any] | str) -> list[str]:
    with pytest.raises(DatasetError) as caught:
        read(encode(*rows), SOURCE)
    return [str(problem) for problem in caught.value.problems]


def trees(dataset: TraceDataset) -> list[Tree]:
    graph = compile_sessions(SOURCE, dataset.specs, dataset.loader_mode)
    for tree in graph.trees:
        check_tree(tree)
    return list(graph.trees)


def text(node: GraphNode) -> str:
    (message,) = node.payload.messages
    assert message["role"] == "user"
    return message["content"]


def tokens(node: GraphNode) -> list[str]:
    return text_tokens(text(node))


def row(**fields: Any) -> dict[str, Any]:
    return {"input_length": 8, **fields}


def req(session: str | int, prefill: int = 5, decode: int = 3, **fields: Any) -> dict[str, Any]:
    return {
        "session_id": session,
        "num_prefill_tokens": prefill,
        "num_decode_tokens": decode,
        **fields,
    }


def ctx(node: str | int, *parents: str | int, history: str | int | None = None, wait=None):
    out: dict[str, Any] = {"node_id": node, "parent_nodes": list(parents)}
    if history is not None:
        out["history_parent"] = history
    if wait is not None:
        out["wait_after_ready"] = wait
    return out


# mooncake_trace: prompts


@pytest.mark.parametrize(
    "fields",
    [
        {"input_length": 1},
        {"input_length": 7},
        {"input_length": 700},
        {"input_length": 1, "hash_ids": [3]},
        {"input_length": 700, "hash_ids": [1, 2]},  # the last block takes what remains
        {"input_length": 1100, "hash_ids": [1, 2]},  # more tokens than blocks: padded
        {"input_length": 300, "hash_ids": [1, 2, 3]},  # fewer: the later ids are unused
        {"input_length": 512, "hash_ids": []},  # no blocks: a plain passage
    ],
)
def test_a_synthetic_prompt_has_exactly_input_length_tokens(fields):
    (spec,) = moon({**fields, "output_length": 9}).specs
    (node,) = spec.nodes
    assert len(tokens(node)) == fields["input_length"]
    assert node.payload.max_tokens == 9
    assert node.payload.tools is None


def test_rows_sharing_leading_hash_ids_share_exactly_those_blocks():
    dataset = moon(
        row(input_length=1536, hash_ids=[10, 11, 12]),
        row(input_length=1536, hash_ids=[10, 11, 99]),
        row(input_length=1536, hash_ids=[10, 77, 12]),
        row(input_length=1536, hash_ids=[55, 11, 12]),
        row(input_length=1536, hash_ids=[10, 11, 12]),
    )
    a, b, c, d, again = (tokens(spec.nodes[0]) for spec in dataset.specs)
    assert again == a  # the same blocks give the same text on any line
    for other, shared in ((b, 2), (c, 1), (d, 0)):
        k = shared * 512
        assert other[:k] == a[:k]
        assert other[k] != a[k]
    # Prompts are their tokens joined by spaces, so shared tokens are a shared text prefix.
    first, second = (text(spec.nodes[0]) for spec in dataset.specs[:2])
    prefix = " ".join(a[:1024])
    assert first == " ".join(a) and second == " ".join(b)
    assert first.startswith(prefix + " ") and second.startswith(prefix + " ")
    assert first[len(prefix) :] != second[len(prefix) :]


def test_block_size_is_a_parameter():
    dataset = moon(
        row(input_length=12, hash_ids=[1, 2, 3]),
        row(input_length=12, hash_ids=[1, 2, 4]),
        block_size=4,
    )
    a, b = (tokens(spec.nodes[0]) for spec in dataset.specs)
    assert len(a) == len(b) == 12
    assert a[:8] == b[:8] and a[8] != b[8]


def test_a_passage_without_hash_ids_is_seeded_by_its_line():
    rows = [row(input_length=50), row(input_length=50)]
    first, second = (text(spec.nodes[0]) for spec in moon(*rows).specs)
    assert first != second
    assert [text(spec.nodes[0]) for spec in moon(*rows).specs] == [first, second]
    # Line 2 gives the same text whatever line 1 holds.
    (_, moved) = moon(row(input_length=9), rows[1]).specs
    assert text(moved.nodes[0]) == second


def test_text_input_is_sent_as_written():
    (spec,) = moon({"text_input": "What is a KV cache?", "output_length": 4}).specs
    assert spec.nodes[0].payload.messages == [{"role": "user", "content": "What is a KV cache?"}]
    assert spec.nodes[0].payload.max_tokens == 4


def test_messages_rows_are_sent_as_written_in_message_array_mode():
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    dataset = moon(
        {"session_id": "m", "messages": messages[:2], "output_length": 5},
        {"session_id": "m", "messages": messages, "tools": tools, "delay": 250},
    )
    assert dataset.loader_mode is ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
    (spec,) = dataset.specs
    assert spec.context_mode is None  # the loader's mode
    first, second = spec.nodes
    assert first.payload.messages == messages[:2] and first.payload.max_tokens == 5
    assert second.payload.messages == messages and second.payload.tools == tools
    assert second.payload.max_tokens is None
    assert second.parents == (0,) and second.history is None and second.wait_s == 0.25
    (tree,) = trees(dataset)
    assert [n.deps for n in tree.nodes] == [(), (0,)]
    assert [n.history for n in tree.nodes] == [None, None]
    assert [n.delay_s for n in tree.nodes] == [0.0, 0.25]


def test_text_sessions_keep_their_mode_in_a_file_with_messages():
    dataset = moon(
        {"messages": [{"role": "user", "content": "hi"}]},
        {"session_id": "t", "input_length": 4},
        {"session_id": "t", "text_input": "more"},
    )
    assert dataset.loader_mode is ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
    as_written, chat = dataset.specs
    assert as_written.context_mode is None
    assert chat.context_mode is ContextMode.DELTAS_WITHOUT_RESPONSES
    _, tree = trees(dataset)
    assert tree.nodes[1].history == 0 and tree.nodes[1].keep_reply


def test_a_session_sets_its_own_context_mode_on_any_of_its_rows():
    assistant = {"role": "assistant", "content": "canned"}
    dataset = moon(
        {"session_id": "canned", "messages": [{"role": "user", "content": "a"}]},
        {"session_id": "canned", "messages": [assistant, {"role": "user", "content": "b"}],
         "context_mode": "deltas_with_responses"},
        {"session_id": "plain", "text_input": "x", "context_mode": "message_array_with_responses"},
        {"session_id": "plain", "text_input": "y"},
    )  # fmt: skip
    canned, plain = dataset.specs
    assert canned.context_mode is ContextMode.DELTAS_WITH_RESPONSES
    assert (plain.context_mode or dataset.loader_mode) is ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
    canned_tree, plain_tree = trees(dataset)
    # the dataset's assistant turns stand in for the live reply, which is measured, not kept
    assert canned_tree.nodes[1].history == 0 and not canned_tree.nodes[1].keep_reply
    assert plain_tree.nodes[1].history is None  # each turn as written


def test_a_session_has_one_context_mode_and_never_the_refused_one():
    assert refusals(
        read_mooncake_trace,
        {"session_id": "s", "text_input": "a", "context_mode": "deltas_with_responses"},
        {"session_id": "s", "text_input": "b", "context_mode": "deltas_without_responses"},
        {"text_input": "c", "context_mode": "message_array_without_responses"},
    ) == [
        f"{SOURCE}:2: context_mode: 'deltas_without_responses' differs from "
        "'deltas_with_responses' on line 1, an earlier turn of session 's': one mode per session",
        f"{SOURCE}:3: context_mode: {REFUSED_CONTEXT_MODE}",
    ]


# mooncake_trace: sessions and times


def test_rows_sharing_a_session_id_are_turns_in_file_order():
    dataset = moon(
        row(timestamp=0, input_length=3),
        row(timestamp=100, session_id="u", input_length=10, output_length=7),
        row(timestamp=150, input_length=4),
        row(timestamp=900, session_id="u", input_length=20, delay=300),
        {"timestamp": 1000, "session_id": "u", "text_input": "last", "delay": 12.5},
    )
    assert dataset.loader_mode is ContextMode.DELTAS_WITHOUT_RESPONSES
    assert dataset.timed
    assert [s.session_id for s in dataset.specs] == ["trace-000001", "u", "trace-000003"]
    assert [s.start_s for s in dataset.specs] == [0.0, 0.1, 0.15]
    assert [len(s.nodes) for s in dataset.specs] == [1, 3, 1]
    u = dataset.specs[1]
    assert [len(tokens(n)) for n in u.nodes[:2]] == [10, 20]
    assert text(u.nodes[2]) == "last"
    assert [n.parents for n in u.nodes] == [(), (0,), (1,)]
    assert [n.history for n in u.nodes] == [None, 0, 1]
    assert [n.wait_s for n in u.nodes] == [0.0, 0.3, 0.0125]
    assert [n.payload.max_tokens for n in u.nodes] == [7, None, None]
    _, tree, _ = trees(dataset)
    assert tree.start_s == 0.1
    assert [n.deps for n in tree.nodes] == [(), (0,), (1,)]
    assert [n.history for n in tree.nodes] == [None, 0, 1]
    assert [n.delay_s for n in tree.nodes] == [0.0, 0.3, 0.0125]
    assert all(n.keep_reply for n in tree.nodes)
    assert tree.entry == (0,)


def test_sessions_are_ordered_by_their_first_timestamp():
    dataset = moon(
        row(timestamp=5000),
        row(timestamp=20, session_id="late-turns"),
        row(timestamp=1000.5),
        row(timestamp=7000, session_id="late-turns"),
        row(timestamp=1000.5, session_id="tie"),  # ties keep file order
    )
    assert [(s.session_id, s.start_s) for s in dataset.specs] == [
        ("late-turns", 0.02),
        ("trace-000003", 1.0005),
        ("tie", 1.0005),
        ("trace-000001", 5.0),
    ]
    assert [t.start_s for t in trees(dataset)] == [0.02, 1.0005, 1.0005, 5.0]


def test_a_file_without_timestamps_is_untimed_in_file_order():
    dataset = moon(row(), row(session_id="b"), row(session_id="a"), row(session_id="b"))
    assert not dataset.timed
    assert [s.session_id for s in dataset.specs] == ["trace-000001", "b", "a"]
    assert all(s.start_s is None for s in dataset.specs)
    assert [len(s.nodes) for s in dataset.specs] == [1, 2, 1]


def test_mooncake_gzip_and_example(tmp_path):
    path = tmp_path / "trace.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(encode(row(timestamp=1), row(timestamp=2)))))
    dataset = load_mooncake_trace(path)
    assert [s.start_s for s in dataset.specs] == [0.001, 0.002]
    example = load_mooncake_trace(EXAMPLES / "mooncake.jsonl")
    assert example.timed and len(trees(example)) == 4
    assert [len(s.nodes) for s in example.specs] == [1, 3, 1, 1]


def test_gzip_problems_name_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(encode(row(), row(input_length=0)))))
    with pytest.raises(DatasetError) as caught:
        load_mooncake_trace(path)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}:2: input_length: Input should be greater than or equal to 1"
    ]


MOONCAKE_REFUSALS = [
    (["{nope"], "invalid JSON"),
    (["[1]"], "expected a JSON object (one request per line), got an array"),
    ([row(timestamp=-1)], "timestamp: Input should be greater than or equal to 0"),
    ([row(timestamp="5")], "timestamp: Input should be a valid number"),
    ([row(input_length=0)], "input_length: Input should be greater than or equal to 1"),
    ([row(input_length=2.5)], "input_length: Input should be a valid integer"),
    ([row(hash_ids=[1, -2])], "hash_ids.1: Input should be greater than or equal to 0"),
    ([row(output_length=-3)], "output_length: Input should be greater than or equal to 1"),
    ([row(delay=-1)], "delay: Input should be greater than or equal to 0"),
    ([row(max_tokens=5)], "max_tokens: Extra inputs are not permitted"),
    ([row(session_id="")], "session_id: String should have at least 1 character"),
    ([{"output_length": 4}], "exactly one of input_length, text_input or messages is required"),
    (
        [row(text_input="hi")],
        "input_length and text_input are exclusive: give exactly one of input_length, "
        "text_input, messages",
    ),
    ([{"text_input": "hi", "hash_ids": [1]}], "hash_ids: only allowed with input_length"),
    ([row(tools=[{"type": "function"}])], "tools: only allowed with messages"),
    (
        [{"messages": [{"content": "hi"}]}],
        "messages: each message must have a 'role' string, but message at index 0 does not",
    ),
    ([{"messages": []}], "messages: List should have at least 1 item after validation, not 0"),
    (
        [row(session_id="s"), {"session_id": "s", "messages": [{"role": "user"}]}],
        "messages: session 's' mixes messages rows with input_length or text_input rows "
        "(line 2 has no messages)",
    ),
    (
        [{"session_id": "s", "messages": [{"role": "user"}]}, row(session_id="s")],
        "input_length: session 's' mixes messages rows with input_length or text_input rows "
        "(line 2 has messages)",
    ),
    (
        [row(session_id="trace-000001")],
        "session_id: 'trace-000001' is the id of the session-less request on line 1; "
        "choose another",
    ),
]


@pytest.mark.parametrize(("rows", "message"), MOONCAKE_REFUSALS)
def test_mooncake_refusals_name_the_line_and_field(rows, message):
    # A valid line first, so the line number is checked, not just line 1.
    found = refusals(read_mooncake_trace, row(), *rows)
    line = len(rows) + 1
    assert found[0].startswith(f"{SOURCE}:{line}: {message}"), found
    assert len(found) == 1, found


def test_a_turn_earlier_than_the_previous_one_is_refused():
    found = refusals(
        read_mooncake_trace,
        row(timestamp=0),
        row(session_id="s", timestamp=500),
        row(timestamp=100),
        row(session_id="s", timestamp=499.5),
    )
    assert found == [
        f"{SOURCE}:4: timestamp: 499.5 is earlier than the previous turn of session 's' "
        "(500 on line 2): turns go forward in time"
    ]


def test_hash_ids_alone_are_refused_with_every_reason():
    assert refusals(read_mooncake_trace, {"hash_ids": []}) == [
        f"{SOURCE}:1: exactly one of input_length, text_input or messages is required",
        f"{SOURCE}:1: hash_ids: only allowed with input_length",
    ]


def test_timestamps_on_some_rows_only_are_refused_at_the_first_row_without():
    assert refusals(read_mooncake_trace, row(), row(timestamp=4), row(), row(timestamp=9)) == [
        f"{SOURCE}:1: timestamp: missing, but line 2 has one: give every row a timestamp "
        "(replayed on its schedule) or none"
    ]


def test_every_mooncake_problem_is_reported_at_once():
    found = refusals(
        read_mooncake_trace,
        row(input_length=-1),
        row(),
        row(bogus=1),
        "",
        row(output_length=0),
    )
    assert found == [
        f"{SOURCE}:1: input_length: Input should be greater than or equal to 1",
        f"{SOURCE}:3: bogus: Extra inputs are not permitted",
        f"{SOURCE}:5: output_length: Input should be greater than or equal to 1",
    ]


def test_an_empty_mooncake_file_is_refused():
    assert refusals(read_mooncake_trace, "", " ") == [
        f"{SOURCE}: empty file: a mooncake_trace file needs at least one request line"
    ]


# timed_synthetic_session


def test_rows_without_context_form_a_chain_per_session():
    dataset = timed(
        req("a", 40, 7, arrived_at=1.0),
        req("b", 12, 3, arrived_at=0.5),
        req("a", 25, 8, arrived_at=1.0),  # repeating the arrival is fine
        req("a", 1, 9),
    )
    assert dataset.loader_mode is None
    assert dataset.timed
    b, a = dataset.specs  # by arrival
    assert (b.session_id, b.start_s, a.session_id, a.start_s) == ("b", 0.5, "a", 1.0)
    assert [n.key for n in a.nodes] == ["0", "1", "2"]
    assert [len(tokens(n)) for n in a.nodes] == [40, 25, 1]
    assert [n.payload.max_tokens for n in a.nodes] == [7, 8, 9]
    assert [n.parents for n in a.nodes] == [(), (0,), (1,)]
    assert [n.history for n in a.nodes] == [None, 0, 1]
    assert len(tokens(b.nodes[0])) == 12
    _, tree = trees(dataset)
    assert tree.start_s == 1.0
    assert [n.deps for n in tree.nodes] == [(), (0,), (1,)]
    assert [n.history for n in tree.nodes] == [None, 0, 1]
    assert all(n.keep_reply for n in tree.nodes)  # the global default, deltas_without_responses


def test_session_context_builds_a_diamond_listed_in_any_order():
    dataset = timed(
        req(
            "d",
            30,
            arrived_at=2.0,  # a session's arrival is on its first line, whichever node it is
            session_context=ctx("join", "left", "right", history="right", wait=0.5),
        ),
        req("d", 20, session_context=ctx("right", "root", history="root", wait=1.25)),
        req("d", 10, session_context=ctx("root")),
        req("d", 15, session_context=ctx("left", "root")),
    )
    (spec,) = dataset.specs
    assert spec.start_s == 2.0 and dataset.timed
    assert [n.key for n in spec.nodes] == ["root", "right", "left", "join"]  # parents first
    assert [len(tokens(n)) for n in spec.nodes] == [10, 20, 15, 30]
    assert [n.parents for n in spec.nodes] == [(), (0,), (0,), (1, 2)]
    assert [n.history for n in spec.nodes] == [None, 0, None, 1]
    assert [n.wait_s for n in spec.nodes] == [0.0, 1.25, 0.0, 0.5]
    (tree,) = trees(dataset)
    assert tree.entry == (0,)
    assert [n.deps for n in tree.nodes] == [(), (0,), (0,), (1, 2)]
    assert [n.history for n in tree.nodes] == [None, 0, None, 1]
    assert [n.delay_s for n in tree.nodes] == [0.0, 1.25, 0.0, 0.5]
    assert tree.nodes[0].dependents == (1, 2)


def test_prompts_are_seeded_by_session_and_node():
    one = timed(req("s", 30, session_context=ctx(0)), req("s", 30, session_context=ctx(1, 0)))
    other = timed(
        req("x", 4),
        req("s", 30, session_context=ctx(1, 0)),
        req("s", 30, session_context=ctx(0)),
    )
    a0, a1 = (text(n) for n in one.specs[0].nodes)
    b0, b1 = (text(n) for n in other.specs[1].nodes)
    assert (a0, a1) == (b0, b1)  # the same ids give the same text on any line
    assert a0 != a1
    (renamed,) = timed(req("t", 30, session_context=ctx(0))).specs
    assert text(renamed.nodes[0]) != a0


def test_integer_ids_name_the_same_session_and_nodes_as_strings():
    dataset = timed(
        req(7, session_context=ctx(0)),
        req("7", session_context=ctx("1", 0, history=0)),
    )
    (spec,) = dataset.specs
    assert spec.session_id == "7"
    assert [n.key for n in spec.nodes] == ["0", "1"]
    assert spec.nodes[1].history == 0
    assert not dataset.timed and spec.start_s is None


@pytest.mark.parametrize(
    ("mode", "history", "keep_reply"),
    [
        ("deltas_without_responses", 0, True),
        ("deltas_with_responses", 0, False),
        ("message_array_with_responses", None, True),  # no history: nothing to keep
    ],
)
def test_a_rows_context_mode_applies_to_its_session(mode, history, keep_reply):
    dataset = timed(req("s"), req("p"), req("s", context_mode=mode), req("s", context_mode=mode))
    s, p = dataset.specs
    assert s.context_mode is ContextMode(mode) and p.context_mode is None
    tree, plain = trees(dataset)
    assert [n.history for n in tree.nodes] == [None, history, None if history is None else 1]
    assert all(n.keep_reply is keep_reply for n in tree.nodes)
    assert plain.nodes[0].keep_reply


def test_timed_sessions_gzip_and_example(tmp_path):
    path = tmp_path / "sessions.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(encode(req("a", arrived_at=3), req("b")))))
    with pytest.raises(DatasetError) as caught:
        load_timed_sessions(path)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}:2: arrived_at: session 'b' has none, but session 'a' (line 1) has one: "
        "give every session an arrival or none"
    ]
    path.write_bytes(gzip.compress(b"".join(encode(req("a", arrived_at=3), req("a")))))
    assert [s.start_s for s in load_timed_sessions(path).specs] == [3.0]
    example = load_timed_sessions(EXAMPLES / "timed_sessions.jsonl")
    assert example.timed
    assert [(s.session_id, len(s.nodes)) for s in example.specs] == [
        ("chat", 3),
        ("plan", 4),
        ("7", 1),
    ]
    assert trees(example)[1].nodes[3].deps == (1, 2)


TIMED_REFUSALS = [
    (["{nope"], "invalid JSON"),
    ([req("s", 0)], "num_prefill_tokens: Input should be greater than or equal to 1"),
    ([req("s", 3, 0)], "num_decode_tokens: Input should be greater than or equal to 1"),
    ([{"session_id": "s", "num_prefill_tokens": 3}], "num_decode_tokens: Field required"),
    ([req(True)], "session_id: must be a string or an integer, got true"),
    ([req("s", 2.0)], "num_prefill_tokens: Input should be a valid integer"),
    ([req("s", arrived_at=-1)], "arrived_at: Input should be greater than or equal to 0"),
    ([req("s", prompt="hi")], "prompt: Extra inputs are not permitted"),
    (
        [req("s", session_context={"node_id": 0, "parents": [1]})],
        "session_context.parents: Extra inputs are not permitted",
    ),
    (
        [req("s", session_context=ctx(0, wait=-0.5))],
        "session_context.wait_after_ready: Input should be greater than or equal to 0",
    ),
    (
        [req("s", context_mode="message_array_without_responses")],
        f"context_mode: {REFUSED_CONTEXT_MODE}",
    ),
    ([req("s", context_mode="sideways")], "context_mode: Input should be"),
    (
        [
            req("s", context_mode="deltas_with_responses"),
            req("s", context_mode="deltas_without_responses"),
        ],
        "context_mode: 'deltas_without_responses' conflicts with 'deltas_with_responses' given "
        "for session 's' on line 2",
    ),
    (
        [req("s", arrived_at=1.0), req("s", arrived_at=2.0)],
        "arrived_at: 2.0 differs from session 's''s 1.0 (line 2): a session arrives once",
    ),
    (
        [req("s"), req("s", arrived_at=2.0)],
        "arrived_at: session 's' arrives at its first row's arrived_at, and line 2 has none",
    ),
    (
        [req("s", session_context=ctx(0)), req("s")],
        "session_context: session 's' mixes rows with and without session_context (line 2 has one)",
    ),
    (
        [req("s"), req("s", session_context=ctx(1))],
        "session_context: session 's' mixes rows with and without session_context "
        "(line 2 has none)",
    ),
    (
        [req("s", session_context=ctx(0)), req("s", session_context=ctx(0))],
        "session_context.node_id: node '0' is already in session 's' (line 2)",
    ),
    (
        [req("s", session_context=ctx("a", "ghost"))],
        "session_context.parent_nodes.0: no node 'ghost' in session 's'",
    ),
    (
        [req("s", session_context=ctx("a")), req("s", session_context=ctx("b", "a", "a"))],
        "session_context.parent_nodes.1: node 'a' given twice",
    ),
    (
        [req("s", session_context=ctx("a", "a"))],
        "session_context.parent_nodes.0: node 'a' cannot depend on itself",
    ),
    (
        [
            req("s", session_context=ctx("a")),
            req("s", session_context=ctx("b", "a", history="c")),
        ],
        "session_context.history_parent: 'c' is not one of parent_nodes",
    ),
    (
        [
            req("s", session_context=ctx("root")),
            req("s", session_context=ctx("x", "root", "z")),
            req("s", session_context=ctx("y", "x")),
            req("s", session_context=ctx("z", "y")),
        ],
        "session_context.parent_nodes: session 's' has a cycle: 'x' -> 'y' -> 'z' -> 'x' "
        "(parent to child)",
    ),
]


@pytest.mark.parametrize(("rows", "message"), TIMED_REFUSALS)
def test_timed_session_refusals_name_the_line_and_field(rows, message):
    found = refusals(read_timed_sessions, req("ok"), *rows)
    # The last row is the bad one; a cycle is reported at its earliest row.
    line = 3 if "cycle" in message else len(rows) + 1
    assert len(found) == 1, found
    assert found[0].startswith(f"{SOURCE}:{line}: {message}"), found


def test_a_broken_row_does_not_echo_through_its_session():
    # Node 'a' failed to parse: 'b' naming it as a parent is not reported again.
    found = refusals(
        read_timed_sessions,
        req("s", 0, session_context=ctx("a")),
        req("s", session_context=ctx("b", "a")),
    )
    assert found == [f"{SOURCE}:1: num_prefill_tokens: Input should be greater than or equal to 1"]


def test_every_timed_session_problem_is_reported_at_once():
    found = refusals(
        read_timed_sessions,
        req("a", session_context=ctx(1, 2)),
        req("b", 0),
        json.dumps(req("c", context_mode="message_array_without_responses")),
    )
    assert found == [
        f"{SOURCE}:1: session_context.parent_nodes.0: no node '2' in session 'a'",
        f"{SOURCE}:2: num_prefill_tokens: Input should be greater than or equal to 1",
        f"{SOURCE}:3: context_mode: {REFUSED_CONTEXT_MODE}",
    ]


def test_an_empty_timed_sessions_file_is_refused():
    assert refusals(read_timed_sessions) == [
        f"{SOURCE}: empty file: a timed_synthetic_session file needs at least one request line"
    ]


# request_log (Veeksha's flavour): lengths only, JSON lines or CSV


def request_log(text: str) -> TraceDataset:
    from dagperf.dataset.formats.request_log import read_request_log

    return read_request_log([line.encode() + b"\n" for line in text.splitlines()], SOURCE)


def test_a_request_log_row_is_a_session_of_its_lengths_and_shared_ids_are_turns():
    csv_log = request_log(
        "input_length,output_length,session_id,arrival\n40,7,,0\n12,5,a,1\n8,3,a,2"
    )
    json_log = request_log(
        '{"input_length": 40, "output_length": 7}\n'
        '{"input_length": 12, "output_length": 5, "session_id": "a"}\n'
        '{"input_length": 8, "output_length": 3, "session_id": "a", "arrival": 2}'
    )
    for dataset in (csv_log, json_log):
        one, chat = trees(dataset)
        (node,) = one.nodes
        assert len(tokens(node)) == 40 and node.payload.max_tokens == 7
        assert [len(tokens(n)) for n in chat.nodes] == [12, 8]
        assert [n.payload.max_tokens for n in chat.nodes] == [5, 3]
        assert [n.history for n in chat.nodes] == [None, 0]  # each turn continues the last


def test_request_log_problems_name_their_lines():
    from dagperf.dataset.formats.request_log import read_request_log

    def problems(text: str) -> list[str]:
        return refusals(read_request_log, *text.splitlines())

    assert problems("input_length,output_length\nx,5\n0,5\n5") == [
        f"{SOURCE}:2: input_length: expected a whole number of tokens, got 'x'",
        f"{SOURCE}:3: input_length: must be between 1 and 10,000,000, got 0",
        f"{SOURCE}:4: output_length: required",
    ]
    assert problems("prompt,output_length\n5,5") == [
        f"{SOURCE}:1: the CSV header needs input_length"
    ]
    assert problems('{"input_length": 5.5, "output_length": 2}\n[1]') == [
        f"{SOURCE}:1: input_length: expected a whole number of tokens, got 5.5",
        f"{SOURCE}:2: expected a JSON object (one request per line)",
    ]


# untimed_content_multi_turn (Veeksha's flavour): recorded conversations, turn by turn


def conversations(*rows: dict[str, Any] | str) -> TraceDataset:
    from dagperf.dataset.formats.untimed_content_multi_turn import read_conversations

    return read_conversations(encode(*rows), SOURCE)


def said(role: str, text: str) -> dict[str, str]:
    return {"from": role, "value": text}


def test_each_answered_user_message_is_a_request_with_the_recorded_history():
    dataset = conversations(
        {"conversations": [said("system", "S"), said("gpt", "greeting"), said("human", "q1"),
                           said("gpt", "a one two"), said("tool", "x"), said("human", "q2"),
                           said("gpt", "a2"), said("human", "unanswered")]},
        {"session_id": "s", "conversations": json.dumps([said("human", "p"), said("gpt", "r")])},
        {"session_id": "s", "conversations": [said("human", "p2"), said("gpt", "r2 r2")]},
    )  # fmt: skip
    assert dataset.loader_mode is ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
    first, joined = trees(dataset)
    assert [n.payload.messages for n in first.nodes] == [
        [{"role": "user", "content": "q1"}],
        [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a one two"},
         {"role": "user", "content": "q2"}],
    ]  # fmt: skip
    assert [n.payload.max_tokens for n in first.nodes] == [3, 1]  # the recorded reply's words
    assert [n.history for n in first.nodes] == [None, None]  # sent as written, in order
    assert first.nodes[1].deps == (0,)
    assert joined.sessions[0].conversation_id == "s" and len(joined.nodes) == 2
    assert joined.nodes[1].payload.messages[-1] == {"role": "user", "content": "p2"}


def test_a_conversation_without_an_answered_user_message_is_refused_by_line():
    from dagperf.dataset.formats.untimed_content_multi_turn import read_conversations

    assert refusals(
        read_conversations,
        {"conversations": [said("gpt", "hello"), said("human", "bye")]},
        {"conversations": "not json"},
        {"messages": []},
    ) == [
        f"{SOURCE}:1: conversations: no 'human' message answered by 'gpt'",
        f"{SOURCE}:2: conversations: a string that is not a JSON list: Expecting value: "
        "line 1 column 1 (char 0)",
        f"{SOURCE}:3: conversations: required, a list of messages with 'from' and 'value'",
    ]
