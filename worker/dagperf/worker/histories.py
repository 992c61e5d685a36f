"""The conversation histories a worker keeps for the turns that continue them.

A node whose reply later nodes build on (the next turn of its conversation, or its FORK
children) leaves its context here, with the number of nodes that will read it; each read counts
one down and the last drops it, so memory follows what is still to be sent, not the run. The
scheduler routes those readers to this worker (a FORK tree shares one), and tells it to forget a
tree run once the run is over, whatever is left unread.
"""

from __future__ import annotations

from typing import Any

Messages = list[dict[str, Any]]


class _Held:
    __slots__ = ("messages", "readers")

    def __init__(self, messages: Messages, readers: int):
        self.messages = messages
        self.readers = readers


class Histories:
    def __init__(self) -> None:
        self._runs: dict[int, dict[int, _Held]] = {}

    def keep(self, run: int, node: int, messages: Messages, readers: int) -> None:
        """Node `node` of tree run `run` left `messages`, which `readers` later nodes continue."""
        self._runs.setdefault(run, {})[node] = _Held(messages, readers)

    def read(self, run: int, node: int) -> Messages | None:
        """The context node `node` left, for one of its readers; None when it is not here (never
        kept on this worker, or forgotten)."""
        held = self._runs.get(run)
        if held is None or (entry := held.get(node)) is None:
            return None
        entry.readers -= 1
        if not entry.readers:
            del held[node]
        return entry.messages

    def forget(self, run: int) -> None:
        self._runs.pop(run, None)

    def clear(self) -> None:
        self._runs.clear()

    def __len__(self) -> int:
        """Contexts held, over every run."""
        return sum(len(held) for held in self._runs.values())
