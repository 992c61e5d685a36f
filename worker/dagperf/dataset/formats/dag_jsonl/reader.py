"""Read a dag_jsonl file into a validated dataset, or refuse it with every problem at once.

The pass over the file (`file_pass`, in two processes for a large file: `halves`) keeps of
each line where it lies, its number and turn count, and the branches as numbered edges; the
whole-file rules run over those, and the dataset a run gets reads each conversation back from
the file when a tree that holds it is built.
"""

from __future__ import annotations

import io
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import msgspec
import numpy as np
from numpy.typing import NDArray

from dagperf.dataset.formats.dag_jsonl.edges import Edges
from dagperf.dataset.formats.dag_jsonl.halves import read_file
from dagperf.dataset.formats.dag_jsonl.line_store import LineStore
from dagperf.dataset.formats.dag_jsonl.lines import (
    Conversation,
    Interned,
    conversation,
    payloads,
    sendable,
)
from dagperf.dataset.formats.dag_jsonl.records import PlainSendable
from dagperf.dataset.loader import load_file, parse_stream
from dagperf.dataset.specs import Payload
from dagperf.runtime.gcpause import gc_paused


@dataclass(frozen=True)
class DagLines:
    """Each conversation's line by session id, read back when a tree that holds it is built."""

    ids: dict[str, int]  # each session's conversation number, in file order
    line_numbers: array[int]  # by conversation number
    store: LineStore
    plain: bool  # no line sets its conversation's own fields: read back as plain records

    def line_of(self, sid: str) -> int:
        return self.line_numbers[self.ids[sid]]

    def conversation(self, sid: str, intern: Interned) -> Conversation:
        """The conversation as sent: a FileChanged error when the line the file holds there
        is no longer the one loaded."""
        number = self.ids[sid]
        return conversation(self._record(sid, number, self.store.line(number)), intern)

    def payloads(self, intern: Interned) -> Iterator[tuple[str, tuple[Payload, ...]]]:
        """Every conversation's turns as sent, in file order, read in one sequential pass."""
        for (sid, number), line in zip(self.ids.items(), self.store.lines(), strict=True):
            yield sid, payloads(self._record(sid, number, line), intern)

    def _record(self, sid: str, number: int, line: bytes) -> PlainSendable:
        try:
            record = sendable(line, self.plain)
        except (msgspec.ValidationError, msgspec.DecodeError):
            record = None
        if record is None or record.session_id != sid:
            at = self.line_numbers[number]
            raise self.store.changed(at, f"line {at} no longer holds session '{sid}'")
        return record


@dataclass(frozen=True)
class DagDataset:
    """A validated dag_jsonl file: what a run must know of it before it starts, and its lines
    to read back as it goes."""

    source: str
    lines: DagLines
    turns: array[int]  # turn count, by conversation number
    edges: Edges
    models: frozenset[str | None]
    root_numbers: NDArray[np.int64]  # the conversations no other starts, in file order
    roots: list[str]

    @property
    def ids(self) -> dict[str, int]:
        return self.lines.ids

    def line_of(self, sid: str) -> int:
        return self.lines.line_of(sid)


def load_dag_jsonl(path: str | Path) -> DagDataset:
    return load_file(path, read_dag_jsonl)


def parse_dag_jsonl(stream: BinaryIO, source: str) -> DagDataset:
    return parse_stream(stream, source, read_dag_jsonl)


def read_dag_jsonl(lines: Iterable[bytes] | BinaryIO, source: str) -> DagDataset:
    """Validate dag_jsonl content, a binary stream or byte lines; `source` names it in
    messages. A stream of a plain file is read back by offset when a run reaches a line."""
    if isinstance(lines, io.IOBase):
        stream: BinaryIO = lines  # type: ignore[assignment]
    else:
        stream = io.BytesIO(b"\n".join(line.removesuffix(b"\n") for line in lines))
    with gc_paused():
        reading = read_file(stream, LineStore(source, stream), source)
        edges, sids = reading.check()
    referenced = np.zeros(len(sids), bool)
    referenced[edges.child] = True
    roots = np.flatnonzero(~referenced)
    plain = not reading.noted.own_fields
    kept = DagLines(reading.ids, reading.line_numbers, reading.store, plain)
    models = frozenset(reading.models)
    return DagDataset(
        source, kept, reading.turns, edges, models, roots, [sids[i] for i in roots.tolist()]
    )
