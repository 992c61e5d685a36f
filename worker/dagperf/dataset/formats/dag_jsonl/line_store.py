"""Where a loaded dataset's lines are read back from when a tree that holds them is built.

A large file is not kept in memory: each conversation is held as the offset and length of its
line, and read again (one `pread`) when a run reaches it, so the scheduler's memory follows the
trees in flight, not the file. Offsets into a file that changed after it was loaded would lie,
so every read first compares the file's size and modification time with what they were when the
loader opened it (a file replaced by a new one is no risk: the open descriptor still reads the
old); the caller also checks that the line read names the session it should. A stream that is
not a plain file (gzip-compressed, a ConfigMap's bytes, lines given in memory) keeps its blocks
in memory instead, read back the same way.
"""

from __future__ import annotations

import bisect
import io
import os
import stat
import weakref
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

import numpy as np
from numpy.typing import NDArray

from dagperf.dataset.loader import DatasetError, Problem

Offsets = NDArray[np.int64]
READ_BYTES = 1 << 20  # a sequential pass's reads


class Spans(NamedTuple):
    """Lines by their (start, end) in the stream, and the few held as other bytes by number."""

    starts: list[Offsets]
    ends: list[Offsets]
    kept: dict[int, bytes]


class FileChanged(DatasetError):
    """The file under a running dataset changed since it was loaded."""


class LineStore:
    """Each conversation's line by its number: spans added in file order, plus the few lines
    kept as bytes (a line the loader rewrote)."""

    def __init__(self, source: str, stream: BinaryIO | None):
        self.source = source
        self._fd: int | None = None
        self._signature: tuple[int, int] = (0, 0)
        self._blocks: list[bytes] = []  # when the stream is not a plain file
        self._block_starts: list[int] = []
        self._starts: list[Offsets] = []
        self._ends: list[Offsets] = []
        self._kept: dict[int, bytes] = {}
        self._count = 0
        if stream is not None and (fd := _plain_file(stream)) is not None:
            self._fd = os.dup(fd)
            self._signature = _signature(self._fd)
            weakref.finalize(self, os.close, self._fd)

    @property
    def fd(self) -> int | None:
        """The file's descriptor, when its lines are read back from it."""
        return self._fd

    def __len__(self) -> int:
        return self._count

    def add_block(
        self,
        block: bytes,
        position: int,
        spans: tuple[Offsets, Offsets],
        kept: dict[int, bytes] | None = None,
    ) -> None:
        """Lines of `block` (which starts at `position` of the stream), by their (starts, ends)
        in it; `kept` holds, by their index among these, lines to read as other bytes (lines
        the loader rewrote)."""
        if self._fd is None:
            self._blocks.append(block)
            self._block_starts.append(position)
        starts, ends = spans
        self._starts.append(starts + position)
        self._ends.append(ends + position)
        for index, line in (kept or {}).items():
            self._kept[self._count + index] = line
        self._count += len(starts)

    def spans(self) -> Spans:
        """The lines so far, for another store to take on (`extend`), each list joined into
        one array: one array pickles at memory speed, hundreds of a block's each do not."""
        self.seal()
        return Spans(self._starts, self._ends, self._kept)

    def extend(self, spans: Spans) -> None:
        """Lines another store found in a later part of the same file."""
        for index, line in spans.kept.items():
            self._kept[self._count + index] = line
        self._starts += spans.starts
        self._ends += spans.ends
        self._count += sum(len(s) for s in spans.starts)

    def seal(self) -> None:
        """Every line added: the spans joined into one array each."""
        self._starts = [np.concatenate(self._starts)] if self._starts else []
        self._ends = [np.concatenate(self._ends)] if self._ends else []

    def line(self, number: int) -> bytes:
        if (kept := self._kept.get(number)) is not None:
            return kept
        start, end = int(self._starts[0][number]), int(self._ends[0][number])
        if self._fd is None:
            b = bisect.bisect_right(self._block_starts, start) - 1
            at = self._block_starts[b]
            return self._blocks[b][start - at : end - at]
        if _signature(self._fd) != self._signature:
            raise self.changed(None, "its size or modification time differs")
        return os.pread(self._fd, end - start, start)

    def lines(self) -> Iterator[bytes]:
        """Every line in number order, a plain file's read a megabyte at a time: a pass over
        the whole file (inputs.json's) would otherwise cost two system calls a line."""
        if self._fd is None or not self._count:
            yield from map(self.line, range(self._count))
            return
        starts, ends = self._starts[0], self._ends[0]
        first = 0
        while first < self._count:
            # the lines that end within READ_BYTES of this one's start, at least this one
            last = max(first + 1, int(np.searchsorted(ends, starts[first] + READ_BYTES, "right")))
            at = int(starts[first])
            if _signature(self._fd) != self._signature:
                raise self.changed(None, "its size or modification time differs")
            block = os.pread(self._fd, int(ends[last - 1]) - at, at)
            spans = zip(starts[first:last].tolist(), ends[first:last].tolist(), strict=True)
            for number, (start, end) in enumerate(spans, first):
                kept = self._kept.get(number) if self._kept else None
                yield block[start - at : end - at] if kept is None else kept
            first = last

    def changed(self, line: int | None, how: str) -> FileChanged:
        return FileChanged(
            [
                Problem(
                    self.source,
                    line,
                    f"the file changed after it was loaded ({how}); a dataset must stay as it "
                    "is while a run reads it",
                )
            ]
        )


def _plain_file(stream: BinaryIO) -> int | None:
    """The descriptor of a stream that reads a regular file as it is stored, else None (a
    GzipFile has its file's descriptor, but its offsets are not the file's)."""
    if not isinstance(stream, io.BufferedReader | io.FileIO):
        return None
    fd = stream.fileno()
    return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None


def _signature(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_size, st.st_mtime_ns
