"""The servers' own metrics during the run: every sample of every `--server-metrics-url`, kept
in `server_metrics.jsonl` on the run's clock, and a summary of what engines report per backend.

Each URL is a Prometheus text endpoint (a vLLM or SGLang pod, TGI, Dynamo, a DCGM exporter),
scraped every interval and parsed by `prometheus_client`'s parser. A line holds the URL, the
scrape's epoch nanoseconds (the clock of the records), a sample's name, labels and value. A URL
that fails is logged the first time, counted, and tried again at the next interval: the servers'
metrics are a view beside the run, never a reason to end it.

The summary knows the names vLLM (`vllm:`), SGLang (`sglang:`), llama.cpp (`llamacpp:`) and
TGI (`tgi_`) give a few figures (`KNOWN`): requests running and waiting and KV-cache usage
(average and peak over the scrapes), and from counters, during the run: prompt tokens, the part
of them read from the prefix cache, vLLM's prefix-cache hit rate and the preemptions. Engines
count prompt tokens two ways: vLLM, SGLang and TGI all of them, llama.cpp only those it
computed (its cached ones apart), so the cached share is always cached over all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("dagperf.server_metrics")

# A figure -> the sample names engines report it under (summed over their label sets).
KNOWN = {
    "requests_running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "llamacpp:requests_processing",
        "tgi_batch_current_size",
    ),
    "requests_waiting": (
        "vllm:num_requests_waiting",
        "sglang:num_queue_reqs",
        "llamacpp:requests_deferred",
        "tgi_queue_size",
    ),
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
        "llamacpp:kv_cache_usage_ratio",  # older llama.cpp servers only
    ),
    "prompt_tokens": (  # every prompt token, cached or not
        "vllm:prompt_tokens_total",
        "sglang:prompt_tokens_total",
        "tgi_request_input_length_sum",
    ),
    "computed_prompt_tokens": ("llamacpp:prompt_tokens_total",),  # the cached ones apart
    "cached_prompt_tokens": ("llamacpp:prompt_tokens_cached_total", "sglang:cached_tokens_total"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_cache_queries": (
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
    ),
    "preemptions": ("vllm:num_preemptions_total",),
}
GAUGES = ("requests_running", "requests_waiting", "kv_cache_usage")
COUNTERS = (
    "prompt_tokens",
    "computed_prompt_tokens",
    "cached_prompt_tokens",
    "prefix_cache_hits",
    "prefix_cache_queries",
    "preemptions",
)
_NAMES = {name: figure for figure, names in KNOWN.items() for name in names}


@dataclass(frozen=True)
class ScrapeTargets:
    urls: tuple[str, ...]
    interval_s: float = 1.0


@dataclass
class _Backend:
    scrapes: int = 0
    failures: int = 0
    last_error: str | None = None
    gauges: dict[str, list[float]] = field(default_factory=dict)  # figure -> [sum, max, count]
    counters: dict[str, tuple[float, float]] = field(default_factory=dict)  # first, last


class ServerMetrics:
    """Records scrapes as they come (`record`), and sums them up (`report`)."""

    def __init__(self, targets: ScrapeTargets, path: Path):
        self.targets = targets
        self._file = path.open("wb", buffering=1 << 16)
        self._encode = msgspec.json.Encoder().encode
        self._backends = {url: _Backend() for url in targets.urls}

    def record(self, url: str, text: str, at_ns: int) -> None:
        backend = self._backends[url]
        figures: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                line = {
                    "url": url,
                    "timestamp_ns": at_ns,
                    "name": sample.name,
                    "labels": sample.labels,
                    "value": sample.value,
                }
                self._file.write(self._encode(line) + b"\n")
                figure = _NAMES.get(sample.name)
                if figure is not None:
                    figures[figure] = figures.get(figure, 0.0) + sample.value
        backend.scrapes += 1
        for figure, value in figures.items():
            if figure in GAUGES:
                total, peak, count = backend.gauges.get(figure, [0.0, value, 0])
                backend.gauges[figure] = [total + value, max(peak, value), count + 1]
            else:
                first = backend.counters.get(figure, (value, value))[0]
                backend.counters[figure] = (first, value)

    def failed(self, url: str, error: str) -> None:
        backend = self._backends[url]
        if backend.failures == 0:
            log.warning(
                "cannot scrape %s: %s (trying again every %g s)",
                url,
                error,
                self.targets.interval_s,
            )
        backend.failures += 1
        backend.last_error = error

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()

    def report(self) -> dict[str, Any]:
        """`server_metrics` for the summary: per URL, its scrapes and known figures."""
        out = {}
        for url, b in self._backends.items():
            entry: dict[str, Any] = {"scrapes": b.scrapes, "failures": b.failures}
            if b.last_error:
                entry["last_error"] = b.last_error
            for figure, (total, peak, count) in b.gauges.items():
                entry[figure] = {"avg": total / count, "max": peak}
            deltas = {f: last - first for f, (first, last) in b.counters.items()}
            if "preemptions" in deltas:
                entry["preemptions"] = deltas["preemptions"]
            queries = deltas.get("prefix_cache_queries")
            if queries:
                entry["prefix_cache_hit_rate"] = deltas.get("prefix_cache_hits", 0.0) / queries
            entry.update(_prompt_cache(deltas))
            out[url] = entry
        return {"interval_s": self.targets.interval_s, "by_url": out}


def _prompt_cache(deltas: dict[str, float]) -> dict[str, float]:
    """Prompt tokens during the run, those read from the cache, and their share, however the
    engine counts them (vLLM's prefix-cache hits are tokens too)."""
    cached = deltas.get("cached_prompt_tokens", deltas.get("prefix_cache_hits"))
    prompt = deltas.get("prompt_tokens")
    if prompt is None and "computed_prompt_tokens" in deltas:
        prompt = deltas["computed_prompt_tokens"] + (cached or 0.0)
    out: dict[str, float] = {}
    if prompt is not None:
        out["prompt_tokens"] = prompt
    if cached is not None:
        out["cached_prompt_tokens"] = cached
        if prompt:
            out["cached_prompt_share"] = cached / prompt
    return out


async def scrape_forever(metrics: ServerMetrics) -> None:
    """Scrape every URL each interval until cancelled; a slow URL does not delay the others."""
    interval = metrics.targets.interval_s
    async with _session(metrics) as session:
        while True:
            began = time.monotonic()
            await asyncio.gather(*(_scrape(session, metrics, url) for url in metrics.targets.urls))
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - began)))


async def scrape_once(metrics: ServerMetrics) -> None:
    """One scrape of every URL: the last, as the run ends."""
    async with _session(metrics) as session:
        await asyncio.gather(*(_scrape(session, metrics, url) for url in metrics.targets.urls))


def _session(metrics: ServerMetrics) -> aiohttp.ClientSession:
    import aiohttp  # here: only a run that scrapes its servers loads it

    timeout = aiohttp.ClientTimeout(total=max(metrics.targets.interval_s, 1.0))
    return aiohttp.ClientSession(timeout=timeout, trust_env=False)


async def _scrape(session: aiohttp.ClientSession, metrics: ServerMetrics, url: str) -> None:
    import aiohttp

    at = time.time_ns()
    try:
        async with session.get(url) as response:
            if response.status != 200:
                metrics.failed(url, f"HTTP {response.status}")
                return
            text = await response.text()
        metrics.record(url, text, at)
    except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as e:
        metrics.failed(url, f"{type(e).__name__}: {e}"[:300])
