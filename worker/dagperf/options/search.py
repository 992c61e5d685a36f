"""A search for the highest load that meets service-level objectives (`dagperf search`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from dagperf.search.objectives import parse_objectives
from dagperf.search.plan import DEFAULT_MAX_STEP_S, PARAMETERS
from dagperf.vocabulary.catalog import ERROR_RATE, TIME_TO_FIRST_TOKEN
from dagperf.vocabulary.config import MAX_SECONDS
from dagperf.vocabulary.options import Option

RATE_PRECISION = 0.05  # a rate's search stops within this share of the answer, by default
if TYPE_CHECKING:
    Parameter = str
else:
    Parameter = Literal[tuple(PARAMETERS)]


def _load_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or any(not math.isfinite(v) for v in values):
        raise ValueError(f"expected loads above 0, got {text!r}")
    return values


class SearchOptions(BaseModel):
    """Which load is varied, over which range, and what every step must meet."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slo: Annotated[
        list[str], Option(metavar='"METRIC:STAT:VALUE ..."', parse=str.split, render=" ".join)
    ] = Field(
        min_length=1,
        description=f'Objectives every step is judged on, e.g. "{TIME_TO_FIRST_TOKEN.name}:p99:500 '
        f'{ERROR_RATE.name}:max:0.01" (ms for times; STAT avg, min, max or p1..p99).',
    )
    search_parameter: Annotated[Parameter, Option(benchmark="parameter")] = Field(
        default="concurrency",
        description="The load varied (session_rate is roots per second).",
    )
    search_min: Annotated[float, Option(benchmark="min", metavar="V")] = Field(
        default=1.0, gt=0, allow_inf_nan=False, description="The lowest load tried, first."
    )
    search_max: Annotated[float, Option(benchmark="max", metavar="V")] = Field(
        default=256.0, gt=0, allow_inf_nan=False, description="The highest load tried."
    )
    search_precision: Annotated[float | None, Option(benchmark="precision", metavar="P")] = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Stop when the answer is within this of the lowest load that missed: a share "
        f"for a rate (default {RATE_PRECISION}), a step for a concurrency (default 1).",
    )
    sweep: Annotated[
        list[float] | None,
        Option(metavar="V,V,...", parse=_load_list, render=lambda v: ",".join(f"{x:g}" for x in v)),
    ] = Field(default=None, description="Try exactly these loads, in order, instead of searching.")
    max_step_duration: Annotated[float, Option(metavar="S")] = Field(
        default=DEFAULT_MAX_STEP_S,
        gt=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="The longest a step measures: each runs at least --benchmark-duration (default "
        "0), then until every objective is met or missed (--confidence-level for percentiles), at "
        "most this long, and says undecided if it still cannot (ignored under --request-count or "
        "--num-conversations, which a step runs as given).",
    )

    @field_validator("slo")
    @classmethod
    def _objectives(cls, slo: list[str]) -> list[str]:
        parse_objectives(" ".join(slo))  # its ValueError names the objective at fault
        return slo

    @field_validator("search_max")
    @classmethod
    def _range(cls, search_max: float, info: ValidationInfo) -> float:
        if search_max < info.data.get("search_min", 0):
            raise ValueError(
                f"{search_max:g} is below the lowest load, {info.data['search_min']:g}"
            )
        return search_max

    @field_validator("sweep")
    @classmethod
    def _loads(cls, sweep: list[float] | None, info: ValidationInfo) -> list[float] | None:
        if any(v <= 0 for v in sweep or ()):
            raise ValueError(f"loads above 0, got {sweep}")
        if info.data.get("search_parameter") == "concurrency" and any(
            v != int(v) for v in sweep or ()
        ):
            raise ValueError(f"a concurrency is a whole number, got {sweep}")
        return sweep

    @property
    def integer(self) -> bool:
        return self.search_parameter == "concurrency"

    @property
    def precision(self) -> float:
        return self.search_precision or (1.0 if self.integer else RATE_PRECISION)
