"""Export files written whole or not at all: a disk that fills up, or a run killed mid-write,
leaves the previous file or none, never half a JSON document that a parser chokes on."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def whole_or_nothing(path: Path, mode: str = "w", **options: Any) -> Iterator[IO[Any]]:
    """Open a file beside `path` to write; it replaces `path` only once it was written."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open(mode, **options) as f:
            yield f
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
