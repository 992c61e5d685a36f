"""What a run is asked to do to its endpoint: the load, when it stops, and the checks every way
in shares (header names, a sendable API key).

One definition for every way in: the `dagperf profile` and `dagperf scheduler` flags fill
`LoadConfig`, the operator fills it from a Benchmark's `spec.load`, and the exports record it.
Field names follow `aiperf profile`'s flags, which users already know. The endpoint itself is
`dagperf.apis.endpoint_config.EndpointConfig`: its type is one of the APIs' table.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dagperf.vocabulary.options import Option

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
    request_rate: Annotated[float | None, Option(aliases=("--session-rate",))] = Field(
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
    benchmark_duration: Annotated[float | None, Option(benchmark="duration_seconds")] = Field(
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
    fail_fast: Annotated[bool, Option(env="DAGPERF_DAG_FAIL_FAST")] = Field(
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
