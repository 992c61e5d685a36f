"""Per tree run, what its results said, held while it is in flight and handed on once whole.

A run retires (the dispatcher is done with it) before or after its last results are recorded
(a one-request run always before); its items go to `close` once both have happened, or at the
end of the run for what never was. So memory follows the runs in flight, not the length of the
run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from dagperf.engine import NodeState, Phase, TreeRun

T = TypeVar("T")


class PerRun(Generic[T]):
    def __init__(self, close: Callable[[TreeRun, list[T], bool], None]):
        """`close(run, items, retired)`: `retired` False only for runs still open at the end."""
        self._close = close
        self._open: dict[int, tuple[TreeRun, list[T]]] = {}
        self._retired: dict[int, int] = {}  # retired run -> how many results it has in all

    def add(self, run: TreeRun, item: T) -> None:
        """An item of a profiling run (a warm-up's are not kept)."""
        if run.phase != Phase.PROFILING:
            return
        entry = self._open.get(run.id)
        if entry is None:
            entry = self._open[run.id] = (run, [])
        entry[1].append(item)
        expected = self._retired.get(run.id)
        if expected is not None and len(entry[1]) >= expected:
            self._done(run.id, True)

    def retire(self, run: TreeRun) -> None:
        """The dispatcher is done with the run; its last results may still be on their way to
        the records (the scheduler sends what a result releases before it records it)."""
        if run.phase != Phase.PROFILING:
            return
        expected = _results(run)  # its nodes' states are final now
        entry = self._open.get(run.id)
        if entry is None:
            if not expected:
                return  # nothing of it was sent: nothing to hand on
            self._open[run.id] = entry = (run, [])
        self._retired[run.id] = expected
        if len(entry[1]) >= expected:
            self._done(run.id, True)

    @property
    def pending(self) -> int:
        """Runs the dispatcher is done with whose results are still on their way."""
        return len(self._retired)

    def finish(self) -> None:
        for run_id in list(self._open):
            self._done(run_id, run_id in self._retired)

    def _done(self, run_id: int, retired: bool) -> None:
        run, items = self._open.pop(run_id)
        self._retired.pop(run_id, None)
        self._close(run, items, retired)


def _results(run: TreeRun) -> int:
    """How many results the run's requests give: one per node that ended sent."""
    nodes = run.nodes  # a bytearray of states: counted in C
    return nodes.count(NodeState.OK) + nodes.count(NodeState.FAILED)
