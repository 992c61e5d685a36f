"""A line now and then while a large dataset file is read, so a long start says what it does.

A thread looks at the file's position every `EVERY_S` seconds and logs it against the file's
size (for a gzip-compressed file, the compressed position against the compressed size, the same
fraction); the reader itself is not slowed by a single check. A read shorter than `EVERY_S`
says nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import BinaryIO

log = logging.getLogger("dagperf.dataset")
EVERY_S = 5.0


@contextlib.contextmanager
def reading_progress(f: BinaryIO, source: str) -> Iterator[None]:
    size = os.fstat(f.fileno()).st_size
    done = threading.Event()
    every_s = EVERY_S

    def report() -> None:
        started = time.monotonic()
        while not done.wait(every_s):
            try:
                position = f.tell()
            except (OSError, ValueError):  # closed under us: the read is over
                return
            share, elapsed = 100 * position // max(size, 1), time.monotonic() - started
            log.info("reading %s: %d%% of %.0f MB after %.0f s", source, share, size / 1e6, elapsed)

    thread = threading.Thread(target=report, name="dataset-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
