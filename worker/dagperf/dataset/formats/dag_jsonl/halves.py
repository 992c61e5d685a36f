"""A large dag_jsonl file read by two processes at once, one per half.

Reading is Python-bound (decoding, then filing every line), and the machine a benchmark starts
on has its cores idle while it reads, so a file past `SPLIT_BYTES` is cut at the line nearest
its middle: a forked child reads the second half while this process reads the first, and hands
back what it found (`file_pass.Part`: session ids, numbers, spans, edges; never the prompts) to
be merged in file order. Its session ids come first, filed here while it numbers its edges. A
child that dies (killed for memory, say) costs only time: its half is read again here (ids
filed from it taken back). Forking needs Linux; elsewhere the file is read in one pass.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
from multiprocessing.context import BaseContext
from typing import BinaryIO

from dagperf.dataset.formats.dag_jsonl.file_pass import Chunks, FilePass, Part
from dagperf.dataset.formats.dag_jsonl.line_store import LineStore
from dagperf.dataset.loader import DatasetError
from dagperf.runtime.forks import may_fork

SPLIT_BYTES = 64 << 20  # below this, forking costs more than it saves
_LOOK = 1 << 16


def read_file(stream: BinaryIO, store: LineStore, source: str) -> FilePass:
    """The pass over a whole stream, in two processes when it is a large plain file."""
    middle = _middle(store) if may_fork() else None
    if middle is None:
        return _read(FilePass(source, store), Chunks(stream))
    context = multiprocessing.get_context("fork")
    handover = _Handover(context)
    child = context.Process(
        target=_second_half, args=(handover, stream, source, middle), daemon=True
    )
    child.start()
    handover.started()
    first = Chunks(stream, 0, middle)
    try:
        reading = _read(FilePass(source, store), first)
    except BaseException:  # this half failed (past the problem cap, say): the other is moot
        child.kill()
        child.join()
        handover.close()
        raise
    reading.edges.number(reading.ids)  # while the child finishes its half
    ahead: tuple[list[str], bool] | None = None
    try:
        ahead = reading.file_ahead(handover.get())  # filed here while the child packs the rest
        part: Part | None = pickle.loads(handover.get())
    except EOFError:  # the child died: its half is read here
        part = None
    finally:
        child.join()
        handover.close()
    if part is None:
        if ahead is not None and ahead[1]:
            reading.unfile(ahead[0])
        ahead, part = None, _part_from(stream, source, middle)
    reading.merge(part, first.next_line - 1, ahead)
    return reading


class _Handover:
    """What the child found, handed to this process: each payload written into memory both
    hold (a memfd), so the child never waits on a pipe this process is not yet reading (a
    29 MB part took 0.1 s through one); the pipe says where each lies, or carries the error."""

    def __init__(self, context: BaseContext) -> None:
        self._receive, self._send = context.Pipe(duplex=False)
        self._memory = os.memfd_create("dagperf-second-half")
        self._end = 0

    def started(self) -> None:
        """In this process, once the child holds its end of the pipe."""
        self._send.close()

    def put(self, payload: bytes) -> None:
        """In the child: the next payload."""
        view, at = memoryview(payload), self._end
        while view:
            written = os.pwrite(self._memory, view, at)
            view, at = view[written:], at + written
        self._send.send((self._end, len(payload)))
        self._end = at

    def fail(self, error: BaseException) -> None:
        """In the child: the error instead of what was to come."""
        self._send.send(error)

    def get(self) -> bytes:
        """The child's next payload; raises its error, or EOFError when it died first."""
        message = self._receive.recv()
        if isinstance(message, BaseException):
            raise message
        at, size = message
        payload = os.pread(self._memory, size, at)
        if len(payload) != size:
            raise EOFError("the child's payload is cut short")
        return payload

    def close(self) -> None:
        self._receive.close()
        os.close(self._memory)


def _read(reading: FilePass, chunks: Chunks) -> FilePass:
    for chunk in chunks:
        if not reading.take_block(chunk):
            reading.take_lines(chunk)
    return reading


def _second_half(handover: _Handover, stream: BinaryIO, source: str, middle: int) -> None:
    """In the child: the pass from `middle` to the end, handed over as its session ids and
    then a Part without them (or the error). The parent files the ids while this process
    numbers its edges: a second core at work in what was the read's single-core tail."""
    try:
        # Opened anew, not dup'ed: a duplicate would share (and move) the parent's position.
        with open(f"/proc/self/fd/{stream.fileno()}", "rb") as own:
            reading = _pass_from(own, source, middle)
        handover.put(reading.packed_sids())
        handover.put(pickle.dumps(reading.part(with_sids=False), protocol=5))
    except BaseException as e:
        handover.fail(e)


def _pass_from(stream: BinaryIO, source: str, middle: int) -> FilePass:
    """The pass from `middle` to the end of a stream (stopped at the problem cap, with its
    problems so far: the merge stops at it again)."""
    stream.seek(middle)
    reading = FilePass(source, LineStore(source, stream))
    with contextlib.suppress(DatasetError):
        _read(reading, Chunks(stream, middle))
    return reading


def _part_from(stream: BinaryIO, source: str, middle: int) -> Part:
    """The pass from `middle` to the end of a stream, as a Part to merge."""
    return _pass_from(stream, source, middle).part()


def _middle(store: LineStore) -> int | None:
    """Where the line after the file's middle starts, for a plain file past SPLIT_BYTES."""
    fd = store.fd
    if fd is None:
        return None
    size = os.fstat(fd).st_size
    if size < SPLIT_BYTES:
        return None
    at = size // 2
    while at < size:
        window = os.pread(fd, _LOOK, at)
        if (newline := window.find(b"\n")) >= 0:
            return at + newline + 1 if at + newline + 1 < size else None
        at += len(window)
    return None
