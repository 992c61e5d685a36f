"""Distributions a session config draws its numbers from: counts and durations.

Each distribution is a small pydantic model picked by its `type`, and turns into a sampler: a
function of no arguments that draws the next value from a `random.Random` given to it. Samplers
never touch the global `random` or numpy's state, so a seed alone decides every draw. A `stair`
sampler keeps its place between draws: it is a staircase over the whole run, not per session.

A field of a config is either a count (turns, layers, widths, fan-in, token lengths: whole
numbers of at least 1) or a duration (think times, seconds, at least 0); `Count` and `Duration`
are the annotated types for the two, and each takes only the distributions that make sense for
it. `uniform` draws integers for a count and reals for a duration, from the same model. The
checks that depend on the kind (whole numbers, the floor) run on the field, so a message names
the field and the parameter (`fan_in_generator.value`), not a union member.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from dagperf.dataset.limits import MAX_PROMPT_TOKENS, MAX_WAIT_S

ZIPF_MAX_SPAN = 1_000_000  # values a zipf may range over: its weights are tabled once


def _number(value: Any) -> int | float:
    """An int stays an int (a count must be whole), a float must be finite; bools are refused."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise PydanticCustomError("number", "expected a finite number, got {got}", {"got": repr(value)})


MAX_COUNT = MAX_PROMPT_TOKENS  # a count drawn is at most a prompt's length in tokens
Number = Annotated[int | float, PlainValidator(_number, json_schema_input_type=float)]
Positive = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]


class _Distribution(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    def outcomes(self) -> Iterator[tuple[str, int | float]]:
        """The parameters that are themselves possible values, named as in the config; a field
        checks these against its kind (a whole count of at least 1, seconds of at least 0)."""
        return iter(())


class Fixed(_Distribution):
    """The same value every draw."""

    type: Literal["fixed"] = "fixed"
    value: Number = Field(description="The value drawn every time.")

    def outcomes(self) -> Iterator[tuple[str, int | float]]:
        yield "value", self.value

    def sampler(self, rng: random.Random, whole: bool) -> Callable[[], float]:
        value = self.value
        return lambda: value


class Uniform(_Distribution):
    """Any value from min to max, both included, equally likely: integers for a count."""

    type: Literal["uniform"] = "uniform"
    min: Number = Field(description="The smallest value.")
    max: Number = Field(description="The largest value, at least min.")

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.min > self.max:
            raise _problem("max", f"max ({self.max}) is below min ({self.min})")
        return self

    def outcomes(self) -> Iterator[tuple[str, int | float]]:
        yield "min", self.min
        yield "max", self.max

    def sampler(self, rng: random.Random, whole: bool) -> Callable[[], float]:
        low, high = self.min, self.max
        if whole:
            return lambda: rng.randint(int(low), int(high))
        return lambda: rng.uniform(low, high)


class Zipf(_Distribution):
    """Integers from min to max with P(k) proportional to 1 / (k - min + 1) ** theta: min is the
    most likely, and a larger theta makes it more so (a few long sessions among many short)."""

    type: Literal["zipf"] = "zipf"
    min: int = Field(description="The smallest and most likely value.")
    max: int = Field(description="The largest value, at least min.")
    theta: Positive = Field(default=1.0, description="The skew: larger favors min more.")

    @model_validator(mode="after")
    def _ordered(self) -> Zipf:
        if self.min > self.max:
            raise _problem("max", f"max ({self.max}) is below min ({self.min})")
        if self.max - self.min >= ZIPF_MAX_SPAN:
            raise _problem("max", f"a zipf spans at most {ZIPF_MAX_SPAN:,} values")
        return self

    def outcomes(self) -> Iterator[tuple[str, int | float]]:
        yield "min", self.min
        yield "max", self.max

    def sampler(self, rng: random.Random, whole: bool) -> Callable[[], float]:
        values = range(self.min, self.max + 1)
        weights = itertools.accumulate(1 / (rank**self.theta) for rank in range(1, len(values) + 1))
        cumulative = list(weights)
        return lambda: rng.choices(values, cum_weights=cumulative)[0]


class Stair(_Distribution):
    """Each value `repeat` times in the order given, then again from the first: a deterministic
    staircase (2, 2, 4, 4, 8, 8, 2, ...) for sweeping one parameter across a run."""

    type: Literal["stair"] = "stair"
    values: list[Number] = Field(min_length=1, description="The steps, in order.")
    repeat: int = Field(default=1, ge=1, description="Draws per step before the next.")

    def outcomes(self) -> Iterator[tuple[str, int | float]]:
        for i, value in enumerate(self.values):
            yield f"values.{i}", value

    def sampler(self, rng: random.Random, whole: bool) -> Callable[[], float]:
        steps = itertools.cycle([v for v in self.values for _ in range(self.repeat)])
        return lambda: next(steps)


class Poisson(_Distribution):
    """The gaps of a Poisson process: exponential, with mean 1 / arrival_rate seconds."""

    type: Literal["poisson"] = "poisson"
    arrival_rate: Positive = Field(description="Events per second; the mean gap is its inverse.")

    def sampler(self, rng: random.Random, whole: bool) -> Callable[[], float]:
        rate = self.arrival_rate
        return lambda: rng.expovariate(rate)


class Gamma(_Distribution):
    """Gamma-distributed seconds, mean shape * scale: burstier (shape < 1) or more regular
    (shape > 1) than a Poisson process's gaps."""

    type: Literal["gamma"] = "gamma"
    shape: Positive = Field(description="The shape k.")
    scale: Positive = Field(description="The scale theta, in seconds.")

    def sampler(self, rng: random.Random, whole: bool) -> Callable[[], float]:
        shape, scale = self.shape, self.scale
        return lambda: rng.gammavariate(shape, scale)


CountDistribution = Fixed | Uniform | Zipf | Stair
DurationDistribution = Fixed | Uniform | Poisson | Gamma | Stair
COUNT_TYPES = ("fixed", "uniform", "zipf", "stair")
DURATION_TYPES = ("fixed", "uniform", "poisson", "gamma", "stair")
ALL_TYPES = ("fixed", "uniform", "zipf", "stair", "poisson", "gamma")


def count_sampler(dist: CountDistribution, rng: random.Random) -> Callable[[], int]:
    """Draws of a count field; its model has checked that every outcome is a whole number."""
    return dist.sampler(rng, whole=True)  # type: ignore[return-value]


def duration_sampler(dist: DurationDistribution, rng: random.Random) -> Callable[[], float]:
    draw = dist.sampler(rng, whole=False)
    return lambda: float(draw())


def _problem(at: str, message: str) -> PydanticCustomError:
    """An error about one parameter: `at` is appended to the field's path when reported, since
    pydantic places the errors of a validator at the field, not at the parameter."""
    return PydanticCustomError("distribution", message, {"at": at})


def _kind_check(allowed: tuple[str, ...], what: str) -> Callable[[Any], Any]:
    """Refuses a distribution that cannot draw this kind of value before the union tries it, so
    the message says why (pydantic's own would only list the tags)."""

    def check(data: Any) -> Any:
        tag = data.get("type") if isinstance(data, dict) else getattr(data, "type", None)
        if isinstance(tag, str) and tag in ALL_TYPES and tag not in allowed:
            raise PydanticCustomError(
                "distribution_kind",
                "'{tag}' cannot draw {what}: use one of {allowed}",
                {"tag": tag, "what": what, "allowed": ", ".join(allowed), "at": "type"},
            )
        return data

    return check


def _whole_counts(dist: CountDistribution) -> CountDistribution:
    for at, value in dist.outcomes():
        if not isinstance(value, int) or value < 1:
            raise _problem(at, f"a count must be a whole number of at least 1, got {value!r}")
        if value > MAX_COUNT:
            raise _problem(at, f"a count must be at most {MAX_COUNT:,}, got {value!r}")
    return dist


def _non_negative(dist: DurationDistribution) -> DurationDistribution:
    for at, value in dist.outcomes():
        if value < 0:
            raise _problem(at, f"seconds must be at least 0, got {value!r}")
        if value > MAX_WAIT_S:
            raise _problem(at, f"seconds must be at most {MAX_WAIT_S:,.0f} (a day), got {value!r}")
    return dist


Count = Annotated[
    CountDistribution,
    Field(discriminator="type"),
    BeforeValidator(_kind_check(COUNT_TYPES, "a count (a whole number)")),
    AfterValidator(_whole_counts),
]
Duration = Annotated[
    DurationDistribution,
    Field(discriminator="type"),
    BeforeValidator(_kind_check(DURATION_TYPES, "a duration in seconds")),
    AfterValidator(_non_negative),
]
