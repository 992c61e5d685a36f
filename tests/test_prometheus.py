"""A real Prometheus (the Debian binary, see prom.py) scrapes a running benchmark; the values are
read back through its HTTP query API."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import aiohttp
import pytest

from dagperf.metrics.live import TTFT_BUCKETS
from dagperf.simulator import running_simulator

from dagfile import conv, turn
from prom import scraping
from runs import RECORDING, finish, start_profile


@pytest.fixture
async def prometheus(tmp_path):
    """Prometheus on loopback, scraping 127.0.0.1:<target> every second."""
    async with scraping(tmp_path / "prometheus") as (url, target):
        yield url, target


async def query(session: aiohttp.ClientSession, url: str, promql: str) -> float | None:
    async with session.get(f"{url}/api/v1/query", params={"query": promql}) as response:
        result = (await response.json())["data"]["result"]
    return float(result[0]["value"][1]) if result else None


async def test_prometheus_sees_the_histograms_and_branch_stats(prometheus, tmp_path):
    url, target = prometheus
    lines = [conv(f"r{i}", turn(forks=[f"r{i}-a", f"r{i}-b"])) for i in range(4)]
    lines += [conv(f"r{i}-{k}", turn(), turn()) for i in range(4) for k in "ab"]
    config = RECORDING.model_copy(update={"ttft_ms": 30})
    expected = {
        'sum(dagperf_requests_total{benchmark="prom",outcome="ok"})': 20,
        'sum(dagperf_time_to_first_token_seconds_count{benchmark="prom"})': 20,
        'dagperf_time_to_first_token_seconds_count{branch_mode="fork"}': 16,
        'dagperf_request_latency_seconds_count{agent_depth="1"}': 16,
        "dagperf_inter_token_latency_seconds_count": 20,
        "dagperf_branch_children_spawned_total": 8,
        "dagperf_branch_children_completed_total": 8,
        "dagperf_branch_children_truncated_total": 0,
        "dagperf_requests_completed": 20,
        "dagperf_progress_ratio": 1,
        "dagperf_live_workers": 2,
    }
    async with running_simulator(config) as sim:
        process, directory = await start_profile(
            sim.url, tmp_path, lines, "--streaming", "--concurrency", "2", "--workers", "2",
            "--metrics-port", str(target), "--metrics-host", "127.0.0.1",
            "--metrics-linger", "60", "--benchmark-name", "prom",
        )  # fmt: skip
        seen: dict[str, float | None] = {}
        async with aiohttp.ClientSession() as session:
            # The run takes a second; Prometheus finds its target a few seconds after starting,
            # and the linger keeps /metrics up until the final values have been scraped.
            with contextlib.suppress(TimeoutError):  # the assertion below shows what was missed
                async with asyncio.timeout(50):
                    while seen != expected:
                        seen = {q: await query(session, url, q) for q in expected}
                        await asyncio.sleep(0.5)
            median = await query(
                session, url,
                "histogram_quantile(0.5, sum by (le) (dagperf_time_to_first_token_seconds_bucket))",
            )  # fmt: skip
        assert seen == expected
        with contextlib.suppress(ProcessLookupError):
            process.terminate()  # end the linger: Prometheus has what it needs
        run = await finish(process, directory, sim)
    assert run.summary["request_count"]["avg"] == 20
    # Prometheus's median is in the bucket of the run's own median request (the 10th of 20):
    # near 30 ms on a quiet machine, later on a busy one, the same bucket either way.
    ttfts = sorted(r["metrics"]["time_to_first_token"]["value"] / 1000 for r in run.records)
    edges = (0.0, *TTFT_BUCKETS, float("inf"))
    low, high = next((a, b) for a, b in itertools.pairwise(edges) if a < ttfts[9] <= b)
    assert low < median <= high, (median, ttfts)
