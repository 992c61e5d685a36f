"""One asyncio timer kept at the dispatcher's next deadline.

The dispatcher says when it next needs a tick (a delay elapsed, a root arrives, the duration
ends); after every event the scheduler asks again, and the timer moves only when the answer
changes, so a busy run does not re-create a timer per result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


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
