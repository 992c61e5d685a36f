"""A worker's armed credits and result gate (dagperf.worker.armed), without sockets or HTTP."""

from __future__ import annotations

from dagperf.transport.protocol import Credit, Result
from dagperf.worker.armed import ArmedCredits


def credit(id: int, after: int = -1, then: tuple[Credit, ...] = ()) -> Credit:
    return Credit(id, 0, id, -1, 0, b"[]", {}, f"req-{id}", "c", "k", then, True, after)


def result(id: int) -> Result:
    return Result(id, 0, None, 0, {})


def chain() -> tuple[Credit, Credit, Credit, Credit]:
    """1, with 2 armed under it, 3 under 2, and 4 under 1 too (flat, depth first)."""
    two, three, four = credit(2, after=1), credit(3, after=2), credit(4, after=1)
    return credit(1, then=(two, three, four)), two, three, four


def test_an_armed_chain_starts_link_by_link_as_each_succeeds():
    a = ArmedCredits()
    root, two, three, four = chain()
    a.receive(root)
    assert a.succeeded(1) == [two, four]
    a.receive(two)  # the worker starts it
    assert a.succeeded(2) == [three]
    assert a.succeeded(3) == []


def test_a_disarmed_credit_and_everything_under_it_never_start():
    a = ArmedCredits()
    root, two, _, four = chain()
    a.receive(root)
    a.disarm([2])
    assert a.succeeded(1) == [four]
    a.receive(two)  # were it started anyway, nothing is armed under it any more
    assert a.succeeded(2) == []


def test_a_failure_drops_everything_armed_under_it():
    a = ArmedCredits()
    a.receive(chain()[0])
    a.drop(1)
    assert a.succeeded(1) == []


def test_results_wait_until_the_armed_requests_started_before_them_are_out():
    a = ArmedCredits()
    a.receive(chain()[0])
    a.succeeded(1)  # 2 and 4 start, not yet on the wire
    assert a.unsent(2) and a.unsent(4)
    assert a.add_result(result(1)) is False and a.take_results() == []
    assert a.written(2) is False  # 4 is still not out
    assert a.written(4) is True and not a.unsent(4)
    assert a.take_results() == [result(1)]
    assert a.written(4) is False  # again is harmless


def test_requests_started_later_do_not_hold_back_an_earlier_batch():
    a = ArmedCredits()
    assert a.add_result(result(7)) is True  # nothing armed is in flight: send now
    a.receive(chain()[0])
    a.succeeded(1)  # started after the batch began
    assert a.add_result(result(8)) is False  # joins the batch, whose send is already due
    assert a.take_results() == [result(7), result(8)]
    assert a.add_result(result(9)) is False  # a new batch waits for 2 and 4
    a.clear()
    assert a.take_results() == [] and not a.unsent(2)
