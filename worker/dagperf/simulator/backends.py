"""Simulated backends behind the simulator's one port, and the router in front of them.

Each backend is a model server of its own: its prefix cache (so a prompt whose prefix another
backend cached pays its full prefill here), its request slots, and its metrics under vLLM's
names at `/backends/<i>/metrics`, which is what a server-metrics scraper reads from a real pod.
Every response names the backend that served it in an `x-backend` header.

The router is sticky on the affinity header (rendezvous hash of its value, as a KV-aware router
keeps a session on the pod holding its cache) or random (seeded), which a benchmark's locality
report must tell apart.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from dagperf.simulator.config import SimConfig
from dagperf.simulator.engine import Engine
from dagperf.simulator.prefix_cache import PrefixCache

BACKEND_HEADER = "x-backend"


class BackendMetrics:
    """One backend's counters and gauges, with vLLM's metric names and `model_name` label."""

    def __init__(self, model: str) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name"]

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=self.registry).labels(model)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=self.registry).labels(model)

        self.running = gauge("vllm:num_requests_running", "Requests being served.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting for a slot.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "Share of the prefix cache in use.")
        self.queries = counter("vllm:prefix_cache_queries", "Prompt tokens looked up.")
        self.hits = counter("vllm:prefix_cache_hits", "Prompt tokens found in the cache.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated.")
        self.preemptions = counter("vllm:num_preemptions", "Requests preempted (never, here).")
        self.success = counter("vllm:request_success", "Requests answered.")


class Backend:
    def __init__(self, index: int, config: SimConfig) -> None:
        self.name = f"backend-{index}"
        self.cache = PrefixCache(config.block_size, config.cache_blocks)
        slots = config.max_concurrency
        self.slots = asyncio.Semaphore(slots) if slots else None
        self.metrics = BackendMetrics(config.model)
        self.engine: Engine | None = None  # an engine's sequence slots (`--slots`)
        if config.slots is not None:
            self.engine = Engine(config.slots, config.itl_ms, config.batch_itl_ms, self._gauges)

    def _gauges(self, running: int, waiting: int) -> None:
        self.metrics.running.set(running)
        self.metrics.waiting.set(waiting)

    def admit(self, prompt: list[str]) -> int:
        """Look the prompt up in this backend's cache; the tokens found there."""
        cached = self.cache.admit(prompt)
        metrics = self.metrics
        metrics.queries.inc(len(prompt))
        metrics.hits.inc(cached)
        metrics.prompt_tokens.inc(len(prompt))
        if self.cache.capacity:
            metrics.kv_usage.set(len(self.cache) / self.cache.capacity)
        return cached


class Router:
    """Picks a backend for each request."""

    def __init__(self, backends: list[Backend], config: SimConfig) -> None:
        self.backends = backends
        self._sticky = config.routing == "sticky"
        self._header = config.affinity_header.lower()
        self._random = random.Random(config.seed)

    def pick(self, headers: Mapping[str, str]) -> Backend:
        if len(self.backends) == 1:
            return self.backends[0]
        key = headers.get(self._header) if self._sticky else None
        if key is None:
            return self._random.choice(self.backends)
        return max(self.backends, key=lambda b: _weight(key, b.name))


def _weight(key: str, backend: str) -> bytes:
    return hashlib.blake2b(f"{key}\0{backend}".encode(), digest_size=8).digest()
