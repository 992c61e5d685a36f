"""`--endpoint-type responses` and `messages` end to end, against the simulator speaking those
APIs: the same records and metrics as chat, the key sent as each API wants it, and a FORK child
continuing its parent's history with the parent's real reply in it."""

from __future__ import annotations

import pytest

from dagperf.simulator import SimConfig, running_simulator

from dagfile import conv, turn, user
from runs import profile

KEY = "sk-other-apis"
LINES = [
    conv("p", turn(messages=[user("plan the trip " * 20)], forks=["c"], max_tokens=4)),
    conv("c", turn(messages=[user("book it")])),
]


def history_of(api: str, body: dict) -> list[dict]:
    return body["input"] if api == "responses" else body["messages"]


@pytest.mark.parametrize("api", ["responses", "messages"])
async def test_an_api_measures_as_chat_does_and_keeps_the_dag_history(tmp_path, api):
    config = SimConfig(ttft_ms=5, itl_ms=1, output_tokens=4, reasoning_tokens=2,
                       record_bodies=True, api_key=KEY)  # fmt: skip
    async with running_simulator(config) as sim:
        run = await profile(sim, tmp_path, LINES, "--endpoint-type", api, "--streaming",
                            "--api-key", KEY)  # fmt: skip
        served = {r.correlation_id: r for r in sim.simulator.records}
    assert run.returncode == 0, run.stderr
    assert all(r["error"] is None for r in run.records) and len(run.records) == 2
    for record in run.records:
        metrics = record["metrics"]
        assert metrics["time_to_first_token"]["value"] > 0
        assert metrics["usage_prompt_tokens"]["value"] > 0
        assert record["metadata"]["token_count_source"] == "usage"
        if api == "responses":  # it reports reasoning tokens; Messages does not, so they
            assert metrics["usage_reasoning_tokens"]["value"] == 2  # are counted from the text
        assert metrics["reasoning_token_count"]["value"] >= 2
    parent, child = sorted(run.records, key=lambda r: r["metadata"]["agent_depth"])
    parent_served = served[parent["metadata"]["x_correlation_id"]]
    child_served = served[child["metadata"]["x_correlation_id"]]
    history = history_of(api, child_served.body)
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert history[1]["content"] == parent_served.reply  # the real reply, not a placeholder
    if api == "responses":  # typed items: llama.cpp's server refuses an untyped one
        assert {m["type"] for m in history} == {"message"}
        assert parent["metadata"]["max_tokens"] == 4  # sent as max_output_tokens
    assert child["metrics"]["usage_prompt_cache_read_tokens"]["value"] > 0  # parent's prefix
    headers = {k.lower() for k in child_served.headers}
    if api == "messages":
        assert "x-api-key" in headers and "authorization" not in headers
        assert child_served.headers["anthropic-version"] == "2023-06-01"
        assert child_served.body["max_tokens"] == 4096  # the API needs one; the turn set none
    else:
        assert "authorization" in headers and "x-api-key" not in headers
        assert child_served.body["stream"] is True and "stream_options" not in child_served.body


@pytest.mark.parametrize("api", ["responses", "messages"])
async def test_an_api_without_streaming_reads_whole_bodies(tmp_path, api):
    async with running_simulator(SimConfig(ttft_ms=2, itl_ms=0, output_tokens=3)) as sim:
        run = await profile(sim, tmp_path, LINES, "--endpoint-type", api)
    assert run.returncode == 0, run.stderr
    assert all(r["metrics"]["output_sequence_length"]["value"] == 3 for r in run.records)
    assert all("time_to_first_token" not in r["metrics"] for r in run.records)
