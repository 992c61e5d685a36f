"""The Benchmark resource's status as pydantic models, declared as fully as the spec: the API
server prunes status fields a schema does not declare."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dagperf_operator.spec import ResourceModel

Phase = Literal["Pending", "Running", "Succeeded", "Failed", "Suspended"]
CONDITION_TYPES = ("DatasetValid", "ResourcesCreated", "WorkersReady", "Completed", "SpecAccepted")


class Condition(ResourceModel):
    type: str = Field(description="One of " + ", ".join(CONDITION_TYPES) + ".")
    status: Literal["True", "False", "Unknown"] = Field(description="Whether it holds.")
    reason: str = Field(description="A CamelCase word.")
    message: str = Field(default="", description="What happened, for people.")
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")


class WorkersStatus(ResourceModel):
    desired: int = Field(description="Worker processes the scheduler waits for.")
    registered: int = Field(default=0, description="Worker processes registered.")


class Progress(ResourceModel):
    requests_completed: int = Field(default=0, description="Requests answered, failed or cut.")
    requests_total: int | None = Field(default=None, description="When known.")
    errors: int = Field(default=0, description="Requests the endpoint failed.")
    cut: int = Field(
        default=0,
        description="Requests the run cut short itself (its duration, a stop): not errors.",
    )
    display: str = Field(default="", description="Completed/total, for `kubectl get`.")


def _counter(description: str) -> Any:
    return Field(default=0, description=description)


class BranchStatsStatus(BaseModel):
    """The run's BranchStats, with AIPerf's field names."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    children_spawned: int = _counter("FORK and SPAWN children dispatched.")
    children_completed: int = _counter("Children that reached their last turn.")
    children_errored: int = _counter("Children that ended with an error.")
    children_truncated: int = _counter("Children cut short by a stop condition.")
    parents_suspended: int = _counter("Parents that paused at a join.")
    parents_resumed: int = _counter("Parents that went on once their children drained.")
    parents_failed_due_to_child_error: int = _counter("Parents ended by a child's error.")
    joins_suppressed: int = _counter("Joins released unfired: a stop condition held the child.")


def _ms(description: str) -> Any:
    return Field(default=None, description=description + ", in milliseconds.")


class Summary(ResourceModel):
    request_throughput: float | None = Field(default=None, description="Requests per second.")
    ttft_p50_ms: float | None = _ms("Time to first token, median")
    ttft_p99_ms: float | None = _ms("Time to first token, 99th percentile")
    itl_p50_ms: float | None = _ms("Inter-token latency, median")
    itl_p99_ms: float | None = _ms("Inter-token latency, 99th percentile")
    error_rate: float | None = Field(default=None, description="Failed share of requests, 0-1.")


class SearchStepStatus(ResourceModel):
    value: float = Field(description="The load tried.")
    meets_slo: bool = Field(description="Whether every objective held.")
    verdict: str | None = Field(
        default=None,
        description="meets, misses, or undecided (the step measured too little to say).",
    )


class SearchStatus(ResourceModel):
    parameter: str = Field(description="The load varied.")
    slo: list[str] = Field(description="The objectives.")
    best: float | None = Field(
        default=None, description="The highest load meeting them all; absent when none did."
    )
    steps: list[SearchStepStatus] = Field(default_factory=list, description="Each step, in order.")


class BenchmarkStatus(ResourceModel):
    phase: Phase | None = Field(
        default=None, description="Pending, Running, then Succeeded, Failed or Suspended."
    )
    message: str | None = Field(default=None, description="The latest news, for people.")
    conditions: list[Condition] = Field(
        default_factory=list, description="DatasetValid, ResourcesCreated, WorkersReady, ..."
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation this status describes."
    )
    start_time: str | None = Field(default=None, description="When the pods were launched.")
    completion_time: str | None = Field(default=None, description="When the run ended.")
    workers: WorkersStatus | None = Field(default=None, description="Worker registration.")
    progress: Progress | None = Field(default=None, description="Requests so far.")
    branch_stats: BranchStatsStatus | None = Field(
        default=None, description="FORK and SPAWN accounting, as AIPerf reports it."
    )
    summary: Summary | None = Field(
        default=None, description="Throughput, latency and errors, so far and then final."
    )
    results_path: str | None = Field(default=None, description="claim:path of the export files.")
    search: SearchStatus | None = Field(
        default=None, description="A search's answer (best) and its steps (spec.search)."
    )
