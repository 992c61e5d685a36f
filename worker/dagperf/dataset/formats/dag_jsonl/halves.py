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
import sys
import threading
from multiprocessing.connection import Connection
from typing import BinaryIO

from dagperf.dataset.formats.dag_jsonl.file_pass import Chunks, FilePass, Part
from dagperf.dataset.formats.dag_jsonl.line_store import LineStore
from dagperf.dataset.loader import DatasetError

SPLIT_BYTES = 64 << 20  # below this, forking costs more than it saves
_LOOK = 1 << 16


def read_file(stream: BinaryIO, store: LineStore, source: str) -> FilePass:
    """The pass over a whole stream, in two processes when it is a large plain file."""
    middle = _middle(store) if _forkable() else None
    if middle is None:
        return _read(FilePass(source, store), Chunks(stream))
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_second_half, args=(send, stream, source, middle), daemon=True)
    child.start()
    send.close()
    first = Chunks(stream, 0, middle)
    try:
        reading = _read(FilePass(source, store), first)
    except BaseException:  # this half failed (past the problem cap, say): the other is moot
        child.kill()
        child.join()
        receive.close()
        raise
    reading.edges.number(reading.ids)  # while the child finishes its half
    ahead: tuple[list[str], bool] | None = None
    try:
        outcome = receive.recv()  # its session ids first: filed here while it packs the rest
        if isinstance(outcome, bytes):
            ahead = reading.file_ahead(outcome)
            outcome = receive.recv()
    except EOFError:  # the child died: its half is read here
        outcome = None
    finally:
        child.join()
        receive.close()
    if isinstance(outcome, BaseException):
        raise outcome
    if outcome is None:
        if ahead is not None and ahead[1]:
            reading.unfile(ahead[0])
        ahead, outcome = None, _part_from(stream, source, middle)
    reading.merge(outcome, first.next_line - 1, ahead)
    return reading


def _forkable() -> bool:
    """Whether this process may fork a reader: on Linux, from the main thread of a process
    running no threads but this read's progress line (a fork copies only the calling thread,
    and a lock another thread held stays held in the child: the operator, for one, reads its
    files from worker threads and keeps to one process)."""
    return (
        sys.platform == "linux"
        and not multiprocessing.current_process().daemon
        and threading.current_thread() is threading.main_thread()
        and threading.active_count() <= 2
    )


def _read(reading: FilePass, chunks: Chunks) -> FilePass:
    for chunk in chunks:
        if not reading.take_block(chunk):
            reading.take_lines(chunk)
    return reading


def _second_half(send: Connection, stream: BinaryIO, source: str, middle: int) -> None:
    """In the child: the pass from `middle` to the end, sent as its session ids and then a
    Part without them (or the error). The parent files the ids while this process numbers
    its edges: a second core at work in what was the read's single-core tail."""
    try:
        # Opened anew, not dup'ed: a duplicate would share (and move) the parent's position.
        with open(f"/proc/self/fd/{stream.fileno()}", "rb") as own:
            reading = _pass_from(own, source, middle)
        send.send(reading.packed_sids())
        send.send(reading.part(with_sids=False))
    except BaseException as e:
        send.send(e)
    finally:
        send.close()


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
