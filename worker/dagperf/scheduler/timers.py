"""The scheduler's timers, on the event loop: the dispatcher's next deadline, the heartbeat, and
the wait for the results of cancelled requests.

The dispatcher says when it next needs a tick (a delay elapsed, a root arrives, the duration
ends); after every event the scheduler asks again, and the timer moves only when the answer
changes, so a busy run does not re-create a timer per result (`DeadlineTimer`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dagperf.scheduler.options import SchedulerOptions


class DeadlineTimer:
    def __init__(self, fire: Callable[[], None]):
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None
        self._due: float | None = None

    def set(self, deadline: float | None) -> None:
        """Fire at `deadline` (the loop's clock), or never (None)."""
        if self._handle is not None:
            if deadline == self._due:
                return
            self._handle.cancel()
            self._handle = None
        if deadline is not None:
            # (uvloop's handle for a time already past cannot say when it was due)
            self._due = deadline
            self._handle = asyncio.get_running_loop().call_at(deadline, self._on_time)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _on_time(self) -> None:
        self._handle = None
        self._fire()


class Timers:
    def __init__(
        self,
        options: SchedulerOptions,
        tick: Callable[[], None],
        beat: Callable[[], None],
        abandon: Callable[[], None],
    ):
        """`tick`: at the dispatcher's deadline; `beat`: every heartbeat; `abandon`: when the
        results of cancelled requests had `cancel_timeout_s` to come back."""
        self.deadline = DeadlineTimer(tick)
        self._options = options
        self._beat = beat
        self._abandon = abandon
        self._beating: asyncio.TimerHandle | None = None
        self._waiting: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Beat one heartbeat from now, and every one after."""
        loop = asyncio.get_running_loop()
        self._beating = loop.call_later(self._options.heartbeat_s, self._on_beat)

    def cancelled(self) -> None:
        """Requests were cancelled: wait for their results, unless a wait is on already."""
        if self._waiting is None:
            loop = asyncio.get_running_loop()
            self._waiting = loop.call_later(self._options.cancel_timeout_s, self._on_wait_over)

    def cancel(self) -> None:
        self.deadline.cancel()
        for handle in (self._beating, self._waiting):
            if handle is not None:
                handle.cancel()

    def _on_beat(self) -> None:
        self._beat()
        self.start()

    def _on_wait_over(self) -> None:
        self._waiting = None
        self._abandon()
