"""What a Benchmark's pods run: their command lines, and the paths in the pods those name.

The scheduler's flags are made from the same flat models the CLI makes its flags from
(`model_flags`), so a Benchmark field reaches the scheduler exactly as the command line would
give it; tests parse these commands with the CLI's own parser. The paths are where the pod specs
(pod_specs.py) mount what the commands read and write.

A dataset named by a URL is fetched by `dagperf fetch`, whose URL comes from its environment,
not its command line: the URL's query may be a presigned URL's signature.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from dagperf.fetch import file_name
from dagperf.sources import SESSION_CONFIG
from dagperf.verdict import DEFAULT_MAX_ERROR_RATE
from dagperf_operator.settings import OperatorSettings
from dagperf_operator.spec import BenchmarkSpec, UrlRef, health_options, load_config

DATASET_DIR = "/dataset"
TOKENIZER_FILE = "/tokenizer/tokenizer.json"
RESULTS_DIR = "/results"
TERMINATION_LOG = "/dev/termination-log"
KEYS_DIR = "/etc/dagperf/keys"
DATASET_URL_ENV = "DAGPERF_DATASET_URL"


def model_flags(options: BaseModel, prefix: str = "") -> list[str]:
    """The flags that give the scheduler these options (one of the CLI's flat models): one per
    option not at its default, named as the CLI generates them from the same model."""
    flags: list[str] = []
    for name, value in options.model_dump().items():
        if value is None or value == type(options).model_fields[name].default:
            continue
        flag = prefix + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            flags += [f"--{flag}", str(value)]
    return flags


def _dataset_file(spec: BenchmarkSpec, dataset_key: str | None) -> str:
    """Where the scheduler reads the dataset: under DATASET_DIR, a ConfigMap's key, a path on a
    claim, or the file the init container fetched from a URL."""
    if spec.dataset.url is not None:
        return f"{DATASET_DIR}/{file_name(spec.dataset.url.url)}"
    return f"{DATASET_DIR}/{dataset_key}"


def _dataset_flags(spec: BenchmarkSpec, dataset_key: str | None) -> list[str]:
    where = _dataset_file(spec, dataset_key)
    if spec.dataset.type == SESSION_CONFIG:
        return ["--session-config", where]
    return ["--input-file", where, "--custom-dataset-type", spec.dataset.type]


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
    """`scrape`: the metrics URLs of the backend pods (see `server_metrics_urls`)."""
    endpoint = spec.endpoint
    command = ["dagperf", "search" if spec.search else "scheduler"]
    command += _dataset_flags(spec, dataset_key)
    command += ["--url", endpoint.url, "--endpoint-type", endpoint.type]
    if endpoint.model:
        command += ["--model", endpoint.model]
    if endpoint.streaming:
        command.append("--streaming")
    if endpoint.extra_inputs:
        command += ["--extra-inputs", json.dumps(endpoint.extra_inputs, sort_keys=True)]
    for header in endpoint.backend_headers:
        command += ["--backend-header", header]
    for url in scrape:
        command += ["--server-metrics-url", url]
    if scrape and spec.server_metrics is not None:
        command += ["--server-metrics-interval", f"{spec.server_metrics.interval_seconds:g}"]
    if spec.dataset.tokenizer is not None:
        command += ["--tokenizer", TOKENIZER_FILE]
    command += model_flags(load_config(spec.load))
    command += model_flags(health_options(spec.health), prefix="health-")
    verdict = spec.verdict
    if verdict.max_error_rate != DEFAULT_MAX_ERROR_RATE:
        command += ["--max-error-rate", str(verdict.max_error_rate)]
    if verdict.goodput:
        command += ["--goodput", " ".join(f"{m}:{v}" for m, v in sorted(verdict.goodput.items()))]
    if spec.results.report and spec.results.persistent_volume_claim is not None:
        command.append("--report")
    if spec.search is not None:  # one pod: its workers are local processes
        command += [*spec.search.flags(), "--workers", str(spec.workers.processes_per_pod)]
    else:
        expected = spec.workers.replicas * spec.workers.processes_per_pod
        command += ["--bind", f"tcp://0.0.0.0:{settings.zmq_port}"]
        command += ["--workers-expected", str(expected), "--registration-timeout", "600"]
    command += [
        "--keys",
        KEYS_DIR,
        "--artifact-dir",
        f"{RESULTS_DIR}/{name}",
        "--metrics-host",
        "0.0.0.0",
        "--metrics-port",
        str(settings.metrics_port),
        "--metrics-linger",
        str(settings.metrics_linger_s),
        "--summary-file",
        TERMINATION_LOG,
        "--benchmark-name",
        name,
        "--log-format",
        "json",
        "--quiet",
    ]
    return command


def worker_command(spec: BenchmarkSpec, scheduler: str) -> list[str]:
    """A worker pod's, registering with the scheduler at the ZeroMQ address `scheduler` under
    its pod's name (POD_NAME in its environment)."""
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
