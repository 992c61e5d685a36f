"""The table of APIs (`dagperf.apis.APIS`) is the one list of endpoint types: each entry is its
own module, where docs/architecture.md says an endpoint type goes; the CLI, the endpoint's check,
the CRD and the simulator offer exactly its types; and a fifth API, written outside the package
(tests/llama_native.py) and registered with one line, is sent, read, measured and simulated like
the others, in every process of a run."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from dagperf.apis import APIS
from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.apis.reply import ServerError
from dagperf.cli import build_parser
from dagperf.dataset.specs import Payload
from dagperf.simulator import SimConfig, running_simulator

import llama_native
from dagfile import conv, turn, user
from runs import finish, start_profile

ROOT = Path(__file__).resolve().parent.parent
APIS_DIR = ROOT / "worker" / "dagperf" / "apis"
KEY = "sk-fifth-api"
LINES = [
    conv("p", turn(messages=[user("plan the trip " * 20)], forks=["c"], max_tokens=4)),
    conv("c", turn(messages=[user("book it")])),
]


@pytest.fixture
def fifth_api(monkeypatch, tmp_path) -> dict[str, str]:
    """The fifth API registered here and in the processes started with the returned
    environment."""
    monkeypatch.setitem(APIS, llama_native.NAME, llama_native.API)
    return llama_native.registered_in(tmp_path / "site")


async def test_a_fifth_api_is_sent_read_and_simulated_like_the_others(fifth_api, tmp_path):
    config = SimConfig(ttft_ms=5, itl_ms=1, output_tokens=6, record_bodies=True, api_key=KEY)
    flags = ["--endpoint-type", llama_native.NAME, "--streaming", "--api-key", KEY]
    async with running_simulator(config) as sim:
        process, directory = await start_profile(sim.url, tmp_path, LINES, *flags, env=fifth_api)
        run = await finish(process, directory, sim)
        served = {r.correlation_id: r for r in sim.simulator.records}
    assert run.returncode == 0, run.stderr
    assert len(run.records) == 2 and all(r["error"] is None for r in run.records)
    parent, child = sorted(run.records, key=lambda r: r["metadata"]["agent_depth"])
    for record in (parent, child):
        metrics = record["metrics"]
        assert metrics["time_to_first_token"]["value"] > 0
        assert metrics["inter_token_latency"]["value"] > 0  # each content event is one token
        assert metrics["usage_prompt_tokens"]["value"] > 0  # from tokens_evaluated
        assert record["metadata"]["token_count_source"] == "usage"
    assert parent["metrics"]["usage_completion_tokens"]["value"] == 4  # n_predict, the turn's
    assert parent["metadata"]["max_tokens"] == 4  # the cap its API calls n_predict
    assert parent["metadata"]["finish_reason"] == "length"  # stop_type "limit", in chat's words
    assert child["metrics"]["usage_completion_tokens"]["value"] == 6
    assert child["metrics"]["usage_prompt_cache_read_tokens"]["value"] > 0  # timings.cache_n
    parent_served = served[parent["metadata"]["x_correlation_id"]]
    child_served = served[child["metadata"]["x_correlation_id"]]
    assert child_served.endpoint == llama_native.NAME
    assert set(child_served.body) == {"prompt", "model", "stream"}  # no OpenAI stream_options
    assert child_served.body["stream"] is True and child_served.body["prompt"].endswith("book it")
    assert parent_served.reply in child_served.body["prompt"]  # the parent's real reply
    assert child_served.headers["Authorization"] == f"Bearer {KEY}"


async def test_a_fifth_api_without_streaming_reads_whole_bodies(fifth_api, tmp_path):
    config = SimConfig(ttft_ms=2, itl_ms=0, output_tokens=3)
    async with running_simulator(config) as sim:
        flags = ["--endpoint-type", llama_native.NAME]
        process, directory = await start_profile(sim.url, tmp_path, LINES, *flags, env=fifth_api)
        run = await finish(process, directory, sim)
    assert run.returncode == 0, run.stderr
    lengths = sorted(r["metrics"]["output_sequence_length"]["value"] for r in run.records)
    assert lengths == [3, 3]
    assert all("time_to_first_token" not in r["metrics"] for r in run.records)


def endpoint_type_flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Each subcommand's --endpoint-type."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                for option in sub._actions:
                    if "--endpoint-type" in option.option_strings:
                        found[command] = option
    return found


def test_the_cli_and_the_endpoint_take_the_types_of_the_table(fifth_api):
    flags = endpoint_type_flags(build_parser())
    assert {"profile", "scheduler", "search"} <= set(flags)
    assert {tuple(flag.choices or ()) for flag in flags.values()} == {tuple(APIS)}
    assert llama_native.NAME in (flags["profile"].choices or ())
    assert f"{llama_native.NAME} (llama.cpp's own /completion" in str(flags["profile"].help)
    endpoint = EndpointConfig(url="127.0.0.1:8080", model="m", endpoint_type=llama_native.NAME)
    assert endpoint.request_url == "http://127.0.0.1:8080/completion"
    with pytest.raises(ValidationError, match="unknown endpoint type 'ollama': one of chat, "):
        EndpointConfig(url="127.0.0.1:8080", model="m", endpoint_type="ollama")


def crd_endpoint_types(crd_text: str) -> list[str]:
    crd = yaml.safe_load(crd_text)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    enum: list[str] = spec["properties"]["endpoint"]["properties"]["type"]["enum"]
    return enum


def test_the_crd_enum_is_the_table(fifth_api):
    for path in ("crds/benchmark.yaml", "charts/dagperf/crds/benchmark.yaml"):
        committed = crd_endpoint_types((ROOT / path).read_text())
        assert committed == [name for name in APIS if name != llama_native.NAME], path
    generated = subprocess.run(
        [sys.executable, "-m", "dagperf_operator.crd"],
        cwd=ROOT,
        env=fifth_api,
        capture_output=True,
        text=True,
        check=True,
    )
    assert crd_endpoint_types(generated.stdout) == [*APIS]  # the fifth one's too


def where_an_endpoint_goes() -> list[str]:
    """The places docs/architecture.md's "Where a change goes" names for an endpoint type."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Where a change goes", 1)[1].split("\n## ", 1)[0]
    entry = section.split("- **An endpoint type**", 1)[1].split("\n- **", 1)[0]
    return re.findall(r"^  \d\. `([^`]+)`", entry, flags=re.MULTILINE)


def test_every_api_is_where_the_architecture_says_an_endpoint_type_goes():
    places = where_an_endpoint_goes()
    assert places[:2] == ["worker/dagperf/apis/<type>.py", "worker/dagperf/apis/__init__.py"]
    assert len(places) <= 3
    registered = {}
    for path in sorted(APIS_DIR.glob("*.py")):
        module = importlib.import_module(f"dagperf.apis.{path.stem}")
        if hasattr(module, "API"):
            registered[path.stem] = module.API
    assert registered == APIS, "one module per API, named for its type, each in the table"
    assert all(APIS[name].title for name in APIS)
    # The user's docs list the types where the entry's third place says.
    for place in places[2:]:
        text = (ROOT / place).read_text()
        listed = re.findall(r"--endpoint-type ((?:\w+\|)+\w+)", text)
        assert listed and set(listed) == {"|".join(APIS)}, place


def test_the_table_loads_without_the_simulator_the_transport_or_the_graph():
    """A worker, the operator and the CLI read the table; none of them pays for the simulator's
    web server, and the APIs know nothing of the graph or the wire."""
    probe = (
        "import sys, dagperf.apis; "
        "print(sorted(m for m in sys.modules if m.startswith(('dagperf.simulator', "
        "'dagperf.transport', 'dagperf.graph', 'aiohttp'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_a_reply_of_the_fifth_api_reads_its_error_and_its_end():
    reply = llama_native.API.reply()
    events = [b'{"content":"Hel","stop":false}', b'{"content":"lo","stop":false}']
    assert [reply.add_chunk(e) for e in events] == [True, True]
    last = b'{"content":"","stop":true,"stop_type":"eos","tokens_evaluated":9,"tokens_predicted":2}'
    assert reply.add_chunk(last) is False
    assert (reply.text, reply.finish) == ("Hello", "stop")
    assert reply.usage_counts() == {"usage_prompt_tokens": 9, "usage_completion_tokens": 2}
    assert reply.message() == {"role": "assistant", "content": "Hello"}
    failed = llama_native.API.reply()
    error = b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
    with pytest.raises(ServerError, match="Loading model") as caught:
        failed.add_body(error)
    assert (caught.value.code, caught.value.kind) == (503, "unavailable_error")


@pytest.mark.parametrize(
    ("name", "sent"),
    [
        ("chat", {"max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}),
        (
            "completions",
            {"max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}},
        ),
        ("responses", {"max_output_tokens": 4, "stream": True}),
        ("messages", {"max_tokens": 4, "stream": True}),
        (llama_native.NAME, {"n_predict": 4, "stream": True}),
    ],
)
def test_a_turn_s_cap_is_sent_and_recorded_as_its_api_names_it(fifth_api, name, sent):
    api = APIS[name]
    endpoint = EndpointConfig(url="127.0.0.1:8080", model="m", streaming=True, endpoint_type=name)
    params = api.params(Payload.of([user()], max_tokens=4), endpoint)
    assert params == {"model": "m", **sent}
    assert api.max_tokens(params) == 4
    assert api.max_tokens({"model": "m"}) is None


def test_of_a_body_with_both_of_chat_s_caps_the_newer_counts_as_servers_read_it():
    assert APIS["chat"].max_tokens({"max_tokens": 8, "max_completion_tokens": 3}) == 3
    unsent = APIS["messages"].params(Payload.of([user()]), EndpointConfig(url="h", model="m"))
    assert unsent["max_tokens"] == 4096  # the Messages API needs one; the turn set none
