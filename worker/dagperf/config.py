"""What a run is asked to do: the endpoint to load and the load to put on it.

One definition for every way in: the `dagperf profile` and `dagperf scheduler` flags fill these
models, the operator will fill them from a Benchmark spec, and the exports record them (with the
API key redacted). Field names follow `aiperf profile`'s flags, which users already know.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

ENDPOINT_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",  # OpenAI's Responses API
    "messages": "/v1/messages",  # Anthropic's Messages API
}
# The request headers that routers people run read as a session key (docs/backends.md has the
# table): vLLM Router's consistent_hash (X-Session-ID, before the unique X-Request-ID it would
# otherwise hash), SGLang Model Gateway's consistent_hash (X-SMG-Routing-Key), NVIDIA Dynamo's
# session affinity (X-Dynamo-Session-ID), and dagperf's own name, which its simulator reads.
AFFINITY_HEADERS = (
    "X-Session-ID",
    "X-SMG-Routing-Key",
    "X-Dynamo-Session-ID",
    "X-Session-Affinity",
)
MESSAGES_MAX_TOKENS = 4096  # the Messages API needs a limit: a turn that sets none gets this
MAX_RATE = 1e6  # roots per second: past any endpoint, and a rate the clock can still space
MAX_SECONDS = 30 * 86_400.0  # durations and timeouts: a month; inf or 1e308 would hang a timer


def root_limit(
    concurrency: int | None, request_rate: float | None, fixed_schedule: bool | None
) -> int | None:
    """How many roots run at once: the concurrency given; without one, a root at a time,
    unless roots arrive by a rate or on a schedule (then each starts when it arrives: None).
    The engine runs this rule; the health checks and the exports read it off a recorded load."""
    if concurrency:
        return concurrency
    return None if request_rate or fixed_schedule else 1


class LoadConfig(BaseModel):
    """How requests are issued and when the run stops."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Root conversations in flight at once; children run in their root's slot, "
        "which frees when the root's last turn returns.",
    )
    concurrency_ramp_up: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Seconds to grow --concurrency from 1 root to all of them, evenly, from the "
        "start of each phase (Veeksha's rampup_seconds).",
    )
    request_rate: float | None = Field(
        default=None,
        gt=0,
        le=MAX_RATE,
        allow_inf_nan=False,
        description="Root sessions started per second, with Poisson arrivals (also "
        "--session-rate: the rate counts sessions, which for single-request sessions are "
        "requests).",
    )
    arrival_cv: float | None = Field(
        default=None,
        gt=0,
        le=100,
        allow_inf_nan=False,
        description="With --request-rate: the coefficient of variation of the gaps between "
        "roots, drawn from a gamma distribution (Veeksha's gamma intervals): 1 is Poisson, "
        "below 1 steadier, above 1 burstier. Default: Poisson.",
    )
    fixed_schedule: bool | None = Field(
        default=None,
        description="Start each root at its own timestamp (a trace's), relative to the first, "
        "with no concurrency limit unless one is given. Default: on for a dataset with "
        "timestamps when neither --concurrency nor --request-rate is given.",
    )
    request_count: int | None = Field(
        default=None, ge=1, description="Stop after sending this many requests, children included."
    )
    num_conversations: int | None = Field(
        default=None,
        ge=1,
        description="Root conversations to run; their children always run to the end. Defaults "
        "to each root once when no other stop condition is given.",
    )
    benchmark_duration: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Stop sending after this many seconds.",
    )
    benchmark_grace_period: float = Field(
        default=30.0,
        ge=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Seconds to wait for requests in flight after the duration ends; then they "
        "are cancelled.",
    )
    warmup_request_count: int = Field(
        default=0,
        ge=0,
        description="Requests sent, and waited for, before measuring; not in the exports.",
    )
    max_inflight: int | None = Field(
        default=None, ge=1, description="Hard cap on requests in flight, children included."
    )
    fail_fast: bool = Field(
        default=False,
        description="Cancel all pending and in-flight work on the first child error.",
    )
    cancel_session_on_failure: bool | None = Field(
        default=None,
        description="When a request fails, send nothing more of its session (a root with its "
        "FORK and SPAWN children): what waits is dropped, what is in flight finishes, and the "
        "session is exported as cancelled (Veeksha's cancel_session_on_failure). Default: off, "
        "or what a Veeksha --session-config says (Veeksha's default: on).",
    )
    random_seed: int | None = Field(
        default=None, description="Seed for request arrival times and random_pool draws."
    )

    @property
    def root_limit(self) -> int | None:
        """How many roots run at once (see `root_limit`)."""
        return root_limit(self.concurrency, self.request_rate, self.fixed_schedule)

    @model_validator(mode="after")
    def _one_arrival_process(self) -> LoadConfig:
        if self.fixed_schedule and self.request_rate:
            raise ValueError("--fixed-schedule and --request-rate both set when roots arrive")
        if self.concurrency_ramp_up is not None and not self.concurrency:
            raise ValueError("--concurrency-ramp-up grows --concurrency; give a concurrency too")
        if self.arrival_cv is not None and not self.request_rate:
            raise ValueError("--arrival-cv shapes the gaps of --request-rate; give a rate too")
        return self


class EndpointConfig(BaseModel):
    """The server under test and the shape of the requests sent to it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="Server base URL; a missing scheme means http://.")
    endpoint_type: Literal["chat", "completions", "responses", "messages"] = Field(
        default="chat",
        description="The API to call: OpenAI chat or completions, OpenAI Responses, or "
        "Anthropic Messages.",
    )
    endpoint: str | None = Field(
        default=None, description="Request path, when not the standard one for the type."
    )
    model: str = Field(min_length=1, description="Model name for turns that do not set one.")
    streaming: bool = Field(default=False, description="Stream responses (server-sent events).")
    api_key: SecretStr | None = Field(default=None, description="Bearer token for the server.")
    extra_inputs: dict[str, Any] = Field(
        default_factory=dict,
        description="Fields added to every request body; a turn's own `extra` wins.",
    )
    request_timeout_seconds: float = Field(
        default=600.0,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Per-request timeout, from send to the last byte.",
    )
    session_affinity_headers: list[str] = Field(
        default_factory=lambda: list(AFFINITY_HEADERS),
        description="Headers carrying each request's routing key (a FORK tree's root key), so "
        "session-affine and KV-aware routers keep a tree on one backend; empty to send none.",
    )
    backend_headers: list[str] = Field(
        default_factory=list,
        description="Response headers that name the backend (pod) that served a request, "
        "tried in order; without one, the address that answered names it.",
    )

    @field_validator("backend_headers", "session_affinity_headers")
    @classmethod
    def _header_names(cls, names: list[str]) -> list[str]:
        return header_names(names)

    @field_validator("api_key", mode="before")
    @classmethod
    def _sendable_key(cls, key: Any) -> Any:
        if isinstance(key, SecretStr):
            key = key.get_secret_value()
        if isinstance(key, str):
            key = key.strip()  # a key read from a file or a Secret often ends in a newline
            if problem := api_key_problem(key):
                raise ValueError(problem)
        return key or None

    @field_validator("url")
    @classmethod
    def _with_scheme(cls, url: str) -> str:
        url = url.strip().rstrip("/")
        if "://" not in url:
            url = "http://" + url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        return url

    @model_validator(mode="after")
    def _endpoint_path(self) -> EndpointConfig:
        if self.endpoint is not None and not self.endpoint.startswith("/"):
            raise ValueError(f"endpoint must be a path starting with '/', got {self.endpoint!r}")
        return self

    @property
    def request_url(self) -> str:
        return self.url + (self.endpoint or ENDPOINT_PATHS[self.endpoint_type])

    def redacted(self) -> dict[str, Any]:
        """For exports and logs: the API key never leaves the process."""
        out = self.model_dump(mode="json")
        out["api_key"] = "<redacted>" if self.api_key else None
        return out


def header_names(names: list[str]) -> list[str]:
    """The names, if each can name an HTTP header; else a ValueError naming the first that
    cannot."""
    for name in names:
        if not name or not all(c.isascii() and (c.isalnum() or c in "-_") for c in name):
            raise ValueError(f"not a header name: {name!r}")
    return names


def api_key_problem(key: str) -> str | None:
    """Why a key cannot go in an Authorization header, never quoting the key."""
    if key.isascii() and key.isprintable():
        return None
    return (
        "the API key holds a control character or a non-ASCII one (a line break, say): "
        "no HTTP header can carry it; check how it was pasted or read"
    )
