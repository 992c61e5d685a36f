"""Servers that are not the simulator: a bare recording endpoint with no /v1/models, streaming
events under a plain content type, and no [DONE]."""

from __future__ import annotations

import copy
import io
import logging

import pytest
from aiohttp import web

from dagperf.console import Console, render_summary
from dagperf.engine import Phase, Progress
from dagperf.simulator import SimConfig, running_simulator

from dagfile import conv, turn, user
from runs import finish, profile, serving, start_profile


@pytest.fixture
async def bare():
    """Streams two words per request as text/plain events, without [DONE]; records bodies."""
    seen: list[dict] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        seen.append(await request.json())
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for word in ("hello", " there"):
            await response.write(
                b'data:{"choices":[{"delta":{"content":"%s"}}]}\n\n' % word.encode()
            )
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with serving(app) as url:
        yield url, seen


async def test_turns_that_name_their_model_need_no_model_flag(bare, tmp_path):
    url, seen = bare
    lines = [
        conv(
            "p",
            turn(messages=[user("a")], model="named"),
            turn(messages=[user("b")], model="named"),
        )
    ]
    process, directory = await start_profile(url, tmp_path, lines, "--streaming")
    run = await finish(process, directory, None)
    assert run.returncode == 0, run.stderr
    assert [body["model"] for body in seen] == ["named", "named"]
    assert seen[1]["messages"][1] == {"role": "assistant", "content": "hello there"}
    assert run.records[0]["metrics"]["output_sequence_length"]["value"] == 2  # estimated: 2 events


async def test_a_turn_without_a_model_needs_one_from_somewhere(bare, tmp_path):
    url, _ = bare
    process, directory = await start_profile(url, tmp_path, [conv("p")], "--streaming")
    run = await finish(process, directory, None)
    assert run.returncode == 1
    assert "could not read a model name from" in run.stderr and "pass --model" in run.stderr


async def test_a_server_that_wants_a_key_gets_it_for_the_model_list_and_every_request(tmp_path):
    config = SimConfig(api_key="sk-test", ttft_ms=0, itl_ms=0)
    async with running_simulator(config) as sim:
        without = await profile(sim, tmp_path / "without", [conv("p")], "--streaming")
        run = await profile(
            sim, tmp_path / "with", [conv("p", turn(), turn())], "--streaming",
            "--api-key", "sk-test",
        )  # fmt: skip
    assert without.returncode == 1 and "401" in without.stderr, without.stderr
    assert run.returncode == 0, run.stderr
    assert [r.get("error") for r in run.records] == [None, None]
    assert "sk-test" not in (run.directory / "profile_export_aiperf.json").read_text()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_redrawn_on_a_terminal_and_logged_as_lines_with_json_logs(caplog):
    progress = Progress(Phase.PROFILING, 3, 2, 0, 1, 10, 1)
    drawn = Terminal()
    Console.for_output(False, "text", drawn).progress(progress)
    assert drawn.getvalue().startswith("\r\x1b[2K[profiling] 2/10 requests (20%)")
    logged = Terminal()
    with caplog.at_level(logging.INFO, logger="dagperf.progress"):
        Console.for_output(False, "json", logged).progress(progress)
    assert logged.getvalue() == ""
    assert [r.getMessage()[:33] for r in caplog.records] == ["[profiling] 2/10 requests (20%)  "]


def test_progress_line_and_summary():
    stream = io.StringIO()
    console = Console(stream, live=True)
    progress = Progress(
        Phase.PROFILING, sent=12, completed=10, errors=1, in_flight=2, expected=40, roots_started=3
    )
    console.progress(progress)
    console._last = (console._last[0] - 2.0, 0)  # two seconds ago, none were done
    console.progress(progress, ttft_p50_ms=21.25)  # 10 in 2 s: 5 req/s, 30 left: 6 s
    console.done()
    first, second = stream.getvalue().split("\r\x1b[2K")[1:]
    assert first.startswith("[profiling] 10/40 requests (25%)  0.0 req/s") and "ETA" not in first
    assert second == (
        "[profiling] 10/40 requests (25%)  ETA 6s  5.0 req/s  errors 1  in flight 2  "
        "TTFT p50 21.2 ms\n"
    )
    quiet = io.StringIO()
    Console(quiet, quiet=True).progress(Progress(Phase.WARMUP, 1, 1, 0, 0, None, 1))
    assert quiet.getvalue() == ""
    document = {
        "time_to_first_token": {
            "unit": "ms",
            "avg": 20.5,
            "min": 20.0,
            "max": 21.0,
            "p99": 21.0,
            "p90": 21.0,
            "p50": 20.5,
            "std": 0.5,
        },
        "request_throughput": {"unit": "requests/sec", "avg": 1234.5},
        "request_count": {"unit": "requests", "avg": 10},
        "branch_stats": {"children_spawned": 2, "children_completed": 2},
        "error_summary": [
            {"error_details": {"code": 500, "type": "Internal", "message": "boom"}, "count": 3}
        ],
    }
    before = copy.deepcopy(document)
    text = render_summary(document, "artifacts/x")
    assert "Time to First Token (ms)  20.50" in text
    assert "Request Throughput (requests/sec): 1,234.50" in text
    assert "BranchStats: children_spawned 2, children_completed 2" in text
    assert "Errors: 3 x 500 Internal: boom" in text
    assert document == before  # rendering reads the document, never changes it
