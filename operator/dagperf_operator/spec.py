"""The Benchmark resource as pydantic models: the one definition its CRD is generated from.

Field names are the resource's camelCase (through aliases); descriptions become the CRD's, so
`kubectl explain benchmark.spec.load` says what these docstrings say. The sections that hold a
run's options are generated from the run's options models (`dagperf.options`), so a Benchmark
says what the CLI says; the status is `status_model.py`'s.
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
from dagperf.options import (
    CONCERNS,
    SEARCH,
    LoadConfig,
    RunsOptions,
    SearchOptions,
)
from dagperf.search.objectives import parse_objectives, unmeasurable
from dagperf.search.plan import search_load_problem
from dagperf.sources import SESSION_CONFIG
from dagperf.vocabulary.options import option, options

M = TypeVar("M", bound=BaseModel)
Quantity = int | str  # a Kubernetes resource quantity: 2, "500m", "1Gi"
DATASET_TYPES = (*FORMATS, SESSION_CONFIG)  # every format the CLI reads, or a session config
if TYPE_CHECKING:
    DatasetType = str
    EndpointType = str
else:  # the CRD's enums, from the tables of formats and of APIs
    DatasetType = Literal[DATASET_TYPES]
    EndpointType = Literal[tuple(APIS)]


class ResourceModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True
    )


class SecretKeyRef(ResourceModel):
    name: str = Field(min_length=1, description="A Secret in the Benchmark's namespace.")
    key: str = Field(default="api-key", min_length=1, description="The key holding the API key.")


_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


class _BackendPods(ResourceModel):
    """The backend pods whose Prometheus metrics are scraped during the run, each directly."""

    selector: dict[str, str] = Field(
        min_length=1, description="Labels the backend pods carry (all must match)."
    )
    port: int = Field(ge=1, le=65535, description="Their metrics port.")
    path: str = Field(default="/metrics", pattern="^/", description="Their metrics path.")

    @field_validator("selector")
    @classmethod
    def _labels(cls, selector: dict[str, str]) -> dict[str, str]:
        for key, value in selector.items():
            name = key.rsplit("/", 1)[-1]
            if not (_LABEL.fullmatch(name) and len(name) <= 63 and _VALUE.fullmatch(value)):
                raise ValueError(f"not a label selector term: {key}={value}")
        return selector


class ConfigMapRef(ResourceModel):
    name: str = Field(min_length=1, description="A ConfigMap in the Benchmark's namespace.")
    key: str | None = Field(
        default=None,
        description="The key holding the dataset, in data or (gzip-compressed) binaryData; "
        "default: the ConfigMap's only key.",
    )


class FileRef(ResourceModel):
    name: str = Field(min_length=1, description="A ConfigMap in the Benchmark's namespace.")
    key: str = Field(min_length=1, description="The key holding the file, in data or binaryData.")


class UrlRef(ResourceModel):
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


class ClaimFileRef(ResourceModel):
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


class _DatasetSource(ResourceModel):
    """Where the dataset file is: one of a ConfigMap, a URL or a claim."""

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
    tokenizer: FileRef | None = Field(
        default=None,
        description="A tokenizer.json, for token counts the server does not report "
        "(--tokenizer); checked before anything starts, then sent to every worker.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> _DatasetSource:
        given = [self.config_map_ref, self.url, self.persistent_volume_claim]
        if sum(source is not None for source in given) != 1:
            raise ValueError("give one of configMapRef, url or persistentVolumeClaim")
        return self


def _generated(
    model: type[BaseModel],
    base: type[ResourceModel] | None = None,
    **overrides: Any,
) -> type[ResourceModel]:
    """A spec section with every option of one of the run's options models that a Benchmark
    can say (not `local`), under its Benchmark name, with its type, default, bounds and
    description; `base`: the section's own fields besides, `overrides`: fields it declares
    its own way. So an option added to a model is a Benchmark field too, and a pod flag
    (`pod_commands`)."""
    fields: dict[str, Any] = {}
    for name, info, opt in options(model):
        if opt.local:
            continue
        field = copy.copy(info)
        if opt.benchmark_default is not None:
            field.default = opt.benchmark_default
        fields[opt.benchmark or name] = (info.annotation, field)
    fields |= overrides
    doc = model.__doc__
    return create_model(model.__name__, __base__=base or ResourceModel, __doc__=doc, **fields)


def as_options(section: ResourceModel, model: type[M]) -> M:
    """A section `_generated` from one of the run's options models, as that model."""
    return model(
        **{
            name: getattr(section, opt.benchmark or name)
            for name, _, opt in options(model)
            if not opt.local
        }
    )


class Toleration(ResourceModel):
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


class Placement(ResourceModel):
    """Where a role's pods may run, as a pod spec says it."""

    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the pods require."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Taints the pods tolerate."
    )


class Resources(ResourceModel):
    requests: dict[str, Quantity] = Field(
        default_factory=dict, description="Resource requests, e.g. {cpu: 500m, memory: 512Mi}."
    )
    limits: dict[str, Quantity] = Field(default_factory=dict, description="Resource limits.")


class Workers(ResourceModel):
    replicas: int = Field(default=1, ge=1, description="Worker pods.")
    placement: Placement = Field(default_factory=Placement, description="Where they run.")
    processes_per_pod: int = Field(default=1, ge=1, description="Worker processes in each pod.")
    resources: Resources | None = Field(
        default=None, description="Per pod (default: the operator's)."
    )


class Scheduler(ResourceModel):
    resources: Resources | None = Field(default=None, description="Default: the operator's.")
    placement: Placement = Field(default_factory=Placement, description="Where it runs.")


class PersistentVolumeClaim(ResourceModel):
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


class _ResultsClaim(ResourceModel):
    persistent_volume_claim: PersistentVolumeClaim | None = Field(
        default=None,
        description="Where the export files go (default: nowhere persistent; the summary "
        "still reaches the status).",
    )


if TYPE_CHECKING:  # the generated fields, as mypy sees them: of any type

    class _Generated(ResourceModel):
        def __getattr__(self, name: str) -> Any: ...

    class Dataset(_DatasetSource, _Generated): ...

    class ServerMetrics(_BackendPods, _Generated): ...

    class Results(_ResultsClaim, _Generated): ...

    class Endpoint(_Generated): ...

    class Load(_Generated): ...

    class Health(_Generated): ...

    class Verdict(_Generated): ...

    class Runs(_Generated): ...

    class Search(_Generated): ...
else:
    Endpoint = _generated(
        CONCERNS["endpoint"].model,
        url=(str, Field(min_length=1, description="The server's base URL.")),
        type=(EndpointType, Field(default="chat", description=f"The API to call: {described()}.")),
        api_key_secret_ref=(
            SecretKeyRef | None,
            Field(
                default=None,
                description="The API key, given to worker pods only as an environment variable "
                "from this Secret; it never appears in a spec, log, status or export.",
            ),
        ),
    )
    Dataset = _generated(
        CONCERNS["dataset"].model,
        _DatasetSource,
        type=(
            DatasetType,
            Field(
                default="dag_jsonl",
                description="The file's format (--custom-dataset-type), or session_config: the "
                "file is a synthetic session config (--session-config) that generates the "
                "sessions.",
            ),
        ),
    )
    Load = _generated(CONCERNS["load"].model)
    Health = _generated(CONCERNS["health"].model)
    Verdict = _generated(CONCERNS["verdict"].model)
    Runs = _generated(CONCERNS["runs"].model)
    Search = _generated(SEARCH.model)
    ServerMetrics = _generated(CONCERNS["server_metrics"].model, _BackendPods)
    Results = _generated(CONCERNS["output"].model, _ResultsClaim)

# The run's options a Benchmark's sections hold, by the spec's field: checked as the CLI checks
# them, and given to the scheduler as the CLI's flags.
SECTIONS = {c.section: c.model for c in (*CONCERNS.values(), SEARCH) if c.section is not None}


class BenchmarkSpec(ResourceModel):
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

    runs: Runs = Field(
        default_factory=Runs,
        description="Repeated runs and windows of each: more than one run is one Job running "
        "them all (dagperf profile), with workers.processesPerPod worker processes in its pod; "
        "no worker pods.",
    )

    @property
    def local_workers(self) -> bool:
        """One pod runs it all, its workers local processes: a search, or repeated runs."""
        return self.search is not None or as_options(self.runs, RunsOptions).num_profile_runs > 1

    def options(self, section: str) -> BaseModel | None:
        """A section as the run's options model it was generated from (None: not given)."""
        given = getattr(self, section)
        if given is None:
            return None
        if section == "dataset" and given.type == SESSION_CONFIG:  # no format: a config file
            given = given.model_copy(update={"type": "dag_jsonl"})
        if section == "results" and given.persistent_volume_claim is None:
            given = given.model_copy(update={"report": False})  # nowhere a reader could open it
        model = SECTIONS[section]
        try:
            return as_options(given, model)
        except ValidationError as e:
            first = e.errors(include_url=False)[0]
            message = first["msg"].removeprefix("Value error, ")
            if not first["loc"]:
                raise ValueError(f"{to_camel(section)}: {message}") from None
            path = _field_path(section, model, str(first["loc"][0]))
            raise ValueError(f"{path}: {message}") from None

    @model_validator(mode="after")
    def _as_the_cli_takes_it(self) -> BenchmarkSpec:
        """Every option holds to the CLI's rules: bounds, and rules across fields (a rate and a
        fixed schedule at once, say), with the Benchmark's names for the fields at fault."""
        for section in SECTIONS:
            self.options(section)
        if self.search is not None:
            load, search = as_options(self.load, LoadConfig), as_options(self.search, SearchOptions)
            refused = search_load_problem(search.search_parameter, load, search.max_step_duration)
            if refused:
                field, why = refused
                raise ValueError(f"{_field_path('load', LoadConfig, field)}: {why}")
            if self.runs.num_profile_runs != 1:
                raise ValueError("runs.numProfileRuns: a search runs each load once")
            if problem := unmeasurable(
                parse_objectives(" ".join(search.slo)), self.endpoint.streaming
            ):
                raise ValueError(f"search.slo: {problem} (endpoint.streaming)")
        return self


def _field_path(section: str, model: type[BaseModel], field: str) -> str:
    opt = option(model.model_fields[field]) if field in model.model_fields else None
    return f"{to_camel(section)}.{to_camel((opt and opt.benchmark) or field)}"
