"""General session graphs: the session_graph format, diamonds with one history parent, context
modes; loaded and compiled, then run for real against the recording simulator."""

from __future__ import annotations

import json

import pytest

from dagperf.dataset import DatasetError
from dagperf.dataset.formats.session_graph import read_session_graph
from dagperf.graph.model import Payload
from dagperf.graph.sessions import (
    ContextMode,
    GraphNode,
    SessionSpec,
    SpecError,
    compile_sessions,
)
from dagperf.simulator import running_simulator

from dagfile import check_tree, user
from runs import RECORDING, check_dependencies_finished_first, profile


def node(key: str, text: str | None = None, **fields) -> dict:
    return {"id": key, "messages": [user(text or key)], **fields}


def edge(src: str, dst: str, history: bool = False) -> dict:
    return {"src": src, "dst": dst, "is_history_parent": history}


def session(sid: str, nodes: list[dict], edges: list[dict] = (), **fields) -> dict:
    return {"session_id": sid, "nodes": nodes, "edges": list(edges), **fields}


DIAMOND = session(
    "d",
    # Listed children first: the loader sends parents first whatever the file order.
    [node("merge", wait_after_ready=0.05), node("b"), node("a"), node("plan")],
    [
        edge("plan", "a", history=True),
        edge("plan", "b"),
        edge("a", "merge", history=True),
        edge("b", "merge"),
    ],
)


def read(*lines: dict | str) -> list[SessionSpec]:
    raw = [(x if isinstance(x, str) else json.dumps(x)).encode() + b"\n" for x in lines]
    return list(read_session_graph(raw, "g.jsonl").specs)


def refusals(*lines: dict | str) -> list[str]:
    with pytest.raises(DatasetError) as caught:
        read(*lines)
    return [str(p) for p in caught.value.problems]


def test_a_diamond_loads_parents_first_with_one_history_parent():
    (spec,) = read(DIAMOND)
    at = {n.key: i for i, n in enumerate(spec.nodes)}
    merge = spec.nodes[at["merge"]]
    assert sorted(merge.parents) == sorted((at["a"], at["b"]))
    assert merge.history == at["a"]
    assert merge.wait_s == 0.05
    assert spec.nodes[at["a"]].history == at["plan"]
    assert spec.nodes[at["b"]].history is None
    assert spec.nodes[at["plan"]].parents == ()


def test_parents_come_first_and_otherwise_file_order_is_kept():
    (spec,) = read(DIAMOND)
    assert [n.key for n in spec.nodes] == ["plan", "b", "a", "merge"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (session("s", [node("a"), node("a")]), "session 's': duplicate node id 'a'"),
        (session("s", [node("a")], [edge("a", "x")]), "session 's': edges.0: no node 'x'"),
        (
            session("s", [node("a")], [edge("a", "a")]),
            "session 's': edges.0: node 'a' cannot depend on itself",
        ),
        (
            session("s", [node("a"), node("b")], [edge("a", "b"), edge("a", "b")]),
            "session 's': edges.1: edge 'a' -> 'b' given twice",
        ),
        (
            session(
                "s",
                [node("a"), node("b"), node("c")],
                [edge("a", "c", True), edge("b", "c", True)],
            ),
            "session 's': edges.1: node 'c' has two history parents, 'a' and 'b' (at most one)",
        ),
        (
            session("s", [node("a"), node("b")], [edge("a", "b"), edge("b", "a")]),
            "session 's': the edges form a cycle: a session graph must be acyclic",
        ),
        (session("s", []), "nodes: List should have at least 1 item after validation"),
        (
            session("s", [node("a", wait_after_ready=-1.0)]),
            "nodes.0.wait_after_ready: Input should be greater than or equal to 0",
        ),
        (session("s", [node("a", max_token=3)]), "nodes.0.max_token: Extra inputs"),
        ("[1]", "expected a JSON object (one session per line), got an array"),
    ],
)
def test_each_broken_session_is_refused_at_its_line(line, message):
    found = refusals(session("ok", [node("a")]), line)
    assert len(found) == 1, found
    assert found[0].startswith(f"g.jsonl:2: {message}"), found


def test_refusals_are_all_reported_with_duplicate_ids_and_the_refused_context_mode():
    found = refusals(
        session("s", [node("a")]),
        session("s", [node("a")]),
        session("t", [node("a")], context_mode="message_array_without_responses"),
        "",
        "{not json",
    )
    assert found[0] == "g.jsonl:2: duplicate session_id 's' (first on line 1)"
    assert found[1].startswith("g.jsonl:3: session 't': context mode ")
    assert "not supported" in found[1]
    assert found[2].startswith("g.jsonl:5: invalid JSON")
    assert refusals("") == [
        "g.jsonl: empty file: a session_graph file needs at least one session line"
    ]


def _specs(mode: ContextMode | None) -> list[SessionSpec]:
    payload = Payload([user("x")])
    nodes = (
        GraphNode("a", payload),
        GraphNode("b", payload),
        GraphNode("c", payload, parents=(0, 1), history=1, wait_s=0.5),
    )
    return [SessionSpec("s", nodes, mode)]


@pytest.mark.parametrize(
    ("mode", "history", "keep_reply"),
    [
        (None, 1, True),  # the global default: deltas_without_responses
        (ContextMode.DELTAS_WITHOUT_RESPONSES, 1, True),
        (ContextMode.DELTAS_WITH_RESPONSES, 1, False),
        (ContextMode.MESSAGE_ARRAY_WITH_RESPONSES, None, True),
    ],
)
def test_a_diamond_compiles_to_gating_on_both_parents_and_one_history(mode, history, keep_reply):
    (tree,) = compile_sessions("g", _specs(mode)).trees
    check_tree(tree)
    c = tree.nodes[2]
    assert (c.deps, c.join_deps, c.history, c.delay_s) == ((0, 1), (), history, 0.5)
    assert all(n.keep_reply is keep_reply for n in tree.nodes)
    assert tree.entry == (0, 1)
    assert tree.nodes[0].dependents == (2,) and tree.nodes[1].dependents == (2,)


def test_context_mode_priority_is_session_then_loader_then_default():
    deltas, arrays = ContextMode.DELTAS_WITH_RESPONSES, ContextMode.MESSAGE_ARRAY_WITH_RESPONSES
    (tree,) = compile_sessions("g", _specs(deltas), loader_mode=arrays).trees
    assert tree.nodes[2].history == 1 and not tree.nodes[2].keep_reply  # the session's
    (tree,) = compile_sessions("g", _specs(None), loader_mode=arrays).trees
    assert tree.nodes[2].history is None  # the loader's
    with pytest.raises(SpecError, match="message_array_without_responses"):
        compile_sessions("g", _specs(ContextMode.MESSAGE_ARRAY_WITHOUT_RESPONSES))


# --- run for real ----------------------------------------------------------------------------


@pytest.fixture
async def sim():
    async with running_simulator(RECORDING) as running:
        yield running


async def run_graph(sim, tmp_path, *lines, flags=()):
    return await profile(
        sim, tmp_path, list(lines), "--custom-dataset-type", "session_graph", "--workers", "2",
        *flags,
    )  # fmt: skip


async def test_a_diamond_waits_for_both_parents_and_continues_only_its_history_parent(
    sim, tmp_path
):
    run = await run_graph(sim, tmp_path, DIAMOND)
    assert run.returncode == 0, run.stderr
    b, a, merge = (run.one(f"d:{i}") for i in range(1, 4))  # sent parents first
    body = {k: run.body(f"d:{i}")["messages"] for i, k in enumerate(("plan", "b", "a", "merge"))}
    reply = {k: run.reply(f"d:{i}") for i, k in enumerate(("plan", "b", "a"))}
    assert body["plan"] == [user("plan")]
    assert body["b"] == [user("b")]  # a parent that is not its history: a fresh context
    assert body["a"] == [user("plan"), reply["plan"], user("a")]
    assert body["merge"] == [user("plan"), reply["plan"], user("a"), reply["a"], user("merge")]
    check_dependencies_finished_first(run)
    m = merge["metadata"]
    assert sorted(m["depends_on"]) == sorted(
        [a["metadata"]["x_request_id"], b["metadata"]["x_request_id"]]
    )
    last_parent = max(a["metadata"]["request_end_ns"], b["metadata"]["request_end_ns"])
    assert m["request_start_ns"] >= last_parent + 50_000_000  # wait_after_ready 0.05 s
    assert m["delay_ms"] == 50
    assert len({r["metadata"]["worker_id"] for r in run.records}) == 1  # history stays together


TURNS = [node("t0", "q0"), node("t1"), node("t2")]
CHAIN = [edge("t0", "t1", True), edge("t1", "t2", True)]


async def test_deltas_without_responses_thread_the_live_replies(sim, tmp_path):
    run = await run_graph(sim, tmp_path, session("c", TURNS, CHAIN))
    assert run.returncode == 0, run.stderr
    r0, r1 = run.reply("c:0"), run.reply("c:1")
    assert run.body("c:2")["messages"] == [user("q0"), r0, user("t1"), r1, user("t2")]


async def test_deltas_with_responses_send_the_datasets_answers_and_discard_the_live_ones(
    sim, tmp_path
):
    canned = {"role": "assistant", "content": "canned answer"}
    turns = [
        node("t0", "q0"),
        {"id": "t1", "messages": [canned, user("q1")]},
        {"id": "t2", "messages": [{"role": "assistant", "content": "second"}, user("q2")]},
    ]
    line = session("c", turns, CHAIN, context_mode="deltas_with_responses")
    run = await run_graph(sim, tmp_path, line)
    assert run.returncode == 0, run.stderr
    assert run.body("c:1")["messages"] == [user("q0"), canned, user("q1")]
    assert run.body("c:2")["messages"] == [
        user("q0"),
        canned,
        user("q1"),
        {"role": "assistant", "content": "second"},
        user("q2"),
    ]
    live = {run.server(f"c:{i}").reply for i in range(2)}
    assert all(text not in json.dumps(run.body("c:2")) for text in live)
    # The live replies were still measured.
    assert all(r["metrics"]["output_sequence_length"]["value"] > 0 for r in run.records)


async def test_message_arrays_are_sent_exactly_as_written(sim, tmp_path):
    arrays = [
        [user("q0")],
        [user("q0"), {"role": "assistant", "content": "a0"}, user("q1")],
        [{"role": "system", "content": "s"}, user("only this")],
    ]
    turns = [{"id": f"t{i}", "messages": m} for i, m in enumerate(arrays)]
    line = session("c", turns, CHAIN, context_mode="message_array_with_responses")
    run = await run_graph(sim, tmp_path, line)
    assert run.returncode == 0, run.stderr
    assert [run.body(f"c:{i}")["messages"] for i in range(3)] == arrays
    check_dependencies_finished_first(run)  # still one after another


async def test_the_unsupported_context_mode_is_refused_before_anything_is_sent(sim, tmp_path):
    line = session("c", TURNS, CHAIN, context_mode="message_array_without_responses")
    run = await run_graph(sim, tmp_path, line)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert "line 1" in run.stderr or "data.dag.jsonl:1:" in run.stderr
    assert "message_array_without_responses" in run.stderr and "not supported" in run.stderr
    assert not sim.simulator.records
