"""Sessions as a whole: each root's duration, goodness and critical path (dagperf.metrics), first
on hand-made timings, then measured end to end against a server whose slow turns are known."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from dagperf.graph import compile_dag_jsonl
from dagperf.metrics.critical_path import Timing, critical_path
from dagperf.vocabulary import catalog

from dagfile import conv, load, turn, user
from runs import finish, read_jsonl, serving, start_profile

MS = 1_000_000  # ns

# p spawns c and waits for it at its second turn, 100 ms after c ends; c's first turn is slow.
JOINED = (
    conv("p", turn(spawns=["c"]), turn(delay=100)),
    conv("c", turn(messages=[user("slow")]), turn()),
)


def test_the_critical_path_goes_through_what_released_each_request_and_splits_the_time():
    (tree,) = compile_dag_jsonl(load(*JOINED)).trees
    p0, p1 = tree.sessions[0].first_node, tree.sessions[0].first_node + 1
    child = next(s for s in tree.sessions if s.conversation_id == "c")
    c0, c1 = child.first_node, child.first_node + 1
    times = {  # ms: p:0 0-10, c:0 12-312, c:1 313-323, p:1 starts 100 ms + 7 ms later
        p0: Timing(0, 0, 10 * MS),
        c0: Timing(0, 12 * MS, 312 * MS),
        c1: Timing(0, 313 * MS, 323 * MS),
        p1: Timing(0, 430 * MS, 440 * MS),
    }
    path = critical_path(tree, times, start_ns=0)
    assert path is not None and path.nodes == (p0, c0, c1, p1)
    assert path.names == ("p:0", "c:0", "c:1", "p:1")
    assert path.server_ns == (10 + 300 + 10 + 10) * MS
    assert path.delay_ns == 100 * MS  # p:1's authored delay, out of its 107 ms wait
    assert path.dispatch_ns == (2 + 1 + 7) * MS
    assert path.total_ns == 440 * MS  # the whole session, nothing counted twice
    assert path.join_wait_ns == (323 - 10) * MS  # p waited for c from its own p:0's end


def test_a_wait_shorter_than_its_delay_and_a_clock_step_back_count_no_dispatch():
    (tree,) = compile_dag_jsonl(load(conv("a", turn(), turn(delay=50)))).trees
    times = {0: Timing(5 * MS, 5 * MS, 20 * MS), 1: Timing(0, 19 * MS, 30 * MS)}  # skewed clocks
    path = critical_path(tree, times, start_ns=5 * MS)
    assert path is not None
    assert (path.server_ns, path.delay_ns, path.dispatch_ns) == (26 * MS, 0, 0)


def slow_turns_server(slow_s: float = 0.3, fast_s: float = 0.01) -> web.Application:
    """A chat endpoint that takes `slow_s` when the turn's own message says "slow"."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        slow = "slow" in body["messages"][-1]["content"]
        await asyncio.sleep(slow_s if slow else fast_s)
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": "ok"}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def run_sessions(tmp_path, lines, *flags):
    async with serving(slow_turns_server()) as url:
        process, directory = await start_profile(url, tmp_path, lines, "--model", "m", *flags)
        run = await finish(process, directory, None)
    assert run.returncode == 0, run.stderr
    return run, {s["conversation_id"]: s for s in read_jsonl(directory / "session_export.jsonl")}


async def test_sessions_are_measured_whole_and_one_slow_turn_makes_a_session_not_good(tmp_path):
    lines = [*JOINED, conv("q", turn(), turn())]
    run, sessions = await run_sessions(
        tmp_path, lines, "--concurrency", "2", "--goodput", "request_latency:150"
    )
    p, q = sessions["p"], sessions["q"]
    assert (p["request_count"], p["error_count"], p["complete"]) == (4, 0, True)
    assert p["good"] is False and q["good"] is True  # only p holds the 300 ms turn
    path = p["critical_path"]
    assert path["path"] == ["p:0", "c:0", "c:1", "p:1"]
    assert path["delay_ms"] == 0.0  # p:1 waited for c: it went as c ended, its 100 ms dropped
    assert path["server_ms"] >= 330  # the server's own sleeps along the path, at the least
    split = path["server_ms"] + path["dispatch_ms"] + path["delay_ms"]
    assert split == pytest.approx(p["duration_ms"], abs=0.01)  # the split is the whole session
    assert path["join_wait_ms"] >= 300
    records = {
        (r["metadata"]["conversation_id"], r["metadata"]["turn_index"]): r for r in run.records
    }
    first = min(r["metadata"]["credit_issued_ns"] for r in records.values()
                if r["metadata"]["root_correlation_id"] == p["root_correlation_id"])  # fmt: skip
    last = records[("p", 1)]["metadata"]["request_end_ns"]
    assert (p["start_ns"], p["end_ns"]) == (first, last)

    summary = run.summary
    assert summary["session_count"]["avg"] == 2 and summary["good_session_count"]["avg"] == 1
    assert summary["session_duration"]["count"] == 2
    assert summary["session_duration"]["max"] == pytest.approx(p["duration_ms"])
    duration = summary["benchmark_duration"]["avg"]
    assert summary["session_goodput"]["avg"] == pytest.approx(1 / duration)
    critical = summary["critical_path"]
    assert [s["conversation_id"] for s in critical["slowest"]] == ["p", "q"]
    shares = critical["server_share"] + critical["dispatch_share"] + critical["delay_share"]
    assert shares == pytest.approx(1.0)
    assert (
        "Session Goodput (sessions/sec)"
        in (run.directory / "profile_export_aiperf.csv").read_text()
    )


async def test_a_session_cut_short_is_exported_incomplete_and_left_out_of_the_statistics(tmp_path):
    run, sessions = await run_sessions(
        tmp_path, [conv("a", turn(), turn(), turn())], "--request-count", "2"
    )
    a = sessions["a"]
    assert (a["complete"], a["good"], a["request_count"]) == (False, False, 2)
    assert run.summary["session_count"]["avg"] == 0
    assert run.summary["incomplete_session_count"]["avg"] == 1
    assert "session_duration" not in run.summary
    reported = {
        name for name, value in run.summary.items() if isinstance(value, dict) and "unit" in value
    }
    assert reported <= catalog.UNITS.keys()  # every metric named, with its unit, in the catalog
