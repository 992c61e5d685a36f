"""The simulated LLM over real HTTP: bodies, usage, the prefix cache and its timing model."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import aiohttp
import pytest

from dagperf.simulator import PrefixCache, SimConfig, running_simulator

FAST = SimConfig(ttft_ms=0, itl_ms=0, prefill_ms_per_token=0)


def chat(content: str = "hello there", **fields):
    return {"model": "m", "messages": [{"role": "user", "content": content}], **fields}


async def post(url: str, body: dict, headers: dict | None = None) -> tuple[int, bytes, float]:
    """Status, raw body, and seconds until the first body bytes arrived."""
    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        async with session.post(url, json=body, headers=headers) as response:
            first = await response.content.readany()
            first_at = time.perf_counter() - start
            return response.status, first + await response.read(), first_at


def events(raw: bytes) -> list:
    """Decoded SSE data fields, with the [DONE] sentinel kept as a string."""
    out = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block.removeprefix("data: ")
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


async def test_streaming_chat_body():
    async with running_simulator(FAST.model_copy(update={"output_tokens": 3})) as sim:
        status, raw, _ = await post(f"{sim.url}/v1/chat/completions", chat(stream=True))
    assert status == 200
    chunks = events(raw)
    assert chunks[-1] == "[DONE]"
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    assert deltas[0]["role"] == "assistant"
    assert [bool(d.get("content")) for d in deltas] == [True, True, True, False]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "m" for c in chunks[:-1])
    assert not any("usage" in c for c in chunks[:-1])  # only on request


async def test_streaming_usage_chunk_when_asked():
    config = FAST.model_copy(update={"output_tokens": 4})
    async with running_simulator(config) as sim:
        body = chat(stream=True, stream_options={"include_usage": True})
        _, raw, _ = await post(f"{sim.url}/v1/chat/completions", body)
    *chunks, usage_chunk, done = events(raw)
    assert done == "[DONE]"
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert usage["completion_tokens"] == 4 == len(text.split())
    assert usage["prompt_tokens"] == 4  # <|user|> hello there <|assistant|>
    assert usage["total_tokens"] == 8
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}


async def test_non_streaming_chat_and_completions():
    async with running_simulator(FAST) as sim:
        _, raw, _ = await post(
            f"{sim.url}/v1/chat/completions", chat(max_tokens=5, ignore_eos=True)
        )
        reply = json.loads(raw)
        _, raw, _ = await post(
            f"{sim.url}/v1/completions", {"model": "m", "prompt": "a b c", "max_tokens": 2}
        )
        completion = json.loads(raw)
        _, raw, _ = await post(f"{sim.url}/v1/completions", {"prompt": "a b", "stream": True})
        streamed = events(raw)
    assert reply["object"] == "chat.completion"
    message = reply["choices"][0]["message"]
    assert message["role"] == "assistant" and len(message["content"].split()) == 5
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 5
    assert completion["object"] == "text_completion"
    assert len(completion["choices"][0]["text"].split()) == 2
    assert completion["usage"]["prompt_tokens"] == 3
    assert streamed[-1] == "[DONE]" and "text" in streamed[0]["choices"][0]


@pytest.mark.parametrize(
    ("fields", "length", "finish"),
    [
        ({}, 16, "stop"),
        ({"max_tokens": 4}, 4, "length"),
        ({"max_completion_tokens": 3}, 3, "length"),
        ({"max_tokens": 8, "max_completion_tokens": 3}, 3, "length"),  # the newer name wins
        ({"max_tokens": 100}, 16, "stop"),
        ({"max_tokens": 100, "ignore_eos": True}, 100, "length"),
        ({"max_tokens": 100, "min_tokens": 30}, 30, "stop"),
    ],
)
async def test_reply_length_follows_eos_and_limits(fields, length, finish):
    async with running_simulator(FAST) as sim:
        _, raw, _ = await post(f"{sim.url}/v1/chat/completions", chat(**fields))
    reply = json.loads(raw)
    assert reply["usage"]["completion_tokens"] == length
    assert reply["choices"][0]["finish_reason"] == finish


async def test_cached_tokens_count_the_shared_prefix():
    config = FAST.model_copy(update={"block_size": 4})
    shared = " ".join(f"w{i}" for i in range(40))
    async with running_simulator(config) as sim:
        url = f"{sim.url}/v1/chat/completions"
        cold = json.loads((await post(url, chat(shared)))[1])["usage"]
        warm = json.loads((await post(url, chat(shared)))[1])["usage"]
        longer = json.loads((await post(url, chat(shared + " and more words here")))[1])["usage"]
    assert cold["prompt_tokens_details"]["cached_tokens"] == 0
    # 42 tokens: 10 full blocks cached, and the first 40 tokens are shared by the longer prompt.
    assert warm["prompt_tokens_details"]["cached_tokens"] == 40
    assert longer["prompt_tokens_details"]["cached_tokens"] == 40


async def test_a_repeated_prefix_gets_a_lower_ttft_than_a_cold_one():
    config = SimConfig(ttft_ms=5, prefill_ms_per_token=0.5, itl_ms=0, block_size=8)
    system = {"role": "system", "content": " ".join(f"rule{i}" for i in range(400))}
    async with running_simulator(config) as sim:
        url = f"{sim.url}/v1/chat/completions"

        async def ttft(question: str) -> float:
            body = {"messages": [system, {"role": "user", "content": question}], "stream": True}
            return (await post(url, body))[2]

        cold = await ttft("first question")
        warm = await ttft("second question")
        cold_record, warm_record = sim.simulator.records
    # 400 uncached prompt tokens cost 200 ms of prefill; cached, only the question's block does.
    assert cold_record.intended_ttft_ms > 200 and warm_record.intended_ttft_ms < 20
    assert cold_record.cached_tokens == 0 and warm_record.cached_tokens >= 400
    assert cold > 0.2 and warm < cold  # a deadline is never early; the warm one came far sooner


async def test_records_are_honest_about_timing():
    config = SimConfig(ttft_ms=30, itl_ms=10, prefill_ms_per_token=0, output_tokens=3)
    async with running_simulator(config) as sim:
        headers = {"X-Request-ID": "req-1", "X-Correlation-ID": "corr-1"}
        await post(f"{sim.url}/v1/chat/completions", chat(stream=True), headers)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{sim.url}/sim/records") as response:
                (served,) = await response.json()
    assert (served["request_id"], served["correlation_id"], served["status"]) == (
        "req-1",
        "corr-1",
        200,
    )
    assert served["intended_ttft_ms"] == 30
    actual_ttft_ms = (served["first_chunk_ns"] - served["received_ns"]) / 1e6
    assert actual_ttft_ms >= 30  # deadlines are never early
    assert (served["end_ns"] - served["received_ns"]) / 1e6 >= 30 + 2 * 10


async def test_past_max_concurrency_requests_wait_for_a_slot_in_turn():
    """One slot and three requests at once: each waits for the one before it to finish, so
    its first token is due one whole reply later than the one before (never earlier). Due
    times are from each one's arrival, which a busy machine spreads by milliseconds."""
    config = SimConfig(ttft_ms=40, itl_ms=0, prefill_ms_per_token=0, output_tokens=1,
                       max_concurrency=1)  # fmt: skip
    async with running_simulator(config) as sim:
        url = f"{sim.url}/v1/chat/completions"
        began = time.perf_counter()
        results = await asyncio.gather(*(post(url, chat()) for _ in range(3)))
        elapsed = time.perf_counter() - began
        records = sim.simulator.records
    assert [status for status, _, _ in results] == [200, 200, 200]
    assert all(r.intended_ttft_ms >= 40 for r in records)
    due = sorted(r.received_ns / 1e6 + r.intended_ttft_ms for r in records)
    clocks = 1  # ms: arrival is stamped by the wall clock, the wait by the loop's
    assert due[1] - due[0] >= 40 - clocks and due[2] - due[1] >= 40 - clocks, due
    assert elapsed >= 0.12  # three 40 ms replies, one after another


async def test_reasoning_comes_before_content():
    config = FAST.model_copy(update={"reasoning_tokens": 2, "output_tokens": 2})
    async with running_simulator(config) as sim:
        _, raw, _ = await post(f"{sim.url}/v1/chat/completions", chat(stream=True))
        _, whole, _ = await post(f"{sim.url}/v1/chat/completions", chat())
    deltas = [c["choices"][0]["delta"] for c in events(raw)[:-2]]
    assert [next(iter(set(d) - {"role"})) for d in deltas] == [
        "reasoning_content",
        "reasoning_content",
        "content",
        "content",
    ]
    reply = json.loads(whole)
    assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == 2
    assert len(reply["choices"][0]["message"]["reasoning_content"].split()) == 2


async def test_replies_are_deterministic_for_a_seed():
    async def reply(seed: int, content: str) -> str:
        async with running_simulator(FAST.model_copy(update={"seed": seed})) as sim:
            _, raw, _ = await post(f"{sim.url}/v1/chat/completions", chat(content))
        return json.loads(raw)["choices"][0]["message"]["content"]

    assert await reply(7, "x") == await reply(7, "x")
    assert await reply(7, "x") != await reply(8, "x")
    assert await reply(7, "x") != await reply(7, "y")


async def test_injected_errors():
    async with running_simulator(FAST.model_copy(update={"error_rate": 1.0})) as sim:
        status, raw, _ = await post(f"{sim.url}/v1/chat/completions", chat(stream=True))
    assert status == 500
    assert json.loads(raw)["error"]["type"] == "server_error"
    async with running_simulator(FAST.model_copy(update={"error_rate": 0.3, "seed": 3})) as sim:
        statuses = [(await post(f"{sim.url}/v1/chat/completions", chat()))[0] for _ in range(200)]
    assert 30 < statuses.count(500) < 90  # binomial(200, 0.3): mean 60, sd 6.5
    assert set(statuses) == {200, 500}


@pytest.mark.parametrize(
    ("path", "body", "complaint"),
    [
        ("/v1/chat/completions", "not json", "not valid JSON"),
        ("/v1/chat/completions", "[1]", "must be a JSON object"),
        ("/v1/chat/completions", '{"messages": []}', "'messages' must be a non-empty array"),
        ("/v1/chat/completions", '{"messages": [1]}', "each entry of 'messages'"),
        ("/v1/chat/completions", '{"messages": [{"role": "user"}], "max_tokens": 0}', "at least 1"),
        ("/v1/chat/completions", '{"messages": [{"role": "user"}], "max_tokens": true}', "integer"),
        ("/v1/completions", '{"prompt": {"a": 1}}', "'prompt' must be"),
    ],
)
async def test_bad_requests_get_a_400_that_says_why(path, body, complaint):
    async with running_simulator(FAST) as sim, aiohttp.ClientSession() as session:
        async with session.post(sim.url + path, data=body) as response:
            assert response.status == 400
            error = (await response.json())["error"]
    assert complaint in error["message"]
    assert error["type"] == "invalid_request_error"


async def test_models_and_health():
    async with running_simulator(SimConfig(model="tiny")) as sim:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{sim.url}/v1/models") as response:
                models = await response.json()
            async with session.get(f"{sim.url}/health") as response:
                assert response.status == 200
    assert [m["id"] for m in models["data"]] == ["tiny"]


async def test_a_configured_key_is_required_on_the_api_only():
    async with running_simulator(FAST.model_copy(update={"api_key": "sk-1"})) as sim:
        url = f"{sim.url}/v1/chat/completions"
        assert (await post(url, chat()))[0] == 401
        assert (await post(url, chat(), {"Authorization": "Bearer sk-2"}))[0] == 401
        assert (await post(url, chat(), {"Authorization": "Bearer sk-1"}))[0] == 200
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{sim.url}/health") as response:
                assert response.status == 200  # probes need no key


async def test_a_client_that_leaves_mid_stream_is_recorded():
    config = SimConfig(ttft_ms=0, itl_ms=20, output_tokens=50)
    async with running_simulator(config) as sim:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{sim.url}/v1/chat/completions", json=chat(stream=True)) as r:
                await r.content.readany()
        async with asyncio.timeout(60):  # the server notices the reset at its next write
            while not sim.simulator.records[0].done:
                await asyncio.sleep(0.01)
    assert sim.simulator.records[0].status == 499


def test_prefix_cache_counts_only_a_leading_run_and_evicts_lru():
    cache = PrefixCache(block_size=2, capacity_blocks=3)
    assert cache.admit(list("abcdef")) == 0
    assert cache.admit(list("abcdef")) == 5  # fully cached: one token is always computed
    assert cache.admit(list("abXXef")) == 2  # "ef" after a miss names a different prefix
    assert len(cache) == 3  # capacity holds: the oldest blocks went first
    assert cache.admit(list("cdef")) == 0  # the same text at another position is not a hit
    assert PrefixCache(block_size=2, capacity_blocks=0).admit(list("abab")) == 0


def test_simulate_command_serves_until_terminated(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "dagperf", "simulate", "--port", "0", "--model", "cmd-model"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        banner = process.stdout.readline()
        assert "cmd-model" in banner
        url = banner.split(" at ")[1].strip()

        async def ask() -> dict:
            _, raw, _ = await post(f"{url}/v1/chat/completions", chat())
            return json.loads(raw)

        assert asyncio.run(ask())["usage"]["completion_tokens"] == 16
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def test_simulate_command_refuses_a_busy_port():
    with subprocess.Popen(
        [sys.executable, "-m", "dagperf", "simulate", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    ) as first:
        port = first.stdout.readline().rsplit(":", 1)[1].strip()
        second = subprocess.run(
            [sys.executable, "-m", "dagperf", "simulate", "--port", port],
            capture_output=True,
            text=True,
            timeout=30,
            env=os.environ,
        )
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    assert second.returncode == 1
    assert "cannot listen" in second.stderr and "Traceback" not in second.stderr


async def test_a_required_tool_choice_answers_with_a_tool_call():
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    forced = chat(tools=tools, tool_choice="required", max_tokens=3, ignore_eos=True)
    async with running_simulator(FAST) as sim:
        url = f"{sim.url}/v1/chat/completions"
        _, raw, _ = await post(url, forced | {"stream": True})
        _, whole, _ = await post(url, forced)
        _, plain, _ = await post(url, chat(tools=tools))  # "auto": the model answers in text
    deltas = [c["choices"][0]["delta"] for c in events(raw)[:-2]]
    first = deltas[0]["tool_calls"][0]
    assert (first["index"], first["type"], first["function"]["name"]) == (0, "function", "lookup")
    arguments = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas)
    assert json.loads(arguments)["query"]
    assert events(raw)[-2]["choices"][0]["finish_reason"] == "tool_calls"
    message = json.loads(whole)["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"][0]["function"]["name"] == "lookup"
    assert "tool_calls" not in json.loads(plain)["choices"][0]["message"]


async def test_an_engine_s_later_requests_wait_in_line_for_their_first_token():
    """Two sequence slots and four requests at once: the first two get their first token
    after one prefill; the other two only once a reply before them ended, in arrival order."""
    config = SimConfig(ttft_ms=40, itl_ms=20, prefill_ms_per_token=0, output_tokens=3,
                       slots=2)  # fmt: skip
    reply_ms = 40 + 2 * 20
    async with running_simulator(config) as sim:
        url = f"{sim.url}/v1/chat/completions"
        results = await asyncio.gather(*(post(url, chat(stream=True)) for _ in range(4)))
        records = sorted(sim.simulator.records, key=lambda r: r.received_ns)
    assert [status for status, _, _ in results] == [200] * 4
    assert all(len(events(raw)) == 3 + 2 for _, raw, _ in results)  # every token, then the end
    ttfts = sorted(r.intended_ttft_ms for r in records)
    assert ttfts[0] >= 40 and ttfts[1] >= 40
    assert ttfts[2] >= reply_ms + 40 and ttfts[3] >= reply_ms + 40  # a slot freed first
    for r in records:  # the server's own clock agrees: no first chunk before its slot's prefill
        assert (r.first_chunk_ns - r.received_ns) / 1e6 >= min(ttfts)


async def test_an_engine_decodes_a_bigger_batch_more_slowly():
    """Each decode step costs batch_itl_ms more per other sequence decoding: two replies
    together take at least their tokens' steps at the batch's price."""
    config = SimConfig(ttft_ms=0, itl_ms=10, batch_itl_ms=40, prefill_ms_per_token=0,
                       output_tokens=4, slots=2)  # fmt: skip
    async with running_simulator(config) as sim:
        url = f"{sim.url}/v1/chat/completions"
        await asyncio.gather(*(post(url, chat(stream=True)) for _ in range(2)))
        records = list(sim.simulator.records)
    for r in records:  # three decode steps after the first token, each at 10 + 40 ms at least
        assert (r.end_ns - r.first_chunk_ns) / 1e6 >= 2 * 50


async def test_an_engine_frees_the_slot_of_a_client_that_went_away():
    """One slot: a client that leaves mid-reply gives it up, so the next request's first
    token does not wait for the abandoned reply's end."""
    config = SimConfig(ttft_ms=0, itl_ms=50, prefill_ms_per_token=0, output_tokens=200,
                       slots=1)  # fmt: skip
    async with running_simulator(config) as sim:
        url = f"{sim.url}/v1/chat/completions"
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json=chat(stream=True)) as response:
                await response.content.readany()  # its first token: it holds the slot
        # the first client is gone; 200 tokens at 50 ms would hold the slot for 10 s
        status, _, _ = await post(url, chat(stream=True, max_tokens=1))
        served = sorted(sim.simulator.records, key=lambda r: r.received_ns)
    assert status == 200 and served[0].status == 499
    assert served[1].intended_ttft_ms < 200 * 50 / 2  # not held until the abandoned one ends


async def test_strict_fields_refuse_what_the_api_does_not_define_with_422():
    config = FAST.model_copy(update={"strict_fields": True})
    async with running_simulator(config) as sim:
        url = f"{sim.url}/v1/chat/completions"
        refused, raw, _ = await post(url, chat(max_tokens=4, ignore_eos=True, min_tokens=2))
        accepted, _, _ = await post(url, chat(max_tokens=4, stream=True,
                                              stream_options={"include_usage": True}))  # fmt: skip
    assert refused == 422 and accepted == 200
    detail = json.loads(raw)["detail"]
    assert [d["loc"] for d in detail] == [["body", "ignore_eos"], ["body", "min_tokens"]]


def test_slots_and_max_concurrency_are_refused_together():
    with pytest.raises(ValueError, match="give one"):
        SimConfig(slots=2, max_concurrency=2)
