"""The DAG semantics end to end: real processes, real ZeroMQ, a real HTTP server that records.

Each test asserts the exact messages each request carried, that nothing left before what it
depends on had finished, the record metadata, and the exact BranchStats.
"""

from __future__ import annotations

import pytest

from dagperf.simulator import SimConfig, running_simulator

from dagfile import conv, stats, turn, user
from runs import RECORDING, check_dependencies_finished_first, profile

SYSTEM = {"role": "system", "content": "be careful"}


@pytest.fixture
async def sim():
    async with running_simulator(RECORDING) as running:
        yield running


async def test_fork_children_continue_the_parents_history_on_its_worker(sim, tmp_path):
    lines = [
        conv("root", turn(messages=[SYSTEM, user("summarize")], forks=["a", "b"])),
        conv("a", turn(messages=[user("a0"), user("a0b")]), turn(messages=[user("a1")])),
        conv("b", turn(messages=[user("b0")]), turn(messages=[user("b1")])),
    ]
    run = await profile(sim, tmp_path, lines, "--workers", "3", "--streaming")
    assert run.returncode == 0, run.stderr
    root = [SYSTEM, user("summarize")]
    assert run.body("root:0")["messages"] == root
    a0 = [*root, run.reply("root:0"), user("a0"), user("a0b")]
    assert run.body("a:0")["messages"] == a0
    assert run.body("a:1")["messages"] == [*a0, run.reply("a:0"), user("a1")]
    b0 = [*root, run.reply("root:0"), user("b0")]
    assert run.body("b:1")["messages"] == [*b0, run.reply("b:0"), user("b1")]
    assert len({r["metadata"]["worker_id"] for r in run.records}) == 1  # the tree stayed together
    check_dependencies_finished_first(run)

    root_id = run.one("root:0")["metadata"]["x_correlation_id"]
    for r in run.records:
        m = r["metadata"]
        served = run.served[m["x_request_id"]]
        assert served.headers["X-Request-ID"] == m["x_request_id"]
        assert served.headers["X-Correlation-ID"] == m["x_correlation_id"]
        assert served.headers["X-Session-Affinity"] == root_id  # the tree's routing key
        assert m["root_correlation_id"] == root_id
    a = run.one("a:1")["metadata"]
    assert (a["agent_depth"], a["parent_correlation_id"], a["branch_id"], a["branch_mode"]) == (
        1,
        root_id,
        "root:0",
        "fork",
    )
    assert a["x_correlation_id"] == run.one("a:0")["metadata"]["x_correlation_id"] != root_id
    assert sorted(r["metadata"]["session_num"] for r in run.records) == [0, 1, 2, 3, 4]
    assert run.branch_stats == stats(children_spawned=2, children_completed=2)


async def test_background_fork_hands_over_the_history_and_the_parent_goes_on(sim, tmp_path):
    lines = [
        conv(
            "p",
            turn(messages=[user("p0")], forks=[{"child": "c", "background": True}]),
            turn(messages=[user("p1")]),
        ),
        conv("c", turn(messages=[user("c0")])),
    ]
    run = await profile(sim, tmp_path, lines)
    assert run.returncode == 0, run.stderr
    assert run.body("c:0")["messages"] == [user("p0"), run.reply("p:0"), user("c0")]
    assert run.body("p:1")["messages"] == [user("p0"), run.reply("p:0"), user("p1")]
    assert run.one("p:1")["metadata"]["depends_on"] == [run.one("p:0")["metadata"]["x_request_id"]]
    check_dependencies_finished_first(run)
    assert run.branch_stats == stats(children_spawned=1, children_completed=1)


async def test_spawn_starts_fresh_and_the_parent_joins_on_the_next_turn(sim, tmp_path):
    lines = [
        conv(
            "p",
            turn(messages=[SYSTEM, user("plan")], spawns=["agent"]),
            turn(messages=[user("go")]),
        ),
        conv("agent", turn(messages=[SYSTEM, user("sub")]), turn(messages=[user("sub2")])),
    ]
    run = await profile(sim, tmp_path, lines, "--workers", "2")
    assert run.returncode == 0, run.stderr
    assert run.body("agent:0")["messages"] == [SYSTEM, user("sub")]  # nothing of the parent
    assert run.body("agent:1")["messages"] == [
        SYSTEM,
        user("sub"),
        run.reply("agent:0"),
        user("sub2"),
    ]
    # The join continues the parent's own history only.
    assert run.body("p:1")["messages"] == [SYSTEM, user("plan"), run.reply("p:0"), user("go")]
    join = run.one("p:1")["metadata"]
    assert run.one("agent:1")["metadata"]["x_request_id"] in join["depends_on"]
    check_dependencies_finished_first(run)
    agent = run.one("agent:0")["metadata"]
    assert (agent["branch_mode"], agent["agent_depth"]) == ("spawn", 1)
    assert run.server("agent:0").headers["X-Session-Affinity"] == agent["x_correlation_id"]
    assert run.branch_stats == stats(
        children_spawned=1, children_completed=1, parents_suspended=1, parents_resumed=1
    )


async def test_join_at_lets_the_parent_run_the_turns_between(sim, tmp_path):
    lines = [
        conv("p", turn(spawns=[{"children": ["c"], "join_at": 2}]), turn(), turn()),
        conv("c", turn(), turn(), turn()),
    ]
    run = await profile(sim, tmp_path, lines)
    assert run.returncode == 0, run.stderr
    check_dependencies_finished_first(run)
    # p:1 needs only p:0, so it left before the child was done; p:2 waited for the child.
    assert run.server("p:1").received_ns < run.server("c:2").received_ns
    assert run.server("p:2").received_ns >= run.server("c:2").end_ns
    assert run.one("p:1")["metadata"]["depends_on"] == [run.one("p:0")["metadata"]["x_request_id"]]
    assert run.branch_stats["children_completed"] == 1


async def test_fan_in_gates_one_turn_on_several_branches(sim, tmp_path):
    lines = [
        conv(
            "p", turn(spawns=[{"children": ["a"], "join_at": 2}]), turn(spawns=["b", "c"]), turn()
        ),
        conv("a", turn(), turn()),
        conv("b"),
        conv("c"),
    ]
    run = await profile(sim, tmp_path, lines, "--workers", "2")
    assert run.returncode == 0, run.stderr
    waited = set(run.one("p:2")["metadata"]["depends_on"])
    assert {run.one(n)["metadata"]["x_request_id"] for n in ("p:1", "a:1", "b:0", "c:0")} == waited
    check_dependencies_finished_first(run)
    assert run.branch_stats["children_completed"] == 3


async def test_a_spawn_target_runs_once_per_reference(sim, tmp_path):
    lines = [
        conv("p", turn(spawns=["critic"]), turn(spawns=["critic"]), turn()),
        conv("critic", turn(messages=[user("review")])),
    ]
    run = await profile(sim, tmp_path, lines)
    assert run.returncode == 0, run.stderr
    first, second = run.named("critic:0")
    assert first["metadata"]["x_correlation_id"] != second["metadata"]["x_correlation_id"]
    assert (first["metadata"]["branch_id"], second["metadata"]["branch_id"]) == ("p:0", "p:1")
    assert first["metadata"]["x_request_id"] in run.one("p:1")["metadata"]["depends_on"]
    assert second["metadata"]["x_request_id"] in run.one("p:2")["metadata"]["depends_on"]
    check_dependencies_finished_first(run)
    assert run.branch_stats["children_spawned"] == 2


async def test_pre_session_spawns_go_out_first_and_gate_nothing(sim, tmp_path):
    lines = [
        conv("root", turn(messages=[user("r0")]), turn(), pre_session_spawns=["bg"]),
        conv("bg", turn(messages=[user("bg0")]), turn()),
    ]
    run = await profile(sim, tmp_path, lines)
    assert run.returncode == 0, run.stderr
    assert run.sent_order()[:2] == ["bg:0", "root:0"]
    bg = run.one("bg:0")["metadata"]
    assert (bg["parent_correlation_id"], bg["depends_on"], bg["agent_depth"]) == (None, [], 1)
    assert bg["branch_id"] == "root:pre"
    assert run.body("bg:0")["messages"] == [user("bg0")]
    assert run.one("root:1")["metadata"]["depends_on"] == [
        run.one("root:0")["metadata"]["x_request_id"]
    ]
    assert run.branch_stats == stats(children_spawned=1, children_completed=1)


async def test_delay_waits_before_sending(sim, tmp_path):
    lines = [conv("p", turn(), turn(delay=150), turn())]
    run = await profile(sim, tmp_path, lines)
    assert run.returncode == 0, run.stderr
    assert run.one("p:1")["metadata"]["delay_ms"] == 150
    check_dependencies_finished_first(run)  # includes the 150 ms wait after p:0 ended


async def test_what_goes_on_the_wire(sim, tmp_path):
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    lines = [
        conv(
            "p",
            turn(
                messages=[user("x")],
                model="turn-model",
                max_tokens=3,
                tools=[tool],
                extra={"temperature": 0.2, "seed": 9},
                spawns=["c"],
            ),
            turn(messages=[user("y")], delay=1),
        ),
        conv("c", turn(messages=[user("z")], extra={"top_p": 0.5})),
    ]
    run = await profile(
        sim,
        tmp_path,
        lines,
        "--model",
        "cli-model",
        "--streaming",
        "--extra-inputs",
        "ignore_eos:true",
        "--extra-inputs",
        "temperature:0.9",
    )
    assert run.returncode == 0, run.stderr
    assert run.body("p:0") == {
        "messages": [user("x")],
        "model": "turn-model",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 3,
        "tools": [tool],
        "ignore_eos": True,
        "temperature": 0.2,  # the turn's own extra wins over --extra-inputs
        "seed": 9,
    }
    assert run.body("c:0") == {
        "messages": [user("z")],
        "model": "cli-model",
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "temperature": 0.9,
        "top_p": 0.5,
    }
    assert run.body("p:1")["model"] == "cli-model"
    for served in run.served.values():
        assert not {"forks", "spawns", "delay", "extra"} & set(served.body)


async def test_the_captured_reply_drops_reasoning(tmp_path):
    config = RECORDING.model_copy(update={"reasoning_tokens": 2, "output_tokens": 3})
    async with running_simulator(config) as sim:
        lines = [conv("p", turn(messages=[user("a")]), turn(messages=[user("b")]))]
        run = await profile(sim, tmp_path, lines, "--streaming")
    assert run.returncode == 0, run.stderr
    content = run.server("p:0").reply
    assert len(content.split()) == 3  # the content words only
    assert run.body("p:1")["messages"] == [
        user("a"),
        {"role": "assistant", "content": content},
        user("b"),
    ]
    metrics = run.one("p:0")["metrics"]
    assert metrics["usage_reasoning_tokens"]["value"] == 2
    assert metrics["reasoning_token_count"]["value"] == 2


async def test_reasoning_stands_in_when_there_is_no_content(tmp_path):
    config = SimConfig(ttft_ms=1, itl_ms=0, reasoning_tokens=4, record_bodies=True)
    async with running_simulator(config) as sim:
        lines = [conv("p", turn(messages=[user("a")], max_tokens=2), turn(messages=[user("b")]))]
        run = await profile(sim, tmp_path, lines)
    assert run.returncode == 0, run.stderr
    assert run.server("p:0").reply == ""  # both tokens were reasoning
    (reply,) = [m for m in run.body("p:1")["messages"] if m["role"] == "assistant"]
    assert len(reply["content"].split()) == 2


async def test_completions_endpoint_sends_the_history_as_one_prompt(sim, tmp_path):
    lines = [conv("p", turn(messages=[user("first")]), turn(messages=[user("second")]))]
    run = await profile(sim, tmp_path, lines, "--endpoint-type", "completions")
    assert run.returncode == 0, run.stderr
    assert run.server("p:0").endpoint == "completions"
    assert run.body("p:0")["prompt"] == "first"
    assert run.body("p:1")["prompt"] == f"first\n{run.server('p:0').reply}\nsecond"


@pytest.mark.parametrize("streaming", [True, False])
async def test_the_captured_reply_keeps_tool_calls(sim, tmp_path, streaming):
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    lines = [
        conv(
            "p",
            turn(messages=[user("find it")], tools=tools, extra={"tool_choice": "required"}),
            turn(messages=[{"role": "tool", "tool_call_id": "x", "content": "found"}]),
        )
    ]
    run = await profile(sim, tmp_path, lines, *(["--streaming"] if streaming else []))
    assert run.returncode == 0, run.stderr
    call = run.server("p:0").tool_call
    assert call["function"]["name"] == "search"
    assert run.body("p:1")["messages"] == [
        user("find it"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "x", "content": "found"},
    ]
