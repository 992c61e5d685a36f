"""When a run fails, which requests are good, and how runs are repeated and cut into windows."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dagperf.verdict import DEFAULT_MAX_ERROR_RATE
from dagperf.vocabulary.catalog import (
    INTER_TOKEN_LATENCY,
    OBJECTIVE_IS_CEILING,
    TIME_TO_FIRST_TOKEN,
)
from dagperf.vocabulary.catalog import OUTPUT_TOKEN_THROUGHPUT_PER_USER as PER_USER
from dagperf.vocabulary.config import MAX_SECONDS
from dagperf.vocabulary.options import Option


def goodput_objectives(text: str) -> dict[str, float]:
    """ "METRIC:VALUE ..." as --goodput takes them."""
    out: dict[str, float] = {}
    for item in text.split():
        name, _, raw = item.partition(":")
        try:
            out[name] = float(raw)
        except ValueError:
            raise ValueError(f"expected METRIC:VALUE with a number, got {item!r}") from None
    return out


class VerdictOptions(BaseModel):
    """When the run counts as failed, and which requests count as good."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_error_rate: Annotated[float, Option(metavar="FRACTION")] = Field(
        default=DEFAULT_MAX_ERROR_RATE,
        ge=0,
        le=1,
        description="Fail the run (exit code 3) when the endpoint failed more than this share of "
        "the requests it answered or failed (requests the run cut short are not errors); 1.0 "
        "fails only a run where every request failed.",
    )
    goodput: Annotated[
        dict[str, float],
        Option(
            metavar='"METRIC:VALUE ..."',
            parse=goodput_objectives,
            render=lambda slo: " ".join(f"{m}:{v}" for m, v in sorted(slo.items())),
        ),
    ] = Field(
        default_factory=dict,
        description=f'Service-level objectives, e.g. "{TIME_TO_FIRST_TOKEN.name}:100 '
        f'{INTER_TOKEN_LATENCY.name}:10" (ms; a floor for {PER_USER.name}): goodput counts the '
        "requests meeting all of them.",
    )

    @field_validator("goodput")
    @classmethod
    def _known_metrics(cls, goodput: dict[str, float]) -> dict[str, float]:
        for name in goodput:
            if name not in OBJECTIVE_IS_CEILING:
                known = ", ".join(OBJECTIVE_IS_CEILING)
                raise ValueError(f"{name!r} is not a metric an objective can name ({known})")
        return goodput


class RunsOptions(BaseModel):
    """Repeated runs and the confidence of what they report, and windows of each run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_profile_runs: Annotated[int, Option(metavar="N")] = Field(
        default=1,
        ge=1,
        description="Run N times (the same workload and seed; the warm-up once) and report each "
        "figure's mean and confidence interval, flagging figures whose runs disagree.",
    )
    confidence_level: Annotated[float, Option(metavar="LEVEL")] = Field(
        default=0.95,
        gt=0,
        lt=1,
        description="Of the repeated runs' intervals, and of a search's percentile verdicts.",
    )
    slice_duration: Annotated[float | None, Option(metavar="S")] = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="Also export the run in windows of S seconds "
        "(profile_export_aiperf_timeslices.json and .csv): each window's requests, throughput "
        "and metric statistics.",
    )
