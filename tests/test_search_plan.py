"""The search's method and objectives on their own: a known knee, a rate to a precision, a
sweep, and objectives judged on summaries written by hand."""

from __future__ import annotations

import pytest

from dagperf.search.objectives import parse_objectives
from dagperf.search.plan import SearchPlan
from dagperf.verdict import Verdict


def search(plan: SearchPlan, knee: float) -> list[float]:
    """Run the plan against a server that meets the objectives up to `knee`; the loads tried."""
    while (value := plan.next_value()) is not None:
        plan.record(value, value <= knee)
    return [value for value, _ in plan.tried]


@pytest.mark.parametrize("knee", [1, 2, 3, 7, 8, 9, 33, 63, 64])
def test_a_concurrency_search_finds_the_knee_exactly_within_twelve_steps(knee):
    plan = SearchPlan(low=1, high=64, integer=True, precision=1)
    tried = search(plan, knee)
    assert plan.best == knee and len(tried) <= 12
    assert all(value == int(value) for value in tried)


def test_a_rate_search_ends_within_its_precision_of_the_knee():
    plan = SearchPlan(low=1.0, high=1000.0, integer=False, precision=0.05)
    tried = search(plan, knee=137.0)
    assert plan.best is not None and 137.0 / 1.05 <= plan.best <= 137.0
    assert len(tried) <= 16


def test_the_answer_is_none_when_even_the_lowest_load_fails_and_high_when_all_pass():
    low_fails = SearchPlan(low=2, high=64, integer=True, precision=1)
    assert search(low_fails, knee=1) == [2] and low_fails.best is None
    all_pass = SearchPlan(low=1, high=20, integer=True, precision=1)
    assert search(all_pass, knee=100) == [1, 2, 4, 8, 16, 20] and all_pass.best == 20


def test_a_noisy_pass_above_a_failure_does_not_raise_the_answer():
    plan = SearchPlan(low=1, high=64, integer=True, precision=1)
    for value, ok in [(1, True), (2, True), (4, False), (3, True)]:
        plan.record(value, ok)
    plan.record(8, True)  # a lucky step above the failure at 4
    assert plan.best == 3


def test_a_sweep_tries_each_value_in_order_and_answers_the_highest_that_passed():
    plan = SearchPlan(low=1, high=16, integer=True, precision=1, sweep=[1, 2, 4, 8, 16])
    assert search(plan, knee=5) == [1, 2, 4, 8, 16] and plan.best == 4


@pytest.mark.parametrize(("low", "high", "precision"), [(0, 4, 1), (8, 4, 1), (1, 4, 0)])
def test_impossible_bounds_are_refused(low, high, precision):
    with pytest.raises(ValueError, match="search"):
        SearchPlan(low=low, high=high, integer=True, precision=precision)


def test_objectives_are_read_with_their_direction():
    objectives = parse_objectives(
        "time_to_first_token:p99:500 output_token_throughput_per_user:p50:20 error_rate:max:0.01"
    )
    assert [str(o) for o in objectives] == [
        "time_to_first_token:p99:500", "output_token_throughput_per_user:p50:20",
        "error_rate:max:0.01",
    ]  # fmt: skip
    assert [o.ceiling for o in objectives] == [True, False, True]  # throughput: a floor


def test_an_undecided_step_splits_the_gap_and_leaves_the_answer_a_range():
    """Met at 2, undecided at 4, missed at 8: the search tries both halves (6 first, the wider),
    and, when the steps between stay undecided, answers 2 with a range up to the highest
    undecided load below the lowest miss."""
    plan = SearchPlan(low=1, high=64, integer=True, precision=1)
    for value, verdict in [(1, Verdict.MEETS), (2, Verdict.MEETS), (4, Verdict.UNDECIDED),
                           (8, Verdict.MISSES)]:  # fmt: skip
        assert plan.next_value() == value
        plan.record(value, verdict)
    tried = []
    while (value := plan.next_value()) is not None:
        tried.append(value)
        plan.record(value, Verdict.UNDECIDED if value < 7 else Verdict.MISSES)
    assert tried == [6, 3, 5, 7]
    assert plan.best == 2 and plan.undecided == [3, 4, 5, 6]


def test_undecided_steps_keep_the_bracket_doubling_and_a_lowest_one_gives_no_answer():
    plan = SearchPlan(low=1, high=16, integer=True, precision=1)
    for verdict in (Verdict.MEETS, Verdict.UNDECIDED, Verdict.UNDECIDED):
        plan.record(plan.next_value(), verdict)
    assert plan.next_value() == 8  # doubling past the highest tried, undecided or not
    first_undecided = SearchPlan(low=1, high=16, integer=True, precision=1)
    first_undecided.record(1, Verdict.UNDECIDED)
    assert first_undecided.next_value() is None and first_undecided.best is None


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "at least one objective"),
        ("ttft:p99:500", "unknown metric 'ttft'"),
        ("time_to_first_token:p42:5", "STAT must be one of"),
        ("error_rate:p99:0.1", "STAT must be one of avg, max"),
        ("time_to_first_token:p99:fast", "VALUE must be a number"),
        ("time_to_first_token:p99:-1", "finite number, 0 or more"),
        ("time_to_first_token:500", "expected METRIC:STAT:VALUE"),
    ],
)
def test_bad_objectives_are_named(text, complaint):
    with pytest.raises(ValueError, match=complaint):
        parse_objectives(text)
