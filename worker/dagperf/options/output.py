"""What a run writes and serves besides its requests: the servers' own metrics it scrapes, its
export files and report, its live metrics, and its logs. Most of it a Benchmark's operator
decides for the pod (ports, paths, log format), which each field's `local` says."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from dagperf.vocabulary.config import MAX_SECONDS
from dagperf.vocabulary.options import Option

_PORTS = "listening ports are the operator's settings (the chart's values)"


def _scrape_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {url!r}")
    return url


class ServerMetricsOptions(BaseModel):
    """The servers' own Prometheus metrics, scraped during the run (docs/backends.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    server_metrics_url: Annotated[
        list[str],
        Option(
            metavar="URL",
            parse=_scrape_url,
            local="serverMetrics.selector picks the backend pods, each scraped at its pod IP",
        ),
    ] = Field(
        default_factory=list,
        description="A Prometheus text endpoint of a server (a vLLM or SGLang pod, a DCGM "
        "exporter) to scrape during the run into server_metrics.jsonl (repeatable).",
    )
    server_metrics_interval: Annotated[float, Option(benchmark="interval_seconds", metavar="S")] = (
        Field(default=1.0, ge=0.05, le=3600, description="Seconds between scrapes.")
    )


class OutputOptions(BaseModel):
    """Where the export files go, what is printed, and the live metrics served."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    artifact_dir: Annotated[
        Path | None,
        Option(
            metavar="DIR",
            aliases=("--output-artifact-dir",),
            local="results.persistentVolumeClaim: a directory named for the Benchmark on it",
        ),
    ] = Field(
        default=None,
        description="Where the export files go (default: artifacts/<dataset>-<type>-<load>).",
    )
    quiet: Annotated[bool, Option(local="console output: pods log JSON lines instead")] = Field(
        default=False, description="No progress, only the summary."
    )
    report: Annotated[bool, Option(benchmark_default=True)] = Field(
        default=False,
        description="Write report.html (see `dagperf report`) into the artifact directory at the "
        "end (a Benchmark does, unless it says false, where its files are kept on a claim).",
    )
    summary_file: Annotated[
        Path | None, Option(metavar="PATH", local="the operator makes it the termination log")
    ] = Field(
        default=None,
        description="Also write a compact JSON summary (under 4 KB) here, e.g. a termination "
        "message.",
    )
    benchmark_name: Annotated[str | None, Option(metavar="NAME", local="the Benchmark's name")] = (
        Field(
            default=None,
            description="The `benchmark` label of the live metrics (default: the artifact "
            "directory's name).",
        )
    )
    metrics_port: Annotated[int | None, Option(metavar="PORT", local=_PORTS)] = Field(
        default=None,
        ge=0,
        le=65535,
        description="Serve /metrics (Prometheus), /status and /healthz on this port (0 picks a "
        "free one; none: off).",
    )
    metrics_host: Annotated[str, Option(metavar="HOST", local=_PORTS)] = Field(
        default="0.0.0.0", description="The address --metrics-port listens on."
    )
    metrics_linger: Annotated[
        float, Option(metavar="S", local="the operator's setting: its scrape interval's")
    ] = Field(
        default=0.0,
        ge=0,
        le=MAX_SECONDS,
        description="Keep serving /metrics this long after the run, for a last scrape.",
    )


class LogOptions(BaseModel):
    """The log lines every role writes on stderr."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    log_format: Annotated[
        Literal["text", "json"], Option(local="pods log JSON lines, which the operator asks for")
    ] = Field(default="text", description="Text, or JSON lines for CI and pods.")
    log_level: Annotated[
        Literal["DEBUG", "INFO", "WARNING", "ERROR"],
        Option(parse=str.upper, local="the operator's pods log at INFO"),
    ] = Field(default="INFO", description="The least severe log lines shown, on stderr.")
