"""The histories a worker keeps: each kept context serves exactly its readers, then goes."""

from __future__ import annotations

from dagperf.worker.histories import Histories


def turn(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_a_context_serves_its_readers_then_is_dropped():
    h = Histories()
    h.keep(run=1, node=0, messages=turn("root"), readers=3)  # the next turn and two FORK children
    assert [h.read(1, 0) for _ in range(3)] == [turn("root")] * 3
    assert h.read(1, 0) is None and len(h) == 0


def test_runs_and_nodes_are_apart_and_a_run_can_be_forgotten():
    h = Histories()
    h.keep(1, 0, turn("a"), 1)
    h.keep(1, 1, turn("b"), 1)
    h.keep(2, 0, turn("c"), 2)
    assert h.read(2, 0) == turn("c") and len(h) == 3
    h.forget(2)  # the run is over: its unread context goes too
    assert h.read(2, 0) is None and len(h) == 2
    assert (h.read(1, 1), h.read(1, 0)) == (turn("b"), turn("a"))
    h.forget(99)  # a run never seen here is no error
    assert len(h) == 0


def test_a_context_never_kept_here_reads_as_none():
    h = Histories()
    assert h.read(5, 3) is None
    h.keep(5, 2, turn("x"), 1)
    h.clear()
    assert h.read(5, 2) is None and len(h) == 0
