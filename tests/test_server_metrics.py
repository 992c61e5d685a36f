"""The servers' own metrics (--server-metrics-url): recorded and summed up from exposition text
written by hand, then scraped from two simulated backends during a real run and checked against
the raw samples and the backends' own final counters."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import generate_latest

from dagperf.exports.server_metrics import ScrapeTargets, ServerMetrics
from dagperf.simulator import SimConfig, running_simulator

from dagfile import fork_trees
from runs import profile, read_jsonl

VLLM = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="a"}} {running}
vllm:num_requests_running{{model_name="b"}} 1
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{{model_name="a"}} {queries}
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{{model_name="a"}} {hits}
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{{model_name="a"}} {preempted}
"""
SGLANG = "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 3\n"


def test_scrapes_are_kept_whole_and_summed_up_per_url(tmp_path, caplog):
    a, b = "http://127.0.0.1:1/metrics", "http://127.0.0.1:2/metrics"
    metrics = ServerMetrics(ScrapeTargets((a, b), 0.5), tmp_path / "server_metrics.jsonl")
    metrics.record(a, VLLM.format(running=2, queries=100, hits=10, preempted=1), 1_000)
    metrics.record(a, VLLM.format(running=6, queries=300, hits=160, preempted=4), 2_000)
    metrics.record(b, SGLANG, 1_500)
    with caplog.at_level(logging.WARNING, logger="dagperf.server_metrics"):
        metrics.failed(b, "HTTP 503")
        metrics.failed(b, "HTTP 503")  # told once, counted twice
    metrics.close()
    report = metrics.report()["by_url"]
    assert report[a] == {
        "scrapes": 2, "failures": 0,
        "requests_running": {"avg": 5.0, "max": 7.0},  # 3 then 7, summed over model names
        "preemptions": 3.0, "prefix_cache_hit_rate": 150 / 200,
        "cached_prompt_tokens": 150.0,  # vLLM's hits are tokens
    }  # fmt: skip
    assert report[b]["requests_waiting"] == {"avg": 3.0, "max": 3.0}
    assert (report[b]["failures"], report[b]["last_error"]) == (2, "HTTP 503")
    assert len([r for r in caplog.records if "cannot scrape" in r.message]) == 1
    lines = read_jsonl(tmp_path / "server_metrics.jsonl")
    assert len(lines) == 2 * 5 + 1
    assert lines[0] == {"url": a, "timestamp_ns": 1_000, "name": "vllm:num_requests_running",
                        "labels": {"model_name": "a"}, "value": 2.0}  # fmt: skip


# As llama.cpp's server (`--metrics`) and TGI write them.
LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {computed}
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total {cached}
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {running}
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""
TGI = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 4
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 8
# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{{le="+Inf"}} 3
tgi_request_input_length_sum {prompt}
tgi_request_input_length_count 3
"""


def test_llama_cpp_and_tgi_figures_are_known_by_their_own_names(tmp_path):
    llama, tgi = "http://127.0.0.1:1/metrics", "http://127.0.0.1:2/metrics"
    metrics = ServerMetrics(ScrapeTargets((llama, tgi), 1.0), tmp_path / "m.jsonl")
    metrics.record(llama, LLAMACPP.format(computed=100, cached=0, running=1), 1_000)
    metrics.record(llama, LLAMACPP.format(computed=160, cached=540, running=3), 2_000)
    metrics.record(tgi, TGI.format(prompt=50), 1_000)
    metrics.record(tgi, TGI.format(prompt=350), 2_000)
    metrics.close()
    report = metrics.report()["by_url"]
    assert report[llama] == {
        "scrapes": 2,
        "failures": 0,
        "requests_running": {"avg": 2.0, "max": 3.0},
        "requests_waiting": {"avg": 2.0, "max": 2.0},
        # llama.cpp counts computed and cached tokens apart: 60 computed + 540 cached in the run
        "prompt_tokens": 600.0,
        "cached_prompt_tokens": 540.0,
        "cached_prompt_share": 0.9,
    }
    assert report[tgi]["requests_running"] == {"avg": 8.0, "max": 8.0}
    assert report[tgi]["requests_waiting"] == {"avg": 4.0, "max": 4.0}
    assert report[tgi]["prompt_tokens"] == 300.0 and "cached_prompt_tokens" not in report[tgi]


def series(samples: list[dict], name: str) -> list[float]:
    """One sample name's values, in the order scraped."""
    return [s["value"] for s in samples if s["name"] == name]


@pytest.mark.parametrize("routing", ["sticky", "random"])
async def test_two_backends_scraped_during_a_run_report_their_own_cache(tmp_path, routing):
    config = SimConfig(ttft_ms=5, itl_ms=1, output_tokens=4, backends=2, routing=routing)
    async with running_simulator(config) as sim:
        urls = [f"{sim.url}/backends/{i}/metrics" for i in range(2)]
        flags = [flag for url in urls for flag in ("--server-metrics-url", url)]
        run = await profile(sim, tmp_path, fork_trees(), *flags, "--server-metrics-interval",
                            "0.05", "--concurrency", "4")  # fmt: skip
        final = [generate_latest(b.metrics.registry).decode() for b in sim.simulator.backends]
    assert run.returncode == 0, run.stderr
    report = run.summary["server_metrics"]["by_url"]
    samples = read_jsonl(run.directory / "server_metrics.jsonl")
    for url, exposition in zip(urls, final, strict=True):
        mine = [s for s in samples if s["url"] == url]
        assert report[url]["scrapes"] >= 2 and report[url]["failures"] == 0

        hits = series(mine, "vllm:prefix_cache_hits_total")
        queries = series(mine, "vllm:prefix_cache_queries_total")
        assert report[url]["prefix_cache_hit_rate"] == pytest.approx(
            (hits[-1] - hits[0]) / (queries[-1] - queries[0])
        )
        assert f'vllm:prefix_cache_hits_total{{model_name="dagperf-sim"}} {hits[-1]}' in exposition
        prompt = series(mine, "vllm:prompt_tokens_total")
        assert report[url]["prompt_tokens"] == prompt[-1] - prompt[0]
        assert report[url]["cached_prompt_tokens"] == hits[-1] - hits[0]
        assert f"Server {url}: cached " in run.stdout  # the console says what each counted
        assert mine[-1]["timestamp_ns"] >= max(r["metadata"]["request_end_ns"] for r in run.records)
    last = {url: max(s["timestamp_ns"] for s in samples if s["url"] == url) for url in urls}
    served = sum(
        s["value"] for s in samples
        if s["name"] == "vllm:request_success_total" and s["timestamp_ns"] == last[s["url"]]
    )  # fmt: skip
    assert served == len(run.records) == 140  # the last scrapes saw every request
