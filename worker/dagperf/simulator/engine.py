"""When each token of a reply is ready: on a fixed clock, or from an engine's decode steps.

`Timed` is the simulator's default: the first token at its due time, then one every `itl_ms`,
whatever else is being served.

`Engine` behaves like a continuous-batching server (`--sim-slots N`): N sequence slots; a request
waits in line, first come first served, for a free slot before its prefill starts, so past N
requests at once the first token of the later ones waits for earlier replies to end. Sequences
in slots are decoded together, one token each per step. A step takes `itl_ms` plus
`batch_itl_ms` for each other sequence decoding, plus the prefill of the sequences admitted at
its start, whose first tokens it yields: their `ttft_ms` once (one pass) and their uncached
prompt tokens each (a prefill holds up the batch's decoding, as in an engine without chunked
prefill). Alone, a reply is timed as `Timed` times it. A slot frees when its sequence's last
token is out, or when its client goes away.

Both answer one question for the writer of a reply: how many of its tokens are out by now.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class Timed:
    """Tokens on a fixed clock: the first at `first_due` (the loop's time), then one every
    `itl_s`. Deadlines are absolute, so sleep overshoot never accumulates."""

    def __init__(self, first_due: float, itl_s: float):
        self._first = first_due
        self._itl = itl_s

    async def ready(self, want: int, total: int) -> int:
        """Wait until `want` tokens are out; return how many are (every one due by then)."""
        loop = asyncio.get_running_loop()
        delay = self._first + (want - 1) * self._itl - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        now = loop.time()
        out = want
        while out < total and self._first + out * self._itl <= now:
            out += 1
        return out

    def close(self) -> None:
        pass


class Sequence:
    """One reply in an engine: waiting for a slot, then decoding a token per step."""

    __slots__ = ("_changed", "admitted_at", "first_token_at", "length", "out", "pass_s", "tokens_s")

    def __init__(self, length: int, pass_s: float, tokens_s: float):
        self.length = length
        self.pass_s = pass_s  # the prefill's fixed cost, shared with those admitted with it
        self.tokens_s = tokens_s  # its own prompt's share
        self.out = 0  # tokens emitted so far
        self.admitted_at: float | None = None
        self.first_token_at: float | None = None
        self._changed = asyncio.Event()

    async def ready(self, want: int, total: int) -> int:
        while self.out < want:
            self._changed.clear()
            await self._changed.wait()
        return min(self.out, total)

    def emit(self, now: float) -> None:
        self.out += 1
        if self.first_token_at is None:
            self.first_token_at = now
        self._changed.set()

    @property
    def done(self) -> bool:
        return self.out >= self.length


class Engine:
    """Sequence slots decoded in steps; its loop runs while there is work."""

    def __init__(
        self,
        slots: int,
        itl_ms: float,
        batch_itl_ms: float,
        gauges: Callable[[int, int], None] = lambda running, waiting: None,
    ):
        self.slots = slots
        self._itl_s = itl_ms / 1000
        self._batch_s = batch_itl_ms / 1000
        self._gauges = gauges  # (running, waiting), after every change
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._loop: asyncio.Task[None] | None = None

    def submit(self, length: int, pass_s: float, tokens_s: float) -> Sequence:
        """A reply of `length` tokens; its prefill, once it has a slot, takes `pass_s` (shared
        with the sequences admitted with it) plus `tokens_s`."""
        sequence = Sequence(max(length, 1), pass_s, tokens_s)
        self._waiting.append(sequence)
        self._report()
        if self._loop is None or self._loop.done():
            self._loop = asyncio.get_running_loop().create_task(self._run())
        return sequence

    def leave(self, sequence: Sequence) -> None:
        """Its client went away: free its slot, or its place in line."""
        if sequence in self._running:
            self._running.remove(sequence)
        elif sequence in self._waiting:
            self._waiting.remove(sequence)
        self._report()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while self._waiting or self._running:
            decoding = len(self._running)
            admitted: list[Sequence] = []
            while self._waiting and len(self._running) < self.slots:
                sequence = self._waiting.popleft()
                sequence.admitted_at = due
                admitted.append(sequence)
                self._running.append(sequence)
            self._report()
            if decoding:
                due += self._itl_s + self._batch_s * (decoding - 1)
            if admitted:
                due += max(s.pass_s for s in admitted) + sum(s.tokens_s for s in admitted)
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # behind: catch up, but let the writers run
            now = loop.time()  # deadlines stay absolute: a late step does not delay the next
            for sequence in list(self._running):
                sequence.emit(now)
                if sequence.done:
                    self._running.remove(sequence)
        self._report()

    def _report(self) -> None:
        self._gauges(len(self._running), len(self._waiting))
