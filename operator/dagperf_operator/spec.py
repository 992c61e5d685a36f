"""The Benchmark resource as pydantic models: the one definition its CRD is generated from.

Field names are the resource's camelCase (through aliases); descriptions become the CRD's, so
`kubectl explain benchmark.spec.load` says what these docstrings say. The status model is
declared as fully as the spec: the API server prunes status fields a schema does not declare.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from dagperf.apis import APIS, described
from dagperf.dataset.formats import FORMATS
from dagperf.health.report import HealthOptions
from dagperf.search.objectives import parse_objectives, unmeasurable
from dagperf.search.plan import DEFAULT_MAX_STEP_S, search_load_problem
from dagperf.sources import SESSION_CONFIG
from dagperf.verdict import DEFAULT_MAX_ERROR_RATE
from dagperf.vocabulary.catalog import OBJECTIVE_IS_CEILING
from dagperf.vocabulary.config import MAX_SECONDS, LoadConfig, header_names

Phase = Literal["Pending", "Running", "Succeeded", "Failed", "Suspended"]
CONDITION_TYPES = ("DatasetValid", "ResourcesCreated", "WorkersReady", "Completed", "SpecAccepted")
M = TypeVar("M", bound=BaseModel)
Quantity = int | str  # a Kubernetes resource quantity: 2, "500m", "1Gi"
DATASET_TYPES = (*FORMATS, SESSION_CONFIG)  # every format the CLI reads, or a session config
if TYPE_CHECKING:
    DatasetType = str
    EndpointType = str
else:  # the CRD's enums, from the tables of formats and of APIs
    DatasetType = Literal[DATASET_TYPES]
    EndpointType = Literal[tuple(APIS)]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True
    )


class SecretKeyRef(_Model):
    name: str = Field(min_length=1, description="A Secret in the Benchmark's namespace.")
    key: str = Field(default="api-key", min_length=1, description="The key holding the API key.")


class Endpoint(_Model):
    url: str = Field(
        min_length=1, description="Base URL of the OpenAI-compatible server under test."
    )
    model: str | None = Field(
        default=None,
        description="Model for turns that name none (default: the first the server lists).",
    )
    type: EndpointType = Field(default="chat", description=f"The API to call: {described()}.")
    streaming: bool = Field(
        default=True, description="Stream responses; time to first token needs it."
    )
    api_key_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="The API key, given to worker pods only as an environment variable from "
        "this Secret; it never appears in a spec, log, status or export.",
    )
    extra_inputs: dict[str, Any] = Field(
        default_factory=dict, description="Fields added to every request body."
    )
    backend_headers: list[str] = Field(
        default_factory=list,
        description="Response headers naming the backend pod that served a request "
        "(--backend-header), for FORK-tree locality; default: the address that answered.",
    )

    @field_validator("backend_headers")
    @classmethod
    def _header_names(cls, names: list[str]) -> list[str]:
        return header_names(names)  # the CLI's own rule


_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


class ServerMetrics(_Model):
    """The backend pods whose Prometheus metrics are scraped during the run, each directly."""

    selector: dict[str, str] = Field(
        min_length=1, description="Labels the backend pods carry (all must match)."
    )
    port: int = Field(ge=1, le=65535, description="Their metrics port.")
    path: str = Field(default="/metrics", pattern="^/", description="Their metrics path.")
    interval_seconds: float = Field(
        default=1.0, ge=0.05, le=3600, description="Between scrapes (--server-metrics-interval)."
    )

    @field_validator("selector")
    @classmethod
    def _labels(cls, selector: dict[str, str]) -> dict[str, str]:
        for key, value in selector.items():
            name = key.rsplit("/", 1)[-1]
            if not (_LABEL.fullmatch(name) and len(name) <= 63 and _VALUE.fullmatch(value)):
                raise ValueError(f"not a label selector term: {key}={value}")
        return selector


class ConfigMapRef(_Model):
    name: str = Field(min_length=1, description="A ConfigMap in the Benchmark's namespace.")
    key: str | None = Field(
        default=None,
        description="The key holding the dataset, in data or (gzip-compressed) binaryData; "
        "default: the ConfigMap's only key.",
    )


class FileRef(_Model):
    name: str = Field(min_length=1, description="A ConfigMap in the Benchmark's namespace.")
    key: str = Field(min_length=1, description="The key holding the file, in data or binaryData.")


class UrlRef(_Model):
    url: str = Field(pattern=r"^https?://", description="An http(s) URL of the dataset file.")
    sha256: str = Field(
        pattern=r"^[0-9a-fA-F]{64}$",
        description="The SHA-256 the file must have; checked before it is read, by the "
        "operator's preflight and by the scheduler pod's init container that fetches it.",
    )
    size_limit: str | None = Field(
        default=None,
        pattern=r"^[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE])?$",
        description="The sizeLimit of the emptyDir the file is fetched into, a quantity such as "
        "20Gi: a pod that writes more is evicted. Default: none, bounded only by the node's "
        "ephemeral storage.",
    )


class ClaimFileRef(_Model):
    claim_name: str = Field(min_length=1, description="A claim in the Benchmark's namespace.")
    path: str = Field(
        min_length=1, description="The file's path inside the claim (relative, no '..')."
    )

    @field_validator("path")
    @classmethod
    def _inside(cls, path: str) -> str:
        if path.startswith("/") or ".." in path.split("/"):
            raise ValueError("a path inside the claim: relative, without '..'")
        return path


class Dataset(_Model):
    config_map_ref: ConfigMapRef | None = Field(
        default=None, description="A ConfigMap holding the dataset file (up to 1 MiB)."
    )
    url: UrlRef | None = Field(
        default=None,
        description="An http(s) URL of the dataset file, with its sha256: an init container of "
        "the scheduler's pod fetches it into an emptyDir (a file too large for a ConfigMap).",
    )
    persistent_volume_claim: ClaimFileRef | None = Field(
        default=None,
        description="A file on a claim, which the scheduler mounts read-only (a file too large "
        "for a ConfigMap); the scheduler checks it when it starts.",
    )
    type: DatasetType = Field(
        default="dag_jsonl",
        description="The file's format (--custom-dataset-type), or session_config: the file is "
        "a synthetic session config (--session-config) that generates the sessions.",
    )
    tokenizer: FileRef | None = Field(
        default=None,
        description="A tokenizer.json, for token counts the server does not report "
        "(--tokenizer); checked before anything starts, then sent to every worker.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> Dataset:
        given = [self.config_map_ref, self.url, self.persistent_volume_claim]
        if sum(source is not None for source in given) != 1:
            raise ValueError("give one of configMapRef, url or persistentVolumeClaim")
        return self


# A load option's name in a Benchmark, where it is not the flag's (kept from before the fields
# were generated, so Benchmarks written then still apply).
LOAD_NAMES = {"benchmark_duration": "duration_seconds"}


def _generated(model: type[BaseModel], names: dict[str, str] | None = None) -> type[_Model]:
    """A spec section with every field of one of the CLI's models, with its type, default,
    bounds and description, so an option added to the CLI is a Benchmark field too (and a pod
    flag: see pod_commands.model_flags)."""
    fields: dict[str, Any] = {
        (names or {}).get(flag, flag): (info.annotation, copy.copy(info))
        for flag, info in model.model_fields.items()
    }
    return create_model(model.__name__, __base__=_Model, __doc__=model.__doc__, **fields)


if TYPE_CHECKING:
    Load = _Model
    Health = _Model
else:
    Load = _generated(LoadConfig, LOAD_NAMES)
    Health = _generated(HealthOptions)


def health_options(health: Health) -> HealthOptions:
    return _as_cli(health, HealthOptions)


class Verdict(_Model):
    """When the run counts as failed, and which requests count as good."""

    max_error_rate: float = Field(
        default=DEFAULT_MAX_ERROR_RATE,
        ge=0,
        le=1,
        description="Fail the run when the endpoint failed more than this share of the requests "
        "it answered or failed (--max-error-rate; requests the run cut short are not errors); it "
        "fails anyway when every request did.",
    )
    goodput: dict[str, float] = Field(
        default_factory=dict,
        description="Objectives a good request meets, metric: value in ms (a floor for "
        "output_token_throughput_per_user), as --goodput takes them.",
    )

    @model_validator(mode="after")
    def _known_metrics(self) -> Verdict:
        unknown = sorted(set(self.goodput) - set(OBJECTIVE_IS_CEILING))
        if unknown:
            known = ", ".join(OBJECTIVE_IS_CEILING)
            raise ValueError(
                f"goodput: {', '.join(unknown)} is not a metric an objective can name ({known})"
            )
        return self


class Search(_Model):
    """Run `dagperf search` instead of one run: the highest load meeting every objective."""

    slo: list[str] = Field(
        min_length=1,
        description="Objectives, each METRIC:STAT:VALUE as --slo takes them, e.g. "
        "time_to_first_token:p99:500 (ms for times) or error_rate:max:0.01.",
    )
    parameter: Literal["concurrency", "session_rate", "request_rate"] = Field(
        default="concurrency", description="The load varied (--search-parameter)."
    )
    min: float = Field(default=1.0, gt=0, description="The lowest load, tried first.")
    max: float = Field(default=256.0, gt=0, description="The highest load tried.")
    precision: float | None = Field(
        default=None,
        gt=0,
        description="Stop within this of the answer: a share for a rate (default 0.05), a step "
        "for a concurrency (default 1).",
    )
    sweep: list[float] | None = Field(
        default=None, min_length=1, description="Exactly these loads, in order, instead."
    )
    max_step_duration: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="The longest a step measures, in seconds (--max-step-duration, default "
        "600): each runs until every objective is met or missed, or says undecided.",
    )
    confidence: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="Of a percentile objective's verdict (--confidence-level, default 0.95).",
    )

    @model_validator(mode="after")
    def _as_the_cli_takes_it(self) -> Search:
        try:
            parse_objectives(" ".join(self.slo))
        except ValueError as e:
            raise ValueError(f"slo: {e}") from None
        if self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        whole = self.parameter != "concurrency" or all(v == int(v) for v in self.sweep or ())
        if not whole or any(v <= 0 for v in self.sweep or ()):
            raise ValueError("sweep: loads above 0 (whole numbers for a concurrency)")
        return self

    def flags(self) -> list[str]:
        """The `dagperf search` flags that ask for this search."""
        out = ["--slo", " ".join(self.slo), "--search-parameter", self.parameter]
        out += ["--search-min", f"{self.min:g}", "--search-max", f"{self.max:g}"]
        if self.precision is not None:
            out += ["--search-precision", f"{self.precision:g}"]
        if self.sweep:
            out += ["--sweep", ",".join(f"{v:g}" for v in self.sweep)]
        if self.max_step_duration is not None:
            out += ["--max-step-duration", f"{self.max_step_duration:g}"]
        if self.confidence is not None:
            out += ["--confidence-level", f"{self.confidence:g}"]
        return out


class Toleration(_Model):
    """A taint the pods tolerate, as in a pod spec."""

    key: str | None = Field(default=None, description="The taint's key; none: every key.")
    operator: Literal["Equal", "Exists"] = Field(default="Equal", description="How to match.")
    value: str | None = Field(default=None, description="The value, for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The effect to tolerate; none: every effect."
    )
    toleration_seconds: int | None = Field(
        default=None, ge=0, description="For NoExecute: how long the pods stay once tainted."
    )


class Placement(_Model):
    """Where a role's pods may run, as a pod spec says it."""

    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the pods require."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Taints the pods tolerate."
    )


def load_config(load: Load) -> LoadConfig:
    """A Benchmark's load as the dagperf command line will read it."""
    return _as_cli(load, LoadConfig, LOAD_NAMES)


def _as_cli(section: _Model, model: type[M], names: dict[str, str] | None = None) -> M:
    """A section `_generated` from one of the CLI's models, as that model."""
    return model(**{f: getattr(section, (names or {}).get(f, f)) for f in model.model_fields})


class Resources(_Model):
    requests: dict[str, Quantity] = Field(
        default_factory=dict, description="Resource requests, e.g. {cpu: 500m, memory: 512Mi}."
    )
    limits: dict[str, Quantity] = Field(default_factory=dict, description="Resource limits.")


class Workers(_Model):
    replicas: int = Field(default=1, ge=1, description="Worker pods.")
    placement: Placement = Field(default_factory=Placement, description="Where they run.")
    processes_per_pod: int = Field(default=1, ge=1, description="Worker processes in each pod.")
    resources: Resources | None = Field(
        default=None, description="Per pod (default: the operator's)."
    )


class Scheduler(_Model):
    resources: Resources | None = Field(default=None, description="Default: the operator's.")
    placement: Placement = Field(default_factory=Placement, description="Where it runs.")


class PersistentVolumeClaim(_Model):
    claim_name: str | None = Field(default=None, description="An existing claim to write to.")
    storage_class_name: str | None = Field(
        default=None, description="For a claim created for this Benchmark."
    )
    size: str | None = Field(default=None, description="Size of a claim to create, e.g. 1Gi.")

    @model_validator(mode="after")
    def _one_source(self) -> PersistentVolumeClaim:
        if (self.claim_name is None) == (self.size is None):
            raise ValueError("give either claimName (an existing claim) or size (a new one)")
        return self


class Results(_Model):
    persistent_volume_claim: PersistentVolumeClaim | None = Field(
        default=None,
        description="Where the export files go (default: nowhere persistent; the summary "
        "still reaches the status).",
    )
    report: bool = Field(
        default=True,
        description="Write report.html (dagperf report: the DAG timeline, distributions, "
        "health) beside the export files at the end of the run; a search compares its steps. "
        "Only where the files are kept, on a claim.",
    )


class BenchmarkSpec(_Model):
    endpoint: Endpoint = Field(description="The server under test.")
    dataset: Dataset = Field(description="The conversations to send.")
    load: Load = Field(default_factory=Load, description="Load shape and stop conditions.")
    verdict: Verdict = Field(default_factory=Verdict, description="What counts as failure.")
    health: Health = Field(
        default_factory=Health, description="Tolerances of the health checks after the run."
    )
    workers: Workers = Field(default_factory=Workers, description="The worker pods.")
    scheduler: Scheduler = Field(default_factory=Scheduler, description="The scheduler pod.")
    results: Results = Field(default_factory=Results, description="Where results are kept.")
    image: str | None = Field(default=None, description="dagperf image (default: the operator's).")
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, description="Delete the Benchmark this long after it finished."
    )
    suspend: bool = Field(
        default=False,
        description="True stops a running benchmark gracefully, keeping partial results.",
    )
    server_metrics: ServerMetrics | None = Field(
        default=None,
        description="Scrape the backend pods' own metrics during the run (--server-metrics-url "
        "for each pod running when the Benchmark starts).",
    )
    search: Search | None = Field(
        default=None,
        description="Search for the highest load meeting objectives (dagperf search): one Job "
        "runs a full run per load, with workers.processesPerPod worker processes in its pod; "
        "no worker pods. The answer and each step go to status.search.",
    )

    @model_validator(mode="after")
    def _load_as_the_cli_takes_it(self) -> BenchmarkSpec:
        """Rules across load fields (e.g. a rate and a fixed schedule at once) are the CLI's."""
        try:
            load = load_config(self.load)
        except ValidationError as e:
            raise ValueError("load: " + e.errors(include_url=False)[0]["msg"]) from None
        if self.search is not None:
            max_step_s = self.search.max_step_duration or DEFAULT_MAX_STEP_S
            if refused := search_load_problem(self.search.parameter, load, max_step_s):
                field, why = refused
                raise ValueError(f"load.{to_camel(LOAD_NAMES.get(field, field))}: {why}")
            slo = parse_objectives(" ".join(self.search.slo))
            if problem := unmeasurable(slo, self.endpoint.streaming):
                raise ValueError(f"search.slo: {problem} (endpoint.streaming)")
        return self


# --- status ----------------------------------------------------------------------------------


class Condition(_Model):
    type: str = Field(description="One of " + ", ".join(CONDITION_TYPES) + ".")
    status: Literal["True", "False", "Unknown"] = Field(description="Whether it holds.")
    reason: str = Field(description="A CamelCase word.")
    message: str = Field(default="", description="What happened, for people.")
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")


class WorkersStatus(_Model):
    desired: int = Field(description="Worker processes the scheduler waits for.")
    registered: int = Field(default=0, description="Worker processes registered.")


class Progress(_Model):
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


class Summary(_Model):
    request_throughput: float | None = Field(default=None, description="Requests per second.")
    ttft_p50_ms: float | None = _ms("Time to first token, median")
    ttft_p99_ms: float | None = _ms("Time to first token, 99th percentile")
    itl_p50_ms: float | None = _ms("Inter-token latency, median")
    itl_p99_ms: float | None = _ms("Inter-token latency, 99th percentile")
    error_rate: float | None = Field(default=None, description="Failed share of requests, 0-1.")


class SearchStepStatus(_Model):
    value: float = Field(description="The load tried.")
    meets_slo: bool = Field(description="Whether every objective held.")
    verdict: str | None = Field(
        default=None,
        description="meets, misses, or undecided (the step measured too little to say).",
    )


class SearchStatus(_Model):
    parameter: str = Field(description="The load varied.")
    slo: list[str] = Field(description="The objectives.")
    best: float | None = Field(
        default=None, description="The highest load meeting them all; absent when none did."
    )
    steps: list[SearchStepStatus] = Field(default_factory=list, description="Each step, in order.")


class BenchmarkStatus(_Model):
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
