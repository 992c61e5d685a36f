"""A worker's armed credits, and the gate its results wait at: the part of a worker with no I/O.

A credit can carry credits armed under it (`Credit.then`, each naming the credit it follows):
this worker starts them the moment that credit succeeds, without a round trip to the scheduler,
unless the scheduler disarmed them first. When a credit fails, or an armed credit is disarmed,
everything armed under it, down the chain, is dropped: it will never start.

Results wait until every armed request started before them is on the wire: the scheduler then
never sees a result before the requests that result's success released, which its counting of
requests in flight relies on. Requests started later do not hold an earlier batch back, so a busy
worker still reports as soon as those are out.
"""

from __future__ import annotations

from dagperf.transport.protocol import Credit, Result


class ArmedCredits:
    def __init__(self) -> None:
        self._after: dict[int, list[Credit]] = {}  # credit -> the credits armed under it
        self._armed: set[int] = set()  # armed, not yet started, not disarmed
        self._unsent: set[int] = set()  # armed and started, request not yet on the wire
        self._awaited: set[int] = set()  # of those, the ones the waiting results wait for
        self._results: list[Result] = []

    def receive(self, credit: Credit) -> None:
        """A credit arrived (or an armed one started): hold what is armed under it."""
        for armed in credit.then:
            self._after.setdefault(armed.after, []).append(armed)
        self._armed.update(armed.id for armed in self._after.get(credit.id, ()))

    def disarm(self, credits: list[int]) -> None:
        self._armed.difference_update(credits)

    def succeeded(self, credit: int) -> list[Credit]:
        """`credit` succeeded: the credits armed under it that start now (their requests count
        as unsent until `written`); the disarmed ones go, with what is armed under them."""
        starting = []
        for armed in self._after.pop(credit, ()):
            if armed.id in self._armed:
                self._armed.discard(armed.id)
                self._unsent.add(armed.id)
                starting.append(armed)
            else:
                self.drop(armed.id)
        return starting

    def drop(self, credit: int) -> None:
        """Nothing armed under `credit` will start (it failed, or was never started)."""
        stack = [credit]
        while stack:
            for armed in self._after.pop(stack.pop(), ()):
                self._armed.discard(armed.id)
                stack.append(armed.id)

    def unsent(self, credit: int) -> bool:
        """Whether `credit` is an armed request not yet on the wire."""
        return credit in self._unsent

    def written(self, credit: int) -> bool:
        """An armed request is on the wire (or ended without getting there; again is harmless).
        True when that opens the gate for the results waiting."""
        self._unsent.discard(credit)
        if credit in self._awaited:
            self._awaited.discard(credit)
            return not self._awaited and bool(self._results)
        return False

    def add_result(self, result: Result) -> bool:
        """A result to report. True when it may go at once."""
        first = not self._results
        if first:
            self._awaited = set(self._unsent)  # those started so far, not later ones
        self._results.append(result)
        return first and not self._awaited  # else a send is already due, or the gate is shut

    def take_results(self) -> list[Result]:
        """The results that may go now (none while the gate is shut)."""
        if self._awaited or not self._results:
            return []
        results, self._results = self._results, []
        return results

    def clear(self) -> None:
        for held in (self._after, self._armed, self._unsent, self._awaited):
            held.clear()
        self._results.clear()
