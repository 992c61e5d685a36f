"""A directory of sessions read by two processes at once, one per half of its files.

Checking a session is Python-bound (decoding it, splitting its agents), and the machine a
benchmark starts on has its cores idle while it reads, so past `SPLIT_FILES` files a forked
child reads the second half while this process reads the first, and hands back what it found
of each file (small: its id, its counts, its problems; never a session). A child that dies
costs only time: its half is read here. Forking needs Linux (`may_fork`); elsewhere, one pass.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TypeVar

from dagperf.runtime.forks import may_fork

SPLIT_FILES = 64  # below this, forking costs more than it saves
T = TypeVar("T")


def read_each(files: list[Path], read: Callable[[Path], T]) -> list[T]:
    """`read` of each file, in order; the second half by a forked child when it pays."""
    if len(files) < SPLIT_FILES or not may_fork():
        return [read(path) for path in files]
    middle = len(files) // 2
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, files[middle:], read), daemon=True)
    child.start()
    send.close()
    try:
        first = [read(path) for path in files[:middle]]
        try:
            second: list[T] | BaseException = receive.recv()
        except EOFError:  # the child died (killed for memory, say): its half is read here
            second = [read(path) for path in files[middle:]]
    finally:
        child.join()
        receive.close()
    if isinstance(second, BaseException):
        raise second
    return first + second


def _child(send: Connection, files: list[Path], read: Callable[[Path], T]) -> None:
    try:
        send.send([read(path) for path in files])
    except BaseException as e:
        send.send(e)
    finally:
        send.close()
