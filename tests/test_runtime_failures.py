"""Failures end to end: they become error records and accounted BranchStats, never crashes;
and whatever happens, the run leaves no process and no socket behind."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import tempfile
import time

import pytest
from aiohttp import web

from dagperf.simulator import SimConfig, running_simulator

from dagfile import conv, stats, turn
from runs import (
    RECORDING,
    children,
    connected_to,
    dagperf_processes,
    finish,
    free_port,
    profile,
    read_jsonl,
    serving,
    start_profile,
)


@pytest.fixture
async def sim():
    async with running_simulator(RECORDING) as running:
        yield running


@pytest.fixture(autouse=True)
def nothing_left_behind(monkeypatch):
    """No process of a run outlives it, nor its socket directory: each test's runs make theirs
    in a temporary directory of the test's own (short: a socket path must fit 107 bytes), so
    another suite running beside this one cannot be mistaken for a leak."""
    private = tempfile.mkdtemp(prefix="dgp-", dir="/tmp")
    monkeypatch.setenv("TMPDIR", private)
    before_processes = dagperf_processes()
    yield
    assert dagperf_processes() <= before_processes
    assert os.listdir(private) == []
    os.rmdir(private)


async def test_http_errors_become_error_records_and_end_their_branch(sim, tmp_path):
    lines = [
        conv("p", turn(spawns=["bad", "good"]), turn()),
        conv("bad", turn(extra={"max_tokens": 0}), turn()),  # the server answers 400
        conv("good"),
    ]
    run = await profile(sim, tmp_path, lines, "--max-error-rate", "1")  # errors on purpose
    assert run.returncode == 0, run.stderr
    (bad,) = run.named("bad:0")
    assert bad["error"]["code"] == 400 and "max_tokens" in bad["error"]["message"]
    assert bad["error"]["type"] == "Bad Request"
    assert bad["metrics"]["error_isl"]["unit"] == "tokens"
    assert run.named("bad:1") == []  # the rest of the failed child is not sent
    assert run.one("p:1")["error"] is None  # the join was released
    assert run.branch_stats == stats(
        children_spawned=2,
        children_completed=1,
        children_errored=1,
        parents_suspended=1,
        parents_resumed=1,
    )
    assert run.summary["error_request_count"]["avg"] == 1
    assert run.summary["request_error_rate"]["avg"] == 25.0
    (entry,) = run.summary["error_summary"]
    assert entry["count"] == 1 and entry["error_details"]["code"] == 400


async def test_fail_fast_cancels_the_run_on_the_first_child_error(tmp_path):
    config = RECORDING.model_copy(update={"ttft_ms": 300})
    lines = [
        conv("p", turn(spawns=["bad", "slow"]), turn()),
        conv("bad", turn(extra={"max_tokens": 0})),
        conv("slow"),
    ]
    async with running_simulator(config) as sim:
        run = await profile(sim, tmp_path, lines, "--fail-fast")
    assert run.returncode == 1
    assert "--fail-fast: child 'bad' turn 0 failed" in run.stderr
    slow = run.one("slow:0")
    assert slow["metadata"]["was_cancelled"] and slow["error"]["code"] == 499
    assert run.named("p:1") == []
    assert run.branch_stats == stats(
        children_spawned=2,
        children_errored=1,
        children_truncated=1,
        parents_suspended=1,
        parents_failed_due_to_child_error=1,
    )
    assert run.summary["was_cancelled"] is True and run.summary["is_complete"] is False


async def test_fail_fast_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGPERF_DAG_FAIL_FAST", "1")
    lines = [conv("p", turn(spawns=["bad"]), turn()), conv("bad", turn(extra={"max_tokens": 0}))]
    async with running_simulator(RECORDING) as sim:
        run = await profile(sim, tmp_path, lines)
    assert run.returncode == 1 and "--fail-fast" in run.stderr


def first_passes_then_one_of_two_fails(rate: float) -> int:
    """A seed for the simulator's injected errors (drawn from random.Random(seed), one draw per
    request in the order they arrive) that lets the first request through and fails exactly one
    of the next two, whichever arrives first."""
    for seed in itertools.count():
        draws = random.Random(seed)
        first, second, third = (draws.random() < rate for _ in range(3))
        if not first and second != third:
            return seed
    raise AssertionError("unreachable")


@pytest.mark.parametrize("cancel", [True, False], ids=["cancelled", "default"])
async def test_cancel_session_on_failure_sends_nothing_more_of_the_failed_tree(tmp_path, cancel):
    """p spawns a, c and b (b after a delay) and joins them; the simulator fails one of a:0 and
    c:0 while the other is still being answered. Cancelled, the tree sends nothing more: not the
    survivor's next turn (armed with it), not the delayed b:0, not the join; the survivor's
    reply is still recorded, and the session export accounts for the four never sent."""
    rate = 0.5
    seed = first_passes_then_one_of_two_fails(rate)
    config = RECORDING.model_copy(update={"ttft_ms": 600, "error_rate": rate, "seed": seed})
    lines = [
        conv("p", turn(spawns=["a", "c", "b"]), turn()),
        conv("a", turn(), turn()),
        conv("c", turn(), turn()),
        conv("b", turn(delay=1500)),
    ]
    flags = ["--max-error-rate", "1"] + (["--cancel-session-on-failure"] if cancel else [])
    async with running_simulator(config) as sim:
        run = await profile(sim, tmp_path, lines, *flags)
    assert run.returncode == 0, run.stderr
    served = {name: run.server(name).status for name in ("p:0", "a:0", "c:0")}
    (failed,) = [name for name in ("a:0", "c:0") if served[name] == 500]
    assert served["p:0"] == 200, served  # the seed's premise: p:0 passes, one child fails
    survivor = "c" if failed == "a:0" else "a"
    assert run.one(f"{survivor}:0")["error"] is None  # answered after the failure, recorded
    (session,) = read_jsonl(run.directory / "session_export.jsonl")
    if cancel:
        assert sorted(run.sent_order()) == ["a:0", "c:0", "p:0"]
        assert len(run.served) == 3  # and nothing else reached the server
        assert (session["status"], session["complete"], session["good"]) == (
            "cancelled", False, False,
        )  # fmt: skip
        assert (session["request_count"], session["cancelled_count"]) == (3, 4)
        assert run.summary["cancelled_session_count"]["avg"] == 1
        assert run.summary["cancelled_request_count"]["avg"] == 4
        assert run.summary["session_count"]["avg"] == 0  # a cancelled session is not timed
        assert run.branch_stats == stats(
            children_spawned=2, children_errored=1, children_truncated=1,  # the survivor
            parents_suspended=1, parents_failed_due_to_child_error=1,
        )  # fmt: skip
    else:  # only the failed child's next turn is skipped
        expected = ["a:0", "a:1", "b:0", "c:0", "c:1", "p:0", "p:1"]
        assert sorted(run.sent_order()) == [n for n in expected if n != f"{failed[0]}:1"]
        assert (session["status"], session["cancelled_count"]) == ("complete", 0)
        assert "cancelled_session_count" not in run.summary


async def test_a_refused_connection_is_an_error_record(tmp_path):
    port = free_port()
    process, directory = await start_profile(
        f"127.0.0.1:{port}", tmp_path, [conv("p", turn(), turn())], "--model", "m"
    )
    run = await finish(process, directory, None)
    assert run.returncode == 3, run.stderr  # the endpoint failed the run
    assert "every request failed (1); most often ConnectionError" in run.stderr
    (record,) = run.records
    assert record["error"]["type"] == "ConnectionError" and record["error"]["code"] is None
    assert run.summary["request_error_rate"]["avg"] == 100.0


async def test_timeouts_and_malformed_streams_are_error_records(tmp_path):
    release = asyncio.Event()

    async def garbage(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        body = await request.json()
        if body["messages"][0]["content"] == "slow":
            await release.wait()  # no answer until the run is over: the client's timeout ends it
        if body["messages"][0]["content"] == "error":
            await response.write(b'data: {"error": {"message": "overloaded", "code": 503}}\n\n')
        else:
            await response.write(b"data: {not json\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", garbage)
    names = ("slow", "junk", "error")
    lines = [conv(name, turn(messages=[{"role": "user", "content": name}])) for name in names]
    async with serving(app) as url:
        # Long enough that the two quick answers come within it on a busy machine.
        flags = ("--model", "m", "--streaming", "--request-timeout-seconds", "3")
        process, directory = await start_profile(url, tmp_path, lines, *flags, "--concurrency", "3")
        run = await finish(process, directory, None)
        release.set()
    assert run.returncode == 3, run.stderr  # every request failed
    errors = {r["metadata"]["conversation_id"]: r["error"] for r in run.records}
    assert errors["slow"]["type"] == "TimeoutError"
    assert errors["junk"]["type"] == "MalformedResponse"
    assert errors["error"] == {"code": 503, "type": "ServerError", "message": "overloaded"}


async def test_a_killed_worker_fails_only_what_it_held(tmp_path):
    config = RECORDING.model_copy(update={"ttft_ms": 40})
    lines = [conv(f"r{i}", turn(forks=[f"c{i}"])) for i in range(12)]
    lines += [conv(f"c{i}", turn(), turn(), turn()) for i in range(12)]
    async with running_simulator(config) as sim:
        process, directory = await start_profile(
            sim.url, tmp_path, lines, "--workers", "3", "--concurrency", "12"
        )
        async with asyncio.timeout(30):
            # The roots and every child's first turn are out: a worker given roots holds
            # children in flight (three 40 ms turns each).
            while len(sim.simulator.records) < 24:
                await asyncio.sleep(0.01)
        workers = children(process.pid)
        assert len(workers) == 3
        # Roots land on workers by hash: kill one that was given some (it talks to the server).
        port = int(sim.url.rsplit(":", 1)[1])
        os.kill(next(pid for pid in workers if connected_to(pid, port)), signal.SIGKILL)
        killed_ns = time.time_ns()
        run = await finish(process, directory, sim)
    assert run.returncode == 0, run.stderr
    lost = [r for r in run.records if r["error"] and r["error"]["type"] == "WorkerLost"]
    assert lost
    # lost by the run, not failed by the endpoint: cut, and no error in its error rate
    assert all(r["metadata"]["cut"] == {"waited_ms": r["metadata"]["cut"]["waited_ms"],
               "first_token": None, "time_to_first_token_ms": None, "output_tokens": None}
               for r in lost)  # fmt: skip
    assert run.summary["error_request_count"]["avg"] == 0
    assert run.summary["cut_request_count"]["avg"] == len(lost)
    assert {r["metadata"]["worker_id"] for r in lost} == {lost[0]["metadata"]["worker_id"]}
    # Every request the server saw is accounted for, once.
    ids = [r["metadata"]["x_request_id"] for r in run.records]
    assert len(ids) == len(set(ids))
    assert {s.request_id for s in sim.simulator.records} <= set(ids)
    b = run.branch_stats
    assert b["children_errored"] >= 1
    assert b["children_spawned"] == b["children_completed"] + b["children_errored"]
    # The others lost nothing and went on (how many roots each was given is the hash's say).
    others = [
        r for r in run.records if r["metadata"]["worker_id"] != lost[0]["metadata"]["worker_id"]
    ]
    assert others and all(r["error"] is None for r in others)
    assert any(r["metadata"]["request_end_ns"] > killed_ns for r in others)


async def test_ctrl_c_cancels_and_keeps_what_was_measured(tmp_path):
    slow = SimConfig(ttft_ms=5, itl_ms=50, output_tokens=100, record_bodies=True)
    lines = [conv(f"r{i}") for i in range(5)]
    async with running_simulator(slow) as sim:
        process, directory = await start_profile(
            sim.url, tmp_path, lines, "--streaming", "--concurrency", "5"
        )
        async with asyncio.timeout(30):
            while len(sim.simulator.records) < 5:
                await asyncio.sleep(0.01)
        process.send_signal(signal.SIGINT)
        run = await finish(process, directory, sim)
    assert run.returncode == 130
    assert len(run.records) == 5
    assert all(r["metadata"]["was_cancelled"] for r in run.records)
    assert run.summary["was_cancelled"] is True and run.summary["is_complete"] is False


async def test_an_invalid_dataset_is_refused_before_anything_starts(sim, tmp_path):
    run = await profile(sim, tmp_path, [conv("p", turn(forks=["ghost"]))])
    assert run.returncode == 2
    assert "branch target 'ghost' not declared" in run.stderr
    assert not run.directory.exists() and sim.simulator.records == type(sim.simulator.records)()
