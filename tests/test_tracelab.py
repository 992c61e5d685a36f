"""tracelab: TraceLab rows converted into the Weka traces AIPerf 0.13 makes of them (sessions,
round order, times, token counts, block ids, sub-agents found by their spawning calls), the
trees those replay as, and every refusal by line. (The same traces and requests as AIPerf's:
tests/test_aiperf_tracelab.py.)"""

from __future__ import annotations

import gzip
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dagperf.dataset import DatasetError
from dagperf.dataset.formats import FORMATS
from dagperf.dataset.formats.agent_traces.schema import Call, Subagent, Trace
from dagperf.dataset.formats.tracelab import read_tracelab, traces_of
from dagperf.dataset.limits import MAX_TOKENS
from dagperf.graph import SessionKind
from dagperf.sources import load_graph

from dagfile import check_tree

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "traces" / "tracelab.jsonl"
START = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def row(sid: str, sent: float, done: float | None = None, **fields) -> dict:
    """A round sent at `sent` (a user message) with a reply until `done` (text), in seconds."""
    events = [{"event_type": "user_message", "timestamp": at(sent)}]
    if done is not None:
        events.append({"event_type": "text", "timestamp": at(done)})
    return {
        "session_id": sid,
        "user": "u",
        "project": "p",
        "model": "m",
        "input_tokens_total": 640,
        "prefix_tokens": 0,
        "output_tokens": 10,
        "timing_events": events,
        "tools": [],
        **fields,
    }


def call(name: str, start: float, end: float, ms: float | None = None) -> dict:
    """A tool call; a `Task` of 10 s or more holds the sessions inside it."""
    ms = round((end - start) * 1000) if ms is None else ms
    return {
        "tool_name": name,
        "emitted_at": at(start),
        "result_at": at(end),
        "tool_wall_latency_ms": ms,
    }


def lines(*rows: dict | str) -> list[bytes]:
    return [(r if isinstance(r, str) else json.dumps(r)).encode() + b"\n" for r in rows]


def converted(*rows: dict | str) -> dict[str, Trace]:
    return {trace.id: trace for _, _, trace in traces_of(lines(*rows), "t.jsonl")}


def calls(trace: Trace) -> list[Call]:
    return [r for r in trace.requests if not isinstance(r, Subagent)]


def entries(trace: Trace) -> list[Subagent]:
    return [r for r in trace.requests if isinstance(r, Subagent)]


def refused(*rows: dict | str) -> list[tuple[int | None, str]]:
    with pytest.raises(DatasetError) as caught:
        traces_of(lines(*rows), "t.jsonl")
    return [(p.line, p.message) for p in caught.value.problems]


# --- sessions and rounds ----------------------------------------------------------------------


def test_rows_group_into_sessions_in_the_order_of_their_first_rows():
    traces = converted(
        row("b", 10, 11, round_index=0),
        row("a", 5, 6, round_index=0, input_tokens_total=700),
        row("b", 12, 13, round_index=1),
        row("a", 0, 1, round_index=1, input_tokens_total=800),  # later in the file, sent first
    )
    assert list(traces) == ["b", "a"]
    # A session's rounds go in the order they were sent, whatever the file's order or index.
    assert [c.tokens_in for c in calls(traces["a"])] == [800, 700]
    assert [c.t for c in calls(traces["a"])] == [0.0, 5.0]


def test_rounds_sent_at_once_go_by_round_index_then_by_the_file():
    traces = converted(
        row("a", 0, 1, round_index=2, input_tokens_total=100),
        row("a", 0, 1, round_index=1, input_tokens_total=200),
        row("a", 0, 1, input_tokens_total=300),  # no index: 0
        row("a", 0, 1, round_index=0, input_tokens_total=400),
    )
    assert [c.tokens_in for c in calls(traces["a"])] == [300, 400, 200, 100]


def test_a_round_is_sent_at_its_last_input_and_lasts_until_its_last_output():
    events = [
        ("user_message", 0.0),
        ("tool_result", 1.25),
        ("reasoning", 2.0),
        ("text", 3.0),
        ("tool_call", 3.5),
        ("usage_report", 9.0),
    ]
    timed = [{"event_type": kind, "timestamp": at(s)} for kind, s in events]
    outputs_only = [
        {"event_type": "text", "timestamp": at(20)},
        {"event_type": "text", "timestamp": at(21.5)},
    ]
    traces = converted(
        row("a", 0, timing_events=timed),
        row("a", 0, timing_events=outputs_only),  # sent at its first output
        row("a", 25),  # no output: no api_time
        row("a", 30, 31),
    )
    got = [(c.t, c.api_time, c.think_time, c.stop) for c in calls(traces["a"])]
    assert got == [
        (0.0, 2.25, None, "tool_use"),  # t from the session's first round, sent at 1.25
        (18.75, 1.5, 16.5, "end_turn"),  # the gap since the round before ended (at 3.5)
        (23.75, None, 3.5, "end_turn"),
        (28.75, 1.0, 5.0, "end_turn"),
    ]


def test_counts_become_in_and_out_as_aiperf_makes_them():
    traces = converted(
        row("a", 0, 1, input_tokens_total=900, output_tokens=100, reasoning_output_tokens=50),
        row("a", 2, 3, input_tokens_total=0, output_tokens=0, first_input_event_type="tool_result"),
        row("a", 4, 5, input_tokens_total=None, output_tokens=None, model=None),
    )
    got = [(c.tokens_in, c.tokens_out, c.input_types, c.model) for c in calls(traces["a"])]
    assert got == [
        (900, 150, ["text"], "m"),  # reasoning is generated too
        (1, 1, ["tool_result"], "m"),  # at least 1 of each
        (1, 1, ["text"], "unknown"),
    ]
    assert traces["a"].models == ["m", "unknown"]
    assert (traces["a"].block_size, traces["a"].tool_tokens, traces["a"].system_tokens) == (
        64,
        0,
        0,
    )


def test_block_ids_keep_the_prefix_the_engine_had_cached():
    traces = converted(
        row("a", 0, 1, input_tokens_total=1000, prefix_tokens=0),  # 15 whole blocks
        row("a", 2, 3, input_tokens_total=1500, prefix_tokens=1000),  # keeps 15, adds 8
        row("a", 4, 5, input_tokens_total=800, prefix_tokens=300),  # compacted: keeps 4
        row("a", 6, 7, input_tokens_total=700, prefix_tokens=9000),  # prefix past the input
        row("a", 8, 9, input_tokens_total=63),  # no whole block
    )
    ids = [c.hash_ids for c in calls(traces["a"])]
    assert ids[0] == list(range(1, 16))
    assert ids[1] == list(range(1, 24))
    assert ids[2] == [1, 2, 3, 4, *range(24, 32)]
    assert ids[3] == [1, 2, 3, 4, *range(24, 30)]  # 10 blocks, all kept
    assert ids[4] == []


# --- sub-agents -------------------------------------------------------------------------------


def parent_and_child(first_prefix: int = 0) -> list[dict]:
    """A parent whose second round calls a Task for 14 s, and a session inside that call."""
    task = [call("Task", 6, 20), call("Read", 6, 6.5)]
    read = [call("Read", 11.5, 11.6)]
    return [
        row("claude:parent", 0, 2, input_tokens_total=1000, model="big"),
        row(
            "claude:parent",
            5,
            6,
            input_tokens_total=1500,
            prefix_tokens=1000,
            model="big",
            tools=task,
        ),
        row(
            "claude:child", 7, 8, input_tokens_total=700, prefix_tokens=first_prefix, model="small"
        ),
        row(
            "claude:child",
            10,
            11.5,
            input_tokens_total=900,
            prefix_tokens=700,
            model="small",
            tools=read,
        ),
        row("claude:parent", 21, 23, input_tokens_total=2000, prefix_tokens=1500, model="big"),
    ]


def test_a_session_inside_a_spawning_call_is_its_sub_agent():
    traces = converted(*parent_and_child())
    assert list(traces) == ["claude_parent"]
    parent = traces["claude_parent"]
    assert [type(r).__name__ for r in parent.requests] == ["Call", "Call", "Subagent", "Call"]
    (entry,) = entries(parent)
    assert entry.t == 6.0  # the call's start, after the last request by then
    assert (entry.agent_id, entry.subagent_type, entry.status) == (
        "claude_child",
        "small",
        "completed",
    )
    assert (entry.duration_ms, entry.tool_use_count, entry.total_tokens) == (14000, 1, 1600 + 20)
    # Its requests in the parent's time, the first waiting on nothing before it.
    assert [(c.t, c.think_time) for c in entry.requests] == [(7.0, None), (10.0, 2.0)]
    assert parent.models == ["big", "small"]
    assert parent.totals == {
        "rounds": 3,
        "subagents": 1,
        "input_tokens": 4500,
        "output_tokens": 30,
        "source": "tracelab",
    }


def test_a_sub_agent_shares_no_block_with_its_parent():
    parent = converted(*parent_and_child(first_prefix=700))["claude_parent"]
    own = [c.hash_ids for c in calls(parent)]
    assert own == [list(range(1, 16)), list(range(1, 24)), list(range(1, 32))]
    child = [c.hash_ids for c in entries(parent)[0].requests]
    # One counter per trace: the parent's blocks first, then the child's, kept across its turns
    # but never the parent's (its first round keeps nothing, whatever its prefix says).
    assert child == [list(range(32, 42)), list(range(32, 46))]


def test_the_narrowest_window_holds_a_session_two_hold():
    rows = [
        row("wide", 0, 1, tools=[call("Task", 1, 60), call("Agent", 1.5, 20)]),
        row("inner", 2, 3),  # inside both: the Agent call's
        row("outer", 1.2, 2),  # starts before the Agent call: the Task call's
        row("wide", 61, 62),
    ]
    (entry_a, entry_b) = entries(converted(*rows)["wide"])
    assert [(e.agent_id, e.t, e.duration_ms) for e in (entry_a, entry_b)] == [
        ("outer", 1.0, 59000),
        ("inner", 1.5, 18500),
    ]


def test_a_sub_agent_has_its_parent_s_user_and_project_and_lies_wholly_inside_the_call():
    alone = {
        "another user": row("c", 7, 8, user="v"),
        "another project": row("c", 7, 8, project="other"),
        "past the call's end": row("c", 7, 20.5),
        "a tool time before its start": row("c", 7, 8, tools=[call("Read", 5.5, 7)]),
    }
    for why, child in alone.items():
        traces = converted(row("p", 0, 1, tools=[call("Task", 6, 20)]), child)
        assert list(traces) == ["p", "c"], why
    inside = converted(row("p", 0, 1, tools=[call("Task", 6, 20)]), row("c", 6, 20))
    assert [e.agent_id for e in entries(inside["p"])] == ["c"]  # the edges count as inside


def test_only_a_long_agent_or_task_call_with_both_times_spawns():
    calls_that_do_not = {
        "shorter than 10 s": call("Task", 6, 15.99),
        "not a spawning tool": call("Bash", 6, 20),
        "no result time": {**call("Task", 6, 20), "result_at": None},
        "no latency": {**call("Task", 6, 20), "tool_wall_latency_ms": None},
    }
    for why, tool in calls_that_do_not.items():
        assert list(converted(row("p", 0, 1, tools=[tool]), row("c", 7, 8))) == ["p", "c"], why
    # The recorded latency decides, not the times: 10 s of latency is enough.
    spawned = converted(row("p", 0, 1, tools=[call("Agent", 6, 7.5, ms=10000)]), row("c", 7, 7.5))
    assert list(spawned) == ["p"]


def test_a_codex_session_spawns_from_its_first_spawn_agent_to_its_last_wait_agent():
    codex = {"provider": "codex"}
    rows = [
        row(
            "codex:p",
            0,
            1,
            tools=[call("spawn_agent", 1, 1.1), call("wait_agent", 1.2, 3)],
            **codex,
        ),
        row(
            "codex:p",
            4,
            5,
            tools=[call("spawn_agent", 5, 5.1), call("wait_agent", 5.2, 9)],
            **codex,
        ),
        row("codex:c", 2, 6),  # one window from 1 to 9, however short each call
        row("codex:p", 10, 11, **codex),
    ]
    (entry,) = entries(converted(*rows)["codex_p"])
    assert (entry.agent_id, entry.t, entry.duration_ms) == ("codex_c", 1.0, 8000)
    # A Codex session's Task calls spawn nothing: it has its one window.
    rows[0]["tools"] = [call("Task", 1, 15)]
    rows[1]["tools"] = []
    assert list(converted(*rows)) == ["codex_p", "codex_c"]


def test_only_one_level_is_nested():
    rows = [
        row("top", 0, 1, tools=[call("Task", 1, 40)]),
        row("mid", 2, 3, tools=[call("Task", 3, 20)]),
        row("low", 4, 5),  # mid's sub-agent: a level too deep, a session of its own
        row("top", 41, 42),
        row("later", 50, 51),
    ]
    traces = converted(*rows)
    assert list(traces) == ["top", "low", "later"]  # in its place, not after the others
    assert [e.agent_id for e in entries(traces["top"])] == ["mid"]


def test_a_sub_agent_spawned_before_any_parent_request_is_a_root_after_the_others(caplog):
    caplog.set_level(logging.WARNING)
    traces = converted(
        row("p", 30, 31, tools=[call("Task", 1, 20)]),  # called before its only timed round
        row("c", 2, 3),
        row("q", 50, 51),
        {**row("r", 0, user="w", tools=[call("Task", 40, 60)]), "timing_events": []},
        row("rc", 41, 42, user="w"),  # its parent has no timed round: no trace to be placed in
    )
    assert list(traces) == ["p", "q", "c", "rc"]
    assert entries(traces["p"]) == []
    assert "as AIPerf replays them: the sub-agent sessions c, rc, spawned before" in caplog.text


def test_ids_are_the_session_ids_made_safe():
    long = "claude:" + "x" * 200
    traces = converted(row("claude:a b/c", 0, 1), row("claude:: é.b_c-d", 2, 3), row(long, 4, 5))
    assert list(traces) == ["claude_a_b_c", "claude_.b_c-d", ("claude_" + "x" * 200)[:150]]


# --- what a run replays -------------------------------------------------------------------------


def test_the_example_is_a_parent_with_its_sub_agent_spawned_and_joined_and_another_root():
    graph = load_graph(EXAMPLE, "tracelab")
    parent, other = graph.trees
    check_tree(parent)
    check_tree(other)
    main, child = parent.sessions
    assert (main.conversation_id, main.kind, main.depth) == (
        "claude_7c1e-main",
        SessionKind.ROOT,
        0,
    )
    assert (child.conversation_id, child.kind, child.depth) == (
        "claude_7c1e-main::sa:claude_7c1e-explore",
        SessionKind.SPAWN,
        1,
    )
    nodes = parent.nodes
    turns = {(parent.sessions[n.session].conversation_id, n.turn): i for i, n in enumerate(nodes)}
    p = [turns[(main.conversation_id, k)] for k in range(3)]
    c = [turns[(child.conversation_id, k)] for k in range(3)]
    # Spawned after the parent's round with the Task call, its recorded offset (7 - 6.3) later;
    # the parent's next round, recorded after the call returned, waits for it.
    assert nodes[c[0]].deps == (p[1],) and nodes[c[0]].delay_s == pytest.approx(0.7)
    assert nodes[p[2]].join_deps == (c[2],)
    assert [nodes[i].delay_s for i in p[:2]] == pytest.approx([0.0, 0.3])
    assert [nodes[i].delay_s for i in c[1:]] == pytest.approx([0.3, 0.1])
    assert [nodes[i].payload.max_tokens for i in p] == [190, 90, 520]
    assert [s.conversation_id for s in other.sessions] == ["codex_91ab-review"]
    assert graph.shape.sizes == [6, 2] and graph.shape.spawn_children == 1


def test_the_entry_replays_as_agent_traces_do():
    entry, weka = FORMATS["tracelab"], FORMATS["weka_trace"]
    assert entry.takes == weka.takes and entry.extra_inputs == {"ignore_eos": True}
    assert entry.read_directory is None  # AIPerf reads one file


def test_a_gzip_file_reads_as_the_plain_one(tmp_path):
    packed = tmp_path / "tracelab.jsonl.gz"
    packed.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    assert load_graph(packed, "tracelab").shape == load_graph(EXAMPLE, "tracelab").shape


# --- what is passed over, what is refused ------------------------------------------------------


def test_rows_aiperf_passes_over_are_passed_over_with_a_warning(caplog):
    caplog.set_level(logging.WARNING)
    traces = converted(
        row("a", 0, 1),
        {"round_index": 3, "note": "no session"},
        {**row("a", 2, 3), "session_id": ""},
        {**row("a", 4, 5), "timing_events": [{"event_type": "usage_report", "timestamp": at(4)}]},
        row("a", 6, 7),
    )
    assert [c.t for c in calls(traces["a"])] == [0.0, 6.0]
    assert "line 2: no session_id; line 3: no session_id; line 4: no input or output" in caplog.text


BAD = {  # what one row holds: (its problem, the line of the file below)
    "invalid JSON": ('{"session_id": "a",', "invalid JSON:"),
    "not an object": ('["a", 1]', "expected a JSON object (one round per line), got an array"),
    "a time that does not parse": (
        {**row("a", 0), "timing_events": [{"event_type": "text", "timestamp": "noon"}]},
        "timing_events.0.timestamp: not an ISO 8601 time: 'noon'",
    ),
    "a time as a number": (
        {**row("a", 0), "tools": [{"tool_name": "Task", "emitted_at": 1777885200}]},
        "tools.0.emitted_at: Input should be an ISO 8601 time string or null",
    ),
    "a count as a string": (
        {**row("a", 0), "input_tokens_total": "640"},
        "input_tokens_total: Input should be a valid integer",
    ),
    "a negative count": (
        {**row("a", 0), "prefix_tokens": -1},
        "prefix_tokens: Input should be greater than or equal to 0",
    ),
    "a session_id as a number": ({**row("a", 0), "session_id": 7}, "session_id: Input should be"),
    "a list of events that is not one": (
        {**row("a", 0), "timing_events": {"event_type": "text"}},
        "timing_events: Input should be a valid array",
    ),
    "a reply no server takes": (
        {**row("a", 0), "output_tokens": MAX_TOKENS, "reasoning_output_tokens": 1},
        f"output_tokens: with reasoning_output_tokens, over {MAX_TOKENS}",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_row_is_refused_at_its_line(case):
    bad, says = BAD[case]
    found = refused(row("a", 0, 1), bad, row("a", 2, 3))
    assert [line for line, _ in found] == [2], found
    assert found[0][1].startswith(says), found


def test_every_problem_is_found_in_one_pass():
    found = refused(
        row("a", 0, 1),
        '{"broken"',
        {**row("a", 2), "output_tokens": "5"},
        row("a", 4, 5),
        {**row("b", 6), "timing_events": [{"event_type": "text", "timestamp": "later"}]},
    )
    assert [line for line, _ in found] == [2, 3, 5]


def test_two_sessions_of_one_trace_id_are_refused_at_the_second():
    found = refused(row("claude:a", 0, 1), row("claude:b", 2, 3), row("claude/a", 4, 5))
    assert found == [
        (
            3,
            "session_id: 'claude/a' makes the trace id 'claude_a', as 'claude:a' on "
            "line 1 does: AIPerf refuses two sessions of one trace id",
        )
    ]


def test_two_sub_agents_of_one_agent_id_are_refused_at_their_parent():
    rows = [row("p", 0, 1, tools=[call("Task", 1, 20)]), row("c:1", 2, 3), row("c/1", 4, 5)]
    with pytest.raises(DatasetError) as caught:  # as the replay plans the trace, as AIPerf's
        read_tracelab(lines(*rows, row("p", 21, 22)), "t.jsonl")
    found = [(p.line, p.message) for p in caught.value.problems]
    assert [line for line, _ in found] == [1]
    assert "agent_id 'c_1' is also the sub-agent's" in found[0][1]


def test_a_file_without_sessions_or_timed_rounds_is_refused():
    assert refused() == [(None, "no TraceLab sessions: every row needs a session_id")]
    assert refused({"round_index": 0}) == [
        (None, "no TraceLab sessions: every row needs a session_id")
    ]
    untimed = {**row("a", 0), "timing_events": []}
    assert refused(untimed)[0][1].startswith("no session has a round with a time")


def test_lines_are_numbered_as_aiperf_reads_them():
    """As text: a lone CR ends a line, and a byte-order mark is invalid JSON, not whitespace."""
    good = json.dumps(row("a", 0, 1)).encode()
    with pytest.raises(DatasetError) as caught:
        traces_of([good + b"\r{broken\r\n", good + b"\n"], "t.jsonl")
    assert [p.line for p in caught.value.problems] == [2]
    with pytest.raises(DatasetError) as caught:
        traces_of([b"\xef\xbb\xbf" + good + b"\n"], "t.jsonl")
    assert [p.line for p in caught.value.problems] == [1]
    assert "byte-order mark" in caught.value.problems[0].message
