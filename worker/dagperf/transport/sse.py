"""Server-sent events, parsed incrementally from whatever byte chunks the network delivers.

Follows the WHATWG framing: lines end in LF, CRLF or CR; a blank line ends an event; `data:`
lines accumulate (joined by LF), `event:` names the event, lines starting with `:` are comments
(keep-alives), other fields are ignored. An event split across reads is held until it is whole,
so callers see each event once, stamped with the read that completed it.
"""

from __future__ import annotations

from itertools import repeat
from typing import NamedTuple, cast


class Event(NamedTuple):
    data: bytes
    name: bytes  # b"" unless the server sent an `event:` line


_DATA, _NO_NAME, _EVENT = repeat(b"data: "), repeat(b""), repeat(Event)  # (never exhausted)


class SSEParser:
    __slots__ = ("_buffer", "_data", "_name", "_pending_cr")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._name = b""
        self._pending_cr = False  # a chunk ended in CR: a following LF belongs to it

    def feed(self, chunk: bytes) -> list[Event]:
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._pending_cr = chunk.endswith(b"\r")
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        text = self._buffer + chunk
        if self._data or self._name:
            return self._lines(text, [])
        # Between events, a run of whole one-line `data:` events (a server's usual output, many
        # to a read when tokens come fast) is cut out at its blank lines; anything else in the
        # run, and whatever follows it, goes line by line.
        head, blank, tail = text.rpartition(b"\n\n")
        if not blank:
            return self._lines(tail, [])
        blocks = head.split(b"\n\n")
        # The usual run, every block one `data: ` line, is told apart and cut into events in C:
        # a Python call per event was most of a token stream's parsing.
        if head.count(b"\n") == 2 * len(blocks) - 2 and all(map(bytes.startswith, blocks, _DATA)):
            pairs = zip([block[6:] for block in blocks], _NO_NAME, strict=False)
            return self._lines(tail, cast(list[Event], list(map(tuple.__new__, _EVENT, pairs))))
        events: list[Event] = []
        for block in blocks:
            if not block.startswith(b"data:") or b"\n" in block:
                if block:
                    return self._lines(text, [])
                continue  # more blank lines: no event
            value = block[5:]
            events.append(Event(value[1:] if value.startswith(b" ") else value, b""))
        return self._lines(tail, events)

    def _lines(self, text: bytes, events: list[Event]) -> list[Event]:
        """Adds the events of `text`'s whole lines to `events`; its unfinished tail waits."""
        lines = text.split(b"\n")
        self._buffer = lines.pop()  # the unfinished tail, if any
        for line in lines:
            if not line:
                if self._data:
                    events.append(Event(b"\n".join(self._data), self._name))
                self._data = []
                self._name = b""
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
            elif line.startswith(b"event:"):
                self._name = line[6:].strip()
            # comments (":") and other fields carry nothing for us
        return events

    def close(self) -> list[Event]:
        """Events left when the stream ends without a final blank line."""
        return self.feed(b"\n\n") if (self._buffer or self._data) else []
