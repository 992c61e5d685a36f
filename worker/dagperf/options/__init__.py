"""A run's options, one flat model per concern, each field declared once
(`dagperf.vocabulary.options` says how a field surfaces as a flag and a Benchmark field).

- the endpoint: `dagperf.apis.endpoint_config.EndpointOptions`;
- the dataset: `dataset.DatasetOptions`;
- the load: `dagperf.vocabulary.config.LoadConfig`;
- the health checks' tolerances: `dagperf.health.report.HealthOptions`;
- the verdict, and repeated runs with time slices: `verdict`;
- a search for the highest load meeting objectives: `search.SearchOptions`;
- the servers' own metrics, the output, the live metrics and logs: `output`.

The CLI makes its flags from these models, the operator its Benchmark sections and its pods'
command lines, and docs/cli.md and docs/kubernetes.md's table are generated from them. A new
option is one field of the model of its concern.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from dagperf.apis.endpoint_config import EndpointOptions
from dagperf.health.report import HealthOptions
from dagperf.options.dataset import DatasetOptions
from dagperf.options.output import LogOptions, OutputOptions, ServerMetricsOptions
from dagperf.options.search import SearchOptions
from dagperf.options.verdict import RunsOptions, VerdictOptions
from dagperf.vocabulary.config import LoadConfig


@dataclass(frozen=True)
class Concern:
    """One options model: its flags' group, and the Benchmark section holding its fields."""

    model: type[BaseModel]
    title: str
    section: str | None  # the spec's field, snake_case; None: every option is local-only
    prefix: str = ""  # its flags' (`--health-arrival-slack-ms`)


CONCERNS = {
    "dataset": Concern(
        DatasetOptions, "dataset (a file, or a synthetic session config)", "dataset"
    ),
    "endpoint": Concern(EndpointOptions, "endpoint", "endpoint"),
    "load": Concern(LoadConfig, "load", "load"),
    "health": Concern(HealthOptions, "health checks (after the run)", "health", "health-"),
    "verdict": Concern(VerdictOptions, "verdict", "verdict"),
    "runs": Concern(RunsOptions, "repeats and time slices", "runs"),
    "server_metrics": Concern(ServerMetricsOptions, "servers' metrics", "server_metrics"),
    "output": Concern(OutputOptions, "output", "results"),
    "log": Concern(LogOptions, "logs", None),
}
SEARCH = Concern(SearchOptions, "search", "search")  # `dagperf search`'s alone

# The flags of `profile` and `search` that are no options model's, each a local-only option, by
# its destination (a prefix: a model's flags), with why a Benchmark has no field for it.
LOCAL_FLAGS = {
    "workers": "spec.workers: its replicas, each running processesPerPod worker processes",
    "keys": "the operator makes each Benchmark's key set and mounts it in its pods",
    "sim_": "the built-in simulator runs only beside `dagperf profile`",
}

__all__ = [
    "CONCERNS",
    "LOCAL_FLAGS",
    "SEARCH",
    "Concern",
    "DatasetOptions",
    "EndpointOptions",
    "HealthOptions",
    "LoadConfig",
    "LogOptions",
    "OutputOptions",
    "RunsOptions",
    "SearchOptions",
    "ServerMetricsOptions",
    "VerdictOptions",
]
