"""Backend truth: the simulator's backends behind one port (each its own cache and vLLM-named
metrics, routed sticky or at random), and dagperf's attribution of each request to a backend
and of each FORK tree to a home, checked against the records on their own."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from dagperf.simulator import SimConfig, running_simulator

from dagfile import conv, fork_trees, turn
from emulator import ROOT
from runs import finish, free_port, profile, start_profile

SIM = SimConfig(ttft_ms=5, itl_ms=1, output_tokens=4, backends=2)


async def chat(url: str, affinity: str | None) -> str:
    headers = {"X-Session-Affinity": affinity} if affinity else {}
    body = {"model": "m", "messages": [{"role": "user", "content": "the same long prefix " * 30}]}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status == 200
            return r.headers["x-backend"]


async def metrics(url: str, backend: int) -> dict[str, float]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/backends/{backend}/metrics") as r:
            assert r.status == 200
            text = await r.text()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("vllm:")
    }


async def test_sticky_backends_keep_a_key_and_their_own_cache_and_metrics():
    async with running_simulator(SIM) as sim:
        first = await chat(sim.url, "key-a")
        assert {await chat(sim.url, "key-a") for _ in range(5)} == {first}
        other = next(b for b in range(2) if f"backend-{b}" != first)
        served = await metrics(sim.url, int(first.rsplit("-", 1)[1]))
        idle = await metrics(sim.url, other)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{sim.url}/backends/7/metrics") as r:
                assert r.status == 404
    assert served["vllm:request_success_total"] == 6 and idle["vllm:request_success_total"] == 0
    queries = served["vllm:prefix_cache_queries_total"]
    assert 0 < served["vllm:prefix_cache_hits_total"] < queries  # the first was a miss
    assert served["vllm:num_requests_running"] == 0 and served["vllm:num_preemptions_total"] == 0


def independent_locality(records: list[dict]) -> tuple[int, int, int]:
    """(trees, trees on one backend, requests off home), from the records alone: a tree here is
    a root with its FORK children, its home the backend of its first request."""
    trees = defaultdict(list)
    for r in records:
        m = r["metadata"]
        trees[m["root_correlation_id"]].append((m["request_start_ns"], m["backend"]))
    on_one = off = 0
    for served in trees.values():
        served.sort()
        on_one += len({b for _, b in served}) == 1
        off += sum(b != served[0][1] for _, b in served[1:])
    return len(trees), on_one, off


async def run_against(tmp_path, routing: str):
    config = SIM.model_copy(update={"routing": routing})
    async with running_simulator(config) as sim:
        run = await profile(sim, tmp_path / routing, fork_trees(), "--backend-header",
                            "x-backend", "--concurrency", "4", "--streaming")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert {r["metadata"]["backend_source"] for r in run.records} == {"header:x-backend"}
    return run, run.summary["backend_locality"]


async def test_sticky_routing_keeps_every_fork_tree_home(tmp_path):
    run, locality = await run_against(tmp_path, "sticky")
    assert (locality["trees"], locality["trees_on_one_backend"]) == (20, 20)
    assert locality["requests_off_home_backend"] == 0
    assert set(locality["by_backend"]) == {"backend-0", "backend-1"}  # spread, yet each home
    assert sum(locality["by_backend"].values()) == len(run.records) == 140
    assert independent_locality(run.records) == (20, 20, 0)
    assert "off_home_backend_ms" not in locality and locality["home_backend_ms"]["count"] == 120
    assert "Backend locality (header:x-backend): 20 of 20 FORK trees" in run.stdout


async def test_random_routing_is_seen_leaving_home(tmp_path):
    run, locality = await run_against(tmp_path, "random")
    trees, on_one, off = independent_locality(run.records)
    assert (locality["trees"], locality["trees_on_one_backend"]) == (trees, on_one) == (20, on_one)
    assert locality["requests_off_home_backend"] == off > 0
    assert locality["off_home_backend_ms"]["count"] == off
    assert locality["home_backend_ms"]["count"] == 120 - off


async def test_without_a_backend_header_the_answering_address_names_the_backend(tmp_path):
    async with running_simulator(SimConfig(ttft_ms=1, itl_ms=0, output_tokens=2)) as sim:
        run = await profile(sim, tmp_path, [conv("a", turn(), turn())])
    port = sim.url.rsplit(":", 1)[1]
    assert {(r["metadata"]["backend"], r["metadata"]["backend_source"]) for r in run.records} == {
        (f"127.0.0.1:{port}", "connection")
    }
    assert run.summary["backend_locality"]["method"] == "connection"


async def test_a_name_with_several_addresses_spreads_connections_and_names_each(tmp_path):
    """A headless Service: one name, one address per pod. Connections go to each address in
    turn, and without a backend header each record names the address that answered."""
    port = free_port()
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps({"llm.bench.svc": ["127.0.0.1", "127.0.0.2"]}))
    resolver = str(ROOT / "tests" / "cluster" / "resolver")  # plays the cluster's DNS
    env = dict(os.environ) | {"DAGPERF_TEST_HOSTS": str(hosts), "PYTHONPATH": resolver}
    pods = SimConfig(ttft_ms=20, itl_ms=1, output_tokens=2)
    async with (
        running_simulator(pods, host="127.0.0.1", port=port),
        running_simulator(pods, host="127.0.0.2", port=port),
    ):
        process, directory = await start_profile(
            f"http://llm.bench.svc:{port}", tmp_path, fork_trees(6), "--model", "m",
            "--concurrency", "6", "--workers", "1", env=env,
        )  # fmt: skip
        run = await finish(process, directory, None)
    assert run.returncode == 0, run.stderr
    served = {(r["metadata"]["backend"], r["metadata"]["backend_source"]) for r in run.records}
    assert served == {(f"127.0.0.1:{port}", "connection"), (f"127.0.0.2:{port}", "connection")}
    assert run.summary["backend_locality"]["method"] == "connection"
