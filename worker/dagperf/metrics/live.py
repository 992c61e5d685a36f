"""Live Prometheus metrics of a run, served by the scheduler at /metrics.

Latencies are histograms in seconds, with buckets over the ranges vLLM uses (inter-token
latency extended below vLLM's first 10 ms bucket, where fast servers live), so dashboards can
put the benchmark's view beside the server's. Every series carries a `benchmark` label; the
other labels take few values by construction: agent depth is capped ("5+"), error types and
worker names stop at a limit and are folded into "other" beyond it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dagperf.engine import BranchStats, Flight, Phase, Progress
from dagperf.transport.protocol import Result
from dagperf.vocabulary import catalog


def histogram_name(metric: catalog.Metric) -> str:
    """The live histogram of a metric timed in ms: `dagperf_<name>_seconds`."""
    return f"dagperf_{metric.name}_seconds"


def _seconds(bounds: str) -> tuple[float, ...]:
    return tuple(float(bound) for bound in bounds.split())


TTFT_BUCKETS = _seconds(
    "0.001 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.25 0.5 0.75 1.0 2.5 5.0 7.5 10.0 20.0 "
    "40.0 80.0 160.0 640.0 2560.0"
)
ITL_BUCKETS = _seconds(
    "0.001 0.0025 0.005 0.0075 0.01 0.025 0.05 0.075 0.1 0.15 0.2 0.3 0.4 0.5 0.75 1.0 "
    "2.5 5.0 7.5 10.0 20.0 40.0 80.0"
)
LATENCY_BUCKETS = _seconds(
    "0.01 0.025 0.05 0.1 0.3 0.5 0.8 1.0 1.5 2.0 2.5 5.0 10.0 15.0 20.0 30.0 40.0 50.0 "
    "60.0 120.0 240.0 480.0 960.0 1920.0 7680.0"
)
MAX_DEPTH_LABEL = 5
MAX_ERROR_TYPES = 20
MAX_WORKERS = 256
OTHER = "other"


class LiveMetrics:
    def __init__(self, benchmark: str):
        self.benchmark = benchmark
        self.registry = registry = CollectorRegistry()
        b = ["benchmark"]

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, [*b, *labels], registry=registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, b, registry=registry)

        self.requests = counter(
            "dagperf_requests",
            "Requests completed: ok, error (the endpoint's) or cut (the run's)",
            ("outcome", "worker"),
        )
        self.errors = counter(
            "dagperf_request_errors", "Requests the endpoint failed", ("error_type",)
        )
        self.input_tokens = counter("dagperf_input_tokens", "Prompt tokens of successful requests")
        self.output_tokens = counter(
            "dagperf_output_tokens", "Output tokens of successful requests"
        )
        self.cached_tokens = counter(
            "dagperf_cached_prompt_tokens", "Prompt tokens the server reported as cached"
        )
        self.ttft = Histogram(
            histogram_name(catalog.TIME_TO_FIRST_TOKEN),
            "Time to first token",
            [*b, "branch_mode"],
            buckets=TTFT_BUCKETS,
            registry=registry,
        )
        self.itl = Histogram(
            histogram_name(catalog.INTER_TOKEN_LATENCY),
            "Inter-token latency",
            b,
            buckets=ITL_BUCKETS,
            registry=registry,
        )
        self.latency = Histogram(
            histogram_name(catalog.REQUEST_LATENCY),
            "Request latency",
            [*b, "agent_depth"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.branch = {
            f.name: counter(f"dagperf_branch_{f.name}", f"BranchStats {f.name}")
            for f in fields(BranchStats)
        }
        for branch_counter in self.branch.values():
            branch_counter.labels(benchmark)  # a labelled series exists only once touched: 0 now
        self._branch_seen = dict.fromkeys(self.branch, 0)
        self.in_flight = gauge("dagperf_requests_in_flight", "Requests on the wire")
        self.workers = gauge("dagperf_live_workers", "Registered workers")
        self.completed = gauge("dagperf_requests_completed", "Requests completed this phase")
        self.expected = gauge(
            "dagperf_requests_expected", "Requests this phase will send (0: unknown)"
        )
        self.progress = gauge("dagperf_progress_ratio", "Completed over expected (0 when unknown)")
        self._error_types: set[str] = set()
        self._workers: set[str] = set()

    def observe(self, flight: Flight, result: Result) -> None:
        """One profiling-phase result."""
        benchmark = self.benchmark
        error = result.error
        outcome = "ok" if error is None else ("cut" if result.cut is not None else "error")
        self.requests.labels(
            benchmark, outcome, self._bounded(flight.worker, self._workers, MAX_WORKERS)
        ).inc()
        if error is not None:
            if result.failed:
                kind = self._bounded(error.type, self._error_types, MAX_ERROR_TYPES)
                self.errors.labels(benchmark, kind).inc()
            return
        metrics: dict[str, Any] = result.metrics
        session = flight.run.tree.sessions[flight.run.tree.nodes[flight.node].session]
        depth = str(session.depth) if session.depth < MAX_DEPTH_LABEL else f"{MAX_DEPTH_LABEL}+"
        self.latency.labels(benchmark, depth).observe(metrics[catalog.REQUEST_LATENCY.name] / 1000)
        ttft = metrics.get(catalog.TIME_TO_FIRST_TOKEN.name)
        if ttft is not None:
            self.ttft.labels(benchmark, session.kind.value).observe(ttft / 1000)
        itl = metrics.get(catalog.INTER_TOKEN_LATENCY.name)
        if itl is not None:
            self.itl.labels(benchmark).observe(itl / 1000)
        for counter, metric in (
            (self.input_tokens, catalog.INPUT_SEQUENCE_LENGTH),
            (self.output_tokens, catalog.OUTPUT_SEQUENCE_LENGTH),
            (self.cached_tokens, catalog.USAGE_PROMPT_CACHE_READ_TOKENS),
        ):
            counter.labels(benchmark).inc(metrics.get(metric.name, 0))

    def update(self, progress: Progress, workers: int, stats: BranchStats) -> None:
        """Gauges and BranchStats, from the dispatcher's latest state; a warm-up is not shown."""
        if progress.phase is not Phase.PROFILING:
            return
        benchmark = self.benchmark
        self.in_flight.labels(benchmark).set(progress.in_flight)
        self.workers.labels(benchmark).set(workers)
        self.completed.labels(benchmark).set(progress.completed)
        self.expected.labels(benchmark).set(progress.expected or 0)
        ratio = progress.completed / progress.expected if progress.expected else 0.0
        self.progress.labels(benchmark).set(min(ratio, 1.0))
        for name, value in stats.as_dict().items():  # counters only go up: add what is new
            if value > self._branch_seen[name]:
                self.branch[name].labels(benchmark).inc(value - self._branch_seen[name])
                self._branch_seen[name] = value

    @staticmethod
    def _bounded(value: str, seen: set[str], limit: int) -> str:
        if value in seen:
            return value
        if len(seen) < limit:
            seen.add(value)
            return value
        return OTHER
