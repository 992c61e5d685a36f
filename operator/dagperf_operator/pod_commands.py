"""What a Benchmark's pods run: their command lines, and the paths in the pods those name.

The scheduler's flags are made from the same options models the CLI makes its flags from
(`dagperf.options`, rendered by `as_flags`), so a Benchmark field reaches the scheduler exactly
as the command line would give it; tests parse these commands with the CLI's own parser. The
paths are where the pod specs (pod_specs.py) mount what the commands read and write.

A dataset named by a URL is fetched by `dagperf fetch`, whose URL comes from its environment,
not its command line: the URL's query may be a presigned URL's signature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dagperf.fetch import file_name
from dagperf.options import (
    CONCERNS,
    SEARCH,
    DatasetOptions,
    LogOptions,
    OutputOptions,
    ServerMetricsOptions,
)
from dagperf.options.role import SchedulerRoleOptions
from dagperf.sources import SESSION_CONFIG
from dagperf.vocabulary.options import as_flags
from dagperf_operator.settings import OperatorSettings
from dagperf_operator.spec import BenchmarkSpec, UrlRef

DATASET_DIR = "/dataset"
TOKENIZER_FILE = "/tokenizer/tokenizer.json"
RESULTS_DIR = "/results"
TERMINATION_LOG = "/dev/termination-log"
KEYS_DIR = "/etc/dagperf/keys"
DATASET_URL_ENV = "DAGPERF_DATASET_URL"
# What a pod listens on, said even at the CLI's default: the pod's own addresses, which the
# suite's fast lane (tests/kubelet.py, pods as local processes) maps from 0.0.0.0 to loopback.
POD_ADDRESSES = ("bind", "metrics_host")


def _dataset_file(spec: BenchmarkSpec, dataset_key: str | None) -> str:
    """Where the scheduler reads the dataset: under DATASET_DIR, a ConfigMap's key, a path on a
    claim, or the file the init container fetched from a URL."""
    if spec.dataset.url is not None:
        return f"{DATASET_DIR}/{file_name(spec.dataset.url.url)}"
    return f"{DATASET_DIR}/{dataset_key}"


def fetch_command(spec: BenchmarkSpec, url: UrlRef) -> list[str]:
    """The init container's: fetch `url` (given in DATASET_URL_ENV) to where the scheduler
    reads it, checking its SHA-256."""
    command = ["dagperf", "fetch", "--url-env", DATASET_URL_ENV, "--sha256", url.sha256.lower()]
    return [*command, "--output", _dataset_file(spec, None)]


def scheduler_command(
    name: str,
    spec: BenchmarkSpec,
    dataset_key: str | None,
    settings: OperatorSettings,
    scrape: tuple[str, ...] = (),
) -> list[str]:
    """The scheduler pod's: `dagperf scheduler` for worker pods to join, or, when one pod runs
    it all (a search, repeated runs), `dagperf search` or `dagperf profile` with local worker
    processes. Every option a Benchmark says is the flag its options model generates; the
    rest, the local-only options, are the operator's. `scrape`: the metrics URLs of the
    backend pods (see `server_metrics_urls`)."""
    role = "search" if spec.search else "profile" if spec.local_workers else "scheduler"
    command = ["dagperf", role, *_local_options(name, spec, dataset_key, settings, scrape)]
    for concern in (*CONCERNS.values(), SEARCH):
        given = spec.options(concern.section) if concern.section else None
        command += as_flags(given, concern.prefix) if given is not None else []
    if spec.local_workers:  # one pod: its workers are local processes
        command += ["--workers", str(spec.workers.processes_per_pod)]
    else:
        waiting = SchedulerRoleOptions(
            bind=f"tcp://0.0.0.0:{settings.zmq_port}",
            workers_expected=spec.workers.replicas * spec.workers.processes_per_pod,
            registration_timeout=600,
        )
        command += as_flags(waiting, local=True, always=POD_ADDRESSES)
    return [*command, "--keys", KEYS_DIR]


def _local_options(
    name: str,
    spec: BenchmarkSpec,
    dataset_key: str | None,
    settings: OperatorSettings,
    scrape: tuple[str, ...],
) -> list[str]:
    """The flags of the options no Benchmark field says: where the pod's files are, its ports,
    the servers' metrics URLs the operator found, and its JSON logs."""
    where = _dataset_file(spec, dataset_key)
    session_config = spec.dataset.type == SESSION_CONFIG
    dataset = DatasetOptions(
        input_file=None if session_config else where,
        session_config=where if session_config else None,
        tokenizer=TOKENIZER_FILE if spec.dataset.tokenizer is not None else None,
    )
    output = OutputOptions(
        artifact_dir=Path(f"{RESULTS_DIR}/{name}"),
        quiet=True,
        summary_file=Path(TERMINATION_LOG),
        benchmark_name=name,
        metrics_port=settings.metrics_port,
        metrics_linger=settings.metrics_linger_s,
    )
    servers = ServerMetricsOptions(server_metrics_url=list(scrape))
    return [
        *as_flags(dataset, local=True),
        *as_flags(servers, local=True),
        *as_flags(output, local=True, always=POD_ADDRESSES),
        *as_flags(LogOptions(log_format="json"), local=True),
    ]


def worker_command(spec: BenchmarkSpec, scheduler: str) -> list[str]:
    """A worker pod's, registering with the scheduler at the ZeroMQ address `scheduler` under
    its pod's name (POD_NAME in its environment). Where its requests go (the URL and the
    request path) is the worker's own setting, as the API key is: never the scheduler's."""
    path = spec.endpoint.path
    return [
        "dagperf",
        "worker",
        "--scheduler",
        scheduler,
        "--url",
        spec.endpoint.url,
        "--keys",
        KEYS_DIR,
        "--worker-id",
        "$(POD_NAME)",
        "--processes",
        str(spec.workers.processes_per_pod),
        "--log-format",
        "json",
        *(["--endpoint", path] if path else []),
    ]


def server_metrics_urls(spec: BenchmarkSpec, pods: list[dict[str, Any]]) -> tuple[str, ...]:
    """Each running backend pod's metrics URL, by its pod IP: scraped directly, not through a
    Service, so each backend is seen on its own. `pods` as the API server lists them."""
    wanted = spec.server_metrics
    if wanted is None:
        return ()
    urls = []
    for pod in pods:
        status = pod.get("status") or {}
        ip = status.get("podIP")
        if ip and status.get("phase") == "Running":
            host = f"[{ip}]" if ":" in ip else ip
            urls.append(f"http://{host}:{wanted.port}{wanted.path}")
    return tuple(sorted(urls))
