"""What a scheduler is told: where it listens, whom it waits for, how it reports and judges."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dagperf.apis.endpoint_config import EndpointConfig
from dagperf.exports.server_metrics import ScrapeTargets
from dagperf.metrics.censored import CONFIDENCE, Objective
from dagperf.transport import protocol
from dagperf.verdict import DEFAULT_MAX_ERROR_RATE
from dagperf.vocabulary.keys import SchedulerKeys


class SchedulerError(Exception):
    """The run could not start or could not go on; the message says why."""


@dataclass(frozen=True)
class SchedulerOptions:
    """How a scheduler listens, waits for workers, reports and judges its run."""

    keys: SchedulerKeys
    bind: str  # the ZeroMQ address workers connect to
    expected_workers: int
    heartbeat_s: float = 1.0
    worker_timeout_s: float = 10.0  # a worker silent this long is lost
    registration_timeout_s: float = 60.0
    cancel_timeout_s: float = 10.0  # for results of cancelled requests to come back
    goodput: dict[str, float] | None = None
    tokenizer_json: str | None = None  # sent to every worker
    benchmark: str = "dagperf"  # the name in metrics and reports
    metrics_port: int | None = None  # /metrics and /status; None: not served
    metrics_host: str = "0.0.0.0"
    metrics_linger_s: float = 0.0  # keep serving this long after the end, for a last scrape
    summary_file: Path | None = None  # the final report, for the operator
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    slice_duration_s: float | None = None  # timeslice exports, after the run
    scrape: ScrapeTargets | None = None  # the servers' own metrics, during the run
    # Objectives the run is judged on (a search step); with `max_duration_s`, it measures past
    # its duration until each is decided, or that long after its start (`engine.window`).
    objectives: tuple[Objective, ...] = ()
    confidence: float = CONFIDENCE
    max_duration_s: float | None = None


def worker_settings(
    endpoint: EndpointConfig, tokenizer_json: str | None
) -> protocol.WorkerSettings:
    """How the workers send requests, from the run's endpoint; never where to or with which
    key (each worker has those in its own configuration)."""
    return protocol.WorkerSettings(
        endpoint_type=endpoint.endpoint_type,
        streaming=endpoint.streaming,
        timeout_s=endpoint.request_timeout_seconds,
        affinity_headers=tuple(endpoint.session_affinity_headers),
        tokenizer_json=tokenizer_json,
        backend_headers=tuple(endpoint.backend_headers),
    )
