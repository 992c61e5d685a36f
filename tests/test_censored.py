"""The verdict of an objective on censored observations, on hand-built samples: met only when it
holds whatever the censored values are, missed only when it fails whatever they are, undecided
otherwise, with each boundary hit exactly."""

from __future__ import annotations

import math
import random

import pytest

from dagperf.metrics.censored import (
    MIN_VALUES,
    Censored,
    decide,
    judge,
    order_statistics,
)
from dagperf.metrics.summary import EXACT_LIMIT, Distribution
from dagperf.search.objectives import Objective
from dagperf.verdict import Verdict


def sample(exact=(), at_least=()) -> Censored:
    s = Censored()
    for v in exact:
        s.add(v)
    for v in at_least:
        s.add_at_least(v)
    return s


def reference(n: int, q: float, confidence: float) -> tuple[int, int]:
    """The order statistics' ranks, from the binomial sums written out."""
    cdf = [sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(m + 1))
           for m in range(n + 1)]  # fmt: skip
    upper = next((m + 1 for m in range(n) if cdf[m] >= confidence), n + 1)
    lower = max((m + 1 for m in range(n) if cdf[m] <= 1 - confidence), default=0)
    return lower, upper


@pytest.mark.parametrize("n", [1, 5, 28, 29, 30, 59, 100, 300])
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_order_statistics_are_the_binomial_ones(n, q):
    assert order_statistics(n, q, 0.95) == reference(n, q, 0.95)


P90 = Objective("time_to_first_token", "p90", 100.0)


def test_a_p90_needs_29_values_to_be_met():
    """0.9^29 < 5% <= 0.9^28: the largest of 29 values bounds the p90 with 95% confidence,
    the largest of 28 does not."""
    assert judge(P90, sample([50] * 28)).verdict is Verdict.UNDECIDED
    assert judge(P90, sample([50] * 29)).verdict is Verdict.MEETS


def test_a_value_at_the_objective_meets_it_and_one_above_does_not():
    assert judge(P90, sample([50] * 28 + [100])).verdict is Verdict.MEETS
    above = judge(P90, sample([50] * 28 + [100.001]))
    assert above.verdict is Verdict.UNDECIDED
    assert "across 100" in above.why


def test_a_censored_value_counts_as_anything_at_least_its_wait():
    """29 fast values and one cut request: the cut one could be the slowest of all, and the
    30th smallest of 30 is then unbounded. With enough values beyond it, it no longer matters."""
    assert judge(P90, sample([50] * 29, at_least=[10])).verdict is Verdict.UNDECIDED
    _, upper = order_statistics(100, 0.9, 0.95)
    assert upper == 96  # the 96th smallest of 100 bounds the p90
    assert judge(P90, sample([50] * 96, at_least=[10] * 4)).verdict is Verdict.MEETS
    assert judge(P90, sample([50] * 95, at_least=[10] * 5)).verdict is Verdict.UNDECIDED


def test_a_miss_is_told_from_a_few_values_and_holds_whatever_the_censored_ones_are():
    lower, _ = order_statistics(5, 0.9, 0.95)
    assert lower == 3  # the 3rd smallest of 5 lies below the p90
    assert judge(P90, sample([200] * 5)).verdict is Verdict.MISSES
    assert judge(P90, sample([200] * 2, at_least=[300] * 3)).verdict is Verdict.MISSES
    assert judge(P90, sample([200] * 2, at_least=[50] * 3)).verdict is Verdict.UNDECIDED
    # the 3rd smallest exactly at the objective: not a miss (a ceiling holds at equality)
    assert judge(P90, sample([50, 50, 100, 200, 200])).verdict is Verdict.UNDECIDED
    assert judge(P90, sample([50, 50, 100.001, 200, 200])).verdict is Verdict.MISSES


def test_requests_still_in_flight_are_values_that_could_be_anything():
    assert judge(P90, sample([50] * 96), unknown=4).verdict is Verdict.MEETS
    assert judge(P90, sample([50] * 96), unknown=5).verdict is Verdict.UNDECIDED
    # in flight, they might also be 0: five slow values are a miss among 7, not among 55
    assert judge(P90, sample([200] * 5), unknown=2).verdict is Verdict.MISSES
    assert judge(P90, sample([200] * 5), unknown=50).verdict is Verdict.UNDECIDED


def test_a_floor_is_judged_the_other_way_round():
    floor = Objective("output_token_throughput_per_user", "p10", 20.0)
    assert not floor.ceiling
    assert judge(floor, sample([30] * 29)).verdict is Verdict.MEETS
    assert judge(floor, sample([30] * 28)).verdict is Verdict.UNDECIDED
    assert judge(floor, sample([30] * 28 + [20])).verdict is Verdict.MEETS  # at it: holds
    assert judge(floor, sample([10] * 5)).verdict is Verdict.MISSES
    # a cut request's throughput is unknown (at least 0): it can only lower a floor's bound
    assert judge(floor, sample([30] * 29, at_least=[0])).verdict is Verdict.UNDECIDED


def test_an_average_or_an_extreme_needs_enough_values_and_no_open_censored_one():
    avg = Objective("request_latency", "avg", 100.0)
    assert judge(avg, sample([50] * (MIN_VALUES - 1))).verdict is Verdict.UNDECIDED
    assert judge(avg, sample([50] * MIN_VALUES)).verdict is Verdict.MEETS
    assert judge(avg, sample([50] * MIN_VALUES, at_least=[1])).verdict is Verdict.UNDECIDED
    # the lowest the average can be is already above: missed whatever the censored ones are
    assert judge(avg, sample([150] * MIN_VALUES, at_least=[1])).verdict is Verdict.MISSES
    top = Objective("request_latency", "max", 100.0)
    assert judge(top, sample([50] * MIN_VALUES, at_least=[101])).verdict is Verdict.MISSES
    assert judge(top, sample([50] * MIN_VALUES, at_least=[99])).verdict is Verdict.UNDECIDED


def test_nothing_measured_is_undecided_never_met():
    judgement = judge(P90, Censored())
    assert judgement.verdict is Verdict.UNDECIDED and judgement.why == "nothing was measured"
    only_cut = judge(P90, sample(at_least=[5000] * 40))
    assert only_cut.verdict is Verdict.MISSES  # all waited 5 s, and the objective is 100 ms
    assert only_cut.figure is None and only_cut.high == math.inf


def test_the_figure_is_the_sample_s_when_censoring_leaves_it_one_value():
    """Nine values and one cut request: the sample's p50 does not depend on the cut one when
    it waited longer than the middle values; its p90 does."""
    s = sample(range(1, 10), at_least=[20])
    assert s.sample_bounds("p50") == (5.5, 5.5)
    low, high = s.sample_bounds("p90")
    assert (low, high) == (pytest.approx(9 + 0.1 * 11), math.inf)
    judgement = judge(Objective("request_latency", "p50", 100.0), s)
    assert judgement.figure == 5.5


def test_decide_at_its_edges():
    assert decide(True, 1.0, 0.5, 1.0) is Verdict.MEETS
    assert decide(True, 1.0, 1.0, 2.0) is Verdict.UNDECIDED
    assert decide(True, 1.0, 1.5, 2.0) is Verdict.MISSES
    assert decide(False, 1.0, 1.0, 2.0) is Verdict.MEETS
    assert decide(False, 1.0, 0.5, 1.0) is Verdict.UNDECIDED
    assert decide(False, 1.0, 0.5, 0.9) is Verdict.MISSES


@pytest.mark.parametrize("count", [10, EXACT_LIMIT + 100])
def test_a_distribution_gives_its_values_by_rank(count):
    values = [random.Random(count).uniform(1, 1000) for _ in range(count)]
    d = Distribution()
    for v in values:
        d.add(v)
    ordered = sorted(values)
    for index in (0, count // 3, count - 1):
        assert d.ranked(index) == pytest.approx(ordered[index], rel=2e-3)
    with pytest.raises(IndexError):
        d.ranked(count)
