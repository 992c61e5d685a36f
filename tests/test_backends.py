"""Backend truth: the simulator's backends behind one port (each its own cache and vLLM-named
metrics, routed sticky or at random), and dagperf's attribution of each request to a backend
and of each FORK tree to a home, checked against the records on their own."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dagperf.apis.endpoint_config import AFFINITY_HEADERS
from dagperf.simulator import SimConfig, running_simulator

from dagfile import fork_trees
from emulator import ROOT
from runs import finish, free_port, profile, start_profile

AFFINITY_NAMES = {name.lower() for name in AFFINITY_HEADERS}
SIM = SimConfig(ttft_ms=5, itl_ms=1, output_tokens=4, backends=2)


async def chat(url: str, affinity: str | None) -> str:
    headers = {"X-Session-ID": affinity} if affinity else {}
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
    reuse = run.summary["fork_reuse"]  # each child's first request: its parent's whole context
    assert (reuse["requests"], reuse["unreported"], reuse["per_tree"]["trees"]) == (60, 0, 20)
    meta = [(r, r["metadata"]) for r in run.records]
    firsts = [r for r, m in meta if m["branch_mode"] == "fork" and m["turn_index"] == 0]
    cached = sum(r["metrics"]["usage_prompt_cache_read_tokens"]["value"] for r in firsts)
    prompt = sum(r["metrics"]["usage_prompt_tokens"]["value"] for r in firsts)
    assert (reuse["cached_tokens"], reuse["prompt_tokens"]) == (cached, prompt)
    assert reuse["share"] == cached / prompt > 0.8 and reuse["per_tree"]["min"] > 0.8
    assert f"FORK-child prefix reuse: {100 * reuse['share']:.0f}% of prompt tokens" in run.stdout


async def test_random_routing_is_seen_leaving_home(tmp_path):
    run, locality = await run_against(tmp_path, "random")
    trees, on_one, off = independent_locality(run.records)
    assert (locality["trees"], locality["trees_on_one_backend"]) == (trees, on_one) == (20, on_one)
    assert locality["requests_off_home_backend"] == off > 0
    assert locality["off_home_backend_ms"]["count"] == off
    assert locality["home_backend_ms"]["count"] == 120 - off
    reuse = run.summary["fork_reuse"]  # children away from their parent's cache reuse less
    assert reuse["per_tree"]["min"] < 0.8 and reuse["share"] < 0.9


async def test_without_a_backend_header_locality_is_unknown_not_claimed(tmp_path):
    """Two sticky backends behind one address, random routing: the answering address is the
    same for every request, so it proves nothing; the trees really scattered."""
    config = SIM.model_copy(update={"routing": "random"})
    async with running_simulator(config) as sim:
        run = await profile(sim, tmp_path, fork_trees(), "--concurrency", "4", "--streaming")
    assert run.returncode == 0, run.stderr
    port = sim.url.rsplit(":", 1)[1]
    assert {(r["metadata"]["backend"], r["metadata"]["backend_source"]) for r in run.records} == {
        (f"127.0.0.1:{port}", "connection")
    }
    locality = run.summary["backend_locality"]
    assert locality["method"] == "unknown" and locality["trees"] == 20
    assert locality["trees_on_one_backend"] is None
    assert locality["requests_off_home_backend"] is None
    assert locality["by_address"] == {f"127.0.0.1:{port}": 140}
    assert "Backend locality: unknown for 20 FORK trees; no response named" in run.stdout
    assert "--backend-header" in run.stdout


async def test_a_name_with_several_addresses_spreads_connections_and_names_each(tmp_path):
    """A headless Service: one name, one address per pod. Connections go to each address in
    turn, and without a backend header each record names the address that answered."""
    port = free_port()
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps({"llm.bench.svc": ["127.0.0.1", "127.0.0.2"]}))
    resolver = str(ROOT / "tests" / "resolver")  # plays the cluster's DNS
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
    locality = run.summary["backend_locality"]
    assert locality["method"] == "unknown" and locality["trees_on_one_backend"] is None
    assert set(locality["by_address"]) == {f"127.0.0.1:{port}", f"127.0.0.2:{port}"}


@pytest.mark.parametrize(
    ("flags", "sent"),
    [
        ((), AFFINITY_HEADERS),
        (("--session-affinity-header", "X-Tree"), ("X-Tree",)),
        (("--session-affinity-header", ""), ()),
    ],
)
async def test_the_tree_key_goes_in_the_headers_routers_read(tmp_path, flags, sent):
    """By default in every header the common routers hash; a flag replaces them, '' sends
    none. The per-request tracing ids stay beside the key."""
    config = SimConfig(ttft_ms=1, itl_ms=0, output_tokens=2, record_bodies=True)
    async with running_simulator(config) as sim:
        run = await profile(sim, tmp_path, fork_trees(2), *flags)
        served = [{k.lower(): v for k, v in r.headers.items()} for r in sim.simulator.records]
    assert run.returncode == 0, run.stderr
    root_of = {
        r["metadata"]["x_request_id"]: r["metadata"]["root_correlation_id"] for r in run.records
    }
    names = [name.lower() for name in sent]
    keys_by_tree: dict[str, set[str]] = {}
    for headers in served:
        assert set(names) <= set(headers) and not set(AFFINITY_NAMES - set(names)) & set(headers)
        keys = {headers[name] for name in names}
        assert len(keys) <= 1  # one key, in every header
        keys_by_tree.setdefault(root_of[headers["x-request-id"]], set()).update(keys)
    assert len(served) == 14 and len(keys_by_tree) == 2
    assert all(len(keys) == (1 if names else 0) for keys in keys_by_tree.values())
    if names:  # each tree has its own key
        assert len(set.union(*keys_by_tree.values())) == 2
