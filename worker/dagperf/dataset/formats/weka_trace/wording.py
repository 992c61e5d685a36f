"""What is wrong with a trace document, each problem named by the line its part starts on.

The structs refuse a document in one pass but say only the first thing wrong; the models then
read it again and say everything, each error by its path in the document (`requests.3.in`),
which `json_places` turns into a line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import ValidationError

from dagperf.dataset.formats.agent_traces.schema import UNION_TAGS, TraceModel
from dagperf.dataset.json_places import line_of
from dagperf.dataset.loader import Problem

_SHAPE = "expected a JSON object: one recorded session per file (id, block_size, requests, ...)"


def problems_of(
    data: bytes, source: str, said: str, path: Sequence[str | int] | None = None
) -> list[Problem]:
    """The problems of a document the structs refused (`said`: their first complaint), or of
    the part at `path` of one they read (`said`: what is wrong there)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        return [Problem(source, line, f"invalid JSON: not UTF-8 text (byte 0x{data[e.start]:02x})")]
    if path is not None:
        return [Problem(source, line_of(text, path), f"{_dotted(path)}: {said}")]
    try:
        document = json.loads(text)
    except ValueError as e:
        return [
            Problem(source, getattr(e, "lineno", None), f"invalid JSON: {getattr(e, 'msg', e)}")
        ]
    except RecursionError:
        return [Problem(source, None, "nested too deeply to read")]
    if not isinstance(document, dict):
        return [Problem(source, 1, _SHAPE)]
    try:
        TraceModel.model_validate(document)
    except ValidationError as e:
        found = []
        for err in e.errors(include_url=False):
            where = [p for i, p in enumerate(err["loc"]) if not _tag(err["loc"], i)]
            message = err["msg"].removeprefix("Value error, ")
            found.append(Problem(source, line_of(text, where), f"{_dotted(where)}: {message}"))
        return found
    return [Problem(source, None, said)]  # (the models take what the structs refuse)


def _tag(loc: Sequence[object], i: int) -> bool:
    return loc[i] in UNION_TAGS and i > 0 and isinstance(loc[i - 1], int)


def _dotted(path: Sequence[str | int]) -> str:
    return ".".join(str(part) for part in path) or "(document)"
