"""Distributions: bounds, order, shape and determinism of the samplers, and their validation."""

from __future__ import annotations

import random
import statistics
from collections import Counter

import pytest
from pydantic import BaseModel, ValidationError

from dagperf.synthetic.distributions import (
    Count,
    Duration,
    Gamma,
    Poisson,
    Stair,
    Uniform,
    Zipf,
    count_sampler,
    duration_sampler,
)

DRAWS = 20_000


class Fields(BaseModel):
    """Stand-in for a config model: one count field and one duration field."""

    count: Count | None = None
    seconds: Duration | None = None


def counts(spec: dict, n: int = DRAWS, seed: int = 1) -> list[int]:
    draw = count_sampler(Fields.model_validate({"count": spec}).count, random.Random(seed))
    return [draw() for _ in range(n)]


def seconds(spec: dict, n: int = DRAWS, seed: int = 1) -> list[float]:
    draw = duration_sampler(Fields.model_validate({"seconds": spec}).seconds, random.Random(seed))
    return [draw() for _ in range(n)]


def test_fixed_gives_its_value():
    assert set(counts({"type": "fixed", "value": 3}, 50)) == {3}
    assert set(seconds({"type": "fixed", "value": 2}, 50)) == {2.0}


def test_uniform_counts_are_integers_covering_the_bounds():
    values = counts({"type": "uniform", "min": 2, "max": 5})
    assert all(type(v) is int for v in values)
    assert set(values) == {2, 3, 4, 5}


def test_uniform_seconds_are_reals_within_the_bounds():
    values = seconds({"type": "uniform", "min": 1, "max": 3})
    assert all(1.0 <= v <= 3.0 for v in values)
    assert len(set(values)) > DRAWS // 2  # reals, not the integers 1..3
    assert statistics.fmean(values) == pytest.approx(2.0, rel=0.02)


def test_stair_steps_in_order_and_cycles():
    values = counts({"type": "stair", "values": [1, 5, 3], "repeat": 2}, 14)
    assert values == [1, 1, 5, 5, 3, 3, 1, 1, 5, 5, 3, 3, 1, 1]
    assert seconds({"type": "stair", "values": [0.5, 0]}, 4) == [0.5, 0.0, 0.5, 0.0]


def test_zipf_stays_in_bounds_and_favors_min():
    values = counts({"type": "zipf", "min": 3, "max": 7, "theta": 1.0})
    seen = Counter(values)
    assert set(seen) == {3, 4, 5, 6, 7}
    frequencies = [seen[k] for k in range(3, 8)]
    assert frequencies == sorted(frequencies, reverse=True)
    harmonic = sum(1 / k for k in range(1, 6))
    assert seen[3] / DRAWS == pytest.approx(1 / harmonic, abs=0.02)  # P(min) = 1 / H_5


def test_zipf_skew_grows_with_theta():
    mild = Counter(counts({"type": "zipf", "min": 1, "max": 10, "theta": 0.5}))
    steep = Counter(counts({"type": "zipf", "min": 1, "max": 10, "theta": 2.0}))
    assert steep[1] > mild[1] * 1.5


def test_poisson_gaps_have_mean_one_over_the_rate():
    values = seconds({"type": "poisson", "arrival_rate": 4.0})
    assert min(values) >= 0
    assert statistics.fmean(values) == pytest.approx(0.25, rel=0.03)
    assert statistics.stdev(values) == pytest.approx(0.25, rel=0.05)  # exponential: sd = mean


def test_gamma_has_mean_shape_times_scale():
    values = seconds({"type": "gamma", "shape": 2.0, "scale": 0.5})
    assert min(values) >= 0
    assert statistics.fmean(values) == pytest.approx(1.0, rel=0.03)
    assert statistics.variance(values) == pytest.approx(0.5, rel=0.08)  # shape * scale ** 2


def test_samplers_use_only_the_generator_given():
    random.seed(123)
    before = random.getstate()
    first = seconds({"type": "gamma", "shape": 1, "scale": 1}, 100, seed=9)
    counts({"type": "zipf", "min": 1, "max": 9}, 100)
    assert random.getstate() == before
    assert seconds({"type": "gamma", "shape": 1, "scale": 1}, 100, seed=9) == first
    assert seconds({"type": "gamma", "shape": 1, "scale": 1}, 100, seed=10) != first


@pytest.mark.parametrize(
    ("data", "at", "words"),
    [
        ({"count": {"type": "uniform", "min": 4, "max": 2}}, "max", "below min"),
        ({"count": {"type": "zipf", "min": 4, "max": 2}}, "max", "below min"),
        ({"count": {"type": "fixed", "value": 0}}, "value", "at least 1"),
        ({"count": {"type": "fixed", "value": 2.5}}, "value", "whole number"),
        ({"count": {"type": "stair", "values": [2, 0]}}, "values.1", "at least 1"),
        ({"count": {"type": "uniform", "min": 0, "max": 2}}, "min", "at least 1"),
        ({"count": {"type": "poisson", "arrival_rate": 1}}, "type", "cannot draw a count"),
        ({"count": {"type": "gamma", "shape": 1, "scale": 1}}, "type", "cannot draw a count"),
        ({"seconds": {"type": "zipf", "min": 1, "max": 2}}, "type", "cannot draw a duration"),
        ({"seconds": {"type": "fixed", "value": -0.5}}, "value", "at least 0"),
        ({"seconds": {"type": "stair", "values": [1, -1]}}, "values.1", "at least 0"),
    ],
)
def test_kind_checks_name_the_parameter(data, at, words):
    with pytest.raises(ValidationError) as caught:
        Fields.model_validate(data)
    [err] = caught.value.errors()
    assert err["ctx"]["at"] == at
    assert words in err["msg"]


@pytest.mark.parametrize(
    ("model", "data", "field"),
    [
        (Poisson, {"arrival_rate": 0}, "arrival_rate"),
        (Gamma, {"shape": -1, "scale": 1}, "shape"),
        (Gamma, {"shape": 1, "scale": 0}, "scale"),
        (Zipf, {"min": 1, "max": 3, "theta": 0}, "theta"),
        (Stair, {"values": []}, "values"),
        (Stair, {"values": [1], "repeat": 0}, "repeat"),
        (Uniform, {"min": True, "max": 2}, "min"),
        (Uniform, {"min": "1", "max": 2}, "min"),
        (Poisson, {"arrival_rate": float("inf")}, "arrival_rate"),
        (Poisson, {"arrival_rate": 1, "rate": 2}, "rate"),
    ],
)
def test_parameters_are_validated(model, data, field):
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    assert [e["loc"][0] for e in caught.value.errors()] == [field]


def test_zipf_span_is_bounded():
    with pytest.raises(ValidationError, match="at most"):
        Zipf(min=1, max=10**7)
