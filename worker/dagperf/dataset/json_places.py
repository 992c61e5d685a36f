"""Where things lie in a JSON document, for formats whose file is one document rather than JSON
lines (inputs.json, an agent trace): a problem found in the parsed value is named by the line
its part of the text starts on. The text must be valid JSON; values are skipped by the standard
decoder, so finding a place costs a pass over what comes before it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def members(text: str, pos: int) -> Iterator[tuple[str, tuple[int, int]]]:
    """The keys of the JSON object at `pos`, each with where its key and value start."""
    pos = after_space(text, pos + 1)
    while not text.startswith("}", pos):
        key, after = _DECODER.raw_decode(text, pos)
        value = after_space(text, after_space(text, after) + 1)  # past the colon
        yield key, (pos, value)
        pos = after_space(text, _DECODER.raw_decode(text, value)[1])
        pos = after_space(text, pos + 1) if text.startswith(",", pos) else pos


def items(text: str, pos: int) -> Iterator[tuple[int, int]]:
    """Where each item of the JSON array at `pos` starts and ends."""
    pos = after_space(text, pos + 1)
    while not text.startswith("]", pos):
        end = _DECODER.raw_decode(text, pos)[1]
        yield pos, end
        pos = after_space(text, end)
        pos = after_space(text, pos + 1) if text.startswith(",", pos) else pos


def after_space(text: str, pos: int) -> int:
    found = _SPACE.match(text, pos)
    return found.end() if found else pos


def line_of(text: str, path: Sequence[str | int]) -> int:
    """The line of the deepest part of `path` (keys and indices from the document's top) that
    the document holds: a missing key is named by its object's line."""
    pos = after_space(text, 0)
    for part in path:
        found = None
        if isinstance(part, str) and text.startswith("{", pos):
            found = next((value for key, (_, value) in members(text, pos) if key == part), None)
        elif isinstance(part, int) and text.startswith("[", pos):
            found = next(
                (start for i, (start, _) in enumerate(items(text, pos)) if i == part), None
            )
        if found is None:
            break
        pos = found
    return text.count("\n", 0, pos) + 1
