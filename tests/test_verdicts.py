"""A run's verdict is true: an answer that is not a completion is an error record naming what
came instead, and a run whose requests failed (all of them, or more than --max-error-rate) exits
with code 3, its exports written. Each server here is real HTTP on loopback, answering the way
broken servers, proxies and gateways do."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aiohttp import web

from dagperf.simulator import running_simulator

from dagfile import conv, turn
from runs import RECORDING, finish, serving, start_profile

COMPLETION = b'{"choices": [{"message": {"role": "assistant", "content": "hi"}}]}'
CHUNK = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n'


def answering(answer: Callable[[], web.Response] | None = None, stream: list[bytes] | None = None):
    """An app whose chat endpoint gives one fixed answer, or streams the given events."""

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        if stream is None:
            assert answer is not None
            return answer()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in stream:
            await response.write(event)
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def run_against(app: web.Application, tmp_path, lines=None, *flags: str):
    lines = lines or [conv("a", turn(), turn()), conv("b")]
    async with serving(app) as url:
        process, directory = await start_profile(url, tmp_path, lines, "--model", "m", *flags)
        return await finish(process, directory, None)


def only_error(run) -> dict:
    """The one error every record carries."""
    (error,) = {tuple(sorted(r["error"].items())) for r in run.records if r["error"]}
    assert all(r["error"] for r in run.records), "some record was counted a success"
    return dict(error)


@pytest.mark.parametrize(
    ("answer", "kind", "quoted"),
    [
        (lambda: web.Response(text="<html>login</html>", content_type="text/html"),
         "InvalidResponse", "<html>login"),
        (lambda: web.Response(status=302, headers={"Location": "http://127.0.0.1:1/login"},
                              text="moved"),
         "UnexpectedRedirect", "moved"),
        (lambda: web.Response(body=b"{}", content_type="application/json"),
         "InvalidResponse", "{}"),
        (lambda: web.Response(body=b'{"choices": []}', content_type="application/json"),
         "InvalidResponse", "choices"),
    ],
    ids=["html", "redirect", "empty-object", "no-choices"],
)  # fmt: skip
async def test_a_body_that_is_not_a_completion_is_an_error_quoting_it(
    tmp_path, answer, kind, quoted
):
    run = await run_against(answering(answer), tmp_path)
    error = only_error(run)
    assert error["type"] == kind and quoted in error["message"], error
    if kind == "UnexpectedRedirect":
        assert "302 to http://127.0.0.1:1/login" in error["message"]
    assert run.returncode == 3, run.stderr
    assert "every request failed (2)" in run.stderr
    assert run.summary["error_request_count"]["avg"] == 2.0


@pytest.mark.parametrize(
    "events",
    [[], [b"data: [DONE]\n\n"], [b": keep-alive\n\n", b"data: {}\n\n", b"data: [DONE]\n\n"]],
    ids=["no-event", "only-done", "no-choice"],
)
async def test_a_stream_without_a_completion_event_is_an_empty_stream(tmp_path, events):
    run = await run_against(answering(stream=events), tmp_path, None, "--streaming")
    error = only_error(run)
    assert error["type"] == "EmptyStream", error
    assert "text/event-stream" in error["message"]
    assert run.returncode == 3


async def test_a_stream_with_a_usage_block_only_is_a_completion(tmp_path):
    usage = b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}}\n\n'
    run = await run_against(answering(stream=[usage, b"data: [DONE]\n\n"]), tmp_path, None,
                            "--streaming")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert [r["error"] for r in run.records] == [None, None, None]


async def test_every_request_failing_exits_3_with_exports_and_the_most_common_error(tmp_path):
    app = answering(lambda: web.json_response({"error": {"message": "overloaded"}}, status=500))
    run = await run_against(app, tmp_path)
    assert run.returncode == 3
    assert "the endpoint failed the run: every request failed (2)" in run.stderr
    assert "Internal Server Error 500: overloaded" in run.stderr
    assert len(run.records) == 2 and run.summary["request_error_rate"]["avg"] == 100.0
    assert (run.directory / "profile_export_aiperf.csv").exists()


def half_failing() -> web.Application:
    """Conversations whose name starts with "bad" get a 500; the others a completion."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        if body["messages"][0]["content"].startswith("bad"):
            return web.json_response({"error": {"message": "no"}}, status=500)
        return web.Response(body=COMPLETION, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def said(name: str) -> dict:
    return turn(messages=[{"role": "user", "content": name}])


@pytest.mark.parametrize(("limit", "code"), [("1.0", 0), ("0.5", 0), ("0.2", 3), ("0", 3)])
async def test_max_error_rate_fails_the_run_above_it(tmp_path, limit, code):
    lines = [conv(f"{kind}{i}", said(f"{kind}{i}")) for i in range(2) for kind in ("bad", "ok")]
    run = await run_against(half_failing(), tmp_path, lines, "--max-error-rate", limit)
    assert [r["error"] is None for r in run.records].count(True) == 2
    assert run.returncode == code, run.stderr
    if code:
        assert "2 of 4 requests failed (50.0%)" in run.stderr
        assert f"--max-error-rate {float(limit):g}" in run.stderr


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan"])
async def test_max_error_rate_outside_0_to_1_is_a_usage_error(tmp_path, value):
    run = await run_against(half_failing(), tmp_path, None, "--max-error-rate", value)
    assert run.returncode == 2
    assert "--max-error-rate: Input should be" in run.stderr
    assert not run.directory.exists()


async def test_a_run_that_succeeds_exits_0_and_its_summary_file_says_so(tmp_path):
    summary = tmp_path / "summary.json"
    async with running_simulator(RECORDING) as sim:
        process, directory = await start_profile(
            sim.url, tmp_path, [conv("a")], "--summary-file", str(summary)
        )
        run = await finish(process, directory, sim)
    assert run.returncode == 0, run.stderr
    assert '"outcome":"succeeded"' in summary.read_text().replace(" ", "")


async def test_a_rejected_run_tells_the_operator_through_its_summary_file(tmp_path):
    summary = tmp_path / "summary.json"
    app = answering(lambda: web.Response(body=b"{}", content_type="application/json"))
    run = await run_against(app, tmp_path, None, "--summary-file", str(summary))
    assert run.returncode == 3
    text = summary.read_text()
    assert '"outcome":"failed"' in text.replace(" ", "") and "every request failed" in text
