"""When a join turn goes, as AIPerf 0.13 sends it: a turn that waited at its join for children
still running goes the moment they end, its own delay dropped (the delay counts from the turn
before it, long past); one whose children ended first waits its delay after the turn before."""

from __future__ import annotations

from dagfile import conv, turn
from dispatch_harness import Harness


def test_a_join_held_up_by_its_children_goes_as_they_end():
    h = Harness(
        conv("p", turn(spawns=["c"]), turn(delay=1500)),
        conv("c"),
    )
    assert h.sent() == ["p:0"]
    assert h.finish("p:0") == ["c:0"]
    h.advance(0.2)
    assert h.finish("c:0") == ["p:1"]  # not 1.5 s after p:0


def test_a_join_whose_children_ended_first_waits_its_delay():
    h = Harness(
        conv("p", turn(spawns=[{"children": ["c"], "join_at": 2}]), turn(), turn(delay=1500)),
        conv("c"),
    )
    h.sent()
    assert h.finish("p:0") == ["p:1", "c:0"]
    assert h.finish("c:0") == []
    assert h.finish("p:1") == []  # its children are done: it waits its own delay
    assert h.advance(1.499) == []
    assert h.advance(0.001) == ["p:2"]
